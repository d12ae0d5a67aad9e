"""Fine-tune gMLP/aMLP for extractive question answering on SQuAD v1.1 or v2.0 (from the Hub or the official JSON
files). Follows Transformers' examples/pytorch/question-answering/run_qa.py."""

from dataclasses import dataclass

import datasets
from transformers import AutoModelForQuestionAnswering, DataCollatorWithPadding, Trainer, TrainingArguments
from transformers.hf_argparser import HfArg

from gmlp.tasks import data, loading, model_card, squad, training
from gmlp.tasks.arguments import ModelArguments, TextDataArguments, parse_arguments
from gmlp.tasks.collators import CheckedCollator


@dataclass
class DataTrainingArguments(TextDataArguments):
    """What to train, evaluate and predict on, and how answers are extracted."""

    train_file: str | None = HfArg(default=None, help="SQuAD's JSON (train-v1.1.json), or jsonl/csv/parquet files.")
    test_file: str | None = HfArg(default=None, help="Questions for --do_predict; scored when they have answers.")
    max_predict_samples: int | None = HfArg(default=None, help="Keep only this many test questions.")
    version_2_with_negative: bool = HfArg(default=False, help="SQuAD 2.0: some questions have no answer.")
    doc_stride: int | None = HfArg(default=None, help="Overlap of a long context's windows (max_seq_length / 4).")
    skip_invalid_answers: bool = HfArg(default=False, help="Skip (and count) answers not where their context says.")
    n_best_size: int = HfArg(default=20, help="Start and end candidates considered per feature.")
    max_answer_length: int = HfArg(default=30, help="Longest answer, in tokens.")
    null_score_diff_threshold: float = HfArg(default=0.0, help="v2.0: no answer if the null score beats it by this.")

    def __post_init__(self):
        if self.dataset_name is None and not (self.train_file or self.validation_file or self.test_file):
            raise ValueError(
                "Give --dataset_name (e.g. rajpurkar/squad) or --train_file / --validation_file / --test_file."
            )


def check_no_evaluation_during_training(training_args) -> None:
    """An error for the options that evaluate during training: run_squad.py scores answers only after it."""
    asked = [f"--eval_strategy {training_args.eval_strategy.value}"] if training_args.eval_strategy != "no" else []
    asked += [f"--metric_for_best_model {training_args.metric_for_best_model}"] * bool(
        training_args.metric_for_best_model
    )
    if asked:
        raise ValueError(
            f"{' and '.join(asked)}: run_squad.py scores its answers (exact match, F1) after training, with "
            "--do_eval; it does not evaluate during training, nor choose the best checkpoint. Drop them, and score a "
            "checkpoint with --do_eval --model_name_or_path OUTPUT_DIR/checkpoint-N."
        )


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, DataTrainingArguments, TrainingArguments), argv
    )
    check_no_evaluation_during_training(training_args)
    config = loading.load_config(model_args)
    tokenizer = loading.load_tokenizer(model_args)
    if not tokenizer.is_fast:
        raise ValueError("run_squad.py needs a fast tokenizer (for offset mappings); pass one with --tokenizer_name.")
    if data_args.dataset_name is not None:
        raw = data.load_hub_dataset(data_args, model_args)
    else:
        raw = squad.load_squad_files(data_args.data_files(), cache_dir=model_args.cache_dir)
    max_seq_length = loading.check_max_seq_length(data_args.max_seq_length, config, tokenizer)
    if data_args.doc_stride is None:  # too large a stride is refused with the features (`squad.tokenize_windows`)
        data_args.doc_stride = min(128, max_seq_length // 4)
    model = loading.load_model(AutoModelForQuestionAnswering, model_args, config, tokenizer)
    feature_kwargs = {"tokenizer": tokenizer, "max_seq_length": max_seq_length, "doc_stride": data_args.doc_stride}
    feature_kwargs["pad_to_max_length"] = data_args.pad_to_max_length
    names = ("version_2_with_negative", "n_best_size", "max_answer_length", "null_score_diff_threshold")
    answer_kwargs = {name: getattr(data_args, name) for name in names}

    def questions(split: str, flag: str, max_samples: int | None, needs_answers: bool = False):
        examples = data.take_split(raw, split, flag, max_samples, source_flag=f"--{split}_file")
        columns = ["id", "question", "context"] + (["answers"] if needs_answers else [])
        source = data_args.data_files().get(split, f"The {split} data")
        data.require_columns(examples, columns, source, hint=f"SQuAD needs {columns}.")
        squad.check_unique_ids(examples, source)
        if flag != "--do_train":  # training data is checked with its answers' positions (`check_training_answers`)
            squad.check_unanswered(examples, source, data_args.version_2_with_negative, flag)
        return examples

    def features(examples: datasets.Dataset, function, split: str) -> datasets.Dataset:
        with training_args.main_process_first(desc=f"{split} features"):
            kwargs = {"batched": True, "fn_kwargs": feature_kwargs, "num_proc": data_args.preprocessing_num_workers}
            return examples.map(function, remove_columns=examples.column_names, desc=f"{split} features", **kwargs)

    def answer(examples: datasets.Dataset, windows: datasets.Dataset, prefix: str) -> dict:
        """The answers to `examples` (read from their `windows`), written (`predictions.json`, ...;
        `<prefix>_predictions.json` but for eval) and scored when the questions have answers; the metrics."""
        output = trainer.predict(windows.remove_columns(["example_id", "offset_mapping"]), metric_key_prefix=prefix)
        files = {"output_dir": training_args.output_dir if trainer.is_world_process_zero() else None}
        files["prefix"] = None if prefix == "eval" else prefix
        answers = squad.postprocess_qa_predictions(examples, windows, output.predictions, **files, **answer_kwargs)
        metrics = {**output.metrics, f"{prefix}_samples": len(examples)}
        scores = squad.score_answers(answers, examples, data_args.version_2_with_negative)
        metrics |= {f"{prefix}_{key}": value for key, value in scores.items()}
        training.record_metrics(trainer, prefix, metrics)
        return metrics

    train_dataset = None
    if training_args.do_train:
        train_examples = questions("train", "--do_train", data_args.max_train_samples, needs_answers=True)
        source = data_args.train_file or data_args.dataset_name
        skip = data_args.skip_invalid_answers
        train_examples = squad.check_training_answers(train_examples, source, data_args.version_2_with_negative, skip)
        train_dataset = features(train_examples, squad.prepare_train_features, "train")
    # Read and cut into windows before training, so that a missing split or a bad question does not stop the run
    # after it.
    questions_to_answer = {}
    if training_args.do_eval:
        examples = questions("validation", "--do_eval", data_args.max_eval_samples, needs_answers=True)
        questions_to_answer["eval"] = examples, features(examples, squad.prepare_validation_features, "eval")
    if training_args.do_predict:
        examples = questions("test", "--do_predict", data_args.max_predict_samples)
        questions_to_answer["predict"] = examples, features(examples, squad.prepare_validation_features, "predict")
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        data_collator=CheckedCollator(DataCollatorWithPadding(tokenizer), input_ids=model.config.vocab_size),
    )
    metrics = {}
    if training_args.do_train:
        training.train_and_save(trainer, len(train_dataset), (model_args, data_args, training_args))
    for prefix, (examples, windows) in questions_to_answer.items():
        metrics |= answer(examples, windows, prefix)
    dataset = data_args.dataset_name or data_args.train_file or data_args.validation_file
    model_card.publish(trainer, model_args.model_name_or_path, task="question-answering", dataset=dataset)
    return metrics


if __name__ == "__main__":
    main()
