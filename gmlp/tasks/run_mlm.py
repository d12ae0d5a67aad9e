"""Pretrain or fine-tune a gMLP/aMLP masked language model on a Hub dataset or local text files.

With no arguments at all it runs the offline demo: gmlp-tiny pretrained for a few minutes on the English text that
ships with the package (Encyclopaedia Britannica 1911, "Shakespeare"), saved to ./gmlp-tiny-mlm, then a fill-mask
prediction. Follows Transformers' examples/pytorch/language-modeling/run_mlm.py.
"""

import logging
import sys
from dataclasses import dataclass, field

import datasets
from transformers import AutoModelForMaskedLM, Trainer, TrainingArguments, set_seed

import gmlp  # noqa: F401  (registers gMLP with the Auto classes)
from gmlp.tasks.mlm import (
    DEFAULT_TRAIN_FILE,
    MaskedLMCollator,
    fill_mask,
    masked_token_accuracy,
    masked_token_predictions,
    perplexity,
    tokenize_for_mlm,
    train_or_load_tokenizer,
    with_fixed_mask,
)
from gmlp.tasks.training import (
    CheckedCollator,
    ModelArguments,
    check_max_seq_length,
    load_config,
    load_data_files,
    load_model,
    load_tokenizer,
    parse_arguments,
    publish,
    record_metrics,
    resolve_checkpoint,
    select_samples,
    setup_logging,
    train_and_save,
)

logger = logging.getLogger(__name__)

DEMO_ARGS = [
    "--config_name",
    "gmlp-tiny",
    # 32k words of text support a small vocabulary: with 8,192 tokens most are seen a handful of times.
    "--config_overrides",
    "vocab_size=2048",
    "--output_dir",
    "gmlp-tiny-mlm",
    "--do_train",
    "--do_eval",
    "--max_seq_length",
    "64",
    "--per_device_train_batch_size",
    "32",
    "--learning_rate",
    "2e-3",
    "--warmup_steps",
    "50",
    "--weight_decay",
    "0.01",
    "--num_train_epochs",
    "40",
    "--logging_steps",
    "100",
    "--save_strategy",
    "no",
    "--report_to",
    "none",
    "--fill_mask_text",
    "The first [MASK] of the plays appeared in 1623.",
]

NO_PREDICT = (
    "run_mlm.py has no --do_predict (nor has Transformers' run_mlm.py): use --do_eval to score --validation_file "
    "(loss, perplexity, masked-token accuracy), or --fill_mask_text for the model's top tokens for one text."
)


@dataclass
class DataTrainingArguments:
    """What to train and evaluate on."""

    dataset_name: str | None = field(default=None, metadata={"help": "A Hub dataset, e.g. Salesforce/wikitext."})
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "Its configuration, e.g. wikitext-2-raw-v1."}
    )
    train_file: str | None = field(
        default=None,
        metadata={
            "help": "Training text (.txt, .csv, .json/.jsonl, .parquet; column `text` or the first). "
            "Default, with no dataset either: the English text shipped with the package."
        },
    )
    validation_file: str | None = field(default=None, metadata={"help": "Evaluation text, same formats."})
    validation_split_percentage: int = field(
        default=5,
        metadata={"help": "Percent of the training data held out for evaluation when there is no validation split."},
    )
    max_seq_length: int | None = field(
        default=None, metadata={"help": "Tokens per sequence; at most the model's n. Default: n."}
    )
    line_by_line: bool = field(
        default=False,
        metadata={"help": "One sequence per non-empty line, instead of blocks of max_seq_length tokens."},
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of tokens to mask."})
    whole_word_mask: bool = field(default=False, metadata={"help": "Mask whole words rather than single tokens."})
    pad_to_max_length: bool = field(
        default=False,
        metadata={
            "help": "--line_by_line: pad every line to max_seq_length instead of to the longest in its batch (on by "
            "itself with --torch_compile). Blocks are always max_seq_length tokens."
        },
    )
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only this many training sequences."})
    max_eval_samples: int | None = field(
        default=None,
        metadata={"help": "Keep only this many evaluation sequences (with --streaming: the first 1,000 by default)."},
    )
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Read the data as a stream instead of loading it (a corpus larger than memory). Needs "
            "--max_steps, --tokenizer_name (or a checkpoint with one) and a validation split for --do_eval."
        },
    )
    sparse_prediction: bool = field(
        default=True,
        metadata={
            "help": "gMLP: in training, compute the vocabulary projection only at masked positions (same loss, "
            "faster steps; evaluation keeps full logits). `--sparse_prediction false` turns it off."
        },
    )
    eval_mask_seed: int = field(
        default=0,
        metadata={
            "help": "Seed of the evaluation mask, drawn once: every evaluation scores the same masked tokens, so "
            "perplexities of checkpoints and runs compare exactly (training draws fresh masks)."
        },
    )
    fill_mask_text: str | None = field(
        default=None, metadata={"help": "After training, print the model's top predictions for this text's [MASK]."}
    )

    def __post_init__(self):
        if self.dataset_name is None and self.train_file is None and self.validation_file is None:
            self.train_file = DEFAULT_TRAIN_FILE
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"--mlm_probability must be between 0 and 1, got {self.mlm_probability}.")


def load_raw_datasets(data_args: DataTrainingArguments, model_args: ModelArguments) -> datasets.DatasetDict:
    """The train/validation text, from the Hub or local files; a validation split is held out if there is none."""
    if data_args.dataset_name is not None:
        raw = datasets.load_dataset(
            data_args.dataset_name,
            data_args.dataset_config_name,
            cache_dir=model_args.cache_dir,
            token=model_args.token,
            streaming=data_args.streaming,
        )
    else:
        raw = load_data_files(
            {"train": data_args.train_file, "validation": data_args.validation_file},
            cache_dir=model_args.cache_dir,
            streaming=data_args.streaming,
        )
    if data_args.streaming:
        return raw
    if "validation" not in raw and "train" in raw:
        split = raw["train"].train_test_split(test_size=data_args.validation_split_percentage / 100, shuffle=False)
        raw = datasets.DatasetDict(train=split["train"], validation=split["test"])
    return raw


def check_streaming(data_args: DataTrainingArguments, model_args: ModelArguments, training_args) -> None:
    """What `--streaming` needs, checked before any data is read."""
    if training_args.do_train and training_args.max_steps <= 0:
        raise ValueError("--streaming needs --max_steps: a stream has no length to count epochs by.")
    if model_args.tokenizer_name is None and model_args.model_name_or_path is None:
        raise ValueError(
            "--streaming needs --tokenizer_name (or a --model_name_or_path with a tokenizer): a tokenizer "
            "is not trained on a stream."
        )
    if training_args.do_eval and data_args.dataset_name is None and data_args.validation_file is None:
        raise ValueError("--streaming with --do_eval needs --validation_file: no split is held out of a stream.")
    if data_args.whole_word_mask:
        raise ValueError("--streaming does not support --whole_word_mask.")


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("No arguments: running the offline demo, i.e.\n  python run_mlm.py " + " ".join(DEMO_ARGS), flush=True)
        argv = DEMO_ARGS
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, DataTrainingArguments, TrainingArguments), argv, no_predict=NO_PREDICT
    )
    if model_args.model_name_or_path is None and model_args.config_name is None:
        model_args.config_name = "gmlp-tiny"
    if data_args.streaming:
        check_streaming(data_args, model_args, training_args)
    setup_logging(training_args)
    set_seed(training_args.seed)

    raw_datasets = load_raw_datasets(data_args, model_args)
    config = load_config(model_args)
    tokenizer = load_tokenizer(model_args, required=False)
    checkpoint = resolve_checkpoint(training_args)
    if tokenizer is None and checkpoint is not None:
        tokenizer = load_tokenizer(ModelArguments(tokenizer_name=checkpoint))
    if tokenizer is None:
        if "train" not in raw_datasets:
            raise ValueError(
                "No tokenizer and no training data to train one on: pass --tokenizer_name or --train_file."
            )
        tokenizer = train_or_load_tokenizer(
            raw_datasets["train"], config.vocab_size, config.max_position_embeddings, training_args
        )
    max_seq_length = check_max_seq_length(data_args.max_seq_length, config, tokenizer)
    if model_args.model_name_or_path is None and config.vocab_size != len(tokenizer):
        logger.warning(
            f"vocab_size set to the tokenizer's {len(tokenizer)} tokens (the config had {config.vocab_size})."
        )
        config.vocab_size = len(tokenizer)
    model = load_model(AutoModelForMaskedLM, model_args, config)
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        logger.warning(
            f"The tokenizer has {len(tokenizer)} tokens, the model's vocabulary "
            f"{model.get_input_embeddings().num_embeddings}: resizing its embeddings to {len(tokenizer)} (the new "
            "tokens' embeddings start untrained)."
        )
        model.resize_token_embeddings(len(tokenizer))

    sources = {}
    if data_args.dataset_name is None:
        sources["train"] = f"The train file {data_args.train_file}"
        sources["validation"] = (
            f"The validation file {data_args.validation_file}"
            if data_args.validation_file
            else f"The held-out part of {data_args.train_file}"
        )
    tokenized = tokenize_for_mlm(
        raw_datasets,
        tokenizer,
        max_seq_length,
        data_args.line_by_line,
        training_args,
        data_args.preprocessing_num_workers,
        data_args.whole_word_mask,
        sources=sources,
        pad_to_max_length=data_args.pad_to_max_length,
    )
    if data_args.whole_word_mask:
        # The collator needs the offset mapping to find words; the Trainer would drop it as an unused column.
        training_args.remove_unused_columns = False
    train_dataset = select_samples(tokenized["train"], data_args.max_train_samples) if training_args.do_train else None
    if training_args.do_eval and data_args.streaming:
        # Evaluation goes over the same sequences every time: the first ones of the stream, held in memory.
        sequences = select_samples(tokenized["validation"], data_args.max_eval_samples or 1000)
        tokenized["validation"] = datasets.Dataset.from_list(list(sequences))
    collator = MaskedLMCollator(
        tokenizer,
        mlm_probability=data_args.mlm_probability,
        whole_word_mask=data_args.whole_word_mask,
        sparse_prediction=data_args.sparse_prediction and model.config.model_type == "gmlp",
    )
    eval_dataset = None
    if training_args.do_eval:
        eval_dataset = select_samples(tokenized["validation"], data_args.max_eval_samples)
        with training_args.main_process_first(desc="fixing the evaluation mask"):
            eval_dataset = with_fixed_mask(eval_dataset, collator, data_args.eval_mask_seed)

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=CheckedCollator(collator, input_ids=model.config.vocab_size, labels=model.config.vocab_size),
        compute_metrics=masked_token_accuracy if training_args.do_eval else None,
        preprocess_logits_for_metrics=masked_token_predictions if training_args.do_eval else None,
    )

    metrics = {}
    if training_args.do_train:
        train_and_save(
            trainer, None if data_args.streaming else len(train_dataset), (model_args, data_args, training_args)
        )
    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["eval_samples"] = len(eval_dataset)
        metrics["perplexity"] = perplexity(metrics["eval_loss"])
        record_metrics(trainer, "eval", metrics)
    if data_args.fill_mask_text and trainer.is_world_process_zero():
        text = data_args.fill_mask_text.replace("[MASK]", tokenizer.mask_token)
        print(f"\nFill-mask: {text}")
        for prediction in fill_mask(trainer.model, tokenizer, text):
            print(f"  {prediction['score']:.3f}  {prediction['token_str']}")
    publish(
        trainer, training_args, model_args, task="fill-mask", dataset=data_args.dataset_name or data_args.train_file
    )
    return metrics


if __name__ == "__main__":
    main()
