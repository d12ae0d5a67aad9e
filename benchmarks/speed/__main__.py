"""Speed and memory benchmarks of gMLP and aMLP against BERT of equal parameter count (and GPT-2, ModernBERT):
markdown tables out, the results as JSON with every round's time (docs/benchmarks.md gives each table's command).

    python -m benchmarks.speed                  # training, inference, scaling, precision, memory (30-60 min, 2 cores)
    python -m benchmarks.speed --sections training,inference --output benchmarks/results/speed_training.json
    python -m benchmarks.speed --sections training,memory --baseline main    # before (main) against after, one run
    python -m benchmarks.speed --sections gpu --device cuda                  # the GPU section
    python -m benchmarks.speed --report-only --output F.json    # the tables of saved results, measuring nothing
    python -m benchmarks.speed --docs           # the marked tables of docs/benchmarks.md

Sections: benchmarks/speed/<section>.py, each a measure and a render step. Cases run interleaved (A B C A B C ...),
each round timed by `torch.utils.benchmark.Timer.blocked_autorange`; tables give medians over rounds and paired
ratios (the median of per-round ratios). On the CPU, `torch.set_num_threads` is set and glibc's malloc is told
(mallopt) to keep freed memory rather than fault an MLM step's logits back in every step (20-30% of a step);
`--system-malloc` keeps its defaults.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from ..common import KEEP_FREED_MEMORY, RESULTS_DIR, machine_info, matmul_peak_flops, set_malloc_thresholds
from . import report
from .models import FLOP_FORMULAS
from .scaling import plot

DEFAULT_SECTIONS = "training,inference,scaling,precision,memory"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.speed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sections", default=DEFAULT_SECTIONS, help=f"comma-separated: {', '.join(report.SECTIONS)}")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads on the CPU (default 2)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per table")
    parser.add_argument(
        "--min-run-time", type=float, default=0.5, help="seconds of timed calls per case and round (at least one)"
    )
    parser.add_argument(
        "--baseline", metavar="REF", help="also measure gMLP at this git revision (training, memory, saved)"
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096], help="scaling")
    parser.add_argument("--scaling-tokens", type=int, default=4096, help="tokens per step in the length scaling")
    parser.add_argument("--scaling-layers", type=int, default=12)
    parser.add_argument("--scaling-rounds", type=int, default=3)
    parser.add_argument("--generation-rounds", type=int, default=3, help="interleaved rounds of the generation table")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens generate() adds in the generation table")
    parser.add_argument("--memory-lengths", type=int, nargs="+", default=[512, 2048, 4096])
    parser.add_argument("--saved-length", type=int, default=2048, help="sequence length of the saved-tensor account")
    parser.add_argument("--gpu-kernels", default="triton,torch", help="the gpu section's sgu_kernel values")
    parser.add_argument("--gpu-batch", type=int, help="the gpu section's batch instead of the largest that fits")
    parser.add_argument("--gpu-parts", help="comma-separated parts of the gpu section to run (default: all, in order)")
    parser.add_argument(
        "--gpu-resume", metavar="FILE", help="a gpu results file: run its missing parts with its batches"
    )
    parser.add_argument("--deadline-at", type=float, help="time.time() by which the gpu section's parts must end")
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(__file__).resolve().parents[3] / "shared" / "data",
        help="padding_free's data",
    )
    parser.add_argument("--quick", action="store_true", help="3 rounds, 2-layer scaling, the gpu section at tiny size")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "speed.json")
    parser.add_argument("--system-malloc", action="store_true", help="keep glibc's default malloc settings")
    parser.add_argument("--report-only", action="store_true", help="measure nothing: the tables of --output again")
    parser.add_argument("--docs", action="store_true", help="measure nothing: rewrite the tables of the docs pages")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.min_run_time, args.scaling_layers, args.scaling_rounds = 3, 0.0, 2, 3
    unknown = set(args.sections.split(",")) - set(report.SECTIONS)
    if unknown:
        parser.error(f"unknown sections {', '.join(sorted(unknown))}; choose from {', '.join(report.SECTIONS)}")
    return args


def write(results: dict, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=1, default=str))


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.docs:
        for page in report.DOCS:
            page.write_text(report.docs(page.read_text()))
        return
    if args.report_only:
        text = report.markdown(json.loads(args.output.read_text()))
        args.output.with_suffix(".md").write_text(text)
        print(text)
        return
    allocator = "glibc defaults" if args.system_malloc else set_malloc_thresholds(KEEP_FREED_MEMORY)
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        # Before CUDA starts: the largest batch that fits, found by trying, must not be cut short by fragmentation.
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    args.peak_flops = matmul_peak_flops(args.device)
    machine = machine_info(args.device, args.threads) | {
        "allocator": allocator,
        "matmul_peak_gflops_fp32": args.peak_flops / 1e9,
    }
    results = {"machine": machine, "flop_formulas": FLOP_FORMULAS, "command": sys.argv}
    for section in args.sections.split(","):
        print(f"running {section} ...", file=sys.stderr, flush=True)
        args.save = lambda partial, section=section: write(results | {section: partial}, args.output)
        results[section] = report.SECTIONS[section].measure(args)
        write(results, args.output)
    if "scaling" in results:
        plot(results["scaling"], args.output.with_name("throughput_vs_length.png"))
    text = report.markdown(results)
    args.output.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
