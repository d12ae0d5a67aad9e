"""The parts measured in this process: `reference`, the unigram floor (each masked token predicted by its
training-split frequency, on the very positions the models are scored on), and `step_time`, the clock of the tables at
equal time (seconds per training step and evaluation, the models interleaved on one thread; the runs' own wall times
ran two at a time beside other work). Run `--parts step_time` alone, at a quiet moment."""

import itertools
import math
import os
import platform
import statistics
import tempfile
import time

import datasets
import numpy as np
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, TrainingArguments

from gmlp.tasks.mlm import MaskedLMCollator, tokenize_for_mlm, with_fixed_mask

from ..common import KEEP_FREED_MEMORY, interleaved, set_malloc_thresholds
from .context import GMLP_TINY, TRAIN_FILE, Context, MissingRun, config_parameters, config_settings, settings_key


def blocks(tokenizer, path, arguments: TrainingArguments) -> datasets.Dataset:
    """`path`'s text as run_mlm.py makes it: concatenated and cut into blocks of 128 tokens."""
    raw = datasets.load_dataset("text", data_files={"validation": str(path)})
    return tokenize_for_mlm(raw, tokenizer, 128, training_args=arguments)["validation"]


def unigram(ctx: Context) -> dict:
    """Per split: the unigram model's perplexity and masked-token accuracy (it always predicts the most frequent
    token) at the evaluation's masked positions, and how many positions those are."""
    tokenizer = AutoTokenizer.from_pretrained(ctx.tokenizer)
    with tempfile.TemporaryDirectory() as scratch:
        arguments = TrainingArguments(output_dir=scratch, report_to="none")
        train = blocks(tokenizer, ctx.wikitext / TRAIN_FILE, arguments)
        ids = np.concatenate(train["input_ids"])
        special = np.concatenate(train["special_tokens_mask"]).astype(bool)
        counts = np.bincount(ids[~special], minlength=len(tokenizer)).astype(np.float64)
        log_probability = np.log((counts + 1) / (counts.sum() + len(counts)))
        figures = {}
        for split in ("valid", "test"):
            tokenized = blocks(tokenizer, ctx.wikitext / f"{split}.txt", arguments)
            sequences = tokenized.select(range(min(ctx.args.max_eval_samples, len(tokenized))))
            labels = np.concatenate(with_fixed_mask(sequences, MaskedLMCollator(tokenizer), seed=0)["labels"])
            labels = labels[labels != -100]
            figures[split] = {
                "perplexity": math.exp(-log_probability[labels].mean()),
                "accuracy": float(np.mean(labels == counts.argmax())),
                "masked_tokens": int(labels.size),
                "sequences": len(sequences),
            }
    return figures


def reference_part(ctx: Context) -> dict:
    """The unigram reference for every split the tables report (a record: computed once)."""
    settings = {
        "tokenizer": ctx.tokenizer_hash,
        "train_file": TRAIN_FILE,
        "vocab_size": GMLP_TINY["vocab_size"],
        "max_eval_samples": ctx.args.max_eval_samples,
        "eval_mask_seed": 0,
        "smoothing": "add-one",
    }
    name = f"reference-unigram-{settings_key(settings)}"
    if record := ctx.record(name):
        return record
    if ctx.args.report_only:
        raise MissingRun(name)
    return ctx.save(name, {"kind": "reference", "settings": settings, "unigram": unigram(ctx)})


def timers(ctx: Context, tokenizer, name: str, batches: list, evaluation: list):
    """(a training step, an evaluation) of model `name` as run_mlm.py makes them (gMLP's logits sparse in training)."""
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(ctx.configs[name])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    collator = MaskedLMCollator(tokenizer, sparse_prediction=ctx.configs[name].model_type == "gmlp")
    cycled = itertools.cycle(batches)

    def train_step():
        model.train()
        model(**collator(next(cycled))).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def evaluate():
        model.eval()
        with torch.no_grad():
            for start in range(0, len(evaluation), 64):
                model(**collator(evaluation[start : start + 64])).logits.argmax(-1)

    return train_step, evaluate


def measure_step_times(ctx: Context) -> dict:
    """Every model's step and evaluation times, with the runs' thread count and allocator (about 5 steps a round)."""
    torch.set_num_threads(1)
    set_malloc_thresholds(KEEP_FREED_MEMORY)
    tokenizer = AutoTokenizer.from_pretrained(ctx.tokenizer)
    arguments = TrainingArguments(output_dir=str(ctx.args.work_dir / "step_time"), report_to="none")
    train = blocks(tokenizer, ctx.wikitext / TRAIN_FILE, arguments).select(range(32 * 8))
    rows = [{"input_ids": row["input_ids"], "special_tokens_mask": row["special_tokens_mask"]} for row in train]
    batches = [rows[i : i + ctx.args.batch_size] for i in range(0, len(rows), ctx.args.batch_size)]
    valid = blocks(tokenizer, ctx.wikitext / "valid.txt", arguments).select(range(ctx.args.max_eval_samples))
    evaluation = [{"input_ids": row["input_ids"]} for row in valid]
    calls = {name: timers(ctx, tokenizer, name, batches, evaluation) for name in ctx.configs}
    steps = interleaved({name: train_step for name, (train_step, _) in calls.items()}, 8, 3.0, warmup=2)
    evaluations = interleaved({name: evaluate for name, (_, evaluate) in calls.items()}, 3, warmup=0)
    return {
        name: {
            "parameters": config_parameters(ctx.configs[name]),
            "train_step_seconds": statistics.median(steps[name]),
            "eval_seconds": statistics.median(evaluations[name]),
            "train_step_rounds": steps[name],
            "eval_rounds": evaluations[name],
        }
        for name in calls
    }


def step_time_part(ctx: Context) -> dict:
    """The step times (a record, measured once at a quiet moment; delete it to measure again, on another machine)."""
    settings = {
        "models": {name: config_settings(config) for name, config in ctx.configs.items()},
        "batch_size": ctx.args.batch_size,
        "max_eval_samples": ctx.args.max_eval_samples,
        "threads": 1,
    }
    name = f"step-time-{settings_key(settings)}"
    if record := ctx.record(name):
        return record
    if ctx.args.report_only:
        raise MissingRun(name)
    record = {
        "kind": "step_time",
        "settings": settings,
        "allocator": f"glibc, mmap and trim thresholds {KEEP_FREED_MEMORY}",
        "measured_at": time.strftime("%Y-%m-%d %H:%M"),  # before the measurement
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
        "models": measure_step_times(ctx),
    }
    return ctx.save(name, record)
