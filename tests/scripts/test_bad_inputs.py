"""A user's bad data, for every script: each case stops before training with one clear error that names the file (or
folder) and the problem, and what to do; never a deep `datasets`/torch error or a silently wrong run. And the bad
input of the other commands (the tokenizer's, timm's converter). Table-driven, on tiny fixtures."""

import importlib.abc
import importlib.machinery
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from helpers import CONTEXT, flags, rotated_lines, write
from script_runs import (
    IMAGE_SIZES,
    csv_file,
    glue_run,
    image_folders,
    image_run,
    jsonl_file,
    mlm_run,
    squad_document,
    squad_file,
    squad_run,
    trained_nothing,
)
from transformers import AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments, default_data_collator

from gmlp import (
    GMLPConfig,
    GMLPForImageClassification,
    GMLPForSequenceClassification,
    GMLPVisionConfig,
    modeling_gmlp,
)
from gmlp.convert_timm import _load_timm_state_dict
from gmlp.convert_timm import run as convert_timm
from gmlp.tasks import run_glue, run_image_classification, run_mlm, run_squad
from gmlp.tasks.collators import CheckedCollator
from gmlp.tasks.errors import ScriptError
from gmlp.tasks.image_classification import image_processor_for
from gmlp.tokenization_gmlp import run as tokenizer_command
from gmlp.tokenization_gmlp import train_tokenizer

ROOT = Path(__file__).parents[2]
TOPICS = [["animals"], ["animals", "music"], [], ["music"], ["fire", "music"], ["animals", "fire"]] * 2


def bad_answers(shift: int = 0, answers=None, start=None) -> str:
    """SQuAD v1.1's JSON of three questions on helpers.CONTEXT, their answers shifted by `shift` characters, or
    all at `start`, or all replaced by `answers`."""
    qas = []
    for i, answer in enumerate(["the green forest", "small birds", "the old river"]):
        offset = CONTEXT.index(answer) + shift if start is None else start
        given = [{"text": answer, "answer_start": offset}] if answers is None else answers
        qas.append({"id": f"question-{i}", "question": f"where is {answer}", "answers": given})
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]})


def labelled_csv(blank_row: int | None = None) -> str:
    rows = [f"{text},{'' if i == blank_row else i % 2}" for i, text in enumerate(rotated_lines(8))]
    return "sentence,label\n" + "\n".join(rows) + "\n"


def glue_folder(tmp: Path, train: str) -> Path:
    """A GLUE folder whose SST-2 train.tsv is `train` (and dev.tsv four labelled sentences)."""
    write(tmp / "glue" / "SST-2" / "train.tsv", train)
    write(tmp / "glue" / "SST-2" / "dev.tsv", "sentence\tlabel\n" + "\n".join(f"{s}\t1" for s in rotated_lines(4)))
    return tmp / "glue"


def multi_label_files(tmp: Path, train_labels, dev_labels, key: str = "text") -> dict:
    """Training and evaluation JSON lines of `train_labels` and `dev_labels`, as run_glue.py's options."""
    train = jsonl_file(tmp / "train.jsonl", [{key: t, "label": l} for t, l in zip(rotated_lines(12), train_labels)])
    dev = jsonl_file(tmp / "dev.jsonl", [{key: t, "label": l} for t, l in zip(rotated_lines(2), dev_labels)])
    return {"train_file": train, "validation_file": dev, "do_eval": True}


def checkpoint_of(tmp: Path, tokenizer_dir, kind: str) -> Path:
    """A saved classifier of the labels cat and dog (images, with its image processor) or not_equivalent and
    equivalent (sentences, with the tests' tokenizer)."""
    if kind == "images":
        config = GMLPVisionConfig(id2label={0: "cat", 1: "dog"}, **IMAGE_SIZES)
        GMLPForImageClassification(config).save_pretrained(tmp / "pets")
        image_processor_for(config).save_pretrained(tmp / "pets")
        return tmp / "pets"
    sizes = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "max_position_embeddings": 32}
    config = GMLPConfig(vocab_size=120, id2label={0: "not_equivalent", 1: "equivalent"}, **sizes)
    GMLPForSequenceClassification(config).save_pretrained(tmp / "mrpc")
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(tmp / "mrpc")
    return tmp / "mrpc"


MRPC_TSV = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + "".join(
    f"{i % 2}\t{i}\t{i}\t{line}\t{line}\n" for i, line in enumerate(rotated_lines(4))
)
PASSAGES = "id,question,passage,source,label\n" + "".join(
    f"{i},what is {line.split()[0]},{line},news,{i % 2}\n" for i, line in enumerate(rotated_lines(8))
)
OTHER_CONTEXT = rotated_lines(3)[2]  # "sat on a red mat while an old dog slept ..."
# Two paragraphs whose first questions share the id q0.
REPEATED_IDS = squad_document(
    (CONTEXT, [("q0", "the green forest"), ("q1", "small birds")]), (OTHER_CONTEXT, [("q0", "old dog")])
)
UNANSWERABLE = squad_document((CONTEXT, [("q0", "the green forest"), ("q1", "small birds"), ("none0", None)]))

BAD_DATA = {
    # name: (script, its arguments from tmp_path and the tokenizer folder, the error's message, the file it names)
    # ---- run_mlm.py: text files
    "mlm: an empty txt": (
        run_mlm,
        lambda tmp, tok: mlm_run(tok, tmp, train_file=write(tmp / "t.txt", "")),
        "is empty",
        "t.txt",
    ),
    "mlm: blank lines, line by line": (
        run_mlm,
        lambda tmp, tok: mlm_run(tok, tmp, "--line_by_line", train_file=write(tmp / "t.txt", "\n   \n\n")),
        "is empty",
        "t.txt",
    ),
    "mlm: an empty csv": (
        run_mlm,
        lambda tmp, tok: mlm_run(tok, tmp, train_file=write(tmp / "t.csv", "")),
        "is empty",
        "t.csv",
    ),
    "mlm: a header-only csv": (
        run_mlm,
        lambda tmp, tok: mlm_run(tok, tmp, train_file=write(tmp / "t.csv", "text\n")),
        "has no examples",
        "t.csv",
    ),
    "mlm: an empty json": (
        run_mlm,
        lambda tmp, tok: mlm_run(tok, tmp, train_file=write(tmp / "t.json", "")),
        "is empty",
        "t.json",
    ),
    "mlm: numbers as the first csv column": (
        run_mlm,
        lambda tmp, tok: mlm_run(tok, tmp, train_file=write(tmp / "t.csv", "id\n1\n2\n3\n4\n")),
        "not text",
        "t.csv",
    ),
    "mlm: non-UTF-8 text": (
        run_mlm,
        lambda tmp, tok: mlm_run(tok, tmp, train_file=write(tmp / "t.txt", "caf\xe9 au lait\n".encode("latin-1"))),
        r"is not UTF-8 text \(byte 3",
        "t.txt",
    ),
    # ---- run_glue.py: GLUE folders, csv files, labels, text columns
    "glue: a blank label of sst2": (
        run_glue,
        lambda tmp, tok: glue_run(tok, tmp, "--task_name", "sst2", train_file=write(tmp / "t.csv", labelled_csv(5))),
        r"1 example\(s\) have an empty label \(example 5",
        "t.csv",
    ),
    "glue: a blank label of custom data": (
        run_glue,
        lambda tmp, tok: glue_run(tok, tmp, train_file=write(tmp / "t.csv", labelled_csv(5))),
        r"1 example\(s\) have an empty label \(example 5",
        "t.csv",
    ),
    "glue: an empty train.tsv in a GLUE folder": (
        run_glue,
        lambda tmp, tok: glue_run(tok, tmp, task_name="sst2", train_file=None, glue_dir=glue_folder(tmp, "")),
        "is empty",
        "glue/SST-2/train.tsv",
    ),
    "glue: a header-only train.tsv in a GLUE folder": (
        run_glue,
        lambda tmp, tok: glue_run(
            tok, tmp, task_name="sst2", train_file=None, glue_dir=glue_folder(tmp, "sentence\tlabel\n")
        ),
        "has no examples",
        "glue/SST-2/train.tsv",
    ),
    "glue: GLUE's MRPC TSV as --train_file": (
        run_glue,
        lambda tmp, tok: glue_run(tok, tmp, train_file=write(tmp / "train.tsv", MRPC_TSV)),
        r"It is GLUE's own MRPC file: read it with --task_name mrpc --glue_dir DIR",
        "train.tsv",
    ),
    "glue: a named text column that holds numbers": (
        run_glue,
        lambda tmp, tok: glue_run(
            tok, tmp, "--text_column_names", "id,passage", train_file=write(tmp / "p.csv", PASSAGES)
        ),
        r"--text_column_names id,passage names the column 'id', which holds int64 values, not text",
        "p.csv",
    ),
    "glue: a named text column that does not exist": (
        run_glue,
        lambda tmp, tok: glue_run(
            tok, tmp, "--text_columns", "question,text", train_file=write(tmp / "p.csv", PASSAGES)
        ),
        r"has no column\(s\) \['text'\] \(its columns: \['id', 'question', 'passage', 'source', 'label'\]\)",
        "p.csv",
    ),
    "glue: an unknown label in a list": (
        run_glue,
        lambda tmp, tok: glue_run(tok, tmp, **multi_label_files(tmp, TOPICS, [["animals"], ["dance"]])),
        r"dev.jsonl, example 1: label 'dance' is not a custom label; the labels are 0 = 'animals', 1 = 'fire'",
        "dev.jsonl",
    ),
    "glue: single labels beside lists": (
        run_glue,
        lambda tmp, tok: glue_run(tok, tmp, **multi_label_files(tmp, TOPICS, ["animals", "music"])),
        r"dev.jsonl: its labels are single values, but the training data's are lists \(multi-label\)",
        "dev.jsonl",
    ),
    "glue: lists of labels for a GLUE task": (
        run_glue,
        lambda tmp, tok: glue_run(
            tok, tmp, "--task_name", "sst2", **multi_label_files(tmp, [["0"], ["1"]] * 6, [["0"], ["1"]], "sentence")
        ),
        r"its labels are lists \(several per example\), but sst2 has one label per example: drop --task_name",
        "train.jsonl",
    ),
    "glue: labels a checkpoint lacks, evaluated without training": (
        run_glue,
        lambda tmp, tok: [
            *flags(model_name_or_path=checkpoint_of(tmp, tok, "text"), do_eval=True, ignore_mismatched_sizes=True),
            *flags(validation_file=csv_file(tmp / "yesno.csv", zip(rotated_lines(6), ["no", "yes"] * 3))),
            *flags(output_dir=tmp / "out", max_seq_length=16, report_to="none"),
        ],
        r"yesno.csv: label\(s\) 'no', 'yes' are not labels of the model \S*mrpc .* this run trains no head for them",
        "yesno.csv",
    ),
    # ---- run_squad.py: SQuAD files and their answers
    "squad: answers shifted by 7": (
        run_squad,
        lambda tmp, tok: squad_run(tok, tmp, train_file=write(tmp / "t.json", bad_answers(shift=7))),
        r"3 of 3 training questions .*question-0: answer.*--skip_invalid_answers",
        "t.json",
    ),
    "squad: answer_start past the context": (
        run_squad,
        lambda tmp, tok: squad_run(tok, tmp, train_file=write(tmp / "t.json", bad_answers(start=500))),
        r"is not at character 500.*--skip_invalid_answers",
        "t.json",
    ),
    "squad: no answer in SQuAD 1.1": (
        run_squad,
        lambda tmp, tok: squad_run(tok, tmp, train_file=write(tmp / "t.json", bad_answers(answers=[]))),
        r"no answer .*--version_2_with_negative.*--skip_invalid_answers",
        "t.json",
    ),
    "squad: SQuAD 2.0 training data without --version_2_with_negative": (
        run_squad,
        lambda tmp, tok: squad_run(tok, tmp, train_file=write(tmp / "t.json", UNANSWERABLE)),
        r"t.json: 1 of 3 training questions have no answer \(none0\), as SQuAD 2.0's unanswerable ones\. Pass --version_2_with_negative to train on them",
        "t.json",
    ),
    "squad: a non-UTF-8 file": (
        run_squad,
        lambda tmp, tok: squad_run(
            tok, tmp, train_file=write(tmp / "t.json", bad_answers().replace("river", "rivi\xe8re").encode("latin-1"))
        ),
        "not UTF-8",
        "t.json",
    ),
    "squad: evaluating SQuAD 2.0 data": (
        run_squad,
        lambda tmp, tok: squad_run(tok, tmp, "--do_eval", validation_file=squad_file(tmp / "dev.json", 2)),
        r"dev.json: 2 of 4 questions have no answer \(none0, none1\), as SQuAD 2.0's unanswerable ones. Pass --version_2_with_negative",
        "dev.json",
    ),
    "squad: predicting SQuAD 2.0 data": (
        run_squad,
        lambda tmp, tok: squad_run(tok, tmp, "--do_predict", test_file=squad_file(tmp / "dev.json", 1)),
        r"dev.json: 1 of 3 questions have no answer \(none0\)",
        "dev.json",
    ),
    "squad: evaluating questions without answers": (
        run_squad,
        lambda tmp, tok: squad_run(
            tok, tmp, "--do_eval", validation_file=squad_file(tmp / "dev.json", answered=False)
        ),
        r"none of its 2 questions has an answer, so --do_eval has nothing to score against",
        "dev.json",
    ),
    "squad: repeated question ids in evaluation data": (
        run_squad,
        lambda tmp, tok: squad_run(tok, tmp, "--do_eval", validation_file=write(tmp / "dev.json", REPEATED_IDS)),
        r"dev.json: 1 question id\(s\) are used by more than one question \(q0\)\. Answers are matched to questions",
        "dev.json",
    ),
    "squad: repeated question ids in training data": (
        run_squad,
        lambda tmp, tok: squad_run(tok, tmp, train_file=write(tmp / "t.json", REPEATED_IDS)),
        r"t.json: 1 question id\(s\) are used by more than one question \(q0\)",
        "t.json",
    ),
    # ---- run_image_classification.py: folders of images and their labels
    "images: a --train_dir that does not exist": (
        run_image_classification,
        lambda tmp, tok: image_run(tmp, train_dir=tmp / "nowhere"),
        r"^--train_dir \S*nowhere: no such folder\.$",
        "nowhere",
    ),
    "images: an empty --validation_dir": (
        run_image_classification,
        lambda tmp, tok: image_run(
            tmp,
            "--do_eval",
            train_dir=image_folders(tmp / "train", ["cat", "dog"], 2),
            validation_dir=write(tmp / "empty" / ".keep", "").parent,
        ),
        r"^--validation_dir \S*empty holds no image files \(\.png, \.jpg, \.\.\.\), in it or in its class folders\.$",
        "empty",
    ),
    "images: a --test_dir of text files": (
        run_image_classification,
        lambda tmp, tok: image_run(
            tmp, "--do_predict", test_dir=write(tmp / "notes" / "a" / "read.txt", "no image").parents[1]
        ),
        r"^--test_dir \S*notes holds no image files",
        "notes",
    ),
    "images: --do_predict on the digits": (
        run_image_classification,
        lambda tmp, tok: image_run(tmp, "--do_predict", max_train_samples=4),
        r"--do_predict needs test data: pass --test_dir \(the data has \['train', 'validation'\]\)",
        None,
    ),
    "images: labels a checkpoint lacks, evaluated without training": (
        run_image_classification,
        lambda tmp, tok: [
            *flags(model_name_or_path=checkpoint_of(tmp, tok, "images"), do_eval=True, output_dir=tmp / "out"),
            *flags(validation_dir=image_folders(tmp / "digits", ["0", "1"], 2), report_to="none"),
        ],
        r"The validation data: label\(s\) '0', '1' are not labels of the model \S*pets \(its labels: 0 = 'cat', 1 = 'dog'\), and this run trains no head for them\. Give the data the model's labels, or fine-tune a head for the data's first \(--do_train --ignore_mismatched_sizes\)",
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_data_is_named_with_its_fix_before_training(case, tokenizer_dir, tmp_path):
    script, arguments, message, named = BAD_DATA[case]
    with pytest.raises(ScriptError, match=message) as error:
        script.run(arguments(tmp_path, tokenizer_dir))
    assert named is None or str(tmp_path / named) in str(error.value)
    assert trained_nothing(tmp_path / "out")


def test_truncated_weights_are_named(tokenizer_dir, tmp_path):
    run_mlm.run(mlm_run(tokenizer_dir, tmp_path, max_steps=1))
    weights = tmp_path / "out" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-50])
    arguments = flags(
        model_name_or_path=tmp_path / "out", output_dir=tmp_path / "eval", do_eval=True, report_to="none"
    )
    with pytest.raises(
        ScriptError, match=f"Cannot load --model_name_or_path .*: {re.escape(str(weights))} is truncated or corrupt"
    ):
        run_mlm.run([*arguments, "--validation_file", str(tmp_path / "train.txt")])


def test_the_collator_checks_ids_before_the_model_sees_them(script_tokenizer, tmp_path, monkeypatch):
    tokenizer = script_tokenizer
    examples = [{**tokenizer(text), "label": label} for text, label in [("the cat", 1), ("a dog", 5)]]
    collate = CheckedCollator(DataCollatorWithPadding(tokenizer), input_ids=120, labels=2)
    with pytest.raises(
        ScriptError, match=r"A batch holds labels 5, outside the model's ids 0..1: labels must be mapped"
    ):
        collate(examples)
    with pytest.raises(
        ScriptError, match=r"holds input_ids \d+, outside the model's ids 0..4: the tokenizer does not"
    ):
        CheckedCollator(DataCollatorWithPadding(tokenizer), input_ids=5)(examples)
    ignored = [{"pixel_values": torch.zeros(3), "labels": label} for label in (-100, 1)]
    assert CheckedCollator(default_data_collator, labels=2)(ignored)["labels"].tolist() == [-100, 1]
    # Where the model does not check (an accelerator: no synchronisation per step), the Trainer still stops here.
    monkeypatch.setattr(modeling_gmlp, "check_labels", lambda *args, **kwargs: None)
    sizes = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "max_position_embeddings": 32}
    model = GMLPForSequenceClassification(GMLPConfig(vocab_size=120, **sizes))
    calls = []
    model.register_forward_pre_hook(lambda *args: calls.append(args))
    arguments = TrainingArguments(str(tmp_path / "out"), report_to="none", max_steps=1, per_device_train_batch_size=2)
    trainer = Trainer(model=model, args=arguments, train_dataset=examples, data_collator=collate)
    with pytest.raises(ScriptError, match="A batch holds labels 5"):
        trainer.train()
    assert calls == []


# ---- the other commands: the tokenizer's and timm's converter -----------------------------------------------------
TOKENIZER_FILES = {
    "Latin-1 text": ("caf\xe9 au lait\n".encode("latin-1"), r"is not UTF-8 text \(byte 3"),
    "an empty file": (b"", r"is empty"),
    "a blank file": (b"\n  \n\t\n", r"is empty"),
}


@pytest.mark.parametrize("case", sorted(TOKENIZER_FILES))
def test_the_tokenizer_command_names_a_bad_file(case, tmp_path):
    content, message = TOKENIZER_FILES[case]
    text = write(tmp_path / "text.txt", content)
    with pytest.raises(ScriptError, match=message) as error:
        tokenizer_command(["--train_files", str(text), "--output_dir", str(tmp_path / "tok"), "--vocab_size", "50"])
    assert str(text) in str(error.value) and not (tmp_path / "tok").exists()


def test_a_blank_corpus_trains_no_tokenizer():
    with pytest.raises(ValueError, match="empty or blank: the tokenizer learned no token but the special ones"):
        train_tokenizer(iter(["", "   "]), vocab_size=50)


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
    with pytest.raises(ScriptError, match=message):
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


class _BrokenTimm(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """timm as it imports beside a torchvision built for another torch."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.machinery.ModuleSpec(fullname, self) if fullname == "timm" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise RuntimeError("operator torchvision::nms does not exist")


TIMM_IMPORTS = {
    # name: (how `import timm` fails, what the message quotes of it)
    "timm not installed": ("missing", "import of timm halted"),
    "timm with a torchvision for another torch": ("broken", "operator torchvision::nms does not exist"),
}
CPU_INSTALL = (
    "pip install timm \"torch==$(python -c 'import torch; print(torch.__version__)')\" "
    "--extra-index-url https://download.pytorch.org/whl/cpu"
)


@pytest.mark.parametrize("case", sorted(TIMM_IMPORTS))
def test_without_an_importable_timm_the_message_gives_the_install_that_keeps_the_cpu_torch(case, monkeypatch):
    failure, quoted = TIMM_IMPORTS[case]
    if failure == "missing":
        monkeypatch.setitem(sys.modules, "timm", None)
    else:
        monkeypatch.delitem(sys.modules, "timm", raising=False)
        monkeypatch.setattr(sys, "meta_path", [_BrokenTimm(), *sys.meta_path])
    with pytest.raises(ScriptError) as stop:
        _load_timm_state_dict(None, "gmlp_s16_224")
    message = str(stop.value)
    assert message.startswith(f"--timm-model needs timm, which does not import here ({quoted}")
    assert CPU_INSTALL in message and "--checkpoint" in message
    assert CPU_INSTALL in " ".join((ROOT / "docs" / "scripts.md").read_text().split())
