"""What every part of the benchmark shares: its options, the runner, the records, the models and the data."""

import hashlib
import json
import random
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .models import GMLP_TINY, model_configs
from .runs import MissingRun, Records, Runner

# The order in which waiting runs take a free slot: what answers the main questions first.
PRIORITY = {"search": 1, "pretrain": 2, "long": 3, "finetune": 4, "sgu": 5}
# The committed records' tokenizer: the first 12 hex digits of the sha256 of the tokenizer.json that
# `python -m gmlp.tokenization_gmlp --train_files <data>/wikitext-2/train.txt --vocab_size 8192 --model_max_length 128`
# writes (deterministic; tokenizers 0.23.3). A --report_only run where it has not been built keys the records by it.
RECORDS_TOKENIZER = "30816898859b"
TRAIN_FILE = "train.txt"  # of WikiText-2: pretraining and the tokenizer; valid.txt for choices, test.txt reported
MNLI_HELD_OUT = 2000
SQUAD_HELD_OUT_ARTICLES = 10


@dataclass
class Context:
    """The benchmark's options (`args`, from the command line) and what the parts build on them."""

    args: object
    run: Runner = None
    records: Records = None
    configs: dict = None
    locks: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        self.run = Runner(self.args.work_dir, self.args.jobs, self.args.report_only)
        self.records = Records(self.args.output.parent / f"{self.args.output.stem}_runs")
        self.configs = model_configs()

    @property
    def data(self) -> Path:
        return self.args.work_dir / "data"

    @property
    def tokenizer(self) -> Path:
        return self.data / f"tokenizer-{Path(TRAIN_FILE).stem}"

    @property
    def tokenizer_hash(self) -> str:
        """The first 12 hex digits of the sha256 of the tokenizer's `tokenizer.json` (RECORDS_TOKENIZER before it is
        built): part of every run's settings, so that a record is reused only with the tokenizer it was made with."""
        path = self.tokenizer / "tokenizer.json"
        return hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.exists() else RECORDS_TOKENIZER

    @property
    def wikitext(self) -> Path:
        return self.args.data / "wikitext-2"

    def parallel(self, function, items: list) -> list:
        """`function` over `items` in threads, results in order."""
        if not items:
            return []
        with ThreadPoolExecutor(len(items)) as pool:
            return list(pool.map(function, items))

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

    def prepare_tokenizer(self) -> None:
        """The tokenizer, trained once on the pretraining text (deterministic: a rebuild gives the same file)."""
        if not (self.tokenizer / "tokenizer_config.json").exists():
            self.run(
                [
                    sys.executable,
                    "-m",
                    "gmlp.tokenization_gmlp",
                    "--train_files",
                    str(self.wikitext / TRAIN_FILE),
                    "--output_dir",
                    str(self.tokenizer),
                    "--vocab_size",
                    str(GMLP_TINY["vocab_size"]),
                    "--model_max_length",
                    "128",
                ],
                "tokenizer",
            )
        if self.tokenizer_hash != RECORDS_TOKENIZER:
            print(
                f"  the tokenizer built here (sha256 {self.tokenizer_hash}...) is not the committed records' "
                f"({RECORDS_TOKENIZER}...; another version of tokenizers?): every run is made afresh for it",
                file=sys.stderr,
            )

    def prepare_data(self) -> None:
        """The documented splits of MNLI-m dev and SQuAD v1.1 dev, made once in the work dir."""
        mnli = self.data / "mnli"
        if not (mnli / "validation.jsonl").exists():
            pairs = (self.args.data / "glue" / "MNLI" / "dev_matched.jsonl").read_text().splitlines()
            random.Random(0).shuffle(pairs)
            mnli.mkdir(parents=True, exist_ok=True)
            (mnli / "train.jsonl").write_text("\n".join(pairs[MNLI_HELD_OUT:]) + "\n")
            (mnli / "validation.jsonl").write_text("\n".join(pairs[:MNLI_HELD_OUT]) + "\n")
        squad = self.data / "squad"
        if not (squad / "validation.json").exists():
            dev = json.loads((self.args.data / "squad" / "dev-v1.1.json").read_text())
            articles = list(dev["data"])
            random.Random(0).shuffle(articles)
            squad.mkdir(parents=True, exist_ok=True)
            held_out = SQUAD_HELD_OUT_ARTICLES
            for split, part in (("train", articles[held_out:]), ("validation", articles[:held_out])):
                (squad / f"{split}.json").write_text(json.dumps({"data": part, "version": dev["version"]}))
