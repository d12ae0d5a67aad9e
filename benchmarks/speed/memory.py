"""Peak memory on the CPU of an encoder step at long lengths (batch 1, n = the length), training and inference: gMLP
and aMLP against BERT of equal parameter count. Each measurement runs alone in a fresh process (`python -m
benchmarks.speed.memory SPEC`), every allocation of 128 KiB or more mapped on its own, so that the kernel's high-water
mark follows the live tensors. On a GPU the GPU run's step stage measures each step's peak (benchmarks/gpu_run.py)."""

import json
import subprocess
import sys

import torch

from ..common import MAP_EACH_ALLOCATION, ROOT, mlm_batch, peak_added_mib, percent, set_malloc_thresholds, table
from .models import BATCH_SIZE, SMALL, encoder, encoder_step_fn, training_cases, training_step_fn

OURS = ("gmlp", "amlp")
# Attention dropout (the default 0.1) changes nothing in inference, so these are measured in training only.
WITH_DROPOUT = ("amlp (attention dropout 0.1)", "BERT (attention dropout 0.1)")
CASES = [(name, "training") for name in (*OURS, "BERT (sdpa)", *WITH_DROPOUT)]
CASES += [(name, "inference") for name in (*OURS, "BERT (sdpa)")]


def measure_in_fresh_process(spec: dict, threads: int) -> float:
    """The peak MiB of `spec` ({"case": a training case} or {"encoder": a name, "mode": ..., "length": ...}) measured
    by a new interpreter with this one's model shape; raises with the worker's error output if it fails."""
    spec = {**spec, "threads": threads, "shape": SMALL}
    command = [sys.executable, "-m", "benchmarks.speed.memory", json.dumps(spec)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_added_mib"]


def measure(args) -> dict:
    result = {"batch_size": 1, "layers": SMALL["num_hidden_layers"], "device": "cpu", "lengths": {}}
    for length in args.memory_lengths:
        result["lengths"][length] = {
            f"{name} {mode}": measure_in_fresh_process({"encoder": name, "mode": mode, "length": length}, args.threads)
            for name, mode in CASES
        }
        print(f"  length {length}: done", file=sys.stderr, flush=True)
    return result


def mode_table(lengths: dict, mode: str) -> list[str]:
    """One mode's MiB per model and length; ours against BERT (SDPA), and aMLP against gMLP."""
    names = [key.removesuffix(f" {mode}") for key in next(iter(lengths.values())) if key.endswith(f" {mode}")]
    ratios = [(name, "BERT (sdpa)") for name in names if name in OURS] + [("amlp", "gmlp")]
    body = [
        [
            length,
            *(f"{row[f'{name} {mode}']:.0f}" for name in names),
            *(percent(row[f"{a} {mode}"] / row[f"{b} {mode}"]) for a, b in ratios),
        ]
        for length, row in lengths.items()
    ]
    return table(["length", *names, *(f"{a} / {b}" for a, b in ratios)], body)


def render(m: dict) -> dict[str, list[str]]:
    heading = (
        f"### Peak memory of an encoder step at length, batch {m['batch_size']}, {m['layers']} layers (aMLP: as many "
        "as match gMLP's parameters), d_model 256 (MiB over the built model and input)"
    )
    return {
        "training": [heading, "", "Training (forward + backward):", "", *mode_table(m["lengths"], "training")],
        "inference": ["Inference:", "", *mode_table(m["lengths"], "inference")],
    }


def main(spec: dict) -> None:
    """The worker: one measurement of `spec` (see `measure_in_fresh_process`), printed as JSON."""
    set_malloc_thresholds(MAP_EACH_ALLOCATION)
    torch.set_num_threads(spec["threads"])
    SMALL.update(spec["shape"])
    if "case" in spec:
        case = training_cases(only=spec["case"])[spec["case"]]
        input_ids, labels = mlm_batch(BATCH_SIZE, SMALL["max_position_embeddings"], SMALL["vocab_size"])
        peak = peak_added_mib(training_step_fn(case.model, case.loss, input_ids, labels), repeats=3)
    else:
        input_ids = torch.randint(5, SMALL["vocab_size"], (1, spec["length"]))
        model = encoder(spec["encoder"], spec["length"])
        peak = peak_added_mib(encoder_step_fn(model, input_ids, training=spec["mode"] == "training"), repeats=2)
    print(json.dumps({"peak_added_mib": peak}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
