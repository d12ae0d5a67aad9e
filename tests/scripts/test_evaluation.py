"""The scripts' evaluation. Its loss is the mean over every labelled item of the evaluation set (each masked token,
each example), so that the same weights give the same loss and perplexity whatever the evaluation batch size and the
number of processes: the per-item losses equal the models' own losses, one batch size against another, one process
against two (torchrun, gloo). run_mlm.py masks its evaluation set once, so that the same checkpoint evaluated twice
gives the same figures to the last digit, while training keeps drawing fresh masks; the lowest perplexity chooses the
best checkpoint."""

import json
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from helpers import CONTEXT, SCRIPT_SIZES, flags, python, rotated_lines, tiny_run, write
from helpers import WORDS as ALL_WORDS
from script_runs import EVERY_STEP, mlm_run

from gmlp import (
    GMLPConfig,
    GMLPForImageClassification,
    GMLPForMaskedLM,
    GMLPForSequenceClassification,
    GMLPVisionConfig,
)
from gmlp.tasks import run_glue, run_image_classification, run_mlm
from gmlp.tasks.evaluation import TOKEN_LEVEL, item_losses
from gmlp.tasks.image_classification import image_processor_for
from gmlp.tasks.mlm import MaskedLMCollator, with_fixed_mask

ROOT = Path(__file__).resolve().parents[2]
VISION_SIZES = {"image_size": 8, "patch_size": 4, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1}


# ---- each item's loss, as the model's loss averages them -------------------------------------------------------------
def token_batch(generator):
    labels = torch.randint(0, 120, (3, 10), generator=generator)
    labels[torch.rand(3, 10, generator=generator) > 0.3] = -100
    labels[:, 0] = 7  # a label in every row, their numbers unequal
    return {"input_ids": torch.randint(5, 120, (3, 10), generator=generator), "labels": labels}


HEADS = {
    # name: (the model, a batch from a generator, the config's problem type as the scripts pass it)
    "masked LM": (lambda: GMLPForMaskedLM(GMLPConfig(vocab_size=120, **SCRIPT_SIZES)), token_batch, TOKEN_LEVEL),
    "single-label classification": (
        lambda: GMLPForSequenceClassification(GMLPConfig(vocab_size=120, num_labels=3, **SCRIPT_SIZES)),
        lambda g: {"input_ids": torch.randint(5, 120, (4, 8), generator=g), "labels": torch.tensor([0, 2, 1, 2])},
        "single_label_classification",
    ),
    "multi-label classification": (
        lambda: GMLPForSequenceClassification(
            GMLPConfig(vocab_size=120, num_labels=3, problem_type="multi_label_classification", **SCRIPT_SIZES)
        ),
        lambda g: {
            "input_ids": torch.randint(5, 120, (4, 8), generator=g),
            "labels": torch.rand(4, 3, generator=g).round(),
        },
        "multi_label_classification",
    ),
    "regression": (
        lambda: GMLPForSequenceClassification(GMLPConfig(vocab_size=120, num_labels=1, **SCRIPT_SIZES)),
        lambda g: {"input_ids": torch.randint(5, 120, (4, 8), generator=g), "labels": torch.rand(4, generator=g) * 5},
        "regression",
    ),
    "image classification": (
        lambda: GMLPForImageClassification(GMLPVisionConfig(num_labels=4, **VISION_SIZES)),
        lambda g: {"pixel_values": torch.randn(4, 3, 8, 8, generator=g), "labels": torch.tensor([3, 0, 1, 1])},
        "single_label_classification",
    ),
}


@pytest.mark.parametrize("head", sorted(HEADS))
def test_the_items_losses_average_to_the_models_loss(head):
    build, batch, problem_type = HEADS[head]
    torch.manual_seed(0)
    model, inputs = build().eval(), batch(torch.Generator().manual_seed(1))
    with torch.no_grad():
        output = model(**inputs)
    losses = item_losses(output.logits, inputs["labels"], problem_type)
    labelled = inputs["labels"] != -100 if problem_type == TOKEN_LEVEL else torch.ones(len(losses), dtype=torch.bool)
    assert losses.shape == (inputs["labels"].shape if problem_type == TOKEN_LEVEL else (len(inputs["labels"]),))
    torch.testing.assert_close(losses[labelled].mean(), output.loss, rtol=1e-6, atol=1e-6)
    if problem_type == TOKEN_LEVEL:
        assert (losses[~labelled] == 0).all()
        # The rows hold unequal numbers of labels: the mean of the rows' means is another figure.
        row_means = torch.stack([row[mask].mean() for row, mask in zip(losses, labelled)]).mean()
        assert abs(row_means - output.loss) > 1e-4


# ---- one batch size against another, one process against two ---------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, script_tokenizer):
    """A masked LM, a classifier of three labels and an image classifier (spatial weights away from their init),
    their tokenizer or image processor saved beside them, and their evaluation data."""
    root = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    text = {"vocab_size": 120, "spatial_init_eps": 16.0, **SCRIPT_SIZES}
    models = {
        "mlm": GMLPForMaskedLM(GMLPConfig(**text)),
        "glue": GMLPForSequenceClassification(GMLPConfig(id2label=dict(enumerate("abc")), **text)),
        "images": GMLPForImageClassification(GMLPVisionConfig(num_labels=10, spatial_init_eps=16.0, **VISION_SIZES)),
    }
    for name, model in models.items():
        model.save_pretrained(root / name)
        processor = image_processor_for(model.config) if name == "images" else script_tokenizer
        processor.save_pretrained(root / name)
    # Lines of 3 to 23 words: line by line, their masked tokens differ in number from one example to the next.
    lines = [" ".join(line.split()[: 3 + (i * 7) % 21]) for i, line in enumerate(rotated_lines(19))]
    write(root / "lines.txt", "\n".join([*lines, CONTEXT]) + "\n")
    rows = "".join(f"{line},{'abc'[i % 3]}\n" for i, line in enumerate([*lines, CONTEXT]))
    write(root / "labelled.csv", "sentence,label\n" + rows)
    return root


EVALUATIONS = {
    # name: (script, its arguments from the checkpoints' folder)
    "run_mlm, line by line": (
        run_mlm.run,
        lambda root: flags(
            model_name_or_path=root / "mlm", validation_file=root / "lines.txt", line_by_line=True, max_seq_length=16
        ),
    ),
    "run_glue": (
        run_glue.run,
        lambda root: flags(model_name_or_path=root / "glue", validation_file=root / "labelled.csv", max_seq_length=16),
    ),
    "run_image_classification": (
        run_image_classification.run,
        lambda root: flags(model_name_or_path=root / "images", max_eval_samples=19),
    ),
}


def evaluate(script, arguments, output_dir: Path, batch_size: int) -> dict:
    script(
        [
            *arguments,
            *flags(output_dir=output_dir, do_eval=True, report_to="none", per_device_eval_batch_size=batch_size),
        ]
    )
    return json.loads((output_dir / "eval_results.json").read_text())


@pytest.mark.parametrize("case", sorted(EVALUATIONS))
def test_the_evaluation_loss_does_not_depend_on_the_batch_size(case, checkpoints, tmp_path):
    script, arguments = EVALUATIONS[case]
    results = {size: evaluate(script, arguments(checkpoints), tmp_path / str(size), size) for size in (1, 4, 32)}
    assert results[32]["eval_samples"] == (19 if case == "run_image_classification" else 20)
    for size in (1, 4):
        assert results[size]["eval_loss"] == pytest.approx(results[32]["eval_loss"], rel=1e-6), size
        assert results[size]["eval_accuracy"] == results[32]["eval_accuracy"]
    if "perplexity" in results[32]:
        assert {result["perplexity"] for result in results.values()} == {
            result["eval_perplexity"] for result in results.values()
        }
        assert results[1]["perplexity"] == pytest.approx(torch.tensor(results[32]["eval_loss"]).exp().item(), rel=1e-6)


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["run_mlm, line by line", "run_glue"])
def test_two_processes_evaluate_the_same_loss_as_one(case, checkpoints, tmp_path):
    script, arguments = EVALUATIONS[case]
    # Batches of 3 on each process: 20 examples leave an uneven last step, whose missing examples the Trainer fills.
    one = evaluate(script, arguments(checkpoints), tmp_path / "one", 3)
    name = "run_mlm.py" if script is run_mlm.run else "run_glue.py"
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", ROOT / name]
    run_flags = flags(output_dir=tmp_path / "two", do_eval=True, report_to="none", per_device_eval_batch_size=3)
    run_flags += flags(log_level="info", log_level_replica="info")  # the start-up line, with the world size, is INFO
    result = python(tmp_path, *launch, *arguments(checkpoints), *run_flags)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "world size: 2" in result.stdout + result.stderr
    two = json.loads((tmp_path / "two" / "eval_results.json").read_text())
    assert two["eval_loss"] == pytest.approx(one["eval_loss"], rel=1e-6)
    assert two["eval_accuracy"] == one["eval_accuracy"]


# ---- run_mlm.py's one evaluation mask ---------------------------------------------------------------------------
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
    run_mlm.run(
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
        run_mlm.run([*flags(model_name_or_path=checkpoint, output_dir=tmp_path / name, do_eval=True), *common, *extra])
        return json.loads((tmp_path / name / "eval_results.json").read_text())

    first, second = evaluate("a", "--seed", "1"), evaluate("b", "--seed", "2")
    other_mask = evaluate("c", "--seed", "1", "--eval_mask_seed", "5")
    assert first["eval_loss"] == second["eval_loss"] == during_training[0]
    assert first["perplexity"] == second["perplexity"] and first["eval_accuracy"] == second["eval_accuracy"]
    assert other_mask["eval_loss"] != first["eval_loss"]  # the mask is what fixed the figure


def test_perplexity_chooses_the_best_checkpoint_lowest_first(tokenizer_dir, tmp_path):
    options = {"max_steps": 4, "validation_split_percentage": 20, "learning_rate": 0.05}
    run_mlm.run(
        mlm_run(
            tokenizer_dir,
            tmp_path,
            *EVERY_STEP,
            "--load_best_model_at_end",
            "--metric_for_best_model",
            "perplexity",
            **options,
        )
    )
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    evaluations = {entry["step"]: entry for entry in state["log_history"] if "eval_perplexity" in entry}
    assert sorted(evaluations) == [1, 2, 3, 4]
    for entry in evaluations.values():  # the perplexity of the evaluation's loss, as at the end
        assert entry["eval_perplexity"] == pytest.approx(np.exp(entry["eval_loss"]), rel=1e-6)
    best = min(evaluations, key=lambda step: evaluations[step]["eval_perplexity"])
    assert state["best_metric"] == evaluations[best]["eval_perplexity"]
    assert state["best_model_checkpoint"].endswith(f"checkpoint-{best}")
