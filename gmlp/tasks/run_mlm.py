"""Pretrain or fine-tune a gMLP/aMLP masked language model on a Hub dataset or local text files; with no arguments, the
offline demo (gmlp-tiny pretrained on the packaged text, saved to ./gmlp-tiny-mlm, then a fill-mask prediction).
Follows Transformers' examples/pytorch/language-modeling/run_mlm.py."""

import logging
import shlex
from dataclasses import dataclass

import datasets
from transformers import AutoModelForMaskedLM, AutoTokenizer, Trainer, pipeline
from transformers.hf_argparser import HfArg

from gmlp.tasks import checks, data, loading, mlm, model_card, setup, training
from gmlp.tasks.arguments import ModelArguments, TextDataArguments
from gmlp.tasks.checkpoints import resolve_checkpoint
from gmlp.tasks.collators import CheckedCollator
from gmlp.tasks.errors import ScriptError, script_main

logger = logging.getLogger(__name__)

# 32k words of text support a small vocabulary: with 8,192 tokens most would be seen a handful of times.
DEMO_ARGS = shlex.split(
    "--config_name gmlp-tiny --config_overrides vocab_size=2048 --output_dir gmlp-tiny-mlm --do_train --do_eval --max_seq_length 64 --per_device_train_batch_size 32 --learning_rate 2e-3 --warmup_steps 50 --weight_decay 0.01 --num_train_epochs 40 --logging_steps 100 --save_strategy no --report_to none --fill_mask_text 'The first [MASK] of the plays appeared in 1623.'"
)
NO_PREDICT = "run_mlm.py has no --do_predict (nor has Transformers' run_mlm.py): use --do_eval to score --validation_file (loss, perplexity, masked-token accuracy), or --fill_mask_text for the model's top tokens for one text."


@dataclass
class DataTrainingArguments(TextDataArguments):
    """What to train and evaluate on."""

    train_file: str | None = HfArg(default=None, help="Text: .txt, .csv, .json(l), .parquet (default: the package's).")
    validation_split_percentage: int = HfArg(default=5, help="Percent of train held out without a validation split.")
    line_by_line: bool = HfArg(default=False, help="One sequence per non-empty line, not blocks of max_seq_length.")
    mlm_probability: float = HfArg(default=0.15, help="Fraction of tokens to mask.")
    whole_word_mask: bool = HfArg(default=False, help="Mask whole words rather than single tokens.")
    streaming: bool = HfArg(default=False, help="Read the data as a stream (needs --max_steps and a tokenizer).")
    sparse_prediction: bool = HfArg(default=True, help="gMLP: in training, logits at masked positions only (faster).")
    eval_mask_seed: int = HfArg(default=0, help="Seed of the one evaluation mask, so that evaluations compare.")
    fill_mask_text: str | None = HfArg(default=None, help="After training, print the top tokens for its [MASK].")

    def __post_init__(self):
        if self.dataset_name is None and self.train_file is None and self.validation_file is None:
            self.train_file = mlm.DEFAULT_TRAIN_FILE
        if self.fill_mask_text is not None and self.fill_mask_text.count("[MASK]") != 1:
            raise ScriptError(f"--fill_mask_text must hold [MASK] once, got {self.fill_mask_text!r}.")


def load_raw_datasets(data_args: DataTrainingArguments, model_args: ModelArguments):
    """The train/validation text, from the Hub or local files; a validation split held out if there is none."""
    if data_args.dataset_name is not None:
        raw = data.load_hub_dataset(data_args, model_args, streaming=data_args.streaming)
    else:
        files, streaming = data_args.data_files(), data_args.streaming
        raw = data.load_data_files(files, cache_dir=model_args.cache_dir, streaming=streaming)
    if "validation" in raw or "train" not in raw or data_args.streaming:
        return raw
    split = raw["train"].train_test_split(test_size=data_args.validation_split_percentage / 100, shuffle=False)
    return datasets.DatasetDict(train=split["train"], validation=split["test"])


def check_streaming(data_args: DataTrainingArguments, model_args: ModelArguments, training_args) -> None:
    """What `--streaming` needs, before any data is read."""
    if training_args.do_train and training_args.max_steps <= 0:
        raise ScriptError("--streaming needs --max_steps: a stream has no length to count epochs by.")
    if model_args.tokenizer_name is None and model_args.model_name_or_path is None:
        raise ScriptError("--streaming needs a tokenizer (--tokenizer_name): none is trained on a stream.")
    if training_args.do_eval and data_args.dataset_name is None and data_args.validation_file is None:
        raise ScriptError("--streaming with --do_eval needs --validation_file: no split is held out of a stream.")
    if data_args.whole_word_mask:
        raise ScriptError("--streaming does not support --whole_word_mask.")


def run(argv: list[str]) -> dict:
    """The script on the arguments `argv` (none: the offline demo): the metrics of its evaluation."""
    if not argv:
        print("No arguments: running the offline demo, i.e.\n  python run_mlm.py " + shlex.join(DEMO_ARGS), flush=True)
        argv = DEMO_ARGS
    model_args, data_args, training_args = setup.start(DataTrainingArguments, argv)
    loads = [model_args.model_name_or_path, model_args.tokenizer_name]
    checks.check_arguments(training_args, loads=loads, no_predict=NO_PREDICT)
    evaluation = mlm.masked_token_evaluation()
    checks.check_evaluation_arguments(training_args, evaluation.metric_names, script="run_mlm.py")
    if data_args.streaming:
        check_streaming(data_args, model_args, training_args)
    loading.check_named_paths(model_args, data_args, training_args)
    setup.prepare_run(training_args, data_args)

    if model_args.model_name_or_path is None and model_args.config_name is None:
        model_args.config_name = "gmlp-tiny"
    config = loading.load_config(model_args)
    tokenizer = loading.load_tokenizer(model_args, required=False)
    if tokenizer is None and training_args.resume_from_checkpoint:  # the one the run trained
        tokenizer = AutoTokenizer.from_pretrained(resolve_checkpoint(training_args))
    raw = load_raw_datasets(data_args, model_args)
    tokenizer = tokenizer or mlm.train_or_load_tokenizer(raw, config, training_args)
    if data_args.fill_mask_text and tokenizer.mask_token is None:
        raise ScriptError("--fill_mask_text needs a tokenizer with a mask token; this one has none.")
    max_seq_length = loading.check_max_seq_length(data_args.max_seq_length, config, tokenizer, model_args)
    if model_args.model_name_or_path is None and config.vocab_size != len(tokenizer):
        logger.warning(
            f"vocab_size set to the tokenizer's {len(tokenizer)} tokens (the config had {config.vocab_size})."
        )
        config.vocab_size = len(tokenizer)
    model = loading.load_model(AutoModelForMaskedLM, model_args, config)
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        logger.warning(
            f"The tokenizer has {len(tokenizer)} tokens, the model's vocabulary {model.config.vocab_size}: resizing its embeddings to {len(tokenizer)} (the new tokens' embeddings start untrained)."
        )
        model.resize_token_embeddings(len(tokenizer))

    sources = {}  # each split's file, named in errors
    if data_args.dataset_name is None:
        sources = {"validation": f"The held-out part of {data_args.train_file}"}
        sources |= {split: f"The {split} file {path}" for split, path in data_args.data_files().items()}
    tokenized = mlm.tokenize_for_mlm(
        raw, tokenizer, max_seq_length, training_args=training_args, line_by_line=data_args.line_by_line,
        whole_word_mask=data_args.whole_word_mask, pad_to_max_length=data_args.pad_to_max_length,
        num_proc=data_args.preprocessing_num_workers, sources=sources,
    )  # fmt: skip
    if data_args.whole_word_mask:
        # The collator needs the offset mapping to find words; the Trainer would drop it as an unused column.
        training_args.remove_unused_columns = False
    train_dataset = eval_dataset = None
    if training_args.do_train:
        train_dataset = data.take_split(tokenized, "train", "--do_train", data_args.max_train_samples)
    collator = mlm.MaskedLMCollator(
        tokenizer, mlm_probability=data_args.mlm_probability, whole_word_mask=data_args.whole_word_mask,
        sparse_prediction=data_args.sparse_prediction and model.config.model_type == "gmlp", mask_seed=training_args.seed,
    )  # fmt: skip
    if training_args.do_eval:
        # Evaluation goes over the same sequences every time: for a stream, its first ones, held in memory.
        max_eval_samples = data_args.max_eval_samples or (1000 if data_args.streaming else None)
        eval_dataset = data.take_split(tokenized, "validation", "--do_eval", max_eval_samples)
        if data_args.streaming:
            eval_dataset = datasets.Dataset.from_list(list(eval_dataset))
        with training_args.main_process_first(desc="fixing the evaluation mask"):
            eval_dataset = mlm.with_fixed_mask(eval_dataset, collator, data_args.eval_mask_seed)

    vocab_size = model.config.vocab_size
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=CheckedCollator(collator, input_ids=vocab_size, labels=vocab_size),
        compute_metrics=evaluation.compute_metrics,
        preprocess_logits_for_metrics=evaluation.preprocess_logits_for_metrics,
    )
    trainer.add_callback(collator)  # the epoch, for the masks' seeds
    metrics = {}
    if training_args.do_train:
        train_samples = None if data_args.streaming else len(train_dataset)
        training.train_and_save(trainer, model_args=model_args, data_args=data_args, train_samples=train_samples)
    if training_args.do_eval:
        metrics = trainer.evaluate()
        # `perplexity` too, upstream run_mlm.py's name for it, which its users read.
        metrics |= {"eval_samples": len(eval_dataset), "perplexity": metrics["eval_perplexity"]}
        training.record_metrics(trainer, "eval", metrics)
    if data_args.fill_mask_text and trainer.is_world_process_zero():
        text = data_args.fill_mask_text.replace("[MASK]", tokenizer.mask_token)
        fill_mask = pipeline("fill-mask", model=trainer.model, tokenizer=tokenizer, device=trainer.model.device)
        print(f"\nFill-mask: {text}")
        for prediction in fill_mask(text, top_k=5):
            print(f"  {prediction['score']:.3f}  {prediction['token_str']}")
    dataset = data_args.dataset_name or data_args.train_file
    model_card.publish(trainer, model_args.model_name_or_path, task="fill-mask", dataset=dataset)
    return metrics


main = script_main(run)

if __name__ == "__main__":
    main()
