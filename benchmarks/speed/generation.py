"""generate(): greedy new tokens after a short prompt, gMLP with its cache (dynamic and static) and without, and GPT-2
of equal parameter count with its KV cache (dynamic and static), interleaved."""

import statistics

import torch
from transformers import GPT2LMHeadModel

from gmlp import GMLPConfig, GMLPForCausalLM

from ..common import gpt2_config, interleaved, paired_ratio, table, times
from .models import SMALL

PROMPT_LENGTH = 16
BATCH_SIZES = (1, 8)
# result key -> (case, reference) of a paired ratio
RATIOS = {
    "cached_vs_uncached": ("gmlp cached", "gmlp uncached"),
    "cached_vs_gpt2": ("gmlp cached", "GPT2LMHeadModel (KV cache)"),
    "static_vs_uncached": ("gmlp static cache", "gmlp uncached"),
    "static_vs_gpt2_static": ("gmlp static cache", "GPT2LMHeadModel (static cache)"),
}


def measure(args) -> dict:
    device = torch.device(args.device)
    shape = {**SMALL, "max_position_embeddings": 512}  # the training tables' model with n = 512
    torch.manual_seed(0)
    gmlp = GMLPForCausalLM(GMLPConfig(**shape, is_decoder=True)).to(device).eval()
    gpt2 = GPT2LMHeadModel(gpt2_config(shape, gmlp.num_parameters())).to(device).eval()
    new_tokens = args.new_tokens
    fixed = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False, "pad_token_id": 0}
    result = {
        "parameters": {"gmlp": gmlp.num_parameters(), "gpt2": gpt2.num_parameters()},
        "prompt_length": PROMPT_LENGTH,
        "new_tokens": new_tokens,
        "batches": {},
    }
    static = {"cache_implementation": "static"}
    for batch_size in BATCH_SIZES:
        prompt = torch.randint(5, shape["vocab_size"], (batch_size, PROMPT_LENGTH), device=device)
        inputs = {"inputs": prompt, "attention_mask": torch.ones_like(prompt)}

        def generate(model, use_cache, inputs=inputs, **cache):
            return lambda: model.generate(**inputs, use_cache=use_cache, **fixed, **cache)

        steps = {
            "gmlp cached": generate(gmlp, True),
            "gmlp static cache": generate(gmlp, True, **static),
            "gmlp uncached": generate(gmlp, False),
            "GPT2LMHeadModel (KV cache)": generate(gpt2, True),
            "GPT2LMHeadModel (static cache)": generate(gpt2, True, **static),
        }
        for model in (gmlp, gpt2):  # one short warm-up each: the uncached run is too long to warm up whole
            for cache in ({}, static):
                model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=0, **cache)
        measured = interleaved(steps, args.rounds, warmup=0)
        tokens = batch_size * new_tokens
        result["batches"][str(batch_size)] = {
            "seconds": measured,
            "tokens_per_second": {name: tokens / statistics.median(t) for name, t in measured.items()},
            **{key: paired_ratio(measured, *pair) for key, pair in RATIOS.items()},
        }
    return result


def render(g: dict) -> dict[str, list[str]]:
    title = (
        f"### generate(): {g['new_tokens']} greedy tokens after a {g['prompt_length']}-token prompt, d_model 256, "
        f"12 layers, n 512 (gMLP {g['parameters']['gmlp'] / 1e6:.2f}M, GPT-2 {g['parameters']['gpt2'] / 1e6:.2f}M "
        "parameters), new tokens/s"
    )
    body = []
    for batch_size, row in g["batches"].items():
        tps = {name: f"{value:.0f}" for name, value in row["tokens_per_second"].items()}
        body.append(
            [
                batch_size,
                f"{tps['gmlp cached']} / {tps['gmlp static cache']}",
                tps["gmlp uncached"],
                f"{tps['GPT2LMHeadModel (KV cache)']} / {tps['GPT2LMHeadModel (static cache)']}",
                f"{times(row['cached_vs_uncached'], 1)} / {times(row['static_vs_uncached'], 1)}",
                f"{times(row['cached_vs_gpt2'])} / {times(row['static_vs_gpt2_static'])}",
            ]
        )
    headers = ["batch", "gMLP cached (dynamic / static)", "gMLP uncached", "GPT-2 KV cache (dynamic / static)"]
    headers += ["cached vs uncached (dynamic / static)", "cached vs GPT-2 (dynamic / static)"]
    return {"rows": [title, "", *table(headers, body)]}
