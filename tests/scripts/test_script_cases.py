"""The scripts never silently mislead: a checkpoint's label map is used wherever labels are mapped,
`--overwrite_output_dir` is a fresh run, `--do_predict` alone predicts (or is refused), unlabelled test files, the
upstream `--ignore_mismatched_sizes`, the last unclear errors, and the card's loading snippet. Table-driven where the
cases share a shape, on tiny fixtures."""

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import CONTEXT, SCRIPT_SIZES, config_overrides, rotated_lines, tiny_run, write
from PIL import Image
from transformers import AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments, default_data_collator

import run_glue
import run_image_classification
import run_mlm
import run_squad
from gmlp import (
    GMLPConfig,
    GMLPForImageClassification,
    GMLPForQuestionAnswering,
    GMLPForSequenceClassification,
    GMLPVisionConfig,
    modeling_gmlp,
)
from gmlp.tasks.collators import CheckedCollator
from gmlp.tasks.image_classification import image_processor_for
from gmlp.tokenization_gmlp import main as tokenizer_command
from gmlp.tokenization_gmlp import train_tokenizer

# The scripts' tiny model (helpers.SCRIPT_SIZES), as a config and as --config_overrides; the tokenizer of these tests
# is conftest.py's tokenizer_dir (script_tokenizer, loaded).
SIZES = SCRIPT_SIZES
TINY = config_overrides()
MRPC_LABELS = {0: "not_equivalent", 1: "equivalent"}  # GLUE's order, which is not the alphabetical one
COMMON = ["--report_to", "none", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "4"]
TRAIN_ONE_STEP = ["--do_train", "--max_steps", "1", "--save_strategy", "no"]


def csv_file(path: Path, rows) -> Path:
    return write(path, "sentence,label\n" + "".join(f"{text},{label}\n" for text, label in rows))


@pytest.fixture(scope="module")
def mrpc_checkpoint(tmp_path_factory, script_tokenizer):
    """A classifier with MRPC's label map, and 20 sentences labelled with its own predictions (both labels)."""
    path = tmp_path_factory.mktemp("mrpc")
    torch.manual_seed(0)
    config = GMLPConfig(vocab_size=120, id2label=MRPC_LABELS, hidden_dropout_prob=0.0, spatial_init_eps=16.0, **SIZES)
    model = GMLPForSequenceClassification(config).eval()
    tokenizer = script_tokenizer
    inputs = tokenizer(rotated_lines(20), padding=True, return_tensors="pt")
    with torch.no_grad():
        margins = model(**inputs).logits.diff(dim=-1).squeeze(-1)
        model.classifier.out_proj.bias[1] -= margins.median()  # about half the sentences on each side
        margins -= margins.median()
    # Sentences too near the boundary could change sides with the batch's padding, by rounding.
    labelled = [(text, MRPC_LABELS[int(m > 0)]) for text, m in zip(rotated_lines(20), margins) if abs(m) > 1e-4]
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    assert {label for _, label in labelled} == set(MRPC_LABELS.values())
    return path, labelled


def glue(checkpoint, out, *extra):
    return [
        "--model_name_or_path",
        str(checkpoint),
        "--output_dir",
        str(out),
        "--max_seq_length",
        "32",
        *COMMON,
        *extra,
    ]


# ---- a checkpoint's label map is used wherever labels are mapped; --ignore_mismatched_sizes -------------------------
def test_scoring_a_checkpoint_on_its_own_predictions_goes_through_its_label_map(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    scored = csv_file(tmp_path / "selfpred.csv", labelled)
    metrics = run_glue.main(glue(checkpoint, tmp_path / "out", "--validation_file", str(scored), "--do_eval"))
    assert metrics["eval_accuracy"] == 1.0  # numbering the labels alphabetically flips every one: 0.0


def test_a_glue_task_is_aligned_with_a_checkpoint_whose_order_differs(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    model = GMLPForSequenceClassification.from_pretrained(checkpoint)
    model.config.id2label = {0: "POSITIVE", 1: "NEGATIVE"}  # GLUE's SST-2 numbers them the other way round
    model.config.label2id = {"POSITIVE": 0, "NEGATIVE": 1}
    model.save_pretrained(tmp_path / "sst2")
    AutoTokenizer.from_pretrained(checkpoint).save_pretrained(tmp_path / "sst2")
    sst2_ids = {"not_equivalent": 1, "equivalent": 0}  # the model's name for each prediction, as SST-2's id
    rows = "".join(f"{text}\t{sst2_ids[label]}\n" for text, label in labelled)
    write(tmp_path / "glue" / "SST-2" / "dev.tsv", "sentence\tlabel\n" + rows)
    args = glue(tmp_path / "sst2", tmp_path / "out", "--task_name", "sst2", "--glue_dir", str(tmp_path / "glue"))
    assert run_glue.main([*args, "--do_eval"])["eval_accuracy"] == 1.0


def test_fine_tuning_on_own_files_keeps_the_checkpoints_label_ids(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    train = csv_file(tmp_path / "train.csv", labelled)
    run_glue.main(glue(checkpoint, tmp_path / "out", "--train_file", str(train), *TRAIN_ONE_STEP))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["id2label"] == {"0": "not_equivalent", "1": "equivalent"}


def test_labels_the_checkpoint_does_not_know_are_named(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    data = csv_file(tmp_path / "yesno.csv", [(text, "yes" if i % 2 else "no") for i, (text, _) in enumerate(labelled)])
    message = r"label\(s\) 'no', 'yes' are not labels of the model .*--ignore_mismatched_sizes"
    with pytest.raises(ValueError, match=message):
        run_glue.main(glue(checkpoint, tmp_path / "out", "--train_file", str(data), "--do_train"))


def test_ignore_mismatched_sizes_trains_a_new_head_with_the_datas_labels(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    data = str(csv_file(tmp_path / "abc.csv", [(text, "abc"[i % 3]) for i, (text, _) in enumerate(labelled)]))
    args = glue(checkpoint, tmp_path / "out", "--train_file", data, "--validation_file", data, "--do_eval")
    run_glue.main([*args, *TRAIN_ONE_STEP, "--ignore_mismatched_sizes"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["id2label"] == {"0": "a", "1": "b", "2": "c"}
    assert GMLPForSequenceClassification.from_pretrained(tmp_path / "out").classifier.out_proj.weight.shape[0] == 3


# ---- --overwrite_output_dir is a fresh run; a resume says when its checkpoint's settings differ ---------------------
def mlm(tokenizer_dir, tmp_path, *extra):
    return tiny_run(
        tmp_path / "out",
        *COMMON,
        *extra,
        tokenizer=tokenizer_dir,
        overrides={"vocab_size": 120},
        train_file=write(tmp_path / "train.txt", "\n".join(rotated_lines(40)) + "\n"),
        do_train=True,
        max_seq_length=16,
        save_strategy="steps",
        save_steps=1,
    )


def test_overwrite_removes_the_earlier_runs_checkpoints_so_a_resume_continues_this_run(
    tokenizer_dir, tmp_path, caplog
):
    out = tmp_path / "out"
    run_mlm.main(mlm(tokenizer_dir, tmp_path, "--max_steps", "3", "--learning_rate", "1e-3"))
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_mlm.main(
            mlm(tokenizer_dir, tmp_path, "--max_steps", "2", "--learning_rate", "5e-4", "--overwrite_output_dir")
        )
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert any(
        "removed the earlier run's" in r.getMessage() and "checkpoint-3" in r.getMessage() for r in caplog.records
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_mlm.main(
            mlm(tokenizer_dir, tmp_path, *f"--max_steps 3 --learning_rate 5e-4 --resume_from_checkpoint {out}".split())
        )
    messages = [record.getMessage() for record in caplog.records]
    assert f"Resuming from {out / 'checkpoint-2'}" in messages
    assert not any("other settings" in message for message in messages)  # the same run, one step longer


def test_a_resume_from_a_run_with_other_settings_says_which(tokenizer_dir, tmp_path, caplog):
    out = tmp_path / "out"
    run_mlm.main(mlm(tokenizer_dir, tmp_path, "--max_steps", "2", "--learning_rate", "1e-3"))
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_mlm.main(
            mlm(tokenizer_dir, tmp_path, *f"--max_steps 3 --learning_rate 5e-5 --resume_from_checkpoint {out}".split())
        )
    expected = (
        f"{out / 'checkpoint-2'} was written by a run with other settings: learning_rate 0.001 (this run: 5e-05)."
    )
    assert any(record.getMessage().startswith(expected) for record in caplog.records)


def test_training_into_a_directory_with_another_runs_checkpoints_is_refused(tokenizer_dir, tmp_path):
    run_mlm.main(mlm(tokenizer_dir, tmp_path, "--max_steps", "1"))
    for name in ("all_results.json", "train_results.json"):  # a run killed before its end leaves only checkpoints
        (tmp_path / "out" / name).unlink()
    message = r"holds the checkpoints of an earlier run \(checkpoint-1 the newest\).*--resume_from_checkpoint"
    with pytest.raises(FileExistsError, match=message):
        run_mlm.main(mlm(tokenizer_dir, tmp_path, "--max_steps", "1"))
    checkpoint = tmp_path / "out" / "checkpoint-1"
    evaluate = ["--model_name_or_path", str(checkpoint), "--do_eval", "--overwrite_output_dir"]
    with pytest.raises(ValueError, match=f"--overwrite_output_dir would remove {checkpoint}, which this run loads"):
        run_mlm.main([*mlm(tokenizer_dir, tmp_path, "--max_steps", "1"), *evaluate])
    assert checkpoint.is_dir()


# ---- --do_predict alone predicts, or is refused; no card without training -------------------------------------------
def squad_json(with_answers: bool) -> str:
    qas = [
        {"id": f"q{i}", "question": f"where is {answer}"}
        for i, answer in enumerate(["the green forest", "small birds"])
    ]
    for qa in qas if with_answers else []:
        answer = qa["question"].removeprefix("where is ")
        qa["answers"] = [{"text": answer, "answer_start": CONTEXT.index(answer)}]
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]})


@pytest.mark.parametrize("with_answers", [False, True], ids=["questions only", "with answers"])
def test_run_squad_predicts_a_test_file_alone(script_tokenizer, tmp_path, with_answers):
    GMLPForQuestionAnswering(GMLPConfig(vocab_size=120, **SIZES)).save_pretrained(tmp_path / "qa")
    script_tokenizer.save_pretrained(tmp_path / "qa")
    test = write(tmp_path / "test.json", squad_json(with_answers))
    out = tmp_path / "out"
    run_squad.main(
        [
            *f"--model_name_or_path {tmp_path / 'qa'} --test_file {test} --do_predict --output_dir {out}".split(),
            *COMMON,
        ]
    )
    predictions = json.loads((out / "predict_predictions.json").read_text())
    assert sorted(predictions) == ["q0", "q1"] and all(text in CONTEXT for text in predictions.values())
    results = json.loads((out / "predict_results.json").read_text())
    assert ("predict_exact_match" in results) == with_answers and results["predict_samples"] == 2
    assert not (out / "README.md").exists()  # nothing was trained: no card claims it was


def test_run_image_classification_labels_each_test_image(tmp_path):
    sizes = {"image_size": 8, "patch_size": 4, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1}
    config = GMLPVisionConfig(id2label={0: "red", 1: "blue"}, **sizes)
    GMLPForImageClassification(config).save_pretrained(tmp_path / "checkpoint")
    image_processor_for(config).save_pretrained(tmp_path / "checkpoint")
    (tmp_path / "test").mkdir()
    for i, colour in enumerate([(255, 0, 0), (0, 0, 255), (200, 0, 0)]):
        Image.new("RGB", (8, 8), colour).save(tmp_path / "test" / f"{i}.png")
    out = tmp_path / "out"
    run_image_classification.main(
        [
            *f"--model_name_or_path {tmp_path / 'checkpoint'} --test_dir {tmp_path / 'test'} --do_predict".split(),
            *f"--output_dir {out}".split(),
            *COMMON,
        ]
    )
    lines = (out / "predict_results.txt").read_text().splitlines()
    assert lines[0] == "index\timage\tprediction" and len(lines) == 4
    assert sorted(Path(line.split("\t")[1]).name for line in lines[1:]) == ["0.png", "1.png", "2.png"]
    assert {line.split("\t")[2] for line in lines[1:]} <= {"red", "blue"}


def test_run_mlm_refuses_do_predict_and_says_what_to_use(tmp_path):
    with pytest.raises(ValueError, match=r"run_mlm.py has no --do_predict.*--do_eval.*--fill_mask_text"):
        run_mlm.main(["--config_name", "gmlp-tiny", "--output_dir", str(tmp_path / "out"), "--do_predict"])
    assert not (tmp_path / "out").exists()


def test_evaluating_writes_no_model_card(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    scored = csv_file(tmp_path / "selfpred.csv", labelled)
    run_glue.main(glue(checkpoint, tmp_path / "out", "--validation_file", str(scored), "--do_eval"))
    assert (tmp_path / "out" / "eval_results.json").is_file() and not (tmp_path / "out" / "README.md").exists()


# ---- an unlabelled --test_file beside labelled files ----------------------------------------------------------------
def test_an_unlabelled_test_file_is_predicted(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    train = str(csv_file(tmp_path / "train.csv", labelled))
    test = write(tmp_path / "test.csv", "sentence\n" + "".join(f"{text}\n" for text, _ in labelled[:5]))
    args = glue(
        checkpoint, tmp_path / "out", "--train_file", train, "--validation_file", train, "--test_file", str(test)
    )
    run_glue.main([*args, *TRAIN_ONE_STEP, "--do_predict"])
    lines = (tmp_path / "out" / "predict_results_custom.txt").read_text().splitlines()
    assert len(lines) == 6 and {line.split("\t")[1] for line in lines[1:]} <= set(MRPC_LABELS.values())


# ---- the last unclear errors, and choices the user should see -------------------------------------------------------
def glue_scratch(tokenizer_dir, tmp_path, data, overrides=TINY, *extra):
    return tiny_run(
        tmp_path / "out",
        *TRAIN_ONE_STEP,
        *COMMON,
        *extra,
        tokenizer=tokenizer_dir,
        config_overrides=overrides,
        train_file=data,
        max_seq_length=16,
    )


LABELLED = [(line, i % 2) for i, line in enumerate(rotated_lines(8))]
MRPC_TSV = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + "".join(
    f"{i % 2}\t{i}\t{i}\t{line}\t{line}\n" for i, line in enumerate(rotated_lines(4))
)
SCRIPT_ERRORS = {
    # name: (file name, content, --config_overrides, extra flags, the error's message)
    "a model vocabulary smaller than the tokenizer's": (
        "train.csv",
        LABELLED,
        config_overrides(vocab_size=50),
        [],
        r"The tokenizer has 11\d tokens but the model's vocabulary only 50 \(vocab_size\)",
    ),
    "layer_norm_eps=-1": (
        "train.csv",
        LABELLED,
        config_overrides(layer_norm_eps=-1),
        [],
        r"`layer_norm_eps` must be positive",
    ),
    "max_position_embeddings=1": (
        "train.csv",
        LABELLED,
        config_overrides(max_position_embeddings=1),
        [],
        r"`max_position_embeddings` \(the spatial size n\) must be at least 2",
    ),
    "GLUE's MRPC TSV as --train_file": (
        "train.tsv",
        MRPC_TSV,
        TINY,
        [],
        r"It is GLUE's own MRPC file: read it with --task_name mrpc --glue_dir DIR",
    ),
    "--report_to tensorboard without tensorboard": (
        "train.csv",
        LABELLED,
        TINY,
        ["--report_to", "tensorboard"],
        r"--report_to tensorboard: not installed. Install it \(`pip install tensorboard`\)",
    ),
}


@pytest.mark.parametrize("case", sorted(SCRIPT_ERRORS))
def test_run_glue_names_the_problem(case, tokenizer_dir, tmp_path, monkeypatch):
    name, content, overrides, extra, message = SCRIPT_ERRORS[case]
    monkeypatch.setattr("transformers.integrations.integration_utils.is_tensorboard_available", lambda: False)
    data = write(tmp_path / name, content) if isinstance(content, str) else csv_file(tmp_path / name, content)
    with pytest.raises(ValueError, match=message):
        run_glue.main(glue_scratch(tokenizer_dir, tmp_path, data, overrides, *extra))


SCRIPT_LOGS = {
    # name: (script, its arguments from the tokenizer folder and tmp_path, what the log must say)
    "float labels make a regression task": (
        run_glue.main,
        lambda tokenizer_dir, tmp_path: glue_scratch(
            tokenizer_dir,
            tmp_path,
            csv_file(tmp_path / "floats.csv", [(text, f"{label}.0") for text, label in LABELLED]),
        ),
        r"floats.csv: its labels are numbers with decimals \(.*\), so the task is regression",
    ),
    "run_mlm sets vocab_size to the tokenizer's": (
        run_mlm.main,
        lambda tokenizer_dir, tmp_path: mlm(
            tokenizer_dir,
            tmp_path,
            *f"--max_steps 1 --save_strategy no --config_overrides {config_overrides(vocab_size=300)}".split(),
        ),
        r"vocab_size set to the tokenizer's 11\d tokens \(the config had 300\)",
    ),
}


@pytest.mark.parametrize("case", sorted(SCRIPT_LOGS))
def test_a_choice_the_user_should_see_is_logged(case, tokenizer_dir, tmp_path, caplog):
    script, arguments, message = SCRIPT_LOGS[case]
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        script(arguments(tokenizer_dir, tmp_path))
    assert any(re.search(message, record.getMessage()) for record in caplog.records)


TOKENIZER_FILES = {
    "Latin-1 text": ("caf\xe9 au lait\n".encode("latin-1"), r"is not UTF-8 text \(byte 3"),
    "an empty file": (b"", r"is empty"),
    "a blank file": (b"\n  \n\t\n", r"is empty"),
}


@pytest.mark.parametrize("case", sorted(TOKENIZER_FILES))
def test_the_tokenizer_command_names_a_bad_file(case, tmp_path):
    content, message = TOKENIZER_FILES[case]
    text = write(tmp_path / "text.txt", content)
    with pytest.raises(ValueError, match=message) as error:
        tokenizer_command(["--train_files", str(text), "--output_dir", str(tmp_path / "tok"), "--vocab_size", "50"])
    assert str(text) in str(error.value) and not (tmp_path / "tok").exists()


def test_a_blank_corpus_trains_no_tokenizer():
    with pytest.raises(ValueError, match="empty or blank: the tokenizer learned no token but the special ones"):
        train_tokenizer(iter(["", "   "]), vocab_size=50)


# ---- the card's snippet loads the tokenizer without a remote-code prompt, gmlp not installed ------------------------
LOAD_CARD = """
import re, sys
sys.modules["gmlp"] = None  # the package is not installed
exec(re.search(r"```python\\n(.*?)```", open(sys.argv[1]).read(), re.S).group(1))
print(type(model).__name__, type(tokenizer).__name__)
"""


@pytest.mark.e2e
def test_the_cards_snippet_loads_model_and_tokenizer_without_gmlp_and_without_a_prompt(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    train = csv_file(tmp_path / "train.csv", labelled)
    run_glue.main(glue(checkpoint, tmp_path / "classifier", "--train_file", str(train), *TRAIN_ONE_STEP))
    card = str(tmp_path / "classifier" / "README.md")
    result = subprocess.run(
        [sys.executable, "-c", LOAD_CARD, card], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    assert result.stdout.split()[-2:] == ["GMLPForSequenceClassification", "TokenizersBackend"]


# ---- labels and token ids are checked on the CPU, before the device -------------------------------------------------
def test_the_collator_checks_ids_before_the_model_sees_them(script_tokenizer, tmp_path, monkeypatch):
    tokenizer = script_tokenizer
    examples = [{**tokenizer(text), "label": label} for text, label in [("the cat", 1), ("a dog", 5)]]
    collate = CheckedCollator(DataCollatorWithPadding(tokenizer), input_ids=120, labels=2)
    with pytest.raises(
        ValueError, match=r"A batch holds labels 5, outside the model's ids 0..1: labels must be mapped"
    ):
        collate(examples)
    with pytest.raises(ValueError, match=r"holds input_ids \d+, outside the model's ids 0..4: the tokenizer does not"):
        CheckedCollator(DataCollatorWithPadding(tokenizer), input_ids=5)(examples)
    ignored = [{"pixel_values": torch.zeros(3), "labels": label} for label in (-100, 1)]
    assert CheckedCollator(default_data_collator, labels=2)(ignored)["labels"].tolist() == [-100, 1]
    # Where the model does not check (an accelerator: no synchronisation per step), the Trainer still stops here.
    monkeypatch.setattr(modeling_gmlp, "check_labels", lambda *args, **kwargs: None)
    model = GMLPForSequenceClassification(GMLPConfig(vocab_size=120, **SIZES))
    calls = []
    model.register_forward_pre_hook(lambda *args: calls.append(args))
    arguments = TrainingArguments(str(tmp_path / "out"), report_to="none", max_steps=1, per_device_train_batch_size=2)
    trainer = Trainer(model=model, args=arguments, train_dataset=examples, data_collator=collate)
    with pytest.raises(ValueError, match="A batch holds labels 5"):
        trainer.train()
    assert calls == []


# ---- a name that resolves nowhere -----------------------------------------------------------------------------------
UNRESOLVED = {
    # name: (script, arguments, what the message must say)
    "a misspelt preset": (
        run_mlm.main,
        ["--config_name", "amlp-smal", "--do_train"],
        r"--config_name 'amlp-smal' is neither a preset nor a directory, and the Hub could not be reached.*Presets: gmlp-",
    ),
    "a checkpoint nowhere": (
        run_glue.main,
        ["--model_name_or_path", "nowhere/model", "--task_name", "sst2", "--do_eval"],
        r"--model_name_or_path 'nowhere/model' is not a directory, and the Hub could not be reached",
    ),
    "a preset as a checkpoint": (
        run_squad.main,
        ["--model_name_or_path", "gmlp-tiny", "--dataset_name", "rajpurkar/squad", "--do_train"],
        r"--model_name_or_path gmlp-tiny is a preset, not a checkpoint: pass it as --config_name",
    ),
    "a tokenizer nowhere": (
        run_glue.main,
        [
            "--config_name",
            "gmlp-tiny",
            "--tokenizer_name",
            "nowhere-tokenizer",
            "--train_file",
            "{train}",
            "--do_train",
        ],
        r"--tokenizer_name 'nowhere-tokenizer' is not a directory, and the Hub could not be reached",
    ),
    "a misspelt vision preset": (
        run_image_classification.main,
        ["--config_name", "gmlp-s61", "--do_train"],
        r"--config_name 'gmlp-s61' is neither a preset nor a directory, and the Hub could not be reached.*'gmlp-s16'\?",
    ),
}


@pytest.mark.parametrize("case", sorted(UNRESOLVED))
def test_a_name_that_resolves_nowhere_lists_the_presets_and_says_the_hub_could_not_be_reached(
    case, tmp_path, monkeypatch
):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # as CI runs; no lookup leaves the machine
    script, arguments, message = UNRESOLVED[case]
    train = csv_file(tmp_path / "train.csv", LABELLED)
    arguments = [argument.format(train=train) for argument in arguments]
    with pytest.raises(ValueError, match=message):
        script([*arguments, "--output_dir", str(tmp_path / "out"), "--report_to", "none"])
