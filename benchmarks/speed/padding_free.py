"""Padding-free fine-tuning against padded batches: gmlp-tiny and amlp-tiny sentence classifiers trained on the same
batches of real SST-2 and MNLI examples (from `--data`), padded (DataCollatorWithPadding) or packed into one row
(run_glue.py --padding_free), interleaved; real tokens per second."""

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
        encoded = tokenizer(*zip(*rng.sample(examples, BATCH)), truncation=True, max_length=128)
        out.append([{**{k: v[i] for k, v in encoded.items()}, "label": i % labels} for i in range(BATCH)])
    return out


def training_steps(model, collator, task_batches):
    """A training step on each of the task's batches in turn, per call."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def steps():
        for examples in task_batches:
            model(**collator(examples)).loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    return steps


def measure(args) -> dict:
    texts = task_texts(args.data)
    corpus = [text for examples in texts.values() for example in examples for text in example]
    tokenizer = train_tokenizer(iter(corpus), vocab_size=8192, model_max_length=128)
    collators = {"padded": DataCollatorWithPadding(tokenizer), "padding-free": SentenceFlattening()}
    rows = []
    for task, examples in texts.items():
        labels = 3 if task == "MNLI" else 2
        task_batches = batches(tokenizer, examples, labels)
        real_tokens = statistics.mean(sum(len(e["input_ids"]) for e in batch) for batch in task_batches)
        padded_tokens = statistics.mean(BATCH * max(len(e["input_ids"]) for e in batch) for batch in task_batches)
        for preset in ("gmlp-tiny", "amlp-tiny"):
            config = GMLPConfig.from_preset(preset, vocab_size=len(tokenizer), num_labels=labels)
            torch.manual_seed(0)
            steps = {
                name: training_steps(GMLPForSequenceClassification(config).train(), collator, task_batches)
                for name, collator in collators.items()
            }
            measured = interleaved(steps, args.rounds)
            rows.append(
                {
                    "task": task,
                    "model": preset,
                    "real tokens per batch": real_tokens,
                    "padded tokens per batch": padded_tokens,
                    **{f"{n} tokens/s": real_tokens * BATCHES / statistics.median(t) for n, t in measured.items()},
                    "padding-free / padded (paired)": paired_ratio(measured, "padding-free", "padded"),
                }
            )
    return {"batch": BATCH, "rounds": args.rounds, "rows": rows}


def render(results: dict) -> dict:
    rows = [
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
    heading = f"### Padding-free fine-tuning against padded batches (batch {results['batch']})"
    return {"padding_free": [heading, "", markdown_table(rows), ""]}
