"""Fine-tune gMLP/aMLP for extractive question answering on SQuAD v1.1 or v2.0 (from the Hub or the official JSON
files). Follows Transformers' examples/pytorch/question-answering/run_qa.py."""

from dataclasses import dataclass

import datasets
from transformers import AutoModelForQuestionAnswering, DataCollatorWithPadding, Trainer
from transformers.hf_argparser import HfArg

from gmlp.tasks import checks, data, loading, model_card, setup, squad, training
from gmlp.tasks.arguments import TextDataArguments
from gmlp.tasks.collators import CheckedCollator
from gmlp.tasks.errors import ScriptError, script_main


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
            raise ScriptError(
                "Give --dataset_name (e.g. rajpurkar/squad) or --train_file / --validation_file / --test_file."
            )


def run(argv: list[str]) -> dict:
    """The script on the arguments `argv`: the metrics of its evaluation and prediction."""
    model_args, data_args, training_args = setup.start(DataTrainingArguments, argv)
    checks.check_arguments(training_args, loads=[model_args.model_name_or_path, model_args.tokenizer_name])
    checks.check_no_evaluation_during_training(training_args, script="run_squad.py")
    loading.check_named_paths(model_args, data_args, training_args)
    setup.prepare_run(training_args, data_args)
    config = loading.load_config(model_args)
    tokenizer = loading.load_tokenizer(model_args)
    if not tokenizer.is_fast:
        raise ScriptError("run_squad.py needs a fast tokenizer (for offset mappings); pass one with --tokenizer_name.")
    if data_args.dataset_name is not None:
        raw = data.load_hub_dataset(data_args, model_args)
    else:
        raw = squad.load_squad_files(data_args.data_files(), cache_dir=model_args.cache_dir)
    max_seq_length = loading.check_max_seq_length(data_args.max_seq_length, config, tokenizer, model_args)
    if data_args.doc_stride is None:  # too large a stride is refused with the features (`squad.tokenize_windows`)
        data_args.doc_stride = min(128, max_seq_length // 4)
    model = loading.load_model(AutoModelForQuestionAnswering, model_args, config, tokenizer)
    version_2 = data_args.version_2_with_negative
    cutting = {"tokenizer": tokenizer, "max_seq_length": max_seq_length, "doc_stride": data_args.doc_stride}
    cutting["pad_to_max_length"] = data_args.pad_to_max_length

    def questions(split: str, flag: str, max_samples: int | None) -> datasets.Dataset:
        """The questions of `split` that `flag` needs, checked: their columns, ids and answers."""
        examples = data.take_split(raw, split, flag, max_samples, source_flag=f"--{split}_file")
        columns = ["id", "question", "context"] + (["answers"] if flag != "--do_predict" else [])
        source = data_args.data_files().get(split, f"The {split} data")
        data.require_columns(examples, columns, source, hint=f"SQuAD needs {columns}.")
        squad.check_unique_ids(examples, source)
        if flag != "--do_train":
            squad.check_unanswered(examples, source, version_2_with_negative=version_2, flag=flag)
            return examples
        source, skip = data_args.train_file or data_args.dataset_name, data_args.skip_invalid_answers
        return squad.check_training_answers(examples, source, version_2_with_negative=version_2, skip=skip)

    def features(examples: datasets.Dataset, function, split: str) -> datasets.Dataset:
        with training_args.main_process_first(desc=f"{split} features"):
            kwargs = {"batched": True, "fn_kwargs": cutting, "num_proc": data_args.preprocessing_num_workers}
            return examples.map(function, remove_columns=examples.column_names, desc=f"{split} features", **kwargs)

    train_dataset, to_answer = None, {}
    if training_args.do_train:
        train_examples = questions("train", "--do_train", data_args.max_train_samples)
        train_dataset = features(train_examples, squad.prepare_train_features, "train")
    # Read and cut into windows before training, so that a missing split or a bad question stops the run before it.
    for prefix, split, flag, limit in (
        ("eval", "validation", "--do_eval", data_args.max_eval_samples),
        ("predict", "test", "--do_predict", data_args.max_predict_samples),
    ):
        if getattr(training_args, flag[2:]):
            examples = questions(split, flag, limit)
            to_answer[prefix] = examples, features(examples, squad.prepare_validation_features, prefix)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        data_collator=CheckedCollator(DataCollatorWithPadding(tokenizer), input_ids=model.config.vocab_size),
    )
    metrics = {}
    if training_args.do_train:
        training.train_and_save(trainer, model_args=model_args, data_args=data_args, train_samples=len(train_dataset))
    names = ("n_best_size", "max_answer_length", "null_score_diff_threshold")
    answering = {name: getattr(data_args, name) for name in names} | {"version_2_with_negative": version_2}
    for prefix, (examples, windows) in to_answer.items():
        output = trainer.predict(windows.remove_columns(["example_id", "offset_mapping"]), metric_key_prefix=prefix)
        files = {"output_dir": training_args.output_dir if trainer.is_world_process_zero() else None}
        files["prefix"] = None if prefix == "eval" else prefix
        answers = squad.postprocess_qa_predictions(examples, windows, output.predictions, **files, **answering)
        scores = squad.score_answers(answers, examples, version_2_with_negative=version_2)
        results = {**output.metrics, f"{prefix}_samples": len(examples)}
        results |= {f"{prefix}_{key}": value for key, value in scores.items()}
        training.record_metrics(trainer, prefix, results)
        metrics |= results
    dataset = data_args.dataset_name or data_args.train_file or data_args.validation_file
    model_card.publish(trainer, model_args.model_name_or_path, task="question-answering", dataset=dataset)
    return metrics


main = script_main(run)

if __name__ == "__main__":
    main()
