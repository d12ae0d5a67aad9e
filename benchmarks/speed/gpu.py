"""The GPU section: gMLP-base, aMLP-base and BERT of gMLP-base's parameter count (SDPA, and flash-attention 2 where
it is installed) at n = 512 with the largest batch that fits (found by trying: doubling, then bisection), MLM
training (logits at the labelled positions) and encoder inference, fp32 and bf16 autocast, eager and compiled; MFU
against the bf16 matmul peak measured in the same run (an 8192^3 product); peak memory per step; a torch.profiler
account by CUDA kernel of each model's training step; the FFT path against a dense W at 4,096 to 16,384 tokens.

"Compiled" is regional: each block (`GradientCheckpointingLayer`, the repeated layer of every Transformers model)
goes through `torch.compile`, so that compiling costs one block's time and not 48 unrolled ones. Eager runs first,
then the blocks are compiled in place. Cases of one precision and mode run interleaved (paired ratios); compiled
against eager is a ratio of medians. Parts run in order of importance, and with `--deadline` the parts that would
start after it are listed as not run. On the CPU it runs at tiny sizes (`--quick`: the tiny presets, batch 2) so
that it is tested there; docs/benchmarks.md gives the one-call command for the H200.
"""

import gc
import statistics
import time

import torch
from transformers import AutoModelForMaskedLM
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import is_flash_attn_2_available

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
from .models import PRECISIONS, forward_flops, in_precision, sparse_bert_loss, sparse_loss, training_step_fn
from .profile import profile_cases
from .scaling import measure_lengths
from .scaling import render as render_scaling

PRESETS = {"base": ("gmlp-base", "amlp-base"), "tiny": ("gmlp-tiny", "amlp-tiny")}
FFT_LENGTHS = {"base": (4096, 8192, 16384), "tiny": (256, 512)}
REFERENCE = "BERT (sdpa)"


def build(size: str, device) -> dict:
    """name -> (model on `device`, loss function) at equal parameters: gMLP and aMLP by their presets, BERT with
    gMLP's width and depth and the FFN width that matches gMLP's count."""
    from gmlp import GMLPConfig

    gmlp, amlp = (GMLPConfig.from_preset(name) for name in PRESETS[size])
    torch.manual_seed(0)
    models = {"gmlp": (AutoModelForMaskedLM.from_config(gmlp), sparse_loss)}
    models["amlp"] = (AutoModelForMaskedLM.from_config(amlp), sparse_loss)
    bert = bert_config(gmlp.to_dict(), num_parameters(models["gmlp"][0]))
    models[REFERENCE] = (AutoModelForMaskedLM.from_config(bert, attn_implementation="sdpa"), sparse_bert_loss)
    if torch.device(device).type == "cuda" and is_flash_attn_2_available():
        flash = AutoModelForMaskedLM.from_config(bert, attn_implementation="flash_attention_2")
        models["BERT (flash-attention 2)"] = (flash, sparse_bert_loss)
    return {name: (model.to(device), loss) for name, (model, loss) in models.items()}


def largest_batch(model, loss_fn, length: int, precision: str, device, start: int = 8, limit: int = 4096) -> int:
    """The largest batch (a multiple of `start`) whose training step does not run out of GPU memory."""

    def fits(batch: int) -> bool:
        input_ids, labels = mlm_batch(batch, length, model.config.vocab_size, device)
        try:
            in_precision(training_step_fn(model, loss_fn, input_ids, labels), precision, device)()
            synchronize(device)
            return True
        except torch.OutOfMemoryError:
            return False
        finally:
            model.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()

    good, bad = 0, None
    batch = start
    while batch <= limit and fits(batch):
        good, batch = batch, 2 * batch
    bad = batch if batch <= limit else None
    while bad is not None and bad - good > start:
        middle = (good + bad) // 2 // start * start
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    if not good:
        raise RuntimeError(f"Not even a batch of {start} fits for {type(model).__name__}.")
    return good


def time_group(cases: dict, args, device, inference: bool) -> dict:
    """Interleaved seconds per step of one group of cases (name -> step), the first call timed apart."""
    first_call = {}
    with torch.inference_mode(inference):
        for name, step in cases.items():
            start = time.perf_counter()
            step()
            synchronize(device)
            first_call[name] = time.perf_counter() - start
        measured = interleaved(cases, args.rounds, warmup=1, repeats=args.repeats, device=device)
    return {"first_call": first_call, "times": measured}


def measure(args) -> dict:
    device = torch.device(args.device)
    size = "tiny" if args.quick else args.gpu_size
    deadline = time.monotonic() + args.deadline if args.deadline else None
    peak = matmul_peak_flops(device, torch.bfloat16, size=8192 if device.type == "cuda" else 1024)
    result = {"size": size, "matmul_peak_tflops_bf16": peak / 1e12, "not_run": [], "models": {}}
    models = build(size, device)
    length = next(iter(models.values()))[0].config.max_position_embeddings
    result["length"] = length
    for name, (model, _) in models.items():
        result["models"][name] = {
            "parameters": num_parameters(model),
            "layers": model.config.num_hidden_layers,
            "attn_implementation": model.config._attn_implementation,
        }

    def run(part: str, work) -> None:
        if deadline and time.monotonic() > deadline:
            result["not_run"].append(part)
            return
        start = time.monotonic()
        work()
        result.setdefault("part_seconds", {})[part] = time.monotonic() - start
        args.save(result)

    batches = {}

    def find_batches() -> None:
        for precision in PRECISIONS:
            for name, (model, loss_fn) in models.items():
                if device.type == "cuda":
                    batch = largest_batch(model, loss_fn, length, precision, device)
                else:
                    batch = args.gpu_batch or 2
                batches[(name, precision)] = args.gpu_batch or batch
        result["batches"] = {f"{n} | {p}": b for (n, p), b in batches.items()}

    def timed(mode: str, compiled: bool, precisions=tuple(PRECISIONS)):
        def work():
            for precision in precisions:
                cases, flops, tokens = {}, {}, {}
                for name, (model, loss_fn) in models.items():
                    if precision == "fp32" and "flash" in name:
                        continue  # flash-attention has no fp32 kernel
                    batch = batches[(name, precision)]
                    input_ids, labels = mlm_batch(batch, length, model.config.vocab_size, device)
                    tokens[name] = input_ids.numel()
                    if mode == "training":
                        predicted = int((labels != -100).sum())
                        flops[name] = 3 * forward_flops(model.config, tokens[name], length, predicted)
                        step = training_step_fn(model, loss_fn, input_ids, labels)
                    else:
                        model.eval()
                        flops[name] = forward_flops(model.config, tokens[name], length)
                        step = lambda model=model, ids=input_ids: model.base_model(input_ids=ids)
                    cases[name] = in_precision(step, precision, device)
                group = time_group(cases, args, device, inference=mode == "inference")
                for name, step in cases.items():
                    seconds = statistics.median(group["times"][name])
                    with torch.inference_mode(mode == "inference"):
                        memory = peak_added_mib(step, repeats=1, device=device) / 1024
                    result.setdefault(mode, {})[f"{name} | {precision} | {'compiled' if compiled else 'eager'}"] = {
                        "batch": batches[(name, precision)],
                        "tokens_per_second": tokens[name] / seconds,
                        "mfu_vs_bf16_peak": flops[name] / seconds / peak,
                        "vs_bert_sdpa": paired_ratio(group["times"], name, REFERENCE),
                        "peak_step_gib": memory,
                        "first_call_seconds": group["first_call"][name],
                        "times": group["times"][name],
                    }

        return work

    def kernel_profile(compiled: bool):
        def work():
            cases = {}
            for name, (model, loss_fn) in models.items():
                input_ids, labels = mlm_batch(batches[(name, "bf16")], length, model.config.vocab_size, device)
                step = training_step_fn(model, loss_fn, input_ids, labels)
                cases[f"{name} bf16 {'compiled' if compiled else 'eager'}"] = in_precision(step, "bf16", device)
            result.setdefault("profile", {}).update(profile_cases(cases, device, steps=2))

        return work

    def compile_blocks() -> None:
        for model, _ in models.values():
            for module in model.modules():
                if isinstance(module, GradientCheckpointingLayer):
                    module.compile()

    def fft() -> None:
        gmlp = models["gmlp"][0].config
        shape = {key: getattr(gmlp, key) for key in ("vocab_size", "hidden_size", "intermediate_size")}
        shape |= {"num_hidden_layers": gmlp.num_hidden_layers, "max_position_embeddings": gmlp.max_position_embeddings}
        lengths = FFT_LENGTHS[size]
        result["fft"] = measure_lengths(
            lengths, max(lengths), args.gpu_fft_layers, args.rounds, args.rounds, shape, device, "bf16"
        )

    run("batch sizes", find_batches)
    run("training, eager", timed("training", compiled=False))
    run("inference, eager", timed("inference", compiled=False))
    run("profile, eager", kernel_profile(compiled=False))
    if args.gpu_compile:
        run("compilation of the blocks", compile_blocks)
        run("training, compiled, bf16", timed("training", compiled=True, precisions=("bf16",)))
        run("inference, compiled, bf16", timed("inference", compiled=True, precisions=("bf16",)))
        run("profile, compiled", kernel_profile(compiled=True))
    run("FFT against dense W", fft)
    if args.gpu_compile:
        run("training, compiled, fp32", timed("training", compiled=True, precisions=("fp32",)))
    return result


def targets(result: dict) -> list[str]:
    """Issue 21's GPU targets against what was measured (bf16)."""
    training = result.get("training", {})
    rows = []
    gmlp_eager, gmlp_compiled = training.get("gmlp | bf16 | eager"), training.get("gmlp | bf16 | compiled")
    if gmlp_eager:
        rows.append(["gMLP training vs BERT (SDPA), bf16 eager, paired", times(gmlp_eager["vs_bert_sdpa"]), "1.20x"])
    if gmlp_compiled:
        rows.append(
            ["gMLP training vs BERT (SDPA), bf16 compiled, paired", times(gmlp_compiled["vs_bert_sdpa"]), "1.20x"]
        )
        rows.append(["gMLP training MFU, bf16 compiled", percent(gmlp_compiled["mfu_vs_bf16_peak"]), "40%"])
        ratio = gmlp_compiled["tokens_per_second"] / gmlp_eager["tokens_per_second"]
        rows.append(["gMLP training, compiled vs eager, bf16 (ratio of medians)", times(ratio), "1.20x"])
    return table(["target", "measured", "goal"], rows)


def render(result: dict) -> dict[str, list[str]]:
    models = result["models"]
    described = ", ".join(
        f"{name} {m['parameters'] / 1e6:.1f}M ({m['layers']} layers, attention {m['attn_implementation']})"
        for name, m in models.items()
    )
    parts = {
        "targets": [
            (
                f"### GPU, size {result['size']}, n = {result['length']}: bf16 matmul peak measured "
                f"{result['matmul_peak_tflops_bf16']:.0f} TFLOP/s; {described}"
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
                times(row["vs_bert_sdpa"]),
                percent(row["mfu_vs_bf16_peak"]),
                f"{row['peak_step_gib']:.1f}",
                f"{row['first_call_seconds']:.1f}",
            ]
            for name, row in result.get(mode, {}).items()
        ]
        headers = ["model", "precision", "mode", "batch", "tokens/s", "vs BERT (SDPA), paired", "MFU (bf16 peak)"]
        parts[mode] = [f"{mode.capitalize()}:", "", *table([*headers, "peak step GiB", "first call (s)"], body)]
    if "profile" in result:
        body = [
            [
                name,
                f"{row['ms_total']:.0f}",
                percent(row["matmul_share"]),
                times(row["amdahl_bound"]),
                "; ".join(f"{key[:60]} {ms:.1f}" for key, ms in list(row["top_ms"].items())[:5]),
            ]
            for name, row in result["profile"].items()
        ]
        headers = ["training step", "kernel time, 2 steps (ms)", "matmul kernels", "bound on any fusion"]
        parts["profile"] = ["By CUDA kernel (torch.profiler):", "", *table([*headers, "largest kernels (ms)"], body)]
    if "fft" in result:
        parts["fft"] = [line for lines in render_scaling(result["fft"]).values() for line in lines]
    if result["not_run"]:
        parts["not_run"] = [f"Not run before the deadline: {', '.join(result['not_run'])}.", ""]
    return parts
