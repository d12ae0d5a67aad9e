"""Small-scale test of the paper's quality claims, sized for a 2-core CPU, with the project's own scripts: gMLP, aMLP,
BERT and ModernBERT at 2.3M parameters, one tokenizer and the same data, each pretrained by run_mlm.py under the
recipe its own search chose, then fine-tuned by run_glue.py / run_squad.py (docs/quality.md: the set-up and results).

    python -m benchmarks.quality                    # every part but step_time
    python -m benchmarks.quality --parts step_time  # seconds per step of each model: alone, on a quiet machine
    python -m benchmarks.quality --report_only      # the tables from the records, starting nothing

The parts run in PARTS' order (each alone with --parts, making the runs it builds on); each finished run's record,
written to benchmarks/results/quality_runs/ at once, is reused by any later invocation with the same settings. The
report (quality.json, .md, the curves, the tables marked <!-- quality:NAME --> in the docs) is made of the records.
"""

import argparse
import json
import math
import re
from pathlib import Path

from gmlp.tasks.errors import ArgumentParser, Range, ScriptError, check_ranges, script_main

from . import tables
from .context import MODELS, ROOT, Context
from .finetuning import TASKS, prepare_splits
from .parts import PARTS, collect

RANGES = dict.fromkeys(["--max_steps", "--batch_size", "--long_steps", "--eval_steps"], Range(at_least=1))
RANGES |= dict.fromkeys(["--max_eval_samples", "--sgu_steps", "--finetune_steps", "--jobs"], Range(at_least=1))
RANGES |= dict.fromkeys(["--warmup_steps", "--long_warmup_steps"], Range(at_least=0))
RANGES |= dict.fromkeys(["--search_rates", "--finetune_learning_rates"], Range(above=0))
RANGES |= {"--seeds": Range(at_least=0, at_most=2**32 - 1)}


def parse_args(argv=None) -> argparse.Namespace:
    """The command line's options, numbers checked."""
    parser = ArgumentParser(
        prog="python -m benchmarks.quality", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    default_parts = [part for part in PARTS if part != "step_time"]
    add("--parts", nargs="+", default=default_parts, choices=PARTS, help="what to run (the report shows all)")
    add("--models", nargs="+", default=list(MODELS), choices=MODELS)
    add("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the first one is the search's and the sweeps'")
    add("--tasks", nargs="+", default=list(TASKS), choices=TASKS, help="fine-tuning tasks")
    add("--max_steps", type=int, default=2000, help="MLM pretraining steps per run (search and final)")
    add("--batch_size", type=int, default=32, help="MLM pretraining batch (sequences of 128 tokens)")
    add("--warmup_steps", type=int, default=200, help="the search's warm-up")
    add("--long_warmup_steps", type=int, default=600, help="the search's longer warm-up")
    add("--search_rates", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3], help="the search's first rates")
    add("--long_steps", type=int, default=6000, help="the long runs' steps (part long: constant rate, first seed)")
    add("--eval_steps", type=int, default=200, help="steps between validation evaluations")
    add("--max_eval_samples", type=int, default=1024, help="validation (and test) sequences of 128 tokens")
    add("--sgu_steps", type=int, default=1000, help="pretraining steps of each SGU-variant run")
    add("--finetune_steps", type=int, default=1000)
    add("--finetune_learning_rates", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3], help="the SST-2 sweep")
    add("--jobs", type=int, default=2, help="runs at a time (threads per run: cores / jobs)")
    add("--data", type=Path, default=ROOT.parent / "shared" / "data", help="the shared data folder")
    add("--work_dir", type=Path, default=ROOT.parent / "quality-work", help="checkpoints, logs, splits")
    add("--output", type=Path, default=ROOT / "benchmarks" / "results" / "quality.json")
    add("--no_docs", action="store_true", help="leave docs/quality.md as it is")
    add("--report_only", action="store_true", help="start no run: the tables of the records there are")
    args = parser.parse_args(argv)
    check_ranges(args, RANGES)
    return args


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
    """`text` with each marked table NAME rewritten (left as it is where NAME is not measured yet)."""
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
        for index, (name, row) in enumerate(results.get("pretrain", {}).items()):
            if x_label == "minutes" and name not in times:
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


def run(argv) -> None:
    """The parts the command line's arguments `argv` ask for, then the report of every record."""
    args = parse_args(argv)
    ctx = Context(args)
    if not args.report_only:
        if not (ctx.wikitext / "train.txt").exists():
            raise ScriptError(f"--data {args.data}: no wikitext-2/train.txt there; pass the shared data folder.")
        ctx.prepare_tokenizer()
        prepare_splits(ctx)
        for part in PARTS:  # in their order, each making its runs side by side (a part makes what it builds on)
            if part in args.parts:
                PARTS[part][1](ctx)
    results = collect(ctx)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(write(results, args.output, docs=not args.no_docs))


main = script_main(run)

if __name__ == "__main__":
    main()
