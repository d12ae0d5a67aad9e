"""Running the project's scripts as subprocesses, and the records that make every finished run reusable."""

import hashlib
import heapq
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..common import KEEP_FREED_MEMORY, ROOT

# Config fields that do not decide a training run's result (bookkeeping, and defaults that only inference reads):
# left out of the settings key, so that a new field of this kind does not orphan the finished runs.
KEY_IGNORED_CONFIG_FIELDS = {
    "transformers_version",
    "use_cache",
    "auto_map",
    "_name_or_path",
    "architectures",
    "dtype",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "recompute_gating",  # memory against time only: the same gradients (tests/test_modeling.py)
}


class MissingRun(Exception):
    """A run that has no record, where none may be started (--report_only)."""


class PrioritySlots:
    """A semaphore of `count` slots whose waiters go in order of priority (lowest first), then of arrival.

    A freed slot is kept for `grace` seconds for the thread that freed it: a part makes its runs one after another, so
    a finished run's follow-up (its test evaluation, the next seed) asks a moment after the slot frees, and goes before
    the waiters of its priority and below; waiters of a higher priority are not held. `hold` holds back every waiter
    for the grace, so that parts that start together read their records and queue before any run starts.
    """

    def __init__(self, count: int, grace: float = 10.0):
        self.free = count
        self.waiting = []
        self.order = itertools.count()
        self.condition = threading.Condition()
        self.grace = grace
        self.held_until = 0.0  # set by `hold`
        self.kept = {}  # thread that freed a slot -> (its priority, until when the slot is kept for it)

    def acquire(self, priority: int) -> None:
        with self.condition:
            returning = self.kept.pop(threading.get_ident(), (0, 0.0))[1] > time.monotonic()
            ticket = (priority, not returning, next(self.order))  # a returning thread goes first in its priority
            heapq.heappush(self.waiting, ticket)
            while True:
                wait = (0.0 if self.free else None) if returning else self.wait_for(priority)
                if wait == 0 and self.waiting[0] == ticket:
                    break
                self.condition.wait(wait or None)
            heapq.heappop(self.waiting)
            self.free -= 1
            self.condition.notify_all()

    def wait_for(self, priority: int) -> float | None:
        """0 if a free slot may go to a waiter of `priority` now; else how long the free slots are held (for the start,
        or kept for threads that freed them with `priority` or a higher one), or None if none is free."""
        now = time.monotonic()
        if self.held_until > now:
            return self.held_until - now
        kept = sorted(
            until - now for freed_with, until in self.kept.values() if until > now and freed_with <= priority
        )
        if self.free > len(kept):
            return 0.0
        return kept[len(kept) - self.free] if self.free else None

    def hold(self) -> None:
        """Holds back every waiter for the grace: for threads that start together to queue before any run starts."""
        with self.condition:
            self.held_until = time.monotonic() + self.grace

    def release(self, priority: int) -> None:
        """Frees a slot taken with `priority`, kept for the freeing thread's next run for the grace."""
        with self.condition:
            self.free += 1
            self.kept[threading.get_ident()] = (priority, time.monotonic() + self.grace)
            self.condition.notify_all()


class Runner:
    """Runs commands in subprocesses from the repository root, at most `jobs` at a time, each with cpu_count / jobs
    threads and its output in `work_dir`/logs/`name`.log (or, with `report_only`, refuses to run any). A free slot
    goes to the waiting run of the lowest `priority`, so that what matters most runs first."""

    def __init__(self, work_dir: Path, jobs: int, report_only: bool = False):
        self.work_dir = work_dir
        self.report_only = report_only
        self.slots = PrioritySlots(jobs)
        self.threads = str(max(1, (os.cpu_count() or 1) // jobs))

    def env(self) -> dict:
        return {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": self.threads,
            "TOKENIZERS_PARALLELISM": "false",
            # glibc would otherwise hand the large logits buffers back to the kernel after every step.
            "MALLOC_MMAP_THRESHOLD_": str(KEEP_FREED_MEMORY),
            "MALLOC_TRIM_THRESHOLD_": str(KEEP_FREED_MEMORY),
        }

    def __call__(self, command: list[str], name: str, priority: int = 0) -> None:
        if self.report_only:
            raise MissingRun(name)
        log = self.work_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.slots.acquire(priority)
        try:
            print(f"  start {name}", file=sys.stderr, flush=True)
            with log.open("w") as handle:
                result = subprocess.run(
                    command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=self.env(), check=False
                )
        finally:
            self.slots.release(priority)
        if result.returncode:
            raise RuntimeError(f"{name} failed; see {log}:\n" + log.read_text()[-3000:])
        print(f"  done  {name}", file=sys.stderr, flush=True)

    def script(self, script: str, arguments: dict, name: str, priority: int = 0) -> None:
        """`python script --key value ...` (True: a bare flag; None or False: left out)."""
        command = [sys.executable, script]
        for key, value in arguments.items():
            if value is True:
                command.append(f"--{key}")
            elif value is not None and value is not False:
                command += [f"--{key}", str(value)]
        self(command, name, priority)


def settings_key(settings: dict) -> str:
    """A short hash of the settings that decide a run's result: part of its record's name, so that a record is reused
    only by a run with the same settings."""
    if "config" in settings:
        config = {k: v for k, v in settings["config"].items() if k not in KEY_IGNORED_CONFIG_FIELDS}
        settings = {**settings, "config": config}
    return hashlib.sha1(json.dumps(settings, default=str, sort_keys=True).encode()).hexdigest()[:10]


class Records:
    """The finished runs' records, one JSON file per run in `folder`."""

    def __init__(self, folder: Path):
        self.folder = folder

    def read(self, name: str) -> dict | None:
        path = self.folder / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def write(self, name: str, record: dict) -> dict:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        return record


def trainer_outputs(output: Path) -> tuple[dict, list[dict]]:
    """A finished Trainer run's evaluation metrics and log history."""
    metrics = json.loads((output / "eval_results.json").read_text())
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    return metrics, history
