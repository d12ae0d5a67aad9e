"""What the scripts' data collators add to Transformers' own: a check of every batch's ids and labels on the CPU."""

import torch


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
                raise ValueError(
                    f"A batch holds {key} {bad[0].item()}, outside the model's ids 0..{limit - 1}: {self.ADVICE[key]}"
                )
        return batch
