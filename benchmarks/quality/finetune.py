"""Part `finetune`: each model's pretrained checkpoints fine-tuned by run_glue.py / run_squad.py.

- the rate: SST-2 at each --finetune_learning_rates (first seed); every task then uses the model's best one;
- SST-2, MNLI-m (dev split) and SQuAD v1.1 (dev split) at every seed, each seed's checkpoint with that seed; on
  sentence pairs gMLP and aMLP pool the mean of the tokens (the recipe an earlier round of probes found: with the
  first token they stayed at MNLI's majority class), BERT its first token (what its head does);
- the transformers' recipe probes (first seed, SST-2 and MNLI): BERT's, the changes its head allows (no dropout, 30%
  warm-up, its second-best rate); ModernBERT's, its head's other pooling (the mean of the tokens, where its default
  is the first token: the probe gMLP's pooling got). A probe that beats the model's recipe by a point or more on a
  task is run at every seed as a row of its own, as mean pooling was for the MLP models.
"""

from ..common import markdown_table
from .context import PRIORITY, Context
from .curves import mean_std
from .mlm_runs import pretrain
from .runs import MissingRun, settings_key, trainer_outputs

TASKS = ("sst2", "mnli", "squad")
TASK_NAMES = {"sst2": "SST-2 (dev)", "mnli": "MNLI-m (dev split)", "squad": "SQuAD v1.1 (dev split)"}
TASK_METRICS = {
    "sst2": [("accuracy", "eval_accuracy")],
    "mnli": [("accuracy", "eval_accuracy")],
    "squad": [("EM", "eval_exact_match"), ("F1", "eval_f1")],
}
PAIR_TASKS = ("mnli",)
MEAN_POOLING = "classifier_pooling=mean"
PROBE_TASKS = ("sst2", "mnli")
BERT_PROBES = {"no dropout": {"overrides": "hidden_dropout_prob=0.0"}, "warm-up 30% of steps": {"warmup_ratio": 0.3}}
MODERNBERT_PROBES = {"mean pooling": {"overrides": MEAN_POOLING}}
MLP_MODELS = ("gmlp", "amlp")  # mean pooling on sentence pairs is their recipe
SECOND_RATE = "its second-best SST-2 rate"
ADOPT_GAIN = 0.01


def finetune(
    ctx: Context,
    task: str,
    name: str,
    seed: int,
    learning_rate: float,
    overrides: str | None = None,
    warmup_ratio: float = 0.1,
) -> dict:
    """The record of the model's seed-`seed` checkpoint fine-tuned on `task` with the same seed (the spread over
    seeds covers both stages): held-out metrics and the last training loss."""
    args = ctx.args
    pretrained = pretrain(ctx, name, seed)
    settings = {
        "pretrained": pretrained["checkpoint"].rsplit("/", 1)[-1],
        "task": task,
        "steps": args.finetune_steps,
        "learning_rate": learning_rate,
        "warmup_ratio": warmup_ratio,
        "batch_size": 32,
        "overrides": overrides,
    }
    run_name = f"finetune-{task}-{name}-{settings_key(settings)}-seed{seed}"
    if record := ctx.records.read(run_name):
        return record
    if args.report_only:
        raise MissingRun(run_name)
    checkpoint = pretrain(ctx, name, seed, need_checkpoint=True)["checkpoint"]
    output = args.work_dir / run_name
    common = {
        "model_name_or_path": checkpoint,
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
    if task == "sst2":
        script, data = "run_glue.py", {"task_name": task, "glue_dir": args.data / "glue"}
    elif task == "mnli":
        files = {
            "train_file": ctx.data / "mnli" / "train.jsonl",
            "validation_file": ctx.data / "mnli" / "validation.jsonl",
        }
        script, data = "run_glue.py", {"task_name": "mnli", **files}
    else:
        files = {
            "train_file": ctx.data / "squad" / "train.json",
            "validation_file": ctx.data / "squad" / "validation.json",
        }
        script, data = "run_squad.py", {**files, "doc_stride": 32}
    ctx.run.script(script, {**data, **common}, run_name, PRIORITY["finetune"])
    metrics, history = trainer_outputs(output)
    losses = [entry["loss"] for entry in history if "loss" in entry]
    return ctx.records.write(
        run_name,
        {
            "kind": "finetune",
            "model": name,
            "seed": seed,
            "task": task,
            "settings": settings,
            "metrics": {key: value for key, value in metrics.items() if isinstance(value, (int, float))},
            "final_train_loss": losses[-1] if losses else None,
            "train_runtime": next((e["train_runtime"] for e in history if "train_runtime" in e), None),
        },
    )


def recipe(name: str, task: str) -> dict:
    """The task's fine-tuning recipe for the model beyond its rate."""
    return {"overrides": MEAN_POOLING} if name in MLP_MODELS and task in PAIR_TASKS else {}


def first_metric(record: dict) -> float:
    return record["metrics"][TASK_METRICS[record["task"]][0][1]]


def model_chain(ctx: Context, name: str) -> dict:
    """One model's fine-tuning runs, seed by seed (a stopped run leaves whole seeds); what --report_only finds."""
    args = ctx.args
    first = args.seeds[0]
    sweep = {}
    for rate, run in zip(
        args.finetune_learning_rates,
        ctx.parallel(lambda r: ctx.available(finetune, ctx, "sst2", name, first, r), args.finetune_learning_rates),
    ):
        if run:
            sweep[rate] = first_metric(run)
    out = {"sweep": {str(rate): value for rate, value in sweep.items()}, "rows": {}, "probes": {}}
    if len(sweep) < len(args.finetune_learning_rates):
        return out
    ranked = sorted(sweep, key=sweep.get, reverse=True)
    rate = out["learning_rate"] = ranked[0]
    probes = {"bert": {**BERT_PROBES, SECOND_RATE: {"learning_rate": ranked[1]}}, "modernbert": MODERNBERT_PROBES}
    probes = probes.get(name, {})
    adopted = {}
    for seed in args.seeds:
        for task in args.tasks:
            row = f"{name}, mean pooling" if recipe(name, task) else name
            changes = {"learning_rate": rate, **recipe(name, task)}
            if run := ctx.available(finetune, ctx, task, name, seed, **changes):
                out["rows"].setdefault(task, {}).setdefault(row, []).append(run)
        if seed == first and probes:
            adopted = run_probes(ctx, name, rate, probes, out)
        for task, (probe, probe_changes) in adopted.items():
            changes = {"learning_rate": rate, **recipe(name, task), **probe_changes}
            if run := ctx.available(finetune, ctx, task, name, seed, **changes):
                out["rows"][task].setdefault(f"{name}, {probe}", []).append(run)
    return out


def run_probes(ctx: Context, name: str, rate: float, probes: dict, out: dict) -> dict:
    """The model's recipe probes on the first seed (into `out`); per task, the probe to run at every seed if one
    beats the recipe by ADOPT_GAIN or more."""
    first = ctx.args.seeds[0]
    adopted = {}
    for task in PROBE_TASKS:
        base = out["rows"].get(task, {}).get(name)
        results = {"none: the recipe": first_metric(base[0])} if base else {}
        for probe, changes in probes.items():
            if run := ctx.available(finetune, ctx, task, name, first, **{"learning_rate": rate, **changes}):
                results[probe] = first_metric(run)
        for probe, value in results.items():
            out["probes"].setdefault(probe, {})[task] = value
        if base and results:
            winner = max(results, key=results.get)
            if results[winner] >= results["none: the recipe"] + ADOPT_GAIN:
                adopted[task] = (winner, probes[winner])
    return adopted


def measure(ctx: Context, models: list[str]) -> dict:
    chains = dict(zip(models, ctx.parallel(lambda name: model_chain(ctx, name), models)))
    tasks = {}
    for chain in chains.values():
        for task, rows in chain["rows"].items():
            for row, runs in rows.items():
                tasks.setdefault(task, {})[row] = {
                    "learning_rate": runs[0]["settings"]["learning_rate"],
                    "overrides": runs[0]["settings"]["overrides"],
                    "warmup_ratio": runs[0]["settings"]["warmup_ratio"],
                    "seeds": [run["seed"] for run in runs],
                    **{label: [run["metrics"][key] for run in runs] for label, key in TASK_METRICS[task]},
                    "final_train_loss": [run["final_train_loss"] for run in runs],
                }
    return {
        "sweep": {name: chain["sweep"] for name, chain in chains.items() if chain["sweep"]},
        "tasks": {task: tasks[task] for task in TASKS if task in tasks},
        "probes": {name: chain["probes"] for name, chain in chains.items() if chain["probes"]},
    }


def render_sweep(results: dict) -> str:
    sweep = results["finetune"]["sweep"]
    rates = sorted({float(rate) for row in sweep.values() for rate in row})
    rows = []
    for name, by_rate in sweep.items():
        top = max(by_rate.values())
        cells = {
            f"lr {rate:g}": "–"
            if str(rate) not in by_rate
            else f"{100 * by_rate[str(rate)]:.1f}" + (" (best)" if by_rate[str(rate)] == top else "")
            for rate in rates
        }
        rows.append({"model": name, **cells})
    return markdown_table(rows)


def render_tasks(results: dict) -> str:
    rows = []
    for task, by_row in results["finetune"]["tasks"].items():
        scale = 1 if task == "squad" else 100
        for row, figures in by_row.items():
            rows.append(
                {
                    "task": TASK_NAMES[task],
                    "model": row,
                    "lr": f"{figures['learning_rate']:g}",
                    "held-out metrics (%)": ", ".join(
                        f"{label} {mean_std(figures[label], scale)}" for label, _ in TASK_METRICS[task]
                    ),
                    "first metric, seed by seed": " / ".join(
                        f"{scale * value:.1f}" for value in figures[TASK_METRICS[task][0][0]]
                    ),
                }
            )
    return markdown_table(rows)


def render_probes(results: dict) -> str:
    rows = []
    for name, probes in results["finetune"]["probes"].items():
        for probe, by_task in probes.items():
            cells = {TASK_NAMES[t]: f"{100 * by_task[t]:.1f}" if t in by_task else "–" for t in PROBE_TASKS}
            rows.append({"model": name, "probe": probe, **cells})
    return markdown_table(rows)
