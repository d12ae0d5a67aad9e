"""The inputs a second new-user trial found slipping through, case by case: image folders alone are the data (never
mixed with the default digits, and the card names them), repeated SQuAD question ids are refused, a folder error names
the folder and its flag, SQuAD 2.0 training data without --version_2_with_negative is told that flag first, outputs
are strict JSON, a run that `accelerate launch` asked for several processes but started alone says so (and the
README's command starts them), and the small messages (labels in an evaluation-only run, one class folder, the
digits' missing test split, timm beside the CPU torch). Table-driven where the cases share a shape, on tiny
fixtures."""

import importlib.abc
import importlib.machinery
import json
import logging
import math
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CONTEXT, rotated_lines, tiny_run, write
from PIL import Image
from transformers import AutoTokenizer, Trainer, TrainingArguments

import run_glue
import run_image_classification
import run_squad
from gmlp import (
    GMLPConfig,
    GMLPForImageClassification,
    GMLPForSequenceClassification,
    GMLPVisionConfig,
)
from gmlp.convert_timm import _load_timm_state_dict
from gmlp.tasks import squad, training
from gmlp.tasks.arguments import parse_arguments
from gmlp.tasks.image_classification import image_processor_for

ROOT = Path(__file__).parents[1]
COMMON = ["--report_to", "none", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "4"]
IMAGE_SIZES = {"image_size": 8, "patch_size": 4, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1}
TEXT_SIZES = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "max_position_embeddings": 32}
PETS = {"cat": (250, 0, 0), "dog": (0, 0, 250)}


def strict_json(path: Path):
    """The JSON of `path`, read as strict parsers read it: NaN and Infinity are errors."""

    def refuse(constant):
        raise ValueError(f"{path.name} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def image_folders(root: Path, classes: list[str], per_class: int) -> Path:
    """`root` holding a folder per class of `per_class` 8x8 images each (shades of one colour per class)."""
    for k, name in enumerate(classes):
        for i in range(per_class):
            path = root / name / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), ((40 * k) % 256, 10 * i, 100)).save(path)
    return root


def image_run(tmp_path, *extra, **options) -> list[str]:
    """A tiny run_image_classification.py run from scratch (one training step unless `options` say otherwise)."""
    sizes = ",".join(f"{key}={value}" for key, value in IMAGE_SIZES.items())
    defaults = {"config_overrides": sizes, "max_steps": 1}
    return tiny_run(tmp_path / "out", *COMMON, *extra, **(defaults | options))


@pytest.fixture
def pets_checkpoint(tmp_path) -> Path:
    """A saved image classifier of the labels cat and dog, with its image processor."""
    config = GMLPVisionConfig(id2label=dict(enumerate(PETS)), **IMAGE_SIZES)
    GMLPForImageClassification(config).save_pretrained(tmp_path / "pets")
    image_processor_for(config).save_pretrained(tmp_path / "pets")
    return tmp_path / "pets"


def squad_document(*paragraphs: tuple[str, list[tuple[str, str | None]]]) -> str:
    """SQuAD's JSON of `paragraphs`, each (context, [(question id, answer or None for a SQuAD 2.0 unanswerable)])."""
    converted = []
    for context, questions in paragraphs:
        qas = [
            {"id": qid, "question": f"where is {answer or 'the sky'}", "answers": [], "is_impossible": True}
            if answer is None
            else {
                "id": qid,
                "question": f"where is {answer}",
                "answers": [{"text": answer, "answer_start": context.index(answer)}],
            }
            for qid, answer in questions
        ]
        converted.append({"context": context, "qas": qas})
    return json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": converted}]})


OTHER_CONTEXT = rotated_lines(3)[2]  # "sat on a red mat while an old dog slept ..."
# Two paragraphs whose first questions share the id q0.
REPEATED_IDS = squad_document(
    (CONTEXT, [("q0", "the green forest"), ("q1", "small birds")]), (OTHER_CONTEXT, [("q0", "old dog")])
)
UNANSWERABLE = squad_document((CONTEXT, [("q0", "the green forest"), ("q1", "small birds"), ("none0", None)]))


def squad_run(tokenizer_dir, tmp_path, *extra, **options) -> list[str]:
    """A tiny run_squad.py run from scratch."""
    return tiny_run(
        tmp_path / "out", *COMMON, *extra, tokenizer=tokenizer_dir, overrides={"vocab_size": 120}, **options
    )


def glue_checkpoint(tmp_path, tokenizer_dir) -> Path:
    """A saved sentence classifier of the labels not_equivalent and equivalent, with the tests' tokenizer."""
    config = GMLPConfig(vocab_size=120, id2label={0: "not_equivalent", 1: "equivalent"}, **TEXT_SIZES)
    GMLPForSequenceClassification(config).save_pretrained(tmp_path / "mrpc")
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(tmp_path / "mrpc")
    return tmp_path / "mrpc"


def labelled_csv(path: Path, labels: list[str]) -> Path:
    """A csv of a sentence per label of `labels`."""
    rows = "".join(f"{line},{label}\n" for line, label in zip(rotated_lines(len(labels)), labels))
    return write(path, "sentence,label\n" + rows)


# ---- bad input stops early, naming the folder, the ids, the flag to pass -------------------------------------------
ERRORS = {
    # name: (script, its arguments from tmp_path and the tokenizer folder, the error's message)
    "a --train_dir that does not exist": (
        run_image_classification.main,
        lambda tmp, tok: image_run(tmp, "--do_train", train_dir=tmp / "nowhere"),
        r"^--train_dir \S*nowhere: no such folder\.$",
    ),
    "an empty --validation_dir": (
        run_image_classification.main,
        lambda tmp, tok: image_run(
            tmp,
            "--do_train",
            "--do_eval",
            train_dir=image_folders(tmp / "train", list(PETS), 2),
            validation_dir=(tmp / "empty").mkdir() or tmp / "empty",
        ),
        r"^--validation_dir \S*empty holds no image files \(\.png, \.jpg, \.\.\.\), in it or in its class folders\.$",
    ),
    "a --test_dir of text files": (
        run_image_classification.main,
        lambda tmp, tok: image_run(
            tmp, "--do_train", "--do_predict", test_dir=write(tmp / "notes" / "a" / "read.txt", "no image").parents[1]
        ),
        r"^--test_dir \S*notes holds no image files",
    ),
    "--do_predict on the digits": (
        run_image_classification.main,
        lambda tmp, tok: image_run(tmp, "--do_train", "--do_predict", max_train_samples=4),
        r"--do_predict needs test data: pass --test_dir \(the data has \['train', 'validation'\]\)",
    ),
    "repeated question ids in evaluation data": (
        run_squad.main,
        lambda tmp, tok: squad_run(tok, tmp, "--do_eval", validation_file=write(tmp / "dev.json", REPEATED_IDS)),
        r"dev.json: 1 question id\(s\) are used by more than one question \(q0\)\. Answers are matched to questions",
    ),
    "repeated question ids in training data": (
        run_squad.main,
        lambda tmp, tok: squad_run(tok, tmp, "--do_train", train_file=write(tmp / "train.json", REPEATED_IDS)),
        r"train.json: 1 question id\(s\) are used by more than one question \(q0\)",
    ),
    "SQuAD 2.0 training data without --version_2_with_negative": (
        run_squad.main,
        lambda tmp, tok: squad_run(tok, tmp, "--do_train", train_file=write(tmp / "train.json", UNANSWERABLE)),
        (
            r"train.json: 1 of 3 training questions have no answer \(none0\), as SQuAD 2.0's unanswerable ones\. "
            r"Pass --version_2_with_negative to train on them"
        ),
    ),
    "an evaluation-only run on images of labels the checkpoint lacks": (
        run_image_classification.main,
        lambda tmp, tok: [
            *f"--model_name_or_path {tmp / 'pets'} --do_eval --output_dir {tmp / 'out'}".split(),
            *["--validation_dir", str(image_folders(tmp / "digits", ["0", "1"], 2)), *COMMON],
        ],
        (
            r"The validation data: label\(s\) '0', '1' are not labels of the model \S*pets \(its labels: 0 = 'cat', "
            r"1 = 'dog'\), and this run trains no head for them\. Give the data the model's labels, or fine-tune a "
            r"head for the data's first \(--do_train --ignore_mismatched_sizes\)"
        ),
    ),
    "--ignore_mismatched_sizes in an evaluation-only run": (
        run_glue.main,
        lambda tmp, tok: [
            *f"--model_name_or_path {glue_checkpoint(tmp, tok)} --do_eval --ignore_mismatched_sizes".split(),
            *["--validation_file", str(labelled_csv(tmp / "yesno.csv", ["no", "yes"] * 3))],
            *f"--output_dir {tmp / 'out'} --max_seq_length 16".split(),
            *COMMON,
        ],
        r"yesno.csv: label\(s\) 'no', 'yes' are not labels of the model \S*mrpc .* this run trains no head for them",
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_bad_input_is_named_with_its_fix(case, pets_checkpoint, tokenizer_dir, tmp_path):
    script, arguments, message = ERRORS[case]
    with pytest.raises(ValueError, match=message):
        script(arguments(tmp_path, tokenizer_dir))
    assert not (tmp_path / "out" / "model.safetensors").exists()


# ---- image folders alone are the data -------------------------------------------------------------------------------
FOLDER_RUNS = {
    # name: (whether a --validation_dir is given, the evaluation's examples)
    "ten digit-named class folders, 15% held out": (False, 3),  # of 20 images; the digits have 360
    "with a --validation_dir": (True, 10),
}


@pytest.mark.parametrize("case", sorted(FOLDER_RUNS))
def test_image_folders_are_the_whole_data_and_the_card_names_them(case, tmp_path):
    with_validation, evaluated = FOLDER_RUNS[case]
    classes = [str(digit) for digit in range(10)]
    train = image_folders(tmp_path / "my_images", classes, 2)
    validation = image_folders(tmp_path / "my_validation", classes, 1) if with_validation else None
    metrics = run_image_classification.main(
        image_run(tmp_path, "--do_train", "--do_eval", train_dir=train, validation_dir=validation)
    )
    assert metrics["eval_samples"] == evaluated
    card = (tmp_path / "out" / "README.md").read_text()
    assert "trained from scratch, on my_images." in card and "digits" not in card


def test_one_class_folder_of_test_images_is_scored(pets_checkpoint, tmp_path):
    test = image_folders(tmp_path / "test", ["cat"], 4)
    out = tmp_path / "out"
    arguments = f"--model_name_or_path {pets_checkpoint} --test_dir {test} --do_predict --output_dir {out}".split()
    run_image_classification.main([*arguments, *COMMON])
    predicted = [line.split("\t")[2] for line in (out / "predict_results.txt").read_text().splitlines()[1:]]
    assert len(predicted) == 4
    assert strict_json(out / "predict_results.json")["predict_accuracy"] == predicted.count("cat") / 4


# ---- strict JSON ----------------------------------------------------------------------------------------------------
def test_null_odds_of_a_question_without_any_span_are_finite(tmp_path):
    examples = [{"id": "q0", "context": CONTEXT}, {"id": "q1", "context": CONTEXT}]
    # q0's only window has no context token: no span at all; q1's best span is "red fox" against a null score of 0.
    features = {"example_id": ["q0", "q1"], "offset_mapping": [[None] * 4, [None, (4, 7), (8, 11), None]]}
    start_logits = [[0.0, 1.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0]]
    end_logits = [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 2.0, 0.0]]
    answers = squad.postprocess_qa_predictions(
        examples,
        features,
        (start_logits, end_logits),
        version_2_with_negative=True,
        n_best_size=2,
        output_dir=str(tmp_path),
    )
    assert answers == {"q0": "", "q1": "red fox"}
    assert strict_json(tmp_path / "null_odds.json") == {"q0": sys.float_info.max, "q1": -5.0}
    assert strict_json(tmp_path / "predictions.json") == answers


def test_metrics_that_are_no_finite_number_are_written_as_null(tmp_path):
    arguments = TrainingArguments(str(tmp_path), report_to="none")
    trainer = Trainer(model=GMLPForSequenceClassification(GMLPConfig(vocab_size=120, **TEXT_SIZES)), args=arguments)
    training.record_metrics(trainer, "eval", {"eval_loss": math.nan, "eval_perplexity": math.inf, "eval_samples": 3})
    expected = {"eval_loss": None, "eval_perplexity": None, "eval_samples": 3}
    assert strict_json(tmp_path / "eval_results.json") == expected == strict_json(tmp_path / "all_results.json")


# ---- several processes through accelerate ---------------------------------------------------------------------------
def accelerate_environment(launch_arguments: list[str]) -> dict[str, str]:
    """The environment that `accelerate launch` gives a script it starts with its simple (one-process) launcher."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    args, _, _ = _validate_launch_command(launch_command_parser().parse_args([*launch_arguments, "run_glue.py"]))
    return prepare_simple_launcher_cmd_env(args)[1]


LAUNCHES = {
    # name: `accelerate launch`'s arguments from tmp_path, which ask for two processes and start one (the config is
    # the one `accelerate config default` writes)
    "--num_processes 2 --cpu": lambda tmp: ["--num_processes", "2", "--cpu"],
    "a default config, --num_processes 2": lambda tmp: ["--config_file", default_config(tmp), "--num_processes", "2"],
}


ONE_PROCESS = (
    "accelerate launch was asked for several processes but started one (world size 1): with --cpu, or a config whose "
    "distributed_type is not MULTI_GPU, it runs a single process. On the CPU, start N processes with `accelerate "
    "launch --multi_gpu --num_processes N` (gloo) or `torchrun --nproc_per_node N`."
)


def default_config(tmp_path) -> str:
    """The config file that `accelerate config default` writes."""
    from accelerate.commands.config.default import write_basic_config

    write_basic_config(save_location=str(tmp_path / "accelerate.json"))
    return str(tmp_path / "accelerate.json")


@pytest.mark.parametrize("case", sorted(LAUNCHES))
def test_a_run_that_accelerate_asked_for_two_processes_but_started_alone_says_so(case, tmp_path, monkeypatch, caplog):
    for name, value in accelerate_environment(LAUNCHES[case](tmp_path)).items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        parse_arguments((TrainingArguments,), ["--output_dir", str(tmp_path / "out"), "--do_train"])
    said = [record.getMessage() for record in caplog.records if "accelerate launch was asked" in record.getMessage()]
    assert said == [ONE_PROCESS]


@pytest.mark.e2e
def test_the_readmes_accelerate_command_starts_two_processes_on_the_cpu(tokenizer_dir, tmp_path):
    command = re.search(
        r"accelerate launch (--multi_gpu --num_processes 2) run_glue\.py", (ROOT / "README.md").read_text()
    )
    assert command, "the README's accelerate command for several CPU processes is gone"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    data = labelled_csv(tmp_path / "train.csv", ["no", "yes"] * 4)
    options = {"train_file": data, "do_train": True, "max_steps": 2, "max_seq_length": 16}
    script = [str(ROOT / "run_glue.py"), *tiny_run(tmp_path / "out", *COMMON, tokenizer=tokenizer_dir, **options)]
    bin_dir = Path(sys.executable).parent
    launch = [str(bin_dir / "accelerate"), "launch", *command.group(1).split(), "--main_process_port", str(port)]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env["HF_HOME"] = str(tmp_path / "hf")  # nor the user's accelerate config
    result = subprocess.run(
        [*launch, *script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert sorted(re.findall(r"Process rank: (\d), device: cpu\S*, world size: 2", output)) == ["0", "1"]
    assert "accelerate launch was asked" not in output


# ---- timm beside the CPU build of torch -----------------------------------------------------------------------------
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
    with pytest.raises(SystemExit) as stop:
        _load_timm_state_dict(None, "gmlp_s16_224")
    message = str(stop.value)
    assert message.startswith(f"--timm-model needs timm, which does not import here ({quoted}")
    assert CPU_INSTALL in message and "--checkpoint" in message
    assert CPU_INSTALL in " ".join((ROOT / "README.md").read_text().split())
