"""The MLM training step at batch 8 x 128, gMLP against BERT of equal parameter count set up the same way: `training`
(fp32, with each case's peak step memory) and `precision` (fp32 and bf16 autocast, eager and compiled, with logits at
the labelled positions, and encoder inference; MFU against each precision's matmul peak measured in the run)."""

import statistics
import time
from functools import partial

import torch

from .. import common
from ..common import interleaved, mlm_batch, paired_ratio, peak_added_mib, percent, table, times
from . import models
from .memory import measure_in_fresh_process

# The headline comparisons: each gMLP setup against BERT set up the same way.
FULL = "gmlp (full logits)"
LIKE_FOR_LIKE = (
    ("full logits, dropout 0.1 (both defaults)", FULL, "BertForMaskedLM"),
    ("logits at the labelled positions only, dropout 0.1", "gmlp sparse_prediction", "BERT sparse logits"),
    ("full logits; BERT with dropout off, gMLP with its default 0.1", FULL, "BertForMaskedLM no dropout"),
)


def measure(args) -> dict:
    """Every training case, interleaved, and its peak step memory (on the CPU in a fresh process)."""
    device = torch.device(args.device)
    cases = models.training_cases()
    length = models.SMALL["max_position_embeddings"]
    input_ids, labels = mlm_batch(models.BATCH_SIZE, length, models.SMALL["vocab_size"], device)
    steps = {name: models.training_step_fn(c.model.to(device), c.loss, input_ids, labels) for name, c in cases.items()}
    measured = interleaved(steps, args.rounds, args.min_run_time, warmup=2)
    tokens, labelled = input_ids.numel(), int((labels != -100).sum())
    rows = {}
    for name, case in cases.items():
        seconds = statistics.median(measured[name])
        flops = 3 * models.forward_flops(case.model.config, tokens, length, labelled if "sparse" in name else tokens)
        if device.type == "cuda":
            memory = peak_added_mib(steps[name], repeats=3, device=device)
        else:
            memory = measure_in_fresh_process({"case": name}, args.threads)
        rows[name] = {
            "description": case.description,
            "parameters": case.model.num_parameters(),
            "seconds_per_step": seconds,
            "tokens_per_second": tokens / seconds,
            "flops_per_step": flops,
            "mfu": flops / seconds / args.peak_flops,
            "vs_BertForMaskedLM": paired_ratio(measured, name, "BertForMaskedLM"),
            "times": measured[name],
            "peak_step_memory_mib": memory,
        }
    return {"bert_intermediate_size": cases["BertForMaskedLM"].model.config.intermediate_size, "rows": rows}


def render(result: dict) -> dict[str, list[str]]:
    """The like-for-like table (paired ratios from the per-round times), and every row."""
    rows = result["rows"]
    like_for_like = []
    for setup, ours, theirs in LIKE_FOR_LIKE:
        a, b = rows[ours], rows[theirs]
        memory = (a["peak_step_memory_mib"], b["peak_step_memory_mib"])
        ratio = paired_ratio({ours: a["times"], theirs: b["times"]}, ours, theirs)
        speed = [f"{a['tokens_per_second']:.0f}", f"{b['tokens_per_second']:.0f}", times(ratio)]
        like_for_like.append([setup, *speed, *(f"{mib:.0f}" for mib in memory), percent(memory[0] / memory[1])])
    headers = ["setup", "gMLP tokens/s", "BERT tokens/s", "gMLP / BERT (paired)", "gMLP peak MiB", "BERT peak MiB"]
    body = [
        [
            name,
            f"{row['parameters'] / 1e6:.2f}M",
            f"{row['tokens_per_second']:.0f}",
            times(row["vs_BertForMaskedLM"]),
            f"{row['flops_per_step'] / 1e9:.1f}",
            percent(row["mfu"]),
            f"{row['peak_step_memory_mib']:.0f}",
        ]
        for name, row in rows.items()
    ]
    title = (
        f"### MLM training step (forward + backward + AdamW), d_model 256, 12 layers, d_ffn 1536, n 128, vocab "
        f"30,522, batch 8, 15% labelled; BERT: 12 layers, hidden 256, 4 heads, intermediate "
        f"{result['bert_intermediate_size']}"
    )
    columns = ["model", "parameters", "tokens/s", "vs BertForMaskedLM", "GFLOP/step", "MFU", "peak step memory (MiB)"]
    return {
        "like_for_like": [
            "### MLM training, like for like: gMLP against BERT of equal parameter count set up the same way",
            "",
            *table([*headers, "memory gMLP / BERT"], like_for_like),
        ],
        "rows": [title, "", *table(columns, body)],
    }


def measure_precision(args) -> dict:
    device = torch.device(args.device)
    peaks = {precision: common.matmul_peak_flops(device, dtype) for precision, dtype in models.PRECISIONS.items()}
    results = {"matmul_peak_gflops": {k: v / 1e9 for k, v in peaks.items()}, "inference": {}}
    cases = models.training_cases()
    length = models.SMALL["max_position_embeddings"]
    input_ids, labels = mlm_batch(models.BATCH_SIZE, length, models.SMALL["vocab_size"], device)
    predicted = int((labels != -100).sum())
    steps, flops = {}, {}
    for name in ("gmlp sparse_prediction", "BERT sparse logits"):
        model, loss = cases[name].model.to(device), cases[name].loss
        flops[name] = 3 * models.forward_flops(model.config, input_ids.numel(), length, predicted)
        for mode in ("eager", "compiled"):
            step = models.training_step_fn(model, loss, input_ids, labels, compile_model=mode != "eager")
            for precision in models.PRECISIONS:
                steps[(name, precision, mode)] = models.in_precision(step, precision, device)
    results["training"] = precision_rows(steps, flops, peaks, input_ids.numel(), args)
    for batch_size, length in ((models.BATCH_SIZE, 128), (1, 512)):
        ids = torch.randint(5, models.SMALL["vocab_size"], (batch_size, length), device=device)
        steps, flops = {}, {}
        for name, kind in (("gmlp encoder", "gmlp"), ("BERT encoder (sdpa)", "BERT (sdpa)")):
            model = models.encoder(kind, length).to(device).eval()
            flops[name] = models.forward_flops(model.config, ids.numel(), length)
            for mode in ("eager", "compiled"):
                forward = partial(torch.compile(model) if mode == "compiled" else model, input_ids=ids)
                for precision in models.PRECISIONS:
                    steps[(name, precision, mode)] = models.in_precision(forward, precision, device)
        with torch.inference_mode():
            results["inference"][f"{batch_size}x{length}"] = precision_rows(steps, flops, peaks, ids.numel(), args)
    return results


def precision_rows(steps: dict, flops: dict, peaks: dict, tokens: int, args) -> list[dict]:
    """Every case's first call timed (compiling), then all interleaved: tokens/s, MFU, paired ratios against the
    model's fp32 eager and, for ours, against the other model in the same setup."""
    first_call = {}
    for key, step in steps.items():
        start = time.perf_counter()
        step()
        first_call[key] = time.perf_counter() - start
    named = {" ".join(key): step for key, step in steps.items()}
    measured = dict(zip(steps, interleaved(named, args.rounds, args.min_run_time).values(), strict=True))
    rows = []
    for (model, precision, mode), runs in measured.items():
        seconds = statistics.median(runs)
        row = {"model": model, "precision": precision, "mode": mode, "tokens_per_second": tokens / seconds}
        row["mfu"] = flops[model] / seconds / peaks[precision]
        row["vs_fp32_eager"] = paired_ratio(measured, (model, precision, mode), (model, "fp32", "eager"))
        if model.startswith("gmlp"):
            other = next(other for other in flops if other != model)
            row["vs_other_model"] = paired_ratio(measured, (model, precision, mode), (other, precision, mode))
        rows.append(row | {"first_call_seconds": first_call[(model, precision, mode)], "times": runs})
    return rows


def render_precision(result: dict) -> dict[str, list[str]]:
    peaks = result["matmul_peak_gflops"]
    heading = (
        f"### fp32 and bf16 autocast, eager and torch.compile (measured matmul peaks: fp32 {peaks['fp32']:.0f}, "
        f"bf16 {peaks['bf16']:.0f} GFLOP/s)"
    )
    lines = [heading, ""]
    tables = [("MLM training step, batch 8 x 128, logits at the labelled positions", result["training"])]
    tables += [(f"Encoder inference, batch {shape}", rows) for shape, rows in result["inference"].items()]
    headers = ["model", "precision", "mode", "tokens/s", "vs its fp32 eager", "gMLP vs BERT (same setup)", "MFU"]
    for title, rows in tables:
        body = [
            [
                *(row[key] for key in ("model", "precision", "mode")),
                f"{row['tokens_per_second']:.0f}",
                times(row["vs_fp32_eager"]),
                times(row["vs_other_model"]) if "vs_other_model" in row else "",
                percent(row["mfu"]),
                f"{row['first_call_seconds']:.1f}",
            ]
            for row in rows
        ]
        lines += [f"{title}:", "", *table([*headers, "first call (s)"], body)]
    return {"rows": lines}
