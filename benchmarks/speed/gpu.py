"""The GPU section (docs/benchmarks.md#on-a-cuda-gpu): gMLP-base with its fused spatial gating unit (`sgu_kernel=
"triton"`), without it (`"torch"`) and with its activations kept, against BERT and ModernBERT (SDPA) at equal
parameters and at their stock shapes (bert-base-uncased, ModernBERT-base), n = 512: MLM training and encoder
inference, bf16 and fp32, eager, compiled (regional: each block, static shapes) and with inductor's max-autotune
GEMMs; each model at its own largest batch; MFU against the measured and the datasheet's bf16 peak; the FFT's
cross-over by length; torch.profiler's account by CUDA kernel.

The parts (PARTS, in priority order) are functions of the `Bench` (gpu_parts.py) returning small dataclasses that
write themselves into the results; each one's failure is recorded and the next runs; the file is rewritten after
each. With `--deadline-at` (a time.time()) a part starts only while its expected time (at base size on an H100)
still fits, else it is listed as not run for a later `--gpu-resume`, which reuses the file's batches. On the CPU it
runs at tiny sizes (`--quick`).
"""

import json
import sys
import time
import traceback
from functools import partial
from pathlib import Path

import torch

from ..common import matmul_peak_flops, num_parameters, percent, table, times
from . import profile, scaling
from .gpu_parts import (
    BERT_BASE,
    KEPT,
    MODERN,
    MODERN_BASE,
    REFERENCE,
    Bench,
    build,
    fft_crossover,
    find_batches,
    free_memory,
    kernel_profile,
    make_optimizer,
    time_group,
)

# Part -> seconds expected at base size on an H100 (the H200's part_seconds in results/speed_gpu_2026-11-27.json,
# scaled to these parts' rows and three rounds; max-autotune's GEMM search estimated): the deadline starts a part only
# while that much time is left.
PARTS = {
    "batches-bf16": 35,
    "training-bf16-eager": 60,
    "training-bf16-compiled": 110,
    "inference-bf16-eager": 15,
    "inference-bf16-compiled": 40,
    "fft-crossover": 30,
    "profile-bf16": 35,
    "training-bf16-max-autotune": 120,
    "batches-fp32": 30,
    "inference-fp32-eager": 15,
    "inference-fp32-compiled": 35,
    "training-fp32-compiled": 85,
}
# Dense (no sparsity) bf16 tensor-core peaks of NVIDIA's datasheets, TFLOP/s, by the first name part that matches.
DATASHEET_BF16_TFLOPS = {"H200 NVL": 835, "H200": 989, "H100 PCIe": 756, "H100 NVL": 835, "H100": 989, "A100": 312}


def datasheet_peak(name: str) -> float | None:
    """The datasheet's dense bf16 peak (FLOP/s) of the device called `name`, None for one not listed."""
    return next((tflops * 1e12 for part, tflops in DATASHEET_BF16_TFLOPS.items() if part in name), None)


def plan(bench: Bench, size: str, kernels: list[str]) -> dict:
    """PARTS' work, in order: each a function of no arguments returning what it measured."""
    ours = [f"gmlp ({kernel})" for kernel in kernels]
    equal = [*ours, REFERENCE, MODERN]
    everyone = [*ours, f"{ours[0]}{KEPT}", REFERENCE, MODERN, BERT_BASE, MODERN_BASE]
    inference = [*ours, REFERENCE, MODERN, BERT_BASE, MODERN_BASE]
    plain = "gmlp (torch)" if "torch" in kernels else ours[-1]
    autotune = dict.fromkeys([ours[0], REFERENCE, MODERN], "compiled") | {plain: "max-autotune"}

    def group(task, precision, mode, names):
        return partial(time_group, bench, task, precision, dict.fromkeys(names, mode))

    return {
        "batches-bf16": partial(find_batches, bench, "bf16", everyone),
        "training-bf16-eager": group("training", "bf16", "eager", everyone),
        "training-bf16-compiled": group("training", "bf16", "compiled", everyone),
        "inference-bf16-eager": group("inference", "bf16", "eager", inference),
        "inference-bf16-compiled": group("inference", "bf16", "compiled", inference),
        "fft-crossover": partial(fft_crossover, bench, size, ours[0]),
        "profile-bf16": partial(kernel_profile, bench, [*ours, REFERENCE]),
        "training-bf16-max-autotune": partial(time_group, bench, "training", "bf16", autotune, record=[plain]),
        "batches-fp32": partial(find_batches, bench, "fp32", equal),
        "inference-fp32-eager": group("inference", "fp32", "eager", equal),
        "inference-fp32-compiled": group("inference", "fp32", "compiled", equal),
        "training-fp32-compiled": group("training", "fp32", "compiled", equal),
    }


# ---- the section ---------------------------------------------------------------------------------------------------
def measure(args) -> dict:
    device = torch.device(args.device)
    size, kernels = "tiny" if args.quick else "base", args.gpu_kernels.split(",")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    result = {"size": size, "device": name, "sgu_kernels": kernels, "part_seconds": {}}
    if args.gpu_resume:
        earlier = json.loads(Path(args.gpu_resume).read_text())["gpu"]
        if (earlier["device"], earlier["size"]) != (name, size):
            raise ValueError(
                f"{args.gpu_resume} was measured on {earlier['device']} at size {earlier['size']}, this run is on "
                f"{name} at size {size}: its batches and rows do not carry over."
            )
        result = earlier | {"resumed_from": str(args.gpu_resume)}
    result |= {"not_run": [], "errors": {}}
    wanted = args.gpu_parts.split(",") if args.gpu_parts else list(PARTS)
    if unknown := set(wanted) - set(PARTS):
        raise ValueError(f"Unknown parts {sorted(unknown)}; the parts are: {', '.join(PARTS)}.")
    torch._dynamo.config.recompile_limit = 128
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    peak = matmul_peak_flops(device, torch.bfloat16, size=8192 if device.type == "cuda" else 1024)
    datasheet = datasheet_peak(name)
    models = build(size, device, kernels)
    length = next(iter(models.values())).config.max_position_embeddings
    bench = Bench(device, models, length, peak, datasheet, args.rounds, args.min_run_time, args.gpu_batch,
                  result.setdefault("batches", {}))  # fmt: skip
    bench.optimizers = {name: make_optimizer(model, device) for name, model in models.items()}
    result |= {
        "length": length,
        "matmul_peak_tflops_bf16": peak / 1e12,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
    }
    result["datasheet_peak_tflops_bf16"] = datasheet and datasheet / 1e12
    result["models"] = {
        name: {
            "parameters": num_parameters(model),
            "layers": model.config.num_hidden_layers,
            "hidden_size": model.config.hidden_size,
            "intermediate_size": model.config.intermediate_size,
            "attn_implementation": model.config._attn_implementation,
        }
        for name, model in models.items()
    }
    for part, work in plan(bench, size, kernels).items():
        if part in wanted and part not in result["part_seconds"]:
            expected = PARTS[part] if size == "base" else 0
            run_part(result, part, work, bench, deadline=args.deadline_at, expected=expected, save=args.save)
    return result


def run_part(result: dict, part: str, work, bench: Bench, *, deadline: float | None, expected: float, save) -> None:
    """Run `part` unless it would end after `deadline` or times models whose batches were not found; record its time
    or its error."""
    late = deadline is not None and time.time() + expected > deadline
    unbatched = part.startswith(("training", "inference", "profile")) and part.split("-")[1] not in bench.batches
    if late or unbatched:
        result["not_run"].append(part)
        return
    print(f"  {part} ...", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        work().into(result)
        result["part_seconds"][part] = time.monotonic() - start
    except KeyboardInterrupt:
        result["errors"][part] = "interrupted (the time limit of the call)"
        save(result)
        raise
    except Exception as error:  # noqa: BLE001 (any failure of a part is recorded, and the next part runs)
        result["errors"][part] = f"{type(error).__name__}: {error}"[:2000]
        traceback.print_exc()
    finally:
        free_memory(bench)
    save(result)


# ---- the tables ----------------------------------------------------------------------------------------------------
def optional(value, format) -> str:
    return "–" if value is None else format(value)


def targets(result: dict) -> list[str]:
    """Issue 49's targets (bf16, equal parameters) against what was measured."""
    training = {(row["model"], row["mode"]): row for row in result.get("training", []) if row["precision"] == "bf16"}
    inference = {(row["model"], row["mode"]): row for row in result.get("inference", []) if row["precision"] == "bf16"}
    rows = []
    for model in (name for name in result["models"] if name.startswith("gmlp") and not name.endswith(KEPT)):
        for mode, goals in (("eager", ("1.20x", "–", "–")), ("compiled", ("1.20x", "1.00x", "42%"))):
            if row := training.get((model, mode)):
                versus = row["versus"]
                rows += [
                    [f"{model} training vs {REFERENCE}, {mode}, paired", optional(versus.get(REFERENCE), times)],
                    [f"{model} training vs {MODERN}, {mode}, paired", optional(versus.get(MODERN), times)],
                    [f"{model} training MFU, {mode} (measured peak)", percent(row["mfu_measured_peak"])],
                ]
                rows[-3:] = [cells + [goal] for cells, goal in zip(rows[-3:], goals)]
        if row := inference.get((model, "compiled")):
            rows.append(
                [f"{model} inference vs {REFERENCE}, compiled, paired", times(row["versus"][REFERENCE]), "1.00x"]
            )
    for (model, mode), row in training.items():
        if model.endswith(KEPT):
            kept = times(row["versus"][model.removesuffix(KEPT)])
            rows.append([f"{model} vs its memory-lean default, {mode}, paired", kept, "≤ 1.05x"])
    at_4096 = result.get("fft", {}).get("lengths", {}).get("4096", {}).get("spatial_projection_ms", {})
    if "Toeplitz default" in at_4096:
        fastest = min(at_4096.values())
        rows.append(
            [
                "gMLP's default spatial path vs its fastest at 4,096 tokens",
                times(fastest / at_4096["Toeplitz default"]),
                "1.00x",
            ]
        )
    return table(["target (bf16)", "measured", "goal"], rows)


def timing_table(rows: list[dict]) -> list[str]:
    """The rows of one task, with each model's tokens/s against each reference model's that was timed beside it."""
    references = [
        name for name in (REFERENCE, MODERN, BERT_BASE, MODERN_BASE) if any(name in row["versus"] for row in rows)
    ]
    body = [
        [
            row["model"],
            row["precision"],
            row["mode"],
            row["batch"],
            f"{row['tokens_per_second']:.0f}",
            *(optional(1.0 if row["model"] == name else row["versus"].get(name), times) for name in references),
            percent(row["mfu_measured_peak"]),
            optional(row["mfu_datasheet_peak"], percent),
            optional(row["peak_step_gib"], lambda gib: f"{gib:.1f}"),
            f"{row['first_call_seconds']:.1f}",
            row["graphs_compiled"],
        ]
        for row in rows
    ]
    headers = ["model", "precision", "mode", "batch", "tokens/s", *(f"vs {name}, paired" for name in references)]
    headers += ["MFU (measured peak)", "MFU (datasheet peak)", "peak step GiB", "first call (s)", "graphs compiled"]
    return table(headers, body)


def model_shape(m: dict) -> str:
    width = f" x {m['hidden_size']}" if "hidden_size" in m else ""
    return (
        f"{m['parameters'] / 1e6:.1f}M ({m['layers']} layers{width}, FFN {m['intermediate_size']}, attention "
        f"{m['attn_implementation']})"
    )


def render(result: dict) -> dict[str, list[str]]:
    described = ", ".join(f"{name} {model_shape(m)}" for name, m in result["models"].items())
    datasheet = optional(result.get("datasheet_peak_tflops_bf16"), lambda tflops: f"{tflops:.0f}")
    heading = (
        f"### GPU {result['device']}, size {result['size']}, n = {result['length']}: bf16 matmul peak measured "
        f"{result['matmul_peak_tflops_bf16']:.0f} TFLOP/s (datasheet {datasheet}); {described}"
    )
    parts = {"targets": [heading, "", *targets(result)]}
    for task in ("training", "inference"):
        if result.get(task):
            parts[task] = [f"{task.capitalize()}:", "", *timing_table(result[task])]
    if "profile" in result:
        parts["profile"] = profile.render(result["profile"])["rows"]
    if "fft" in result:
        parts["fft"] = [line for lines in scaling.render(result["fft"]).values() for line in lines][2:]
        if "crossover_length" in result["fft"]:
            length = result["fft"]["crossover_length"]
            found = f"from {length} tokens on" if length else "at none of the lengths measured"
            parts["fft"] += [f"The FFT is at least as fast as the direct product {found} (`crossover_length`).", ""]
    notes = []
    if result["not_run"]:
        notes.append(f"Not run before the deadline: {', '.join(result['not_run'])}.")
    notes += [f"Failed: {part}: {error}" for part, error in result["errors"].items()]
    if notes:
        parts["not_run"] = [*notes, ""]
    return parts
