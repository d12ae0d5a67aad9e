"""The GPU section: gMLP-base and aMLP-base (the presets), BERT and ModernBERT (Transformers' own, SDPA attention) with
gMLP-base's width and depth and the FFN width that matches its parameter count, at n = 512, MLM training (logits at
the labelled positions, fused AdamW; gMLP also with its activations kept, `recompute_gating` off, in bf16 eager) and
encoder inference, bf16 autocast and fp32 (no TF32), eager and compiled; MFU
against the bf16 matmul peak measured in the same run (an 8192^3 product) and against the device's datasheet peak;
peak memory per step; the FFT path against plain dense products at 4,096 to 16,384 tokens; a torch.profiler account
by CUDA kernel of each model's bf16 training step.

Every model keeps one optimizer for the whole run, its states made before the batch search: the largest batch that
fits (per model and precision) is found with every model's weights and optimizer states on the device, as they are
while the cases are timed in turn. The batches are searched once (fp32 in its own part) and reused by the later parts
and by a resumed run (`--gpu-resume`, on the same device only).

"Compiled" is regional: each block (`GradientCheckpointingLayer`, the repeated layer of every Transformers model) runs
through `torch.compile` with static shapes, so that compiling costs one block's time and not 48 unrolled ones. The
blocks of every model, mode and precision share one code object in dynamo's cache, so its recompile limit is raised
to hold them all and reaching it raises instead of running eager; each row records the graphs its first call compiled.

Parts run in the order of PARTS; each one's failure is recorded with its error and the run goes on; the results file
is rewritten after each part. With `--deadline` (seconds from the process's start) a part starts only if its
expected time (PARTS, at base size on an H100) still fits; it and the parts after it are listed as not run, and a run
with `--gpu-resume FILE` does them later. On the CPU it runs at tiny sizes (`--quick`) so that it is tested there;
docs/benchmarks.md gives the commands for a GPU machine.
"""

import gc
import json
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from transformers import AutoModelForMaskedLM
from transformers.modeling_layers import GradientCheckpointingLayer

from ..common import (
    bert_config,
    interleaved,
    matmul_peak_flops,
    mlm_batch,
    num_parameters,
    paired_ratio,
    peak_added_mib,
    percent,
    synchronize,
    table,
    times,
)
from .models import (
    forward_flops,
    in_precision,
    labelled_loss,
    labelled_positions,
    modernbert_config,
)
from .profile import profile_cases
from .scaling import measure_lengths
from .scaling import render as render_scaling

PRESETS = {"base": ("gmlp-base", "amlp-base"), "tiny": ("gmlp-tiny", "amlp-tiny")}
FFT_LENGTHS = {"base": (4096, 8192, 16384), "tiny": (256, 512)}
REFERENCE, MODERN = "BERT (sdpa)", "ModernBERT (sdpa)"
# gMLP's model with its memory-lean training off (`recompute_gating=False`): every activation kept for the backward
# pass, at the largest batch that fits that way; its own row beside gMLP's default and BERT.
KEPT = "gmlp, activations kept"
# Dense (no sparsity) bf16 tensor-core peaks of NVIDIA's datasheets, TFLOP/s, by the first name part that matches.
DATASHEET_BF16_TFLOPS = {"H200 NVL": 835, "H200": 989, "H100 PCIe": 756, "H100 NVL": 835, "H100": 989, "A100": 312}
# Part -> seconds it is expected to take at base size: what each took on an H200 (part_seconds in
# benchmarks/results/speed_gpu.json), with room for aMLP's and ModernBERT's bf16 batches, which that run's search cut
# short, and fp32 compiled estimated; the deadline starts a part only while that much time is left.
PARTS = {
    "batches-bf16": 20,
    "training-bf16-eager": 50,
    "inference-bf16-eager": 15,
    "training-bf16-eager-kept": 35,
    "fft": 30,
    "training-bf16-compiled": 70,
    "inference-bf16-compiled": 20,
    "profile-bf16": 90,
    "training-fp32-eager": 130,
    "inference-fp32-eager": 20,
    "training-fp32-compiled": 100,
    "inference-fp32-compiled": 40,
}
# Every (model, mode, precision) compiles its own graph on the blocks' one code object; dynamo's default limit is 8.
RECOMPILE_LIMIT = 64


def datasheet_peak(name: str) -> float | None:
    """The datasheet's dense bf16 peak (FLOP/s) of the device called `name`, None for one not listed."""
    return next((tflops * 1e12 for part, tflops in DATASHEET_BF16_TFLOPS.items() if part in name), None)


def device_name(device) -> str:
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def process_start() -> float:
    """When this process started (`time.time()`), from /proc; the time of the first call where /proc is missing."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
        return int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return time.time()


def build(size: str, device) -> dict:
    """name -> model on `device` at equal parameters: gMLP and aMLP by their presets, BERT and ModernBERT with gMLP's
    width and depth and the FFN width that matches gMLP's count, both with SDPA attention."""
    from gmlp import GMLPConfig

    gmlp, amlp = (GMLPConfig.from_preset(name) for name in PRESETS[size])
    torch.manual_seed(0)
    with torch.device(device):  # initialised there: 4 x 130M parameters take seconds on the host
        models = {"gmlp": AutoModelForMaskedLM.from_config(gmlp), "amlp": AutoModelForMaskedLM.from_config(amlp)}
        target = num_parameters(models["gmlp"])
        like = gmlp.to_dict()
        models[REFERENCE] = AutoModelForMaskedLM.from_config(bert_config(like, target), attn_implementation="sdpa")
        models[MODERN] = AutoModelForMaskedLM.from_config(modernbert_config(like, target), attn_implementation="sdpa")
    return models


def blocks(model) -> list[torch.nn.Module]:
    return [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]


class Compiled:
    """Each model's blocks compiled once (static shapes), switched on and off by setting their `forward`."""

    def __init__(self):
        torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        self.forwards = {}

    def set(self, model, compiled: bool) -> None:
        for block in blocks(model):
            if not compiled:
                vars(block).pop("forward", None)
                continue
            if block not in self.forwards:
                self.forwards[block] = torch.compile(block.forward, dynamic=False)
            block.forward = self.forwards[block]


def set_recompute_gating(model, on: bool) -> None:
    """Switch gMLP's memory-lean training on or off: the config's `recompute_gating` and each block's copy of it."""
    model.config.recompute_gating = on
    for module in model.modules():
        if hasattr(module, "recompute_gating"):
            module.recompute_gating = on


def keeping_activations(step, model):
    """`step` run with `model`'s gating units kept for the backward pass instead of recomputed there."""

    def run():
        set_recompute_gating(model, False)
        try:
            step()
        finally:
            set_recompute_gating(model, True)

    return run


def training_step(model, optimizer, input_ids, labels):
    """One optimizer step of `model` (forward, backward, `optimizer`) on the batch, with the loss at the labelled
    positions (`labelled_loss`), as a function."""
    index, targets = labelled_positions(labels)

    def step():
        labelled_loss(model, input_ids, index, targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def make_optimizer(model, device):
    """Fused AdamW with its states made (one step at batch 1 and zero learning rate), so that a batch search sees
    them."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)
    model.train()
    input_ids, labels = mlm_batch(1, model.config.max_position_embeddings, model.config.vocab_size, device, 0.5)
    in_precision(training_step(model, optimizer, input_ids, labels), "bf16", device)()
    optimizer.param_groups[0]["lr"] = 1e-4
    return optimizer


def free_memory(device) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def step_peak_gib(step, device) -> float:
    """The peak memory one call of `step` adds (GiB, the caching allocator's); raises torch.OutOfMemoryError."""
    return peak_added_mib(step, repeats=1, device=device) / 1024


def largest_batch(step_at, reset, device, start: int = 8, share: float = 0.9, limit: int = 4096) -> dict:
    """The largest batch (a multiple of `start`) whose step `step_at(batch)` fits in `share` of the device memory
    that is free now: the peaks at `start` and 2 `start` give the memory per sequence, the batch it allows is tried,
    then smaller ones until one fits; `reset()` after each step clears its gradients. Returns the batch, its peak and
    the tries."""
    # What the caching allocator holds from the model before (the largest batch of its own) counts as free: on an
    # H200 the second model's search otherwise saw 11 of 132 GiB and chose a batch of 24.
    free_memory(device)
    free = torch.cuda.mem_get_info(device)[0]
    peaks = {}
    for batch in (start, 2 * start):
        peaks[batch] = step_peak_gib(step_at(batch), device)
        reset()
    per_sequence = (peaks[2 * start] - peaks[start]) / start
    allowed = start + (share * free / 2**30 - peaks[start]) / max(per_sequence, 1e-9)
    batch = max(start, min(limit, int(allowed) // start * start))
    tries = []
    while batch >= start:
        peak = None
        try:
            peak = step_peak_gib(step_at(batch), device)
        except torch.OutOfMemoryError:
            pass
        reset()  # here, not in the handler, whose traceback still holds the failed step's tensors
        tries.append([batch, "out of memory" if peak is None else round(peak, 2)])
        if peak is not None:
            return {"batch": batch, "peak_gib": peak, "free_gib": free / 2**30, "per_sequence_gib": per_sequence,
                    "tries": tries}  # fmt: skip
        batch -= max(start, batch // 10 // start * start)
    raise RuntimeError(f"Not even a batch of {start} fits (free: {free / 2**30:.1f} GiB).")


def throughput_ratio(times: dict[str, list[float]], tokens: dict[str, int], name: str, reference: str) -> float:
    """`name`'s tokens/s over `reference`'s, paired by round (each model runs at its own largest batch): above 1
    means `name` is faster."""
    return paired_ratio(times, name, reference) * tokens[name] / tokens[reference]


def host_syncs(step, device) -> int:
    """How many times one call of `step` waits for the GPU (CUDA's sync debug mode warns at each); 0 on the CPU."""
    if torch.device(device).type != "cuda":
        return 0
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step()
            synchronize(device)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(warning.message) for warning in caught)


def graphs_compiled() -> int:
    return counters["stats"]["unique_graphs"]


def time_group(cases: dict, args, device, inference: bool) -> dict:
    """Interleaved seconds per step of one group of cases (name -> step); the first call of each timed apart, with
    the graphs dynamo compiled during it."""
    first_call, graphs = {}, {}
    with torch.inference_mode(inference):
        for name, step in cases.items():
            before, start = graphs_compiled(), time.perf_counter()
            step()
            synchronize(device)
            first_call[name] = time.perf_counter() - start
            graphs[name] = graphs_compiled() - before
        measured = interleaved(cases, args.rounds, warmup=1, repeats=args.repeats, device=device)
    return {"first_call": first_call, "graphs": graphs, "times": measured}


def measure(args) -> dict:
    device = torch.device(args.device)
    size = "tiny" if args.quick else args.gpu_size
    deadline = process_start() + args.deadline if args.deadline else None
    result = {"size": size, "device": device_name(device), "not_run": [], "errors": {}, "part_seconds": {}}
    if args.gpu_resume:
        earlier = json.loads(Path(args.gpu_resume).read_text())["gpu"]
        if earlier["device"] != result["device"] or earlier["size"] != size:
            raise ValueError(
                f"{args.gpu_resume} was measured on {earlier['device']} at size {earlier['size']}, this run is on "
                f"{result['device']} at size {size}: its batches and rows do not carry over."
            )
        result = earlier | {"not_run": [], "errors": {}, "resumed_from": str(args.gpu_resume)}
    wanted = args.gpu_parts.split(",") if args.gpu_parts else list(PARTS)
    if unknown := set(wanted) - set(PARTS):
        raise ValueError(f"Unknown parts {sorted(unknown)}; the parts are: {', '.join(PARTS)}.")
    peak = matmul_peak_flops(device, torch.bfloat16, size=8192 if device.type == "cuda" else 1024)
    datasheet = datasheet_peak(result["device"])
    result |= {"matmul_peak_tflops_bf16": peak / 1e12, "datasheet_peak_tflops_bf16": datasheet and datasheet / 1e12}
    result["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    models = build(size, device)
    length = models["gmlp"].config.max_position_embeddings
    result["length"] = length
    result["models"] = {
        name: {
            "parameters": num_parameters(model),
            "layers": model.config.num_hidden_layers,
            "intermediate_size": model.config.intermediate_size,
            "attn_implementation": model.config._attn_implementation,
        }
        for name, model in models.items()
    }
    optimizers = {name: make_optimizer(model, device) for name, model in models.items()}
    batches = {tuple(key.split(" | ")): value for key, value in result.get("batches", {}).items()}
    compiled = Compiled()

    def run(part: str, work) -> None:
        if part not in wanted or part in result["part_seconds"]:
            return
        if result["not_run"] or deadline and time.time() + (PARTS[part] if size == "base" else 0) > deadline:
            result["not_run"].append(part)  # and every part after it: they build on the earlier ones
            return
        print(f"  {part} ...", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            work()
            result["part_seconds"][part] = time.monotonic() - start
        except KeyboardInterrupt:
            result["errors"][part] = "interrupted (the time limit of the call)"
            args.save(result)
            raise
        except Exception as error:  # noqa: BLE001 (any failure of a part is recorded, and the next part runs)
            result["errors"][part] = f"{type(error).__name__}: {error}"[:2000]
            traceback.print_exc()
        finally:
            for model in models.values():
                model.zero_grad(set_to_none=True)
            free_memory(device)
        args.save(result)

    def base(name: str) -> str:
        """The model `name` runs (KEPT is gMLP's, with its optimizer)."""
        return "gmlp" if name == KEPT else name

    def train_step(name: str, batch: int, precision: str):
        """`name`'s training step (KEPT: gMLP's, keeping its activations) on a batch of `batch`, and its labels."""
        model = models[base(name)]
        input_ids, labels = mlm_batch(batch, length, model.config.vocab_size, device)
        step = training_step(model, optimizers[base(name)], input_ids, labels)
        if name == KEPT:
            step = keeping_activations(step, model)
        return in_precision(step, precision, device), labels

    def batch_for(name: str, precision: str) -> int:
        if (name, precision) not in batches:
            if args.gpu_batch or device.type != "cuda":
                batches[(name, precision)] = args.gpu_batch or 2
            else:
                model = models[base(name)]

                def reset():
                    model.zero_grad(set_to_none=True)
                    free_memory(device)

                model.train()
                found = largest_batch(lambda batch: train_step(name, batch, precision)[0], reset, device)
                result.setdefault("batch_search", {})[f"{name} | {precision}"] = found
                batches[(name, precision)] = found["batch"]
            result["batches"] = {" | ".join(key): batch for key, batch in batches.items()}
        return batches[(name, precision)]

    def find_batches(precision: str):
        def work():
            for name in models:
                step, _ = train_step(name, batch_for(name, precision), precision)
                result.setdefault("host_syncs_per_step", {})[f"{name} | {precision}"] = host_syncs(step, device)

        return work

    def timed(mode: str, precision: str, is_compiled: bool, names: tuple = tuple(models), rows: tuple = ()):
        """Time `names` (default: every model) side by side; record the rows of `rows` (default: all of them)."""

        def work():
            cases, flops, tokens = {}, {}, {}
            for name in names:
                model = models[base(name)]
                compiled.set(model, is_compiled)
                batch = batch_for(name, precision)
                tokens[name] = batch * length
                if mode == "training":
                    model.train()
                    cases[name], labels = train_step(name, batch, precision)
                    predicted = int((labels != -100).sum())
                    flops[name] = 3 * forward_flops(model.config, tokens[name], length, predicted)
                else:
                    model.eval()
                    input_ids, _ = mlm_batch(batch, length, model.config.vocab_size, device)
                    flops[name] = forward_flops(model.config, tokens[name], length)
                    step = lambda model=model, ids=input_ids: model.base_model(input_ids=ids)
                    cases[name] = in_precision(step, precision, device)
            group = time_group(cases, args, device, inference=mode == "inference")
            for name in rows or names:
                step = cases[name]
                seconds = statistics.median(group["times"][name])
                memory = None
                if device.type == "cuda":
                    with torch.inference_mode(mode == "inference"):
                        memory = step_peak_gib(step, device)
                others = {"vs_bert_sdpa": REFERENCE, "vs_modernbert_sdpa": MODERN}
                if name == KEPT:
                    others["vs_gmlp_recomputing"] = "gmlp"
                result.setdefault(mode, {})[f"{name} | {precision} | {'compiled' if is_compiled else 'eager'}"] = {
                    "batch": batches[(name, precision)],
                    "tokens_per_second": tokens[name] / seconds,
                    "tflops": flops[name] / seconds / 1e12,
                    "mfu_vs_measured_bf16_peak": flops[name] / seconds / peak,
                    "mfu_vs_datasheet_bf16_peak": datasheet and flops[name] / seconds / datasheet,
                    **{
                        key: throughput_ratio(group["times"], tokens, name, other) if other in cases else None
                        for key, other in others.items()
                    },
                    "peak_step_gib": memory,
                    "first_call_seconds": group["first_call"][name],
                    "graphs_compiled": group["graphs"][name],
                    "times": group["times"][name],
                }
            for model in models.values():
                compiled.set(model, False)

        return work

    def kernel_profile():
        cases = {}
        for is_compiled in (False, True) if args.gpu_compile else (False,):
            for name, model in models.items():
                model.train()
                step, _ = train_step(name, batch_for(name, "bf16"), "bf16")

                def switched(model=model, step=step, is_compiled=is_compiled):
                    compiled.set(model, is_compiled)
                    step()

                cases[f"{name} bf16 {'compiled' if is_compiled else 'eager'}"] = switched
        result["profile"] = profile_cases(cases, device, steps=2)
        for model in models.values():
            compiled.set(model, False)

    def fft() -> None:
        gmlp = models["gmlp"].config
        shape = {key: getattr(gmlp, key) for key in ("vocab_size", "hidden_size", "intermediate_size")}
        shape |= {"num_hidden_layers": gmlp.num_hidden_layers, "max_position_embeddings": length}
        lengths = FFT_LENGTHS[size]
        result["fft"] = measure_lengths(
            lengths, max(lengths), args.gpu_fft_layers, args.rounds, args.rounds, shape, device, "bf16",
            plain_products=True,
        )  # fmt: skip

    work = {
        "batches-bf16": find_batches("bf16"),
        "training-bf16-eager": timed("training", "bf16", is_compiled=False),
        "inference-bf16-eager": timed("inference", "bf16", is_compiled=False),
        "training-bf16-eager-kept": timed("training", "bf16", False, names=(KEPT, "gmlp", REFERENCE), rows=(KEPT,)),
        "fft": fft,
        "training-bf16-compiled": timed("training", "bf16", is_compiled=True),
        "inference-bf16-compiled": timed("inference", "bf16", is_compiled=True),
        "profile-bf16": kernel_profile,
        "training-fp32-eager": timed("training", "fp32", is_compiled=False),
        "inference-fp32-eager": timed("inference", "fp32", is_compiled=False),
        "training-fp32-compiled": timed("training", "fp32", is_compiled=True),
        "inference-fp32-compiled": timed("inference", "fp32", is_compiled=True),
    }
    for part in PARTS:
        if args.gpu_compile or not part.endswith("-compiled"):
            run(part, work[part])
    return result


def targets(result: dict) -> list[str]:
    """The GPU targets (bf16, equal parameters) against what was measured, and gMLP against ModernBERT."""
    training = result.get("training", {})
    eager, compiled = training.get("gmlp | bf16 | eager"), training.get("gmlp | bf16 | compiled")
    rows = []
    for mode, row in (("eager", eager), ("compiled", compiled)):
        if row:
            rows += [
                [f"gMLP training vs BERT (SDPA), bf16 {mode}, paired", times(row["vs_bert_sdpa"]), "1.20x"],
                [f"gMLP training vs ModernBERT (SDPA), bf16 {mode}, paired", times(row["vs_modernbert_sdpa"]), "–"],
                [f"gMLP training MFU, bf16 {mode} (measured peak)", percent(row["mfu_vs_measured_bf16_peak"]), "40%"],
            ]
    if eager and compiled:
        ratio = compiled["tokens_per_second"] / eager["tokens_per_second"]
        rows.append(["gMLP training, compiled vs eager, bf16 (ratio of medians)", times(ratio), "1.20x"])
    if kept := training.get(f"{KEPT} | bf16 | eager"):
        rows += [
            [
                "gMLP training, activations kept, vs BERT (SDPA), bf16 eager, paired",
                times(kept["vs_bert_sdpa"]),
                "1.20x",
            ],
            [
                "gMLP training, activations kept vs recomputed, bf16 eager, paired",
                times(kept["vs_gmlp_recomputing"]),
                "–",
            ],
        ]
    return table(["target", "measured", "goal"], rows)


def optional(value, format) -> str:
    return "–" if value is None else format(value)


def render(result: dict) -> dict[str, list[str]]:
    described = ", ".join(
        f"{name} {m['parameters'] / 1e6:.1f}M ({m['layers']} layers, FFN {m['intermediate_size']}, attention "
        f"{m['attn_implementation']})"
        for name, m in result["models"].items()
    )
    datasheet = optional(result.get("datasheet_peak_tflops_bf16"), lambda tflops: f"{tflops:.0f}")
    parts = {
        "targets": [
            (
                f"### GPU {result['device']}, size {result['size']}, n = {result['length']}: bf16 matmul peak measured "
                f"{result['matmul_peak_tflops_bf16']:.0f} TFLOP/s (datasheet {datasheet}); {described}"
            ),
            "",
            *targets(result),
        ]
    }
    for mode in ("training", "inference"):
        body = [
            [
                *name.split(" | "),
                row["batch"],
                f"{row['tokens_per_second']:.0f}",
                optional(row["vs_bert_sdpa"], times),
                optional(row["vs_modernbert_sdpa"], times),
                percent(row["mfu_vs_measured_bf16_peak"]),
                optional(row["mfu_vs_datasheet_bf16_peak"], percent),
                optional(row["peak_step_gib"], lambda gib: f"{gib:.1f}"),
                f"{row['first_call_seconds']:.1f}",
                row["graphs_compiled"],
            ]
            for name, row in result.get(mode, {}).items()
        ]
        headers = ["model", "precision", "mode", "batch", "tokens/s", "vs BERT (SDPA), paired"]
        headers += ["vs ModernBERT (SDPA), paired", "MFU (measured peak)", "MFU (datasheet peak)", "peak step GiB"]
        parts[mode] = [f"{mode.capitalize()}:", "", *table([*headers, "first call (s)", "graphs compiled"], body)]
    if "profile" in result:
        body = [
            [
                name,
                f"{row['ms_total']:.0f}",
                percent(row["matmul_share"]),
                percent(row["compiled_kernels_share"]),
                times(row["amdahl_bound"]),
                "; ".join(f"{key[:60]} {ms:.1f}" for key, ms in list(row["top_ms"].items())[:5]),
            ]
            for name, row in result["profile"].items()
        ]
        headers = ["training step", "kernel time, 2 steps (ms)", "matmul kernels", "inductor's kernels"]
        headers += ["bound on any fusion", "largest kernels (ms)"]
        parts["profile"] = ["By CUDA kernel (torch.profiler):", "", *table(headers, body)]
    if "fft" in result:
        parts["fft"] = [line for lines in render_scaling(result["fft"]).values() for line in lines]
    notes = []
    if result["not_run"]:
        notes.append(f"Not run before the deadline: {', '.join(result['not_run'])}.")
    notes += [f"Failed: {part}: {error}" for part, error in result["errors"].items()]
    if notes:
        parts["not_run"] = [*notes, ""]
    return parts
