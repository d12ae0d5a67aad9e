"""Each part's results in quality.json, made of its runs' records (a run made first where it has none, or, with
--report_only, left out and named), and the figures derived from them."""

import json
import math

import numpy as np

from . import context
from .context import DROPOUT_VARIANTS, TABLE3_TRANSFORMERS, Context, config_parameters, dropout_of, pick
from .finetuning import TASK_METRICS, TASKS, model_chain
from .pretraining import RECIPE_FIELDS, SEARCH_SCHEDULE, best, final_recipe, pretrain, search
from .reference import reference_part, step_time_part

# a run record's field -> the seed-by-seed list of the parts' rows
SEED_FIELDS = {
    "perplexity": "perplexities",
    "accuracy": "accuracies",
    "test_perplexity": "test_perplexities",
    "test_accuracy": "test_accuracies",
    "curve": "curves",
    "accuracy_curve": "accuracy_curves",
    "train_loss_curve": "train_loss_curves",
}
# Options that do not decide a figure: left out of quality.json's settings.
NOT_SETTINGS = {"parts", "jobs", "data", "work_dir", "output", "no_docs", "report_only"}
# the records' parts in the runtime table, in the order the parts run
RUN_PARTS = ("search and final pretraining", "long runs", "fine-tuning", "SGU variants")


def per_name(ctx: Context, one, names: list) -> dict:
    """name -> `one(name)` in threads, the names without a result left out."""
    return {name: row for name, row in zip(names, ctx.parallel(one, names)) if row}


def seed_runs(ctx: Context, name: str, recipe=None, config=None) -> list[dict]:
    """The records of `name`'s pretraining at every seed (those found, with --report_only)."""
    runs = [ctx.available(pretrain, ctx, name, seed, recipe, config) for seed in ctx.args.seeds]
    return [run for run in runs if run]


def by_seed(runs: list[dict], fields=tuple(SEED_FIELDS)) -> dict:
    return {"seeds": [run["seed"] for run in runs], **{SEED_FIELDS[key]: [run[key] for run in runs] for key in fields}}


def search_part(ctx: Context) -> dict:
    """Per model: every search run (recipe, figures, curve) and the chosen recipe (or the best so far)."""

    def one(name):
        runs, complete = search(ctx, name)
        figures = ("perplexity", "accuracy", "test_perplexity", "curve")
        return runs and {
            "complete": complete,
            "runs": [{**pick(run["settings"], (*RECIPE_FIELDS, "max_steps")), **pick(run, figures)} for run in runs],
            "chosen": pick(best(runs)["settings"], RECIPE_FIELDS),
        }

    return per_name(ctx, one, ctx.models)


def pretrain_part(ctx: Context) -> dict:
    """Per model, then per dropout variant: its recipe, dropout and, seed by seed, every figure of its runs."""

    def one(name):
        runs = seed_runs(ctx, name)
        return runs and {
            "parameters": config_parameters(ctx.configs[name]),
            "dropout": dropout_of(ctx.configs[name]),
            "recipe": pick(runs[0]["settings"], RECIPE_FIELDS),
            "max_steps": runs[0]["settings"]["max_steps"],
            **by_seed(runs),
        }

    variants = [variant for variant, (name, _) in DROPOUT_VARIANTS.items() if name in ctx.models]
    return per_name(ctx, one, [*ctx.models, *variants])


def long_recipe(ctx: Context, name: str) -> dict:
    """The model's chosen rate and warm-up, constant after the warm-up, --long_steps steps."""
    return {**final_recipe(ctx, name), "lr_scheduler_type": SEARCH_SCHEDULE, "max_steps": ctx.args.long_steps}


def long_part(ctx: Context) -> dict:
    """Per model: the long run's recipe, steps, final validation and test figures, and its curves (first seed)."""

    def one(name):
        recipe = ctx.available(long_recipe, ctx, name)
        run = recipe and ctx.available(pretrain, ctx, name, ctx.args.seeds[0], recipe)
        fields = ("seed", "perplexity", "test_perplexity", "accuracy", "curve", "accuracy_curve")
        return run and {"recipe": pick(recipe, RECIPE_FIELDS), "max_steps": recipe["max_steps"], **pick(run, fields)}

    return per_name(ctx, one, ctx.models)


def sgu_recipe(ctx: Context, name: str) -> dict:
    """`name`'s chosen recipe at --sgu_steps (its warm-up scaled with them)."""
    recipe, steps = final_recipe(ctx, name), ctx.args.sgu_steps
    if steps == ctx.args.max_steps:
        return recipe
    return {**recipe, "warmup_steps": round(recipe["warmup_steps"] * steps / ctx.args.max_steps), "max_steps": steps}


def sgu_part(ctx: Context) -> dict:
    """Table 3 at --sgu_steps, every seed: the SGU variants with gMLP's recipe (when gMLP is asked for), and the
    Transformer rows of the models asked for, each with its recipe model's (DeBERTa-v2 comes with BERT)."""
    recipe = ctx.available(sgu_recipe, ctx, "gmlp") if "gmlp" in ctx.models else None
    variants = context.sgu_configs() if recipe else {}
    transformers = context.table3_transformer_configs()
    transformers = {name: config for name, config in transformers.items() if TABLE3_TRANSFORMERS[name] in ctx.models}

    def row(name, config, row_recipe, **extra):
        runs = seed_runs(ctx, name, row_recipe, config)
        return runs and {
            "parameters": config_parameters(config),
            "intermediate_size": config.intermediate_size,
            **extra,
            **by_seed(runs, ("perplexity", "test_perplexity", "curve")),
        }

    def variant(name):
        # The default variant at gMLP's shape is gMLP itself: its runs are named as the pretraining part's.
        config = variants[name]
        run_name = "gmlp" if config.to_dict() == ctx.configs["gmlp"].to_dict() else f"sgu-{name.replace(', ', '-')}"
        return row(run_name, config, recipe)

    def transformer(name):
        row_recipe = ctx.available(sgu_recipe, ctx, TABLE3_TRANSFORMERS[name])
        return row_recipe and row(name, transformers[name], row_recipe, recipe_of=TABLE3_TRANSFORMERS[name])

    found = {
        "recipe": recipe,
        "variants": per_name(ctx, variant, list(variants)),
        "transformers": per_name(ctx, transformer, list(transformers)),
    }
    return found if found["variants"] or found["transformers"] else {}


def finetune_part(ctx: Context) -> dict:
    """The SST-2 sweeps, per task the rows' settings and seed-by-seed figures, and the probes' figures."""
    chains = dict(zip(ctx.models, ctx.parallel(lambda name: model_chain(ctx, name), ctx.models)))
    tasks = {}
    for chain in chains.values():
        for task, rows in chain["rows"].items():
            for row, runs in rows.items():
                tasks.setdefault(task, {})[row] = {
                    **pick(runs[0]["settings"], ("learning_rate", "overrides", "warmup_ratio")),
                    "seeds": [run["seed"] for run in runs],
                    **{label: [run["metrics"][key] for run in runs] for label, key in TASK_METRICS[task]},
                    "final_train_loss": [run["final_train_loss"] for run in runs],
                }
    return {
        "sweep": {name: chain["sweep"] for name, chain in chains.items() if chain["sweep"]},
        "tasks": {task: tasks[task] for task in TASKS if task in tasks},
        "probes": {name: chain["probes"] for name, chain in chains.items() if chain["probes"]},
    }


# part -> (its results' key in quality.json, the function that makes its runs and returns its results), in the
# order they run: the in-process measurements first, then the runs that answer the main questions first.
PARTS = {
    "reference": ("pretrain_reference", reference_part),
    "step_time": ("step_time", step_time_part),
    "search": ("search", search_part),
    "pretrain": ("pretrain", pretrain_part),
    "long": ("long", long_part),
    "finetune": ("finetune", finetune_part),
    "sgu": ("sgu", sgu_part),
}


def first_step_below(curve: list, level: float) -> int | None:
    """The first evaluated step whose perplexity is at or below `level` (None if none is)."""
    return next((step for step, value in curve if value <= level), None)


def at_step(curve: list, step: float) -> float:
    """The perplexity at `step`, interpolated linearly in log-perplexity between the evaluations around it."""
    steps, values = zip(*curve)
    if not steps[0] <= step <= steps[-1]:
        raise ValueError(f"step {step:.0f} is outside the curve's evaluations ({steps[0]} to {steps[-1]})")
    return math.exp(np.interp(step, steps, np.log(values)))


def derive(results: dict) -> dict:
    """Read off the curves, seed by seed: each run's first step at half and a quarter of the unigram perplexity, and
    its perplexity at the equal-time budget (the fastest model's full run), interpolated at the steps it buys."""
    floor = results["pretrain_reference"]["unigram"]["valid"]["perplexity"]
    derived = {
        name: {
            f"first_step_at_unigram_over_{d}": [first_step_below(curve, floor / d) for curve in row["curves"]]
            for d in (2, 4)
        }
        for name, row in results["pretrain"].items()
    }
    measured = results.get("step_time", {}).get("models", {})
    times = {name: measured[name]["train_step_seconds"] for name in results["pretrain"] if name in measured}
    if not times:
        return {"models": derived}
    budget = min(results["pretrain"][name]["max_steps"] * seconds for name, seconds in times.items())
    for name, seconds in times.items():
        row = results["pretrain"][name]
        steps = min(budget / seconds, row["max_steps"])  # the budget's own model: its full run, unrounded
        derived[name]["equal_time_steps"] = steps
        derived[name]["equal_time_perplexities"] = [at_step(curve, steps) for curve in row["curves"]]
    return {"equal_time_budget_seconds": budget, "models": derived}


def run_part(name: str, record: dict, args) -> str:
    """The part a record's run belongs to, by its name and length (gMLP's own run name is also the SGU part's)."""
    if record["kind"] == "finetune":
        return "fine-tuning"
    steps = record["settings"]["max_steps"]
    if name.startswith("pretrain-sgu-") or steps == args.sgu_steps != args.max_steps:
        return "SGU variants"
    if steps == args.long_steps != args.max_steps:
        return "long runs"
    return "search and final pretraining"


def runtimes(ctx: Context) -> dict:
    """Per part: how many records and their training time as the Trainer measured it (wall-clock), summed exactly."""
    seconds = {}
    for path in ctx.records.glob("*.json"):
        record = json.loads(path.read_text())
        if record.get("train_runtime") is not None:
            seconds.setdefault(run_part(path.stem, record, ctx.args), []).append(record["train_runtime"])
    ordered = {part: seconds[part] for part in RUN_PARTS if part in seconds}
    return {part: {"runs": len(times), "hours": math.fsum(times) / 3600} for part, times in ordered.items()}


def collect(ctx: Context) -> dict:
    """Every part's results from the records (a missing run left out, named), the derived figures, the runs' time."""
    ctx.args.report_only = True
    results = {"settings": {key: value for key, value in vars(ctx.args).items() if key not in NOT_SETTINGS}}
    for key, part in PARTS.values():
        if found := ctx.available(part, ctx):
            results[key] = found
    if "pretrain" in results and "pretrain_reference" in results:
        results["pretrain_derived"] = derive(results)
    if runtime := runtimes(ctx):
        results["runtime"] = runtime
    return results
