"""Fine-tune gMLP/aMLP for sequence classification on a GLUE task (from the Hub or a local GLUE folder) or on your own
csv/json files. Follows Transformers' examples/pytorch/text-classification/run_glue.py."""

import logging
import os
from dataclasses import dataclass

from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, Trainer
from transformers.hf_argparser import HfArg

from gmlp.tasks import checks, data, glue, labels, loading, model_card, setup, training
from gmlp.tasks.arguments import TextDataArguments
from gmlp.tasks.collators import CheckedCollator, SentenceFlattening
from gmlp.tasks.errors import ScriptError, script_main

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
        help="Padding-free batches: each batch's examples in one row, no padding (DataCollatorWithFlattening); the model keeps the examples apart. Faster where lengths vary.",
    )
    text_column_names: str | None = HfArg(
        default=None,
        aliases=["--text_columns"],
        help="Your files' text columns, comma-separated, e.g. question,passage (default: sentence1/sentence2, else the first two columns of text that are not ids).",
    )

    def __post_init__(self):
        if self.task_name is not None:
            self.task_name = glue.get_task(self.task_name).name
        if self.glue_dir is not None and self.task_name is None:
            raise ScriptError("--glue_dir needs --task_name, to know which task folder to read.")
        if self.task_name is None and not self.data_files():
            raise ScriptError("Give --task_name (a GLUE task) or --train_file / --validation_file / --test_file.")
        if self.padding_free and self.pad_to_max_length:
            raise ScriptError("--padding_free batches have no padding: leave out --pad_to_max_length.")
        if self.text_column_names is not None and not self.data_files():
            raise ScriptError(
                "--text_column_names names the text columns of your own files (--train_file, ...); a GLUE task read from the Hub or --glue_dir has its own."
            )

    def text_columns(self) -> tuple[str, ...] | None:
        if self.text_column_names is None:
            return None
        return tuple(column.strip() for column in self.text_column_names.split(",") if column.strip())


def run(argv: list[str]) -> dict:
    """The script on the arguments `argv`: the metrics of its evaluation."""
    model_args, data_args, training_args = setup.start(DataTrainingArguments, argv)
    checks.check_arguments(training_args, loads=[model_args.model_name_or_path, model_args.tokenizer_name])
    loading.check_named_paths(model_args, data_args, training_args)
    setup.prepare_run(training_args, data_args)
    config = loading.load_config(model_args)
    if data_args.padding_free and config.model_type != "gmlp":
        raise ScriptError(
            f"--padding_free needs a model that keeps packed examples apart (gMLP, aMLP); this one is {config.model_type!r}. Leave out --padding_free."
        )
    tokenizer = loading.load_tokenizer(model_args)
    task, raw = glue.load_task(data_args, training_args, model_args, config)
    names = None
    if not task.is_regression:
        source = data_args.train_file or data_args.validation_file or f"GLUE {task.name}"
        trains = training_args.do_train
        names = labels.choose_labels(config, task.label_names, model_args=model_args, source=source, training=trains)
    labels.set_labels(config, names, multi_label=task.multi_label)
    config.finetuning_task = data_args.task_name
    evaluation = glue.glue_evaluation(data_args.task_name, task, config.num_labels)
    checks.check_evaluation_arguments(training_args, evaluation.metric_names, script="run_glue.py")
    raw = glue.label_task_data(raw, task, names, data_args.data_files())
    max_seq_length = loading.check_max_seq_length(data_args.max_seq_length, config, tokenizer, model_args)
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
    batching = SentenceFlattening() if data_args.padding_free else DataCollatorWithPadding(tokenizer)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=next(iter(eval_datasets.values()), None),
        processing_class=tokenizer,
        data_collator=CheckedCollator(batching, input_ids=model.config.vocab_size, labels=names and len(names)),
        compute_metrics=evaluation.compute_metrics,
        preprocess_logits_for_metrics=evaluation.preprocess_logits_for_metrics,
    )

    all_metrics = {}
    if training_args.do_train:
        training.train_and_save(trainer, model_args=model_args, data_args=data_args, train_samples=len(train_dataset))
    if training_args.do_eval:
        for name, eval_dataset in eval_datasets.items():
            metrics = {**trainer.evaluate(eval_dataset=eval_dataset), "eval_samples": len(eval_dataset)}
            all_metrics |= {f"{k}_mm": v for k, v in metrics.items()} if name.endswith("mismatched") else metrics
        training.record_metrics(trainer, "eval", all_metrics)
    for name, test_dataset in test_datasets.items():
        logits = trainer.predict(test_dataset.remove_columns("label"), metric_key_prefix="predict").predictions
        suffix = "-mm" if name.endswith("mismatched") else ""
        path = os.path.join(training_args.output_dir, f"predict_results_{data_args.task_name or 'custom'}{suffix}.txt")
        if trainer.is_world_process_zero():  # GLUE's submission format
            training.write_predictions(path, {"prediction": glue.prediction_texts(logits, task, names)})
            logger.info(f"Wrote the {name} predictions to {path}")
    dataset = f"GLUE {data_args.task_name.upper()}" if data_args.task_name else data_args.train_file
    model_card.publish(trainer, model_args.model_name_or_path, task="text-classification", dataset=dataset)
    return all_metrics


main = script_main(run)

if __name__ == "__main__":
    main()
