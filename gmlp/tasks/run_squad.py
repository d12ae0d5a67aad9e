"""Fine-tune gMLP/aMLP for extractive question answering on SQuAD v1.1 or v2.0 (from the Hub or the official JSON
files). Follows Transformers' examples/pytorch/question-answering/run_qa.py, with the stock Trainer: evaluation
predicts start/end logits, `gmlp.tasks.squad` turns them into answers (predictions.json, nbest_predictions.json) and the
packaged `squad` / `squad_v2` metric scores them (eval_exact_match, eval_f1)."""

import logging
from dataclasses import dataclass, field

import datasets
from transformers import AutoModelForQuestionAnswering, Trainer, TrainingArguments, set_seed

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
    ModelArguments,
    check_max_seq_length,
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

    def __post_init__(self):
        if self.dataset_name is None and self.train_file is None and self.validation_file is None:
            raise ValueError(
                "Give --dataset_name (e.g. rajpurkar/squad) or --train_file / --validation_file (SQuAD JSON files)."
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
    files = {"train": data_args.train_file, "validation": data_args.validation_file}
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
    feature_kwargs = {
        "tokenizer": tokenizer,
        "max_seq_length": max_seq_length,
        "doc_stride": data_args.doc_stride,
        "pad_to_max_length": data_args.pad_to_max_length,
    }

    train_dataset = eval_examples = eval_features = None
    if training_args.do_train:
        if "train" not in raw:
            raise ValueError(
                f"--do_train needs training data (--train_file or a Hub dataset); the data has {list(raw)}."
            )
        train_examples = select_samples(raw["train"], data_args.max_train_samples)
        check_squad_columns(train_examples, "The training data", needs_answers=True)
        train_examples = check_training_answers(
            train_examples,
            data_args.train_file or data_args.dataset_name,
            data_args.version_2_with_negative,
            skip=data_args.skip_invalid_answers,
        )
        with training_args.main_process_first(desc="train features"):
            train_dataset = train_examples.map(
                prepare_train_features,
                fn_kwargs=feature_kwargs,
                batched=True,
                remove_columns=train_examples.column_names,
                num_proc=data_args.preprocessing_num_workers,
                desc="Training features",
            )
    if training_args.do_eval:
        if "validation" not in raw:
            raise ValueError(
                f"--do_eval needs evaluation data (--validation_file or a Hub dataset); the data has {list(raw)}."
            )
        eval_examples = select_samples(raw["validation"], data_args.max_eval_samples)
        check_squad_columns(eval_examples, "The evaluation data", needs_answers=True)
        with training_args.main_process_first(desc="evaluation features"):
            eval_features = eval_examples.map(
                prepare_validation_features,
                fn_kwargs=feature_kwargs,
                batched=True,
                remove_columns=eval_examples.column_names,
                num_proc=data_args.preprocessing_num_workers,
                desc="Evaluation features",
            )

    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset, processing_class=tokenizer)
    metrics = {}
    if training_args.do_train:
        train_and_save(trainer, training_args, len(train_dataset))
    if training_args.do_eval:
        output = trainer.predict(
            eval_features.remove_columns(["example_id", "offset_mapping"]), metric_key_prefix="eval"
        )
        answers = postprocess_qa_predictions(
            eval_examples,
            eval_features,
            output.predictions,
            version_2_with_negative=data_args.version_2_with_negative,
            n_best_size=data_args.n_best_size,
            max_answer_length=data_args.max_answer_length,
            null_score_diff_threshold=data_args.null_score_diff_threshold,
            output_dir=training_args.output_dir if trainer.is_world_process_zero() else None,
        )
        metric = load_metric("squad_v2" if data_args.version_2_with_negative else "squad")
        predictions, references = metric_inputs(answers, eval_examples, data_args.version_2_with_negative)
        scores = metric.compute(predictions=predictions, references=references)
        metrics = {**output.metrics, **{f"eval_{key}": value for key, value in scores.items()}}
        metrics["eval_samples"] = len(eval_examples)
        record_metrics(trainer, "eval", metrics)
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
