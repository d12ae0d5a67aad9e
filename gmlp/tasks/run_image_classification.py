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
from pathlib import Path

import datasets
from transformers import (
    AutoImageProcessor,
    AutoModelForImageClassification,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)

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
    CheckedCollator,
    choose_labels,
    load_model,
    parse_arguments,
    publish,
    record_metrics,
    require_columns,
    select_samples,
    set_labels,
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
    test_dir: str | None = field(
        default=None,
        metadata={"help": "A folder of images to label with --do_predict (in class folders, they are also scored)."},
    )
    image_column_name: str = field(default="image", metadata={"help": "The column holding the images."})
    label_column_name: str = field(default="label", metadata={"help": "The column holding the class labels."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only this many training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only this many evaluation examples."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only this many test images."})


def image_folder(path: str, split: str, cache_dir: str | None) -> datasets.Dataset:
    """The images below the folder `path` (labelled by their class folders, if they are in some)."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--{split}_dir {path!r} is not a folder (of images, in class folders).")
    # The imagefolder builder takes file patterns, not folders: every file below the folder.
    files = {split: os.path.join(path, "**")}
    return datasets.load_dataset("imagefolder", data_files=files, cache_dir=cache_dir)[split]


def load_image_data(data_args: DataTrainingArguments, training_args: TrainingArguments, cache_dir: str | None):
    """The splits the run needs: `train` and `validation` (a dataset without a validation split gets 15% of train
    held out) and, with --test_dir, `test`."""
    raw = datasets.DatasetDict()
    if data_args.dataset_name == DIGITS:
        if training_args.do_train or training_args.do_eval:
            raw = load_digits_dataset(seed=training_args.seed)
    elif data_args.dataset_name != "imagefolder":
        raw = datasets.load_dataset(data_args.dataset_name, cache_dir=cache_dir)
    for split, path in (("train", data_args.train_dir), ("validation", data_args.validation_dir)):
        if path is not None:
            raw[split] = image_folder(path, split, cache_dir)
    if "validation" not in raw and "train" in raw:
        held_out = raw["train"].train_test_split(test_size=0.15, seed=training_args.seed)
        raw["train"], raw["validation"] = held_out["train"], held_out["test"]
    if data_args.test_dir is not None:
        raw["test"] = image_folder(data_args.test_dir, "test", cache_dir)
    for split, flag in (("train", "--do_train"), ("validation", "--do_eval"), ("test", "--do_predict")):
        if getattr(training_args, flag[2:]) and split not in raw:
            raise ValueError(
                f"{flag} needs {split} images: --{split}_dir (a folder of images"
                + (", in class folders)" if split != "test" else ")")
                + f" or a dataset with a {split} split; the data has {list(raw) or 'none'}."
            )
    for split, dataset in raw.items():
        columns = (data_args.image_column_name,) + (() if split == "test" else (data_args.label_column_name,))
        require_columns(dataset, columns, f"The {split} data", hint="Pass --image_column_name / --label_column_name.")
    return raw


def label_images(raw, data_args, config, model_args) -> list[str]:
    """The model's label names, in id order (`choose_labels`: a checkpoint's own when it has them), with every
    labelled split's labels turned into those ids."""
    column = data_args.label_column_name
    for split, dataset in raw.items():
        if column in dataset.column_names and not isinstance(dataset.features[column], datasets.ClassLabel):
            raw[split] = dataset.class_encode_column(column)
    labelled = [split for split in raw if column in raw[split].column_names]
    if labelled and labelled[0] != "test":
        names = choose_labels(config, raw[labelled[0]].features[column].names, model_args, f"The {labelled[0]} data")
    elif model_args.model_name_or_path:
        names = [config.id2label[i] for i in range(config.num_labels)]
    else:
        raise ValueError("Images to label need a model that knows the labels: pass --model_name_or_path.")
    known = {name.lower() for name in names}
    for split in labelled:
        unknown = [name for name in raw[split].features[column].names if name.lower() not in known]
        if unknown:
            raise ValueError(f"The {split} data has labels the model does not know: {unknown} (its labels: {names}).")
        if raw[split].features[column].names != names:
            raw[split] = raw[split].align_labels_with_mapping({name: i for i, name in enumerate(names)}, column)
    return names


def write_image_predictions(path: str, dataset: datasets.Dataset, image_column: str, predictions, names) -> None:
    """`index<TAB>image<TAB>prediction` per image: its file (when known) and its predicted label."""
    files = dataset.cast_column(image_column, datasets.Image(decode=False))[image_column]
    rows = [
        f"{i}\t{image.get('path') or ''}\t{names[int(label)]}\n"
        for i, (image, label) in enumerate(zip(files, predictions))
    ]
    Path(path).write_text("index\timage\tprediction\n" + "".join(rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_arguments(
        (VisionModelArguments, DataTrainingArguments, TrainingArguments), argv
    )
    # The image column is only turned into pixel_values by the on-the-fly transform, so the Trainer must not drop it.
    training_args.remove_unused_columns = False
    setup_logging(training_args)
    set_seed(training_args.seed)

    raw = load_image_data(data_args, training_args, model_args.cache_dir)
    config = load_vision_config(model_args)
    label_names = label_images(raw, data_args, config, model_args)
    set_labels(config, label_names)
    if model_args.model_name_or_path:
        image_processor = AutoImageProcessor.from_pretrained(model_args.model_name_or_path, **model_args.hub_kwargs())
    else:
        image_processor = image_processor_for(config)
    model = load_model(AutoModelForImageClassification, model_args, config)

    transform = image_transform(image_processor, data_args.image_column_name, data_args.label_column_name)
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples}
    limits["test"] = data_args.max_predict_samples
    splits = {split: select_samples(dataset, limits[split]) for split, dataset in raw.items() if split in limits}
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=splits["train"].with_transform(transform) if training_args.do_train else None,
        eval_dataset=splits["validation"].with_transform(transform) if training_args.do_eval else None,
        processing_class=image_processor,
        data_collator=CheckedCollator(default_data_collator, labels=config.num_labels),
        compute_metrics=accuracy_metric(),
    )

    metrics = {}
    if training_args.do_train:
        train_and_save(trainer, len(splits["train"]), (model_args, data_args, training_args))
    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["eval_samples"] = len(splits["validation"])
        record_metrics(trainer, "eval", metrics)
    if training_args.do_predict:
        output = trainer.predict(splits["test"].with_transform(transform), metric_key_prefix="predict")
        record_metrics(trainer, "predict", {**output.metrics, "predict_samples": len(splits["test"])})
        if trainer.is_world_process_zero():
            path = os.path.join(training_args.output_dir, "predict_results.txt")
            predictions = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
            write_image_predictions(
                path, splits["test"], data_args.image_column_name, predictions.argmax(axis=1), label_names
            )
            logger.info(f"Wrote the test images' predicted labels to {path}")
    publish(trainer, training_args, model_args, task="image-classification", dataset=data_args.dataset_name)
    return metrics


if __name__ == "__main__":
    main()
