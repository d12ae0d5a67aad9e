"""Sequence-length scaling at constant tokens per step, forward + backward: gMLP's spatial projection alone (dense W,
Toeplitz direct, Toeplitz FFT) and whole encoders (gMLP on each path, aMLP, BERT with SDPA) against length. The gpu
section measures the FFT's cross-over on the device with the same function, the model's default path beside."""

import statistics
import sys
from functools import partial
from pathlib import Path

import torch

from ..baseline import label
from ..common import interleaved, paired_ratio, table, times
from .models import SMALL, encoder, in_precision

# gMLP's Toeplitz W multiplied as a dense matrix (never the FFT), or always by FFT.
SPATIAL_PATHS = {
    "dense W": {"spatial_weight_type": "dense"},
    "Toeplitz direct": {"spatial_fft_min_length": 10**9},
    "Toeplitz FFT": {"spatial_fft_min_length": 1},
}
DEFAULT_PATH = {"Toeplitz default": {}}  # the model's own choice of direct product or FFT
OURS = ("gmlp", "amlp")  # at the baseline revision: the default spatial path, aMLP


def spatial_projection(length: int, shape: dict, **overrides) -> torch.nn.Module:
    """The spatial projection of a one-block gMLP encoder, by its checkpoint name (`encoder.layer.0.sgu.
    spatial_proj`), initialised as the model initialises it."""
    model = encoder("gmlp", length, layers=None, shape={**shape, "num_hidden_layers": 1}, **overrides)
    return model.get_submodule("encoder.layer.0.sgu.spatial_proj")


def measure_lengths(
    lengths,
    tokens: int,
    layers: int,
    rounds: int,
    encoder_rounds: int,
    *,
    shape: dict = SMALL,
    device="cpu",
    precision: str = "fp32",
    baseline: str | None = None,
    paths: dict = SPATIAL_PATHS,
) -> dict:
    """The scaling table: for each length, batch = tokens // length; the spatial projection (gate of d_ffn / 2
    channels) alone on each of `paths`, then the encoders of `layers` blocks (gMLP on each path, aMLP, BERT), each
    interleaved (with `baseline`, also gMLP's default path and aMLP at that git revision)."""
    results = {"tokens_per_step": tokens, "encoder_layers": layers, "precision": precision, "lengths": {}}
    for length in lengths:
        batch = max(1, tokens // length)
        gate = torch.randn(batch, length, shape["intermediate_size"] // 2, device=device, requires_grad=True)
        steps = {}
        for name, overrides in paths.items():
            module = spatial_projection(length, shape, **overrides).to(device)
            steps[name] = in_precision(partial(spatial_step, module, gate), precision, device)
        spatial = interleaved(steps, rounds)
        del steps, module  # a dense W (1 GiB at 16,384 tokens) and its gradient, before the encoders
        encoders = {f"gmlp {name}": encoder("gmlp", length, layers, shape=shape, **o) for name, o in paths.items()}
        encoders |= {
            "amlp": encoder("amlp", length, layers, shape=shape),
            # Attention dropout off so that BERT takes SDPA's memory-efficient path at long lengths.
            "BERT": encoder("BERT (sdpa)", length, layers, shape=shape),
        }
        if baseline:
            encoders |= {label(name, baseline): encoder(name, length, layers, baseline, shape) for name in OURS}
        input_ids = torch.randint(5, shape["vocab_size"], (batch, length), device=device)
        steps = {
            name: in_precision(partial(encoder_step, model.to(device).train(), input_ids), precision, device)
            for name, model in encoders.items()
        }
        measured = interleaved(steps, encoder_rounds)
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


def spatial_step(module, gate) -> None:
    module(gate).sum().backward()


def encoder_step(model, input_ids) -> None:
    model(input_ids=input_ids).last_hidden_state.mean().backward()
    model.zero_grad(set_to_none=True)


def crossover(result: dict) -> int | None:
    """The shortest measured length from which on the FFT is at least as fast as the direct product (the spatial
    projection alone, paired), None if it is slower at the longest."""
    found = None
    for length, row in sorted(result["lengths"].items(), key=lambda item: -int(item[0])):
        if row["fft_vs_direct_spatial"] < 1:
            break
        found = int(length)
    return found


def measure(args) -> dict:
    return measure_lengths(
        args.lengths,
        args.scaling_tokens,
        args.scaling_layers,
        args.rounds,
        args.scaling_rounds,
        device=args.device,
        baseline=args.baseline,
    )


def render(s: dict) -> dict[str, list[str]]:
    rows = s["lengths"]
    paths = list(next(iter(rows.values()))["spatial_projection_ms"])
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
    names = list(next(iter(rows.values()))["encoder_tokens_per_second"])
    encoders = [
        [length, *(f"{row['encoder_tokens_per_second'][n]:.0f}" for n in names)] for length, row in rows.items()
    ]
    headers = {"BERT": "BERT (sdpa, attention dropout 0)"}
    baselines = ""
    if s.get("spatial_baselines") == "plain products":  # the H200 run's: plain matmuls with a materialised W
        baselines = "; dense W and Toeplitz direct as plain products with a materialised W"
    return {
        "spatial": [
            f"### Sequence-length scaling, {s['tokens_per_step']} tokens per step (forward + backward)",
            "",
            f"Spatial projection alone (gate of d_ffn / 2 channels{baselines}), ms per step:",
            "",
            *table(["length", "batch", *paths, "FFT vs dense", "FFT vs direct"], spatial),
        ],
        "encoders": [
            f"Whole encoder ({s['encoder_layers']} layers), tokens/s:",
            "",
            *table(["length", *(headers.get(name, name) for name in names)], encoders),
        ],
    }


def plot(scaling: dict, path: Path) -> None:
    """The two tables as a figure: ms per step of the spatial projection, and the encoders' tokens/s, against length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = [int(length) for length in scaling["lengths"]]
    rows = list(scaling["lengths"].values())
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    spatial = {"yscale": "log", "ylabel": "ms per step (fwd + bwd)"}
    spatial["title"] = f"Spatial projection, {scaling['tokens_per_step']} tokens/step"
    encoders = {"ylabel": "tokens/s (fwd + bwd)", "title": f"Encoder ({scaling['encoder_layers']} layers)"}
    for axis, key, settings in (
        (left, "spatial_projection_ms", spatial),
        (right, "encoder_tokens_per_second", encoders),
    ):
        for name in rows[0][key]:
            axis.plot(lengths, [row[key][name] for row in rows], "o-", label=name)
        axis.set(xscale="log", xlabel="sequence length", **settings)
        axis.set_xticks(lengths, [str(length) for length in lengths])
        axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
