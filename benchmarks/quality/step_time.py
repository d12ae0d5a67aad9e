"""Part `step_time`: seconds per training step and per evaluation of each model, measured side by side in one process
(one thread, the models interleaved round by round, medians): the clock that turns steps into wall-clock time for the
tables at equal time. The runs' own wall times are not used: they ran two at a time beside other work.

Run it alone (`--parts step_time`), with the background runs paused or at a quiet moment.
"""

import ctypes
import ctypes.util
import itertools
import os
import platform
import statistics
import time
import timeit

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer, TrainingArguments

from gmlp.tasks.mlm import MaskedLMCollator

from .context import KEEP_FREED_MEMORY, TRAIN_FILE, Context, MissingRun, settings_key
from .models import config_parameters
from .reference import blocks


def timers(ctx: Context, tokenizer, name: str, batches: list, evaluation: list):
    """(one training step, one evaluation) of model `name` as run_mlm.py makes them: the Trainer's default fused
    AdamW, gMLP's logits at masked positions only in training, full logits and their argmax in evaluation."""
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


def measure_now(ctx: Context, rounds: int = 8, steps_per_round: int = 5, eval_rounds: int = 3) -> dict:
    """The step and evaluation times of every model, measured now, with the runs' thread count and allocator."""
    torch.set_num_threads(1)
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    for option in (-3, -1):  # glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD, as the runs' MALLOC_*_THRESHOLD_
        if not libc.mallopt(option, KEEP_FREED_MEMORY):
            raise RuntimeError(f"mallopt({option}, {KEEP_FREED_MEMORY}) failed: the step times need glibc's malloc.")
    tokenizer = AutoTokenizer.from_pretrained(ctx.tokenizer)
    arguments = TrainingArguments(output_dir=str(ctx.args.work_dir / "step_time"), report_to="none")
    train = blocks(tokenizer, ctx.wikitext / TRAIN_FILE, arguments).select(range(32 * 8))
    rows = [{"input_ids": row["input_ids"], "special_tokens_mask": row["special_tokens_mask"]} for row in train]
    batches = [rows[i : i + ctx.args.batch_size] for i in range(0, len(rows), ctx.args.batch_size)]
    valid = blocks(tokenizer, ctx.wikitext / "valid.txt", arguments).select(range(ctx.args.max_eval_samples))
    evaluation = [{"input_ids": row["input_ids"]} for row in valid]
    calls = {name: timers(ctx, tokenizer, name, batches, evaluation) for name in ctx.configs}
    for train_step, _ in calls.values():
        for _ in range(2):
            train_step()
    steps = {name: [] for name in calls}
    for _ in range(rounds):
        for name, (train_step, _) in calls.items():
            steps[name].append(timeit.timeit(train_step, number=steps_per_round) / steps_per_round)
    evaluations = {name: [] for name in calls}
    for _ in range(eval_rounds):
        for name, (_, evaluate) in calls.items():
            evaluations[name].append(timeit.timeit(evaluate, number=1))
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
        "models": {name: config.to_dict() for name, config in ctx.configs.items()},
        "batch_size": ctx.args.batch_size,
        "max_eval_samples": ctx.args.max_eval_samples,
        "threads": 1,
    }
    name = f"step-time-{settings_key(settings)}"
    if record := ctx.record(name):
        return record
    if ctx.args.report_only:
        raise MissingRun(name)
    started = time.time()
    figures = measure_now(ctx)
    record = {
        "kind": "step_time",
        "settings": settings,
        "allocator": f"glibc, mmap and trim thresholds {KEEP_FREED_MEMORY}",
        "measured_at": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
        "models": figures,
    }
    return ctx.save(name, record)
