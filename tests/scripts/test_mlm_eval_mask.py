"""The fixed evaluation mask of run_mlm.py: the same checkpoint evaluated twice gives the same perplexity and
masked-token accuracy to the last digit, while training keeps drawing fresh masks."""

import json

import datasets
import torch
from helpers import WORDS as ALL_WORDS
from helpers import flags, tiny_run

import run_mlm
from gmlp.tasks.mlm import MaskedLMCollator, with_fixed_mask

WORDS = ALL_WORDS[:20]


def token_dataset(tokenizer, lengths):
    texts = [" ".join((WORDS * 3)[i : i + length]) for i, length in enumerate(lengths)]
    return datasets.Dataset.from_dict(dict(tokenizer(texts, return_special_tokens_mask=True)))


def test_fixed_mask_depends_only_on_the_seed(script_tokenizer):
    dataset = token_dataset(script_tokenizer, [20, 30, 25, 40] * 10)
    collator = MaskedLMCollator(script_tokenizer, mlm_probability=0.15)
    first, again, other = (with_fixed_mask(dataset, collator, seed) for seed in (0, 0, 1))
    assert first["labels"] == again["labels"] and first["input_ids"] == again["input_ids"]
    assert first["labels"] != other["labels"]
    masked = total = 0
    for original, example in zip(dataset, first):
        labels, inputs = torch.tensor(example["labels"]), torch.tensor(example["input_ids"])
        source = torch.tensor(original["input_ids"])
        special = torch.tensor(original["special_tokens_mask"]).bool()
        assert len(labels) == len(source)
        assert (labels[special] == -100).all()  # [CLS] / [SEP] are never masked
        chosen = labels != -100
        torch.testing.assert_close(labels[chosen], source[chosen])  # the labels are the original tokens
        torch.testing.assert_close(inputs[~chosen], source[~chosen])  # unmasked positions are unchanged
        masked, total = masked + int(chosen.sum()), total + int((~special).sum())
    assert 0.10 < masked / total < 0.20
    assert "special_tokens_mask" not in first.column_names


def test_collator_pads_fixed_examples_without_masking_them_again(script_tokenizer):
    collator = MaskedLMCollator(script_tokenizer, mlm_probability=0.15, sparse_prediction=True)
    fixed = with_fixed_mask(token_dataset(script_tokenizer, [6, 12, 9]), collator, seed=0)
    examples = [fixed[i] for i in range(3)]
    batch = collator(examples)
    assert batch["sparse_prediction"] is True
    assert batch["input_ids"].shape == batch["labels"].shape == (3, max(len(e["input_ids"]) for e in examples))
    for row, example in enumerate(examples):
        length = len(example["input_ids"])
        assert batch["input_ids"][row, :length].tolist() == example["input_ids"]
        assert batch["labels"][row, :length].tolist() == example["labels"]
        assert (batch["labels"][row, length:] == -100).all()
        assert (batch["input_ids"][row, length:] == script_tokenizer.pad_token_id).all()
        assert batch["attention_mask"][row].tolist() == [1] * length + [0] * (batch["labels"].shape[1] - length)


def test_training_batches_get_fresh_masks(script_tokenizer):
    examples = [dict(row) for row in token_dataset(script_tokenizer, [40] * 8)]
    collator = MaskedLMCollator(script_tokenizer, mlm_probability=0.3)
    torch.manual_seed(0)
    first, second = collator(examples), collator(examples)
    assert not torch.equal(first["labels"], second["labels"])
    assert "sparse_prediction" not in first


def test_evaluating_the_same_weights_again_gives_identical_metrics(tmp_path):
    """Every evaluation of the same weights scores the same masked tokens: the evaluations during a run (the learning
    rate is 0, so the weights never change) and later ones with another training seed agree to the last digit."""
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))) * 4 + "\n")
    common = flags(
        validation_file=corpus, max_seq_length=16, per_device_eval_batch_size=4, report_to="none", save_strategy="no"
    )
    checkpoint = tmp_path / "model"
    run_mlm.main(
        tiny_run(
            checkpoint,
            *common,
            overrides={"max_position_embeddings": 16, "vocab_size": 120},
            train_file=corpus,
            do_train=True,
            do_eval=True,
            max_steps=3,
            learning_rate=0,
            eval_strategy="steps",
            eval_steps=1,
        )
    )
    history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    during_training = [entry["eval_loss"] for entry in history if "eval_loss" in entry]
    assert len(during_training) == 3 and len(set(during_training)) == 1

    def evaluate(name, *extra):
        run_mlm.main(
            [*flags(model_name_or_path=checkpoint, output_dir=tmp_path / name, do_eval=True), *common, *extra]
        )
        return json.loads((tmp_path / name / "eval_results.json").read_text())

    first, second = evaluate("a", "--seed", "1"), evaluate("b", "--seed", "2")
    other_mask = evaluate("c", "--seed", "1", "--eval_mask_seed", "5")
    assert first["eval_loss"] == second["eval_loss"] == during_training[0]
    assert first["perplexity"] == second["perplexity"] and first["eval_accuracy"] == second["eval_accuracy"]
    assert other_mask["eval_loss"] != first["eval_loss"]  # the mask is what fixed the figure
