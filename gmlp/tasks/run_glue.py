"""Fine-tune gMLP/aMLP for sequence classification on a GLUE task (from the Hub or a local GLUE folder) or on
your own csv/json files. Follows Transformers' examples/pytorch/text-classification/run_glue.py.
"""

import dataclasses
import logging
import os
from dataclasses import dataclass, field

import datasets
import numpy as np
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

import gmlp  # noqa: F401  (registers gMLP with the Auto classes)
from gmlp.tasks.glue import (
    GLUE_TASKS,
    TextClassificationTask,
    custom_task,
    encode_task_labels,
    get_task,
    glue_compute_metrics,
    infer_text_columns,
    load_glue_dir,
    metric_config,
    write_predictions,
)
from gmlp.tasks.training import (
    CheckedCollator,
    ModelArguments,
    check_max_seq_length,
    check_vocabulary,
    choose_labels,
    load_config,
    load_data_files,
    load_dataset_or_saved,
    load_model,
    load_tokenizer,
    parse_arguments,
    publish,
    record_metrics,
    select_samples,
    set_labels,
    setup_logging,
    train_and_save,
)

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments:
    """What to train, evaluate and predict on."""

    task_name: str | None = field(default=None, metadata={"help": f"A GLUE task: {', '.join(GLUE_TASKS)}."})
    dataset_name: str = field(default="nyu-mll/glue", metadata={"help": "The Hub dataset of --task_name."})
    glue_dir: str | None = field(
        default=None,
        metadata={"help": "A local GLUE folder in GLUE's layout (<glue_dir>/SST-2/train.tsv, dev.tsv, ...)."},
    )
    train_file: str | None = field(
        default=None, metadata={"help": "A csv/json/jsonl/tsv/parquet training file with a `label` column."}
    )
    validation_file: str | None = field(default=None, metadata={"help": "Evaluation file, same format."})
    test_file: str | None = field(default=None, metadata={"help": "Prediction file, same format (labels optional)."})
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Tokens per example (longer ones are truncated); at most the model's n."}
    )
    pad_to_max_length: bool = field(
        default=False, metadata={"help": "Pad every example to max_seq_length instead of to the longest in its batch."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only this many training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only this many evaluation examples."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only this many test examples."})

    def __post_init__(self):
        if self.task_name is not None:
            self.task_name = get_task(self.task_name).name
        if self.glue_dir is not None and self.task_name is None:
            raise ValueError("--glue_dir needs --task_name, to know which task folder to read.")
        if self.task_name is None and not (self.train_file or self.validation_file or self.test_file):
            raise ValueError(
                "Give --task_name (a GLUE task) or --train_file / --validation_file / --test_file (your own data)."
            )


def load_task_data(data_args: DataTrainingArguments, training_args: TrainingArguments, model_args, config):
    """The task and its splits (train, the evaluation splits, the test splits), with the Hub's columns; labelled
    splits of a GLUE task carry its labels as ids, those of custom files their labels as read (see `label_data`).

    A custom task's labels are those of its first labelled file, or, with only a --test_file, the model's."""
    files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    if any(files.values()):
        raw = load_data_files(files, cache_dir=model_args.cache_dir)
        if "test" in raw and "label" in raw["test"].column_names:
            # Test labels are not used; `datasets` gives a test file without them the other files' label column.
            raw["test"] = raw["test"].remove_columns("label")
        labelled = [split for split in raw if split != "test"]
        if data_args.task_name:
            task = get_task(data_args.task_name)
            raw = datasets.DatasetDict(
                {
                    split: encode_task_labels(dataset, task, files[split], labelled=split != "test")
                    for split, dataset in raw.items()
                }
            )
        elif labelled:
            task = custom_task(raw[labelled[0]], files[labelled[0]])
        elif model_args.model_name_or_path:
            regression = config.problem_type == "regression" or config.num_labels == 1
            task = TextClassificationTask(
                name="custom",
                text_columns=infer_text_columns(raw["test"].column_names),
                label_names=None if regression else tuple(config.id2label[i] for i in range(config.num_labels)),
                ids_allowed=False,
            )
        else:
            raise ValueError(
                "A --test_file alone needs --model_name_or_path (a classifier whose labels it predicts), or a "
                "--train_file / --validation_file with labels."
            )
        return task, raw, ("validation",), ("test",)
    task = get_task(data_args.task_name)
    if data_args.glue_dir is not None:
        wanted = (["train"] if training_args.do_train else []) + (
            list(task.eval_splits) if training_args.do_eval else []
        )
        wanted += list(task.test_splits) if training_args.do_predict else []
        raw = load_glue_dir(data_args.glue_dir, task, wanted)
    else:
        raw = load_dataset_or_saved(
            data_args.dataset_name, task.name, cache_dir=model_args.cache_dir, token=model_args.token
        )
    return task, raw, task.eval_splits, task.test_splits


def label_data(raw: datasets.DatasetDict, task, label_names, data_args) -> datasets.DatasetDict:
    """The splits with their labels as the model's ids: a GLUE task's aligned with the model's label map (when its
    order differs from GLUE's), custom files' encoded by it (an unknown label is an error naming its row)."""
    if data_args.task_name is None:
        files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
        task = dataclasses.replace(task, label_names=task.label_names if label_names is None else tuple(label_names))
        return datasets.DatasetDict(
            {
                split: encode_task_labels(dataset, task, files[split], labelled=split != "test")
                for split, dataset in raw.items()
            }
        )
    if label_names is None or list(label_names) == list(task.label_names):
        return raw
    label2id = {name: i for i, name in enumerate(label_names)}
    return datasets.DatasetDict(
        {
            split: dataset if split.startswith("test") else dataset.align_labels_with_mapping(label2id, "label")
            for split, dataset in raw.items()
        }
    )


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, DataTrainingArguments, TrainingArguments), argv
    )
    setup_logging(training_args)
    set_seed(training_args.seed)

    config = load_config(model_args)
    task, raw, eval_splits, test_splits = load_task_data(data_args, training_args, model_args, config)
    source = data_args.train_file or data_args.validation_file or f"GLUE {task.name}"
    label_names = None if task.is_regression else choose_labels(config, list(task.label_names), model_args, source)
    set_labels(config, label_names)
    config.finetuning_task = data_args.task_name
    raw = label_data(raw, task, label_names, data_args)
    tokenizer = load_tokenizer(model_args)
    max_seq_length = check_max_seq_length(data_args.max_seq_length, config, tokenizer)
    model = load_model(AutoModelForSequenceClassification, model_args, config)
    check_vocabulary(tokenizer, model)

    def tokenize(examples):
        texts = [examples[column] for column in task.text_columns]
        padding = "max_length" if data_args.pad_to_max_length else False
        return tokenizer(*texts, padding=padding, max_length=max_seq_length, truncation=True)

    with training_args.main_process_first(desc="tokenizing"):
        encoded = raw.map(tokenize, batched=True, desc="Tokenizing")

    def split_or_fail(split: str, flag: str) -> datasets.Dataset:
        if split not in encoded:
            raise ValueError(f"{flag} needs a {split} split; the data has {list(encoded)}.")
        return encoded[split]

    train_dataset = None
    if training_args.do_train:
        train_dataset = select_samples(split_or_fail("train", "--do_train"), data_args.max_train_samples)
    eval_datasets = {}
    if training_args.do_eval:
        eval_datasets = {
            split: select_samples(split_or_fail(split, "--do_eval"), data_args.max_eval_samples)
            for split in eval_splits
        }
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=next(iter(eval_datasets.values()), None),
        processing_class=tokenizer,
        data_collator=CheckedCollator(
            DataCollatorWithPadding(tokenizer),
            input_ids=model.config.vocab_size,
            labels=None if task.is_regression else model.config.num_labels,
        ),
        compute_metrics=glue_compute_metrics(
            metric_config(data_args.task_name, task.is_regression, config.num_labels), task.is_regression
        ),
    )

    all_metrics = {}
    if training_args.do_train:
        train_and_save(trainer, len(train_dataset), (model_args, data_args, training_args))
    if training_args.do_eval:
        for split, eval_dataset in eval_datasets.items():
            metrics = trainer.evaluate(eval_dataset=eval_dataset)
            metrics["eval_samples"] = len(eval_dataset)
            if split.endswith("mismatched"):
                metrics = {f"{key}_mm": value for key, value in metrics.items()}
            all_metrics.update(metrics)
        record_metrics(trainer, "eval", all_metrics)
    if training_args.do_predict:
        for split in test_splits:
            test_dataset = select_samples(split_or_fail(split, "--do_predict"), data_args.max_predict_samples)
            logits = trainer.predict(test_dataset.remove_columns("label"), metric_key_prefix="predict").predictions
            predictions = np.squeeze(logits) if task.is_regression else np.argmax(logits, axis=1)
            name = (data_args.task_name or "custom") + ("-mm" if split.endswith("mismatched") else "")
            if trainer.is_world_process_zero():
                path = os.path.join(training_args.output_dir, f"predict_results_{name}.txt")
                write_predictions(path, predictions, label_names)
                logger.info(f"Wrote the {split} predictions to {path}")
    publish(
        trainer,
        training_args,
        model_args,
        task="text-classification",
        dataset=f"GLUE {data_args.task_name.upper()}" if data_args.task_name else data_args.train_file,
    )
    return all_metrics


if __name__ == "__main__":
    main()
