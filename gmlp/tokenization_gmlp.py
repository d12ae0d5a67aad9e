"""Train a BERT-style tokenizer for gMLP that `AutoTokenizer.from_pretrained` loads without this package.

Two kinds are offered:

- `"wordpiece"`: BERT's WordPiece (BERT normalizer and pre-tokenizer, `##` continuation prefix), cased or uncased.
- `"unigram"`: a SentencePiece-style Unigram model (NFKC normalisation, `▁` Metaspace pre-tokenizer).

Both use the special tokens `[PAD] [UNK] [CLS] [SEP] [MASK]` (ids 0 to 4) and BERT's templates
`[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]`, with token_type_ids 0 for the first segment and 1 for the second.

Command line:

    python -m gmlp.tokenization_gmlp --train_files a.txt b.txt --output_dir DIR --vocab_size 8000 \\
        --model_type wordpiece [--cased] [--config_name gmlp-tiny]
"""

import argparse
import codecs
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import PreTrainedTokenizerFast

from .configuration_gmlp import PRESETS, GMLPConfig
from .tasks.errors import ArgumentParser, Range, ScriptError, check_ranges, script_main

MODEL_TYPES = ("wordpiece", "unigram")
PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = [PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN]
_DATASET_BATCH_SIZE = 1000
_ALPHABET_LIMIT = 1000  # characters, as in BERT's WordPiece training
_CONTINUING_PREFIX = "##"


def train_tokenizer(
    texts,
    vocab_size: int = 8000,
    model_type: str = "wordpiece",
    lowercase: bool = True,
    min_frequency: int = 2,
    model_max_length: int = 512,
    text_column: str = "text",
) -> PreTrainedTokenizerFast:
    """Train a WordPiece or Unigram tokenizer and wrap it as a Transformers fast tokenizer.

    Args:
        texts: what to train on. A path (`str` or `os.PathLike`) or a list/tuple of paths to text files,
            read line by line; a `datasets.Dataset` or `datasets.IterableDataset`, whose `text_column`
            is used; or any other iterable of strings (e.g. a generator, or `iter(list_of_strings)`).
            A list or tuple of strings is always taken as file paths.
        vocab_size: size of the vocabulary, special tokens included (an upper bound: a small corpus
            can yield fewer tokens).
        model_type: `"wordpiece"` or `"unigram"`.
        lowercase: lowercase the input (for WordPiece this also strips accents, as uncased BERT does).
        min_frequency: minimum count of a merged token (WordPiece only; the Unigram trainer prunes its
            vocabulary by likelihood and has no such threshold).
        model_max_length: the `model_max_length` of the returned tokenizer.
        text_column: the column holding the text when `texts` is a dataset.

    Returns:
        A `PreTrainedTokenizerFast` with pad, unk, cls, sep and mask tokens set. WordPiece training is
        deterministic: the same texts and options give the same tokenizer, byte for byte. Unigram training is
        not quite (`tokenizers` orders its rarest characters' scores by hash), so a retrained Unigram tokenizer
        may segment a rare character differently.

    Raises:
        ValueError: `model_type` is not one of `MODEL_TYPES`, `vocab_size` is too small, or the dataset
            has no `text_column`.
        FileNotFoundError: a training file does not exist.
        TypeError: a list or tuple holds something other than paths, or `texts` is a dataset dictionary
            rather than one split.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {list(MODEL_TYPES)}, got {model_type!r}.")
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size must be larger than the {len(SPECIAL_TOKENS)} special tokens {SPECIAL_TOKENS}, "
            f"got {vocab_size}."
        )
    files = _as_file_list(texts)
    if model_type == "wordpiece" and files is None and not _reiterable(texts):
        texts = list(_iter_texts(texts, text_column))  # read twice: _alphabet_tokens, then the trainer

    def lines() -> Iterator[str]:
        if files is None:
            return _iter_texts(texts, text_column)
        return (line for path in files for line in open(path, encoding="utf-8"))

    if model_type == "wordpiece":
        tokenizer, trainer, seeded = _wordpiece_pipeline(vocab_size, lowercase, min_frequency, lines())
    else:
        tokenizer, trainer = _unigram_pipeline(vocab_size, lowercase)
        seeded = []

    if files is not None:
        tokenizer.train(files, trainer)
    else:
        tokenizer.train_from_iterator(lines(), trainer)
    tokenizer = _unmark_special(tokenizer, seeded)
    if tokenizer.get_vocab_size() <= len(SPECIAL_TOKENS):
        named = f" ({', '.join(files)})" if files else ""
        raise ValueError(
            f"The training text{named} is empty or blank: the tokenizer learned no token but the special ones."
        )

    tokenizer.post_processor = _bert_post_processor(tokenizer)
    return _wrap(tokenizer, model_max_length)


def _wordpiece_pipeline(vocab_size: int, lowercase: bool, min_frequency: int, lines: Iterable[str]):
    """An untrained BERT WordPiece tokenizer, its trainer, and the tokens the trainer is seeded with (to be unmarked
    as special after training)."""
    tokenizer = Tokenizer(models.WordPiece(unk_token=UNK_TOKEN))
    # strip_accents=None follows `lowercase`, as in BERT: uncased strips accents, cased keeps them.
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    alphabet, continuing = _alphabet_tokens(tokenizer, lines, _ALPHABET_LIMIT)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS + continuing,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        continuing_subword_prefix=_CONTINUING_PREFIX,
        show_progress=False,
    )
    return tokenizer, trainer, continuing


def _alphabet_tokens(tokenizer: Tokenizer, lines: Iterable[str], limit: int) -> tuple[list[str], list[str]]:
    """The training alphabet (the `limit` most frequent characters of the normalised, pre-tokenized words, ties by
    code point) and the continuing-subword tokens (`##c`) of its characters that occur inside a word, sorted.

    Why: the trainer of `tokenizers` (0.23) numbers the `##c` tokens in hash-map order, and those ids break ties
    between merges of equal count, so two trainings on the same text differ (huggingface/tokenizers#1794). Giving the
    trainer the alphabet and the `##c` tokens up front, in a fixed order, makes training deterministic.
    """
    counts, inside = Counter(), set()
    for line in lines:
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(line)):
            counts.update(word)
            inside.update(word[1:])
    alphabet = sorted(sorted(counts, key=lambda c: (-counts[c], c))[:limit])
    return alphabet, [_CONTINUING_PREFIX + c for c in alphabet if c in inside]


def _unmark_special(tokenizer: Tokenizer, tokens: list[str]) -> Tokenizer:
    """`tokenizer` with `tokens` kept in its vocabulary as ordinary tokens, no longer added (special) ones."""
    if not tokens:
        return tokenizer
    state = json.loads(tokenizer.to_str())
    seeded = set(tokens)
    state["added_tokens"] = [token for token in state["added_tokens"] if token["content"] not in seeded]
    return Tokenizer.from_str(json.dumps(state))


def _unigram_pipeline(vocab_size: int, lowercase: bool):
    """An untrained SentencePiece-style Unigram tokenizer and its trainer."""
    tokenizer = Tokenizer(models.Unigram())
    # SentencePiece's default normalisation: NFKC, and no leading, trailing or repeated spaces.
    steps = [normalizers.NFKC(), normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    if lowercase:
        steps.append(normalizers.Lowercase())
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    # As in ALBERT: the mask absorbs the space before it, so "a [MASK] b" leaves no lone "▁" piece before it.
    mask = AddedToken(MASK_TOKEN, lstrip=True, normalized=False, special=True)
    special_tokens = [PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, mask]
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, unk_token=UNK_TOKEN, show_progress=False
    )
    return tokenizer, trainer


def _as_file_list(texts) -> list[str] | None:
    """The training files named by `texts`, or None when `texts` holds the text itself.

    Raises FileNotFoundError naming the first path that is not a file.
    """
    if isinstance(texts, (str, os.PathLike)):
        paths = [texts]
    elif isinstance(texts, (list, tuple)):
        paths = list(texts)
    else:
        return None
    for path in paths:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"A list or tuple passed to train_tokenizer must hold file paths, got a {type(path).__name__}."
            )
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"Training file not found: {os.fspath(path)!r}. train_tokenizer takes a list or tuple of "
                "strings as file paths; to train on in-memory texts pass an iterator such as iter(texts), "
                "or a datasets.Dataset."
            )
        check_text_file(os.fspath(path), "The training file")
    return [os.fspath(path) for path in paths]


def check_text_file(path: str, what: str) -> None:
    """Raise ValueError naming `path` (as `what`, e.g. "The train file") if it is empty, blank or not UTF-8 text."""
    blank = True
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as file:
        offset = 0
        while chunk := file.read(1 << 20):
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{what} {path} is not UTF-8 text (byte {offset + error.start}: {error.reason}); convert it, "
                    "e.g. `iconv -f latin1 -t utf-8`."
                ) from None
            blank = blank and not text.strip()
            offset += len(chunk)
    if blank:
        raise ValueError(f"{what} {path} is empty (or holds only blank lines).")


def _reiterable(texts) -> bool:
    """Whether `texts` can be read more than once (a dataset or a sequence, not an iterator)."""
    return not isinstance(texts, Iterator)


def _iter_texts(texts: Iterable, text_column: str) -> Iterator[str]:
    """The strings of a dataset's `text_column`, or of any other iterable of strings."""
    # `datasets` is not a dependency of the library: a dataset can only be given if it is already imported.
    datasets = sys.modules.get("datasets")
    if datasets is None:
        return iter(texts)
    if isinstance(texts, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise TypeError(
            f"train_tokenizer got a dataset dictionary with splits {list(texts)}; pass one split, "
            "e.g. dataset['train']."
        )
    if isinstance(texts, (datasets.Dataset, datasets.IterableDataset)):
        if texts.column_names is not None and text_column not in texts.column_names:
            raise ValueError(
                f"The dataset has no column {text_column!r} (its columns: {texts.column_names}); "
                "pass text_column=... to name the column that holds the text."
            )
        return (text for batch in texts.iter(batch_size=_DATASET_BATCH_SIZE) for text in batch[text_column])
    return iter(texts)


def _bert_post_processor(tokenizer: Tokenizer) -> processors.TemplateProcessing:
    """BERT's `[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]` template, segment B with token type 1."""
    return processors.TemplateProcessing(
        single=f"{CLS_TOKEN}:0 $A:0 {SEP_TOKEN}:0",
        pair=f"{CLS_TOKEN}:0 $A:0 {SEP_TOKEN}:0 $B:1 {SEP_TOKEN}:1",
        special_tokens=[(token, tokenizer.token_to_id(token)) for token in (CLS_TOKEN, SEP_TOKEN)],
    )


def _wrap(tokenizer: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    """The trained `tokenizer` as a Transformers fast tokenizer with BERT's special tokens and inputs."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        cls_token=CLS_TOKEN,
        sep_token=SEP_TOKEN,
        mask_token=MASK_TOKEN,
        model_max_length=model_max_length,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


COMMAND_LINE_RANGES = {
    "--vocab_size": Range(above=len(SPECIAL_TOKENS)),
    "--min_frequency": Range(at_least=1),
    "--model_max_length": Range(at_least=1),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line options, checked: numbers in range, the training files there (all named if not)."""
    parser = ArgumentParser(
        prog="python -m gmlp.tokenization_gmlp",
        description="Train a WordPiece or Unigram tokenizer for gMLP and save it for AutoTokenizer.from_pretrained.",
    )
    parser.add_argument("--train_files", nargs="+", required=True, help="Text files to train on, read line by line.")
    parser.add_argument("--output_dir", required=True, help="Directory to save the tokenizer to.")
    parser.add_argument("--vocab_size", type=int, default=8000, help="Vocabulary size, special tokens included.")
    parser.add_argument("--model_type", choices=MODEL_TYPES, default="wordpiece", help="Tokenizer model.")
    parser.add_argument("--cased", action="store_true", help="Keep case (default: lowercase the input).")
    parser.add_argument(
        "--min_frequency", type=int, default=2, help="Minimum count of a merged token (WordPiece only)."
    )
    parser.add_argument(
        "--config_name",
        help="The model the tokenizer is for: a gMLP preset (e.g. gmlp-tiny) or a folder with its config.json. Its n "
        "(max_position_embeddings) becomes the tokenizer's model_max_length, so that truncation=True fits the model.",
    )
    parser.add_argument(
        "--model_max_length",
        type=int,
        help="The tokenizer's model_max_length (default: the model's n with --config_name, else 512); at most n.",
    )
    args = parser.parse_args(argv)
    check_ranges(args, COMMAND_LINE_RANGES)
    if missing := [path for path in args.train_files if not os.path.isfile(path)]:
        raise ScriptError(f"--train_files {' '.join(missing)}: no such file{'s' * (len(missing) > 1)}.")
    if os.path.isfile(args.output_dir):
        raise ScriptError(f"--output_dir {args.output_dir} is a file; name a folder to save the tokenizer to.")
    return args


def model_max_length(config_name: str | None, requested: int | None) -> int:
    """The tokenizer's model_max_length: `requested`, or the n of the model `config_name` (a preset or a folder),
    else 512; an error naming both if `requested` is above that model's n."""
    if config_name is None:
        return requested or 512
    if config_name in PRESETS:
        n = GMLPConfig.from_preset(config_name).max_position_embeddings
    elif os.path.isfile(os.path.join(config_name, "config.json")):
        n = GMLPConfig.from_pretrained(config_name).max_position_embeddings
    else:
        raise ScriptError(
            f"--config_name {config_name!r} is neither a gMLP preset ({', '.join(PRESETS)}) nor a folder with a "
            "config.json."
        )
    if requested is not None and requested > n:
        raise ScriptError(
            f"--model_max_length {requested} is above the n = {n} of {config_name} (max_position_embeddings): "
            f"inputs truncated to {requested} tokens would not fit the model. Leave it out to use {n}."
        )
    return requested or n


def run(argv: list[str]) -> None:
    """Train a tokenizer on the command line's arguments `argv` and save it to `--output_dir`."""
    args = parse_args(argv)
    length = model_max_length(args.config_name, args.model_max_length)
    try:
        tokenizer = train_tokenizer(
            args.train_files,
            vocab_size=args.vocab_size,
            model_type=args.model_type,
            lowercase=not args.cased,
            min_frequency=args.min_frequency,
            model_max_length=length,
        )
    except ValueError as error:  # the text: empty, blank or not UTF-8
        raise ScriptError(str(error)) from None
    tokenizer.save_pretrained(args.output_dir)
    print(f"Saved a {args.model_type} tokenizer with {len(tokenizer)} tokens to {args.output_dir}")


main = script_main(run)

if __name__ == "__main__":
    main()
