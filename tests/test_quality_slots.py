"""The quality benchmark's run slots go by priority, also at the moments a part's next run is about to queue: when a
run has just freed its slot, and when the parts start together."""

import threading
import time

from benchmarks.quality.runs import PrioritySlots

GRACE = 2.0
LATE = 0.3  # how long after the slot frees (or the parts start) the higher-priority run queues: well inside GRACE


def waiter(slots, priority, order):
    """A thread that takes a slot with `priority`, notes it in `order` and frees it at once."""

    def take():
        slots.acquire(priority)
        order.append(priority)
        slots.release(priority)

    thread = threading.Thread(target=take)
    thread.start()
    return thread


def queued(slots, count):
    """Waits until `count` runs wait for a slot."""
    deadline = time.monotonic() + 5
    while len(slots.waiting) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(slots.waiting) == count


def test_the_follow_up_of_a_finished_run_goes_before_a_lower_priority_run_that_was_waiting():
    slots, order = PrioritySlots(1, grace=GRACE), []
    slots.acquire(2)
    later = waiter(slots, 3, order)
    queued(slots, 1)
    slots.release(2)
    time.sleep(LATE)
    follow_up = waiter(slots, 2, order)
    for thread in (later, follow_up):
        thread.join(timeout=10)
    assert order == [2, 3]


def test_a_higher_priority_run_waiting_when_a_slot_frees_takes_it_at_once():
    slots, order = PrioritySlots(1, grace=60.0), []
    slots.acquire(3)
    first = waiter(slots, 2, order)
    queued(slots, 1)
    start = time.monotonic()
    slots.release(3)
    first.join(timeout=10)
    assert order == [2]
    assert time.monotonic() - start < 5  # not held back for the grace


def test_parts_that_start_together_queue_by_priority_however_they_arrive():
    slots, order = PrioritySlots(1, grace=GRACE), []
    slots.hold()
    low = waiter(slots, 5, order)
    queued(slots, 1)
    time.sleep(LATE)
    high = waiter(slots, 1, order)
    for thread in (low, high):
        thread.join(timeout=10)
    assert order == [1, 5]


def test_a_lower_priority_run_starts_once_the_grace_is_over():
    slots, order = PrioritySlots(1, grace=0.2), []
    slots.acquire(2)
    later = waiter(slots, 3, order)
    queued(slots, 1)
    slots.release(2)
    later.join(timeout=10)
    assert order == [3]
