"""What the scripts' data collators add to Transformers' own: a check of every batch's ids and labels on the CPU, and
padding-free batches of sentences."""

import torch
from transformers import DataCollatorWithFlattening

from .errors import ScriptError


class CheckedCollator:
    """`collator`, then a check of each batch on the CPU: its `input_ids` below `input_ids` (the vocabulary size) and
    its integer `labels` below `labels` (the number of classes, or the vocabulary size), or -100. A bad id thus gives
    this clear error on every device (an accelerator fails with a device-side assert), at no synchronisation."""

    ADVICE = {
        "input_ids": "the tokenizer does not match the model's vocabulary (vocab_size); use the model's tokenizer.",
        "labels": "labels must be mapped to the model's label ids (num_labels).",
    }

    def __init__(self, collator, **limits: int | None):
        self.collator, self.limits = collator, limits

    def __call__(self, examples):
        batch = self.collator(examples)
        for key, limit in self.limits.items():
            values = batch.get(key)
            if limit is None or not isinstance(values, torch.Tensor) or values.is_floating_point():
                continue
            bad = values[((values < 0) & (values != -100)) | (values >= limit)]
            if bad.numel():
                raise ScriptError(
                    f"A batch holds {key} {bad[0].item()}, outside the model's ids 0..{limit - 1}: {self.ADVICE[key]}"
                )
        return batch


class SentenceFlattening(DataCollatorWithFlattening):
    """Transformers' padding-free collator for sentence-level tasks: every example's tokens in one row, positions
    restarting at 0 for each (the stock collator), with their `token_type_ids` (which it drops) and one label per
    example (it takes labels for tokens). The model pools each sequence apart: one output per example."""

    def __call__(self, features, return_tensors=None, separator_id=None):
        batch = super().__call__([{"input_ids": f["input_ids"]} for f in features], return_tensors, separator_id)
        del batch["labels"]  # the stock collator's next-token labels
        if "token_type_ids" in features[0]:
            batch["token_type_ids"] = torch.tensor([[t for f in features for t in f["token_type_ids"]]])
        label = "label" if "label" in features[0] else "labels" if "labels" in features[0] else None
        if label is not None:
            values = [f[label] for f in features]
            floating = any(isinstance(v[0] if isinstance(v, list) and v else v, float) for v in values)
            batch["labels"] = torch.tensor(values, dtype=torch.float if floating else torch.long)
        return batch
