"""Fine-tune gMLP/aMLP for extractive question answering on SQuAD v1.1 or v2.0 (from the Hub or the official JSON
files). Follows Transformers' examples/pytorch/question-answering/run_qa.py, with the stock Trainer: evaluation
predicts start/end logits, `gmlp.tasks.squad` turns them into answers (predictions.json, nbest_predictions.json) and the
packaged `squad` / `squad_v2` metric scores them (eval_exact_match, eval_f1)."""

import logging
from dataclasses import dataclass, field

import datasets
from transformers import (
    AutoModelForQuestionAnswering,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

import gmlp  # noqa: F401  (registers gMLP with the Auto classes)
from gmlp.tasks.metrics import load_metric
from gmlp.tasks.squad import (
    check_squad_columns,
    check_training_answers,
    load_squad_files,
    metric_inputs,
    postprocess_qa_predictions,
    prepare_train_features,
    prepare_validation_features,
)
from gmlp.tasks.training import (
    CheckedCollator,
    ModelArguments,
    check_max_seq_length,
    check_vocabulary,
    load_config,
    load_model,
    load_tokenizer,
    parse_arguments,
    publish,
    record_metrics,
    select_samples,
    setup_logging,
    train_and_save,
)

logger = logging.getLogger(__name__)


@dataclass
class DataTrainingArguments:
    """What to train and evaluate on, and how answers are extracted."""

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "A Hub dataset: rajpurkar/squad, or rajpurkar/squad_v2 with --version_2_with_negative."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration, if any."})
    train_file: str | None = field(
        default=None,
        metadata={
            "help": "Training data: official SQuAD JSON (train-v1.1.json), or jsonl/csv/parquet "
            "with the Hub's columns."
        },
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "Evaluation data, same formats (dev-v1.1.json)."}
    )
    test_file: str | None = field(
        default=None,
        metadata={"help": "Questions to answer with --do_predict, same formats; scored when they have answers."},
    )
    version_2_with_negative: bool = field(
        default=False, metadata={"help": "SQuAD 2.0: some questions have no answer."}
    )
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Tokens per feature (question + context window); at most the model's n."}
    )
    doc_stride: int | None = field(
        default=None,
        metadata={
            "help": "Overlap, in tokens, of the windows of a long context. Default: a quarter of max_seq_length, "
            "at most 128."
        },
    )
    skip_invalid_answers: bool = field(
        default=False,
        metadata={
            "help": "Train without the questions whose answers do not match their contexts (logged), instead of "
            "stopping with an error that names them."
        },
    )
    pad_to_max_length: bool = field(default=False, metadata={"help": "Pad every feature to max_seq_length."})
    n_best_size: int = field(default=20, metadata={"help": "Start and end candidates considered per feature."})
    max_answer_length: int = field(default=30, metadata={"help": "Longest answer, in tokens."})
    null_score_diff_threshold: float = field(
        default=0.0,
        metadata={"help": "SQuAD 2.0: answer nothing when the null score beats the best span by more than this."},
    )
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for preprocessing."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only this many training questions."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only this many evaluation questions."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only this many test questions."})

    def __post_init__(self):
        if self.dataset_name is None and not (self.train_file or self.validation_file or self.test_file):
            raise ValueError(
                "Give --dataset_name (e.g. rajpurkar/squad) or --train_file / --validation_file / --test_file "
                "(SQuAD JSON files)."
            )


def load_raw_datasets(data_args: DataTrainingArguments, model_args: ModelArguments) -> datasets.DatasetDict:
    """The SQuAD splits, from the Hub or local files."""
    if data_args.dataset_name is not None:
        return datasets.load_dataset(
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=model_args.cache_dir,
            token=model_args.token,
        )
    files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    return load_squad_files(files, cache_dir=model_args.cache_dir)


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, DataTrainingArguments, TrainingArguments), argv
    )
    setup_logging(training_args)
    set_seed(training_args.seed)

    raw = load_raw_datasets(data_args, model_args)
    config = load_config(model_args)
    tokenizer = load_tokenizer(model_args)
    if not tokenizer.is_fast:
        raise ValueError("run_squad.py needs a fast tokenizer (for offset mappings); pass one with --tokenizer_name.")
    max_seq_length = check_max_seq_length(data_args.max_seq_length, config, tokenizer)
    if data_args.doc_stride is None:
        data_args.doc_stride = min(128, max_seq_length // 4)
    if data_args.doc_stride >= max_seq_length:
        raise ValueError(
            f"--doc_stride {data_args.doc_stride} must be smaller than --max_seq_length {max_seq_length} (the windows of "
            f"a long context overlap by doc_stride tokens); e.g. --doc_stride {max_seq_length // 4}."
        )
    model = load_model(AutoModelForQuestionAnswering, model_args, config)
    check_vocabulary(tokenizer, model)
    feature_kwargs = {
        "tokenizer": tokenizer,
        "max_seq_length": max_seq_length,
        "doc_stride": data_args.doc_stride,
        "pad_to_max_length": data_args.pad_to_max_length,
    }

    def questions(split: str, flag: str, max_samples: int | None, needs_answers: bool):
        if split not in raw:
            file_flag = "--train_file" if split == "train" else f"--{split}_file"
            raise ValueError(f"{flag} needs {split} data ({file_flag} or a Hub dataset); the data has {list(raw)}.")
        examples = select_samples(raw[split], max_samples)
        check_squad_columns(examples, f"The {split} data", needs_answers=needs_answers)
        return examples

    def features(examples: datasets.Dataset, function, split: str) -> datasets.Dataset:
        with training_args.main_process_first(desc=f"{split} features"):
            return examples.map(
                function,
                fn_kwargs=feature_kwargs,
                batched=True,
                remove_columns=examples.column_names,
                num_proc=data_args.preprocessing_num_workers,
                desc=f"{split.capitalize()} features",
            )

    def answer(examples: datasets.Dataset, split: str, prefix: str) -> dict:
        """Predict the answers of `examples`, write them (`<prefix>_predictions.json`, ...) and score them (when
        they have answers); the metrics."""
        eval_features = features(examples, prepare_validation_features, split)
        output = trainer.predict(
            eval_features.remove_columns(["example_id", "offset_mapping"]), metric_key_prefix=prefix
        )
        answers = postprocess_qa_predictions(
            examples,
            eval_features,
            output.predictions,
            version_2_with_negative=data_args.version_2_with_negative,
            n_best_size=data_args.n_best_size,
            max_answer_length=data_args.max_answer_length,
            null_score_diff_threshold=data_args.null_score_diff_threshold,
            output_dir=training_args.output_dir if trainer.is_world_process_zero() else None,
            prefix=None if prefix == "eval" else prefix,
        )
        metrics = {**output.metrics, f"{prefix}_samples": len(examples)}
        answered = (
            [bool(answers["text"]) for answers in examples["answers"]] if "answers" in examples.column_names else []
        )
        if any(answered) and (data_args.version_2_with_negative or all(answered)):
            metric = load_metric("squad_v2" if data_args.version_2_with_negative else "squad")
            predictions, references = metric_inputs(answers, examples, data_args.version_2_with_negative)
            scores = metric.compute(predictions=predictions, references=references)
            metrics.update({f"{prefix}_{key}": value for key, value in scores.items()})
        else:
            logger.info(f"The {split} questions have no answers to score the predictions against.")
        record_metrics(trainer, prefix, metrics)
        return metrics

    train_dataset = None
    if training_args.do_train:
        train_examples = questions("train", "--do_train", data_args.max_train_samples, needs_answers=True)
        train_examples = check_training_answers(
            train_examples,
            data_args.train_file or data_args.dataset_name,
            data_args.version_2_with_negative,
            skip=data_args.skip_invalid_answers,
        )
        train_dataset = features(train_examples, prepare_train_features, "train")
    # Checked before training, so that a missing split does not stop the run after it.
    eval_examples = (
        questions("validation", "--do_eval", data_args.max_eval_samples, True) if training_args.do_eval else None
    )
    test_examples = (
        questions("test", "--do_predict", data_args.max_predict_samples, False) if training_args.do_predict else None
    )

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        data_collator=CheckedCollator(DataCollatorWithPadding(tokenizer), input_ids=model.config.vocab_size),
    )
    metrics = {}
    if training_args.do_train:
        train_and_save(trainer, len(train_dataset), (model_args, data_args, training_args))
    if training_args.do_eval:
        metrics = answer(eval_examples, "validation", "eval")
    if training_args.do_predict:
        metrics.update(answer(test_examples, "test", "predict"))
    publish(
        trainer,
        training_args,
        model_args,
        task="question-answering",
        dataset=data_args.dataset_name or data_args.train_file or data_args.validation_file,
    )
    return metrics


if __name__ == "__main__":
    main()
