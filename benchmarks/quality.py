"""Small-scale reproduction of the paper's quality claims, sized for a 2-core CPU, with the project's own scripts.

gMLP, aMLP and BERT (`transformers`' BertForMaskedLM) at equal parameter count (2.3M), same tokenizer, data, steps and
schedule, pretrained with masked language modelling by run_mlm.py, then fine-tuned by run_glue.py / run_squad.py:

    python benchmarks/quality.py                       # the default suites, seeds 0 1 2 (about 9.5 hours on 2 cores)
    python benchmarks/quality.py --suites pretrain     # pretraining only: deterministic validation perplexity, curves
    python benchmarks/quality.py --suites lr           # SST-2 fine-tuning at each --finetune_learning_rates (seed 0)
    python benchmarks/quality.py --suites finetune     # SST-2, MNLI-m (dev split), SQuAD v1.1 (dev split), each
                                                       #   model at its best SST-2 rate, every seed (and
                                                       #   gMLP's / aMLP's MNLI with mean pooling)
    python benchmarks/quality.py --suites recipe       # gMLP/aMLP fine-tuning probes (mean pooling, ...), seed 0
    python benchmarks/quality.py --suites sgu          # the SGU variants of Table 3 at equal steps
    python benchmarks/quality.py --suites bf16 --models gmlp --seeds 0
                                                       # gMLP pretrained in bf16 autocast beside fp32
    python benchmarks/quality.py --suites pretrain_lr --seeds 0
                                                       # each model pretrained at 3e-4, 1e-3 and 3e-3 (seed 0)
    python benchmarks/quality.py --seeds 0 --jobs 2    # one seed; two runs at a time (one thread each)

Data (`../shared/data`, never copied into the repository):
- pretraining on WikiText-2's *test* split, validation perplexity on 1,024 sequences of its *valid* split (the train
  split is not on this machine), with one seeded evaluation mask (run_mlm.py `--eval_mask_seed 0`), so the same
  weights always give the same perplexity;
- SST-2: GLUE's train (67,349) and dev (872) sets;
- "MNLI-m (dev split)": only MNLI's dev-matched set is here (9,815 pairs). Shuffled once with Python's
  `random.Random(0)`: 7,815 pairs for fine-tuning, 2,000 held out for evaluation;
- "SQuAD v1.1 (dev split)": only SQuAD v1.1's dev set is here (48 articles). Split by article (no context on both
  sides), articles shuffled with `random.Random(0)`: 38 articles for fine-tuning, 10 held out; EM and F1 on the held-out
  questions, from run_squad.py.

Every finished run writes a record to benchmarks/results/quality_runs/ (beside --output) (settings, metrics, curve) at once; a later
invocation reuses the record of a run with the same settings, so a stopped session loses nothing and adding seeds or
suites costs only the new runs (checkpoints live in --work_dir; a fine-tuning run whose pretrained checkpoint is gone
pretrains it again). Tables go to benchmarks/results/quality.json and .md, curves to quality_curves.png.
"""

import argparse
import hashlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from transformers import BertConfig, BertForMaskedLM

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from gmlp import GMLPConfig, GMLPForMaskedLM

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_DATA = ROOT.parent / "shared" / "data"
# gmlp-tiny: 8 blocks, d_model 128, d_ffn 768, n 128, an 8,192-token WordPiece vocabulary trained on the data.
GMLP_TINY = {
    "vocab_size": 8192,
    "hidden_size": 128,
    "intermediate_size": 768,
    "num_hidden_layers": 8,
    "max_position_embeddings": 128,
}
SGU_VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")
MODELS = ("bert", "gmlp", "amlp")  # slowest first: its runs take the first free slot
TASKS = ("sst2", "mnli", "squad")
SMALL_GLUE_TASKS = ("cola", "mrpc", "stsb", "rte")  # train and dev are here: GLUE-style dev scores, opt-in
TASK_NAMES = {
    "sst2": "SST-2 (dev)",
    "mnli": "MNLI-m (dev split)",
    "squad": "SQuAD v1.1 (dev split)",
    "cola": "CoLA (dev)",
    "mrpc": "MRPC (dev)",
    "stsb": "STS-B (dev)",
    "rte": "RTE (dev)",
}
MNLI_HELD_OUT = 2000
TRAIN_FILE = "train.txt"  # of wikitext-2: pretraining and the tokenizer; valid.txt for choices, test.txt reported
SQUAD_HELD_OUT_ARTICLES = 10
# gMLP/aMLP fine-tuning probes of the recipe suite, each one change to the recipe: name -> finetune() arguments
# (`overrides`: run_glue.py --config_overrides; the classifier is the only weight not loaded from the checkpoint, so
# `initializer_range` sets its initialisation alone).
RECIPE_PROBES = {
    "none: the recipe (first token, dropout 0.1, init std 0.02, warm-up 10%)": {},
    "mean pooling": {"overrides": "classifier_pooling=mean"},
    "no dropout": {"overrides": "hidden_dropout_prob=0.0"},
    "classifier init std 0.002 (default 0.02)": {"overrides": "initializer_range=0.002"},
    "warm-up 30% of steps (default 10%)": {"warmup_ratio": 0.3},
    "learning rate 3e-4 (instead of the best SST-2 rate)": {"learning_rate": 3e-4},
}
# The probe that took gMLP off MNLI's majority class (seed 0), run for gMLP and aMLP at every seed in the finetune suite.
POOLED = {"task": "mnli", "probe": "mean pooling"}


def parameters(model) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def model_configs() -> dict:
    """name -> config, at nearly equal parameter count. aMLP drops one block to pay for its tiny attention (as the
    paper's aMLP-base has 36 blocks against gMLP-base's 48); BERT has gMLP's width and depth and the FFN width that
    matches the count."""
    gmlp = GMLPConfig(**GMLP_TINY)
    amlp = GMLPConfig(**{**GMLP_TINY, "num_hidden_layers": 7, "tiny_attention_size": 32})
    target = parameters(GMLPForMaskedLM(gmlp))

    def bert(intermediate_size):
        return BertConfig(
            vocab_size=GMLP_TINY["vocab_size"],
            hidden_size=128,
            num_hidden_layers=8,
            num_attention_heads=2,
            intermediate_size=intermediate_size,
            max_position_embeddings=128,
        )

    low, high = (parameters(BertForMaskedLM(bert(size))) for size in (128, 256))
    return {"gmlp": gmlp, "amlp": amlp, "bert": bert(round(128 + (target - low) * 128 / (high - low)))}


class MissingRun(Exception):
    """A run that --report_only may not start."""


class Runner:
    """Runs the scripts as subprocesses, at most `jobs` at a time, each with cpu_count / jobs threads (or, with
    `report_only`, refuses to)."""

    def __init__(self, work_dir: Path, jobs: int, report_only: bool = False):
        self.work_dir = work_dir
        self.report_only = report_only
        self.slots = threading.Semaphore(jobs)
        self.threads = str(max(1, (os.cpu_count() or 1) // jobs))

    def __call__(self, command: list[str], name: str) -> None:
        if self.report_only:
            raise MissingRun(name)
        log = self.work_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": self.threads,
            # glibc would return the large logits buffers to the kernel after every step (BENCHMARKING.md).
            "MALLOC_MMAP_THRESHOLD_": str(2**34),
            "MALLOC_TRIM_THRESHOLD_": str(2**34),
            "TOKENIZERS_PARALLELISM": "false",
        }
        with self.slots:
            print(f"  start {name}", file=sys.stderr, flush=True)
            with log.open("w") as handle:
                result = subprocess.run(
                    command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, env=env, check=False
                )
        if result.returncode:
            raise RuntimeError(f"{name} failed; see {log}:\n" + log.read_text()[-3000:])
        print(f"  done  {name}", file=sys.stderr, flush=True)


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
}


def settings_key(settings) -> str:
    """A short hash of the settings that decide a run's result: part of its record's name, so that a record is reused
    only by a run with the same settings."""
    if "config" in settings:
        config = {k: v for k, v in settings["config"].items() if k not in KEY_IGNORED_CONFIG_FIELDS}
        settings = {**settings, "config": config}
    return hashlib.sha1(json.dumps(settings, default=str, sort_keys=True).encode()).hexdigest()[:10]


def finished_output(output: Path, max_steps: int) -> bool:
    """Whether `output` holds a pretraining run that reached `max_steps` and saved its weights and metrics (a run
    whose benchmark process stopped before writing its record is taken as it is, not run again)."""
    files = [output / name for name in ("eval_results.json", "trainer_state.json", "model.safetensors")]
    if not all(path.exists() for path in files):
        return False
    return json.loads(files[1].read_text()).get("global_step") == max_steps


def read_record(runs_dir: Path, name: str) -> dict | None:
    path = runs_dir / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_record(runs_dir: Path, name: str, record: dict) -> dict:
    runs_dir.mkdir(parents=True, exist_ok=True)
    (runs_dir / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


class Quality:
    """The runs of the benchmark, each reused from its record when one exists."""

    def __init__(self, args):
        self.args = args
        self.run = Runner(args.work_dir, args.jobs, args.report_only)
        self.configs = model_configs()
        self.data = args.work_dir / "data"
        self.tokenizer = self.data / f"tokenizer-{Path(TRAIN_FILE).stem}"
        self.runs_dir = args.output.parent / f"{args.output.stem}_runs"
        self.lock = threading.Lock()
        self.pretraining = {}  # (name, seed) -> the lock that serialises pretraining one checkpoint

    # ---- data -------------------------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        """The tokenizer and the documented splits of MNLI-m dev and SQuAD v1.1 dev, made once in the work dir."""
        shared = self.args.data
        tokenizer = self.tokenizer
        if not (tokenizer / "tokenizer_config.json").exists():
            self.run(
                [
                    sys.executable,
                    "-m",
                    "gmlp.tokenization_gmlp",
                    "--train_files",
                    str(shared / "wikitext-2" / TRAIN_FILE),
                    "--output_dir",
                    str(tokenizer),
                    "--vocab_size",
                    str(GMLP_TINY["vocab_size"]),
                    "--model_max_length",
                    "128",
                ],
                "tokenizer",
            )
        mnli = self.data / "mnli"
        if not (mnli / "validation.jsonl").exists():
            pairs = (shared / "glue" / "MNLI" / "dev_matched.jsonl").read_text().splitlines()
            random.Random(0).shuffle(pairs)
            mnli.mkdir(parents=True, exist_ok=True)
            (mnli / "train.jsonl").write_text("\n".join(pairs[MNLI_HELD_OUT:]) + "\n")
            (mnli / "validation.jsonl").write_text("\n".join(pairs[:MNLI_HELD_OUT]) + "\n")
        squad = self.data / "squad"
        if not (squad / "validation.json").exists():
            dev = json.loads((shared / "squad" / "dev-v1.1.json").read_text())
            articles = list(dev["data"])
            random.Random(0).shuffle(articles)
            squad.mkdir(parents=True, exist_ok=True)
            for split, part in (
                ("train", articles[SQUAD_HELD_OUT_ARTICLES:]),
                ("validation", articles[:SQUAD_HELD_OUT_ARTICLES]),
            ):
                (squad / f"{split}.json").write_text(json.dumps({"data": part, "version": dev["version"]}))

    # ---- pretraining ------------------------------------------------------------------------------------------
    def pretrain_settings(self, config, recipe: dict, bf16: bool = False) -> dict:
        args = self.args
        # bf16 only when on, so that the fp32 runs keep the settings key they were recorded under.
        return ({"bf16": True} if bf16 else {}) | {
            "config": config.to_dict(),
            "train_file": TRAIN_FILE,
            "max_steps": recipe.get("max_steps", args.max_steps),
            "batch_size": args.batch_size,
            "learning_rate": recipe["learning_rate"],
            "lr_scheduler_type": recipe["lr_scheduler_type"],
            "warmup_steps": recipe["warmup_steps"],
            "weight_decay": 0.01,
            "eval_steps": args.eval_steps,
            "max_eval_samples": args.max_eval_samples,
            "eval_mask_seed": 0,
        }

    def pretrain(
        self,
        name: str,
        seed: int,
        recipe: dict | None = None,
        config=None,
        need_checkpoint: bool = False,
        bf16: bool = False,
    ) -> dict:
        """MLM pretraining with run_mlm.py (in bf16 autocast with `bf16`) under `recipe` (default: the model's chosen
        one): the record with the validation perplexity and accuracy, their curve, and the test split's figures of the
        last checkpoint."""
        config = self.configs[name] if config is None else config
        recipe = self.final_recipe(name) if recipe is None else recipe
        settings = self.pretrain_settings(config, recipe, bf16)
        run_name = f"pretrain-{name}{'-bf16' if bf16 else ''}-{settings_key(settings)}-seed{seed}"
        output = self.args.work_dir / run_name
        with self.lock:
            lock = self.pretraining.setdefault(run_name, threading.Lock())
        with lock:
            record = read_record(self.runs_dir, run_name)
            if record and (not need_checkpoint or (output / "model.safetensors").exists()):
                return record
            if self.args.report_only:
                raise MissingRun(run_name)
            if not finished_output(output, settings["max_steps"]):
                self.run_pretraining(run_name, output, config, settings, seed, bf16)
            if not (output / "test" / "eval_results.json").exists():
                self.evaluate_test(run_name, output)
            metrics = json.loads((output / "eval_results.json").read_text())
            test = json.loads((output / "test" / "eval_results.json").read_text())
            history = json.loads((output / "trainer_state.json").read_text())["log_history"]
            return write_record(
                self.runs_dir,
                run_name,
                {
                    "kind": "pretrain",
                    "model": name,
                    "seed": seed,
                    "settings": settings,
                    "checkpoint": str(output),
                    "perplexity": metrics["perplexity"],
                    "accuracy": metrics["eval_accuracy"],
                    "test_perplexity": test["perplexity"],
                    "test_accuracy": test["eval_accuracy"],
                    "curve": [(e["step"], math.exp(e["eval_loss"])) for e in history if "eval_loss" in e],
                    "accuracy_curve": [(e["step"], e["eval_accuracy"]) for e in history if "eval_accuracy" in e],
                    "train_loss_curve": [(e["step"], e["loss"]) for e in history if "loss" in e],
                },
            )

    def run_pretraining(self, run_name: str, output: Path, config, settings: dict, seed: int, bf16: bool) -> None:
        """run_mlm.py with the run's settings, into `output`."""
        config_dir = self.args.work_dir / "configs" / run_name
        config.save_pretrained(config_dir)
        wikitext = self.args.data / "wikitext-2"
        steps = settings["max_steps"]
        self.run(
            [
                sys.executable,
                "run_mlm.py",
                "--config_name",
                str(config_dir),
                "--tokenizer_name",
                str(self.tokenizer),
                "--train_file",
                str(wikitext / settings["train_file"]),
                "--validation_file",
                str(wikitext / "valid.txt"),
                "--max_seq_length",
                "128",
                "--do_train",
                "--do_eval",
                "--output_dir",
                str(output),
                "--max_steps",
                str(steps),
                "--per_device_train_batch_size",
                str(settings["batch_size"]),
                "--per_device_eval_batch_size",
                "64",
                "--learning_rate",
                str(settings["learning_rate"]),
                "--lr_scheduler_type",
                settings["lr_scheduler_type"],
                "--warmup_steps",
                str(settings["warmup_steps"]),
                "--weight_decay",
                str(settings["weight_decay"]),
                "--eval_strategy",
                "steps",
                "--eval_steps",
                str(settings["eval_steps"]),
                "--max_eval_samples",
                str(settings["max_eval_samples"]),
                "--eval_mask_seed",
                str(settings["eval_mask_seed"]),
                "--logging_steps",
                str(max(1, settings["eval_steps"] // 4)),
                "--save_strategy",
                "no",
                "--report_to",
                "none",
                "--seed",
                str(seed),
                "--data_seed",
                "0",
                *(["--bf16"] if bf16 else []),
            ],
            run_name,
        )

    def evaluate_test(self, run_name: str, output: Path) -> None:
        """The last checkpoint's perplexity on WikiText-2 test under the same fixed mask (run_mlm.py, evaluation only,
        into `output`/test); reported, never used for a choice."""
        self.run(
            [
                sys.executable,
                "run_mlm.py",
                "--model_name_or_path",
                str(output),
                "--validation_file",
                str(self.args.data / "wikitext-2" / "test.txt"),
                "--max_seq_length",
                "128",
                "--do_eval",
                "--output_dir",
                str(output / "test"),
                "--per_device_eval_batch_size",
                "64",
                "--max_eval_samples",
                str(self.args.max_eval_samples),
                "--eval_mask_seed",
                "0",
                "--report_to",
                "none",
            ],
            f"{run_name}-test",
        )

    # ---- the pretraining recipe search ------------------------------------------------------------------------
    def search(self, name: str) -> list[dict]:
        """The same recipe search for every model (first seed, --max_steps each), every run's record in order:
        (a) the rates of --search_rates, constant after --warmup_steps of warm-up, the grid extended by a factor of
        about 3 beyond whichever end wins (at most twice); (b) the best rate with --long_warmup_steps; (c) the best so
        far with a linear decay to zero instead of the constant rate. Choices by validation perplexity only."""
        seed = self.args.seeds[0]
        base = {"lr_scheduler_type": "constant_with_warmup", "warmup_steps": self.args.warmup_steps}
        rates = sorted(self.args.search_rates)

        def runs(recipes):
            with ThreadPoolExecutor(len(recipes)) as pool:
                return list(pool.map(lambda recipe: self.pretrain(name, seed, recipe), recipes))

        records = runs([{**base, "learning_rate": rate} for rate in rates])
        for _ in range(2):
            best = min(records, key=lambda r: r["perplexity"])["settings"]["learning_rate"]
            if best not in (rates[0], rates[-1]):
                break
            rate = float(f"{best / 3 if best == rates[0] else best * 3:.0e}")
            rates = sorted([*rates, rate])
            records += runs([{**base, "learning_rate": rate}])
        best = min(records, key=lambda r: r["perplexity"])["settings"]
        records += runs(
            [{**base, "learning_rate": best["learning_rate"], "warmup_steps": self.args.long_warmup_steps}]
        )
        best = min(records, key=lambda r: r["perplexity"])["settings"]
        recipe = {key: best[key] for key in ("learning_rate", "warmup_steps")}
        records += runs([{**recipe, "lr_scheduler_type": "linear"}])
        return records

    def final_recipe(self, name: str) -> dict:
        """The recipe with the best validation perplexity in the model's search."""
        best = min(self.search(name), key=lambda r: r["perplexity"])["settings"]
        return {key: best[key] for key in ("learning_rate", "lr_scheduler_type", "warmup_steps")}

    # ---- fine-tuning ------------------------------------------------------------------------------------------
    def finetune(
        self,
        task: str,
        name: str,
        seed: int,
        learning_rate: float,
        overrides: str | None = None,
        warmup_ratio: float = 0.1,
    ) -> dict:
        """Fine-tune the model's pretrained checkpoint of `seed` on `task` with the same seed: the record with its
        held-out metrics (the spread over seeds covers both stages)."""
        args = self.args
        pretrained = self.pretrain(name, seed)
        settings = {
            "pretrained": Path(pretrained["checkpoint"]).name,
            "task": task,
            "steps": args.finetune_steps,
            "learning_rate": learning_rate,
            "warmup_ratio": warmup_ratio,
            "batch_size": 32,
            "overrides": overrides,
        }
        run_name = f"finetune-{task}-{name}-{settings_key(settings)}-seed{seed}"
        record = read_record(self.runs_dir, run_name)
        if record:
            return record
        if args.report_only:
            raise MissingRun(run_name)
        checkpoint = self.pretrain(name, seed, need_checkpoint=True)["checkpoint"]
        output = args.work_dir / run_name
        common = [
            "--model_name_or_path",
            checkpoint,
            "--do_train",
            "--do_eval",
            "--output_dir",
            str(output),
            "--max_steps",
            str(args.finetune_steps),
            "--per_device_train_batch_size",
            "32",
            "--per_device_eval_batch_size",
            "64",
            "--learning_rate",
            str(learning_rate),
            "--warmup_steps",
            str(round(args.finetune_steps * warmup_ratio)),
            "--max_seq_length",
            "128",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--seed",
            str(seed),
            "--logging_steps",
            "50",
        ]
        if overrides:
            common += ["--config_overrides", overrides]
        if task == "sst2" or task in SMALL_GLUE_TASKS:
            command = ["run_glue.py", "--task_name", task, "--glue_dir", str(args.data / "glue")]
        elif task == "mnli":
            command = [
                "run_glue.py",
                "--task_name",
                "mnli",
                "--train_file",
                str(self.data / "mnli" / "train.jsonl"),
                "--validation_file",
                str(self.data / "mnli" / "validation.jsonl"),
            ]
        elif task == "squad":
            command = [
                "run_squad.py",
                "--train_file",
                str(self.data / "squad" / "train.json"),
                "--validation_file",
                str(self.data / "squad" / "validation.json"),
                "--doc_stride",
                "32",
            ]
        else:
            raise ValueError(f"Unknown task {task!r}; choose one of {', '.join(TASKS)}.")
        self.run([sys.executable, *command, *common], run_name)
        metrics = json.loads((output / "eval_results.json").read_text())
        history = json.loads((output / "trainer_state.json").read_text())["log_history"]
        losses = [e["loss"] for e in history if "loss" in e]
        return write_record(
            self.runs_dir,
            run_name,
            {
                "kind": "finetune",
                "model": name,
                "seed": seed,
                "task": task,
                "settings": settings,
                "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))},
                "final_train_loss": losses[-1] if losses else None,
            },
        )


def mean_std(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    values = [v * scale for v in values]
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (n=1)"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f} (n={len(values)})"


TASK_METRICS = {
    "sst2": [("accuracy", "eval_accuracy")],
    "mnli": [("accuracy", "eval_accuracy")],
    "squad": [("EM", "eval_exact_match"), ("F1", "eval_f1")],
    "cola": [("MCC", "eval_matthews_correlation")],
    "mrpc": [("accuracy", "eval_accuracy"), ("F1", "eval_f1")],
    "stsb": [("Pearson", "eval_pearson"), ("Spearman", "eval_spearmanr")],
    "rte": [("accuracy", "eval_accuracy")],
}


def collect(quality: Quality) -> dict:
    """Run (or reuse) every run the chosen suites need, models in parallel threads; the results, by suite."""
    args = quality.args
    if not args.report_only:
        quality.prepare_data()
    results = {
        "settings": {
            "pretraining_steps": args.max_steps,
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "finetune_steps": args.finetune_steps,
            "seeds": args.seeds,
        }
    }
    models = [m for m in MODELS if m in args.models]
    if "search" in args.suites:
        with ThreadPoolExecutor(len(models)) as pool:
            results["search"] = dict(zip(models, pool.map(quality.search, models)))

    def available(run, *run_args, **run_kwargs):
        """The run's record (running it if need be), or None where --report_only finds no record."""
        try:
            return run(*run_args, **run_kwargs)
        except MissingRun as missing:
            print(f"  the report leaves out {missing} (--report_only)", file=sys.stderr)
            return None

    def model_chain(name):
        """One model's runs, seed by seed (so that a stopped run leaves whole seeds): pretraining, on the first seed
        the lr sweep, then each task; then the recipe probes. With --report_only a missing run is left out and the
        chain goes on with what its records allow."""
        out = {"pretrain": [], "lr": {}, "finetune": {t: [] for t in args.tasks}, "pooled": [], "recipe": {}}
        first = args.seeds[0]
        rate = None
        for seed in args.seeds:
            if record := available(quality.pretrain, name, seed):
                out["pretrain"].append(record)
            if seed == first and {"lr", "finetune", "recipe"} & set(args.suites):
                sweep = {}
                for lr in args.finetune_learning_rates:
                    if record := available(quality.finetune, "sst2", name, first, lr):
                        sweep[lr] = record["metrics"]["eval_accuracy"]
                out["lr"] = {str(lr): accuracy for lr, accuracy in sweep.items()}
                # Every task fine-tunes at the model's best SST-2 rate, once the whole sweep is in.
                if len(sweep) == len(args.finetune_learning_rates):
                    rate = max(sweep, key=sweep.get)
            if rate is None or "finetune" not in args.suites:
                continue
            for task in args.tasks:
                if record := available(quality.finetune, task, name, seed, rate):
                    out["finetune"][task].append(record)
            if name != "bert" and POOLED["task"] in args.tasks:
                probe = RECIPE_PROBES[POOLED["probe"]]
                if record := available(quality.finetune, POOLED["task"], name, seed, rate, **probe):
                    out["pooled"].append(record)
        if rate is not None and "recipe" in args.suites and name != "bert":
            for probe, changes in RECIPE_PROBES.items():
                for task in ("sst2", "mnli"):
                    if record := available(quality.finetune, task, name, first, **{"learning_rate": rate, **changes}):
                        out["recipe"].setdefault(probe, {})[task] = record["metrics"]["eval_accuracy"]
        return out

    with ThreadPoolExecutor(len(models)) as pool:
        chains = dict(zip(models, pool.map(model_chain, models)))
    results["pretrain"] = {
        name: {
            "parameters": parameters(
                BertForMaskedLM(quality.configs[name]) if name == "bert" else GMLPForMaskedLM(quality.configs[name])
            ),
            "perplexities": [r["perplexity"] for r in chain["pretrain"]],
            "accuracies": [r["accuracy"] for r in chain["pretrain"]],
            "curves": [r["curve"] for r in chain["pretrain"]],
            "train_loss_curves": [r["train_loss_curve"] for r in chain["pretrain"]],
        }
        for name, chain in chains.items()
        if chain["pretrain"]
    }
    if any(chain["lr"] for chain in chains.values()):
        results["lr"] = {name: chain["lr"] for name, chain in chains.items() if chain["lr"]}
    if "finetune" in args.suites:

        def summary(task, records):
            return {
                "learning_rate": records[0]["settings"]["learning_rate"],
                **{label: [r["metrics"][key] for r in records] for label, key in TASK_METRICS[task]},
                "final_train_loss": [r["final_train_loss"] for r in records],
                "seeds": [r["seed"] for r in records],
            }

        results["finetune"] = {
            task: {
                name: summary(task, chain["finetune"][task])
                for name, chain in chains.items()
                if chain["finetune"][task]
            }
            for task in args.tasks
        }
        for name, chain in chains.items():
            if chain["pooled"]:
                row = f"{name}, {POOLED['probe']}"
                results["finetune"][POOLED["task"]][row] = summary(POOLED["task"], chain["pooled"])
    if "recipe" in args.suites:
        results["recipe"] = {name: chain["recipe"] for name, chain in chains.items() if chain["recipe"]}
    if "pretrain_lr" in args.suites:
        # Each model pretrained at each --pretrain_learning_rates (first seed): is the shared rate fair to each?
        results["pretrain_lr"] = {}
        for name in models:
            for rate in args.pretrain_learning_rates:
                if run := available(quality.pretrain, name, args.seeds[0], learning_rate=rate):
                    results["pretrain_lr"].setdefault(name, {})[str(rate)] = run["perplexity"]
    if "bf16" in args.suites and "gmlp" in args.models:
        # gMLP pretrained in bf16 autocast (the Trainer's --bf16) beside the same run in fp32, first seed.
        runs = {
            "fp32": available(quality.pretrain, "gmlp", args.seeds[0]),
            "bf16": available(quality.pretrain, "gmlp", args.seeds[0], bf16=True),
        }
        if all(runs.values()):
            keys = ("perplexity", "accuracy", "curve", "train_loss_curve")
            results["bf16"] = {precision: {key: run[key] for key in keys} for precision, run in runs.items()}
    if "sgu" in args.suites:
        results["sgu"] = {}
        for variant in SGU_VARIANTS:
            config = GMLPConfig(**GMLP_TINY, sgu_variant=variant)
            runs = [available(quality.pretrain, f"sgu-{variant}", seed, config) for seed in args.seeds]
            if runs := [run for run in runs if run]:
                results["sgu"][variant] = {
                    "parameters": parameters(GMLPForMaskedLM(config)),
                    "perplexities": [r["perplexity"] for r in runs],
                    "curves": [r["curve"] for r in runs],
                }
    return results


def markdown(results: dict) -> str:
    s = results["settings"]
    lines = [
        (
            f"Pretraining: {s['pretraining_steps']} steps x batch {s['batch_size']} x 128 tokens, lr {s['learning_rate']}; "
            f"fine-tuning: {s['finetune_steps']} steps x batch 32; seeds {s['seeds']}; mean ± standard deviation."
        ),
        "",
    ]
    lines += [
        "### MLM pretraining, WikiText-2 (train: test split; validation: 1,024 sequences of valid, fixed mask)",
        "",
        "| model | parameters | validation perplexity | masked-token accuracy (%) |",
        "|---|---|---|---|",
    ]
    for name, row in results["pretrain"].items():
        lines.append(
            f"| {name} | {row['parameters'] / 1e6:.2f}M | {mean_std(row['perplexities'])} | "
            f"{mean_std(row['accuracies'], 100)} |"
        )
    lines.append("")
    if "lr" in results:
        rates = sorted({float(rate) for row in results["lr"].values() for rate in row})
        lines += [
            f"### Fine-tuning learning rate: SST-2 dev accuracy (%), seed {s['seeds'][0]}, best in bold",
            "",
            "| model | " + " | ".join(f"lr {rate:g}" for rate in rates) + " |",
            "|---|" + "---|" * len(rates),
        ]
        for name, by_rate in results["lr"].items():
            best = max(by_rate.values())
            shown = {rate: f"{100 * value:.1f}" for rate, value in by_rate.items()}
            cells = [
                "–" if str(r) not in by_rate else f"**{shown[str(r)]}**" if by_rate[str(r)] == best else shown[str(r)]
                for r in rates
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    if "finetune" in results:
        lines += [
            "### Fine-tuning (each model at its best SST-2 learning rate; each seed's checkpoint with that seed)",
            "",
            "| task | model | lr | held-out metrics (%) | first metric, seed by seed |",
            "|---|---|---|---|---|",
        ]
        for task, rows in results["finetune"].items():
            scale = 1 if task == "squad" else 100
            for name, row in rows.items():
                shown = ", ".join(f"{label} {mean_std(row[label], scale)}" for label, _ in TASK_METRICS[task])
                per_seed = " / ".join(f"{scale * value:.1f}" for value in row[TASK_METRICS[task][0][0]])
                if row["seeds"] != s["seeds"]:
                    label = "seeds" if len(row["seeds"]) > 1 else "seed"
                    per_seed = f"{label} {', '.join(map(str, row['seeds']))}: {per_seed}"
                lines.append(f"| {TASK_NAMES[task]} | {name} | {row['learning_rate']:g} | {shown} | {per_seed} |")
        lines.append("")
    if results.get("recipe"):
        lines += [
            f"### Recipe probes (seed {s['seeds'][0]}, best rate): accuracy (%)",
            "",
            "| model | probe | SST-2 | MNLI-m (dev split) |",
            "|---|---|---|---|",
        ]
        for name, probes in results["recipe"].items():
            for probe, by_task in probes.items():
                cells = [f"{100 * by_task[task]:.1f}" if task in by_task else "–" for task in ("sst2", "mnli")]
                lines.append(f"| {name} | {probe} | " + " | ".join(cells) + " |")
        lines.append("")
    if results.get("pretrain_lr"):
        rates = sorted({float(rate) for by_rate in results["pretrain_lr"].values() for rate in by_rate})
        lines += [
            f"### Pretraining learning rate: validation perplexity, seed {s['seeds'][0]}",
            "",
            "| model | " + " | ".join(f"lr {rate:g}" for rate in rates) + " |",
            "|---|" + "---|" * len(rates),
        ]
        for name, by_rate in results["pretrain_lr"].items():
            cells = [f"{by_rate[str(rate)]:.1f}" if str(rate) in by_rate else "–" for rate in rates]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    if "bf16" in results:
        runs = results["bf16"]
        fp32_seeds = results["pretrain"]["gmlp"]["perplexities"] if "gmlp" in results.get("pretrain", {}) else []
        lines += [
            f"### gMLP pretraining in bf16 autocast (--bf16) and in fp32, seed {s['seeds'][0]}: validation perplexity",
            "",
            "| step | fp32 | bf16 |",
            "|---|---|---|",
        ]
        lines += [
            f"| {step} | {fp32:.1f} | {bf16:.1f} |"
            for (step, fp32), (_, bf16) in zip(runs["fp32"]["curve"], runs["bf16"]["curve"])
        ]
        lines += [
            "",
            (
                f"Final: fp32 {runs['fp32']['perplexity']:.1f}, bf16 {runs['bf16']['perplexity']:.1f}; fp32 over seeds: "
                f"{mean_std(fp32_seeds)}."
            ),
            "",
        ]
    if "sgu" in results:
        lines += [
            "### SGU variants (Table 3), equal steps",
            "",
            "| variant | parameters | validation perplexity | paper (Table 3) |",
            "|---|---|---|---|",
        ]
        paper = {"linear": "5.14", "additive": "4.97", "multiplicative": "4.53", "multiplicative_split": "4.35"}
        for name, row in results["sgu"].items():
            lines.append(
                f"| {name} | {row['parameters'] / 1e6:.2f}M | {mean_std(row['perplexities'])} | {paper[name]} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot_curves(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("pretrain", "curves", "validation perplexity (fixed mask)"),
        ("pretrain", "train_loss_curves", "training loss"),
    ]
    if "sgu" in results:
        panels.append(("sgu", "curves", "validation perplexity, SGU variants"))
    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for axis, (suite, key, title) in zip(axes[0], panels):
        for index, (name, row) in enumerate(results[suite].items()):
            for seed, curve in enumerate(row[key]):
                steps, values = zip(*curve)
                axis.plot(
                    steps,
                    values,
                    "-" if "loss" in key else "o-",
                    color=f"C{index}",
                    alpha=0.7,
                    label=name if seed == 0 else None,
                )
        axis.set(yscale="log" if "perplexity" in title else "linear", xlabel="step", title=title)
        axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--suites",
        nargs="+",
        default=["pretrain", "lr", "finetune", "recipe", "bf16", "pretrain_lr"],
        choices=["search", "pretrain", "lr", "finetune", "recipe", "sgu", "bf16", "pretrain_lr"],
    )
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=list(TASKS),
        choices=TASKS + SMALL_GLUE_TASKS,
        help="fine-tuning tasks (add cola mrpc stsb rte for a GLUE-style table)",
    )
    parser.add_argument("--max_steps", type=int, default=2000, help="MLM pretraining steps per run")
    parser.add_argument("--warmup_steps", type=int, default=200, help="the search's warm-up steps")
    parser.add_argument("--long_warmup_steps", type=int, default=600, help="the search's longer warm-up")
    parser.add_argument("--eval_steps", type=int, default=200, help="steps between validation evaluations")
    parser.add_argument(
        "--search_rates", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3], help="the search's first rates"
    )
    parser.add_argument("--batch_size", type=int, default=32, help="MLM pretraining batch (sequences of 128 tokens)")
    parser.add_argument("--learning_rate", type=float, default=1e-3, help="MLM pretraining peak learning rate")
    parser.add_argument("--max_eval_samples", type=int, default=1024, help="validation sequences of 128 tokens")
    parser.add_argument("--finetune_steps", type=int, default=1000)
    parser.add_argument(
        "--pretrain_learning_rates",
        type=float,
        nargs="+",
        default=[3e-4, 1e-3, 3e-3],
        help="the pretraining rates of the pretrain_lr suite (first seed)",
    )
    parser.add_argument(
        "--finetune_learning_rates",
        type=float,
        nargs="+",
        default=[1e-4, 3e-4, 1e-3],
        help="the rates of the lr suite; each model fine-tunes every task at its best one",
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (threads per run: cores / jobs)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument(
        "--work_dir", type=Path, default=ROOT.parent / "quality-work", help="checkpoints, logs, splits"
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "quality.json")
    parser.add_argument(
        "--report_only",
        action="store_true",
        help="start no run: write the tables from the finished runs' records (missing ones are left out)",
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if not (args.data / "wikitext-2" / "test.txt").exists():
        raise SystemExit(f"WikiText-2 not found under {args.data}; pass --data pointing at the shared data folder.")
    results = collect(Quality(args))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1))
    plot_curves(results, args.output.with_name(f"{args.output.stem}_curves.png"))
    report = markdown(results)
    args.output.with_suffix(".md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
