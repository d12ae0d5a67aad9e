"""Sequence-length scaling at constant tokens per step, forward + backward: gMLP's spatial projection alone (dense W,
Toeplitz direct, Toeplitz FFT) and whole encoders (gMLP on each path, aMLP, BERT with SDPA) against length (on a
GPU with `--device cuda`: where the FFT overtakes the direct product there)."""

import statistics
import sys
from functools import partial

import torch

from ..common import interleaved, paired_ratio, table, times
from .models import SMALL, encoder, encoder_step_fn

# gMLP's Toeplitz W multiplied as a dense matrix (never the FFT), or always by FFT.
SPATIAL_PATHS = {
    "dense W": {"spatial_weight_type": "dense"},
    "Toeplitz direct": {"spatial_fft_min_length": 10**9},
    "Toeplitz FFT": {"spatial_fft_min_length": 1},
}


def spatial_step(module, gate) -> None:
    module(gate).sum().backward()


def measure(args) -> dict:
    """Per length: the spatial projection alone on each of SPATIAL_PATHS, then encoders (gMLP on each, aMLP, BERT)."""
    tokens, layers, device = args.scaling_tokens, args.scaling_layers, args.device
    results = {"tokens_per_step": tokens, "encoder_layers": layers, "precision": "fp32", "lengths": {}}
    for length in args.lengths:
        batch = max(1, tokens // length)
        gate = torch.randn(batch, length, SMALL["intermediate_size"] // 2, device=device, requires_grad=True)
        steps = {}
        for name, overrides in SPATIAL_PATHS.items():
            one_block = encoder("gmlp", length, shape={**SMALL, "num_hidden_layers": 1}, **overrides)
            module = one_block.get_submodule("encoder.layer.0.sgu.spatial_proj").to(device)
            steps[name] = partial(spatial_step, module, gate)
        spatial = interleaved(steps, args.rounds)
        del steps, module, one_block  # a dense W (1 GiB at 16,384 tokens) and its gradient, before the encoders
        encoders = {f"gmlp {name}": encoder("gmlp", length, layers, **o) for name, o in SPATIAL_PATHS.items()}
        encoders["amlp"] = encoder("amlp", length, layers)
        # Attention dropout off so that BERT takes SDPA's memory-efficient path at long lengths.
        encoders["BERT"] = encoder("BERT (sdpa)", length, layers)
        input_ids = torch.randint(5, SMALL["vocab_size"], (batch, length), device=device)
        steps = {name: encoder_step_fn(model.to(device), input_ids, training=True) for name, model in encoders.items()}
        measured = interleaved(steps, args.rounds)
        results["lengths"][length] = {
            "batch_size": batch,
            "spatial_projection_ms": {n: 1e3 * statistics.median(t) for n, t in spatial.items()},
            "fft_vs_dense_spatial": paired_ratio(spatial, "Toeplitz FFT", "dense W"),
            "fft_vs_direct_spatial": paired_ratio(spatial, "Toeplitz FFT", "Toeplitz direct"),
            "encoder_tokens_per_second": {n: batch * length / statistics.median(t) for n, t in measured.items()},
        }
        for model in encoders.values():
            model.cpu()
        print(f"  length {length}: done", file=sys.stderr, flush=True)
    return results


def render(s: dict) -> dict[str, list[str]]:
    rows = s["lengths"]
    first = next(iter(rows.values()))
    paths, names = list(first["spatial_projection_ms"]), list(first["encoder_tokens_per_second"])
    spatial = [
        [
            length,
            row["batch_size"],
            *(f"{row['spatial_projection_ms'][name]:.1f}" for name in paths),
            times(row["fft_vs_dense_spatial"]),
            times(row["fft_vs_direct_spatial"]),
        ]
        for length, row in rows.items()
    ]
    encoders = [
        [length, *(f"{row['encoder_tokens_per_second'][n]:.0f}" for n in names)] for length, row in rows.items()
    ]
    baselines = ""
    if s.get("spatial_baselines") == "plain products":  # the H200 run's: plain matmuls with a materialised W
        baselines = "; dense W and Toeplitz direct as plain products with a materialised W"
    headers = ["length", *({"BERT": "BERT (sdpa, attention dropout 0)"}.get(name, name) for name in names)]
    return {
        "spatial": [
            f"### Sequence-length scaling, {s['tokens_per_step']} tokens per step (forward + backward)",
            "",
            f"Spatial projection alone (gate of d_ffn / 2 channels{baselines}), ms per step:",
            "",
            *table(["length", "batch", *paths, "FFT vs dense", "FFT vs direct"], spatial),
        ],
        "encoders": [f"Whole encoder ({s['encoder_layers']} layers), tokens/s:", "", *table(headers, encoders)],
    }
