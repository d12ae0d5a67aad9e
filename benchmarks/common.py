"""What the speed and quality benchmarks share: models of equal parameter count, batches, interleaved timing and
paired ratios, peak memory, glibc's malloc settings, the machine's description and markdown tables."""

import ctypes
import ctypes.util
import os
import platform
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
from tabulate import tabulate
from torch.utils.benchmark import Compare, Measurement, Timer
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, BertConfig, GPT2Config, ModernBertConfig

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"
# The special tokens of gMLP's tokenizers (gmlp.tokenization_gmlp): ModernBERT's and DeBERTa-v2's configs must name
# them (their defaults are ids of their own vocabularies).
SPECIAL_TOKEN_IDS = {"pad_token_id": 0, "cls_token_id": 2, "bos_token_id": 2, "sep_token_id": 3, "eos_token_id": 3}


def parameters_of(build: Callable[[], torch.nn.Module]) -> int:
    """The parameter count (tied weights once) of the model `build()` makes, built on the meta device."""
    with torch.device("meta"):
        return build().num_parameters()


def fit_affine(count: Callable[[int], int], target: int, low: int, high: int) -> int:
    """The integer x whose `count(x)` is nearest `target`, for a count affine in x (two points give the line)."""
    at_low, at_high = count(low), count(high)
    return round(low + (target - at_low) * (high - low) / (at_high - at_low))


def transformer_shape(like: dict, head_size: int = 64) -> dict:
    """A BERT-style config's vocabulary, width, depth and length from gMLP's config fields `like`."""
    return {
        "vocab_size": like["vocab_size"],
        "hidden_size": like["hidden_size"],
        "num_hidden_layers": like["num_hidden_layers"],
        "num_attention_heads": like["hidden_size"] // head_size,
        "max_position_embeddings": like["max_position_embeddings"],
    }


def with_matched_width(config_class, fields: dict, width: str, target_parameters: int, *, auto=AutoModelForMaskedLM):
    """`config_class(**fields)` with the FFN width `width` that matches `target_parameters` in `auto`'s."""

    def count(size):
        return parameters_of(lambda: auto.from_config(config_class(**fields | {width: size})))

    low = fields["hidden_size"]
    return config_class(**fields | {width: fit_affine(count, target_parameters, low, 2 * low)})


def bert_config(like: dict, target_parameters: int, head_size: int = 64, **overrides) -> BertConfig:
    """`BertForMaskedLM`'s config with the shape of gMLP's `like` and the FFN width that matches the count."""
    fields = {**transformer_shape(like, head_size), **overrides}
    return with_matched_width(BertConfig, fields, "intermediate_size", target_parameters)


def modernbert_config(like: dict, target_parameters: int, head_size: int = 64, **overrides) -> ModernBertConfig:
    """Stock ModernBERT's config with the shape of gMLP's `like`, global attention everywhere, the count matched."""
    fields = {**transformer_shape(like, head_size), "layer_types": ["full_attention"] * like["num_hidden_layers"]}
    fields |= SPECIAL_TOKEN_IDS | overrides
    return with_matched_width(ModernBertConfig, fields, "intermediate_size", target_parameters)


def gpt2_config(like: dict, target_parameters: int, head_size: int = 64) -> GPT2Config:
    """`GPT2LMHeadModel`'s config with the shape of gMLP's `like` and the FFN width that matches the count."""
    fields = transformer_shape(like, head_size) | {"pad_token_id": 0, "bos_token_id": None, "eos_token_id": None}
    return with_matched_width(GPT2Config, fields, "n_inner", target_parameters, auto=AutoModelForCausalLM)


def mlm_batch(
    batch_size: int, length: int, vocab_size: int, device="cpu", mask_probability: float = 0.15
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids (clear of the special tokens) and MLM labels at a `mask_probability` share of the positions."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, vocab_size, (batch_size, length), generator=generator)
    labels = torch.full_like(input_ids, -100)
    labelled = torch.rand(batch_size, length, generator=generator) < mask_probability
    labels[labelled] = input_ids[labelled]
    return input_ids.to(device), labels.to(device)


def interleaved(
    steps: dict[str, Callable], rounds: int, min_run_time: float = 0.0, warmup: int = 1
) -> dict[str, list[float]]:
    """Seconds per call of each step in `rounds` rounds that run every case in turn (A B C A B C ...), each round's the
    median of one `Timer.blocked_autorange` (at least `min_run_time` of timed calls); prints `Compare`'s table."""
    threads = torch.get_num_threads()
    timers = {
        name: Timer("step()", globals={"step": step}, num_threads=threads, sub_label=name, description="per call")
        for name, step in steps.items()
    }
    for _ in range(warmup):
        for step in steps.values():
            step()
    measured: dict[str, list[Measurement]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, timer in timers.items():
            measured[name].append(timer.blocked_autorange(min_run_time=min_run_time))
    Compare([merged for runs in measured.values() for merged in Measurement.merge(runs)]).print()
    return {name: [run.median for run in runs] for name, runs in measured.items()}


def paired_ratio(times: dict[str, list[float]], name: str, reference: str) -> float:
    """Median over rounds of (reference time / case time): above 1 means `name` is faster."""
    return statistics.median(r / t for r, t in zip(times[reference], times[name], strict=True))


def matmul_peak_flops(device="cpu", dtype: torch.dtype = torch.float32, size: int = 2048) -> float:
    """FLOP/s of a size^3 matrix product on random data: the ceiling MFU is taken against."""
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    timer = Timer("torch.mm(a, b)", globals={"a": a, "b": b}, num_threads=torch.get_num_threads())
    return 2 * size**3 / timer.blocked_autorange(min_run_time=1.0).median


# glibc's malloc returns large freed blocks (an MLM step's logits) to the kernel and faults them back in on the
# next step: 20-30% of a CPU step. High thresholds keep them; low ones map and unmap every allocation of 128 KiB
# or more on its own, so that the resident size follows the live tensors (for measuring peak memory).
KEEP_FREED_MEMORY = 2**31 - 1
MAP_EACH_ALLOCATION = 131072


def set_malloc_thresholds(threshold: int) -> dict[str, int]:
    """glibc malloc's mmap and trim thresholds for this process (`mallopt`, as MALLOC_*_THRESHOLD_ at start)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    for option in (-3, -1):  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
        if not libc.mallopt(option, threshold):
            raise RuntimeError(f"mallopt({option}, {threshold}) failed: not glibc?")
    return {"mmap_threshold": threshold, "trim_threshold": threshold}


def resident_kib(field: str) -> int:
    """A memory field of /proc/self/status (VmRSS: resident now, VmHWM: the high-water mark), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}; peak memory on the CPU is measured on Linux only.")


def peak_added_mib(step: Callable, repeats: int, device="cpu") -> float:
    """The peak memory `repeats` calls of `step` add (MiB): the caching allocator's on a GPU; on the CPU the resident
    high-water mark (in a fresh process with `set_malloc_thresholds(MAP_EACH_ALLOCATION)`)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        for _ in range(repeats):
            step()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    Path("/proc/self/clear_refs").write_text("5")
    before = resident_kib("VmRSS")
    for _ in range(repeats):
        step()
    return (resident_kib("VmHWM") - before) / 1024


def machine_info(device, threads: int) -> dict:
    """The processor (and GPU), thread count, versions and load at the start: the first line of every table."""
    models = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")]
    info = {
        "cpu": models[0].split(":", 1)[1].strip() if models else platform.processor(),
        "cores": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }
    if torch.device(device).type == "cuda":
        info |= {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda}
    return info


def table(headers: list[str], rows: list[list]) -> list[str]:
    """A markdown table, as lines, with a blank line after; columns of figures right-aligned, the others left."""
    cells = [[str(cell) for cell in row] for row in rows]
    figures = [all(not row[i] or row[i][:1].isdigit() for row in cells) for i in range(len(headers))]
    align = ["right" if figure else "left" for figure in figures]
    text = tabulate(cells, headers=headers, tablefmt="pipe", disable_numparse=True, colalign=align)
    return [*text.splitlines(), ""]


def markdown_table(rows: list[dict]) -> str:
    """Rows of formatted cells (a column a row lacks reads "–") as a markdown table, aligned as `table`."""
    headers = list(dict.fromkeys(column for row in rows for column in row))
    return "\n".join(table(headers, [[row.get(column, "–") for column in headers] for row in rows])).rstrip()


def times(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}x"


def percent(value: float) -> str:
    return f"{100 * value:.0f}%"
