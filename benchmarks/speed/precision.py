"""fp32 and bf16 autocast, eager and torch.compile, all interleaved: the MLM training step with logits at the
labelled positions (gMLP's sparse_prediction, BERT given the same) and encoder inference at batch 8 x 128 and 1 x 512,
gMLP against BERT (SDPA) of equal parameter count; MFU against each precision's matmul peak measured in the run."""

import statistics
import time

import torch

from ..common import interleaved, matmul_peak_flops, mlm_batch, paired_ratio, percent, table, times
from .models import (
    BATCH_SIZE,
    PRECISIONS,
    SMALL,
    encoder,
    forward_flops,
    gmlp_config,
    in_precision,
    matched_bert_config,
    training_cases,
    training_step_fn,
)

SETUPS = ("fp32 | eager", "bf16 | eager", "fp32 | compiled", "bf16 | compiled")
OURS = {"training": "gmlp sparse_prediction", "inference": "gmlp encoder"}


def measure(args) -> dict:
    device = torch.device(args.device)
    peaks = {precision: matmul_peak_flops(device, dtype) for precision, dtype in PRECISIONS.items()}
    results = {"matmul_peak_gflops": {k: v / 1e9 for k, v in peaks.items()}, "training": {}, "inference": {}}
    cases = training_cases()
    length = SMALL["max_position_embeddings"]
    input_ids, labels = mlm_batch(BATCH_SIZE, length, SMALL["vocab_size"], device)
    predicted = int((labels != -100).sum())
    steps, flops = {}, {}
    for name, config in (("gmlp sparse_prediction", gmlp_config()), ("BERT sparse logits", matched_bert_config())):
        model, loss_fn, _ = cases[name]
        flops[name] = 3 * forward_flops(config, input_ids.numel(), length, predicted)
        for compiled in (False, True):
            step = training_step_fn(model.to(device), loss_fn, input_ids, labels, compile_model=compiled)
            for precision in PRECISIONS:
                steps[(name, precision, compiled)] = in_precision(step, precision, device)
    results["training"] = precision_rows(steps, flops, peaks, input_ids.numel(), args)
    for batch_size, length in ((BATCH_SIZE, 128), (1, 512)):
        encoders = {
            "gmlp encoder": encoder("gmlp", length).to(device).eval(),
            "BERT encoder (sdpa)": encoder("BERT (sdpa)", length).to(device).eval(),
        }
        ids = torch.randint(5, SMALL["vocab_size"], (batch_size, length), device=device)
        configs = {"gmlp encoder": gmlp_config(), "BERT encoder (sdpa)": matched_bert_config()}
        steps, flops = {}, {}
        for name, model in encoders.items():
            flops[name] = forward_flops(configs[name], ids.numel(), length)
            for compiled in (False, True):
                forward = torch.compile(model) if compiled else model
                for precision in PRECISIONS:
                    step = lambda forward=forward, ids=ids: forward(input_ids=ids)
                    steps[(name, precision, compiled)] = in_precision(step, precision, device)
        with torch.inference_mode():
            results["inference"][f"{batch_size}x{length}"] = precision_rows(
                steps, flops, peaks, ids.numel(), args, repeats=2
            )
    return results


def precision_rows(steps: dict, flops: dict, peaks: dict, tokens: int, args, repeats: int = 1) -> dict:
    """Warm every case up (compiling the compiled ones, the first call timed), time them interleaved, and tabulate:
    tokens/s, MFU, and paired ratios against fp32 eager of the same model and, for ours, against the other model in
    the same setup."""
    labelled = {
        f"{name} | {precision} | {'compiled' if compiled else 'eager'}": step
        for (name, precision, compiled), step in steps.items()
    }
    first_call = {}
    for name, step in labelled.items():
        start = time.perf_counter()
        step()
        first_call[name] = time.perf_counter() - start
    measured = interleaved(labelled, args.rounds, warmup=1, repeats=args.repeats * repeats, device=args.device)
    rows = {}
    for name in labelled:
        model, precision, mode = name.split(" | ")
        seconds = statistics.median(measured[name])
        rows[name] = {
            "tokens_per_second": tokens / seconds,
            "mfu": flops[model] / seconds / peaks[precision],
            "vs_fp32_eager": paired_ratio(measured, name, f"{model} | fp32 | eager"),
            "first_call_seconds": first_call[name],
            "times": measured[name],
        }
        if model in OURS.values():
            other = next(other for other in flops if other != model)
            rows[name]["vs_other_model"] = paired_ratio(measured, name, f"{other} | {precision} | {mode}")
    return rows


def summary(result: dict) -> list[str]:
    """gMLP in each setup against its fp32 eager, and against BERT in the same setup (eager)."""
    cases = [("training step, 8 x 128 (tokens/s)", result["training"], "gmlp sparse_prediction")]
    cases += [
        (f"encoder inference, {shape.replace('x', ' x ')}", rows, "gmlp encoder")
        for shape, rows in result["inference"].items()
    ]
    body = []
    for title, rows, ours in cases:
        row = {setup: rows[f"{ours} | {setup}"] for setup in SETUPS}
        cells = [f"{row['fp32 | eager']['tokens_per_second']:.0f}"]
        cells += [
            f"{r['tokens_per_second']:.0f} ({times(r['vs_fp32_eager'])})"
            for setup, r in row.items()
            if setup != "fp32 | eager"
        ]
        versus = f"{times(row['fp32 | eager']['vs_other_model'])} / {times(row['bf16 | eager']['vs_other_model'])}"
        body.append([title, *cells, versus])
    headers = ["case", "gMLP fp32 eager", "gMLP bf16 eager", "gMLP fp32 compiled", "gMLP bf16 compiled"]
    return table([*headers, "gMLP vs BERT, fp32 / bf16 (eager)"], body)


def render(result: dict) -> dict[str, list[str]]:
    """The summary of gMLP's setups, then each table with every case."""
    peaks = result["matmul_peak_gflops"]
    lines = [
        (
            f"### fp32 and bf16 autocast, eager and torch.compile (measured matmul peaks: fp32 {peaks['fp32']:.0f}, "
            f"bf16 {peaks['bf16']:.0f} GFLOP/s)"
        ),
        "",
    ]
    tables = [("MLM training step, batch 8 x 128, logits at the labelled positions", result["training"])]
    tables += [(f"Encoder inference, batch {shape}", rows) for shape, rows in result["inference"].items()]
    for title, rows in tables:
        body = []
        for name, row in rows.items():
            model, precision, mode = name.split(" | ")
            versus = times(row["vs_other_model"]) if "vs_other_model" in row else ""
            body.append(
                [
                    model,
                    precision,
                    mode,
                    f"{row['tokens_per_second']:.0f}",
                    times(row["vs_fp32_eager"]),
                    versus,
                    percent(row["mfu"]),
                    f"{row['first_call_seconds']:.1f}",
                ]
            )
        headers = ["model", "precision", "mode", "tokens/s", "vs its fp32 eager", "gMLP vs BERT (same setup)", "MFU"]
        lines += [f"{title}:", "", *table([*headers, "first call (s)"], body)]
    return {"summary": summary(result), "rows": lines}
