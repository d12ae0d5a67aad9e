"""run_image_classification.py on folders of images: class folders alone are the data (never mixed with the default
digits; the card names them), a validation folder or 15% held out, test images labelled one by one (scored when they
are in class folders, one class folder included). The digits themselves: tests/test_vision.py."""

import json
from pathlib import Path

import pytest
from helpers import flags
from script_runs import COMMON, IMAGE_SIZES, image_folders, image_run, strict_json

from gmlp import GMLPForImageClassification, GMLPVisionConfig
from gmlp.tasks import run_image_classification
from gmlp.tasks.image_classification import image_processor_for


@pytest.fixture
def pets_checkpoint(tmp_path) -> Path:
    """A saved image classifier of the labels cat and dog, with its image processor."""
    config = GMLPVisionConfig(id2label={0: "cat", 1: "dog"}, **IMAGE_SIZES)
    GMLPForImageClassification(config).save_pretrained(tmp_path / "pets")
    image_processor_for(config).save_pretrained(tmp_path / "pets")
    return tmp_path / "pets"


def predict(checkpoint: Path, test: Path, out: Path) -> list[list[str]]:
    """The rows (index, image, prediction) that `checkpoint` writes for the images of `test`."""
    run_image_classification.run(
        [*flags(model_name_or_path=checkpoint, test_dir=test, do_predict=True, output_dir=out), *COMMON]
    )
    lines = (out / "predict_results.txt").read_text().splitlines()
    assert lines[0] == "index\timage\tprediction"
    return [line.split("\t") for line in lines[1:]]


def test_train_and_validation_folders_are_the_data(tmp_path):
    train, validation = (image_folders(tmp_path / split, ["red", "blue"], 3) for split in ("train", "validation"))
    arguments = image_run(tmp_path, "--do_eval", train_dir=train, validation_dir=validation, max_eval_samples=None)
    assert run_image_classification.run(arguments)["eval_samples"] == 6
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert sorted(config["id2label"].values()) == ["blue", "red"]


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
    arguments = image_run(tmp_path, "--do_eval", train_dir=train, validation_dir=validation, max_eval_samples=None)
    assert run_image_classification.run(arguments)["eval_samples"] == evaluated
    card = (tmp_path / "out" / "README.md").read_text()
    assert "trained from scratch, on my_images." in card and "digits" not in card


def test_test_images_outside_class_folders_are_labelled_each(pets_checkpoint, tmp_path):
    image_folders(tmp_path / "images", ["cat", "dog"], 2)
    test = tmp_path / "test"
    test.mkdir()
    for path in sorted((tmp_path / "images").rglob("*.png")):
        path.rename(test / f"{path.parent.name}-{path.name}")
    rows = predict(pets_checkpoint, test, tmp_path / "out")
    assert sorted(Path(row[1]).name for row in rows) == ["cat-0.png", "cat-1.png", "dog-0.png", "dog-1.png"]
    assert {row[2] for row in rows} <= {"cat", "dog"}
    assert "predict_accuracy" not in json.loads((tmp_path / "out" / "predict_results.json").read_text())


def test_one_class_folder_of_test_images_is_scored(pets_checkpoint, tmp_path):
    rows = predict(pets_checkpoint, image_folders(tmp_path / "test", ["cat"], 4), tmp_path / "out")
    predicted = [row[2] for row in rows]
    assert len(predicted) == 4
    assert strict_json(tmp_path / "out" / "predict_results.json")["predict_accuracy"] == predicted.count("cat") / 4
