"""Fine-tuning runs (docs/quality.md: the set-up): each seed's pretrained checkpoint by run_glue.py / run_squad.py
with that seed, at the model's best rate of an SST-2 sweep (first seed); gMLP and aMLP pool the mean on sentence pairs;
the transformers' recipe probes (first seed) each run at every seed where they beat the recipe by a point or more."""

import json
import random

from .context import Context, MissingRun, settings_key
from .pretraining import pretrain

TASKS = ("sst2", "mnli", "squad")
# task -> (the quality.json label, the Trainer's metric) of each figure it reports, the first the one choices use
TASK_METRICS = {
    "sst2": [("accuracy", "eval_accuracy")],
    "mnli": [("accuracy", "eval_accuracy")],
    "squad": [("EM", "eval_exact_match"), ("F1", "eval_f1")],
}
MEAN_POOLING = "classifier_pooling=mean"
PROBE_TASKS = ("sst2", "mnli")
SECOND_RATE = "its second-best SST-2 rate"
PROBES = {
    "bert": {"no dropout": {"overrides": "hidden_dropout_prob=0.0"}, "warm-up 30% of steps": {"warmup_ratio": 0.3}},
    "modernbert": {"mean pooling": {"overrides": MEAN_POOLING}},
}
ADOPT_GAIN = 0.01
MNLI_HELD_OUT = 2000
SQUAD_HELD_OUT_ARTICLES = 10


def prepare_splits(ctx: Context) -> None:
    """The documented splits of MNLI-m dev (shuffled pairs) and SQuAD v1.1 dev (shuffled articles), made once."""
    mnli, squad = ctx.data / "mnli", ctx.data / "squad"
    if not (mnli / "validation.jsonl").exists():
        pairs = (ctx.args.data / "glue" / "MNLI" / "dev_matched.jsonl").read_text().splitlines()
        random.Random(0).shuffle(pairs)
        mnli.mkdir(parents=True, exist_ok=True)
        (mnli / "train.jsonl").write_text("\n".join(pairs[MNLI_HELD_OUT:]) + "\n")
        (mnli / "validation.jsonl").write_text("\n".join(pairs[:MNLI_HELD_OUT]) + "\n")
    if not (squad / "validation.json").exists():
        dev = json.loads((ctx.args.data / "squad" / "dev-v1.1.json").read_text())
        articles = list(dev["data"])
        random.Random(0).shuffle(articles)
        squad.mkdir(parents=True, exist_ok=True)
        held_out = SQUAD_HELD_OUT_ARTICLES
        for split, part in (("train", articles[held_out:]), ("validation", articles[:held_out])):
            (squad / f"{split}.json").write_text(json.dumps({"data": part, "version": dev["version"]}))


def task_data(ctx: Context, task: str) -> tuple[str, dict]:
    """The script that fine-tunes on `task`, and the data arguments it takes."""
    if task == "sst2":
        return "run_glue.py", {"task_name": task, "glue_dir": ctx.args.data / "glue"}
    if task == "mnli":
        files = {f"{split}_file": ctx.data / "mnli" / f"{split}.jsonl" for split in ("train", "validation")}
        return "run_glue.py", {"task_name": task, **files}
    files = {f"{split}_file": ctx.data / "squad" / f"{split}.json" for split in ("train", "validation")}
    return "run_squad.py", {**files, "doc_stride": 32}


def finetune(ctx: Context, task: str, name: str, seed: int, learning_rate: float, overrides=None, warmup_ratio=0.1):
    """The record of the model's seed-`seed` checkpoint fine-tuned on `task` with the same seed (the spread over
    seeds covers both stages): held-out metrics and the last training loss."""
    args = ctx.args
    settings = {
        "pretrained": pretrain(ctx, name, seed)["checkpoint"].rsplit("/", 1)[-1],
        "task": task,
        "steps": args.finetune_steps,
        "learning_rate": learning_rate,
        "warmup_ratio": warmup_ratio,
        "batch_size": 32,
        "overrides": overrides,
    }
    run_name = f"finetune-{task}-{name}-{settings_key(settings)}-seed{seed}"
    if record := ctx.record(run_name):
        return record
    if args.report_only:
        raise MissingRun(run_name)
    output = args.work_dir / run_name
    script, data = task_data(ctx, task)
    arguments = {
        **data,
        "model_name_or_path": pretrain(ctx, name, seed, need_checkpoint=True)["checkpoint"],
        "do_train": True,
        "do_eval": True,
        "output_dir": output,
        "max_steps": args.finetune_steps,
        "per_device_train_batch_size": 32,
        "per_device_eval_batch_size": 64,
        "learning_rate": learning_rate,
        "warmup_steps": round(args.finetune_steps * warmup_ratio),
        "max_seq_length": 128,
        "save_strategy": "no",
        "report_to": "none",
        "seed": seed,
        "logging_steps": 50,
        "config_overrides": overrides,
    }
    ctx.script(script, arguments, run_name)
    metrics = json.loads((output / "eval_results.json").read_text())
    history = json.loads((output / "trainer_state.json").read_text())["log_history"]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    record = {
        "kind": "finetune",
        "model": name,
        "seed": seed,
        "task": task,
        "settings": settings,
        "metrics": {key: value for key, value in metrics.items() if isinstance(value, (int, float))},
        "final_train_loss": losses[-1] if losses else None,
        "train_runtime": next((e["train_runtime"] for e in history if "train_runtime" in e), None),
    }
    return ctx.save(run_name, record)


def recipe(name: str, task: str) -> dict:
    """The task's fine-tuning recipe beyond the model's rate: mean pooling on sentence pairs for gMLP and aMLP."""
    return {"overrides": MEAN_POOLING} if name in ("gmlp", "amlp") and task == "mnli" else {}


def first_metric(record: dict) -> float:
    return record["metrics"][TASK_METRICS[record["task"]][0][1]]


def model_chain(ctx: Context, name: str) -> dict:
    """One model's fine-tuning runs: the SST-2 sweep, the rows (task -> row name -> the runs, seed by seed; a stopped
    run leaves whole seeds) and the probes' first-seed figures; what --report_only finds of them."""
    args, first = ctx.args, ctx.args.seeds[0]
    rates = args.finetune_learning_rates
    swept = ctx.parallel(lambda rate: ctx.available(finetune, ctx, "sst2", name, first, rate), rates)
    sweep = {rate: first_metric(run) for rate, run in zip(rates, swept) if run}
    out = {"sweep": {str(rate): value for rate, value in sweep.items()}, "rows": {}, "probes": {}}
    if len(sweep) < len(rates):
        return out
    ranked = sorted(sweep, key=sweep.get, reverse=True)
    rate = ranked[0]
    probes = PROBES.get(name, {})
    if name == "bert" and len(ranked) > 1:
        probes = {**probes, SECOND_RATE: {"learning_rate": ranked[1]}}
    adopted = {}
    for seed in args.seeds:
        for task in args.tasks:
            row = f"{name}, mean pooling" if recipe(name, task) else name
            if run := ctx.available(finetune, ctx, task, name, seed, **{"learning_rate": rate, **recipe(name, task)}):
                out["rows"].setdefault(task, {}).setdefault(row, []).append(run)
        if seed == first and probes:
            adopted = run_probes(ctx, name, rate, probes, out)
        for task, (probe, changes) in adopted.items():
            changes = {"learning_rate": rate, **recipe(name, task), **changes}
            if run := ctx.available(finetune, ctx, task, name, seed, **changes):
                out["rows"][task].setdefault(f"{name}, {probe}", []).append(run)
    return out


def run_probes(ctx: Context, name: str, rate: float, probes: dict, out: dict) -> dict:
    """The model's recipe probes on the first seed (into `out`); per task, the probe to run at every seed if one
    beats the recipe by ADOPT_GAIN or more."""
    adopted = {}
    for task in PROBE_TASKS:
        base = out["rows"].get(task, {}).get(name)
        results = {"none: the recipe": first_metric(base[0])} if base else {}
        for probe, changes in probes.items():
            run = ctx.available(finetune, ctx, task, name, ctx.args.seeds[0], **{"learning_rate": rate, **changes})
            if run:
                results[probe] = first_metric(run)
        for probe, value in results.items():
            out["probes"].setdefault(probe, {})[task] = value
        if base and results:
            winner = max(results, key=results.get)
            if results[winner] >= results["none: the recipe"] + ADOPT_GAIN:
                adopted[task] = (winner, probes[winner])
    return adopted
