"""Pieces of `run_image_classification.py`: image data (scikit-learn's digits offline, or any `datasets` image
dataset), the image processor for a gMLP vision config, and the Trainer's accuracy."""

from dataclasses import dataclass, field

import datasets
import numpy as np
from transformers import ViTImageProcessorPil

from ..configuration_gmlp import VISION_PRESETS, GMLPVisionConfig
from .training import ModelArguments, load_config

DIGITS = "sklearn-digits"


@dataclass
class VisionModelArguments(ModelArguments):
    config_name: str | None = field(
        default=None,
        metadata={
            "help": f"A vision preset ({', '.join(VISION_PRESETS)}) or a config directory / Hub id, to train from "
            "scratch."
        },
    )


def load_digits_dataset(validation_fraction: float = 0.2, seed: int = 0) -> datasets.DatasetDict:
    """scikit-learn's 1,797 handwritten digits (8x8 pixels, 17 grey levels) as RGB images with a `ClassLabel`,
    split into `train` and `validation` with the same share of every digit in both."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    grey = np.round(digits.images * (255 / 16)).astype(np.uint8)
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=[str(digit) for digit in digits.target_names]),
        }
    )
    dataset = datasets.Dataset.from_dict(
        {"image": [np.repeat(image[:, :, None], 3, axis=2) for image in grey], "label": digits.target.tolist()},
        features=features,
    )
    split = dataset.train_test_split(test_size=validation_fraction, seed=seed, stratify_by_column="label")
    return datasets.DatasetDict({"train": split["train"], "validation": split["test"]})


def load_vision_config(model_args: VisionModelArguments, **task_kwargs):
    """The model config: a vision preset, a config path / Hub id, or the checkpoint's, then `--config_overrides`."""
    return load_config(model_args, GMLPVisionConfig, VISION_PRESETS, **task_kwargs)


def image_processor_for(config: GMLPVisionConfig, **overrides) -> ViTImageProcessorPil:
    """ViT's image processor, resizing to the model's `image_size` (PIL backend: needs no torchvision; it saves as
    `ViTImageProcessor`, which loads with either backend)."""
    return ViTImageProcessorPil(size={"height": config.image_size, "width": config.image_size}, **overrides)


def image_transform(image_processor, image_column: str = "image", label_column: str = "label"):
    """A `Dataset.set_transform` function turning a batch of images into `pixel_values` (and `labels`)."""

    def transform(batch):
        images = [image.convert("RGB") for image in batch[image_column]]
        prepared = {"pixel_values": image_processor(images, return_tensors="pt")["pixel_values"]}
        if label_column in batch:
            prepared["labels"] = batch[label_column]
        return prepared

    return transform


def accuracy_metric():
    """A `compute_metrics` function for the Trainer: top-1 accuracy."""

    def compute_metrics(eval_prediction):
        logits = eval_prediction.predictions
        logits = logits[0] if isinstance(logits, tuple) else logits
        return {"accuracy": float(np.mean(np.argmax(logits, axis=1) == eval_prediction.label_ids))}

    return compute_metrics


__all__ = [
    "DIGITS",
    "VisionModelArguments",
    "accuracy_metric",
    "image_processor_for",
    "image_transform",
    "load_digits_dataset",
    "load_vision_config",
]
