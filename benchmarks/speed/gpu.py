"""The GPU section's tables (docs/benchmarks.md#on-a-cuda-gpu), rendered from the GPU records (results/speed_gpu_*.json
up to 2026-11-28, then the GPU run's step stage, which writes its section in their form): gMLP-base with each gating
unit against BERT and ModernBERT at equal parameters and at their stock shapes; and the GPU run's targets."""

from ..common import percent, table, times
from . import scaling
from .gpu_parts import KEPT, MODERN, REFERENCE

BERT_BASE, MODERN_BASE = "bert-base (sdpa)", "ModernBERT-base (sdpa)"  # the stock shapes of the records
# Dense (no sparsity) bf16 tensor-core peaks of NVIDIA's datasheets, TFLOP/s, by the first name part that matches.
DATASHEET_BF16_TFLOPS = {"H200 NVL": 835, "H200": 989, "H100 PCIe": 756, "H100 NVL": 835, "H100": 989, "A100": 312}


def datasheet_peak(name: str) -> float | None:
    """The datasheet's dense bf16 peak (FLOP/s) of the device called `name`, None for one not listed."""
    return next((tflops * 1e12 for part, tflops in DATASHEET_BF16_TFLOPS.items() if part in name), None)


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


# Issue 61's goals: bf16, equal parameters and shape; compiled (the hybrid eager where it fails to), long inputs eager.
RUN_GOALS = {"training": {REFERENCE: 1.30, MODERN: 1.15}, "mfu": 0.35, "inference": 1.10, "kept": 1.03, "long": 1.50}


def run_targets(stages: dict[str, dict]) -> list[list[str]]:
    """Issue 61's targets (target, measured, goal, met) off the GPU run's records (`stages`: "unit", "step", "long" ->
    its JSON): each gMLP's training step against BERT and ModernBERT and its MFU, inference against BERT and training
    at 16,384 tokens against BERT; the unit keeping its activations against the memory-lean default (the unit alone)."""
    rows = []

    def add(target: str, value: float | None, goal: float, format, most: bool = False) -> None:
        met = "–" if value is None else "yes" if (value <= goal if most else value >= goal) else "no"
        rows.append([target, optional(value, format), f"{'≤' if most else '≥'} {format(goal)}", met])

    step = stages.get("step", {}).get("gpu", {})
    for row in (row for row in step.get("training", []) if row["model"].startswith("gmlp")):
        model, mode, versus = row["model"], row["mode"], row.get("versus", {})
        for name, goal in RUN_GOALS["training"].items():
            add(f"{model} training vs {name}, {mode}", versus.get(name), goal, times)
        add(f"{model} training MFU, {mode} (datasheet peak)", row.get("mfu_datasheet_peak"), RUN_GOALS["mfu"], percent)
    for row in (row for row in step.get("inference", []) if row["model"].startswith("gmlp")):
        versus = row.get("versus", {}).get(REFERENCE)
        add(f"{row['model']} inference vs {REFERENCE}, {row['mode']}", versus, RUN_GOALS["inference"], times)
    for row in (row for row in stages.get("unit", {}).get("gpu", {}).get("training", []) if KEPT in row["model"]):
        target = f"{row['model']} vs the memory-lean default, the unit alone, training {row['mode']}"
        add(target, row.get("versus_torch"), RUN_GOALS["kept"], times, most=True)
    for group in stages.get("long", {}).get("gpu", {}).get("16384", {}).values():
        for row in (row for row in group.get("training", []) if row["model"].startswith("gmlp")):
            target = f"{row['model']} training at 16,384 tokens vs {REFERENCE}, {row['mode']}"
            add(target, row.get("versus", {}).get(REFERENCE), RUN_GOALS["long"], times)
    return rows


def render_targets(rows: list[list[str]]) -> dict[str, list[str]]:
    """gpu_run.json's targets as a table (docs: `<!-- table gpu_run_DATE.json targets.table -->`)."""
    return {"table": table(["target (bf16)", "measured", "goal", "met"], rows)}


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
    parts = {"profile": [heading, "", *table([*headers, "largest (ms)"], body)]}
    return parts | ({"profile_tables": tables} if tables else {})


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
