"""What the tests in this folder share that is not a fixture: the arguments of tiny runs of the scripts from scratch,
and the small files they read (the tiny model and the corpus words are tests/helpers.py's, the tokenizer is
tests/conftest.py's `tokenizer_dir`)."""

import json
from pathlib import Path

from helpers import CONTEXT, rotated_lines, tiny_run, write

# Batches of 2: a run of 8 examples takes several steps.
COMMON = ["--report_to", "none", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2"]
# Evaluating and saving at every step: the first evaluation is after the first training step.
EVERY_STEP = ["--eval_strategy", "steps", "--eval_steps", "1", "--save_strategy", "steps", "--save_steps", "1"]
LABELLED = [(line, i % 2) for i, line in enumerate(rotated_lines(8))]
IMAGE_SIZES = {"image_size": 8, "patch_size": 4, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1}


def csv_file(path: Path, rows, header: str = "sentence,label") -> Path:
    return write(path, header + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))


def jsonl_file(path: Path, rows: list[dict]) -> Path:
    return write(path, "".join(json.dumps(row) + "\n" for row in rows))


def squad_document(*paragraphs: tuple[str, list[tuple[str, str | None]]]) -> str:
    """SQuAD's JSON of `paragraphs`, each (context, [(question id, answer, or None for a SQuAD 2.0 unanswerable)])."""
    converted = []
    for context, questions in paragraphs:
        qas = []
        for qid, answer in questions:
            answers = [] if answer is None else [{"text": answer, "answer_start": context.index(answer)}]
            qas.append({"id": qid, "question": f"where is {answer or 'the sky'}", "answers": answers})
            qas[-1] |= {"is_impossible": True} if answer is None else {}
        converted.append({"context": context, "qas": qas})
    return json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": converted}]})


def squad_file(path: Path, unanswerable: int = 0, answered: bool = True) -> Path:
    """A SQuAD file on helpers.CONTEXT: two answerable questions (q0, q1; without their answers unless `answered`)
    and `unanswerable` SQuAD 2.0 ones (none0, ...)."""
    answerable = [(f"q{i}", answer) for i, answer in enumerate(["the green forest", "small birds"])]
    document = json.loads(squad_document((CONTEXT, answerable + [(f"none{i}", None) for i in range(unanswerable)])))
    for qa in document["data"][0]["paragraphs"][0]["qas"][: 0 if answered else 2]:
        qa["answers"] = []
    return write(path, json.dumps(document))


def glue_run(tokenizer_dir, tmp_path, *extra, **options) -> list[str]:
    """A tiny run_glue.py run from scratch on a csv of 8 labelled sentences (its training and evaluation file)."""
    if "train_file" not in options:
        options = {"train_file": csv_file(tmp_path / "train.csv", LABELLED), **options}
        options.setdefault("validation_file", options["train_file"])
    options = {"do_train": True, "max_steps": 2, "max_seq_length": 16} | options
    return tiny_run(tmp_path / "out", *COMMON, *extra, tokenizer=tokenizer_dir, **options)


def mlm_run(tokenizer_dir, tmp_path, *extra, **options) -> list[str]:
    """A tiny run_mlm.py run from scratch on 40 lines (5% of them held out for an evaluation)."""
    if "train_file" not in options:
        options = {"train_file": write(tmp_path / "train.txt", "\n".join(rotated_lines(40)) + "\n"), **options}
    options = {"do_train": True, "max_steps": 2, "max_seq_length": 16} | options
    return tiny_run(
        tmp_path / "out", *COMMON, *extra, tokenizer=tokenizer_dir, overrides={"vocab_size": 120}, **options
    )


def squad_run(tokenizer_dir, tmp_path, *extra, **options) -> list[str]:
    """A tiny run_squad.py run from scratch (training on two answerable questions unless `options` say otherwise)."""
    if "train_file" not in options:
        options = {"train_file": squad_file(tmp_path / "train.json"), **options}
    options = {"do_train": True, "max_steps": 1} | options
    return tiny_run(
        tmp_path / "out", *COMMON, *extra, tokenizer=tokenizer_dir, overrides={"vocab_size": 120}, **options
    )


def image_run(tmp_path, *extra, **options) -> list[str]:
    """A tiny run_image_classification.py run from scratch (on scikit-learn's digits unless `options` give folders)."""
    sizes = ",".join(f"{key}={value}" for key, value in IMAGE_SIZES.items())
    defaults = {"config_overrides": sizes, "do_train": True, "max_steps": 2, "max_train_samples": 8}
    return tiny_run(tmp_path / "out", *COMMON, *extra, **(defaults | {"max_eval_samples": 8} | options))


def image_folders(root: Path, classes: list[str], per_class: int) -> Path:
    """`root` holding a folder per class of `per_class` 8x8 images each (shades of one colour per class)."""
    from PIL import Image

    for k, name in enumerate(classes):
        for i in range(per_class):
            path = root / name / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), ((40 * k) % 256, 10 * i, 100)).save(path)
    return root


def trained_nothing(output_dir: Path) -> bool:
    """Whether a run saved neither a checkpoint nor a model: it stopped before training, or before its first save."""
    return not any(output_dir.glob("checkpoint-*")) and not (output_dir / "model.safetensors").exists()


def strict_json(path: Path):
    """The JSON of `path`, read as strict parsers read it: NaN and Infinity are errors."""

    def refuse(constant):
        raise ValueError(f"{path.name} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)
