"""Fine-tune gMLP/aMLP for sequence classification on a GLUE task (from the Hub or a local GLUE folder) or on
your own csv/json files. Follows Transformers' examples/pytorch/text-classification/run_glue.py."""

import logging
import os
from dataclasses import dataclass, replace

import datasets
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer, TrainingArguments
from transformers.hf_argparser import HfArg

from gmlp.tasks import data, evaluation, glue, labels, loading, model_card, training
from gmlp.tasks.arguments import ModelArguments, TextDataArguments, parse_arguments
from gmlp.tasks.collators import CheckedCollator, SentenceFlattening

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments(TextDataArguments):
    """What to train, evaluate and predict on."""

    task_name: str | None = HfArg(default=None, help=f"A GLUE task: {', '.join(glue.GLUE_TASKS)}.")
    dataset_name: str = HfArg(default="nyu-mll/glue", help="The Hub dataset of --task_name.")
    glue_dir: str | None = HfArg(default=None, help="A folder in GLUE's layout (<glue_dir>/SST-2/train.tsv, ...).")
    train_file: str | None = HfArg(
        default=None, help="A csv/json/jsonl/tsv/parquet file with a `label` column (in JSON, a list: multi-label)."
    )
    test_file: str | None = HfArg(default=None, help="Prediction file, same format (labels optional).")
    max_predict_samples: int | None = HfArg(default=None, help="Keep only this many test examples.")
    padding_free: bool = HfArg(
        default=False,
        help="Padding-free batches: each batch's examples in one row, no padding (DataCollatorWithFlattening); the "
        "model keeps the examples apart. Faster where lengths vary.",
    )
    text_column_names: str | None = HfArg(
        default=None,
        aliases=["--text_columns"],
        help="Your files' text columns, comma-separated, e.g. question,passage (default: sentence1/sentence2, else "
        "the first two columns of text that are not ids).",
    )

    def __post_init__(self):
        if self.task_name is not None:
            self.task_name = glue.get_task(self.task_name).name
        if self.glue_dir is not None and self.task_name is None:
            raise ValueError("--glue_dir needs --task_name, to know which task folder to read.")
        if self.task_name is None and not self.data_files():
            raise ValueError("Give --task_name (a GLUE task) or --train_file / --validation_file / --test_file.")
        if self.padding_free and self.pad_to_max_length:
            raise ValueError("--padding_free batches have no padding: leave out --pad_to_max_length.")
        if self.text_column_names is not None and not self.data_files():
            raise ValueError(
                "--text_column_names names the text columns of your own files (--train_file, ...); a GLUE task read "
                "from the Hub or --glue_dir has its own."
            )

    def text_columns(self) -> tuple[str, ...] | None:
        """The columns of --text_column_names, if given."""
        if self.text_column_names is None:
            return None
        return tuple(column.strip() for column in self.text_column_names.split(",") if column.strip())


def load_task_data(data_args, training_args, model_args, config):
    """The task and its splits: a GLUE task's (Hub or --glue_dir) with GLUE's label ids, local files' as read (see
    `label_data`). A custom task's labels are those of its first labelled file, or, with only a --test_file, the
    model's."""
    files = data_args.data_files()
    if not files:
        task = glue.get_task(data_args.task_name)
        if data_args.glue_dir is None:
            return task, data.load_hub_dataset(data_args, model_args, data_args.dataset_config_name or task.name)
        asked = {("train",): training_args.do_train, task.eval_splits: training_args.do_eval}
        asked[task.test_splits] = training_args.do_predict
        wanted = [split for splits, flag in asked.items() if flag for split in splits]
        return task, glue.load_glue_dir(data_args.glue_dir, task, wanted)
    raw = data.load_data_files(files, cache_dir=model_args.cache_dir)
    if "test" in raw and "label" in raw["test"].column_names:
        raw["test"] = raw["test"].remove_columns("label")  # test labels are not used
    named = data_args.text_columns()
    if data_args.task_name:  # files have one validation and one test split, MNLI's too
        task = replace(glue.get_task(data_args.task_name), eval_splits=("validation",), test_splits=("test",))
        return (replace(task, text_columns=named) if named else task), raw
    if labelled := [split for split in raw if split != "test"]:
        return glue.custom_task(raw[labelled[0]], files[labelled[0]], named), raw
    if not model_args.model_name_or_path:
        raise ValueError("A --test_file alone needs --model_name_or_path, a classifier whose labels it predicts.")
    names = [config.id2label[i] for i in range(config.num_labels)]
    names = None if config.problem_type == "regression" or config.num_labels == 1 else tuple(names)
    columns = glue.choose_text_columns(raw["test"], files["test"], named)
    multi_label = config.problem_type == "multi_label_classification"
    return glue.TextClassificationTask("custom", columns, names, ids_allowed=False, multi_label=multi_label), raw


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
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, DataTrainingArguments, TrainingArguments), argv
    )
    config = loading.load_config(model_args)
    if data_args.padding_free and config.model_type != "gmlp":
        raise ValueError(
            f"--padding_free needs a model that keeps packed examples apart (gMLP, aMLP); this one is "
            f"{config.model_type!r}. Leave out --padding_free."
        )
    tokenizer = loading.load_tokenizer(model_args)
    task, raw = load_task_data(data_args, training_args, model_args, config)
    source = data_args.train_file or data_args.validation_file or f"GLUE {task.name}"
    names = None
    if not task.is_regression:
        names = labels.choose_labels(config, task.label_names, model_args, source, training=training_args.do_train)
    labels.set_labels(config, names, multi_label=task.multi_label)
    config.finetuning_task = data_args.task_name
    metrics_of_evaluation = glue.glue_evaluation(data_args.task_name, task, config.num_labels)
    evaluation.check_evaluation_arguments(training_args, metrics_of_evaluation.metric_names, "run_glue.py")
    raw = label_data(raw, task, names, data_args)
    max_seq_length = loading.check_max_seq_length(data_args.max_seq_length, config, tokenizer)
    model = loading.load_model(AutoModelForSequenceClassification, model_args, config, tokenizer)

    def tokenize(examples):
        padding = "max_length" if data_args.pad_to_max_length else False
        texts = [examples[column] for column in task.text_columns]
        return tokenizer(*texts, padding=padding, max_length=max_seq_length, truncation=True)

    with training_args.main_process_first(desc="tokenizing"):
        encoded = raw.map(tokenize, batched=True, num_proc=data_args.preprocessing_num_workers, desc="Tokenizing")

    # Every split the run needs, taken before training, so that a missing one does not stop the run after it.
    train_dataset, eval_datasets, test_datasets = None, {}, {}
    if training_args.do_train:
        train_dataset = data.take_split(encoded, "train", "--do_train", data_args.max_train_samples)
    for name in task.eval_splits if training_args.do_eval else ():
        eval_datasets[name] = data.take_split(encoded, name, "--do_eval", data_args.max_eval_samples)
    for name in task.test_splits if training_args.do_predict else ():
        test_datasets[name] = data.take_split(encoded, name, "--do_predict", data_args.max_predict_samples)
    # The batches: padded to the longest example of each (or, --padding_free, every example's tokens in one row), then
    # their ids and labels checked on the CPU.
    batching = SentenceFlattening() if data_args.padding_free else DataCollatorWithPadding(tokenizer)
    collator = CheckedCollator(batching, input_ids=model.config.vocab_size, labels=names and len(names))
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=next(iter(eval_datasets.values()), None),
        processing_class=tokenizer,
        data_collator=collator,
        compute_metrics=metrics_of_evaluation.compute_metrics,
        preprocess_logits_for_metrics=metrics_of_evaluation.preprocess_logits_for_metrics,
    )

    all_metrics = {}
    if training_args.do_train:
        training.train_and_save(trainer, len(train_dataset), (model_args, data_args, training_args))
    if training_args.do_eval:
        for name, eval_dataset in eval_datasets.items():
            metrics = {**trainer.evaluate(eval_dataset=eval_dataset), "eval_samples": len(eval_dataset)}
            all_metrics |= {f"{k}_mm": v for k, v in metrics.items()} if name.endswith("mismatched") else metrics
        training.record_metrics(trainer, "eval", all_metrics)
    for name, test_dataset in test_datasets.items():
        logits = trainer.predict(test_dataset.remove_columns("label"), metric_key_prefix="predict").predictions
        suffix = "-mm" if name.endswith("mismatched") else ""
        path = os.path.join(training_args.output_dir, f"predict_results_{data_args.task_name or 'custom'}{suffix}.txt")
        if trainer.is_world_process_zero():  # GLUE's submission format: the label names, or the scores for regression
            training.write_predictions(path, {"prediction": glue.prediction_texts(logits, task, names)})
            logger.info(f"Wrote the {name} predictions to {path}")
    dataset = f"GLUE {data_args.task_name.upper()}" if data_args.task_name else data_args.train_file
    model_card.publish(trainer, model_args.model_name_or_path, task="text-classification", dataset=dataset)
    return all_metrics


if __name__ == "__main__":
    main()
