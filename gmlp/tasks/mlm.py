"""Masked-language-model data for `run_mlm.py`: the packaged default text, tokenization (line by line or in blocks),
the tokenizer trained on the fly, the fixed evaluation mask, and the evaluation's metrics."""

import dataclasses
import logging
import math
import zlib
from itertools import chain
from pathlib import Path

import datasets
import numpy as np
import torch
from transformers import AutoTokenizer, DataCollatorForLanguageModeling, DataCollatorForSeq2Seq, TrainerCallback

from ..tokenization_gmlp import train_tokenizer
from .data import is_text
from .errors import ScriptError
from .evaluation import TOKEN_LEVEL, Evaluation

logger = logging.getLogger(__name__)

# The Encyclopaedia Britannica 11th edition (1911, public domain) article "Shakespeare, William", about 31,700 words
# of English prose; see data/README.md for its source and cleaning.
DEFAULT_TRAIN_FILE = str(Path(__file__).parent / "data" / "eb1911_shakespeare.txt")


def text_column_of(dataset, source: str = "The data") -> str:
    """The column holding the text: "text" if there is one, else the first column (as in Transformers' run_mlm); an
    error naming `source` if that column does not hold text."""
    if dataset.features is None:  # a stream whose columns are not declared yet (a text file's is "text")
        return "text"
    column = "text" if "text" in dataset.column_names else dataset.column_names[0]
    if not is_text(dataset.features[column]):
        kind = getattr(dataset.features[column], "dtype", None) or type(dataset.features[column]).__name__
        raise ScriptError(f"{source}: its text column {column!r} holds {kind} values, not text. Name the text `text`.")
    return column


def train_or_load_tokenizer(raw_datasets, config, training_args):
    """A WordPiece tokenizer of the config's size trained on the training text by the main process and saved to the
    output directory, where the other processes load it, so that every process has the same vocabulary."""
    if "train" not in raw_datasets:
        raise ScriptError("No tokenizer, and no training data to train one on: pass --tokenizer_name.")
    with training_args.main_process_first(desc="training the tokenizer"):
        if training_args.process_index != 0:
            return AutoTokenizer.from_pretrained(training_args.output_dir)
        logger.info(f"Training a WordPiece tokenizer of {config.vocab_size} tokens on the training data")
        column = text_column_of(raw_datasets["train"], "The training data")
        n = config.max_position_embeddings
        tokenizer = train_tokenizer(raw_datasets["train"], config.vocab_size, model_max_length=n, text_column=column)
        tokenizer.save_pretrained(training_args.output_dir)
    return tokenizer


def tokenize_for_mlm(
    raw_datasets, tokenizer, max_seq_length, *, training_args, line_by_line=False, whole_word_mask=False, **options
):
    """Token ids for MLM: each non-empty line cut to `max_seq_length` (`line_by_line`, logging how many tokens that
    drops), or all the text joined and cut into blocks of `max_seq_length` tokens (the remainder of each 1,000 texts
    dropped, as in Transformers' run_mlm). `options`: `num_proc`, `pad_to_max_length` (of lines), and `sources`,
    each split's file, named in errors."""
    sources = {name: f"The {name} data" for name in raw_datasets} | options.get("sources", {})
    split_name, split = next(iter(raw_datasets.items()))
    text_column = text_column_of(split, sources[split_name])
    streaming = isinstance(split, datasets.IterableDataset)
    map_kwargs = {} if streaming else {"num_proc": options.get("num_proc")}  # a stream's map takes no processes
    # The special-tokens mask lets the collator skip [CLS]/[SEP] without recomputing it.
    outputs = {"return_special_tokens_mask": True, "return_offsets_mapping": whole_word_mask}

    def tokenize(examples):
        if not line_by_line:
            # Cut into blocks next: Transformers' warning that a text is longer than model_max_length is false.
            return tokenizer(examples[text_column], verbose=False, **outputs)
        lines = [line for line in examples[text_column] if line and not line.isspace()]
        # The collator cannot pad offset mappings, so whole-word masking pads every line to max_seq_length here.
        padding = "max_length" if whole_word_mask or options.get("pad_to_max_length") else False
        tokenized = tokenizer(lines, truncation=True, max_length=max_seq_length, padding=padding, **outputs)
        lengths = tokenizer(lines, return_length=True, verbose=False)["length"]
        tokenized["truncated_tokens"] = [max(0, length - max_seq_length) for length in lengths]
        if streaming and any(tokenized["truncated_tokens"]):  # a stream cannot be counted ahead: say it per batch
            cut = sum(tokenized["truncated_tokens"])
            logger.warning(
                f"--line_by_line: {cut:,} tokens truncated away in a batch of {len(lines)} lines (--max_seq_length {max_seq_length}); without --line_by_line none are lost."
            )
        return tokenized

    def group_texts(examples):
        joined = {key: list(chain(*examples[key])) for key in examples}
        total = len(joined["input_ids"]) // max_seq_length * max_seq_length
        return {k: [v[i : i + max_seq_length] for i in range(0, total, max_seq_length)] for k, v in joined.items()}

    with training_args.main_process_first(desc="tokenizing"):
        columns = split.column_names or [text_column]
        tokenized = raw_datasets.map(tokenize, batched=True, remove_columns=columns, **map_kwargs)
        if not line_by_line:
            tokenized = tokenized.map(group_texts, batched=True, **map_kwargs)
    for name, dataset in {} if streaming else tokenized.items():  # a stream cannot be counted ahead
        if len(dataset) == 0:
            what = "non-blank line" if line_by_line else f"block of --max_seq_length {max_seq_length} tokens"
            raise ScriptError(f"{sources[name]} has not one {what}: nothing to train or evaluate on.")
        if line_by_line and (cut := sum(dataset["truncated_tokens"])):
            kept = sum(len(ids) for ids in dataset["input_ids"])
            lines = sum(1 for tokens in dataset["truncated_tokens"] if tokens)
            logger.warning(
                f"--line_by_line: {sources[name]} lost {cut:,} of {cut + kept:,} tokens ({cut / (cut + kept):.1%}) in {lines} of {len(dataset)} lines longer than --max_seq_length {max_seq_length}. Without --line_by_line the text is cut into blocks of max_seq_length tokens and no token is lost."
            )
    return tokenized.remove_columns("truncated_tokens") if line_by_line else tokenized


def with_fixed_mask(dataset, collator: "MaskedLMCollator", seed: int):
    """`dataset` masked once by `collator`, with a generator seeded by `seed`: each example gets its masked
    `input_ids` and its `labels`, so that every evaluation of every checkpoint scores the same masked positions (a
    fresh random mask per evaluation moves the perplexity by several percent). `MaskedLMCollator` only pads them."""
    masker = dataclasses.replace(collator, seed=seed, mask_seed=None, sparse_prediction=False, pad_to_multiple_of=None)
    # One example at a time, in order, in this process: the masks depend only on the seed and the data.
    return dataset.map(
        lambda example: {key: value[0].tolist() for key, value in masker([example]).items()},
        remove_columns=[c for c in ("special_tokens_mask", "offset_mapping") if c in dataset.column_names],
        desc="Fixing the evaluation mask",
        load_from_cache_file=False,
    )


@dataclasses.dataclass
class MaskedLMCollator(DataCollatorForLanguageModeling, TrainerCallback):
    """Transformers' MLM collator, plus three things: examples that already carry `labels` (the fixed evaluation mask
    of `with_fixed_mask`) are padded, not masked again; with `mask_seed`, each batch is masked by a generator seeded
    from it, the epoch and the batch's tokens, so that a resumed run draws the masks the uninterrupted one drew
    (torch's global random state, which masks would otherwise come from, is restored by the Trainer only after it has
    collated the first resumed batch); and with `sparse_prediction`, every batch asks `GMLPForMaskedLM` for logits at
    the masked positions only (in training; the same loss, faster). As a Trainer callback it counts the epochs."""

    sparse_prediction: bool = False
    mask_seed: int | None = None
    # In shared memory: the data loader's worker processes may outlive an epoch (--dataloader_persistent_workers).
    epoch: torch.Tensor = dataclasses.field(default_factory=lambda: torch.zeros((), dtype=torch.long).share_memory_())

    def torch_call(self, examples):
        if isinstance(examples[0], dict) and "labels" in examples[0]:  # Seq2Seq's collator pads the labels with -100
            batch = DataCollatorForSeq2Seq(self.tokenizer, pad_to_multiple_of=self.pad_to_multiple_of)(examples)
        else:
            if self.mask_seed is not None:
                tokens = b"".join(np.asarray(example["input_ids"], dtype=np.int64).tobytes() for example in examples)
                seed = np.random.SeedSequence([self.mask_seed, int(self.epoch), zlib.crc32(tokens)])
                self.generator = torch.Generator().manual_seed(int(seed.generate_state(1)[0]))
            batch = super().torch_call(examples)
        if self.sparse_prediction:
            batch["sparse_prediction"] = True
        return batch

    def on_train_begin(self, args, state, control, **kwargs):
        self.epoch.fill_(math.floor(state.epoch or 0))  # a resumed run's epoch

    def on_epoch_end(self, args, state, control, **kwargs):
        self.epoch += 1


def masked_token_evaluation() -> Evaluation:
    """The evaluation's metrics: the loss over every masked token, its perplexity, and `masked_token_accuracy` (of
    the predicted token ids only: the vocabulary's logits are not kept)."""
    return Evaluation(
        TOKEN_LEVEL, masked_token_accuracy, ("accuracy",), keep=lambda logits: logits.argmax(dim=-1), perplexity=True
    )


def masked_token_accuracy(predictions: np.ndarray, labels: np.ndarray) -> dict:
    """Accuracy of the predicted token ids at the masked (labelled) positions."""
    masked = labels != -100
    return {"accuracy": float(np.mean(predictions[masked] == labels[masked]))}
