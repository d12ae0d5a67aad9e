"""Padding-free fine-tuning against padded batches, at SST-2's and MNLI's lengths: training steps of gmlp-tiny and
amlp-tiny sentence classifiers (batch 32, AdamW) on the same batches of real examples, padded to each batch's longest
(DataCollatorWithPadding) or packed into one row (run_glue.py --padding_free), interleaved round by round on one
thread. Real (unpadded) tokens per second, and the paired ratio (`python -m benchmarks.speed --sections
padding_free`, the data from `--data`).
"""

import csv
import json
import random
import statistics
from pathlib import Path

import torch
from transformers import DataCollatorWithPadding

from gmlp import GMLPConfig, GMLPForSequenceClassification
from gmlp.tasks.collators import SentenceFlattening
from gmlp.tokenization_gmlp import train_tokenizer

from ..common import interleaved, markdown_table, paired_ratio

BATCH = 32
BATCHES = 6  # distinct batches per task, cycled


def task_texts(data: Path) -> dict:
    """Each task's examples: SST-2's training sentences, MNLI-m dev's (premise, hypothesis) pairs."""
    with open(data / "glue" / "SST-2" / "train.tsv", encoding="utf-8") as file:
        sst2 = [(row[0],) for row in list(csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]]
    with open(data / "glue" / "MNLI" / "dev_matched.jsonl", encoding="utf-8") as file:
        mnli = [(row["premise"], row["hypothesis"]) for row in map(json.loads, file)]
    return {"SST-2": sst2, "MNLI": mnli}


def batches(tokenizer, examples: list[tuple], labels: int) -> list[list[dict]]:
    """BATCHES batches of BATCH examples drawn at random, tokenized as run_glue.py does (truncated to n)."""
    rng = random.Random(0)
    out = []
    for _ in range(BATCHES):
        drawn = rng.sample(examples, BATCH)
        encoded = tokenizer(*zip(*drawn), truncation=True, max_length=128)
        out.append([{**{k: v[i] for k, v in encoded.items()}, "label": i % labels} for i in range(BATCH)])
    return out


def trainer_steps(model, optimizer, collator, batches_of_task):
    """A training step on each of the task's batches in turn, per call."""

    def steps():
        for examples in batches_of_task:
            model(**collator(examples)).loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    return steps


def measure(args) -> dict:
    rounds = args.rounds
    texts = task_texts(args.data)
    corpus = [text for examples in texts.values() for example in examples for text in example]
    tokenizer = train_tokenizer(iter(corpus), vocab_size=8192, model_max_length=128)
    rows = []
    for task, examples in texts.items():
        labels = 3 if task == "MNLI" else 2
        task_batches = batches(tokenizer, examples, labels)
        real_tokens = statistics.mean(sum(len(e["input_ids"]) for e in batch) for batch in task_batches)
        padded_tokens = statistics.mean(BATCH * max(len(e["input_ids"]) for e in batch) for batch in task_batches)
        for preset in ("gmlp-tiny", "amlp-tiny"):
            config = GMLPConfig.from_preset(preset, vocab_size=len(tokenizer), num_labels=labels)
            torch.manual_seed(0)
            steps = {}
            for name, collator in (
                ("padded", DataCollatorWithPadding(tokenizer)),
                ("padding-free", SentenceFlattening()),
            ):
                model = GMLPForSequenceClassification(config).train()
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
                steps[name] = trainer_steps(model, optimizer, collator, task_batches)
            times = interleaved(steps, rounds)
            rows.append(
                {
                    "task": task,
                    "model": preset,
                    "real tokens per batch": real_tokens,
                    "padded tokens per batch": padded_tokens,
                    **{f"{name} tokens/s": real_tokens * BATCHES / statistics.median(t) for name, t in times.items()},
                    "padding-free / padded (paired)": paired_ratio(times, "padding-free", "padded"),
                }
            )
    return {"batch": BATCH, "rounds": rounds, "rows": rows}


def render(results: dict) -> dict:
    table = markdown_table(
        [
            {
                "task": row["task"],
                "model": row["model"],
                "real / padded tokens": f"{row['real tokens per batch']:.0f} / {row['padded tokens per batch']:.0f}",
                "padded tokens/s": f"{row['padded tokens/s']:.0f}",
                "padding-free tokens/s": f"{row['padding-free tokens/s']:.0f}",
                "padding-free / padded": f"{row['padding-free / padded (paired)']:.2f}x",
            }
            for row in results["rows"]
        ]
    )

    return {
        "padding_free": [
            f"### Padding-free fine-tuning against padded batches (batch {results['batch']})",
            "",
            table,
            "",
        ]
    }
