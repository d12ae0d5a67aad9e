"""Data, image processor and metrics of `run_image_classification.py`."""

import os
from pathlib import Path

import datasets
import numpy as np
from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder
from transformers import ViTImageProcessorPil

from .errors import ScriptError
from .evaluation import Evaluation
from .metrics import accuracy

DIGITS = "sklearn-digits"


def load_digits_dataset(validation_fraction: float = 0.2, seed: int = 0) -> datasets.DatasetDict:
    """scikit-learn's 1,797 8x8 handwritten digits as RGB images, split into `train` and `validation` by digit."""
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
    """The images below `folder` (given as `flag`) as the `split` split, labelled by their class folders if any."""
    if not any(path.suffix.lower() in ImageFolder.EXTENSIONS for path in Path(folder).rglob("*")):
        raise ScriptError(f"{flag} {folder} holds no image files (.png, .jpg, ...), in it or in its class folders.")
    # `imagefolder` labels images by their folders only where there are two or more; one is a class all the same.
    in_class_folders = all(entry.is_dir() for entry in os.scandir(folder) if not entry.name.startswith("."))
    labels = {"drop_labels": False} if in_class_folders else {}
    files = {split: os.path.join(folder, "**")}  # the builder takes patterns: every file below
    return datasets.load_dataset("imagefolder", data_files=files, cache_dir=cache_dir, **labels)[split]


def image_processor_for(config) -> ViTImageProcessorPil:
    """ViT's image processor (PIL backend: no torchvision), resizing to the model's `image_size`."""
    return ViTImageProcessorPil(size={"height": config.image_size, "width": config.image_size})


def image_evaluation() -> Evaluation:
    """The loss and the top-1 accuracy."""
    scores = lambda logits, labels: accuracy(np.argmax(logits, axis=1), labels)
    return Evaluation("single_label_classification", scores, ("accuracy",))
