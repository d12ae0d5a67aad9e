"""Speed benchmarks of gMLP against BERT of equal parameter count and the PyPI package g-mlp-pytorch.

One command, a markdown table out and the results as JSON (benchmarks/results/speed.json):

    python benchmarks/speed.py                 # everything (about 30-60 minutes on 2 cores)
    python benchmarks/speed.py --quick         # fewer rounds and a 2-layer model for the length scaling
    python benchmarks/speed.py --sections training,inference --output benchmarks/results/speed_training.json
                                               # MLM training (like for like with BERT) and encoder inference
    python benchmarks/speed.py --sections precision --output benchmarks/results/speed_precision.json
                                               # fp32 / bf16 autocast, eager / torch.compile, training and inference
    python benchmarks/speed.py --sections memory --output benchmarks/results/speed_memory.json
                                               # peak memory at 512, 2,048 and 4,096 tokens against BERT
    python benchmarks/speed.py --sections scaling  # spatial projection and encoder throughput against length
    python benchmarks/speed.py --sections generation --output benchmarks/results/speed_generation.json
                                               # generate(): gMLP cached vs uncached vs GPT-2 (KV cache)
    python benchmarks/speed.py --report-only --output F.json   # the tables of saved results, measuring nothing

Every table runs its cases interleaved (A B C A B C ...), reports medians over rounds and paired ratios (the
median of per-round ratios), on the CPU with `torch.set_num_threads` set explicitly. glibc's malloc returns the
large logits tensor to the kernel every step and faults it back in (20-30% of a step); the script re-executes
itself with MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ raised unless `--system-malloc` is given.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gmlp import GMLPConfig, GMLPForCausalLM, GMLPForMaskedLM

RESULTS_DIR = Path(__file__).resolve().parent / "results"
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(2**34), "MALLOC_TRIM_THRESHOLD_": str(2**34)}
# The benchmark configuration: a 15M-parameter gMLP with the paper's Toeplitz W for MLM, as for g-mlp-pytorch.
BASE = {
    "vocab_size": 30522,
    "hidden_size": 256,
    "num_hidden_layers": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 128,
}
BATCH_SIZE = 8
MASK_PROBABILITY = 0.15


# Causal generation: the same shape with n = 512, a 16-token prompt and 256 new tokens.
GENERATION = {**BASE, "max_position_embeddings": 512}
PROMPT_LENGTH, NEW_TOKENS = 16, 256

# ----------------------------------------------------------------------------------------------- models


def gmlp_config(**overrides) -> GMLPConfig:
    return GMLPConfig(**{**BASE, **overrides})


def count_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def bert_config_matching(
    target_parameters: int | None, length: int, intermediate_size: int | None = None, **overrides
) -> BertConfig:
    """BERT with gMLP's width and depth (4 heads of 64) and the FFN width that matches the parameter count
    (or the given `intermediate_size`)."""

    def config(size):
        return BertConfig(
            vocab_size=BASE["vocab_size"],
            hidden_size=BASE["hidden_size"],
            num_hidden_layers=BASE["num_hidden_layers"],
            num_attention_heads=4,
            intermediate_size=size,
            max_position_embeddings=length,
            **overrides,
        )

    if intermediate_size is None:
        # The parameter count is affine in intermediate_size: two points give the solution.
        low, high = (count_parameters(BertForMaskedLM(config(size))) for size in (256, 512))
        intermediate_size = round(256 + (target_parameters - low) * 256 / (high - low))
    return config(intermediate_size)


def gpt2_matching(target_parameters: int) -> GPT2Config:
    """GPT-2 with gMLP's width and depth (4 heads of 64), n = 512 and the FFN width that matches the count."""

    def config(size):
        return GPT2Config(
            vocab_size=GENERATION["vocab_size"],
            n_positions=GENERATION["max_position_embeddings"],
            n_embd=GENERATION["hidden_size"],
            n_layer=GENERATION["num_hidden_layers"],
            n_head=4,
            n_inner=size,
            pad_token_id=0,
            bos_token_id=None,
            eos_token_id=None,
        )

    low, high = (count_parameters(GPT2LMHeadModel(config(size))) for size in (256, 512))
    return config(round(256 + (target_parameters - low) * 256 / (high - low)))


def g_mlp_pytorch_model(length: int):
    """lucidrains' gMLP configured like ours: bidirectional (causal=False), a full n x n W (circulant_matrix=False:
    its "circulant" option is a position-scaled, lower-triangular matrix, not the paper's Toeplitz W), d_ffn =
    6 d_model, one head. It has no dropout, no head transform and an untied output projection."""
    from g_mlp_pytorch import gMLP

    return gMLP(
        num_tokens=BASE["vocab_size"],
        dim=BASE["hidden_size"],
        depth=BASE["num_hidden_layers"],
        seq_len=length,
        ff_mult=BASE["intermediate_size"] // BASE["hidden_size"],
        heads=1,
        causal=False,
        circulant_matrix=False,
    )


def mlm_batch(batch_size: int, length: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, BASE["vocab_size"], (batch_size, length), generator=generator)
    labels = torch.full_like(input_ids, -100)
    labelled = torch.rand(batch_size, length, generator=generator) < MASK_PROBABILITY
    labels[labelled] = input_ids[labelled]
    return input_ids, labels


def sparse_bert_loss(model: BertForMaskedLM, input_ids, labels):
    """BERT with the same labelled-positions-only vocabulary projection, to compare like with like."""
    hidden = model.bert(input_ids=input_ids).last_hidden_state
    labelled = labels != -100
    logits = model.cls(hidden[labelled])
    return torch.nn.functional.cross_entropy(logits, labels[labelled])


def g_mlp_pytorch_loss(model, input_ids, labels):
    logits = model(input_ids)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def training_cases(only: str | None = None, bert_intermediate_size: int | None = None):
    """name -> (model, loss function, description), or just the case `only`. Ours and BERT keep their default
    dropout (0.1). The parameter-matched BERT's FFN width is computed unless given."""
    length = BASE["max_position_embeddings"]
    if bert_intermediate_size is None:
        target = count_parameters(GMLPForMaskedLM(gmlp_config()))
        bert_intermediate_size = bert_config_matching(target, length).intermediate_size
    bert_config = bert_config_matching(None, length, intermediate_size=bert_intermediate_size)
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}

    def hf_loss(model, input_ids, labels):
        return model(input_ids=input_ids, labels=labels).loss

    def sparse_loss(model, input_ids, labels):
        return model(input_ids=input_ids, labels=labels, sparse_prediction=True).loss

    factories = {
        "gmlp (full logits)": (lambda: GMLPForMaskedLM(gmlp_config()), hf_loss, "GMLPForMaskedLM, default output"),
        "gmlp sparse_prediction": (
            lambda: GMLPForMaskedLM(gmlp_config()),
            sparse_loss,
            "GMLPForMaskedLM, sparse_prediction=True",
        ),
        "BertForMaskedLM": (lambda: BertForMaskedLM(bert_config), hf_loss, "default dropout 0.1, full logits"),
        "BertForMaskedLM no dropout": (
            lambda: BertForMaskedLM(
                bert_config_matching(None, length, intermediate_size=bert_intermediate_size, **no_dropout)
            ),
            hf_loss,
            "dropout 0, full logits",
        ),
        "BERT sparse logits": (
            lambda: BertForMaskedLM(bert_config),
            sparse_bert_loss,
            "BertModel + cls head at labelled positions only",
        ),
        "g-mlp-pytorch": (
            lambda: g_mlp_pytorch_model(length),
            g_mlp_pytorch_loss,
            "gMLP(..., circulant_matrix=False), no dropout",
        ),
    }
    cases = {}
    for name, (factory, loss_fn, description) in factories.items():
        if only not in (None, name):
            continue
        torch.manual_seed(0)
        try:
            cases[name] = (factory(), loss_fn, description)
        except ImportError:
            print("g-mlp-pytorch is not installed (pip install g-mlp-pytorch einops); skipping it.", file=sys.stderr)
    return cases, bert_config


# ------------------------------------------------------------------------------------------- FLOP counts


def gmlp_layer_flops(tokens: int, length: int, spatial_channels: int | None = None) -> int:
    d, f = BASE["hidden_size"], BASE["intermediate_size"]
    gate = f // 2 if spatial_channels is None else spatial_channels
    return 2 * tokens * d * f + 2 * tokens * (f // 2) * d + 2 * tokens * length * gate


def bert_layer_flops(tokens: int, length: int, intermediate_size: int) -> int:
    d = BASE["hidden_size"]
    return 8 * tokens * d * d + 4 * tokens * length * d + 4 * tokens * d * intermediate_size


def head_flops(predicted: int, transform: bool = True) -> int:
    d = BASE["hidden_size"]
    return (2 * predicted * d * d if transform else 0) + 2 * predicted * d * BASE["vocab_size"]


FLOP_FORMULAS = {
    "convention": "matmul FLOPs only (multiply-add = 2); training = 3 x forward (backward = 2 x forward); "
    "T = batch x length tokens, P = positions given to the vocabulary projection (T, or the labelled ones)",
    "gmlp layer": "2 T d f (U) + 2 T (f/2) d (V) + 2 T n (f/2) (spatial W, direct product)",
    "bert layer": "8 T d^2 (Q, K, V, O) + 4 T n d (scores, weighted sum) + 4 T d f_bert (FFN)",
    "mlm head": "2 P d^2 (transform; none in g-mlp-pytorch) + 2 P d vocab",
}


def forward_flops(name: str, input_ids, labels, bert_intermediate: int, encoder_only: bool = False) -> int:
    tokens, length = input_ids.numel(), input_ids.shape[1]
    layers = BASE["num_hidden_layers"]
    sparse = "sparse" in name
    predicted = int((labels != -100).sum()) if sparse else tokens
    if "bert" in name.lower():
        encoder = layers * bert_layer_flops(tokens, length, bert_intermediate)
    else:
        encoder = layers * gmlp_layer_flops(tokens, length)
    if encoder_only:
        return encoder
    return encoder + head_flops(predicted, transform="g-mlp-pytorch" not in name)


# ------------------------------------------------------------------------------------------------ timing


def interleaved(steps: dict, rounds: int, warmup: int = 1, repeats: int = 1) -> dict:
    """Seconds per call of each step function: every round runs each case once (A B C A B C ...)."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(repeats):
                step()
            times[name].append((time.perf_counter() - start) / repeats)
    return times


def paired_ratio(times: dict, name: str, reference: str) -> float:
    """Median over rounds of (reference time / case time): > 1 means `name` is faster."""
    return statistics.median(r / t for r, t in zip(times[reference], times[name]))


def matmul_peak_flops(size: int = 2048, rounds: int = 9, dtype: torch.dtype = torch.float32) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    times = interleaved({"mm": lambda: torch.mm(a, b)}, rounds, warmup=2)["mm"]
    return 2 * size**3 / statistics.median(times)


def training_step_fn(model, loss_fn, input_ids, labels, compile_model: bool = False):
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    forward = torch.compile(model) if compile_model else model

    def step():
        loss = loss_fn(forward, input_ids, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def encoder_fn(name, model):
    """Inference of the encoder alone (no vocabulary projection)."""
    model.eval()
    if name.startswith("gmlp"):
        return lambda ids: model.gmlp(input_ids=ids).last_hidden_state
    if "BERT" in name or "Bert" in name:
        return lambda ids: model.bert(input_ids=ids).last_hidden_state
    return lambda ids: torch.nn.Sequential(*model.layers)(model.to_embed(ids))


# --------------------------------------------------------------------------------------------- sections


def run_training(args, peak: float) -> dict:
    cases, bert_config = training_cases()
    input_ids, labels = mlm_batch(BATCH_SIZE, BASE["max_position_embeddings"])
    steps = {name: training_step_fn(model, loss_fn, input_ids, labels) for name, (model, loss_fn, _) in cases.items()}
    times = interleaved(steps, args.rounds, warmup=2, repeats=args.repeats)
    tokens = input_ids.numel()
    rows = {}
    for name, (model, _, description) in cases.items():
        seconds = statistics.median(times[name])
        flops = 3 * forward_flops(name, input_ids, labels, bert_config.intermediate_size)
        rows[name] = {
            "description": description,
            "parameters": count_parameters(model),
            "seconds_per_step": seconds,
            "tokens_per_second": tokens / seconds,
            "flops_per_step": flops,
            "mfu": flops / seconds / peak,
            "vs_BertForMaskedLM": paired_ratio(times, name, "BertForMaskedLM"),
            "vs_g-mlp-pytorch": paired_ratio(times, name, "g-mlp-pytorch") if "g-mlp-pytorch" in times else None,
            "times": times[name],
        }
    for name, row in rows.items():
        row["peak_step_memory_mib"] = measure_memory_in_subprocess(name, bert_config.intermediate_size)
    return {"bert_intermediate_size": bert_config.intermediate_size, "rows": rows}


def run_inference(args, peak: float) -> dict:
    cases, bert_config = training_cases()
    wanted = ["gmlp (full logits)", "BertForMaskedLM", "BertForMaskedLM no dropout", "g-mlp-pytorch"]
    input_ids, labels = mlm_batch(BATCH_SIZE, BASE["max_position_embeddings"])
    encoders = {name: encoder_fn(name, cases[name][0]) for name in wanted if name in cases}
    names = {
        "gmlp (full logits)": "gmlp encoder",
        "BertForMaskedLM": "BERT encoder (sdpa)",
        "BertForMaskedLM no dropout": "BERT encoder, dropout-off config",
        "g-mlp-pytorch": "g-mlp-pytorch encoder",
    }
    steps = {}
    for name, encoder in encoders.items():
        steps[names[name]] = lambda encoder=encoder: encoder(input_ids)
    with torch.inference_mode():
        times = interleaved(steps, args.rounds, warmup=2, repeats=args.repeats * 2)
    rows = {}
    for source, name in names.items():
        if name not in times:
            continue
        seconds = statistics.median(times[name])
        flops = forward_flops(source, input_ids, labels, bert_config.intermediate_size, encoder_only=True)
        rows[name] = {
            "tokens_per_second": input_ids.numel() / seconds,
            "mfu": flops / seconds / peak,
            "vs_BERT_encoder": paired_ratio(times, name, "BERT encoder (sdpa)"),
            "times": times[name],
        }
    return {"rows": rows}


def in_precision(step, precision: str):
    """`step` run in fp32 or under CPU bf16 autocast (what the Trainer's --bf16 does)."""

    def run():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            return step()

    return run


def run_precision(args) -> dict:
    """fp32 and bf16 autocast, eager and compiled, interleaved: the MLM training step with logits at the labelled
    positions (gMLP's sparse_prediction, BERT given the same), and encoder inference at batch 8 x 128 and 1 x 512,
    gMLP against BERT (SDPA) of equal parameter count. MFU against each precision's measured matmul peak."""
    from transformers import BertModel

    from gmlp import GMLPModel

    peaks = {precision: matmul_peak_flops(dtype=dtype) for precision, dtype in PRECISIONS.items()}
    results = {"matmul_peak_gflops": {k: v / 1e9 for k, v in peaks.items()}, "training": {}, "inference": {}}
    cases, bert_config = training_cases()
    input_ids, labels = mlm_batch(BATCH_SIZE, BASE["max_position_embeddings"])
    steps, flops = {}, {}
    for name in ("gmlp sparse_prediction", "BERT sparse logits"):
        model, loss_fn, _ = cases[name]
        flops[name] = 3 * forward_flops(name, input_ids, labels, bert_config.intermediate_size)
        for compiled in (False, True):
            step = training_step_fn(model, loss_fn, input_ids, labels, compile_model=compiled)
            for precision in PRECISIONS:
                steps[(name, precision, compiled)] = in_precision(step, precision)
    results["training"] = precision_rows(steps, flops, peaks, input_ids.numel(), args, "gmlp sparse_prediction")
    target = count_parameters(GMLPForMaskedLM(gmlp_config()))
    for batch_size, length in ((BATCH_SIZE, 128), (1, 512)):
        torch.manual_seed(0)
        encoders = {
            "gmlp encoder": GMLPModel(gmlp_config(max_position_embeddings=length)).eval(),
            "BERT encoder (sdpa)": BertModel(
                _bert_for_scaling(target, length, BASE["num_hidden_layers"]), add_pooling_layer=False
            ).eval(),
        }
        ids = torch.randint(5, BASE["vocab_size"], (batch_size, length))
        steps, flops = {}, {}
        for name, encoder in encoders.items():
            flops[name] = forward_flops(name, ids, ids, bert_config.intermediate_size, encoder_only=True)
            for compiled in (False, True):
                forward = torch.compile(encoder) if compiled else encoder
                for precision in PRECISIONS:
                    steps[(name, precision, compiled)] = in_precision(
                        lambda f=forward, ids=ids: f(input_ids=ids), precision
                    )
        with torch.inference_mode():
            results["inference"][f"{batch_size}x{length}"] = precision_rows(
                steps, flops, peaks, ids.numel(), args, "gmlp encoder", repeats=2
            )
    return results


PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}
MATMUL_OPERATORS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu")


def self_cpu_ms_by_operator(profiler, steps: int = 1) -> dict:
    """torch.profiler's self CPU time by operator, in ms (per step, over `steps` profiled steps), largest first."""
    by_operator = {
        event.key: event.self_cpu_time_total / 1e3 / steps
        for event in profiler.key_averages()
        if event.self_cpu_time_total
    }
    return dict(sorted(by_operator.items(), key=lambda item: -item[1]))


def run_profile(args) -> dict:
    """Where a step's time goes: torch.profiler's self CPU time by operator over three steps of gMLP's MLM training
    step (sparse_prediction) and encoder inference, fp32, eager and compiled (after warming up). The matmul share
    bounds what fusing the rest can win (Amdahl): 1 / matmul share."""
    from torch.profiler import profile

    torch.manual_seed(0)
    input_ids, labels = mlm_batch(BATCH_SIZE, BASE["max_position_embeddings"])
    model = GMLPForMaskedLM(gmlp_config())

    def loss_fn(model, ids, target):
        return model(input_ids=ids, labels=target, sparse_prediction=True).loss

    encoder = model.gmlp
    compiled_encoder = torch.compile(encoder)
    cases = {
        "training, eager": training_step_fn(model, loss_fn, input_ids, labels),
        "training, compiled": training_step_fn(model, loss_fn, input_ids, labels, compile_model=True),
        "inference, eager": lambda: encoder.eval()(input_ids=input_ids),
        "inference, compiled": lambda: compiled_encoder(input_ids=input_ids),
    }
    results = {}
    for name, step in cases.items():
        with torch.inference_mode(name.startswith("inference")):
            for _ in range(2):
                step()
            with profile() as profiler:
                for _ in range(3):
                    step()
        by_operator = self_cpu_ms_by_operator(profiler)
        total = sum(by_operator.values())
        matmul = sum(by_operator.get(op, 0.0) for op in MATMUL_OPERATORS)
        fused = sum(ms for op, ms in by_operator.items() if "CompiledFxGraph" in op)
        top = dict(list(by_operator.items())[:12])
        results[name] = {
            "self_cpu_ms_total": total,
            "matmul_share": matmul / total,
            "compiled_kernels_share": fused / total,
            "amdahl_bound": total / matmul,
            "top_operators_ms": top,
        }
        if name.startswith("training"):
            model.train()
    return results


def precision_rows(steps: dict, flops: dict, peaks: dict, tokens: int, args, ours: str, repeats: int = 1) -> dict:
    """Warm every case up (compiling the compiled ones), time them interleaved, and tabulate: tokens/s, MFU, and
    paired ratios against fp32 eager of the same model, and of ours against the other model in the same setup."""
    labelled = {
        f"{name} | {precision} | {'compiled' if compiled else 'eager'}": step
        for (name, precision, compiled), step in steps.items()
    }
    compile_seconds = {}
    for label, step in labelled.items():
        start = time.perf_counter()
        step()
        compile_seconds[label] = time.perf_counter() - start
    times = interleaved(labelled, args.rounds, warmup=1, repeats=args.repeats * repeats)
    rows = {}
    for label in labelled:
        name, precision, mode = label.split(" | ")
        seconds = statistics.median(times[label])
        other = next(n for n in flops if n != name)
        rows[label] = {
            "tokens_per_second": tokens / seconds,
            "mfu": flops[name] / seconds / peaks[precision],
            "vs_fp32_eager": paired_ratio(times, label, f"{name} | fp32 | eager"),
            "first_call_seconds": compile_seconds[label],
            "times": times[label],
        }
        if name == ours:
            rows[label]["vs_other_model"] = paired_ratio(times, label, f"{other} | {precision} | {mode}")
    return rows


def run_generation(args) -> dict:
    """generate(): NEW_TOKENS greedy tokens after a PROMPT_LENGTH-token prompt, gMLP with its cache and without, and
    GPT-2 of equal size with its KV cache, interleaved; tokens/s counts the new tokens."""
    torch.manual_seed(0)
    gmlp = GMLPForCausalLM(GMLPConfig(**GENERATION, is_decoder=True)).eval()
    gpt2 = GPT2LMHeadModel(gpt2_matching(count_parameters(gmlp))).eval()
    fixed = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False, "pad_token_id": 0}
    result = {
        "parameters": {"gmlp": count_parameters(gmlp), "gpt2": count_parameters(gpt2)},
        "prompt_length": PROMPT_LENGTH,
        "new_tokens": NEW_TOKENS,
        "batches": {},
    }
    for batch_size in (1, 8):
        prompt = torch.randint(5, GENERATION["vocab_size"], (batch_size, PROMPT_LENGTH))
        mask = torch.ones_like(prompt)

        def generate(model, use_cache, prompt=prompt, mask=mask, **cache):
            return lambda: model.generate(prompt, attention_mask=mask, use_cache=use_cache, **fixed, **cache)

        steps = {
            "gmlp cached": generate(gmlp, True),
            "gmlp static cache": generate(gmlp, True, cache_implementation="static"),
            "gmlp uncached": generate(gmlp, False),
            "GPT2LMHeadModel (KV cache)": generate(gpt2, True),
            "GPT2LMHeadModel (static cache)": generate(gpt2, True, cache_implementation="static"),
            "gmlp matmul floor": matmul_floor(gmlp, batch_size),
            "gmlp weights read": weights_read(gmlp),
        }
        for model in (gmlp, gpt2):  # one short warm-up each: the uncached run is too long to warm up whole
            for cache in ({}, {"cache_implementation": "static"}):
                model.generate(prompt, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0, **cache)
        times = interleaved(steps, rounds=args.generation_rounds, warmup=0)
        result["batches"][str(batch_size)] = {
            "seconds": times,
            "tokens_per_second": {name: batch_size * NEW_TOKENS / statistics.median(t) for name, t in times.items()},
            "cached_vs_uncached": paired_ratio(times, "gmlp cached", "gmlp uncached"),
            "cached_vs_gpt2": paired_ratio(times, "gmlp cached", "GPT2LMHeadModel (KV cache)"),
            "static_vs_uncached": paired_ratio(times, "gmlp static cache", "gmlp uncached"),
            "static_vs_gpt2_static": paired_ratio(times, "gmlp static cache", "GPT2LMHeadModel (static cache)"),
            "cached_step_profile": decoding_profile(gmlp, prompt, mask, fixed),
        }
    return result


def matmul_floor(model: GMLPForCausalLM, batch_size: int):
    """The decoding floor: one new token per row through every matrix of the model (the blocks' channel projections,
    the LM head's dense layer and vocabulary projection), NEW_TOKENS times, and nothing else: what nn.Linear's kernels
    make of the products a cached step cannot avoid (compare weights_read, the memory traffic alone)."""
    block_inputs = [
        (layer.channel_proj_in, layer.channel_proj_out, torch.randn(batch_size, layer.channel_proj_out.in_features))
        for layer in model.gmlp.encoder.layer
    ]
    hidden = torch.randn(batch_size, model.config.hidden_size)

    def run():
        with torch.no_grad():
            for _ in range(NEW_TOKENS):
                for channel_proj_in, channel_proj_out, gated in block_inputs:
                    channel_proj_in(hidden)
                    channel_proj_out(gated)
                model.lm_head.decoder(model.lm_head.dense(hidden))

    return run


def weights_read(model: GMLPForCausalLM):
    """Every weight of the model read once per new token (a sum over each parameter), NEW_TOKENS times: the memory
    traffic of a cached step at batch 1, the floor that the machine's memory bandwidth sets."""
    weights = list({id(p): p.detach() for p in model.parameters()}.values())

    def run():
        for _ in range(NEW_TOKENS):
            for weight in weights:
                weight.sum()

    return run


def decoding_profile(model: GMLPForCausalLM, prompt: torch.Tensor, mask: torch.Tensor, fixed: dict) -> dict:
    """Where a cached decoding step goes: torch.profiler's self CPU time of one generate() call, per new token, by
    operator (the channel projections and the LM head are `addmm`, the gate cache's weighted sums `bmm`)."""
    from torch.profiler import profile

    with profile() as profiler:
        model.generate(prompt, attention_mask=mask, use_cache=True, **fixed)
    per_step = self_cpu_ms_by_operator(profiler, steps=NEW_TOKENS)
    return {
        "self_cpu_ms_per_step": sum(per_step.values()),
        "projections_ms_per_step": per_step.get("aten::addmm", 0.0),
        "top_operators_ms_per_step": dict(list(per_step.items())[:8]),
    }


def spatial_projection_cases(length: int):
    from gmlp.modeling_gmlp import GMLPSpatialProjection

    gate_size = BASE["intermediate_size"] // 2
    cases = {
        "dense W": gmlp_config(max_position_embeddings=length, spatial_weight_type="dense"),
        "Toeplitz direct": gmlp_config(max_position_embeddings=length, spatial_fft_min_length=10**9),
        "Toeplitz FFT": gmlp_config(max_position_embeddings=length, spatial_fft_min_length=1),
    }
    modules = {}
    for name, config in cases.items():
        module = GMLPSpatialProjection(config)
        torch.nn.init.uniform_(module.weight, -1e-3, 1e-3)
        torch.nn.init.ones_(module.bias)
        modules[name] = module
    return modules, gate_size


def run_scaling(args) -> dict:
    """Constant tokens per step: the spatial projection alone, and the whole encoder, forward + backward."""
    from transformers import BertModel

    from gmlp import GMLPModel

    target = count_parameters(GMLPForMaskedLM(gmlp_config()))
    results = {"tokens_per_step": args.scaling_tokens, "encoder_layers": args.scaling_layers, "lengths": {}}
    for length in args.lengths:
        batch = max(1, args.scaling_tokens // length)
        modules, gate_size = spatial_projection_cases(length)
        gate = torch.randn(batch, length, gate_size, requires_grad=True)

        def projection_step(module, gate=gate):
            module(gate).sum().backward()

        steps = {name: (lambda m=m: projection_step(m)) for name, m in modules.items()}
        spatial = interleaved(steps, args.rounds, warmup=1)

        layers = {"num_hidden_layers": args.scaling_layers, "max_position_embeddings": length}
        torch.manual_seed(0)
        encoders = {
            "gmlp dense W": GMLPModel(gmlp_config(spatial_weight_type="dense", **layers)),
            "gmlp Toeplitz direct": GMLPModel(gmlp_config(spatial_fft_min_length=10**9, **layers)),
            "gmlp Toeplitz FFT": GMLPModel(gmlp_config(spatial_fft_min_length=1, **layers)),
            # Attention dropout off so that BERT takes SDPA's memory-efficient path at long lengths.
            "BERT": BertModel(_bert_for_scaling(target, length, args.scaling_layers), add_pooling_layer=False),
        }
        input_ids = torch.randint(5, BASE["vocab_size"], (batch, length))

        def encoder_step(model, input_ids=input_ids):
            model.train()
            model(input_ids=input_ids).last_hidden_state.mean().backward()
            model.zero_grad(set_to_none=True)

        encoder = interleaved(
            {n: (lambda m=m: encoder_step(m)) for n, m in encoders.items()}, args.scaling_rounds, warmup=1
        )
        tokens = batch * length
        results["lengths"][length] = {
            "batch_size": batch,
            "spatial_projection_ms": {n: 1e3 * statistics.median(t) for n, t in spatial.items()},
            "fft_vs_dense_spatial": paired_ratio(spatial, "Toeplitz FFT", "dense W"),
            "fft_vs_direct_spatial": paired_ratio(spatial, "Toeplitz FFT", "Toeplitz direct"),
            "encoder_tokens_per_second": {n: tokens / statistics.median(t) for n, t in encoder.items()},
        }
        print(f"  length {length}: done", file=sys.stderr, flush=True)
    return results


def _bert_for_scaling(target: int, length: int, layers: int) -> BertConfig:
    """The parameter-matched BERT of the training table, with `layers` layers and `length` positions."""
    config = bert_config_matching(target, 128, attention_probs_dropout_prob=0.0)
    config.num_hidden_layers = layers
    config.max_position_embeddings = length
    return config


# ------------------------------------------------------------------------------------------- memory


def measure_memory_in_subprocess(name: str, bert_intermediate_size: int) -> float | None:
    """Peak resident memory a fresh process adds while running three training steps of one case (MiB): weights
    are in the baseline; optimizer state, gradients and activations are counted."""
    return memory_subprocess(["--memory-case", name, "--bert-intermediate-size", str(bert_intermediate_size)])


def memory_case(name: str, bert_intermediate_size: int) -> None:
    cases, _ = training_cases(only=name, bert_intermediate_size=bert_intermediate_size)
    model, loss_fn, _ = cases[name]
    input_ids, labels = mlm_batch(BATCH_SIZE, BASE["max_position_embeddings"])
    print(peak_added_mib(training_step_fn(model, loss_fn, input_ids, labels), repeats=3))


# Long-sequence peak memory: batch 1, the encoders of the training table (12 layers) sized for each length.
MEMORY_LENGTHS = (512, 2048, 4096)
MEMORY_MODELS = ("gmlp", "BERT (sdpa)", "BERT (attention dropout 0.1)")


def long_sequence_encoder(name: str, length: int):
    """gMLP's encoder (Toeplitz W; the FFT product from 1,024 tokens, the default) or the parameter-matched BERT encoder
    with n = `length`. BERT trains with SDPA's memory-efficient kernel only with attention dropout off; its default
    dropout (0.1) takes the path that stores the attention probabilities."""
    from transformers import BertModel

    from gmlp import GMLPModel

    torch.manual_seed(0)
    if name == "gmlp":
        return GMLPModel(gmlp_config(max_position_embeddings=length))
    config = _bert_for_scaling(count_parameters(GMLPForMaskedLM(gmlp_config())), length, BASE["num_hidden_layers"])
    if name == "BERT (attention dropout 0.1)":
        config.attention_probs_dropout_prob = 0.1
    return BertModel(config, add_pooling_layer=False)


def long_sequence_memory_case(spec: str) -> None:
    """Print the peak resident memory (MiB) two steps of `name,mode,length` add over the built model and input."""
    name, mode, length = spec.split(",")
    model = long_sequence_encoder(name, int(length))
    input_ids = torch.randint(5, BASE["vocab_size"], (1, int(length)))

    def step():
        if mode == "training":
            model.train()
            model(input_ids=input_ids).last_hidden_state.mean().backward()
            model.zero_grad(set_to_none=True)
        else:
            model.eval()
            with torch.no_grad():
                model(input_ids=input_ids)

    print(peak_added_mib(step, repeats=2))


def run_memory(args) -> dict:
    """Peak memory of an encoder step at long lengths, gMLP against BERT, each case in a fresh process."""
    results = {"batch_size": 1, "layers": BASE["num_hidden_layers"], "lengths": {}}
    for length in MEMORY_LENGTHS:
        row = {}
        for mode in ("training", "inference"):
            for name in MEMORY_MODELS:
                if mode == "inference" and name == "BERT (attention dropout 0.1)":
                    continue  # dropout is off in evaluation: the same model as BERT (sdpa)
                row[f"{name} {mode}"] = memory_subprocess(["--memory-case-long", f"{name},{mode},{length}"])
        results["lengths"][length] = row
        print(f"  length {length}: done", file=sys.stderr, flush=True)
    return results


# The memory cases run with every allocation of 128 KiB or more mapped on its own and unmapped when freed, so that the
# resident size follows the live tensors (the speed tables' settings keep freed memory resident for reuse).
MEASURING_ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def memory_subprocess(arguments: list[str]) -> float | None:
    """Run this script on one memory case in a fresh process; its printed MiB, or None if it failed."""
    command = [sys.executable, __file__, "--threads", str(torch.get_num_threads()), *arguments]
    result = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, **MEASURING_ALLOCATOR_ENV}, check=False
    )
    if result.returncode:
        print(result.stderr[-2000:], file=sys.stderr)
        return None
    return float(result.stdout.strip().splitlines()[-1])


def peak_added_mib(step, repeats: int) -> float:
    """The peak resident memory `repeats` calls of `step` add over what is resident before them (MiB). The kernel's
    high-water mark is reset first (/proc/self/clear_refs), so building the model does not count."""
    Path("/proc/self/clear_refs").write_text("5")
    before = resident_kib("VmRSS")
    for _ in range(repeats):
        step()
    return (resident_kib("VmHWM") - before) / 1024


def resident_kib(field: str) -> int:
    """A memory field of /proc/self/status (VmRSS: resident now, VmHWM: resident high-water mark), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}; peak memory is measured on Linux only.")


# ------------------------------------------------------------------------------------------- report


def machine_info(threads: int, peak: float) -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "allocator_env": {k: os.environ.get(k) for k in ALLOCATOR_ENV},
        "matmul_peak_gflops_fp32": peak / 1e9,
        "load_average_at_start": os.getloadavg(),
    }


# The headline comparisons of the training table: each gMLP setup against BERT set up the same way.
LIKE_FOR_LIKE = (
    ("full logits, dropout 0.1 (both defaults)", "gmlp (full logits)", "BertForMaskedLM"),
    ("logits at the labelled positions only, dropout 0.1", "gmlp sparse_prediction", "BERT sparse logits"),
    (
        "full logits; BERT with dropout off, gMLP with its default 0.1",
        "gmlp (full logits)",
        "BertForMaskedLM no dropout",
    ),
)


def like_for_like_training(rows: dict) -> list[str]:
    """The training table's like-for-like pairs: paired ratios from the saved per-round times, and memory ratios."""
    lines = [
        "### MLM training, like for like: gMLP against BERT of equal parameter count set up the same way",
        "",
        "| setup | gMLP tokens/s | BERT tokens/s | gMLP / BERT (paired) | gMLP peak MiB | BERT peak MiB | memory gMLP / BERT |",
        "|---|---|---|---|---|---|---|",
    ]
    for setup, ours, theirs in LIKE_FOR_LIKE:
        if ours not in rows or theirs not in rows:
            continue
        a, b = rows[ours], rows[theirs]
        ratio = statistics.median(t_bert / t_gmlp for t_gmlp, t_bert in zip(a["times"], b["times"]))
        memory = (
            f"{a['peak_step_memory_mib']:.0f} | {b['peak_step_memory_mib']:.0f} | "
            f"{a['peak_step_memory_mib'] / b['peak_step_memory_mib']:.0%}"
            if a["peak_step_memory_mib"] and b["peak_step_memory_mib"]
            else "- | - | -"
        )
        lines.append(
            f"| {setup} | {a['tokens_per_second']:.0f} | {b['tokens_per_second']:.0f} | {ratio:.2f}x | {memory} |"
        )
    return [*lines, ""]


def precision_markdown(p: dict) -> list[str]:
    peaks = p["matmul_peak_gflops"]
    lines = [
        (
            f"### fp32 and bf16 autocast, eager and torch.compile (measured matmul peaks: fp32 {peaks['fp32']:.0f}, "
            f"bf16 {peaks['bf16']:.0f} GFLOP/s)"
        ),
        "",
    ]
    tables = [("MLM training step, batch 8 x 128, logits at the labelled positions", p["training"])]
    tables += [(f"Encoder inference, batch {shape}", rows) for shape, rows in p["inference"].items()]
    for title, rows in tables:
        lines += [
            f"{title}:",
            "",
            "| model | precision | mode | tokens/s | vs its fp32 eager | gMLP vs BERT (same setup) | MFU | first call (s) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, row in rows.items():
            name, precision, mode = label.split(" | ")
            versus = f"{row['vs_other_model']:.2f}x" if "vs_other_model" in row else ""
            lines.append(
                f"| {name} | {precision} | {mode} | {row['tokens_per_second']:.0f} | {row['vs_fp32_eager']:.2f}x | "
                f"{versus} | {100 * row['mfu']:.0f}% | {row['first_call_seconds']:.1f} |"
            )
        lines.append("")
    return lines


def markdown(results: dict) -> str:
    machine = results["machine"]
    lines = [
        (
            f"Machine: {machine['cpu']}, {machine['threads']} threads, torch {machine['torch']}, fp32; measured dense "
            f"matmul peak {machine['matmul_peak_gflops_fp32']:.0f} GFLOP/s; allocator env {machine['allocator_env']}; "
            f"load average at start {tuple(round(x, 1) for x in machine['load_average_at_start'])}."
        ),
        "",
    ]
    if "training" in results:
        training = results["training"]
        lines += like_for_like_training(training["rows"])
        lines += [
            (
                f"### MLM training step (forward + backward + AdamW), d_model 256, 12 layers, d_ffn 1536, n 128, "
                f"vocab 30,522, batch 8, 15% labelled; BERT: 12 layers, hidden 256, 4 heads, intermediate "
                f"{training['bert_intermediate_size']}"
            ),
            "",
            "| model | parameters | tokens/s | vs BertForMaskedLM | vs g-mlp-pytorch | GFLOP/step | MFU | peak step memory (MiB) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, row in training["rows"].items():
            vs_lucid = f"{row['vs_g-mlp-pytorch']:.2f}x" if row["vs_g-mlp-pytorch"] else "-"
            memory = f"{row['peak_step_memory_mib']:.0f}" if row["peak_step_memory_mib"] is not None else "-"
            lines.append(
                f"| {name} | {row['parameters'] / 1e6:.2f}M | {row['tokens_per_second']:.0f} | "
                f"{row['vs_BertForMaskedLM']:.2f}x | {vs_lucid} | {row['flops_per_step'] / 1e9:.1f} | "
                f"{100 * row['mfu']:.0f}% | {memory} |"
            )
        lines.append("")
    if "inference" in results:
        lines += [
            "### Encoder inference (no vocabulary projection), batch 8 x 128",
            "",
            "| model | tokens/s | vs BERT encoder | MFU |",
            "|---|---|---|---|",
        ]
        for name, row in results["inference"]["rows"].items():
            lines.append(
                f"| {name} | {row['tokens_per_second']:.0f} | {row['vs_BERT_encoder']:.2f}x | {100 * row['mfu']:.0f}% |"
            )
        lines.append("")
    if "generation" in results:
        g = results["generation"]
        lines += [
            (
                f"### generate(): {g['new_tokens']} greedy tokens after a {g['prompt_length']}-token prompt, d_model 256, "
                f"12 layers, n 512 (gMLP {g['parameters']['gmlp'] / 1e6:.2f}M, GPT-2 {g['parameters']['gpt2'] / 1e6:.2f}M "
                "parameters), new tokens/s"
            ),
            "",
            (
                "| batch | gMLP cached (dynamic / static) | gMLP uncached | GPT-2 KV cache (dynamic / static) | "
                "gMLP matmuls alone | gMLP weights read alone | cached vs uncached (dynamic / static) | "
                "cached vs GPT-2 (dynamic / static) |"
            ),
            "|---|---|---|---|---|---|---|---|",
        ]
        for batch_size, row in g["batches"].items():
            tps = row["tokens_per_second"]
            lines.append(
                f"| {batch_size} | {tps['gmlp cached']:.0f} / {tps['gmlp static cache']:.0f} | "
                f"{tps['gmlp uncached']:.0f} | {tps['GPT2LMHeadModel (KV cache)']:.0f} / "
                f"{tps['GPT2LMHeadModel (static cache)']:.0f} | {tps['gmlp matmul floor']:.0f} | "
                f"{tps['gmlp weights read']:.0f} | "
                f"{row['cached_vs_uncached']:.1f}x / {row['static_vs_uncached']:.1f}x | "
                f"{row['cached_vs_gpt2']:.2f}x / {row['static_vs_gpt2_static']:.2f}x |"
            )
        lines.append("")
        for batch_size, row in g["batches"].items():
            step = row["cached_step_profile"]
            others = ", ".join(
                f"{op.removeprefix('aten::')} {ms:.2f}"
                for op, ms in step["top_operators_ms_per_step"].items()
                if op != "aten::addmm"
            )
            lines.append(
                f"Cached step at batch {batch_size} (torch.profiler, self CPU ms per new token): "
                f"{step['self_cpu_ms_per_step']:.1f} in all, the matrix products (addmm) "
                f"{step['projections_ms_per_step']:.1f} ({100 * step['projections_ms_per_step'] / step['self_cpu_ms_per_step']:.0f}%); "
                f"then {others}."
            )
            lines.append("")
    if "precision" in results:
        lines += precision_markdown(results["precision"])
    if "profile" in results:
        lines += [
            "### Where the time goes: self CPU time by operator, 3 steps, fp32 (torch.profiler)",
            "",
            "| case | total (ms) | matmuls (mm, addmm, bmm, SDPA) | inductor's fused kernels | bound on any fusion (1 / matmul share) | largest operators (ms) |",
            "|---|---|---|---|---|---|",
        ]
        for name, row in results["profile"].items():
            top = ", ".join(
                f"{op.removeprefix('aten::')[:40]} {ms:.0f}" for op, ms in list(row["top_operators_ms"].items())[:6]
            )
            lines.append(
                f"| {name} | {row['self_cpu_ms_total']:.0f} | {row['matmul_share']:.0%} | "
                f"{row['compiled_kernels_share']:.0%} | {row['amdahl_bound']:.2f}x | {top} |"
            )
        lines.append("")
    if "memory" in results:
        m = results["memory"]
        lines += [
            (
                f"### Peak memory of an encoder step at length, batch {m['batch_size']}, {m['layers']} layers, d_model "
                "256 (MiB over the built model and input; training = forward + backward)"
            ),
            "",
            (
                "| length | gMLP training | BERT (sdpa) training | BERT (attention dropout 0.1) training | "
                "gMLP vs BERT (sdpa) | gMLP inference | BERT inference | gMLP vs BERT |"
            ),
            "|---|---|---|---|---|---|---|---|",
        ]

        def mib(value):
            return "-" if value is None else f"{value:.0f}"

        def share(value, reference):
            return "-" if value is None or not reference else f"{value / reference:.0%}"

        for length, row in m["lengths"].items():
            lines.append(
                f"| {length} | {mib(row['gmlp training'])} | {mib(row['BERT (sdpa) training'])} | "
                f"{mib(row['BERT (attention dropout 0.1) training'])} | "
                f"{share(row['gmlp training'], row['BERT (sdpa) training'])} | {mib(row['gmlp inference'])} | "
                f"{mib(row['BERT (sdpa) inference'])} | {share(row['gmlp inference'], row['BERT (sdpa) inference'])} |"
            )
        lines.append("")
    if "scaling" in results:
        s = results["scaling"]
        lines += [
            f"### Sequence-length scaling, {s['tokens_per_step']} tokens per step (forward + backward)",
            "",
            "Spatial projection alone (gate of 768 channels), ms per step:",
            "",
            "| length | batch | dense W | Toeplitz direct | Toeplitz FFT | FFT vs dense | FFT vs direct |",
            "|---|---|---|---|---|---|---|",
        ]
        for length, row in s["lengths"].items():
            ms = row["spatial_projection_ms"]
            lines.append(
                f"| {length} | {row['batch_size']} | {ms['dense W']:.1f} | {ms['Toeplitz direct']:.1f} | "
                f"{ms['Toeplitz FFT']:.1f} | {row['fft_vs_dense_spatial']:.2f}x | {row['fft_vs_direct_spatial']:.2f}x |"
            )
        lines += [
            "",
            f"Whole encoder ({s['encoder_layers']} layers), tokens/s:",
            "",
            "| length | gmlp dense W | gmlp Toeplitz direct | gmlp Toeplitz FFT | BERT (sdpa, attention dropout 0) |",
            "|---|---|---|---|---|",
        ]
        for length, row in s["lengths"].items():
            t = row["encoder_tokens_per_second"]
            lines.append(
                f"| {length} | {t['gmlp dense W']:.0f} | {t['gmlp Toeplitz direct']:.0f} | "
                f"{t['gmlp Toeplitz FFT']:.0f} | {t['BERT']:.0f} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot_scaling(scaling: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = [int(length) for length in scaling["lengths"]]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name in ("dense W", "Toeplitz direct", "Toeplitz FFT"):
        left.plot(
            lengths,
            [scaling["lengths"][k]["spatial_projection_ms"][name] for k in scaling["lengths"]],
            "o-",
            label=name,
        )
    left.set(
        xscale="log",
        yscale="log",
        xlabel="sequence length",
        ylabel="ms per step (fwd + bwd)",
        title=f"Spatial projection, {scaling['tokens_per_step']} tokens/step",
    )
    for name in ("gmlp dense W", "gmlp Toeplitz direct", "gmlp Toeplitz FFT", "BERT"):
        right.plot(
            lengths,
            [scaling["lengths"][k]["encoder_tokens_per_second"][name] for k in scaling["lengths"]],
            "o-",
            label=name,
        )
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


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument(
        "--sections",
        default="training,inference,scaling,precision,memory",
        help="comma-separated subset of training,inference,scaling,generation,memory,precision,profile",
    )
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per table")
    parser.add_argument("--repeats", type=int, default=2, help="steps per case per round")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--scaling-tokens", type=int, default=4096, help="tokens per step in the length scaling")
    parser.add_argument("--scaling-layers", type=int, default=12)
    parser.add_argument("--scaling-rounds", type=int, default=3)
    parser.add_argument("--generation-rounds", type=int, default=3, help="interleaved rounds of the generation table")
    parser.add_argument("--quick", action="store_true", help="3 rounds, 1 repeat, 2-layer encoder for the scaling")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "speed.json")
    parser.add_argument("--system-malloc", action="store_true", help="keep glibc's default malloc settings")
    parser.add_argument("--memory-case", help=argparse.SUPPRESS)
    parser.add_argument("--bert-intermediate-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--memory-case-long", help=argparse.SUPPRESS)
    parser.add_argument(
        "--report-only", action="store_true", help="measure nothing: write the tables of the results in --output again"
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.repeats, args.scaling_layers, args.scaling_rounds = 3, 1, 2, 3
    return args


def main():
    args = parse_args()
    measuring = args.memory_case or args.memory_case_long  # a memory case keeps the allocator it was given
    if not (args.system_malloc or measuring) and any(os.environ.get(k) != v for k, v in ALLOCATOR_ENV.items()):
        # The allocator reads these once at process start, hence the re-exec.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ALLOCATOR_ENV})
    torch.set_num_threads(args.threads)
    if args.memory_case:
        memory_case(args.memory_case, args.bert_intermediate_size)
        return
    if args.memory_case_long:
        long_sequence_memory_case(args.memory_case_long)
        return
    if args.report_only:
        report = markdown(json.loads(args.output.read_text()))
        args.output.with_suffix(".md").write_text(report)
        print(report)
        return
    peak = matmul_peak_flops()
    results = {"machine": machine_info(args.threads, peak), "flop_formulas": FLOP_FORMULAS, "command": sys.argv}
    sections = args.sections.split(",")
    runners = {
        "training": lambda: run_training(args, peak),
        "inference": lambda: run_inference(args, peak),
        "scaling": lambda: run_scaling(args),
        "generation": lambda: run_generation(args),
        "memory": lambda: run_memory(args),
        "precision": lambda: run_precision(args),
        "profile": lambda: run_profile(args),
    }
    for section in sections:
        if section not in runners:
            raise SystemExit(f"Unknown section {section!r}; choose from {', '.join(runners)}.")
        print(f"running {section} ...", file=sys.stderr, flush=True)
        results[section] = runners[section]()
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=1, default=str))
    if "scaling" in results:
        plot_scaling(results["scaling"], args.output.with_name("throughput_vs_length.png"))
    report = markdown(results)
    args.output.with_suffix(".md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
