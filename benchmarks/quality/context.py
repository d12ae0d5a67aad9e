"""What every part shares: the models (at equal parameter count, and the rows of the paper's Table 3), the options,
the run records, and running the project's scripts."""

import hashlib
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from transformers import AutoModelForMaskedLM, BertConfig, DebertaV2Config, ModernBertConfig

from gmlp import GMLPConfig

from .. import common
from ..common import KEEP_FREED_MEMORY, ROOT

# gmlp-tiny: 8 blocks, d_model 128, d_ffn 768, n 128, an 8,192-token WordPiece vocabulary trained on the data.
GMLP_TINY = {
    "vocab_size": 8192,
    "hidden_size": 128,
    "intermediate_size": 768,
    "num_hidden_layers": 8,
    "max_position_embeddings": 128,
    "spatial_fft_min_length": 1024,  # the CPU's cross-over, which the records' keys name (n = 128: never the FFT)
}
MODELS = ("bert", "modernbert", "gmlp", "amlp")  # slowest first: its runs take the first free slot
# Pretraining-only rows that make the dropout equal: each model's chosen recipe at the other models' dropout (0.1 is
# gMLP's and BERT's default on embeddings, attention and block outputs; ModernBERT's is 0).
DROPOUT_VARIANTS = {"modernbert-dropout0.1": ("modernbert", 0.1), "gmlp-dropout0": ("gmlp", 0.0)}
DROPOUT_FIELDS = {
    ModernBertConfig: ("embedding_dropout", "attention_dropout", "mlp_dropout"),
    GMLPConfig: ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    BertConfig: ("hidden_dropout_prob", "attention_probs_dropout_prob"),
}
SGU_VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")
# Table 3's Transformer rows this benchmark can run: name -> the model whose chosen recipe it trains with. ModernBERT
# (rotary positions) stands in for the paper's BERT with relative position biases; DeBERTa-v2 (relative attention,
# the closest stock relative-position BERT) has no search of its own and takes BERT's recipe.
TABLE3_TRANSFORMERS = {"bert": "bert", "modernbert": "modernbert", "deberta-v2": "bert"}


def config_parameters(config) -> int:
    """The parameter count of `config`'s masked-LM model (tied weights once)."""
    return common.parameters_of(lambda: AutoModelForMaskedLM.from_config(config))


def dropout_of(config) -> float:
    """The dropout the pretraining model trains with (they are equal where a model has several)."""
    return getattr(config, DROPOUT_FIELDS[type(config)][0])


def model_configs() -> dict:
    """name -> config, at nearly equal parameter count: aMLP drops a block for its tiny attention (as aMLP-base has 36
    to gMLP-base's 48), the transformers match by FFN width; a dropout variant changes every dropout but the heads'."""
    gmlp = GMLPConfig(**GMLP_TINY)
    target = config_parameters(gmlp)
    configs = {
        "bert": common.bert_config(GMLP_TINY, target),
        "modernbert": common.modernbert_config(GMLP_TINY, target),
        "gmlp": gmlp,
        "amlp": GMLPConfig(**{**GMLP_TINY, "num_hidden_layers": 7, "tiny_attention_size": 32}),
    }
    for variant, (name, dropout) in DROPOUT_VARIANTS.items():
        config = configs[name]
        fields = config.to_dict() | dict.fromkeys(DROPOUT_FIELDS[type(config)], dropout)
        configs[variant] = type(config).from_dict(fields)
    return configs


def table3_transformer_configs() -> dict:
    """Table 3's Transformer rows at gMLP-tiny's count: BERT and ModernBERT, and stock DeBERTa-v2 with its relative
    attention (c2p and p2c, 64 log buckets) and no absolute positions (its attention is eager only)."""
    configs = model_configs()
    fields = {
        **common.transformer_shape(GMLP_TINY),
        "relative_attention": True,
        "position_buckets": 64,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False,
        **common.SPECIAL_TOKEN_IDS,
    }
    target = config_parameters(configs["gmlp"])
    deberta = common.with_matched_width(DebertaV2Config, fields, "intermediate_size", target)
    return {"bert": configs["bert"], "modernbert": configs["modernbert"], "deberta-v2": deberta}


def sgu_configs() -> dict:
    """Table 3's SGU variants at gMLP-tiny's shape, and the split SGU widened to the unsplit variants' count."""
    configs = {variant: GMLPConfig(**GMLP_TINY, sgu_variant=variant) for variant in SGU_VARIANTS}

    def split(width):
        return GMLPConfig(**{**GMLP_TINY, "intermediate_size": 2 * (width // 2)})

    target, low = config_parameters(configs["multiplicative"]), GMLP_TINY["intermediate_size"]
    width = common.fit_affine(lambda w: config_parameters(split(w)), target, low, 2 * low)
    configs["multiplicative_split, wider"] = split(width)
    return configs


# The committed records' tokenizer: the first 12 hex digits of the sha256 of the tokenizer.json that
# `python -m gmlp.tokenization_gmlp --train_files <data>/wikitext-2/train.txt --vocab_size 8192 --model_max_length 128`
# writes (deterministic; tokenizers 0.23.3). A --report_only run where it has not been built keys the records by it.
RECORDS_TOKENIZER = "30816898859b"
TRAIN_FILE = "train.txt"  # of WikiText-2: pretraining and the tokenizer; valid.txt for choices, test.txt reported
# Config fields that do not decide a training run's result even where they are set: left out of its settings.
NOT_DECIDING_CONFIG_FIELDS = (
    "recompute_gating",  # memory against time only: the same gradients (tests/model/test_modeling.py)
    "sgu_kernel",  # how the same gating unit runs (Triton or PyTorch), tested equal (tests/model/test_paths_property)
)


class MissingRun(Exception):
    """A run that has no record, where none may be started (--report_only)."""


def config_settings(config) -> dict:
    """A model config's part of a run's settings: its model type and the fields that differ from its class's defaults.
    A newer Transformers' version stamp and the fields it adds at their defaults are not in it, so the key stays;
    nor is a changed default (delete the records it changes)."""
    fields, defaults = (json.loads(json.dumps(c.to_dict(), default=str)) for c in (config, type(config)()))
    ignored = NOT_DECIDING_CONFIG_FIELDS
    changed = {k: v for k, v in fields.items() if k not in ignored and (k not in defaults or v != defaults[k])}
    return {"model_type": config.model_type, **changed}


def settings_key(settings: dict) -> str:
    """A short hash of the settings that decide a run's result: part of its record's name."""
    return hashlib.sha1(json.dumps(settings, default=str, sort_keys=True).encode()).hexdigest()[:10]


def pick(mapping: dict, keys) -> dict:
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
        """The sha256 (12 digits) of the tokenizer's `tokenizer.json` (before it is built: RECORDS_TOKENIZER)."""
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
            options = {"train_files": self.wikitext / TRAIN_FILE, "output_dir": self.tokenizer}
            options |= {"model_max_length": 128, "vocab_size": GMLP_TINY["vocab_size"]}
            self.script("-m gmlp.tokenization_gmlp", options, "tokenizer")
        if self.tokenizer_hash != RECORDS_TOKENIZER:
            message = f"  the tokenizer built here (sha256 {self.tokenizer_hash}...) is not the committed records' ({RECORDS_TOKENIZER}...; another version of tokenizers?): every run is made afresh for it"
            print(message, file=sys.stderr)
