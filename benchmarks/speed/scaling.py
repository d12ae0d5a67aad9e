"""Sequence-length scaling at constant tokens per step, forward + backward: gMLP's spatial projection alone (dense W,
Toeplitz direct, Toeplitz FFT) and whole encoders (gMLP on each path, aMLP, BERT with SDPA) against length."""

import statistics
import sys
from pathlib import Path

import torch

from ..baseline import label
from ..common import interleaved, paired_ratio, table, times
from .models import SMALL, encoder, in_precision

# gMLP's Toeplitz W multiplied as a dense matrix (never the FFT), or always by FFT.
OURS = ("gmlp", "amlp")  # at the baseline revision: the default spatial path, aMLP
SPATIAL_PATHS = {
    "dense W": {"spatial_weight_type": "dense"},
    "Toeplitz direct": {"spatial_fft_min_length": 10**9},
    "Toeplitz FFT": {"spatial_fft_min_length": 1},
}


def spatial_projection(length: int, shape: dict, **overrides) -> torch.nn.Module:
    """The spatial projection of a one-block gMLP encoder, by its checkpoint name (`encoder.layer.0.sgu.
    spatial_proj`), initialised as the model initialises it."""
    model = encoder("gmlp", length, layers=None, shape={**shape, "num_hidden_layers": 1}, **overrides)
    return model.get_submodule("encoder.layer.0.sgu.spatial_proj")


def toeplitz_matrix(weight: torch.Tensor, length: int) -> torch.Tensor:
    """The (length x length) Toeplitz matrices W[i, j] = w[i - j + length - 1] of `weight` (heads, 2 length - 1) as
    views and one flip, not by indexing: the backward pass accumulates without sorting L^2 indices."""
    return weight.unfold(-1, length, 1).flip(-1)


def plain_spatial_steps(module: torch.nn.Module, gate: torch.Tensor, precision: str, device) -> dict:
    """The spatial projection of `module` (Toeplitz, at n = the gate's length) as the model computes it (its FFT for
    these lengths) against plain products with a materialised W: a dense (n x n) W per head, and the Toeplitz W
    built from its 2n - 1 weights by `toeplitz_matrix`. The model reads W at each position by advanced indexing (what
    cached decoding and padding need); these baselines skip that, as a dense model for tokens in order would."""
    length = gate.shape[1]
    dense = torch.nn.Parameter(torch.empty(module.num_heads, length, length, device=device).uniform_(-1, 1) / length)

    def plain(matrix: torch.Tensor) -> torch.Tensor:
        heads = gate.unflatten(-1, (module.num_heads, -1)).transpose(1, 2)
        mixed = torch.matmul(matrix.to(heads.dtype), heads) + module.bias[:, :length, None].to(heads.dtype)
        return mixed.transpose(1, 2).flatten(2)

    products = {
        "dense W": lambda: plain(dense),
        "Toeplitz direct": lambda: plain(toeplitz_matrix(module.weight, length)),
        "Toeplitz FFT": lambda: module(gate),
    }
    return {
        name: in_precision(lambda product=product: product().sum().backward(), precision, device)
        for name, product in products.items()
    }


def measure_lengths(
    lengths,
    tokens: int,
    layers: int,
    rounds: int,
    encoder_rounds: int,
    shape: dict = SMALL,
    device="cpu",
    precision: str = "fp32",
    baseline: str | None = None,
    plain_products: bool = False,
) -> dict:
    """The scaling table: for each length, batch = tokens // length; the spatial projection (gate of d_ffn / 2
    channels) alone, then the encoders of `layers` blocks, each interleaved (with `baseline`, also gMLP's default
    path and aMLP at that git revision). The spatial projection alone runs on the model's three paths, or with
    `plain_products` the model's FFT against plain products (`plain_spatial_steps`)."""
    results = {"tokens_per_step": tokens, "encoder_layers": layers, "precision": precision, "lengths": {}}
    results["spatial_baselines"] = "plain products" if plain_products else "the model's paths"
    for length in lengths:
        batch = max(1, tokens // length)
        gate = torch.randn(batch, length, shape["intermediate_size"] // 2, device=device, requires_grad=True)
        if plain_products:
            module = spatial_projection(length, shape, **SPATIAL_PATHS["Toeplitz FFT"]).to(device)
            steps = plain_spatial_steps(module, gate, precision, device)
        else:
            steps = {}
            for name, overrides in SPATIAL_PATHS.items():
                module = spatial_projection(length, shape, **overrides).to(device)
                steps[name] = in_precision(lambda m=module, gate=gate: m(gate).sum().backward(), precision, device)
        spatial = interleaved(steps, rounds, warmup=1, device=device)
        del steps, module  # a materialised W (1 GiB at 16,384 tokens) and its gradient, before the encoders
        encoders = {
            f"gmlp {name}": encoder("gmlp", length, layers, shape=shape, **o) for name, o in SPATIAL_PATHS.items()
        }
        # Attention dropout off so that BERT takes SDPA's memory-efficient path at long lengths.
        encoders |= {
            "amlp": encoder("amlp", length, layers, shape=shape),
            "BERT": encoder("BERT (sdpa)", length, layers, shape=shape),
        }
        if baseline:
            encoders |= {label(name, baseline): encoder(name, length, layers, baseline, shape) for name in OURS}
        input_ids = torch.randint(5, shape["vocab_size"], (batch, length), device=device)
        steps = {}
        for name, model in encoders.items():
            model.to(device).train()
            steps[name] = in_precision(lambda m=model, ids=input_ids: encoder_step(m, ids), precision, device)
        measured = interleaved(steps, encoder_rounds, warmup=1, device=device)
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


def encoder_step(model, input_ids) -> None:
    model(input_ids=input_ids).last_hidden_state.mean().backward()
    model.zero_grad(set_to_none=True)


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
    spatial = [
        [
            length,
            row["batch_size"],
            *(f"{row['spatial_projection_ms'][name]:.1f}" for name in SPATIAL_PATHS),
            times(row["fft_vs_dense_spatial"]),
            times(row["fft_vs_direct_spatial"]),
        ]
        for length, row in s["lengths"].items()
    ]
    names = list(next(iter(s["lengths"].values()))["encoder_tokens_per_second"])
    encoders = [
        [length, *(f"{row['encoder_tokens_per_second'][name]:.0f}" for name in names)]
        for length, row in s["lengths"].items()
    ]
    headers = {"BERT": "BERT (sdpa, attention dropout 0)"}
    baselines = ""
    if s.get("spatial_baselines") == "plain products":
        baselines = "; dense W and Toeplitz direct as plain products with a materialised W"
    return {
        "spatial": [
            f"### Sequence-length scaling, {s['tokens_per_step']} tokens per step (forward + backward)",
            "",
            f"Spatial projection alone (gate of d_ffn / 2 channels{baselines}), ms per step:",
            "",
            *table(["length", "batch", *SPATIAL_PATHS, "FFT vs dense", "FFT vs direct"], spatial),
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
    for name in SPATIAL_PATHS:
        left.plot(lengths, [row["spatial_projection_ms"][name] for row in rows], "o-", label=name)
    left.set(
        xscale="log",
        yscale="log",
        xlabel="sequence length",
        ylabel="ms per step (fwd + bwd)",
        title=f"Spatial projection, {scaling['tokens_per_step']} tokens/step",
    )
    for name in rows[0]["encoder_tokens_per_second"]:
        right.plot(lengths, [row["encoder_tokens_per_second"][name] for row in rows], "o-", label=name)
    right.set(
        xscale="log",
        xlabel="sequence length",
        ylabel="tokens/s (fwd + bwd)",
        title=f"Encoder ({scaling['encoder_layers']} layers)",
    )
    for axis in (left, right):
        axis.set_xticks(lengths, [str(length) for length in lengths])
        axis.legend()
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
