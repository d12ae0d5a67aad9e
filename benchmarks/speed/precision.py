"""fp32 and bf16 autocast, eager and torch.compile, all interleaved: the MLM training step with logits at the
labelled positions (gMLP's sparse_prediction, BERT given the same) and encoder inference at batch 8 x 128 and 1 x 512,
gMLP against BERT (SDPA) of equal parameter count; MFU against each precision's matmul peak measured in the run."""

import statistics
import time
from functools import partial

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

SETUPS = [(precision, mode) for mode in ("eager", "compiled") for precision in PRECISIONS]
OURS = ("gmlp sparse_prediction", "gmlp encoder")


def measure(args) -> dict:
    device = torch.device(args.device)
    peaks = {precision: matmul_peak_flops(device, dtype) for precision, dtype in PRECISIONS.items()}
    results = {"matmul_peak_gflops": {k: v / 1e9 for k, v in peaks.items()}, "inference": {}}
    cases = training_cases()
    length = SMALL["max_position_embeddings"]
    input_ids, labels = mlm_batch(BATCH_SIZE, length, SMALL["vocab_size"], device)
    predicted = int((labels != -100).sum())
    steps, flops = {}, {}
    for name, config in (("gmlp sparse_prediction", gmlp_config()), ("BERT sparse logits", matched_bert_config())):
        case = cases[name]
        flops[name] = 3 * forward_flops(config, input_ids.numel(), length, predicted)
        for mode in ("eager", "compiled"):
            step = training_step_fn(case.model.to(device), case.loss, input_ids, labels, mode == "compiled")
            for precision in PRECISIONS:
                steps[(name, precision, mode)] = in_precision(step, precision, device)
    results["training"] = precision_rows(steps, flops, peaks, input_ids.numel(), args)
    for batch_size, length in ((BATCH_SIZE, 128), (1, 512)):
        ids = torch.randint(5, SMALL["vocab_size"], (batch_size, length), device=device)
        configs = {"gmlp encoder": gmlp_config(), "BERT encoder (sdpa)": matched_bert_config()}
        steps, flops = {}, {}
        for name, kind in (("gmlp encoder", "gmlp"), ("BERT encoder (sdpa)", "BERT (sdpa)")):
            model = encoder(kind, length).to(device).eval()
            flops[name] = forward_flops(configs[name], ids.numel(), length)
            for mode in ("eager", "compiled"):
                forward = torch.compile(model) if mode == "compiled" else model
                for precision in PRECISIONS:
                    steps[(name, precision, mode)] = in_precision(partial(forward, input_ids=ids), precision, device)
        with torch.inference_mode():
            results["inference"][f"{batch_size}x{length}"] = precision_rows(steps, flops, peaks, ids.numel(), args)
    return results


def precision_rows(steps: dict, flops: dict, peaks: dict, tokens: int, args) -> list[dict]:
    """Warm every case (model, precision, mode) up (compiling the compiled ones, the first call timed), time them
    interleaved, and tabulate: tokens/s, MFU, and paired ratios against fp32 eager of the same model and, for ours,
    against the other model in the same setup."""
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
        if model in OURS:
            other = next(other for other in flops if other != model)
            row["vs_other_model"] = paired_ratio(measured, (model, precision, mode), (other, precision, mode))
        rows.append(row | {"first_call_seconds": first_call[(model, precision, mode)], "times": runs})
    return rows


def summary(result: dict) -> list[str]:
    """gMLP in each setup against its fp32 eager, and against BERT in the same setup (eager)."""
    cases = [("training step, 8 x 128 (tokens/s)", result["training"])]
    cases += [(f"encoder inference, {shape.replace('x', ' x ')}", rows) for shape, rows in result["inference"].items()]
    body = []
    for title, rows in cases:
        ours = {(row["precision"], row["mode"]): row for row in rows if row["model"] in OURS}
        first, *others = (ours[setup] for setup in SETUPS)
        cells = [f"{first['tokens_per_second']:.0f}"]
        cells += [f"{row['tokens_per_second']:.0f} ({times(row['vs_fp32_eager'])})" for row in others]
        versus = f"{times(first['vs_other_model'])} / {times(ours[('bf16', 'eager')]['vs_other_model'])}"
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
    headers = ["model", "precision", "mode", "tokens/s", "vs its fp32 eager", "gMLP vs BERT (same setup)", "MFU"]
    for title, rows in tables:
        body = [
            [
                row["model"],
                row["precision"],
                row["mode"],
                f"{row['tokens_per_second']:.0f}",
                times(row["vs_fp32_eager"]),
                times(row["vs_other_model"]) if "vs_other_model" in row else "",
                percent(row["mfu"]),
                f"{row['first_call_seconds']:.1f}",
            ]
            for row in rows
        ]
        lines += [f"{title}:", "", *table([*headers, "first call (s)"], body)]
    return {"summary": summary(result), "rows": lines}
