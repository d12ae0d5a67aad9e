"""The quality benchmark's run slots go by priority, also at the moments a part's next run is about to queue: when a
run has just freed its slot (kept for the freeing thread's next run), and when the parts start together."""

import threading
import time

from benchmarks.quality.runs import PrioritySlots

GRACE = 2.0
LATE = 0.3  # how long after the slot frees (or the parts start) the higher-priority run queues: well inside GRACE


def waiter(slots, priority, order):
    """A thread that takes a slot with `priority`, notes its priority in `order` and frees it at once."""

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


def freed_with_a_waiter(slots, order, freed, waiting):
    """Takes a slot with priority `freed`, lets a run of priority `waiting` queue for it, and frees it; the waiter."""
    slots.acquire(freed)
    thread = waiter(slots, waiting, order)
    queued(slots, 1)
    slots.release(freed)
    return thread


def with_a_late_arrival(slots, order, waiting, priority):
    """Lets a run of `priority` queue LATE after `waiting` did, and waits for both to take their slot."""
    time.sleep(LATE)
    late = waiter(slots, priority, order)
    for thread in (waiting, late):
        thread.join(timeout=10)


def follow_up(slots, order, waiting, priority):
    """The freeing thread's next run, LATE after its slot freed: takes a slot with `priority` and notes "follow-up"."""
    time.sleep(LATE)
    slots.acquire(priority)
    order.append("follow-up")
    slots.release(priority)
    waiting.join(timeout=10)


def test_the_follow_up_of_a_finished_run_goes_before_a_lower_priority_run_that_was_waiting():
    slots, order = PrioritySlots(1, grace=GRACE), []
    later = freed_with_a_waiter(slots, order, freed=2, waiting=3)
    follow_up(slots, order, later, priority=2)
    assert order == ["follow-up", 3]


def test_the_follow_up_of_a_finished_run_goes_before_a_run_of_its_priority_that_was_waiting():
    slots, order = PrioritySlots(1, grace=GRACE), []
    earlier = freed_with_a_waiter(slots, order, freed=3, waiting=3)
    follow_up(slots, order, earlier, priority=3)
    assert order == ["follow-up", 3]


def test_only_the_freed_slot_is_kept_the_other_free_slots_go_at_once():
    slots, order = PrioritySlots(2, grace=60.0), []
    start = time.monotonic()
    slots.acquire(3)
    slots.release(3)  # kept for this thread: the other free slot is not
    waiter(slots, 3, order).join(timeout=10)
    assert order == [3]
    assert time.monotonic() - start < 5


def test_a_higher_priority_run_waiting_when_a_slot_frees_takes_it_at_once():
    slots, order = PrioritySlots(1, grace=60.0), []
    start = time.monotonic()
    first = freed_with_a_waiter(slots, order, freed=3, waiting=2)
    first.join(timeout=10)
    assert order == [2]
    assert time.monotonic() - start < 5  # not held back for the grace


def test_parts_that_start_together_queue_by_priority_however_they_arrive():
    slots, order = PrioritySlots(1, grace=GRACE), []
    slots.hold()
    low = waiter(slots, 5, order)
    queued(slots, 1)
    with_a_late_arrival(slots, order, low, priority=1)
    assert order == [1, 5]


def test_a_lower_priority_run_starts_once_the_grace_is_over():
    slots, order = PrioritySlots(1, grace=0.2), []
    freed_with_a_waiter(slots, order, freed=2, waiting=3).join(timeout=10)
    assert order == [3]
