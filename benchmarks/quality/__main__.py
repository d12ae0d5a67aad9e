"""`python -m benchmarks.quality` (or `python benchmarks/quality`): run the chosen parts, reusing every record, then
write quality.json, quality.md, the curves, and the tables inside docs/quality.md and the README."""

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/quality`: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "benchmarks.quality"

from benchmarks.quality import __doc__ as DOC
from benchmarks.quality import finetune, long, pretrain, reference, report, search, sgu, step_time
from benchmarks.quality.context import Context
from benchmarks.quality.finetune import TASKS
from benchmarks.quality.models import MODELS
from benchmarks.quality.runs import ROOT

PARTS = ("reference", "step_time", "search", "pretrain", "long", "finetune", "sgu")
DEFAULT_PARTS = ("reference", "search", "pretrain", "long", "finetune", "sgu")
# Options that do not decide a figure: left out of quality.json's settings.
NOT_SETTINGS = {"parts", "jobs", "data", "work_dir", "output", "no_docs", "report_only"}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.quality", description=DOC, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--parts", nargs="+", default=list(DEFAULT_PARTS), choices=PARTS, help="what to run (the report shows all)")
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
    add("--no_docs", action="store_true", help="leave docs/quality.md and the README as they are")
    add(
        "--report_only",
        action="store_true",
        help="start no run: the tables from the records there are (a missing run is left out and named)",
    )
    return parser.parse_args(argv)


def measures(models: list[str]) -> dict:
    """part -> its measure step, bound to the models asked for."""
    return {
        "reference": reference.measure,
        "step_time": step_time.measure,
        "search": lambda ctx: search.measure(ctx, models),
        "pretrain": lambda ctx: pretrain.measure(ctx, models),
        "long": lambda ctx: long.measure(ctx, models),
        "finetune": lambda ctx: finetune.measure(ctx, models),
        "sgu": lambda ctx: sgu.measure(ctx, models),
    }


def run_parts(ctx: Context, parts: list[str], models: list[str]) -> None:
    """Make the runs of `parts`: the in-process ones first, one by one (step_time is best measured alone), then the
    others side by side, their runs sharing the slots by priority (a part also makes the runs it builds on)."""
    steps = measures(models)
    for name in ("reference", "step_time"):
        if name in parts:
            steps[name](ctx)
    background = [name for name in parts if name not in ("reference", "step_time")]
    ctx.run.slots.hold()
    with ThreadPoolExecutor(max(1, len(background))) as pool:
        for future in [pool.submit(steps[name], ctx) for name in background]:
            future.result()


def collect(ctx: Context, models: list[str]) -> dict:
    """Every part's results from the records (a missing run is left out and named)."""
    ctx.args.report_only = ctx.run.report_only = True
    settings = {key: value for key, value in vars(ctx.args).items() if key not in NOT_SETTINGS}
    results = {"settings": settings}
    names = {"reference": "pretrain_reference"}
    for name, measure in measures(models).items():
        if found := ctx.available(measure, ctx):
            results[names.get(name, name)] = found
    if "pretrain" in results and "pretrain_reference" in results:
        results["pretrain_derived"] = pretrain.derive(results)
    if runtime := report.runtimes(ctx.records.folder, ctx.args):
        results["runtime"] = runtime
    return results


def main(argv=None) -> None:
    args = parse_args(argv)
    if not (args.data / "wikitext-2" / "train.txt").exists():
        raise SystemExit(f"WikiText-2 not found under {args.data}; pass --data pointing at the shared data folder.")
    ctx = Context(args)
    models = [name for name in MODELS if name in args.models]
    if not args.report_only:
        ctx.prepare_tokenizer()
        ctx.prepare_data()
        run_parts(ctx, args.parts, models)
    results = collect(ctx, models)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(report.write(results, args.output, docs=not args.no_docs))


if __name__ == "__main__":
    main()
