"""Encoder inference (no vocabulary projection), batch 8 x 128: gMLP against BERT of equal parameter count,
interleaved."""

import statistics

import torch

from ..common import interleaved, mlm_batch, paired_ratio, percent, table, times
from .models import BATCH_SIZE, SMALL, forward_flops, gmlp_config, matched_bert_config, training_cases

# The training table's case whose encoder each row runs.
ENCODERS = {
    "gmlp encoder": "gmlp (full logits)",
    "BERT encoder (sdpa)": "BertForMaskedLM",
    "BERT encoder, dropout-off config": "BertForMaskedLM no dropout",
}


def measure(args) -> dict:
    device = torch.device(args.device)
    cases = training_cases()
    length = SMALL["max_position_embeddings"]
    input_ids, _ = mlm_batch(BATCH_SIZE, length, SMALL["vocab_size"], device)
    steps = {}
    for name, case in ENCODERS.items():
        encoder = cases[case].model.base_model.to(device).eval()
        steps[name] = lambda encoder=encoder: encoder(input_ids=input_ids)
    with torch.inference_mode():
        measured = interleaved(steps, args.rounds, args.min_run_time, warmup=2)
    rows = {}
    for name in steps:
        seconds = statistics.median(measured[name])
        config = matched_bert_config() if "BERT" in name else gmlp_config()
        rows[name] = {
            "tokens_per_second": input_ids.numel() / seconds,
            "mfu": forward_flops(config, input_ids.numel(), length) / seconds / args.peak_flops,
            "vs_BERT_encoder": paired_ratio(measured, name, "BERT encoder (sdpa)"),
            "times": measured[name],
        }
    return {"rows": rows}


def render(result: dict) -> dict[str, list[str]]:
    body = [
        [name, f"{row['tokens_per_second']:.0f}", times(row["vs_BERT_encoder"]), percent(row["mfu"])]
        for name, row in result["rows"].items()
    ]
    return {
        "rows": [
            "### Encoder inference (no vocabulary projection), batch 8 x 128",
            "",
            *table(["model", "tokens/s", "vs BERT encoder", "MFU"], body),
        ]
    }
