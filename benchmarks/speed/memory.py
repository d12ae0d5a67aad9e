"""Peak memory of an encoder step at long lengths (512, 2,048, 4,096 tokens, batch 1, the 12-layer encoders of the
training table with n = the length): gMLP and aMLP against BERT of equal parameter count, training (forward +
backward) and inference; with `--baseline REF`, gMLP and aMLP at that git revision beside the working tree's.

On the CPU each case runs in a fresh process with every allocation of 128 KiB or more mapped on its own (so the
kernel's high-water mark is the peak of the live tensors: memory per allocation); on a GPU, the caching allocator's
peak in this process.
"""

import gc
import sys

import torch

from ..baseline import label, resolve
from ..common import peak_added_mib, percent, table
from .memory_worker import measure_in_fresh_process
from .models import SMALL, encoder, encoder_step_fn

LENGTHS = (512, 2048, 4096)
OURS = ("gmlp", "amlp")
# Attention dropout (the default 0.1) changes nothing in inference, so these are measured in training only.
WITH_DROPOUT = ("amlp (attention dropout 0.1)", "BERT (attention dropout 0.1)")


def cases(baseline: str | None) -> list[tuple[str, str, str | None]]:
    """(model, mode, git revision) of every case."""
    refs = (None, baseline) if baseline else (None,)
    found = []
    for mode in ("training", "inference"):
        found += [(name, mode, ref) for name in OURS for ref in refs]
        found += [("BERT (sdpa)", mode, None)] + (
            [(name, mode, None) for name in WITH_DROPOUT] if mode == "training" else []
        )
    return found


def measure_case(name: str, mode: str, length: int, ref: str | None, args) -> float:
    device = torch.device(args.device)
    if device.type != "cuda":
        revision = ["--ref", ref] if ref else []
        return measure_in_fresh_process([*revision, "encoder", name, mode, str(length)], args.threads)
    model = encoder(name, length, ref=ref).to(device)
    input_ids = torch.randint(5, SMALL["vocab_size"], (1, length), device=device)
    step = encoder_step_fn(model, input_ids, mode == "training")
    step()  # the first call's one-off allocations (cuBLAS workspaces) are not the model's
    peak = peak_added_mib(step, repeats=2, device=device)
    del model, step
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def measure(args) -> dict:
    result = {"batch_size": 1, "layers": SMALL["num_hidden_layers"], "device": str(args.device), "lengths": {}}
    if args.baseline:
        result["baseline"] = {"ref": args.baseline, "commit": resolve(args.baseline)}
    for length in args.memory_lengths:
        result["lengths"][length] = {
            f"{label(name, ref)} {mode}": measure_case(name, mode, length, ref, args)
            for name, mode, ref in cases(args.baseline)
        }
        print(f"  length {length}: done", file=sys.stderr, flush=True)
    return result


def mode_table(lengths: dict, mode: str) -> list[str]:
    """One mode's MiB per model and length; ours against BERT (SDPA), against themselves at the baseline (after /
    before), and aMLP against gMLP."""
    names = [key.removesuffix(f" {mode}") for key in next(iter(lengths.values())) if key.endswith(f" {mode}")]
    ratios = [(name, "BERT (sdpa)") for name in names if name in OURS]
    ratios += [(name, label(name, ref)) for name in names for ref in refs_in(names) if name in OURS]
    if "amlp" in names:
        ratios.append(("amlp", "gmlp"))
    body = [
        [
            length,
            *(f"{row[f'{name} {mode}']:.0f}" for name in names),
            *(percent(row[f"{a} {mode}"] / row[f"{b} {mode}"]) for a, b in ratios),
        ]
        for length, row in lengths.items()
    ]
    return table(["length", *names, *(f"{a} / {b}" for a, b in ratios)], body)


def refs_in(names: list[str]) -> list[str]:
    return sorted({name.rsplit(" @", 1)[1] for name in names if " @" in name})


def render(m: dict) -> dict[str, list[str]]:
    heading = (
        f"### Peak memory of an encoder step at length, batch {m['batch_size']}, {m['layers']} layers (aMLP: as many "
        "as match gMLP's parameters), d_model 256 (MiB over the built model and input)"
    )
    return {
        "training": [heading, "", "Training (forward + backward):", "", *mode_table(m["lengths"], "training")],
        "inference": ["Inference:", "", *mode_table(m["lengths"], "inference")],
    }
