"""Train or fine-tune a gMLP image classifier (Section 3 of the paper) on scikit-learn's digits (the default), a Hub
dataset or folders of class folders. Follows Transformers' examples/pytorch/image-classification/."""

import logging
import os
from dataclasses import dataclass

import datasets
from transformers import AutoImageProcessor, AutoModelForImageClassification, Trainer
from transformers.data.data_collator import default_data_collator
from transformers.hf_argparser import HfArg

from gmlp.configuration_gmlp import VISION_PRESETS, GMLPVisionConfig
from gmlp.tasks import checks, data, labels, loading, model_card, setup, training
from gmlp.tasks import image_classification as images
from gmlp.tasks.collators import CheckedCollator
from gmlp.tasks.errors import script_main

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments:
    """What to train, evaluate and predict on."""

    dataset_name: str | None = HfArg(
        default=None,
        help="sklearn-digits (offline; the default), a Hub dataset, or imagefolder (the default with dirs).",
    )
    train_dir: str | None = HfArg(default=None, help="A folder of training images, one folder per class.")
    validation_dir: str | None = HfArg(default=None, help="A folder of evaluation images, same layout.")
    test_dir: str | None = HfArg(default=None, help="Images to label with --do_predict (scored in class folders).")
    image_column_name: str = HfArg(default="image", help="The column holding the images.")
    label_column_name: str = HfArg(default="label", help="The column holding the class labels.")
    max_train_samples: int | None = HfArg(default=None, help="Keep only this many training examples.")
    max_eval_samples: int | None = HfArg(default=None, help="Keep only this many evaluation examples.")
    max_predict_samples: int | None = HfArg(default=None, help="Keep only this many test images.")

    def __post_init__(self):
        if self.dataset_name is None:  # folders alone are the data, never mixed with the digits' other splits
            self.dataset_name = "imagefolder" if self.folders() else images.DIGITS

    def folders(self) -> dict[str, tuple[str, str]]:
        """The image folders given, by split: (flag, folder)."""
        flags = {"train": ("--train_dir", self.train_dir), "validation": ("--validation_dir", self.validation_dir)}
        flags["test"] = ("--test_dir", self.test_dir)
        return {split: (flag, folder) for split, (flag, folder) in flags.items() if folder}


def load_image_data(data_args: DataTrainingArguments, training_args, model_args) -> datasets.DatasetDict:
    """The splits: train, validation (else 15% of train held out) and test (--test_dir, or the dataset's own)."""
    raw = datasets.DatasetDict()
    if data_args.dataset_name == images.DIGITS:
        if training_args.do_train or training_args.do_eval:
            raw = images.load_digits_dataset(seed=training_args.seed)
    elif data_args.dataset_name != "imagefolder":
        raw = data.load_hub_dataset(data_args, model_args)
    for split, (flag, folder) in data_args.folders().items():
        if split in raw:
            logger.warning(f"{flag} {folder} replaces the {split} split of --dataset_name {data_args.dataset_name}.")
        raw[split] = images.load_image_folder(folder, flag, split, cache_dir=model_args.cache_dir)
    if "validation" not in raw and "train" in raw:
        held_out = raw["train"].train_test_split(test_size=0.15, seed=training_args.seed)
        raw["train"], raw["validation"] = held_out["train"], held_out["test"]
    for split, dataset in raw.items():
        columns = [data_args.image_column_name] + ([data_args.label_column_name] if split != "test" else [])
        hint = "Pass --image_column_name / --label_column_name."
        data.require_columns(dataset, columns, f"The {split} data", hint=hint)
    return raw


def run(argv: list[str]) -> dict:
    """The script on the arguments `argv`: the metrics of its evaluation."""
    model_args, data_args, training_args = setup.start(DataTrainingArguments, argv)
    checks.check_arguments(training_args, loads=[model_args.model_name_or_path])
    evaluation = images.image_evaluation()
    checks.check_evaluation_arguments(training_args, evaluation.metric_names, script="run_image_classification.py")
    loading.check_named_paths(model_args, data_args, training_args, presets=VISION_PRESETS)
    setup.prepare_run(training_args)
    # The transform reads the image column, so the Trainer must not drop it.
    training_args.remove_unused_columns = False
    raw = load_image_data(data_args, training_args, model_args)
    config = loading.load_config(model_args, GMLPVisionConfig, VISION_PRESETS)
    column, trains = data_args.label_column_name, training_args.do_train
    label_names = labels.label_images(raw, column, config, model_args=model_args, training=trains)
    labels.set_labels(config, label_names)
    splits = {}
    for split, flag, limit, given in (
        ("train", "--do_train", data_args.max_train_samples, "--train_dir"),
        ("validation", "--do_eval", data_args.max_eval_samples, "--validation_dir"),
        ("test", "--do_predict", data_args.max_predict_samples, "--test_dir"),
    ):
        if getattr(training_args, flag[2:]):
            splits[split] = data.take_split(raw, split, flag, limit, source_flag=given)
    if model_args.model_name_or_path:
        name, load = model_args.model_name_or_path, AutoImageProcessor.from_pretrained
        image_processor = loading.from_name(load, name, "--model_name_or_path", **model_args.hub_kwargs())
    else:
        image_processor = images.image_processor_for(config)
    model = loading.load_model(AutoModelForImageClassification, model_args, config)

    def transform(batch):  # a batch of images as the model's pixel_values (and labels), when it is read
        pictures = [image.convert("RGB") for image in batch[data_args.image_column_name]]
        prepared = {"pixel_values": image_processor(pictures, return_tensors="pt")["pixel_values"]}
        targets = batch.get(data_args.label_column_name)
        return prepared if targets is None else prepared | {"labels": targets}

    inputs = {split: dataset.with_transform(transform) for split, dataset in splits.items()}
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=inputs.get("train"),
        eval_dataset=inputs.get("validation"),
        processing_class=image_processor,
        data_collator=CheckedCollator(default_data_collator, labels=config.num_labels),
        compute_metrics=evaluation.compute_metrics,
        preprocess_logits_for_metrics=evaluation.preprocess_logits_for_metrics,
    )
    metrics = {}
    if training_args.do_train:
        train_samples = len(splits["train"])
        training.train_and_save(trainer, model_args=model_args, data_args=data_args, train_samples=train_samples)
    if training_args.do_eval:
        metrics = {**trainer.evaluate(), "eval_samples": len(splits["validation"])}
        training.record_metrics(trainer, "eval", metrics)
    if training_args.do_predict:
        output = trainer.predict(inputs["test"], metric_key_prefix="predict")
        training.record_metrics(trainer, "predict", {**output.metrics, "predict_samples": len(splits["test"])})
        logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
        path = os.path.join(training_args.output_dir, "predict_results.txt")
        if trainer.is_world_process_zero():  # each image's file (when known) and predicted label
            column = data_args.image_column_name
            files = splits["test"].cast_column(column, datasets.Image(decode=False))[column]
            predicted = [label_names[int(p)] for p in logits.argmax(1)]
            training.write_predictions(path, {"image": [f.get("path") or "" for f in files], "prediction": predicted})
            logger.info(f"Wrote the test images' predicted labels to {path}")
    trained_on = data_args.train_dir or data_args.dataset_name
    model_card.publish(trainer, model_args.model_name_or_path, task="image-classification", dataset=trained_on)
    return metrics


main = script_main(run)

if __name__ == "__main__":
    main()
