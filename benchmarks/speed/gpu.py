"""The GPU section (docs/benchmarks.md#on-a-cuda-gpu): gMLP-base with each spatial gating unit and with PyTorch's
keeping its activations, against BERT and ModernBERT at equal parameters and at their stock shapes, every model at
one fixed batch. The parts (PARTS, by priority) run while their time fits before `--deadline-at`; a failing part is
recorded, the next runs."""

import sys
import time
import traceback
from functools import partial

import torch

from ..common import matmul_peak_flops, percent, table, times
from . import gpu_parts, scaling
from .gpu_parts import BERT_BASE, KEPT, MODERN, MODERN_BASE, REFERENCE, Bench

# Part -> seconds expected at base size (the H200's part_seconds in results/speed_gpu_2026-11-28.json, three rounds;
# max-autotune's GEMM search estimated): the deadline starts a part only while that much time is left.
PARTS = {
    "training-bf16-eager": 35,
    "training-bf16-compiled": 65,
    "inference-bf16-eager": 15,
    "inference-bf16-compiled": 20,
    "fft-crossover": 45,
    "training-bf16-max-autotune": 120,
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
    everyone = [*ours, f"gmlp (torch){KEPT}", REFERENCE, MODERN, BERT_BASE, MODERN_BASE]
    inference = [*ours, REFERENCE, MODERN, BERT_BASE, MODERN_BASE]
    plain = "gmlp (torch)" if "torch" in kernels else ours[-1]
    autotune = dict.fromkeys([ours[0], REFERENCE, MODERN], "compiled") | {plain: "max-autotune"}

    timed = partial(gpu_parts.time_group, bench)

    def group(task, precision, mode, names):
        return partial(timed, task, precision, dict.fromkeys(names, mode))

    return {
        "training-bf16-eager": group("training", "bf16", "eager", everyone),
        "training-bf16-compiled": group("training", "bf16", "compiled", everyone),
        "inference-bf16-eager": group("inference", "bf16", "eager", inference),
        "inference-bf16-compiled": group("inference", "bf16", "compiled", inference),
        "fft-crossover": partial(gpu_parts.fft_crossover, bench, size, ours[0]),
        "training-bf16-max-autotune": partial(timed, "training", "bf16", autotune, record=[plain]),
        "inference-fp32-eager": group("inference", "fp32", "eager", equal),
        "inference-fp32-compiled": group("inference", "fp32", "compiled", equal),
        "training-fp32-compiled": group("training", "fp32", "compiled", equal),
    }


def measure(args) -> dict:
    device = torch.device(args.device)
    size, kernels = "tiny" if args.quick else "base", args.gpu_kernels.split(",")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    result = {"size": size, "device": name, "sgu_kernels": kernels, "part_seconds": {}, "not_run": [], "errors": {}}
    wanted = args.gpu_parts.split(",") if args.gpu_parts else list(PARTS)
    if unknown := set(wanted) - set(PARTS):
        raise ValueError(f"Unknown parts {sorted(unknown)}; the parts are: {', '.join(PARTS)}.")
    torch._dynamo.config.recompile_limit = 128
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    peak = matmul_peak_flops(device, torch.bfloat16, size=8192 if device.type == "cuda" else 1024)
    datasheet = datasheet_peak(name)
    everyone = [f"gmlp ({kernel})" for kernel in kernels] + [f"gmlp (torch){KEPT}", REFERENCE, MODERN]
    models = gpu_parts.build(size, device, [*everyone, BERT_BASE, MODERN_BASE])
    length = next(iter(models.values())).config.max_position_embeddings
    batches = {precision: dict.fromkeys(models, gpu_parts.BATCH[size]) for precision in ("bf16", "fp32")}
    bench = Bench(device, models, length, peak, datasheet, args.rounds, args.min_run_time, batches)
    bench.optimizers = {name: gpu_parts.make_optimizer(model, device) for name, model in models.items()}
    result |= {
        "length": length,
        "batches": batches,
        "matmul_peak_tflops_bf16": peak / 1e12,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "datasheet_peak_tflops_bf16": datasheet and datasheet / 1e12,
        "models": gpu_parts.describe(models),
    }
    for part, work in plan(bench, size, kernels).items():
        if part in wanted:
            expected = PARTS[part] if size == "base" else 0
            run_part(result, part, work, bench, deadline=args.deadline_at, expected=expected, save=args.save)
    return result


def run_part(result: dict, part: str, work, bench: Bench, *, deadline: float | None, expected: float, save) -> None:
    """Run `part` unless it would end after `deadline`; record its time or its error."""
    if deadline is not None and time.time() + expected > deadline:
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
        gpu_parts.free_memory(bench)
    save(result)


def optional(value, format) -> str:
    return "–" if value is None else format(value)


def targets(result: dict) -> list[str]:
    """Issue 49's targets (bf16, equal parameters) against what was measured."""
    bf16 = {
        task: {(row["model"], row["mode"]): row for row in result.get(task, []) if row["precision"] == "bf16"}
        for task in ("training", "inference")
    }
    rows = []
    for model in (name for name in result["models"] if name.startswith("gmlp") and not name.endswith(KEPT)):
        for mode, goals in (("eager", ("1.20x", "–", "–")), ("compiled", ("1.20x", "1.00x", "42%"))):
            if row := bf16["training"].get((model, mode)):
                measured = [optional(row["versus"].get(name), times) for name in (REFERENCE, MODERN)]
                measured.append(percent(row["mfu_measured_peak"]))
                labels = [f"{model} training vs {name}, {mode}, paired" for name in (REFERENCE, MODERN)]
                labels.append(f"{model} training MFU, {mode} (measured peak)")
                rows += [list(cells) for cells in zip(labels, measured, goals)]
        if row := bf16["inference"].get((model, "compiled")):
            versus = times(row["versus"][REFERENCE])
            rows.append([f"{model} inference vs {REFERENCE}, compiled, paired", versus, "1.00x"])
    for (model, mode), row in bf16["training"].items():
        if model.endswith(KEPT):
            kept = times(row["versus"][model.removesuffix(KEPT)])
            rows.append([f"{model} vs its memory-lean default, {mode}, paired", kept, "≤ 1.05x"])
    at_4096 = result.get("fft", {}).get("lengths", {}).get("4096", {}).get("spatial_projection_ms", {})
    if "Toeplitz default" in at_4096:
        default = times(min(at_4096.values()) / at_4096["Toeplitz default"])
        rows.append(["gMLP's default spatial path vs its fastest at 4,096 tokens", default, "1.00x"])
    return table(["target (bf16)", "measured", "goal"], rows)


def timing_table(rows: list[dict]) -> list[str]:
    """The rows of one task, with each model's tokens/s against each reference model's that was timed beside it."""
    references = [
        name for name in (REFERENCE, MODERN, BERT_BASE, MODERN_BASE) if any(name in row["versus"] for row in rows)
    ]
    body = [
        [
            *(row[key] for key in ("model", "precision", "mode", "batch")),
            f"{row['tokens_per_second']:.0f}",
            *(optional(1.0 if row["model"] == name else row["versus"].get(name), times) for name in references),
            optional(row["mfu_measured_peak"], percent),
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


def profile_tables(result: dict) -> dict[str, list[str]]:
    """The share of matmuls and of inductor's kernels per case, its largest kernels, and the profiler's own tables."""
    body = [
        [
            name,
            f"{row['ms_total']:.0f}",
            percent(row["matmul_share"]),
            percent(row["compiled_kernels_share"]),
            optional(row["amdahl_bound"], times),
            "; ".join(f"{key.removeprefix('aten::')[:60]} {ms:.1f}" for key, ms in list(row["top_ms"].items())[:5]),
        ]
        for name, row in result["cases"].items()
    ]
    headers = ["case", "total (ms)", "matmuls", "inductor's kernels", "bound on any fusion (1 / matmul share)"]
    heading = f"### Where the time goes: {result['clock']}, {result['steps']} steps (torch.profiler)"
    tables = [
        line
        for name, row in result["cases"].items()
        if "table" in row
        for line in (f"{name}:", "", "```", row["table"].rstrip(), "```", "")
    ]
    return {"profile": [heading, "", *table([*headers, "largest (ms)"], body)]} | (
        {"profile_tables": tables} if tables else {}
    )


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
        parts |= profile_tables(result["profile"])
    if "fft" in result:
        parts["fft"] = [line for lines in scaling.render(result["fft"]).values() for line in lines][2:]
        if "crossover_length" in result["fft"]:
            length = result["fft"]["crossover_length"]
            found = f"from {length} tokens on" if length else "at none of the lengths measured"
            parts["fft"] += [f"The FFT is at least as fast as the direct product {found} (`crossover_length`).", ""]
    notes = [f"Not run before the deadline: {', '.join(result['not_run'])}."] if result["not_run"] else []
    notes += [f"Failed: {part}: {error}" for part, error in result["errors"].items()]
    return parts | ({"not_run": [*notes, ""]} if notes else {})
