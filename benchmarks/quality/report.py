"""The report: quality.md (every table), the curves' plot, and the generated tables inside docs/quality.md (between
`<!-- quality:NAME -->` and `<!-- /quality:NAME -->` markers; the prose around them is written by hand from the same
records)."""

import math
import re
from pathlib import Path

from . import tables
from .context import ROOT
from .models import MODELS

PAGES = (ROOT / "docs" / "quality.md",)  # the pages with generated tables


def markdown(results: dict, rendered: dict) -> str:
    s = results["settings"]
    lines = [
        f"Pretraining: WikiText-2 train, {s['max_steps']} steps x batch {s['batch_size']} x 128 tokens; validation on {s['max_eval_samples']} sequences of valid (fixed mask), test on as many of test; fine-tuning {s['finetune_steps']} steps x batch 32; seeds {s['seeds']}; mean ± standard deviation.",
        "",
    ]
    for name, table in rendered.items():
        lines += [f"### {tables.SECTIONS[name][0]}", "", table, ""]
    return "\n".join(lines)


def filled(text: str, rendered: dict) -> str:
    """`text` with the part between each `<!-- quality:NAME -->` / `<!-- /quality:NAME -->` pair replaced by the
    table NAME (left as it is where that table is not measured yet)."""
    for name, table in rendered.items():
        pattern = re.compile(rf"(<!-- quality:{name} -->\n).*?(<!-- /quality:{name} -->)", re.DOTALL)
        text = pattern.sub(lambda match, table=table: match.group(1) + table + "\n" + match.group(2), text)
    return text


def plot_floor(axis, floor: float) -> None:
    axis.axhline(floor, color="gray", linestyle=":", label="unigram")
    axis.axhline(floor / 4, color="gray", linestyle="--", label="unigram / 4")


def plot(results: dict, path: Path) -> None:
    """Validation perplexity against steps and against training time (final runs, every seed), the training loss,
    and each model's search runs with its long run, each panel with the unigram floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = results["pretrain_reference"]["unigram"]["valid"]["perplexity"]
    times = results.get("step_time", {}).get("models", {})
    figure, axes = plt.subplots(2, 4, figsize=(21, 9), squeeze=False)
    axes[0][3].axis("off")
    panels = [
        (axes[0][0], "step", "curves", "validation perplexity (fixed mask), final recipe"),
        (axes[0][1], "minutes", "curves", "validation perplexity against training time (1 thread)"),
        (axes[0][2], "step", "train_loss_curves", "training loss"),
    ]
    for axis, x_label, key, title in panels:
        for index, name in enumerate(results.get("pretrain") or results.get("search") or {}):
            row = results.get("pretrain", {}).get(name)
            if not row or (x_label == "minutes" and name not in times):
                continue
            scale = times[name]["train_step_seconds"] / 60 if x_label == "minutes" else 1
            for seed, curve in enumerate(row[key]):
                steps, values = zip(*curve)
                label = name if seed == 0 else None
                axis.plot([step * scale for step in steps], values, color=f"C{index}", alpha=0.7, label=label)
        if key == "train_loss_curves":
            axis.axhline(math.log(floor), color="gray", linestyle=":", label="unigram (ln ppl)")
        else:
            plot_floor(axis, floor)
            axis.set_yscale("log")
        axis.set(xlabel=x_label, title=title)
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    for axis, name in zip(axes[1], MODELS):
        for index, run in enumerate(results.get("search", {}).get(name, {}).get("runs", [])):
            axis.plot(*zip(*run["curve"]), color=f"C{index}", label=tables.describe(run))
        if run := results.get("long", {}).get(name):
            label = f"{tables.describe(run['recipe'])}, {run['max_steps']:,} steps"
            axis.plot(*zip(*run["curve"]), color="black", linestyle="-.", label=label)
        plot_floor(axis, floor)
        axis.set(yscale="log", xlabel="step", title=f"{name}: recipe search and long run, validation perplexity")
        axis.legend(fontsize=7)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write(results: dict, output: Path, *, docs: bool) -> str:
    """quality.md and the plot beside `output`; with `docs`, the tables into docs/quality.md."""
    rendered = tables.rendered(results)
    report = markdown(results, rendered)
    output.with_suffix(".md").write_text(report)
    if results.get("pretrain_reference"):
        plot(results, output.with_name(f"{output.stem}_curves.png"))
    if docs:
        for path in PAGES:
            path.write_text(filled(path.read_text(), rendered))
    return report
