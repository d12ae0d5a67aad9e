"""Pieces of `run_image_classification.py`: scikit-learn's digits, labels through the model's label map, the image
processor for a gMLP vision config and the evaluation's metrics."""

import os
from pathlib import Path

import datasets
import numpy as np
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder
from transformers import ViTImageProcessorPil

from .arguments import ModelArguments
from .evaluation import Evaluation
from .labels import choose_labels
from .metrics import accuracy

DIGITS = "sklearn-digits"


def load_digits_dataset(validation_fraction: float = 0.2, seed: int = 0) -> datasets.DatasetDict:
    """scikit-learn's 1,797 handwritten digits (8x8 pixels, 17 grey levels) as RGB images with a `ClassLabel`, split
    into `train` and `validation` with the same share of every digit in both."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    grey = np.round(digits.images * (255 / 16)).astype(np.uint8)
    names = [str(digit) for digit in digits.target_names]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    images = [np.repeat(image[:, :, None], 3, axis=2) for image in grey]
    dataset = datasets.Dataset.from_dict({"image": images, "label": digits.target.tolist()}, features=features)
    split = dataset.train_test_split(test_size=validation_fraction, seed=seed, stratify_by_column="label")
    return datasets.DatasetDict({"train": split["train"], "validation": split["test"]})


def load_image_folder(folder: str, flag: str, split: str, cache_dir: str | None = None) -> datasets.Dataset:
    """The images below `folder` (given as `flag`) as the `split` split, labelled by their class folders if they are
    in some (one class folder is a label too); an error naming the flag and the folder when it holds no images."""
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {folder}: no such folder.")
    if not any(path.suffix.lower() in ImageFolder.EXTENSIONS for path in Path(folder).rglob("*")):
        raise ValueError(f"{flag} {folder} holds no image files (.png, .jpg, ...), in it or in its class folders.")
    # `imagefolder` labels images by their folders only where there are two or more; one is a class all the same.
    in_class_folders = all(entry.is_dir() for entry in os.scandir(folder) if not entry.name.startswith("."))
    labels = {"drop_labels": False} if in_class_folders else {}
    files = {split: os.path.join(folder, "**")}  # the builder takes patterns: every file below
    return datasets.load_dataset("imagefolder", data_files=files, cache_dir=cache_dir, **labels)[split]


def label_images(
    raw: datasets.DatasetDict, column: str, config, model_args: ModelArguments, *, training: bool
) -> list[str]:
    """The model's label names, in id order (`choose_labels`: a checkpoint's own when it names them; `training`:
    whether the run trains), with every labelled split's labels turned into those ids (an error names the labels the
    model does not know)."""
    for split, dataset in raw.items():
        if column in dataset.column_names and not isinstance(dataset.features[column], datasets.ClassLabel):
            raw[split] = dataset.class_encode_column(column)
    labelled = [split for split in raw if column in raw[split].column_names]
    if labelled and labelled[0] != "test":
        source = f"The {labelled[0]} data"
        names = choose_labels(config, raw[labelled[0]].features[column].names, model_args, source, training=training)
    elif model_args.model_name_or_path:
        names = [config.id2label[i] for i in range(config.num_labels)]
    else:
        raise ValueError("Images to label need a model that knows the labels: pass --model_name_or_path.")
    for split in labelled:
        unknown = [name for name in raw[split].features[column].names if name.lower() not in map(str.lower, names)]
        if unknown:
            raise ValueError(
                f"The {split} data has labels the model does not know: {unknown} (its labels: {names}). Give every split the same classes: the {split} data's class folders (or labels) must be among the model's."
            )
        if raw[split].features[column].names != names:
            raw[split] = raw[split].align_labels_with_mapping({name: i for i, name in enumerate(names)}, column)
    return names


def image_processor_for(config) -> ViTImageProcessorPil:
    """ViT's image processor, resizing to the model's `image_size` (PIL backend: needs no torchvision; it saves as
    `ViTImageProcessor`, which loads with either backend)."""
    return ViTImageProcessorPil(size={"height": config.image_size, "width": config.image_size})


def image_evaluation() -> Evaluation:
    """The evaluation's metrics: the loss, and the top-1 accuracy."""
    return Evaluation(
        "single_label_classification",
        lambda logits, labels: accuracy(np.argmax(logits, axis=1), labels),
        ("accuracy",),
    )
