"""One peak-memory measurement on the CPU, in a fresh process of its own, printed as JSON.

The kernel's resident high-water mark counts everything a process ever held, so each case runs alone in a new
interpreter, with glibc's malloc mapping every allocation of 128 KiB or more on its own and unmapping it when freed
(so that the resident size follows the live tensors). The sections start it with `measure_in_fresh_process`:

    python -m benchmarks.speed.memory_worker case "gmlp sparse_prediction"     # three steps of a training-table case
    python -m benchmarks.speed.memory_worker encoder gmlp training 2048        # two encoder steps at a length
    python -m benchmarks.speed.memory_worker --ref main encoder ...            # the model at a git revision
    python -m benchmarks.speed.memory_worker --shape '{"hidden_size": 64}' ... # another shape than SMALL
"""

import argparse
import json
import subprocess
import sys

import torch

from ..common import MAP_EACH_ALLOCATION, ROOT, mlm_batch, peak_added_mib, set_malloc_thresholds
from .models import BATCH_SIZE, SMALL, encoder, encoder_step_fn, training_case_step


def measure_in_fresh_process(arguments: list[str], threads: int) -> float:
    """Run this module on `arguments` in a new interpreter, with the benchmark's model shape as it is in this one;
    the peak MiB it reports. Raises with the worker's error output if it fails."""
    command = [sys.executable, "-m", "benchmarks.speed.memory_worker", "--threads", str(threads)]
    command += ["--shape", json.dumps(SMALL), *arguments]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_added_mib"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ref", help="the model at this git revision instead of the working tree's")
    parser.add_argument("--shape", type=json.loads, default={}, help="JSON: the model's shape instead of SMALL's")
    kinds = parser.add_subparsers(dest="kind", required=True)
    case = kinds.add_parser("case", help="three training steps of a case of the MLM training table")
    case.add_argument("name")
    long = kinds.add_parser("encoder", help="two steps of an encoder, batch 1, n = the length")
    long.add_argument("model", help="gmlp, amlp, 'BERT (sdpa)', or 'amlp' / 'BERT' with ' (attention dropout 0.1)'")
    long.add_argument("mode", choices=("training", "inference"))
    long.add_argument("length", type=int)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    set_malloc_thresholds(MAP_EACH_ALLOCATION)
    torch.set_num_threads(args.threads)
    SMALL.update(args.shape)
    if args.kind == "case":
        input_ids, labels = mlm_batch(BATCH_SIZE, SMALL["max_position_embeddings"], SMALL["vocab_size"])
        peak = peak_added_mib(training_case_step(args.name, input_ids, labels), repeats=3)
    else:
        model = encoder(args.model, args.length, ref=args.ref)
        input_ids = torch.randint(5, SMALL["vocab_size"], (1, args.length))
        peak = peak_added_mib(encoder_step_fn(model, input_ids, args.mode == "training"), repeats=2)
    print(json.dumps({"peak_added_mib": peak}))


if __name__ == "__main__":
    main()
