"""The report: quality.md (every table), the curves' plots, and the generated tables inside docs/quality.md and the
README (between `<!-- quality:NAME -->` and `<!-- /quality:NAME -->` markers; the prose around them is written by
hand from the same records)."""

import json
import math
import re
from pathlib import Path

from ..common import markdown_table
from . import finetune, long, pretrain, reference, search, sgu, step_time
from .curves import mean_std
from .models import MODELS
from .runs import ROOT

PAGES = (ROOT / "docs" / "quality.md", ROOT / "README.md")  # the pages with generated tables


def summary(results: dict) -> str:
    """The README's table: per model, pretraining at equal steps and time, where each seed's curve leaves the plateau
    (its first evaluation at or below half the unigram perplexity), and the fine-tuning means ("–" for the dropout
    variants, which are pretrained only)."""
    derived = results["pretrain_derived"]
    tasks = results.get("finetune", {}).get("tasks", {})
    steps = max(row["max_steps"] for row in results["pretrain"].values())
    at_steps = f"valid ppl, {steps:,} steps"
    at_time = f"valid ppl, {derived['equal_time_budget_seconds'] / 60:.0f} min"
    floor = results["pretrain_reference"]["unigram"]
    rows = []
    for name, row in results["pretrain"].items():
        cells = {
            "model": name,
            "parameters": f"{row['parameters'] / 1e6:.2f}M",
            "dropout": f"{row['dropout']:g}" if "dropout" in row else "–",
            at_steps: mean_std(row["perplexities"]),
            at_time: mean_std(at_time_values)
            if (at_time_values := derived["models"][name].get("equal_time_perplexities"))
            else "–",
            "test ppl": mean_std(row["test_perplexities"]),
            "step at ≤ unigram / 2": " / ".join(
                str(step or "never") for step in derived["models"][name]["first_step_at_unigram_over_2"]
            ),
        }
        for task, label, key, scale in SUMMARY_TASKS:
            cells[label] = task_cell(tasks.get(task, {}), name, key, scale) if name in MODELS else "–"
        rows.append(cells)
    unigram = f"{floor['valid']['perplexity']:.1f}"
    rows.append(
        {"model": "unigram", at_steps: unigram, at_time: unigram, "test ppl": f"{floor['test']['perplexity']:.1f}"}
    )
    table = markdown_table(rows)
    searching = [name for name in results.get("search", {}) if name not in results["pretrain"]]
    if searching:
        table += f"\n\nNot in the table yet (recipe search or final runs under way): {', '.join(searching)}."
    return table


def task_cell(rows: dict, name: str, key: str, scale: float) -> str:
    """The model's figure on a task: its recipe's row, or the probe adopted in its place (the rows after the recipe's
    are adopted probes, run at every seed because they beat it), named."""
    found = [(row_name, figures) for row_name, figures in rows.items() if row_name.split(",")[0] == name]
    if not found:
        return "not run yet"
    row_name, figures = found[-1]
    adopted = f", {row_name.split(', ', 1)[1]}" if len(found) > 1 else ""
    return mean_std(figures[key], scale) + adopted


SUMMARY_TASKS = (
    ("sst2", "SST-2 acc.", "accuracy", 100),
    ("mnli", "MNLI-m acc.", "accuracy", 100),
    ("squad", "SQuAD F1", "F1", 1),
)


RUN_PARTS = ("search and final pretraining", "long runs", "fine-tuning", "SGU variants")  # the slots' priority order


def run_part(name: str, record: dict, args) -> str:
    """The part a record's run belongs to, from its name and its length (the SGU part's split variant at gMLP's
    shape is gMLP's own run name, at --sgu_steps)."""
    if record["kind"] == "finetune":
        return "fine-tuning"
    steps = record["settings"]["max_steps"]
    if name.startswith("pretrain-sgu-") or steps == args.sgu_steps != args.max_steps:
        return "SGU variants"
    if steps == args.long_steps != args.max_steps:
        return "long runs"
    return "search and final pretraining"


def runtimes(folder: Path, args) -> dict:
    """Per part (search and final pretraining, long runs, fine-tuning, SGU variants): how many records and their
    summed training time as the Trainer measured it (two runs at a time beside other work: wall-clock, not CPU
    time)."""
    parts = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("train_runtime") is None:
            continue
        row = parts.setdefault(run_part(path.stem, record, args), {"runs": 0, "hours": 0.0})
        row["runs"] += 1
        row["hours"] += record["train_runtime"] / 3600
    return {part: parts[part] for part in RUN_PARTS if part in parts}


def render_runtime(results: dict) -> str:
    rows = [
        {"runs of": part, "records": row["runs"], "training time, summed (h)": f"{row['hours']:.1f}"}
        for part, row in results["runtime"].items()
    ]
    runs = sum(row["runs"] for row in results["runtime"].values())
    hours = sum(row["hours"] for row in results["runtime"].values())
    rows.append({"runs of": "total", "records": runs, "training time, summed (h)": f"{hours:.1f}"})
    return markdown_table(rows)


# name -> (title, render function, the results it needs)
SECTIONS = {
    "reference": ("The unigram floor (`pretrain_reference`)", reference.render, ("pretrain_reference",)),
    "step_time": ("Seconds per step and per evaluation (one thread, side by side)", step_time.render, ("step_time",)),
    "search": ("The pretraining recipe search (seed 0)", search.render, ("search", "pretrain_reference")),
    "pretrain_steps": ("Pretraining at equal steps", pretrain.render_equal_steps, ("pretrain", "pretrain_derived")),
    "pretrain_time": (
        "Pretraining at equal wall-clock time",
        pretrain.render_equal_time,
        ("pretrain", "step_time", "pretrain_derived"),
    ),
    "long": (
        "Longer pretraining at a constant rate (seed 0)",
        long.render,
        ("long", "pretrain_reference"),
    ),
    "finetune_rate": ("Fine-tuning rate: SST-2 dev accuracy (%), seed 0", finetune.render_sweep, ("finetune",)),
    "finetune": ("Fine-tuning, each model at its best rate", finetune.render_tasks, ("finetune",)),
    "finetune_probes": (
        "The transformers' fine-tuning recipe probes (seed 0), accuracy (%)",
        finetune.render_probes,
        ("finetune",),
    ),
    "sgu": ("Table 3: the SGU variants and the Transformer rows", sgu.render, ("sgu",)),
    "summary": ("Summary", summary, ("pretrain", "step_time", "pretrain_derived")),
    "runtime": ("The runs' time on this machine", render_runtime, ("runtime",)),
}


def ready(results: dict, needs: tuple) -> bool:
    return all(results.get(key) for key in needs)


def tables(results: dict) -> dict:
    """name -> markdown table, for every section whose results exist."""
    out = {}
    for name, (_, render, needs) in SECTIONS.items():
        if not ready(results, needs):
            continue
        if name == "finetune_rate" and not results["finetune"].get("sweep"):
            continue
        if name == "finetune" and not results["finetune"].get("tasks"):
            continue
        if name == "finetune_probes" and not results["finetune"].get("probes"):
            continue
        if name == "sgu" and not (results["sgu"].get("variants") or results["sgu"].get("transformers")):
            continue
        out[name] = render(results)
    return out


def markdown(results: dict, rendered: dict) -> str:
    s = results["settings"]
    lines = [
        (
            f"Pretraining: WikiText-2 train, {s['max_steps']} steps x batch {s['batch_size']} x 128 tokens; validation "
            f"on {s['max_eval_samples']} sequences of valid (fixed mask), test on as many of test; fine-tuning "
            f"{s['finetune_steps']} steps x batch 32; seeds {s['seeds']}; mean ± standard deviation."
        ),
        "",
    ]
    for name, table in rendered.items():
        lines += [f"### {SECTIONS[name][0]}", "", table, ""]
    return "\n".join(lines)


def page_tables(rendered: dict) -> dict:
    """The tables the pages show: the rendered ones, and until any model's final runs exist, where the search stands
    in place of the summary."""
    if "summary" in rendered or "search" not in rendered:
        return rendered
    floor = [rendered["reference"], ""] if "reference" in rendered else []
    interim = ["Under way: the unigram floor and the recipe search so far (seed 0).", "", *floor, rendered["search"]]
    return {**rendered, "summary": "\n".join(interim)}


def filled(text: str, rendered: dict) -> str:
    """`text` with the part between each `<!-- quality:NAME -->` / `<!-- /quality:NAME -->` pair replaced by the
    table NAME (left as it is where that table is not measured yet)."""
    for name, table in rendered.items():
        pattern = re.compile(rf"(<!-- quality:{name} -->\n).*?(<!-- /quality:{name} -->)", re.DOTALL)
        text = pattern.sub(lambda match, table=table: match.group(1) + table + "\n" + match.group(2), text)
    return text


def plot(results: dict, path: Path) -> None:
    """Validation perplexity against steps and against training time (final runs, every seed), the training loss,
    and each model's search runs with its long run, each panel with the unigram floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = results["pretrain_reference"]["unigram"]["valid"]["perplexity"]
    models = list(results.get("pretrain") or results.get("search") or {})
    figure, axes = plt.subplots(2, 4, figsize=(21, 9), squeeze=False)
    axes[0][3].axis("off")
    times = results.get("step_time", {}).get("models", {})
    panels = [
        (axes[0][0], "step", "validation perplexity (fixed mask), final recipe"),
        (axes[0][1], "minutes", "validation perplexity against training time (1 thread)"),
        (axes[0][2], "step", "training loss"),
    ]
    for axis, x_label, title in panels:
        for index, name in enumerate(models):
            row = results.get("pretrain", {}).get(name)
            if not row or (x_label == "minutes" and name not in times):
                continue
            key = "train_loss_curves" if "loss" in title else "curves"
            scale = times[name]["train_step_seconds"] / 60 if x_label == "minutes" else 1
            for seed, curve in enumerate(row[key]):
                steps, values = zip(*curve)
                axis.plot(
                    [step * scale for step in steps],
                    values,
                    color=f"C{index}",
                    alpha=0.7,
                    label=name if seed == 0 else None,
                )
        if "loss" in title:
            axis.axhline(math.log(floor), color="gray", linestyle=":", label="unigram (ln ppl)")
        else:
            axis.axhline(floor, color="gray", linestyle=":", label="unigram")
            axis.axhline(floor / 4, color="gray", linestyle="--", label="unigram / 4")
            axis.set_yscale("log")
        axis.set(xlabel=x_label, title=title)
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    for axis, name in zip(axes[1], MODELS):
        for index, run in enumerate(results.get("search", {}).get(name, {}).get("runs", [])):
            steps, values = zip(*run["curve"])
            axis.plot(steps, values, color=f"C{index}", label=search.describe(run))
        if run := results.get("long", {}).get(name):
            steps, values = zip(*run["curve"])
            label = f"{search.describe(run['recipe'])}, {run['max_steps']:,} steps"
            axis.plot(steps, values, color="black", linestyle="-.", label=label)
        axis.axhline(floor, color="gray", linestyle=":", label="unigram")
        axis.axhline(floor / 4, color="gray", linestyle="--", label="unigram / 4")
        axis.set(yscale="log", xlabel="step", title=f"{name}: recipe search and long run, validation perplexity")
        axis.legend(fontsize=7)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write(results: dict, output: Path, docs: bool = True) -> str:
    """quality.md and the plot beside `output`; the tables into docs/quality.md and the README with `docs`."""
    rendered = tables(results)
    report = markdown(results, rendered)
    output.with_suffix(".md").write_text(report)
    if results.get("pretrain_reference"):
        plot(results, output.with_name(f"{output.stem}_curves.png"))
    if docs:
        for path in PAGES:
            path.write_text(filled(path.read_text(), page_tables(rendered)))
    return report
