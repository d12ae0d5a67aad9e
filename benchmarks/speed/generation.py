"""generate(): greedy new tokens after a short prompt, gMLP with its cache (dynamic and static) and without, and GPT-2
of equal parameter count with its KV cache, interleaved; beside them two floors of a cached step (the matrix products
alone, the weights read alone) and a profile of one cached generate() call."""

import statistics

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import GPT2LMHeadModel

from ..common import gpt2_config, interleaved, num_parameters, paired_ratio, table, times
from .models import SMALL
from .profile import ms_by_operator

PROMPT_LENGTH = 16
BATCH_SIZES = (1, 8)


def measure(args) -> dict:
    from gmlp import GMLPConfig, GMLPForCausalLM

    device = torch.device(args.device)
    shape = {**SMALL, "max_position_embeddings": 512}  # the training tables' model with n = 512
    torch.manual_seed(0)
    gmlp = GMLPForCausalLM(GMLPConfig(**shape, is_decoder=True)).to(device).eval()
    gpt2 = GPT2LMHeadModel(gpt2_config(shape, num_parameters(gmlp))).to(device).eval()
    new_tokens = args.new_tokens
    fixed = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False, "pad_token_id": 0}
    result = {
        "parameters": {"gmlp": num_parameters(gmlp), "gpt2": num_parameters(gpt2)},
        "prompt_length": PROMPT_LENGTH,
        "new_tokens": new_tokens,
        "batches": {},
    }
    for batch_size in BATCH_SIZES:
        prompt = torch.randint(5, shape["vocab_size"], (batch_size, PROMPT_LENGTH), device=device)
        mask = torch.ones_like(prompt)

        def generate(model, use_cache, prompt=prompt, mask=mask, **cache):
            return lambda: model.generate(prompt, attention_mask=mask, use_cache=use_cache, **fixed, **cache)

        steps = {
            "gmlp cached": generate(gmlp, True),
            "gmlp static cache": generate(gmlp, True, cache_implementation="static"),
            "gmlp uncached": generate(gmlp, False),
            "GPT2LMHeadModel (KV cache)": generate(gpt2, True),
            "GPT2LMHeadModel (static cache)": generate(gpt2, True, cache_implementation="static"),
            "gmlp matmul floor": matmul_floor(gmlp, batch_size, new_tokens),
            "gmlp weights read": weights_read(gmlp, new_tokens),
        }
        for model in (gmlp, gpt2):  # one short warm-up each: the uncached run is too long to warm up whole
            for cache in ({}, {"cache_implementation": "static"}):
                model.generate(prompt, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0, **cache)
        measured = interleaved(steps, args.generation_rounds, warmup=0)
        result["batches"][str(batch_size)] = {
            "seconds": measured,
            "tokens_per_second": {
                name: batch_size * new_tokens / statistics.median(t) for name, t in measured.items()
            },
            "cached_vs_uncached": paired_ratio(measured, "gmlp cached", "gmlp uncached"),
            "cached_vs_gpt2": paired_ratio(measured, "gmlp cached", "GPT2LMHeadModel (KV cache)"),
            "static_vs_uncached": paired_ratio(measured, "gmlp static cache", "gmlp uncached"),
            "static_vs_gpt2_static": paired_ratio(measured, "gmlp static cache", "GPT2LMHeadModel (static cache)"),
            "cached_step_profile": decoding_profile(gmlp, prompt, mask, fixed),
        }
    return result


def matmul_floor(model, batch_size: int, new_tokens: int):
    """The decoding floor: one new token per row through every matrix of the model (the blocks' channel projections,
    the LM head's dense layer and vocabulary projection, by the checkpoint's module names), `new_tokens` times, and
    nothing else: what nn.Linear's kernels make of the products a cached step cannot avoid."""
    device = model.device
    block_inputs = [
        (layer.channel_proj_in, layer.channel_proj_out, torch.randn(batch_size, layer.channel_proj_out.in_features))
        for layer in model.base_model.encoder.layer
    ]
    block_inputs = [(a, b, x.to(device)) for a, b, x in block_inputs]
    hidden = torch.randn(batch_size, model.config.hidden_size, device=device)

    def run():
        with torch.no_grad():
            for _ in range(new_tokens):
                for channel_proj_in, channel_proj_out, gated in block_inputs:
                    channel_proj_in(hidden)
                    channel_proj_out(gated)
                model.lm_head.decoder(model.lm_head.dense(hidden))

    return run


def weights_read(model, new_tokens: int):
    """Every weight of the model read once per new token (a sum over each parameter), `new_tokens` times: the memory
    traffic of a cached step at batch 1, the floor that the machine's memory bandwidth sets."""
    weights = [p.detach() for p in model.parameters()]

    def run():
        for _ in range(new_tokens):
            for weight in weights:
                weight.sum()

    return run


def decoding_profile(model, prompt: torch.Tensor, mask: torch.Tensor, fixed: dict) -> dict:
    """Where a cached decoding step goes: torch.profiler over one generate() call, per new token, by operator (by
    kernel on a GPU): the channel projections and the LM head are `addmm`, the gate cache's weighted sums `bmm`."""
    device = prompt.device
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        model.generate(prompt, attention_mask=mask, use_cache=True, **fixed)
    per_step = ms_by_operator(profiler, steps=fixed["max_new_tokens"], device=device)
    return {
        "self_cpu_ms_per_step": sum(per_step.values()),
        "projections_ms_per_step": per_step.get("aten::addmm", 0.0),
        "top_operators_ms_per_step": dict(list(per_step.items())[:8]),
    }


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
                tps["gmlp matmul floor"],
                tps["gmlp weights read"],
                f"{times(row['cached_vs_uncached'], 1)} / {times(row['static_vs_uncached'], 1)}",
                f"{times(row['cached_vs_gpt2'])} / {times(row['static_vs_gpt2_static'])}",
            ]
        )
    headers = ["batch", "gMLP cached (dynamic / static)", "gMLP uncached", "GPT-2 KV cache (dynamic / static)"]
    headers += ["gMLP matmuls alone", "gMLP weights read alone", "cached vs uncached (dynamic / static)"]
    profiles = []
    for batch_size, row in g["batches"].items():
        step = row["cached_step_profile"]
        total, projections = step["self_cpu_ms_per_step"], step["projections_ms_per_step"]
        others = ", ".join(
            f"{op.removeprefix('aten::')} {ms:.2f}"
            for op, ms in step["top_operators_ms_per_step"].items()
            if op != "aten::addmm"
        )
        profiles += [
            (
                f"Cached step at batch {batch_size} (torch.profiler, self CPU ms per new token): {total:.1f} in all, "
                f"the matrix products (addmm) {projections:.1f} ({projections / total:.0%}); then {others}."
            ),
            "",
        ]
    return {
        "rows": [title, "", *table([*headers, "cached vs GPT-2 (dynamic / static)"], body)],
        "profile": profiles,
    }
