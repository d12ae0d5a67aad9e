"""The report's tables, each a function of quality.json's results (its figures formatted, never recomputed), with
the title it has in the report and the results it needs."""

import numpy as np

from ..common import markdown_table
from .context import MODELS
from .finetuning import PROBE_TASKS, TASK_METRICS
from .parts import at_step, first_step_below

TASK_NAMES = {"sst2": "SST-2 (dev)", "mnli": "MNLI-m (dev split)", "squad": "SQuAD v1.1 (dev split)"}
# The summary's fine-tuning columns: (task, column, figure, scale)
SUMMARY_TASKS = (
    ("sst2", "SST-2 acc.", "accuracy", 100),
    ("mnli", "MNLI-m acc.", "accuracy", 100),
    ("squad", "SQuAD F1", "F1", 1),
)
# Table 3's MLM validation perplexities (about 100M parameters, the paper's own pretraining); BERT with relative
# position biases for the relative-position Transformers.
PAPER_TABLE3 = {"linear": 5.14, "additive": 4.97, "multiplicative": 4.53, "multiplicative_split": 4.35}  # SGUs
PAPER_TABLE3 |= {"bert": 4.37, "modernbert": 4.26, "deberta-v2": 4.26}  # the Transformers
LONG_CHANGE_STEPS = 1000  # the long runs' table: the perplexity's change over this many last steps (at most)
UNIGRAM = "training-split frequencies, add-one"
# name -> (title, table, the results it needs: keys of quality.json, "part.key" inside a part), in the report's order
SECTIONS = {}


def section(title: str, *needs: str):
    def add(table):
        SECTIONS[table.__name__] = (title, table, needs)
        return table

    return add


def rendered(results: dict) -> dict:
    """name -> markdown table, for every section whose results exist."""

    def found(path: str):
        part, _, key = path.partition(".")
        value = results.get(part)
        return value.get(key) if key and value else value

    return {name: table(results) for name, (_, table, needs) in SECTIONS.items() if all(map(found, needs))}


def mean_std(values: list[float], scale: float = 1.0) -> str:
    """`mean ± standard deviation (n=...)` of `values` x `scale` (the value alone when n = 1)."""
    values = [value * scale for value in values]
    if len(values) == 1:
        return f"{values[0]:.1f} (n=1)"
    return f"{np.mean(values):.1f} ± {np.std(values, ddof=1):.1f} (n={len(values)})"


def seed_by_seed(values: list, scale: float = 1.0) -> str:
    return " / ".join(f"{scale * value:.1f}" for value in values)


def steps_by_seed(steps: list) -> str:
    return " / ".join(str(step or "never") for step in steps)


def millions(count: int) -> str:
    return f"{count / 1e6:.2f}M"


def describe(recipe: dict) -> str:
    schedule = "constant" if recipe["lr_scheduler_type"].startswith("constant") else "linear decay"
    return f"lr {recipe['learning_rate']:g}, warm-up {recipe['warmup_steps']}, {schedule}"


def valid_floor(results: dict) -> float:
    return results["pretrain_reference"]["unigram"]["valid"]["perplexity"]


@section("The unigram floor (`pretrain_reference`)", "pretrain_reference")
def reference(results: dict) -> str:
    rows = [
        {
            "split": split,
            "unigram perplexity": f"{row['perplexity']:.1f}",
            "masked-token accuracy (%)": f"{100 * row['accuracy']:.1f}",
            "masked positions": f"{row['masked_tokens']:,}",
        }
        for split, row in results["pretrain_reference"]["unigram"].items()
    ]
    return markdown_table(rows)


@section("Seconds per step and per evaluation (one thread, side by side)", "step_time")
def step_time(results: dict) -> str:
    figures = results["step_time"]["models"]
    fastest = min(row["train_step_seconds"] for row in figures.values())
    rows = [
        {
            "model": name,
            "parameters": millions(row["parameters"]),
            "s / training step": f"{row['train_step_seconds']:.3f}",
            "relative": f"{row['train_step_seconds'] / fastest:.2f}x",
            "s / evaluation": f"{row['eval_seconds']:.1f}",
        }
        for name, row in figures.items()
    ]
    return markdown_table(rows)


@section("The pretraining recipe search (seed 0)", "search", "pretrain_reference")
def search(results: dict) -> str:
    """One row per search run: its recipe, the validation perplexity at the end, and the first evaluation at or
    below half and a quarter of the unigram perplexity (where the model leaves the plateau)."""
    rows = []
    for name, found in results["search"].items():
        mark = " **(chosen)**" if found["complete"] else " (best so far; search under way)"
        for run in found["runs"]:
            chosen = all(run[key] == value for key, value in found["chosen"].items())
            row = {"model": name, "recipe": describe(run) + (mark if chosen else "")}
            row["validation perplexity"] = f"{run['perplexity']:.1f}"
            for d in (2, 4):
                row[f"step at ≤ unigram / {d}"] = first_step_below(run["curve"], valid_floor(results) / d) or "never"
            rows.append(row)
    return markdown_table(rows)


@section("Pretraining at equal steps", "pretrain", "pretrain_derived")
def pretrain_steps(results: dict) -> str:
    floor = results["pretrain_reference"]["unigram"]
    derived = results["pretrain_derived"]["models"]
    rows = [
        {
            "model": name,
            "parameters": millions(row["parameters"]),
            "dropout": f"{row['dropout']:g}",
            "recipe": describe(row["recipe"]),
            "validation perplexity": mean_std(row["perplexities"]),
            "test perplexity": mean_std(row["test_perplexities"]),
            "masked-token accuracy, validation (%)": mean_std(row["accuracies"], 100),
            "validation, seed by seed": seed_by_seed(row["perplexities"]),
            **{
                f"first step at ≤ unigram / {d}": steps_by_seed(derived[name][f"first_step_at_unigram_over_{d}"])
                for d in (2, 4)
            },
        }
        for name, row in results["pretrain"].items()
    ]
    rows.append(
        {
            "model": "unigram (reference)",
            "recipe": UNIGRAM,
            "validation perplexity": f"{floor['valid']['perplexity']:.1f}",
            "test perplexity": f"{floor['test']['perplexity']:.1f}",
            "masked-token accuracy, validation (%)": f"{100 * floor['valid']['accuracy']:.1f}",
        }
    )
    return markdown_table(rows)


@section("Pretraining at equal wall-clock time", "pretrain", "step_time", "pretrain_derived")
def pretrain_time(results: dict) -> str:
    times = results["step_time"]["models"]
    derived = results["pretrain_derived"]
    rows = [
        {
            "model": name,
            "parameters": millions(row["parameters"]),
            "s / step": f"{times[name]['train_step_seconds']:.3f}",
            "steps in the budget": f"{derived['models'][name]['equal_time_steps']:,.0f}",
            "validation perplexity": mean_std(derived["models"][name]["equal_time_perplexities"]),
        }
        for name, row in results["pretrain"].items()
        if name in times
    ]
    rows.append({"model": "unigram (reference)", "validation perplexity": f"{valid_floor(results):.1f}"})
    budget = f"Budget: {derived['equal_time_budget_seconds'] / 60:.1f} minutes of training on one thread"
    return f"{budget} (evaluations not counted).\n\n{markdown_table(rows)}"


def change(curve: list, over: int) -> float:
    """The relative change of the perplexity over the curve's last `over` steps (negative: still falling)."""
    return curve[-1][1] / at_step(curve, curve[-1][0] - over) - 1


@section("Longer pretraining at a constant rate (seed 0)", "long", "pretrain_reference")
def long(results: dict) -> str:
    """Per model: the validation perplexity at each multiple of the tables' step count, its change over the last
    LONG_CHANGE_STEPS steps (at most those past that count), where it leaves the plateau, the test perplexity."""
    floor, settings = results["pretrain_reference"]["unigram"], results["settings"]
    marks = range(settings["max_steps"], settings["long_steps"] + 1, settings["max_steps"])
    over = min(LONG_CHANGE_STEPS, settings["long_steps"] - settings["max_steps"])
    test = f"test ppl, step {settings['long_steps']:,}"
    rows = [
        {
            "model": name,
            "recipe": describe(row["recipe"]),
            **{f"valid ppl, step {mark:,}": f"{at_step(row['curve'], mark):.1f}" for mark in marks},
            f"change over the last {over:,} steps": f"{100 * change(row['curve'], over):+.1f}%",
            "step at ≤ unigram / 4": first_step_below(row["curve"], valid_floor(results) / 4) or "never",
            test: f"{row['test_perplexity']:.1f}",
        }
        for name, row in results["long"].items()
    ]
    unigram = {f"valid ppl, step {mark:,}": f"{floor['valid']['perplexity']:.1f}" for mark in marks}
    rows.append(
        {"model": "unigram (reference)", "recipe": UNIGRAM, **unigram, test: f"{floor['test']['perplexity']:.1f}"}
    )
    return markdown_table(rows)


@section("Fine-tuning rate: SST-2 dev accuracy (%), seed 0", "finetune.sweep")
def finetune_rate(results: dict) -> str:
    sweep = results["finetune"]["sweep"]
    rates = sorted({float(rate) for row in sweep.values() for rate in row})
    rows = []
    for name, by_rate in sweep.items():
        row, best = {"model": name}, max(by_rate.values())
        for rate in rates:
            value = by_rate.get(str(rate))
            row[f"lr {rate:g}"] = "–" if value is None else f"{100 * value:.1f}" + (" (best)" if value == best else "")
        rows.append(row)
    return markdown_table(rows)


@section("Fine-tuning, each model at its best rate", "finetune.tasks")
def finetune(results: dict) -> str:
    rows = []
    for task, by_row in results["finetune"]["tasks"].items():
        scale, labels = 1 if task == "squad" else 100, [label for label, _ in TASK_METRICS[task]]
        for row, figures in by_row.items():
            metrics = ", ".join(f"{label} {mean_std(figures[label], scale)}" for label in labels)
            rows.append(
                {
                    "task": TASK_NAMES[task],
                    "model": row,
                    "lr": f"{figures['learning_rate']:g}",
                    "held-out metrics (%)": metrics,
                    "first metric, seed by seed": seed_by_seed(figures[labels[0]], scale),
                }
            )
    return markdown_table(rows)


@section("The transformers' fine-tuning recipe probes (seed 0), accuracy (%)", "finetune.probes")
def finetune_probes(results: dict) -> str:
    rows = [
        {
            "model": name,
            "probe": probe,
            **{TASK_NAMES[t]: f"{100 * by_task[t]:.1f}" if t in by_task else "–" for t in PROBE_TASKS},
        }
        for name, probes in results["finetune"]["probes"].items()
        for probe, by_task in probes.items()
    ]
    return markdown_table(rows)


@section("Table 3: the SGU variants and the Transformer rows", "sgu")
def sgu(results: dict) -> str:
    transformers = {f"transformer: {name}": row for name, row in results["sgu"]["transformers"].items()}
    rows = [
        {
            "variant": variant,
            "d_ffn": row["intermediate_size"],
            "parameters": millions(row["parameters"]),
            "validation perplexity": mean_std(row["perplexities"]),
            "test perplexity": mean_std(row["test_perplexities"]),
            "validation, seed by seed": seed_by_seed(row["perplexities"]),
            "paper (Table 3)": f"{PAPER_TABLE3.get(variant.removeprefix('transformer: '), '–')}",
        }
        for variant, row in {**transformers, **results["sgu"]["variants"]}.items()
    ]
    return markdown_table(rows)


def task_cell(rows: dict, name: str, key: str, scale: float) -> str:
    """The model's figure on a task: its recipe's row, or the probe adopted in its place (the rows after the recipe's
    are adopted probes, run at every seed because they beat it), named."""
    found = [(row_name, figures) for row_name, figures in rows.items() if row_name.split(",")[0] == name]
    if not found:
        return "not run yet"
    row_name, figures = found[-1]
    return mean_std(figures[key], scale) + (f", {row_name.split(', ', 1)[1]}" if len(found) > 1 else "")


@section("Summary", "pretrain", "step_time", "pretrain_derived")
def summary(results: dict) -> str:
    """The summary table (docs/quality.md): per model, pretraining at equal steps and time, where each seed leaves the plateau, and
    the fine-tuning means ("–" for the dropout variants, which are pretrained only)."""
    derived = results["pretrain_derived"]
    tasks = results.get("finetune", {}).get("tasks", {})
    at_steps = f"valid ppl, {max(row['max_steps'] for row in results['pretrain'].values()):,} steps"
    at_time = f"valid ppl, {derived['equal_time_budget_seconds'] / 60:.0f} min"
    rows = []
    for name, row in results["pretrain"].items():
        equal_time = derived["models"][name].get("equal_time_perplexities")
        cells = {
            "model": name,
            "parameters": millions(row["parameters"]),
            "dropout": f"{row['dropout']:g}",
            at_steps: mean_std(row["perplexities"]),
            at_time: mean_std(equal_time) if equal_time else "–",
            "test ppl": mean_std(row["test_perplexities"]),
            "step at ≤ unigram / 2": steps_by_seed(derived["models"][name]["first_step_at_unigram_over_2"]),
        }
        for task, column, key, scale in SUMMARY_TASKS:
            cells[column] = task_cell(tasks.get(task, {}), name, key, scale) if name in MODELS else "–"
        rows.append(cells)
    floor = results["pretrain_reference"]["unigram"]
    unigram = f"{floor['valid']['perplexity']:.1f}"
    rows.append(
        {"model": "unigram", at_steps: unigram, at_time: unigram, "test ppl": f"{floor['test']['perplexity']:.1f}"}
    )
    return markdown_table(rows)


@section("The runs' time on this machine", "runtime")
def runtime(results: dict) -> str:
    parts = {**results["runtime"]}
    parts["total"] = {key: sum(row[key] for row in parts.values()) for key in ("runs", "hours")}
    rows = [
        {"runs of": part, "records": row["runs"], "training time, summed (h)": f"{row['hours']:.1f}"}
        for part, row in parts.items()
    ]
    return markdown_table(rows)
