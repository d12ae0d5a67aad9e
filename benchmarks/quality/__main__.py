"""`python -m benchmarks.quality` (or `python benchmarks/quality`): run the chosen parts, reusing every record, then
write quality.json, quality.md, the curves, and the tables inside docs/quality.md."""

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python benchmarks/quality`: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "benchmarks.quality"

from benchmarks.quality import __doc__ as DOC
from benchmarks.quality import report
from benchmarks.quality.context import ROOT, Context
from benchmarks.quality.finetuning import TASKS, prepare_splits
from benchmarks.quality.models import MODELS
from benchmarks.quality.parts import PARTS, collect


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.quality", description=DOC, formatter_class=argparse.RawDescriptionHelpFormatter
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
    add(
        "--report_only",
        action="store_true",
        help="start no run: the tables from the records there are (a missing run is left out and named)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    ctx = Context(args)
    if not args.report_only:
        if not (ctx.wikitext / "train.txt").exists():
            raise SystemExit(
                f"WikiText-2 not found under {args.data}; pass --data pointing at the shared data folder."
            )
        ctx.prepare_tokenizer()
        prepare_splits(ctx)
        for part in PARTS:  # in their order, each making its runs side by side (a part makes what it builds on)
            if part in args.parts:
                PARTS[part][1](ctx)
    results = collect(ctx)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(report.write(results, args.output, docs=not args.no_docs))


if __name__ == "__main__":
    main()
