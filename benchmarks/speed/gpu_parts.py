"""The GPU section's models and parts: each part a function of the `Bench` (the models, their optimizers, their fixed
batches, the compiled blocks) returning a small dataclass that writes itself into the results (`into`)."""

import dataclasses
import gc
import statistics
import time
from functools import partial

import torch
from torch._dynamo.utils import counters
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForMaskedLM, BertConfig, ModernBertConfig
from transformers.modeling_layers import GradientCheckpointingLayer

from gmlp import GMLPConfig

from .. import common
from ..common import interleaved, mlm_batch, num_parameters, paired_ratio, peak_added_mib
from .models import forward_flops, in_precision, labelled_loss, labelled_positions, training_step_fn
from .scaling import DEFAULT_PATH, SPATIAL_PATHS, crossover, measure_lengths

REFERENCE, MODERN = "BERT (sdpa)", "ModernBERT (sdpa)"
BERT_BASE, MODERN_BASE = "bert-base (sdpa)", "ModernBERT-base (sdpa)"
KEPT = ", activations kept"  # the suffix of gMLP's row with recompute_gating=False
TINY_STOCK = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
SIZES = {  # the stock shapes are BertConfig's and ModernBertConfig's defaults at base size
    "base": {"preset": "gmlp-base", "stock": {}, "fft_lengths": (1024, 2048, 4096, 8192, 16384), "fft_layers": 4},
    "tiny": {"preset": "gmlp-tiny", "stock": TINY_STOCK, "fft_lengths": (128, 256), "fft_layers": 1},
}
# Every model's batch (sequences of n tokens), training and inference, bf16 and fp32: fixed, no search. At base size 64
# (32,768 tokens a step) fits every model on an H100 of 80 GB, the least of them gMLP with its activations kept (at
# most 152 on an H200 of 141 GB, results/speed_gpu_2026-11-28.json), and fills the GPU's products.
BATCH = {"base": 64, "tiny": 2}
COMPILE_MODES = {"compiled": None, "max-autotune": "max-autotune-no-cudagraphs"}
# Matrix products: the kernels of cuBLAS (gemm, xmma, cutlass, nvjet) and of fused attention; aten's on the CPU.
MATMULS = ("gemm", "xmma", "cutlass", "nvjet", "flash", "fmha", "attention", "aten::mm", "aten::addmm", "aten::bmm")


def build(size: str, device, names: list[str], **overrides) -> dict[str, torch.nn.Module]:
    """name -> model on `device`, for the `names` asked: gMLP by its preset (`overrides` on it), "gmlp (KERNEL)" with
    that `sgu_kernel` and with KEPT its activations kept (`recompute_gating=False`); BERT and ModernBERT with gMLP's
    width, depth, length and parameter count (REFERENCE, MODERN) and at their stock shapes (BERT_BASE, MODERN_BASE),
    all with SDPA."""
    spec = SIZES[size]

    def gmlp(**more):
        return GMLPConfig.from_preset(spec["preset"], **overrides | more)

    def config(name):
        if name.startswith("gmlp ("):
            kernel = name.removeprefix("gmlp (").split(")")[0]
            return gmlp(sgu_kernel=kernel, recompute_gating=not name.endswith(KEPT))
        like, target = gmlp().to_dict(), common.parameters_of(lambda: AutoModelForMaskedLM.from_config(gmlp()))
        makers = {
            REFERENCE: lambda: common.bert_config(like, target),
            MODERN: lambda: common.modernbert_config(like, target),
        }
        makers |= {
            BERT_BASE: lambda: BertConfig(**spec["stock"]),
            MODERN_BASE: lambda: ModernBertConfig(**spec["stock"]),
        }
        return makers[name]()

    configs = {name: config(name) for name in names}
    torch.manual_seed(0)
    with torch.device(device):  # initialised there: 7 models of 110M-150M parameters take seconds on the host
        return {
            name: AutoModelForMaskedLM.from_config(
                config, **({} if name.startswith("gmlp") else {"attn_implementation": "sdpa"})
            )
            for name, config in configs.items()
        }


def describe(models: dict[str, torch.nn.Module]) -> dict[str, dict]:
    """Each model's parameter count and shape, as the results give them."""
    shape = {"layers": "num_hidden_layers", "hidden_size": "hidden_size", "intermediate_size": "intermediate_size"}
    shape |= {"attn_implementation": "_attn_implementation"}  # the results' key -> the config's field
    return {
        name: {"parameters": num_parameters(model)} | {key: getattr(model.config, f) for key, f in shape.items()}
        for name, model in models.items()
    }


@dataclasses.dataclass
class Bench:
    """What the parts share: the models, their optimizers and compiled blocks, their batches (precision -> name ->
    batch), how to time, and MFU's denominators: `datasheet` (the fixed one) and `peak` (measured), FLOP/s or None."""

    device: torch.device
    models: dict[str, torch.nn.Module]
    length: int
    peak: float | None
    datasheet: float | None
    rounds: int
    min_run_time: float
    batches: dict[str, dict[str, int]]
    optimizers: dict = dataclasses.field(default_factory=dict)
    compiled: dict = dataclasses.field(default_factory=dict)

    def step(self, name: str, task: str, precision: str, batch: int | None = None) -> tuple:
        """`name`'s training step or encoder forward on a batch of `batch` (default: its own), and its labels."""
        model = self.models[name]
        batch = batch or self.batches[precision][name]
        input_ids, labels = mlm_batch(batch, self.length, model.config.vocab_size, self.device)
        if task == "inference":
            model.eval()
            step = partial(model.base_model, input_ids=input_ids)
        else:
            model.train()
            step = training_step(model, self.optimizers[name], input_ids, labels)
        return in_precision(step, precision, self.device), labels

    def set_mode(self, model, mode: str) -> None:
        """Run `model`'s blocks eagerly or compiled (each block compiled once per mode, static shapes)."""
        for block in (module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)):
            vars(block).pop("forward", None)
            if mode != "eager":
                if (block, mode) not in self.compiled:
                    compiled = torch.compile(block.forward, dynamic=False, mode=COMPILE_MODES[mode])
                    self.compiled[(block, mode)] = compiled
                block.forward = self.compiled[(block, mode)]


def training_step(model, optimizer, input_ids, labels):
    """One optimizer step of `model` with the loss at the labelled positions, found once (`labelled_loss`)."""
    index, targets = labelled_positions(labels)

    def loss(model, input_ids, _):
        return labelled_loss(model, input_ids, index, targets)

    return training_step_fn(model, loss, input_ids, labels, optimizer=optimizer)


def make_optimizer(model, device):
    """Fused AdamW with its states made (a step at batch 1 and rate 0): a timed step allocates none."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)
    model.train()
    input_ids, labels = mlm_batch(1, model.config.max_position_embeddings, model.config.vocab_size, device, 0.5)
    in_precision(training_step(model, optimizer, input_ids, labels), "bf16", device)()
    optimizer.param_groups[0]["lr"] = 1e-4
    return optimizer


def free_memory(bench: Bench) -> None:
    for model in bench.models.values():
        model.zero_grad(set_to_none=True)
    free_memory_of(bench.device)


def free_memory_of(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


@dataclasses.dataclass
class Timings:
    """The rows of models timed side by side: tokens/s (over each other's, paired), MFU, the first call's figures."""

    task: str  # training or inference
    rows: list[dict]

    def into(self, result: dict) -> None:
        result.setdefault(self.task, []).extend(self.rows)


def first_call(step, device) -> tuple[float, int, float | None]:
    """The first call of `step` (compiling): its seconds, the graphs compiled, and on a GPU its peak memory (GiB)."""
    graphs, start, peak = counters["stats"]["unique_graphs"], time.perf_counter(), None
    if device.type == "cuda":
        peak = peak_added_mib(step, repeats=1, device=device) / 1024
    else:
        step()
    return time.perf_counter() - start, counters["stats"]["unique_graphs"] - graphs, peak


def time_group(bench: Bench, task: str, precision: str, modes: dict[str, str], record=None) -> Timings:
    """The models of `modes` (name -> mode) timed side by side, each at its batch; the rows of `record` (or all)."""
    cases, tokens, flops = {}, {}, {}
    try:
        for name, mode in modes.items():
            model = bench.models[name]
            bench.set_mode(model, mode)
            cases[name], labels = bench.step(name, task, precision)
            tokens[name] = labels.numel()
            if task == "training":
                flops[name] = 3 * forward_flops(model.config, tokens[name], bench.length, int((labels != -100).sum()))
            else:
                flops[name] = forward_flops(model.config, tokens[name], bench.length)
        with torch.inference_mode(task == "inference"):
            first = {name: first_call(step, bench.device) for name, step in cases.items()}
            measured = interleaved(cases, bench.rounds, bench.min_run_time, warmup=0)
    finally:
        for name in modes:
            bench.set_mode(bench.models[name], "eager")
    rows = []
    for name in record or modes:
        seconds = statistics.median(measured[name])
        achieved = flops[name] / seconds
        first_seconds, graphs, peak = first[name]
        versus = {other: paired_ratio(measured, name, other) * tokens[name] / tokens[other] for other in modes}
        del versus[name]
        rows.append(
            {
                "model": name,
                "precision": precision,
                "mode": modes[name],
                "batch": bench.batches[precision][name],
                "tokens_per_second": tokens[name] / seconds,
                "tflops": achieved / 1e12,
                "mfu_measured_peak": bench.peak and achieved / bench.peak,
                "mfu_datasheet_peak": bench.datasheet and achieved / bench.datasheet,
                "versus": versus,
                "peak_step_gib": peak,
                "first_call_seconds": first_seconds,
                "graphs_compiled": graphs,
                "times": measured[name],
            }
        )
    return Timings(task, rows)


@dataclasses.dataclass
class Keyed:
    """A part's results under one key of the section's: the FFT's cross-over, the profile."""

    key: str
    value: dict

    def into(self, result: dict) -> None:
        result[self.key] = self.value


def fft_crossover(bench: Bench, size: str, name: str) -> Keyed:
    """`scaling.measure_lengths` on the device in bf16 at gMLP's width (its own choice beside), and the cross-over."""
    config = bench.models[name].config
    shape = {key: getattr(config, key) for key in ("vocab_size", "hidden_size", "intermediate_size")}
    shape |= {"num_hidden_layers": config.num_hidden_layers, "max_position_embeddings": bench.length}
    lengths, layers, paths = SIZES[size]["fft_lengths"], SIZES[size]["fft_layers"], SPATIAL_PATHS | DEFAULT_PATH
    options = {"shape": shape, "device": bench.device, "precision": "bf16", "paths": paths}
    found = measure_lengths(lengths, max(lengths), layers, bench.rounds, **options)
    return Keyed("fft", found | {"crossover_length": crossover(found)})


def by_kernel(profiler, on_gpu: bool, calls: int = 1) -> dict[str, dict]:
    """The profiler's time by CUDA kernel (on the CPU: self time by operator) per call: ms and launches, largest
    first."""
    events = [e for e in profiler.key_averages() if not on_gpu or e.device_type == DeviceType.CUDA]
    found = {
        e.key: {
            "ms": (e.self_device_time_total if on_gpu else e.self_cpu_time_total) / 1e3 / calls,
            "launches": e.count / calls,
        }
        for e in events
    }
    return dict(sorted(((key, row) for key, row in found.items() if row["ms"]), key=lambda item: -item[1]["ms"]))


def is_matmul(name: str) -> bool:
    return any(word in name.lower() for word in MATMULS)


def kernel_profile(
    bench: Bench, names: list[str], steps: int = 2, modes=("eager", "compiled"), top: int = 12
) -> Keyed:
    """The bf16 training steps of `names` in each of `modes`, profiled over `steps` steps after two: time by CUDA
    kernel (on the CPU by operator), the matmul share and its bound on any fusion of the rest, inductor's share, the
    `top` largest kernels and the profiler's own table."""
    on_gpu, results = bench.device.type == "cuda", {}
    try:
        for name, mode in ((name, mode) for name in names for mode in modes):
            bench.set_mode(bench.models[name], mode)
            step = bench.step(name, "training", "bf16")[0]
            for _ in range(2):
                step()
            with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])) as profiler:
                for _ in range(steps):
                    step()
                if on_gpu:
                    torch.cuda.synchronize(bench.device)
            by_key = {key: row["ms"] for key, row in by_kernel(profiler, on_gpu).items()}  # over the steps
            total = sum(by_key.values())
            matmul = sum(ms for key, ms in by_key.items() if is_matmul(key))
            fused = sum(ms for key, ms in by_key.items() if "CompiledFxGraph" in key or key.startswith("triton_"))
            sort_by = "self_device_time_total" if on_gpu else "self_cpu_time_total"
            results[f"{name} bf16 {mode}"] = {
                "ms_total": total,
                "matmul_share": matmul / total,
                "compiled_kernels_share": fused / total,
                "amdahl_bound": total / matmul if matmul else None,
                "top_ms": dict(list(by_key.items())[:top]),
                "table": profiler.key_averages().table(sort_by=sort_by, row_limit=top, max_name_column_width=70),
            }
    finally:
        for name in names:
            bench.set_mode(bench.models[name], "eager")
    clock = "CUDA kernel time by kernel" if on_gpu else "self CPU time by operator"
    return Keyed("profile", {"clock": clock, "steps": steps, "cases": results})
