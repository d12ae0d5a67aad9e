"""MLM training: a step (forward, backward, fused AdamW) of gMLP against BERT of equal parameter count set up the
same way, interleaved, with each case's peak step memory; with `--baseline REF`, gMLP at that git
revision beside the working tree's (before against after, in one run)."""

import statistics

import torch

from ..baseline import label, resolve
from ..common import interleaved, mlm_batch, num_parameters, paired_ratio, peak_added_mib, percent, table, times
from .memory_worker import measure_in_fresh_process
from .models import (
    BATCH_SIZE,
    SMALL,
    forward_flops,
    gmlp_config,
    matched_bert_config,
    training_cases,
    training_step_fn,
)

# The headline comparisons: each gMLP setup against BERT set up the same way.
LIKE_FOR_LIKE = (
    ("full logits, dropout 0.1 (both defaults)", "gmlp (full logits)", "BertForMaskedLM"),
    ("logits at the labelled positions only, dropout 0.1", "gmlp sparse_prediction", "BERT sparse logits"),
    (
        "full logits; BERT with dropout off, gMLP with its default 0.1",
        "gmlp (full logits)",
        "BertForMaskedLM no dropout",
    ),
)


def measure(args) -> dict:
    """Every case of `training_cases`, interleaved; peak memory per case (on the CPU each in a fresh process, every
    allocation mapped on its own, counting optimizer state, gradients and activations; on a GPU the caching
    allocator's peak over three steps after the warm-up)."""
    device = torch.device(args.device)
    cases = training_cases((None, args.baseline) if args.baseline else (None,))
    length = SMALL["max_position_embeddings"]
    input_ids, labels = mlm_batch(BATCH_SIZE, length, SMALL["vocab_size"], device)
    steps = {
        name: training_step_fn(case.model.to(device), case.loss, input_ids, labels) for name, case in cases.items()
    }
    measured = interleaved(steps, args.rounds, args.min_run_time, warmup=2)
    bert = matched_bert_config()
    tokens, labelled = input_ids.numel(), int((labels != -100).sum())
    rows = {}
    for name, case in cases.items():
        seconds = statistics.median(measured[name])
        predicted = labelled if "sparse" in name else tokens
        flops = 3 * forward_flops(bert if "bert" in name.lower() else gmlp_config(), tokens, length, predicted)
        if device.type == "cuda":
            memory = peak_added_mib(steps[name], repeats=3, device=device)
        else:
            memory = measure_in_fresh_process(["case", name], args.threads)
        rows[name] = {
            "description": case.description,
            "parameters": num_parameters(case.model),
            "seconds_per_step": seconds,
            "tokens_per_second": tokens / seconds,
            "flops_per_step": flops,
            "mfu": flops / seconds / args.peak_flops,
            "vs_BertForMaskedLM": paired_ratio(measured, name, "BertForMaskedLM"),
            "times": measured[name],
            "peak_step_memory_mib": memory,
        }
    result = {"bert_intermediate_size": bert.intermediate_size, "rows": rows}
    if args.baseline:
        result["baseline"] = {"ref": args.baseline, "commit": resolve(args.baseline)}
    return result


def rounds_ratio(rows: dict, name: str, reference: str) -> float:
    """The paired ratio of two saved rows (reference time / case time, median over rounds)."""
    return paired_ratio({name: rows[name]["times"], reference: rows[reference]["times"]}, name, reference)


def like_for_like(rows: dict) -> list[str]:
    """Each gMLP setup against BERT set up the same way: paired ratios from the per-round times, and memory."""
    body = []
    for setup, ours, theirs in LIKE_FOR_LIKE:
        a, b = rows[ours], rows[theirs]
        body.append(
            [
                setup,
                f"{a['tokens_per_second']:.0f}",
                f"{b['tokens_per_second']:.0f}",
                times(rounds_ratio(rows, ours, theirs)),
                f"{a['peak_step_memory_mib']:.0f}",
                f"{b['peak_step_memory_mib']:.0f}",
                percent(a["peak_step_memory_mib"] / b["peak_step_memory_mib"]),
            ]
        )
    headers = ["setup", "gMLP tokens/s", "BERT tokens/s", "gMLP / BERT (paired)", "gMLP peak MiB", "BERT peak MiB"]
    return table([*headers, "memory gMLP / BERT"], body)


def before_after(rows: dict, ref: str) -> list[str]:
    """The working tree's gMLP against the same case at the git revision `ref`."""
    body = []
    for name in ("gmlp (full logits)", "gmlp sparse_prediction"):
        now, then = rows[name], rows[label(name, ref)]
        body.append(
            [
                name,
                f"{then['tokens_per_second']:.0f}",
                f"{now['tokens_per_second']:.0f}",
                times(rounds_ratio(rows, name, label(name, ref))),
                f"{then['peak_step_memory_mib']:.0f}",
                f"{now['peak_step_memory_mib']:.0f}",
                percent(now["peak_step_memory_mib"] / then["peak_step_memory_mib"]),
            ]
        )
    headers = [f"case (@{ref} vs working tree)", "tokens/s before", "after", "after / before (paired)"]
    return table([*headers, "peak MiB before", "after", "memory after / before"], body)


def render(result: dict) -> dict[str, list[str]]:
    """The like-for-like table, every row, and with a baseline the before-and-after table."""
    rows = result["rows"]
    title = (
        f"### MLM training step (forward + backward + AdamW), d_model 256, 12 layers, d_ffn 1536, n 128, vocab "
        f"30,522, batch 8, 15% labelled; BERT: 12 layers, hidden 256, 4 heads, intermediate "
        f"{result['bert_intermediate_size']}"
    )
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
    headers = ["model", "parameters", "tokens/s", "vs BertForMaskedLM", "GFLOP/step", "MFU"]
    parts = {
        "like_for_like": [
            "### MLM training, like for like: gMLP against BERT of equal parameter count set up the same way",
            "",
            *like_for_like(rows),
        ],
        "rows": [title, "", *table([*headers, "peak step memory (MiB)"], body)],
    }
    if "baseline" in result:
        ref = result["baseline"]["ref"]
        heading = f"### Before and after: gMLP at {ref} ({result['baseline']['commit']}) against the working tree"
        parts["before_after"] = [heading, "", *before_after(rows, ref)]
    return parts
