"""Speed and memory benchmarks of gMLP and aMLP against BERT of equal parameter count (and GPT-2, ModernBERT):
markdown tables out, the results as JSON with every round's time (docs/benchmarks.md gives each table's command).

    python -m benchmarks.speed --sections training --output benchmarks/results/speed_training.json
    python -m benchmarks.speed --docs      # measuring nothing: results/speed_*.md, and the tables in the docs marked
                                           # as <!-- table FILE SECTION.TABLE --> ... <!-- end table -->

Cases run interleaved, each round timed by `Timer.blocked_autorange`; tables give medians over rounds and paired
ratios. glibc's malloc is told to keep freed memory (`--system-malloc`: its defaults).
"""

import argparse
import json
import os
import re
import sys
from pathlib import Path

import torch

from gmlp.tasks.errors import ArgumentParser, Range, ScriptError, check_ranges, script_main

from ..common import KEEP_FREED_MEMORY, RESULTS_DIR, ROOT, machine_info, matmul_peak_flops, set_malloc_thresholds
from . import generation, gpu, memory, padding_free, scaling, training
from .models import FLOP_FORMULAS

# name -> (measure(args) -> results, render(results) -> {table name: markdown lines}), in the reports' order
SECTIONS = {
    "training": (training.measure, training.render),
    "generation": (generation.measure, generation.render),
    "precision": (training.measure_precision, training.render_precision),
    "memory": (memory.measure, memory.render),
    "scaling": (scaling.measure, scaling.render),
    "padding_free": (padding_free.measure, padding_free.render),
    "gpu": (None, gpu.render),  # rendered from its records: the GPU run (benchmarks/gpu_run.py) measures
    "targets": (None, gpu.render_targets),  # the GPU run's targets (gpu_run.json)
}
DOCS = (ROOT / "docs" / "benchmarks.md",)
RANGES = {"--threads": Range(at_least=1), "--rounds": Range(at_least=1), "--min-run-time": Range(at_least=0)}
RANGES |= dict.fromkeys(["--lengths", "--scaling-tokens", "--scaling-layers", "--new-tokens"], Range(at_least=1))
RANGES["--memory-lengths"] = Range(at_least=1)
MARKED = re.compile(r"^(<!-- table (\S+) (\w+)\.([^\n]+) -->\n).*?^(<!-- end table -->)", re.DOTALL | re.MULTILINE)


def parse_args(argv=None) -> argparse.Namespace:
    """The command line's options, checked: numbers in range, sections that exist, a device there is, the data."""
    parser = ArgumentParser(
        prog="python -m benchmarks.speed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--sections", default="training,scaling,precision,memory", help=f"of: {', '.join(SECTIONS)}")
    add("--device", default="cpu", help="cpu (default) or cuda")
    add("--threads", type=int, default=2, help="torch.set_num_threads on the CPU (default 2)")
    add("--rounds", type=int, default=7, help="interleaved rounds per table")
    add("--min-run-time", type=float, default=0.5, help="seconds of timed calls per case and round (at least one)")
    add("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096], help="scaling")
    add("--scaling-tokens", type=int, default=4096, help="tokens per step in the length scaling")
    add("--scaling-layers", type=int, default=12)
    add("--new-tokens", type=int, default=256, help="tokens generate() adds in the generation table")
    add("--memory-lengths", type=int, nargs="+", default=[512, 2048, 4096])
    add("--data", type=Path, default=ROOT.parent / "shared" / "data", help="padding_free's data")
    add("--output", type=Path, default=RESULTS_DIR / "speed.json")
    add("--system-malloc", action="store_true", help="keep glibc's default malloc settings")
    add("--docs", action="store_true", help="measure nothing: every results file's markdown and the docs' tables")
    args = parser.parse_args(argv)
    check_ranges(args, RANGES)
    measured = [name for name, (measure, _) in SECTIONS.items() if measure]
    if unknown := set(args.sections.split(",")) - set(measured):
        parser.error(f"unknown sections {', '.join(sorted(unknown))}; choose from {', '.join(measured)}")
    if args.device != "cpu" and not (args.device.startswith("cuda") and torch.cuda.is_available()):
        raise ScriptError(f"--device {args.device}: not a device here; cpu, or cuda where torch finds a GPU.")
    if "padding_free" in args.sections.split(",") and not args.docs and not args.data.is_dir():
        raise ScriptError(f"--data {args.data}: no such folder (the padding_free section reads its GLUE files).")
    return args


def markdown(results: dict) -> str:
    """Every table of a results file, after the line of the machine it was measured on."""
    m = results["machine"]
    gpu_name = f"GPU {m['gpu']} (CUDA {m['cuda']}), " if "gpu" in m else ""
    load = tuple(round(x, 1) for x in m["load_average_at_start"])
    machine = (
        f"Machine: {gpu_name}{m['cpu']}, {m['threads']} threads, torch {m['torch']}, fp32; measured dense matmul peak "
        f"{m['matmul_peak_gflops_fp32']:.0f} GFLOP/s; allocator {m['allocator']}; load average at start {load}."
    )
    lines = [machine, ""]
    for name, (_, render) in SECTIONS.items():
        if name in results:
            lines += [line for part in render(results[name]).values() for line in part]
    return "\n".join(lines)


def docs(text: str) -> str:
    """`text` with every marked table rewritten from its results file, without its heading (the page has its own)."""

    def fill(match: re.Match) -> str:
        start, file, section, part, end = match.groups()
        results = json.loads((RESULTS_DIR / file).read_text())
        lines = [line for line in SECTIONS[section][1](results[section])[part] if not line.startswith("### ")]
        return start + "\n".join(lines).lstrip("\n") + "\n" + end

    return MARKED.sub(fill, text)


def run(argv) -> None:
    """The benchmarks the command line's arguments `argv` ask for, or (`--docs`) the tables from the results."""
    args = parse_args(argv)
    if args.docs:
        for saved in RESULTS_DIR.glob("speed_*.json"):
            saved.with_suffix(".md").write_text(markdown(json.loads(saved.read_text())))
        for page in DOCS:
            page.write_text(docs(page.read_text()))
        return
    allocator = "glibc defaults" if args.system_malloc else set_malloc_thresholds(KEEP_FREED_MEMORY)
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):  # before CUDA starts
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    args.peak_flops = matmul_peak_flops(args.device)
    machine = machine_info(args.device, args.threads)
    machine |= {"allocator": allocator, "matmul_peak_gflops_fp32": args.peak_flops / 1e9}
    results = {"machine": machine, "flop_formulas": FLOP_FORMULAS, "command": sys.argv}
    for section in args.sections.split(","):
        print(f"running {section} ...", file=sys.stderr, flush=True)
        results[section] = SECTIONS[section][0](args)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=1, default=str))
    text = markdown(results)
    args.output.with_suffix(".md").write_text(text)
    print(text)


main = script_main(run)

if __name__ == "__main__":
    main()
