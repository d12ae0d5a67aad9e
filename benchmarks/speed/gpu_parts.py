"""The GPU run's models and measurements (benchmarks/speed/gpu_stages.py runs them): gMLP with each spatial gating unit
against BERT and ModernBERT at equal parameters, every model at one fixed batch, bf16; training steps or encoder
forwards timed side by side, one training step by the profiler's kernels."""

import dataclasses
import gc
import re
import statistics
import time
from functools import partial

import torch
from torch._dynamo.utils import counters
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForMaskedLM
from transformers.modeling_layers import GradientCheckpointingLayer

from gmlp import GMLPConfig

from .. import common
from ..common import interleaved, mlm_batch, paired_ratio, peak_added_mib
from .models import forward_flops, in_precision, labelled_loss, labelled_positions, training_step_fn

REFERENCE, MODERN = "BERT (sdpa)", "ModernBERT (sdpa)"
ROUNDS = 3  # interleaved rounds of every timing (a ratio is the median of the rounds')
KEPT = ", activations kept"  # the suffix of gMLP's row with recompute_gating=False (the records up to 2026-11-28)
# Per size: gMLP's preset and its changes, every model's batch (sequences of the preset's length; at base size 64 x 512
# tokens fits every model on an H100 of 80 GB and fills the GPU's products: results/speed_gpu_2026-11-28.json).
TINY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 256, "max_position_embeddings": 32}
SIZES = {
    "base": {"preset": "gmlp-base", "model": {}, "batch": 64},
    "tiny": {"preset": "gmlp-tiny", "model": TINY, "batch": 2},
}
# Matrix products: the kernels of cuBLAS (gemm, xmma, cutlass, nvjet) and of fused attention; aten's on the CPU.
MATMULS = ("gemm", "xmma", "cutlass", "nvjet", "flash", "fmha", "attention", "aten::mm", "aten::addmm", "aten::bmm")
# The gating unit's row kernels in a gMLP step, not its spatial products: the hybrid's Triton kernels (kernels_gmlp.py)
# and inductor's that fuse GELU (in gMLP only the unit and the MLM head's transform apply it); on the CPU its ops.
GATING_ROWS = re.compile(r"gelu|gmlp::sgu|_gate_norm|_combine_kernel|_mixed_grad", re.IGNORECASE)


def build(size: str, device, names: list[str], **overrides) -> dict[str, torch.nn.Module]:
    """name -> model on `device`: "gmlp (KERNEL)" the preset of `size` with that `sgu_kernel` (and `overrides`);
    REFERENCE and MODERN with gMLP's width, depth, length and parameter count, and SDPA."""
    gmlp = partial(GMLPConfig.from_preset, SIZES[size]["preset"], **SIZES[size]["model"] | overrides)

    def config(name):
        if name.startswith("gmlp ("):
            return gmlp(sgu_kernel=name.removeprefix("gmlp (").removesuffix(")"))
        like, target = gmlp().to_dict(), common.parameters_of(lambda: AutoModelForMaskedLM.from_config(gmlp()))
        return {REFERENCE: common.bert_config, MODERN: common.modernbert_config}[name](like, target)

    configs = {
        name: (config(name), {} if name.startswith("gmlp") else {"attn_implementation": "sdpa"}) for name in names
    }
    torch.manual_seed(0)
    with torch.device(device):  # initialised there: models of 110M-150M parameters take seconds on the host
        return {name: AutoModelForMaskedLM.from_config(config, **sdpa) for name, (config, sdpa) in configs.items()}


def describe(models: dict[str, torch.nn.Module]) -> dict[str, dict]:
    """Each model's parameter count and shape, as the results give them."""
    shape = {"layers": "num_hidden_layers", "attn_implementation": "_attn_implementation"}  # key -> config field
    shape |= {"hidden_size": "hidden_size", "intermediate_size": "intermediate_size"}
    fields = {
        name: {key: getattr(model.config, field) for key, field in shape.items()} for name, model in models.items()
    }
    return {name: {"parameters": model.num_parameters()} | fields[name] for name, model in models.items()}


@dataclasses.dataclass
class Bench:
    """What the measurements share: the models, their optimizers and compiled blocks, the batch, how to time and to
    compile (`backend`), and MFU's denominators: `datasheet` (the fixed one) and `peak` (measured), FLOP/s or None."""

    device: torch.device
    models: dict[str, torch.nn.Module]
    length: int
    batch: int
    peak: float | None
    datasheet: float | None
    min_run_time: float
    backend: str = "inductor"
    optimizers: dict = dataclasses.field(default_factory=dict)
    compiled: dict = dataclasses.field(default_factory=dict)

    def step(self, name: str, task: str) -> tuple:
        """`name`'s bf16 training step or encoder forward on a batch, and its labels."""
        model = self.models[name]
        input_ids, labels = mlm_batch(self.batch, self.length, model.config.vocab_size, self.device)
        if task == "inference":
            model.eval()
            step = partial(model.base_model, input_ids=input_ids)
        else:
            step = training_step(model, self.optimizers[name], input_ids, labels)
        return in_precision(step, "bf16", self.device), labels

    def set_mode(self, model, mode: str) -> None:
        """Run `model`'s blocks eagerly or compiled (each block compiled once, static shapes)."""
        for block in (module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)):
            vars(block).pop("forward", None)
            if mode == "compiled":
                if block not in self.compiled:
                    self.compiled[block] = torch.compile(block.forward, dynamic=False, backend=self.backend)
                block.forward = self.compiled[block]


def training_step(model, optimizer, input_ids, labels):
    """One optimizer step of `model` with the loss at the labelled positions, found once (`labelled_loss`)."""
    index, targets = labelled_positions(labels)

    def loss(model, input_ids, _):
        return labelled_loss(model, input_ids, index, targets)

    return training_step_fn(model, loss, input_ids, labels, optimizer=optimizer)


def make_optimizer(model, device):
    """Fused AdamW with its states made (a step at batch 1 and rate 0): a timed step allocates none."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)
    input_ids, labels = mlm_batch(1, model.config.max_position_embeddings, model.config.vocab_size, device, 0.5)
    in_precision(training_step(model, optimizer, input_ids, labels), "bf16", device)()
    optimizer.param_groups[0]["lr"] = 1e-4
    return optimizer


def free_memory() -> None:
    gc.collect()
    torch.cuda.empty_cache()  # a no-op where CUDA is not in use


def first_call(step, device) -> tuple[float, int, float | None]:
    """The first call of `step` (compiling): its seconds, the graphs compiled, and on a GPU its peak memory (GiB)."""
    graphs, start, peak = counters["stats"]["unique_graphs"], time.perf_counter(), None
    if device.type == "cuda":
        peak = peak_added_mib(step, repeats=1, device=device) / 1024
    else:
        step()
    return time.perf_counter() - start, counters["stats"]["unique_graphs"] - graphs, peak


def time_group(bench: Bench, task: str, modes: dict[str, str], save=None) -> list[dict]:
    """The models of `modes` (name -> eager or compiled) timed side by side over rounds, a row each (`row`), the rows
    passed to `save` after every round and returned."""
    cases, flops, tokens = {}, {}, bench.batch * bench.length
    for name, mode in modes.items():
        bench.set_mode(bench.models[name], mode)
        cases[name], labels = bench.step(name, task)
        predicted = int((labels != -100).sum()) if task == "training" else None
        flops[name] = forward_flops(bench.models[name].config, tokens, bench.length, predicted)
        flops[name] *= 3 if task == "training" else 1
    measured, rows = {name: [] for name in cases}, []
    try:
        with torch.inference_mode(task == "inference"):
            first = {name: first_call(step, bench.device) for name, step in cases.items()}
            for _ in range(ROUNDS):
                for name, seconds in interleaved(cases, 1, bench.min_run_time, warmup=0).items():
                    measured[name] += seconds
                rows = [row(bench, name, modes[name], measured, flops[name], first[name]) for name in modes]
                if save:
                    save(rows)
    finally:
        for name in modes:
            bench.set_mode(bench.models[name], "eager")
    return rows


def row(bench: Bench, name: str, mode: str, measured: dict, flops: float, first: tuple) -> dict:
    """A model's row: tokens/s, TFLOP/s and MFU at its median time, its speed over every other model's (paired by
    round), its first call's seconds, graphs compiled and peak memory, and its times."""
    seconds, (first_seconds, graphs, peak) = statistics.median(measured[name]), first
    achieved, tokens = flops / seconds, bench.batch * bench.length
    found = {
        "model": name,
        "precision": "bf16",
        "mode": mode,
        "batch": bench.batch,
        "tokens_per_second": tokens / seconds,
    }
    found |= {"tflops": achieved / 1e12, "mfu_measured_peak": bench.peak and achieved / bench.peak}
    found |= {"mfu_datasheet_peak": bench.datasheet and achieved / bench.datasheet}
    found["versus"] = {other: paired_ratio(measured, name, other) for other in measured if other != name}
    found |= {"peak_step_gib": peak, "first_call_seconds": first_seconds, "graphs_compiled": graphs}
    return found | {"times": list(measured[name])}


def by_kernel(profiler, on_gpu: bool, calls: int = 1) -> dict[str, dict]:
    """The profiler's ms and launches a call by CUDA kernel (on the CPU: self time by operator), largest first."""
    events = [e for e in profiler.key_averages() if not on_gpu or e.device_type == DeviceType.CUDA]
    found = {e.key: (e.self_device_time_total if on_gpu else e.self_cpu_time_total, e.count) for e in events}
    ordered = sorted(((key, us, count) for key, (us, count) in found.items() if us), key=lambda item: -item[1])
    return {key: {"ms": us / 1e3 / calls, "launches": count / calls} for key, us, count in ordered}


def is_matmul(name: str) -> bool:
    return any(word in name.lower() for word in MATMULS)


def profiled(function, device: torch.device, calls: int = 1):
    """torch.profiler over `calls` calls of `function` (after one), the device synchronised."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    function()
    with profile(activities=activities) as profiler:
        for _ in range(calls):
            function()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return profiler


def kernel_profile(bench: Bench, name: str, mode: str, top: int = 20) -> dict:
    """One bf16 training step of `name` in `mode` by CUDA kernel (on the CPU by operator): the matmul share and its
    bound on any fusion of the rest, inductor's share, the gating unit's row kernels' share (GATING_ROWS), the `top`
    largest kernels and the profiler's own table."""
    on_gpu = bench.device.type == "cuda"
    bench.set_mode(bench.models[name], mode)
    try:
        profiler = profiled(bench.step(name, "training")[0], bench.device)
    finally:
        bench.set_mode(bench.models[name], "eager")
    by_key = {key: row["ms"] for key, row in by_kernel(profiler, on_gpu).items()}
    total = sum(by_key.values())
    matmul = sum(ms for key, ms in by_key.items() if is_matmul(key))
    fused = sum(ms for key, ms in by_key.items() if "CompiledFxGraph" in key or key.startswith("triton_"))
    sort_by = "self_device_time_total" if on_gpu else "self_cpu_time_total"
    gating = sum(ms for key, ms in by_key.items() if GATING_ROWS.search(key))
    found = {"mode": mode, "ms_total": total, "matmul_share": matmul / total, "compiled_kernels_share": fused / total}
    found |= {"gating_rows_share": gating / total, "amdahl_bound": total / matmul if matmul else None}
    found["top_ms"] = dict(list(by_key.items())[:top])
    return found | {"table": profiler.key_averages().table(sort_by=sort_by, row_limit=top, max_name_column_width=70)}
