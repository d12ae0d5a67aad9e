"""The GPU section's models and parts: each part a function of the `Bench` (the models, their optimizers, the batches
found, the compiled blocks) returning a small dataclass that writes itself into the results (`into`)."""

import dataclasses
import statistics
import time
import warnings
from functools import partial

import torch
from accelerate.utils import find_executable_batch_size
from torch._dynamo.utils import counters
from transformers import AutoModelForMaskedLM, BertConfig, ModernBertConfig
from transformers.modeling_layers import GradientCheckpointingLayer

from ..common import bert_config, interleaved, mlm_batch, paired_ratio, parameters_of, peak_added_mib
from .models import forward_flops, in_precision, labelled_loss, labelled_positions, modernbert_config
from .profile import profile_cases
from .scaling import DEFAULT_PATH, SPATIAL_PATHS, crossover, measure_lengths

REFERENCE, MODERN = "BERT (sdpa)", "ModernBERT (sdpa)"
BERT_BASE, MODERN_BASE = "bert-base (sdpa)", "ModernBERT-base (sdpa)"
KEPT = ", activations kept"  # the suffix of gMLP's row with recompute_gating=False
SIZES = {
    "base": {"preset": "gmlp-base", "stock": {}, "fft_lengths": (1024, 2048, 4096, 8192, 16384), "fft_layers": 4},
    "tiny": {
        "preset": "gmlp-tiny",
        "stock": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128},
        "fft_lengths": (128, 256),
        "fft_layers": 1,
    },
}
COMPILE_MODES = {"compiled": None, "max-autotune": "max-autotune-no-cudagraphs"}


def build(size: str, device, kernels: list[str]) -> dict[str, torch.nn.Module]:
    """name -> model on `device`: gMLP by its preset with each SGU kernel (the first also with its activations kept),
    BERT and ModernBERT with gMLP's width and depth and the FFN width that matches its count, and at their stock
    shapes, all with SDPA attention."""
    from gmlp import GMLPConfig

    spec = SIZES[size]

    def gmlp(**overrides):
        return GMLPConfig.from_preset(spec["preset"], **overrides)

    ours = {f"gmlp ({kernel})": gmlp(sgu_kernel=kernel) for kernel in kernels}
    ours[f"gmlp ({kernels[0]}){KEPT}"] = gmlp(sgu_kernel=kernels[0], recompute_gating=False)
    like, target = gmlp().to_dict(), parameters_of(lambda: AutoModelForMaskedLM.from_config(gmlp()))
    theirs = {REFERENCE: bert_config(like, target), MODERN: modernbert_config(like, target)}
    theirs |= {BERT_BASE: BertConfig(**spec["stock"]), MODERN_BASE: ModernBertConfig(**spec["stock"])}
    torch.manual_seed(0)
    with torch.device(device):  # initialised there: 7 models of 110M-150M parameters take seconds on the host
        models = {name: AutoModelForMaskedLM.from_config(config) for name, config in ours.items()}
        for name, config in theirs.items():
            models[name] = AutoModelForMaskedLM.from_config(config, attn_implementation="sdpa")
    return models


@dataclasses.dataclass
class Bench:
    """What the parts share: the device, the models with their optimizers, the batches found (precision -> model ->
    batch), the compiled blocks, the measured peak and how to time."""

    device: torch.device
    models: dict[str, torch.nn.Module]
    length: int
    peak: float
    datasheet: float | None
    rounds: int
    min_run_time: float
    fixed_batch: int | None
    batches: dict[str, dict[str, int]]
    optimizers: dict = dataclasses.field(default_factory=dict)
    compiled: dict = dataclasses.field(default_factory=dict)

    def step(self, name: str, task: str, precision: str, batch: int | None = None) -> tuple:
        """`name`'s training step (forward, backward, fused AdamW) or encoder forward on a batch of `batch` (default:
        the one found for it), and the batch's labels."""
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
    """One optimizer step of `model` on the batch with the loss at the labelled positions (`labelled_loss`)."""
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


def free_memory(bench: Bench) -> None:
    for model in bench.models.values():
        model.zero_grad(set_to_none=True)
    if bench.device.type == "cuda":
        torch.cuda.empty_cache()  # accelerate's finder collects the garbage first


@dataclasses.dataclass
class Batches:
    """The largest batch per model in one precision, how it was found, and the host syncs of a step at it."""

    precision: str
    batches: dict[str, int]
    searches: dict[str, dict]
    host_syncs: dict[str, int]

    def into(self, result: dict) -> None:
        for key, value in (("batches", self.batches), ("batch_search", self.searches)):
            result.setdefault(key, {})[self.precision] = value
        result.setdefault("host_syncs_per_step", {})[self.precision] = self.host_syncs


def largest_batch(step_at, reset, device, start: int = 8, share: float = 0.9) -> dict:
    """The largest batch (a multiple of `start`) whose step `step_at(batch)` fits: the peaks at `start` and 2 `start`
    give the memory per sequence and so the batch that fills `share` of the free memory (what the caching allocator
    holds counts as free), which accelerate's `find_executable_batch_size` tries, then smaller ones (by a tenth,
    rounded to `start`) until one fits; `reset()` clears a step's gradients and the allocator's cache."""
    reset()
    free = torch.cuda.mem_get_info(device)[0] / 2**30
    peaks = {}
    for batch in (start, 2 * start):
        peaks[batch] = peak_added_mib(step_at(batch), repeats=1, device=device) / 1024
        reset()
    per_sequence = (peaks[2 * start] - peaks[start]) / start
    first = max(start, int(start + (share * free - peaks[start]) / max(per_sequence, 1e-9)) // start * start)
    tries = []

    def smaller() -> int:
        return tries[-1][0] - max(start, tries[-1][0] // 10 // start * start)

    @find_executable_batch_size(starting_batch_size=first, reduce_batch_size_fn=smaller)
    def fit(batch):
        tries.append([batch, "out of memory"])
        reset()  # here: the finder's handler of the last try's error still held that step's tensors
        tries[-1][1] = round(peak_added_mib(step_at(batch), repeats=1, device=device) / 1024, 2)
        return batch

    found = fit()
    reset()
    return {"batch": found, "free_gib": free, "per_sequence_gib": per_sequence, "tries": tries}


def host_syncs(step, device) -> int:
    """How many times one call of `step` waits for the GPU (CUDA's sync debug mode warns at each); 0 on the CPU."""
    if device.type != "cuda":
        return 0
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step()
            torch.cuda.synchronize(device)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(warning.message) for warning in caught)


def find_batches(bench: Bench, precision: str, names: list[str]) -> Batches:
    """Each model's largest training batch (on the CPU, or with `--gpu-batch`, a fixed one) and its step's syncs."""
    found = Batches(precision, bench.batches.setdefault(precision, {}), {}, {})
    for name in names:
        if bench.fixed_batch or bench.device.type != "cuda":
            found.batches[name] = bench.fixed_batch or 2
        else:

            def step_at(batch, name=name):
                return bench.step(name, "training", precision, batch)[0]

            found.searches[name] = largest_batch(step_at, partial(free_memory, bench), bench.device)
            found.batches[name] = found.searches[name]["batch"]
        found.host_syncs[name] = host_syncs(bench.step(name, "training", precision)[0], bench.device)
    return found


@dataclasses.dataclass
class Row:
    """One model's timing in one setup, with its tokens/s over every other model's of its group, paired by round."""

    model: str
    precision: str
    mode: str
    batch: int
    tokens_per_second: float
    tflops: float
    mfu_measured_peak: float
    mfu_datasheet_peak: float | None
    versus: dict[str, float]
    peak_step_gib: float | None
    first_call_seconds: float
    graphs_compiled: int
    times: list[float]


@dataclasses.dataclass
class Timings:
    task: str  # training or inference
    rows: list[Row]

    def into(self, result: dict) -> None:
        result.setdefault(self.task, []).extend(dataclasses.asdict(row) for row in self.rows)


def first_call(step, device) -> tuple[float, int, float | None]:
    """The first call of `step` (for a compiled one, the call that compiles): its seconds, the graphs dynamo compiled,
    and on a GPU the peak memory it added (GiB)."""
    graphs, start, peak = counters["stats"]["unique_graphs"], time.perf_counter(), None
    if device.type == "cuda":
        peak = peak_added_mib(step, repeats=1, device=device) / 1024
    else:
        step()
    return time.perf_counter() - start, counters["stats"]["unique_graphs"] - graphs, peak


def time_group(bench: Bench, task: str, precision: str, modes: dict[str, str], record=None) -> Timings:
    """Time the models of `modes` (name -> eager, compiled or max-autotune) side by side, each at its own batch;
    the rows of `record` (default: all)."""
    cases, tokens, flops, first = {}, {}, {}, {}
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
            Row(
                model=name,
                precision=precision,
                mode=modes[name],
                batch=bench.batches[precision][name],
                tokens_per_second=tokens[name] / seconds,
                tflops=achieved / 1e12,
                mfu_measured_peak=achieved / bench.peak,
                mfu_datasheet_peak=bench.datasheet and achieved / bench.datasheet,
                versus=versus,
                peak_step_gib=peak,
                first_call_seconds=first_seconds,
                graphs_compiled=graphs,
                times=measured[name],
            )
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
    """`scaling.measure_lengths` on the device, bf16, at gMLP's width, with the model's own (default) choice beside
    its three paths; the shortest length from which the FFT is the faster."""
    config = bench.models[name].config
    shape = {key: getattr(config, key) for key in ("vocab_size", "hidden_size", "intermediate_size")}
    shape |= {"num_hidden_layers": config.num_hidden_layers, "max_position_embeddings": bench.length}
    lengths, layers = SIZES[size]["fft_lengths"], SIZES[size]["fft_layers"]
    paths = SPATIAL_PATHS | DEFAULT_PATH
    found = measure_lengths(lengths, max(lengths), layers, bench.rounds, bench.rounds, shape=shape,
                            device=bench.device, precision="bf16", paths=paths)  # fmt: skip
    return Keyed("fft", found | {"crossover_length": crossover(found)})


def kernel_profile(bench: Bench, names: list[str]) -> Keyed:
    """torch.profiler's account by CUDA kernel of the bf16 training steps of `names`, eager and compiled."""
    cases = {}
    for name in names:
        for mode in ("eager", "compiled"):
            step = bench.step(name, "training", "bf16")[0]

            def switched(model=bench.models[name], step=step, mode=mode):
                bench.set_mode(model, mode)
                step()

            cases[f"{name} bf16 {mode}"] = switched
    try:
        return Keyed("profile", profile_cases(cases, bench.device, steps=2))
    finally:
        for name in names:
            bench.set_mode(bench.models[name], "eager")
