"""What run_glue.py makes of a user's own data: a checkpoint's label map is used wherever labels are mapped (scoring,
GLUE's order, fine-tuning), labels it lacks are named or, with --ignore_mismatched_sizes, get a new head; lists of
labels train a multi-label classifier, decimals a regression; the text columns are chosen among the file's text (or
named) and logged; an unlabelled --test_file is predicted."""

import json
import logging
import re

import pytest
import torch
from helpers import SCRIPT_SIZES, rotated_lines, write
from script_runs import COMMON, LABELLED, csv_file, glue_run, jsonl_file
from transformers import AutoTokenizer

from gmlp import GMLPConfig, GMLPForSequenceClassification
from gmlp.tasks import glue, run_glue
from gmlp.tasks.errors import ScriptError

MRPC_LABELS = {0: "not_equivalent", 1: "equivalent"}  # GLUE's order, which is not the alphabetical one
TRAIN_ONE_STEP = ["--do_train", "--max_steps", "1", "--save_strategy", "no"]


@pytest.fixture(scope="module")
def mrpc_checkpoint(tmp_path_factory, script_tokenizer):
    """A classifier with MRPC's label map, and 20 sentences labelled with its own predictions (both labels)."""
    path = tmp_path_factory.mktemp("mrpc")
    torch.manual_seed(0)
    config = GMLPConfig(
        vocab_size=120, id2label=MRPC_LABELS, hidden_dropout_prob=0.0, spatial_init_eps=16.0, **SCRIPT_SIZES
    )
    model = GMLPForSequenceClassification(config).eval()
    inputs = script_tokenizer(rotated_lines(20), padding=True, return_tensors="pt")
    with torch.no_grad():
        margins = model(**inputs).logits.diff(dim=-1).squeeze(-1)
        model.classifier.out_proj.bias[1] -= margins.median()  # about half the sentences on each side
        margins -= margins.median()
    # Sentences too near the boundary could change sides with the batch's padding, by rounding.
    labelled = [(text, MRPC_LABELS[int(m > 0)]) for text, m in zip(rotated_lines(20), margins) if abs(m) > 1e-4]
    model.save_pretrained(path)
    script_tokenizer.save_pretrained(path)
    assert {label for _, label in labelled} == set(MRPC_LABELS.values())
    return path, labelled


def from_checkpoint(checkpoint, out, *extra):
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
    metrics = run_glue.run(
        from_checkpoint(checkpoint, tmp_path / "out", "--validation_file", str(scored), "--do_eval")
    )
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
    args = from_checkpoint(
        tmp_path / "sst2", tmp_path / "out", "--task_name", "sst2", "--glue_dir", str(tmp_path / "glue")
    )
    assert run_glue.run([*args, "--do_eval"])["eval_accuracy"] == 1.0


def test_fine_tuning_on_own_files_keeps_the_checkpoints_label_ids(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    train = csv_file(tmp_path / "train.csv", labelled)
    run_glue.run(from_checkpoint(checkpoint, tmp_path / "out", "--train_file", str(train), *TRAIN_ONE_STEP))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["id2label"] == {"0": "not_equivalent", "1": "equivalent"}


def test_labels_the_checkpoint_does_not_know_are_named(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    data = csv_file(tmp_path / "yesno.csv", [(text, "yes" if i % 2 else "no") for i, (text, _) in enumerate(labelled)])
    message = r"label\(s\) 'no', 'yes' are not labels of the model .*--ignore_mismatched_sizes"
    with pytest.raises(ScriptError, match=message):
        run_glue.run(from_checkpoint(checkpoint, tmp_path / "out", "--train_file", str(data), "--do_train"))


def test_ignore_mismatched_sizes_trains_a_new_head_with_the_datas_labels(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    data = str(csv_file(tmp_path / "abc.csv", [(text, "abc"[i % 3]) for i, (text, _) in enumerate(labelled)]))
    args = from_checkpoint(checkpoint, tmp_path / "out", "--train_file", data, "--validation_file", data, "--do_eval")
    run_glue.run([*args, *TRAIN_ONE_STEP, "--ignore_mismatched_sizes"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["id2label"] == {"0": "a", "1": "b", "2": "c"}
    assert GMLPForSequenceClassification.from_pretrained(tmp_path / "out").classifier.out_proj.weight.shape[0] == 3


def test_an_unlabelled_test_file_is_predicted(mrpc_checkpoint, tmp_path):
    checkpoint, labelled = mrpc_checkpoint
    train = str(csv_file(tmp_path / "train.csv", labelled))
    test = write(tmp_path / "test.csv", "sentence\n" + "".join(f"{text}\n" for text, _ in labelled[:5]))
    args = from_checkpoint(
        checkpoint, tmp_path / "out", "--train_file", train, "--validation_file", train, "--test_file", str(test)
    )
    run_glue.run([*args, *TRAIN_ONE_STEP, "--do_predict"])
    lines = (tmp_path / "out" / "predict_results_custom.txt").read_text().splitlines()
    assert len(lines) == 6 and {line.split("\t")[1] for line in lines[1:]} <= set(MRPC_LABELS.values())


# ---- lists of labels: a multi-label classifier; decimals: a regression ------------------------------------------
TOPICS = [["animals"], ["animals", "music"], [], ["music"], ["fire", "music"], ["animals", "fire"]] * 2


def test_lists_of_labels_train_a_multi_label_classifier(tokenizer_dir, tmp_path, caplog):
    rows = [{"text": line, "label": labels} for line, labels in zip(rotated_lines(12), TOPICS)]
    data = jsonl_file(tmp_path / "train.jsonl", rows)
    test = jsonl_file(tmp_path / "test.jsonl", [{"text": row["text"]} for row in rows[:4]])
    arguments = glue_run(tokenizer_dir, tmp_path, "--do_eval", "--do_predict", train_file=data, validation_file=data)
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        metrics = run_glue.run([*arguments, "--test_file", str(test)])
    assert "so the task is multi-label classification: each example has any number of the 3 labels" in caplog.text
    out = tmp_path / "out"
    config = json.loads((out / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    assert config["id2label"] == {"0": "animals", "1": "fire", "2": "music"}
    # The reported loss is the binary cross-entropy of the saved model on the evaluation file, its scores those of
    # the positive logits.
    model = GMLPForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)

    def logits_of(texts):  # as the run reads them: cut to --max_seq_length
        inputs = tokenizer(texts, truncation=True, max_length=16, return_tensors="pt")
        with torch.no_grad():
            return model(**inputs).logits

    names = ("animals", "fire", "music")
    targets = torch.tensor([[float(name in labels) for name in names] for labels in TOPICS])
    logits = logits_of([row["text"] for row in rows])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
    assert metrics["eval_loss"] == pytest.approx(bce.item(), rel=1e-5)
    assert metrics["eval_accuracy"] == pytest.approx(((logits > 0) == targets.bool()).all(dim=1).float().mean().item())
    lines = (out / "predict_results_custom.txt").read_text().splitlines()[1:]
    predicted = logits_of([row["text"] for row in rows[:4]]) > 0
    expected = [",".join(name for name, positive in zip(names, row) if positive) for row in predicted.tolist()]
    assert [line.split("\t", 1)[1] for line in lines] == expected


def test_labels_with_decimals_make_a_regression_task_and_say_so(tokenizer_dir, tmp_path, caplog):
    data = csv_file(tmp_path / "floats.csv", [(text, f"{label}.0") for text, label in LABELLED])
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_glue.run(glue_run(tokenizer_dir, tmp_path, train_file=data, max_steps=1))
    assert re.search(
        r"floats.csv: its labels are numbers with decimals \(.*\), so the task is regression", caplog.text
    )
    assert json.loads((tmp_path / "out" / "config.json").read_text())["problem_type"] == "regression"


# ---- the text columns of a custom file --------------------------------------------------------------------------
PASSAGES = [
    {"id": i, "number": i, "question": f"what is {line.split()[0]}", "passage": line, "source": "news", "label": i % 2}
    for i, line in enumerate(rotated_lines(8))
]
TEXT_COLUMNS = {
    # name: (csv header, flags, the columns read, what the log must say)
    "a numeric id and a third text column are left out": (
        "id,question,passage,source,label",
        [],
        ("question", "passage"),
        r"reading the text from question, passage; not from id \(an id\), source \(a further text column\)\. Pass --text_column_names",
    ),
    "the columns named with --text_columns": (
        "id,question,passage,source,label",
        ["--text_columns", "passage,source"],
        ("passage", "source"),
        None,
    ),
    "numbers as the first column, not named id": (
        "number,passage,label",
        [],
        ("passage",),
        r"reading the text from passage; not from number \(int64 values\)",
    ),
}


@pytest.mark.parametrize("case", sorted(TEXT_COLUMNS))
def test_text_columns_are_text_and_the_choice_is_logged(case, tokenizer_dir, tmp_path, caplog, monkeypatch):
    header, extra, expected, logged = TEXT_COLUMNS[case]
    data = csv_file(
        tmp_path / "passages.csv", [[row[field] for field in header.split(",")] for row in PASSAGES], header
    )
    read, choose = [], glue.choose_text_columns
    monkeypatch.setattr(glue, "choose_text_columns", lambda *args: read.append(choose(*args)) or read[-1])
    with caplog.at_level(logging.INFO, logger="gmlp"):
        run_glue.run(glue_run(tokenizer_dir, tmp_path, *extra, train_file=data, validation_file=data))
    assert read == [expected]
    if logged:
        assert any(re.search(logged, r.getMessage()) and r.levelno == logging.WARNING for r in caplog.records)
