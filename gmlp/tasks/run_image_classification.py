"""Train or fine-tune a gMLP image classifier (Section 3 of the paper) with the stock Trainer. Follows Transformers'
examples/pytorch/image-classification/run_image_classification.py.

Data: `--dataset_name sklearn-digits` (the default: scikit-learn's handwritten digits, offline), a Hub image
dataset, or a local folder per class (`--dataset_name imagefolder --train_dir ... --validation_dir ...`).

    python run_image_classification.py --config_name gmlp-tiny --output_dir gmlp-tiny-digits \
        --do_train --do_eval --num_train_epochs 30 --learning_rate 2e-3 --per_device_train_batch_size 64
"""

import logging
import os
from dataclasses import dataclass, field

import datasets
from transformers import AutoImageProcessor, AutoModelForImageClassification, Trainer, TrainingArguments, set_seed

import gmlp  # noqa: F401  (registers gMLP with the Auto classes)
from gmlp.tasks.image_classification import (
    DIGITS,
    VisionModelArguments,
    accuracy_metric,
    image_processor_for,
    image_transform,
    load_digits_dataset,
    load_vision_config,
)
from gmlp.tasks.training import (
    load_model,
    parse_arguments,
    publish,
    record_metrics,
    require_columns,
    select_samples,
    setup_logging,
    train_and_save,
)

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments:
    """What to train and evaluate on."""

    dataset_name: str = field(
        default=DIGITS,
        metadata={"help": f"`{DIGITS}` (offline), a Hub image dataset, or `imagefolder` with --train_dir."},
    )
    train_dir: str | None = field(
        default=None, metadata={"help": "A folder of training images, one folder per class."}
    )
    validation_dir: str | None = field(default=None, metadata={"help": "A folder of evaluation images, same layout."})
    image_column_name: str = field(default="image", metadata={"help": "The column holding the images."})
    label_column_name: str = field(default="label", metadata={"help": "The column holding the class labels."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only this many training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only this many evaluation examples."})


def load_image_data(data_args: DataTrainingArguments, seed: int, cache_dir: str | None) -> datasets.DatasetDict:
    """The `train` and `validation` splits; a dataset without a validation split gets 15% of train held out."""
    if data_args.dataset_name == DIGITS:
        return load_digits_dataset(seed=seed)
    folders = {
        split: path
        for split, path in (("train", data_args.train_dir), ("validation", data_args.validation_dir))
        if path is not None
    }
    for split, path in folders.items():
        if not os.path.isdir(path):
            raise FileNotFoundError(f"--{split}_dir {path!r} is not a folder (of class folders of images).")
    # The imagefolder builder takes file patterns, not folders: every file below each folder.
    data_files = {split: os.path.join(path, "**") for split, path in folders.items()}
    raw = datasets.load_dataset(data_args.dataset_name, data_files=data_files or None, cache_dir=cache_dir)
    if "validation" not in raw:
        held_out = raw["train"].train_test_split(test_size=0.15, seed=seed)
        raw = datasets.DatasetDict({"train": held_out["train"], "validation": held_out["test"]})
    require_columns(
        raw["train"],
        (data_args.image_column_name, data_args.label_column_name),
        "The dataset",
        hint="Pass --image_column_name / --label_column_name.",
    )
    return raw


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_arguments(
        (VisionModelArguments, DataTrainingArguments, TrainingArguments), argv
    )
    # The image column is only turned into pixel_values by the on-the-fly transform, so the Trainer must not drop it.
    training_args.remove_unused_columns = False
    setup_logging(training_args)
    set_seed(training_args.seed)

    raw = load_image_data(data_args, training_args.seed, model_args.cache_dir)
    label_names = raw["train"].features[data_args.label_column_name].names
    config = load_vision_config(
        model_args,
        num_labels=len(label_names),
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
    )
    if model_args.model_name_or_path:
        image_processor = AutoImageProcessor.from_pretrained(model_args.model_name_or_path, **model_args.hub_kwargs())
    else:
        image_processor = image_processor_for(config)
    model = load_model(AutoModelForImageClassification, model_args, config)

    transform = image_transform(image_processor, data_args.image_column_name, data_args.label_column_name)
    train_dataset = select_samples(raw["train"], data_args.max_train_samples).with_transform(transform)
    eval_dataset = select_samples(raw["validation"], data_args.max_eval_samples).with_transform(transform)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset if training_args.do_eval else None,
        processing_class=image_processor,
        compute_metrics=accuracy_metric(),
    )

    metrics = {}
    if training_args.do_train:
        train_and_save(trainer, training_args, len(train_dataset))
    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["eval_samples"] = len(eval_dataset)
        record_metrics(trainer, "eval", metrics)
    publish(trainer, training_args, model_args, task="image-classification", dataset=data_args.dataset_name)
    return metrics


if __name__ == "__main__":
    main()
