"""Part `reference`: the unigram floor. Each masked token predicted by its training-split frequency (add-one smoothed),
scored on the very positions the models are scored on (same tokenizer, text, sequences and evaluation mask seed).

A model whose perplexity is near this number has learned token frequencies and little of the context.
"""

import math
import tempfile

import datasets
import numpy as np
from transformers import AutoTokenizer, TrainingArguments

from gmlp.tasks.mlm import MaskedLMCollator, tokenize_for_mlm, with_fixed_mask

from .context import TRAIN_FILE, Context, MissingRun, settings_key
from .models import GMLP_TINY


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
