"""Every head's loss under the stock Trainer: gradient accumulation over micro-batches gives the same loss and the
same update as one large batch (token-level heads average over all labelled tokens through the Trainer's
`num_items_in_batch`; per-example heads let the Trainer divide by the accumulation steps).

The Trainer trains on the selected device (conftest.py's --device: the CPU, or the accelerator the Trainer picks)."""

import pytest
import torch
from datasets import Dataset
from helpers import tiny_vision_config
from transformers import Trainer, TrainingArguments

from gmlp import (
    GMLPForCausalLM,
    GMLPForImageClassification,
    GMLPForMaskedLM,
    GMLPForMultipleChoice,
    GMLPForQuestionAnswering,
    GMLPForSequenceClassification,
    GMLPForTokenClassification,
)
from gmlp.tasks.mlm import MaskedLMCollator

VOCAB, LENGTH, EXAMPLES = 40, 8, 8


# The sizes of these tests, over the tiny defaults (conftest.py); the spatial weights keep the paper's init.
LOSS_SIZES = {
    "vocab_size": VOCAB,
    "hidden_size": 16,
    "intermediate_size": 32,
    "max_position_embeddings": LENGTH,
    "spatial_init_eps": 1e-3,
}


def token_rows(labelled_fraction: float, label_range: int):
    """Token inputs whose labelled positions differ in number between examples (so a per-micro-batch mean would
    weight tokens unequally)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, VOCAB, (EXAMPLES, LENGTH), generator=generator)
    labels = torch.randint(0, label_range, (EXAMPLES, LENGTH), generator=generator)
    labels[torch.rand(EXAMPLES, LENGTH, generator=generator) > labelled_fraction] = -100
    labels[:, 0] = torch.arange(EXAMPLES) % label_range  # at least one label per example
    return [{"input_ids": i.tolist(), "labels": l.tolist()} for i, l in zip(ids, labels)]


def example_rows(**columns):
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(5, VOCAB, (EXAMPLES, LENGTH), generator=generator)
    return [{"input_ids": ids[i].tolist(), **{k: v(i) for k, v in columns.items()}} for i in range(EXAMPLES)]


# Each case: (model, rows[, collator]) from a tiny config factory and a tokenizer (the MLM collator reads only its
# padding token: the rows are already masked).
CASES = {
    "masked_lm": lambda text_config, tokenizer: (GMLPForMaskedLM(text_config()), token_rows(0.3, VOCAB)),
    "masked_lm_sparse_prediction": lambda text_config, tokenizer: (
        GMLPForMaskedLM(text_config()),
        token_rows(0.3, VOCAB),
        MaskedLMCollator(tokenizer, sparse_prediction=True),
    ),
    "causal_lm": lambda text_config, tokenizer: (
        GMLPForCausalLM(text_config(is_decoder=True)),
        token_rows(0.6, VOCAB),
    ),
    "token_classification": lambda text_config, tokenizer: (
        GMLPForTokenClassification(text_config(num_labels=3)),
        token_rows(0.5, 3),
    ),
    "sequence_classification": lambda text_config, tokenizer: (
        GMLPForSequenceClassification(text_config(num_labels=3)),
        example_rows(labels=lambda i: i % 3),
    ),
    "question_answering": lambda text_config, tokenizer: (
        GMLPForQuestionAnswering(text_config()),
        example_rows(start_positions=lambda i: i % LENGTH, end_positions=lambda i: (i + 2) % LENGTH),
    ),
    "multiple_choice": lambda text_config, tokenizer: (
        GMLPForMultipleChoice(text_config()),
        [
            {"input_ids": [row["input_ids"], row["input_ids"][::-1]], "labels": i % 2}
            for i, row in enumerate(example_rows())
        ],
    ),
    "image_classification": lambda text_config, tokenizer: (
        GMLPForImageClassification(
            tiny_vision_config(
                image_size=8, num_channels=1, hidden_size=16, intermediate_size=32, spatial_init_eps=1e-3
            )
        ),
        [
            {
                "pixel_values": torch.randn(1, 8, 8, generator=torch.Generator().manual_seed(i)).tolist(),
                "labels": i % 3,
            }
            for i in range(EXAMPLES)
        ],
    ),
}


def one_step(case: str, tmp_path, batch_size: int, accumulation_steps: int, tiny_config, tokenizer, device):
    """The logged training loss and the parameter update of one plain-SGD step (lr 1, no clipping), on `device`."""
    torch.manual_seed(0)
    model, rows, *collator = CASES[case](lambda **overrides: tiny_config(LOSS_SIZES, **overrides), tokenizer)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    args = TrainingArguments(
        str(tmp_path / f"{batch_size}x{accumulation_steps}"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation_steps,
        max_steps=1,
        optim="sgd",
        learning_rate=1.0,
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        save_strategy="no",
        report_to="none",
        use_cpu=device.type == "cpu",
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=Dataset.from_list(rows), data_collator=next(iter(collator), None)
    )
    assert trainer.args.device.type == device.type, f"the Trainer chose {trainer.args.device}, not {device}"
    loss = trainer.train().training_loss
    update = torch.cat([(p.detach().cpu() - b).flatten() for p, b in zip(model.parameters(), before)])
    return loss, update


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradient_accumulation_equals_one_large_batch(case, tmp_path, tiny_config, script_tokenizer, device):
    full_loss, full_update = one_step(case, tmp_path, EXAMPLES, 1, tiny_config, script_tokenizer, device)
    accumulated_loss, accumulated_update = one_step(
        case, tmp_path, EXAMPLES // 4, 4, tiny_config, script_tokenizer, device
    )
    assert full_update.abs().max() > 1e-4  # the step did something
    assert accumulated_loss == pytest.approx(full_loss, rel=1e-5)
    torch.testing.assert_close(accumulated_update, full_update, rtol=1e-4, atol=1e-6)
