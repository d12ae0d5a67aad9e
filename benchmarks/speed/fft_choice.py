"""Why eager mode chooses the FFT by length and compiled or exported graphs by n: a Toeplitz gMLP encoder with
n = 4,096 at lengths below `spatial_fft_min_length` (1,024), its products by FFT (what a compiled or exported graph
of such a model runs at every length) against the direct product (what eager mode runs there). Forward passes
(inference) and forward + backward (training) at each length, the two interleaved round by round (`python -m
benchmarks.speed --sections fft_choice`).
"""

import statistics

import torch

from gmlp import GMLPConfig, GMLPModel

from ..common import interleaved, markdown_table, paired_ratio

N = 4096
LENGTHS = (64, 256, 512, 1023)  # below spatial_fft_min_length (1,024): where the two choices differ
TOKENS = 4096  # per step: batch = TOKENS / length


def model(fft: bool) -> GMLPModel:
    """gmlp-tiny's shape at n = N, its Toeplitz products by FFT at every length, or by eager mode's choice (direct
    below 1,024 tokens)."""
    config = GMLPConfig.from_preset(
        "gmlp-tiny", max_position_embeddings=N, hidden_dropout_prob=0.0, spatial_fft_min_length=1 if fft else 1024
    )
    return GMLPModel(config)


def measure(args) -> dict:
    rounds = args.rounds
    torch.manual_seed(0)
    models = {"FFT": model(True), "direct": model(False)}
    models["direct"].load_state_dict(models["FFT"].state_dict())
    rows = []
    for length in LENGTHS:
        ids = torch.randint(5, 1000, (TOKENS // length, length))
        for mode in ("inference", "training"):

            def step(encoder, mode=mode, ids=ids):
                if mode == "inference":
                    with torch.no_grad():
                        encoder.eval()(ids)
                else:
                    encoder.train()(ids).last_hidden_state.sum().backward()

            times = interleaved({name: lambda e=e: step(e) for name, e in models.items()}, rounds)
            rows.append(
                {
                    "length": length,
                    "mode": mode,
                    **{f"{name} ms": 1e3 * statistics.median(t) for name, t in times.items()},
                    "FFT / direct speed (paired)": paired_ratio(times, "FFT", "direct"),
                }
            )
    return {"n": N, "tokens_per_step": TOKENS, "rounds": rounds, "rows": rows}


def render(results: dict) -> dict:
    rows = [
        {
            "length": row["length"],
            "mode": row["mode"],
            "FFT ms (compiled or exported)": f"{row['FFT ms']:.1f}",
            "direct ms (eager)": f"{row['direct ms']:.1f}",
            "FFT speed / direct": f"{row['FFT / direct speed (paired)']:.2f}x",
        }
        for row in results["rows"]
    ]
    heading = f"### The FFT at every length (compiled or exported) against eager's choice, n = {results['n']:,}"
    return {"fft_choice": [heading, "", markdown_table(rows), ""]}
