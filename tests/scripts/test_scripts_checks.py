"""What a demanding new user meets with the scripts, beside tests/test_script_cases.py: arguments that could only fail
after training are refused before it; the text columns of a custom file are chosen among its text (or named) and
logged; SQuAD 2.0 data is refused without --version_2_with_negative for scoring too; lists of labels train a
multi-label classifier; a full disk while saving says so and leaves no partial checkpoint; flags and files that
Transformers 5 or this package name differently get a message with the fix. Table-driven where the cases share a
shape, on tiny fixtures."""

import json
import logging
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import CONTEXT, SCRIPT_SIZES, config_overrides, flags, rotated_lines, tiny_run, write
from transformers import AutoTokenizer, TrainerCallback

import run_glue
import run_image_classification
import run_mlm
import run_squad
from gmlp import GMLPConfig, GMLPForImageClassification, GMLPForSequenceClassification, GMLPVisionConfig
from gmlp.convert_timm import main as convert_timm
from gmlp.tasks import checkpoints, glue
from gmlp.tasks import run_mlm as mlm_script

COMMON = ["--report_to", "none", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2"]
# Evaluating and saving at every step: the first evaluation is after the first training step.
EVERY_STEP = ["--eval_strategy", "steps", "--eval_steps", "1", "--save_strategy", "steps", "--save_steps", "1"]
LABELLED = [(line, i % 2) for i, line in enumerate(rotated_lines(8))]


def csv_file(path: Path, rows, header: str = "sentence,label") -> Path:
    return write(path, header + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))


def jsonl_file(path: Path, rows: list[dict]) -> Path:
    return write(path, "".join(json.dumps(row) + "\n" for row in rows))


def squad_file(path: Path, unanswerable: int = 1, answered: bool = True) -> Path:
    """A SQuAD file on helpers.CONTEXT: two answerable questions (without answers unless `answered`) and
    `unanswerable` SQuAD 2.0 ones."""
    qas = []
    for i, answer in enumerate(["the green forest", "small birds"]):
        given = [{"text": answer, "answer_start": CONTEXT.index(answer)}] if answered else []
        qas.append({"id": f"q{i}", "question": f"where is {answer}", "answers": given})
    qas += [
        {"id": f"none{i}", "question": "what is the sky", "answers": [], "is_impossible": True}
        for i in range(unanswerable)
    ]
    paragraphs = [{"context": CONTEXT, "qas": qas}]
    return write(path, json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]}))


def glue_run(tokenizer_dir, tmp_path, *extra, **options):
    """A tiny run_glue.py run from scratch on a csv of 8 labelled sentences (training and evaluation file)."""
    data = csv_file(tmp_path / "train.csv", LABELLED)
    defaults = {"train_file": data, "validation_file": data, "do_train": True, "max_steps": 2, "max_seq_length": 16}
    return tiny_run(tmp_path / "out", *COMMON, *extra, tokenizer=tokenizer_dir, **(defaults | options))


def mlm_run(tokenizer_dir, tmp_path, *extra, **options):
    """A tiny run_mlm.py run from scratch on 40 lines (5% of them held out for an evaluation)."""
    train = write(tmp_path / "train.txt", "\n".join(rotated_lines(40)) + "\n")
    defaults = {"train_file": train, "do_train": True, "max_steps": 2, "max_seq_length": 16}
    return tiny_run(
        tmp_path / "out",
        *COMMON,
        *extra,
        tokenizer=tokenizer_dir,
        overrides={"vocab_size": 120},
        **(defaults | options),
    )


def squad_run(tokenizer_dir, tmp_path, *extra, **options):
    """A tiny run_squad.py run from scratch, training on answerable questions."""
    train = squad_file(tmp_path / "train.json", unanswerable=0)
    defaults = {"train_file": train, "do_train": True, "max_steps": 1}
    return tiny_run(
        tmp_path / "out",
        *COMMON,
        *extra,
        tokenizer=tokenizer_dir,
        overrides={"vocab_size": 120},
        **(defaults | options),
    )


def long_questions_file(path: Path) -> Path:
    """`squad_file` without unanswerable questions, each question 15 tokens longer."""
    return write(path, squad_file(path, unanswerable=0).read_text().replace("where is", "where " * 15 + "is"))


def image_run(tmp_path, *extra):
    """A tiny run_image_classification.py run on scikit-learn's digits."""
    sizes = "num_hidden_layers=1,hidden_size=16,intermediate_size=32,image_size=8,patch_size=4"
    options = {"config_overrides": sizes, "do_train": True, "max_steps": 2, "max_train_samples": 8}
    return tiny_run(tmp_path / "out", *COMMON, *extra, max_eval_samples=8, **options)


def trained_nothing(output_dir: Path) -> bool:
    """Whether a run saved neither a checkpoint nor a model: it stopped before training, or before its first save."""
    return not any(output_dir.glob("checkpoint-*")) and not (output_dir / "model.safetensors").exists()


# ---- arguments that could only fail after training are refused before it -------------------------------------------
LATE_FAILURES = {
    # name: (script, its arguments from the tokenizer folder and tmp_path, the error's message)
    "run_glue --metric_for_best_model acc": (
        run_glue.main,
        lambda tok, tmp: glue_run(tok, tmp, *EVERY_STEP, "--load_best_model_at_end", "--metric_for_best_model", "acc"),
        (
            r"--metric_for_best_model acc: run_glue.py's evaluation reports loss, accuracy, f1 .*Did you mean "
            r"--metric_for_best_model accuracy\?"
        ),
    ),
    "run_mlm --metric_for_best_model top5": (
        run_mlm.main,
        lambda tok, tmp: mlm_run(tok, tmp, *EVERY_STEP, "--metric_for_best_model", "top5"),
        r"run_mlm.py's evaluation reports loss, accuracy, perplexity",
    ),
    "run_image_classification --metric_for_best_model f1": (
        run_image_classification.main,
        lambda tok, tmp: image_run(tmp, *EVERY_STEP, "--metric_for_best_model", "f1"),
        r"run_image_classification.py's evaluation reports loss, accuracy \(each also as eval_<name>\), not f1",
    ),
    "run_squad --eval_strategy steps": (
        run_squad.main,
        lambda tok, tmp: squad_run(tok, tmp, *EVERY_STEP),
        r"--eval_strategy steps: run_squad.py scores its answers .* after training",
    ),
    "run_glue --do_predict without a test file": (
        run_glue.main,
        lambda tok, tmp: glue_run(tok, tmp, "--do_predict"),
        r"--do_predict needs test data; the data has \['train', 'validation'\]",
    ),
    "run_glue --max_eval_samples 0": (
        run_glue.main,
        lambda tok, tmp: glue_run(tok, tmp, "--do_eval", max_eval_samples=0),
        r"--do_eval: --max_eval_samples 0 keeps no example; pass at least 1",
    ),
    "run_glue --prediction_loss_only": (
        run_glue.main,
        lambda tok, tmp: glue_run(tok, tmp, "--do_eval", "--prediction_loss_only"),
        r"--prediction_loss_only: run_glue.py computes its evaluation metrics",
    ),
    "run_mlm --push_to_hub offline": (
        run_mlm.main,
        lambda tok, tmp: mlm_run(tok, tmp, "--push_to_hub"),
        r"--push_to_hub needs the Hub, but this run is offline \(HF_HUB_OFFLINE is set\)",
    ),
    "run_squad --doc_stride too large for the evaluation questions": (
        run_squad.main,
        lambda tok, tmp: squad_run(
            tok,
            tmp,
            "--do_eval",
            validation_file=long_questions_file(tmp / "dev.json"),
            max_seq_length=24,
            doc_stride=8,
        ),
        r"A question of \d+ tokens leaves -?\d+ context tokens per feature with --max_seq_length 24",
    ),
}


@pytest.mark.parametrize("case", sorted(LATE_FAILURES))
def test_an_argument_that_would_fail_after_training_is_refused_before_it(case, tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # as CI runs
    script, arguments, message = LATE_FAILURES[case]
    with pytest.raises(ValueError, match=message):
        script(arguments(tokenizer_dir, tmp_path))
    assert trained_nothing(tmp_path / "out")


def test_perplexity_chooses_the_best_checkpoint_lowest_first(tokenizer_dir, tmp_path):
    run_mlm.main(
        mlm_run(
            tokenizer_dir,
            tmp_path,
            *EVERY_STEP,
            *("--load_best_model_at_end", "--metric_for_best_model", "perplexity", "--learning_rate", "0.05"),
            max_steps=4,
            validation_split_percentage=20,
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


# ---- the text columns of a custom file --------------------------------------------------------------------------
PASSAGES = [
    {"id": i, "number": i, "question": f"what is {line.split()[0]}", "passage": line, "source": "news", "label": i % 2}
    for i, line in enumerate(rotated_lines(8))
]
TEXT_COLUMNS = {
    # name: (csv header, flags, the columns read (or the error), what the log must say)
    "a numeric id and a third text column are left out": (
        "id,question,passage,source,label",
        [],
        ("question", "passage"),
        (
            r"reading the text from question, passage; not from id \(an id\), source \(a further text column\)\. "
            r"Pass --text_column_names"
        ),
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
    "a named column that holds numbers": (
        "id,question,passage,source,label",
        ["--text_column_names", "id,passage"],
        r"--text_column_names id,passage names the column 'id', which holds int64 values, not text",
        None,
    ),
    "a named column that does not exist": (
        "id,question,passage,source,label",
        ["--text_columns", "question,text"],
        r"has no column\(s\) \['text'\] \(its columns: \['id', 'question', 'passage', 'source', 'label'\]\)",
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(TEXT_COLUMNS))
def test_text_columns_are_text_and_the_choice_is_logged(case, tokenizer_dir, tmp_path, caplog, monkeypatch):
    header, extra, expected, logged = TEXT_COLUMNS[case]
    rows = [[row[field] for field in header.split(",")] for row in PASSAGES]
    data = csv_file(tmp_path / "passages.csv", rows, header)
    read = []
    choose = glue.choose_text_columns
    monkeypatch.setattr(glue, "choose_text_columns", lambda *args: read.append(choose(*args)) or read[-1])
    arguments = glue_run(tokenizer_dir, tmp_path, *extra, train_file=data, validation_file=data)
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            run_glue.main(arguments)
        return
    with caplog.at_level(logging.INFO, logger="gmlp"):
        run_glue.main(arguments)
    assert read == [expected]
    if logged:
        assert any(re.search(logged, r.getMessage()) and r.levelno == logging.WARNING for r in caplog.records)


# ---- SQuAD 2.0 data without --version_2_with_negative ---------------------------------------------------------------
SQUAD_VERSIONS = {
    # name: (flag, the file's unanswerable questions, whether the others have answers, the error's message)
    "evaluating SQuAD 2.0 data": (
        "--do_eval",
        2,
        True,
        (
            r"dev.json: 2 of 4 questions have no answer \(none0, none1\), as SQuAD 2.0's unanswerable ones. Pass "
            r"--version_2_with_negative"
        ),
    ),
    "predicting SQuAD 2.0 data": ("--do_predict", 1, True, r"dev.json: 1 of 3 questions have no answer \(none0\)"),
    "evaluating questions without answers": (
        "--do_eval",
        0,
        False,
        r"none of its 2 questions has an answer, so --do_eval has nothing to score against",
    ),
}


@pytest.mark.parametrize("case", sorted(SQUAD_VERSIONS))
def test_squad_2_data_is_refused_without_version_2_with_negative(case, tokenizer_dir, tmp_path):
    flag, unanswerable, answered, message = SQUAD_VERSIONS[case]
    data = squad_file(tmp_path / "dev.json", unanswerable, answered)
    split = "--validation_file" if flag == "--do_eval" else "--test_file"
    with pytest.raises(ValueError, match=message):
        run_squad.main(squad_run(tokenizer_dir, tmp_path, split, str(data), flag))
    assert trained_nothing(tmp_path / "out")


# ---- multi-label data: lists of labels in JSON lines -----------------------------------------------------------------
TOPICS = [["animals"], ["animals", "music"], [], ["music"], ["fire", "music"], ["animals", "fire"]] * 2


def test_lists_of_labels_train_a_multi_label_classifier(tokenizer_dir, tmp_path, caplog):
    rows = [{"text": line, "label": labels} for line, labels in zip(rotated_lines(12), TOPICS)]
    data = jsonl_file(tmp_path / "train.jsonl", rows)
    test = jsonl_file(tmp_path / "test.jsonl", [{"text": row["text"]} for row in rows[:4]])
    arguments = glue_run(tokenizer_dir, tmp_path, "--do_eval", "--do_predict", train_file=data, validation_file=data)
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        metrics = run_glue.main([*arguments, "--test_file", str(test)])
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

    targets = torch.tensor([[float(name in labels) for name in ("animals", "fire", "music")] for labels in TOPICS])
    logits = logits_of([row["text"] for row in rows])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
    assert metrics["eval_loss"] == pytest.approx(bce.item(), rel=1e-5)
    predicted = logits > 0
    assert metrics["eval_accuracy"] == pytest.approx((predicted == targets.bool()).all(dim=1).float().mean().item())
    lines = (out / "predict_results_custom.txt").read_text().splitlines()[1:]
    names = ("animals", "fire", "music")
    predicted = logits_of([row["text"] for row in rows[:4]]) > 0
    expected = [",".join(name for name, positive in zip(names, row) if positive) for row in predicted.tolist()]
    assert [line.split("\t", 1)[1] for line in lines] == expected


MULTI_LABEL_ERRORS = {
    # name: (the training rows' labels, the validation rows' labels, extra flags, the error's message)
    "an unknown label in a list": (
        TOPICS,
        [["animals"], ["dance"]],
        [],
        r"dev.jsonl, example 1: label 'dance' is not a custom label; the labels are 0 = 'animals', 1 = 'fire'",
    ),
    "single labels beside lists": (
        TOPICS,
        ["animals", "music"],
        [],
        r"dev.jsonl: its labels are single values, but the training data's are lists \(multi-label\)",
    ),
    "lists for a GLUE task": (
        [["0"], ["1"]] * 6,
        [["0"], ["1"]],
        ["--task_name", "sst2"],
        r"its labels are lists \(several per example\), but sst2 has one label per example: drop --task_name",
    ),
}


@pytest.mark.parametrize("case", sorted(MULTI_LABEL_ERRORS))
def test_multi_label_data_that_does_not_fit_is_named(case, tokenizer_dir, tmp_path):
    train_labels, dev_labels, extra, message = MULTI_LABEL_ERRORS[case]
    key = "sentence" if extra else "text"
    train = jsonl_file(
        tmp_path / "train.jsonl", [{key: t, "label": l} for t, l in zip(rotated_lines(12), train_labels)]
    )
    dev = jsonl_file(tmp_path / "dev.jsonl", [{key: t, "label": l} for t, l in zip(rotated_lines(2), dev_labels)])
    with pytest.raises(ValueError, match=message):
        run_glue.main(glue_run(tokenizer_dir, tmp_path, *extra, "--do_eval", train_file=train, validation_file=dev))
    assert trained_nothing(tmp_path / "out")


# ---- a full disk while saving a checkpoint ------------------------------------------------------------------------
class FullDiskAt(TrainerCallback):
    """Makes `name` of the checkpoint that `step` saves a link to /dev/full, where every write fails with "no space
    left on device" (torch reports it as its own RuntimeError, Python as OSError ENOSPC)."""

    def __init__(self, step: int, name: str):
        self.step, self.name = step, name

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            folder = Path(args.output_dir) / f"checkpoint-{self.step}"
            folder.mkdir(parents=True)
            (folder / self.name).symlink_to("/dev/full")


FULL_DISK = {
    # name: (the file written to the full disk, free space the filesystem reports, or None for the real figure)
    "torch's optimizer state": ("optimizer.pt", 0),
    "the run's settings (Python's OSError)": (".run_settings.json.partial", None),  # renamed once written
}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux) to fail writes")
@pytest.mark.parametrize("case", sorted(FULL_DISK))
def test_a_full_disk_while_saving_says_so_and_removes_the_partial_checkpoint(
    case, tokenizer_dir, tmp_path, monkeypatch
):
    name, free = FULL_DISK[case]
    if free is not None:  # the test's filesystem is not full: it reports that it is
        total = shutil.disk_usage(tmp_path).total
        usage = SimpleNamespace(total=total, used=total - free, free=free)
        monkeypatch.setattr(checkpoints.shutil, "disk_usage", lambda path: usage)
    monkeypatch.setattr(mlm_script, "Trainer", trainer_with_callback(FullDiskAt(2, name)))
    arguments = mlm_run(tokenizer_dir, tmp_path, "--save_strategy", "steps", "--save_steps", "1", max_steps=3)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="No space left on device while saving") as error:
        run_mlm.main(arguments)
    message = str(error.value)
    assert f"{out / 'checkpoint-2'}: a checkpoint needs about " in message
    needed = float(re.search(r"needs about ([\d.,]+) MB", message).group(1))
    assert needed == pytest.approx(checkpoints.folder_size(out / "checkpoint-1") / 2**20, abs=0.051)
    assert (
        f"The partial checkpoint-2 was removed. --resume_from_checkpoint {out} continues from checkpoint-1." in message
    )
    assert [path.name for path in checkpoints.checkpoint_folders(out)] == ["checkpoint-1"]
    assert checkpoints.checkpoint_problem(out / "checkpoint-1") is None
    monkeypatch.undo()
    run_mlm.main([*arguments, "--resume_from_checkpoint", str(out)])
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3


def trainer_with_callback(callback):
    """The Trainer class, its instances made with `callback` too."""
    from transformers import Trainer

    class WithCallback(Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, callbacks=[callback], **kwargs)

    return WithCallback


# ---- unclear errors a new user meets --------------------------------------------------------------------------------
def an_arguments_file(tok, tmp, values: dict) -> Path:
    return write(tmp / "args.json", json.dumps(values))


UNCLEAR = {
    # name: (script, its arguments from the tokenizer folder and tmp_path, the error's message)
    "--evaluation_strategy (Transformers 4's name)": (
        run_glue.main,
        lambda tok, tmp: glue_run(tok, tmp, "--evaluation_strategy", "steps"),
        r"Unknown command-line arguments: --evaluation_strategy: renamed --eval_strategy\. `--help` lists",
    ),
    "--no_cuda and --overwrite_cache (upstream's flags)": (
        run_mlm.main,
        lambda tok, tmp: mlm_run(tok, tmp, "--no_cuda", "--overwrite_cache"),
        r"--no_cuda: renamed --use_cpu; --overwrite_cache: not an option here",
    ),
    "a misspelt flag": (
        run_glue.main,
        lambda tok, tmp: glue_run(tok, tmp, "--learnig_rate", "1e-3"),
        r"--learnig_rate: no such option; did you mean --learning_rate\?",
    ),
    "an arguments file after a flag": (
        run_glue.main,
        lambda tok, tmp: ["--do_train", "yes", str(an_arguments_file(tok, tmp, {}))],
        r"args.json follow\(s\) no option \(a .json file of arguments must come first\)",
    ),
    "an unknown key in the arguments file": (
        run_glue.main,
        lambda tok, tmp: [str(an_arguments_file(tok, tmp, {"output_dir": str(tmp / "out"), "text_columns": "a"}))],
        r"args.json: --text_columns: no such option; did you mean --text_column_names\?",
    ),
    "a Hub dataset offline": (
        run_glue.main,
        lambda tok, tmp: tiny_run(
            tmp / "out", tokenizer=tok, task_name="sst2", dataset_name="nowhere/glue", do_eval=True
        ),
        (
            r"--dataset_name nowhere/glue: not a folder saved by `save_to_disk`, not in the datasets cache, and the "
            r"Hub cannot be reached \(offline\)"
        ),
    ),
    "--validation_split_percentage 0": (
        run_mlm.main,
        lambda tok, tmp: mlm_run(tok, tmp, "--do_eval", validation_split_percentage=0),
        r"--validation_split_percentage 0: the share of the training text held out for evaluation is between 1 and 99",
    ),
}


@pytest.mark.parametrize("case", sorted(UNCLEAR))
def test_an_unclear_error_names_the_problem_and_the_fix(case, tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)
    script, arguments, message = UNCLEAR[case]
    with pytest.raises(ValueError, match=message):
        script(arguments(tokenizer_dir, tmp_path))
    assert trained_nothing(tmp_path / "out")


def test_an_arguments_file_takes_flags_that_override_it(tokenizer_dir, tmp_path):
    values = {
        "config_name": "gmlp-tiny",
        "config_overrides": config_overrides(),
        "tokenizer_name": tokenizer_dir,
        "train_file": str(csv_file(tmp_path / "train.csv", LABELLED)),
        "max_seq_length": 16,
        "do_train": True,
        "output_dir": str(tmp_path / "out"),
        "report_to": "none",
        "save_strategy": "steps",
        "save_steps": 1,
        "max_steps": 1,
        "learning_rate": 1e-3,
        "per_device_train_batch_size": 2,
    }
    file = write(tmp_path / "args.json", json.dumps(values))
    run_glue.main([str(file), "--max_steps", "2"])
    assert json.loads((tmp_path / "out" / "trainer_state.json").read_text())["global_step"] == 2  # the flag's
    settings = json.loads((tmp_path / "out" / "checkpoint-2" / "run_settings.json").read_text())
    assert settings["learning_rate"] == 1e-3 and settings["per_device_train_batch_size"] == 2  # the file's


def test_a_head_of_another_size_is_named_with_the_fix(tokenizer_dir, tmp_path):
    """A checkpoint whose classifier has two unnamed labels (LABEL_0, LABEL_1), fine-tuned on data of three."""
    checkpoint = tmp_path / "two"
    GMLPForSequenceClassification(GMLPConfig(vocab_size=120, num_labels=2, **SCRIPT_SIZES)).save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(checkpoint)
    data = csv_file(tmp_path / "abc.csv", [(text, "abc"[i % 3]) for i, (text, _) in enumerate(LABELLED)])
    arguments = [
        *flags(model_name_or_path=checkpoint, output_dir=tmp_path / "out", train_file=data, max_seq_length=16),
        *flags(do_train=True, max_steps=1, save_strategy="no"),
        *COMMON,
    ]
    message = (
        r"--model_name_or_path .*two: its weights .*classifier.out_proj.weight \(2, 32\) \(this run: \(3, 32\)\).* "
        r"have other shapes than this run's model; the data has 3 labels. Pass --ignore_mismatched_sizes"
    )
    with pytest.raises(ValueError, match=message):
        run_glue.main(arguments)
    run_glue.main([*arguments, "--ignore_mismatched_sizes"])
    assert GMLPForSequenceClassification.from_pretrained(tmp_path / "out").config.num_labels == 3


CONVERTER = {
    # name: (its arguments from tmp_path, the message it exits with)
    "a checkpoint that does not exist": (
        ["--checkpoint", "{tmp}/missing.pth"],
        r"--checkpoint .*missing.pth: no such file",
    ),
    "a file torch did not write": (["--checkpoint", "{tmp}/notes.txt"], r"notes.txt is no file of torch.save"),
    "a whole pickled model": (["--checkpoint", "{tmp}/whole.pth"], r"whole.pth holds objects besides tensors"),
    "another model's state dict": (
        ["--checkpoint", "{tmp}/linear.pth"],
        r"linear.pth: Not a timm gMLP classifier state dict: it has no stem.proj.weight",
    ),
    "--timm_model, the scripts' spelling, of a model that is no gMLP": (
        ["--timm_model", "resnet50"],
        r"--timm-model resnet50: only timm's gMLPs convert \(gmlp_ti16_224, gmlp_s16_224, gmlp_b16_224\)",
    ),
}


@pytest.mark.parametrize("case", sorted(CONVERTER))
def test_the_timm_converter_names_the_problem(case, tmp_path):
    arguments, message = CONVERTER[case]
    write(tmp_path / "notes.txt", "not a checkpoint\n")
    torch.save(torch.nn.Linear(2, 2), tmp_path / "whole.pth")
    torch.save(torch.nn.Linear(2, 2).state_dict(), tmp_path / "linear.pth")
    with pytest.raises(SystemExit, match=message):
        convert_timm([*(a.format(tmp=tmp_path) for a in arguments), "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


# Our parameter names -> timm's: the inverse of gmlp.convert_timm's renaming.
TIMM_NAMES = [
    (r"gmlp\.embeddings\.projection\.", "stem.proj."),
    (r"gmlp\.encoder\.layer\.(\d+)\.norm\.", r"blocks.\1.norm."),
    (r"gmlp\.encoder\.layer\.(\d+)\.channel_proj_in\.", r"blocks.\1.mlp_channels.fc1."),
    (r"gmlp\.encoder\.layer\.(\d+)\.sgu\.gate_norm\.", r"blocks.\1.mlp_channels.gate.norm."),
    (r"gmlp\.encoder\.layer\.(\d+)\.sgu\.spatial_proj\.", r"blocks.\1.mlp_channels.gate.proj."),
    (r"gmlp\.encoder\.layer\.(\d+)\.channel_proj_out\.", r"blocks.\1.mlp_channels.fc2."),
    (r"gmlp\.final_norm\.", "norm."),
    (r"classifier\.", "head."),
]


def test_the_timm_converter_takes_the_scripts_spelling_of_its_options(tmp_path):
    sizes = {"image_size": 8, "patch_size": 4, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2}
    torch.manual_seed(0)
    model = GMLPForImageClassification(
        GMLPVisionConfig(num_labels=3, layer_norm_eps=1e-6, spatial_init_eps=16.0, **sizes)
    )
    timm_state = {}
    for name, tensor in model.state_dict().items():
        timm_name = next(re.sub(f"^{ours}", theirs, name) for ours, theirs in TIMM_NAMES if re.match(ours, name))
        timm_state[timm_name] = tensor.squeeze(0) if ".spatial_proj." in name else tensor  # timm's one SGU head
    torch.save(timm_state, tmp_path / "timm.pth")
    convert_timm(["--checkpoint", str(tmp_path / "timm.pth"), "--output_dir", str(tmp_path / "out")])
    converted = GMLPForImageClassification.from_pretrained(tmp_path / "out").eval()
    pixels = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(converted(pixels).logits, model.eval()(pixels).logits)
