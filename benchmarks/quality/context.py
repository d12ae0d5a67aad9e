"""What every part shares: the options, the models, the run records, and running the project's scripts."""

import hashlib
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .models import GMLP_TINY, MODELS, model_configs

ROOT = Path(__file__).resolve().parents[2]
# The committed records' tokenizer: the first 12 hex digits of the sha256 of the tokenizer.json that
# `python -m gmlp.tokenization_gmlp --train_files <data>/wikitext-2/train.txt --vocab_size 8192 --model_max_length 128`
# writes (deterministic; tokenizers 0.23.3). A --report_only run where it has not been built keys the records by it.
RECORDS_TOKENIZER = "30816898859b"
TRAIN_FILE = "train.txt"  # of WikiText-2: pretraining and the tokenizer; valid.txt for choices, test.txt reported
# glibc would otherwise hand an MLM step's large logits buffers back to the kernel after every step (its mmap and trim
# thresholds: set for the runs by MALLOC_*_THRESHOLD_, for the step times by mallopt).
KEEP_FREED_MEMORY = 2**31 - 1
# Config fields that do not decide a training run's result (bookkeeping, and defaults that only inference reads):
# left out of the settings key, so that a new field of this kind does not orphan the finished runs.
KEY_IGNORED_CONFIG_FIELDS = {
    *("transformers_version", "use_cache", "auto_map", "_name_or_path", "architectures", "dtype"),
    *("output_attentions", "output_hidden_states", "return_dict"),
    "recompute_gating",  # memory against time only: the same gradients (tests/model/test_modeling.py)
    "sgu_kernel",  # how the same gating unit runs (Triton or PyTorch), tested equal (tests/model/test_paths_property.py)
}


class MissingRun(Exception):
    """A run that has no record, where none may be started (--report_only)."""


def settings_key(settings: dict) -> str:
    """A short hash of the settings that decide a run's result: part of its record's name, so that a record is reused
    only by a run with the same settings."""
    if "config" in settings:
        config = {k: v for k, v in settings["config"].items() if k not in KEY_IGNORED_CONFIG_FIELDS}
        settings = {**settings, "config": config}
    return hashlib.sha1(json.dumps(settings, default=str, sort_keys=True).encode()).hexdigest()[:10]


def pick(mapping: dict, keys) -> dict:
    """`mapping`'s items of `keys`, in that order."""
    return {key: mapping[key] for key in keys}


class Context:
    """The benchmark's options (`args`) and what the parts build on them."""

    def __init__(self, args):
        self.args = args
        self.models = [name for name in MODELS if name in args.models]
        self.configs = model_configs()
        self.records = args.output.parent / f"{args.output.stem}_runs"
        self.data = args.work_dir / "data"
        self.tokenizer = self.data / "tokenizer-train"
        self.wikitext = args.data / "wikitext-2"
        self.slots = threading.Semaphore(args.jobs)  # runs at a time
        self.locks = {}
        self.lock = threading.Lock()

    @property
    def tokenizer_hash(self) -> str:
        """The first 12 hex digits of the sha256 of the tokenizer's `tokenizer.json` (RECORDS_TOKENIZER before it is
        built): part of every run's settings, so that a record is reused only with the tokenizer it was made with."""
        path = self.tokenizer / "tokenizer.json"
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.exists() else RECORDS_TOKENIZER

    def record(self, name: str) -> dict | None:
        path = self.records / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def save(self, name: str, record: dict) -> dict:
        self.records.mkdir(parents=True, exist_ok=True)
        (self.records / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        return record

    def run_lock(self, name: str) -> threading.Lock:
        """The lock that keeps two threads from making the same run at once."""
        with self.lock:
            return self.locks.setdefault(name, threading.Lock())

    def available(self, run, *args, **kwargs):
        """The run's record (made if need be), or None where --report_only finds none."""
        try:
            return run(*args, **kwargs)
        except MissingRun as missing:
            print(f"  the report leaves out {missing} (--report_only)", file=sys.stderr)
            return None

    def parallel(self, function, items: list) -> list:
        """`function` over `items` in threads, results in order."""
        with ThreadPoolExecutor(max(1, len(items))) as pool:
            return list(pool.map(function, items))

    def script(self, command: str, arguments: dict, name: str) -> None:
        """`python command --key value ...` (True: a bare flag; None or False: left out) from the repository root,
        once one of --jobs slots is free, with cpu_count / --jobs threads, its output in `work_dir`/logs/`name`.log."""
        command = [sys.executable, *command.split()]
        for key, value in arguments.items():
            if value is not None and value is not False:
                command += [f"--{key}"] if value is True else [f"--{key}", str(value)]
        threads = str(max(1, (os.cpu_count() or 1) // self.args.jobs))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": threads, "TOKENIZERS_PARALLELISM": "false"}
        env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        env |= {f"MALLOC_{kind}_THRESHOLD_": str(KEEP_FREED_MEMORY) for kind in ("MMAP", "TRIM")}
        log = self.args.work_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with self.slots, log.open("w") as handle:
            print(f"  start {name}", file=sys.stderr, flush=True)
            result = subprocess.run(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=env, check=False)
        if result.returncode:
            raise RuntimeError(f"{name} failed; see {log}:\n{log.read_text()[-3000:]}")
        print(f"  done  {name}", file=sys.stderr, flush=True)

    def prepare_tokenizer(self) -> None:
        """The tokenizer, trained once on the pretraining text (deterministic: a rebuild gives the same file)."""
        if not (self.tokenizer / "tokenizer_config.json").exists():
            options = {
                "train_files": self.wikitext / TRAIN_FILE,
                "output_dir": self.tokenizer,
                "model_max_length": 128,
            }
            self.script("-m gmlp.tokenization_gmlp", {**options, "vocab_size": GMLP_TINY["vocab_size"]}, "tokenizer")
        if self.tokenizer_hash != RECORDS_TOKENIZER:
            message = f"  the tokenizer built here (sha256 {self.tokenizer_hash}...) is not the committed records' ({RECORDS_TOKENIZER}...; another version of tokenizers?): every run is made afresh for it"
            print(message, file=sys.stderr)
