"""Fine-tune gMLP/aMLP for sequence classification on a GLUE task (from the Hub or a local GLUE folder) or on
your own csv/json files. Follows Transformers' examples/pytorch/text-classification/run_glue.py."""

import logging
import os
from dataclasses import dataclass, replace

import datasets
import numpy as np
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer, TrainingArguments
from transformers.hf_argparser import HfArg

from gmlp.tasks import glue, model_card, training
from gmlp.tasks.training import ModelArguments

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments(training.TextDataArguments):
    """What to train, evaluate and predict on."""

    task_name: str | None = HfArg(default=None, help=f"A GLUE task: {', '.join(glue.GLUE_TASKS)}.")
    dataset_name: str = HfArg(default="nyu-mll/glue", help="The Hub dataset of --task_name.")
    glue_dir: str | None = HfArg(default=None, help="A folder in GLUE's layout (<glue_dir>/SST-2/train.tsv, ...).")
    train_file: str | None = HfArg(default=None, help="A csv/json/jsonl/tsv/parquet file with a `label` column.")
    test_file: str | None = HfArg(default=None, help="Prediction file, same format (labels optional).")
    max_predict_samples: int | None = HfArg(default=None, help="Keep only this many test examples.")

    def __post_init__(self):
        if self.task_name is not None:
            self.task_name = glue.get_task(self.task_name).name
        if self.glue_dir is not None and self.task_name is None:
            raise ValueError("--glue_dir needs --task_name, to know which task folder to read.")
        if self.task_name is None and not (self.train_file or self.validation_file or self.test_file):
            raise ValueError("Give --task_name (a GLUE task) or --train_file / --validation_file / --test_file.")


def load_task_data(data_args, training_args, model_args, config):
    """The task and its splits: a GLUE task's (Hub or --glue_dir) with GLUE's label ids, local files' as read (see
    `label_data`). A custom task's labels are those of its first labelled file, or, with only a --test_file, the
    model's."""
    files = data_args.data_files()
    if not files:
        task = glue.get_task(data_args.task_name)
        if data_args.glue_dir is None:
            return task, training.load_hub_dataset(data_args, model_args, data_args.dataset_config_name or task.name)
        asked = {("train",): training_args.do_train, task.eval_splits: training_args.do_eval}
        asked[task.test_splits] = training_args.do_predict
        wanted = [split for splits, flag in asked.items() if flag for split in splits]
        return task, glue.load_glue_dir(data_args.glue_dir, task, wanted)
    raw = training.load_data_files(files, cache_dir=model_args.cache_dir)
    if "test" in raw and "label" in raw["test"].column_names:
        # Test labels are not used; `datasets` gives a test file without them the other files' label column.
        raw["test"] = raw["test"].remove_columns("label")
    if data_args.task_name:  # files have one validation and one test split, MNLI's too
        return replace(glue.get_task(data_args.task_name), eval_splits=("validation",), test_splits=("test",)), raw
    if labelled := [split for split in raw if split != "test"]:
        return glue.custom_task(raw[labelled[0]], files[labelled[0]]), raw
    if not model_args.model_name_or_path:
        raise ValueError("A --test_file alone needs --model_name_or_path, a classifier whose labels it predicts.")
    names = None if config.problem_type == "regression" or config.num_labels == 1 else config.id2label.values()
    columns = glue.infer_text_columns(raw["test"].column_names)
    return glue.TextClassificationTask("custom", columns, names and tuple(names), ids_allowed=False), raw


def label_data(raw: datasets.DatasetDict, task, label_names, data_args) -> datasets.DatasetDict:
    """The splits with their labels as the model's ids (of `label_names`): local files' encoded (an unknown label is
    an error naming its row), a GLUE task's then aligned with the model's where its order differs from GLUE's."""
    if files := data_args.data_files():
        if data_args.task_name is None:
            task = replace(task, label_names=label_names and tuple(label_names))
        raw = datasets.DatasetDict({s: glue.encode_task_labels(raw[s], task, files[s], s != "test") for s in raw})
    if label_names is None or list(label_names) == list(task.label_names):
        return raw
    label2id = {name: i for i, name in enumerate(label_names)}
    return datasets.DatasetDict(
        {s: d if s.startswith("test") else d.align_labels_with_mapping(label2id, "label") for s, d in raw.items()}
    )


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = training.parse_arguments(
        (ModelArguments, DataTrainingArguments, TrainingArguments), argv
    )
    config, tokenizer = training.load_config(model_args), training.load_tokenizer(model_args)
    task, raw = load_task_data(data_args, training_args, model_args, config)
    source = data_args.train_file or data_args.validation_file or f"GLUE {task.name}"
    names = None if task.is_regression else training.choose_labels(config, task.label_names, model_args, source)
    training.set_labels(config, names)
    config.finetuning_task = data_args.task_name
    raw = label_data(raw, task, names, data_args)
    max_seq_length = training.check_max_seq_length(data_args.max_seq_length, config, tokenizer)
    model = training.load_model(AutoModelForSequenceClassification, model_args, config, tokenizer)

    def tokenize(examples):
        padding = "max_length" if data_args.pad_to_max_length else False
        texts = [examples[column] for column in task.text_columns]
        return tokenizer(*texts, padding=padding, max_length=max_seq_length, truncation=True)

    with training_args.main_process_first(desc="tokenizing"):
        encoded = raw.map(tokenize, batched=True, num_proc=data_args.preprocessing_num_workers, desc="Tokenizing")

    train_dataset, eval_datasets = None, {}
    if training_args.do_train:
        train_dataset = training.take_split(encoded, "train", "--do_train", data_args.max_train_samples)
    for name in task.eval_splits if training_args.do_eval else ():
        eval_datasets[name] = training.take_split(encoded, name, "--do_eval", data_args.max_eval_samples)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=next(iter(eval_datasets.values()), None),
        processing_class=tokenizer,
        data_collator=training.CheckedCollator(
            DataCollatorWithPadding(tokenizer), input_ids=model.config.vocab_size, labels=names and len(names)
        ),
        compute_metrics=glue.glue_compute_metrics(data_args.task_name, task.is_regression, config.num_labels),
    )

    all_metrics = {}
    if training_args.do_train:
        training.train_and_save(trainer, len(train_dataset), (model_args, data_args, training_args))
    if training_args.do_eval:
        for name, eval_dataset in eval_datasets.items():
            metrics = {**trainer.evaluate(eval_dataset=eval_dataset), "eval_samples": len(eval_dataset)}
            all_metrics |= {f"{k}_mm": v for k, v in metrics.items()} if name.endswith("mismatched") else metrics
        training.record_metrics(trainer, "eval", all_metrics)
    for name in task.test_splits if training_args.do_predict else ():
        test_dataset = training.take_split(encoded, name, "--do_predict", data_args.max_predict_samples)
        logits = trainer.predict(test_dataset.remove_columns("label"), metric_key_prefix="predict").predictions
        predictions = np.squeeze(logits) if task.is_regression else np.argmax(logits, axis=1)
        suffix = "-mm" if name.endswith("mismatched") else ""
        path = os.path.join(training_args.output_dir, f"predict_results_{data_args.task_name or 'custom'}{suffix}.txt")
        if trainer.is_world_process_zero():  # GLUE's submission format: the label names, or the scores for regression
            texts = [f"{p:.3f}" if names is None else names[int(p)] for p in predictions]
            training.write_predictions(path, {"prediction": texts})
            logger.info(f"Wrote the {name} predictions to {path}")
    dataset = f"GLUE {data_args.task_name.upper()}" if data_args.task_name else data_args.train_file
    model_card.publish(trainer, model_args.model_name_or_path, task="text-classification", dataset=dataset)
    return all_metrics


if __name__ == "__main__":
    main()
