"""Tests of gmlp.tokenization_gmlp: training, BERT templates, masking, saving and the command line."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import pytest
from tokenizers import pre_tokenizers
from transformers import AutoTokenizer

from gmlp.tasks.errors import ScriptError
from gmlp.tokenization_gmlp import main, train_tokenizer
from gmlp.tokenization_gmlp import run as tokenizer_command

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_TYPES = ["wordpiece", "unigram"]
CORPUS = """\
The quick brown fox jumps over the lazy dog.
Gated multilayer perceptrons mix tokens with a spatial projection instead of attention.
A spatial gating unit multiplies one half of the channels by a projection of the other half.
The model learns the position of every token from the weights of its spatial projection.
Transformers rely on self-attention, but the paper asks whether attention is necessary at all.
On masked language modelling the small gated model matches the perplexity of a transformer.
The brown dog sleeps in the sun while the quick fox runs across the green field.
Researchers trained every model on the same data with the same number of steps.
Tiny attention helps on tasks that need alignment between two sentences, such as inference.
Question answering asks the model to find the answer span inside a paragraph of text.
Scaling the data and the number of parameters improves the gated model as much as the transformer.
Each block normalises its input, expands the channels, gates them, and projects them back.
"""
TEXT = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(CORPUS * 3, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module", params=MODEL_TYPES)
def model_type(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def tokenizer(corpus_file, model_type):
    return train_tokenizer([corpus_file], vocab_size=300, model_type=model_type, model_max_length=64)


def test_uncased_round_trip_lowercases(tokenizer):
    ids = tokenizer(TEXT)["input_ids"]
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == TEXT.lower()


def test_cased_round_trip_keeps_case(corpus_file, model_type):
    tokenizer = train_tokenizer([corpus_file], vocab_size=300, model_type=model_type, lowercase=False)
    ids = tokenizer(TEXT)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == TEXT


def test_sentence_pair_uses_bert_template(tokenizer):
    first, second = "the lazy dog", "a quick fox jumps"
    encoding = tokenizer(first, second)
    first_ids = tokenizer(first, add_special_tokens=False)["input_ids"]
    second_ids = tokenizer(second, add_special_tokens=False)["input_ids"]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id

    assert encoding["input_ids"] == [cls, *first_ids, sep, *second_ids, sep]
    assert encoding["token_type_ids"] == [0] * (len(first_ids) + 2) + [1] * (len(second_ids) + 1)


def test_special_tokens_come_first_in_the_vocabulary(tokenizer):
    special = [
        tokenizer.pad_token,
        tokenizer.unk_token,
        tokenizer.cls_token,
        tokenizer.sep_token,
        tokenizer.mask_token,
    ]
    assert special == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tokenizer.convert_tokens_to_ids(special) == [0, 1, 2, 3, 4]
    assert tokenizer.mask_token_id == 4


def test_mask_token_is_one_token_in_text(tokenizer):
    ids = tokenizer("the quick [MASK] fox", add_special_tokens=False)["input_ids"]
    assert ids.count(tokenizer.mask_token_id) == 1
    assert ids == [*tokenizer("the quick")["input_ids"][1:-1], 4, *tokenizer("fox")["input_ids"][1:-1]]


def test_model_max_length_truncates(tokenizer):
    assert tokenizer.model_max_length == 64
    assert len(tokenizer(TEXT * 20, truncation=True)["input_ids"]) == 64


def test_unigram_uses_metaspace(corpus_file):
    tokenizer = train_tokenizer([corpus_file], vocab_size=300, model_type="unigram")
    assert isinstance(tokenizer.backend_tokenizer.pre_tokenizer, pre_tokenizers.Metaspace)
    assert tokenizer.tokenize("the dog")[0].startswith("▁")


@pytest.mark.parametrize(
    "make_texts",
    [
        pytest.param(lambda path: path, id="one path"),
        pytest.param(lambda path: (Path(path),), id="tuple of Path"),
        pytest.param(lambda path: iter(CORPUS.splitlines() * 3), id="iterator of strings"),
        pytest.param(lambda path: datasets.Dataset.from_dict({"text": CORPUS.splitlines() * 3}), id="Dataset"),
        pytest.param(
            lambda path: datasets.Dataset.from_dict({"text": CORPUS.splitlines() * 3}).to_iterable_dataset(),
            id="IterableDataset",
        ),
    ],
)
def test_trains_from_any_source(make_texts, corpus_file):
    tokenizer = train_tokenizer(make_texts(corpus_file), vocab_size=300)
    assert {"the", "spatial", "model"} <= tokenizer.get_vocab().keys()
    assert tokenizer.decode(tokenizer(TEXT)["input_ids"], skip_special_tokens=True) == TEXT.lower()


def test_trains_from_a_named_dataset_column():
    lines = CORPUS.splitlines() * 3
    dataset = datasets.Dataset.from_dict({"sentence": lines, "label": [0] * len(lines)})
    tokenizer = train_tokenizer(dataset, vocab_size=300, text_column="sentence")
    assert {"the", "spatial", "model"} <= tokenizer.get_vocab().keys()


def test_missing_dataset_column_is_named():
    with pytest.raises(ValueError, match="'text'.*sentence.*text_column"):
        train_tokenizer(datasets.Dataset.from_dict({"sentence": ["a b c"]}))


def test_bad_model_type_names_the_choices(corpus_file):
    with pytest.raises(ValueError, match=r"model_type must be one of \['wordpiece', 'unigram'\], got 'bpe'"):
        train_tokenizer([corpus_file], model_type="bpe")


def test_missing_file_is_named(corpus_file, tmp_path):
    missing = str(tmp_path / "no_such_file.txt")
    with pytest.raises(FileNotFoundError, match="no_such_file.txt"):
        train_tokenizer([corpus_file, missing])


def test_too_small_vocab_size_is_rejected(corpus_file):
    with pytest.raises(ValueError, match="vocab_size must be larger than the 5 special tokens"):
        train_tokenizer([corpus_file], vocab_size=5)


def _encode_in_fresh_python(directory: Path, texts: list, cwd: Path) -> dict:
    """Load `directory` with AutoTokenizer in a new interpreter where gmlp cannot be imported, and encode."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["gmlp"] = None  # makes `import gmlp` fail even if the package is installed
        try:
            import gmlp
            sys.exit("gmlp is importable")
        except ImportError:
            pass
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained({str(directory)!r})
        texts = {texts!r}
        print(json.dumps({{
            "single": tokenizer(texts[0])["input_ids"],
            "pair": dict(tokenizer(*texts)),
            "mask_token_id": tokenizer.mask_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "model_max_length": tokenizer.model_max_length,
        }}))
        """
    )
    # -I: ignore PYTHONPATH and the user site, and do not put the working directory on sys.path.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-I", "-c", script],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_saved_tokenizer_loads_without_gmlp(tokenizer, tmp_path):
    saved = tmp_path / "tokenizer"
    tokenizer.save_pretrained(saved)
    texts = ["The lazy dog [MASK] over the fox.", "A spatial gating unit."]

    loaded = _encode_in_fresh_python(saved, texts, cwd=tmp_path)

    assert loaded["single"] == tokenizer(texts[0])["input_ids"]
    assert loaded["pair"] == dict(tokenizer(*texts))
    assert loaded["mask_token_id"] == tokenizer.mask_token_id == 4
    assert loaded["pad_token_id"] == tokenizer.pad_token_id == 0
    assert loaded["model_max_length"] == 64


def test_command_line_help():
    result = subprocess.run(
        [sys.executable, "-m", "gmlp.tokenization_gmlp", "--help"],
        check=False,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "--train_files" in result.stdout and "--model_type" in result.stdout


def test_command_line_trains_and_saves(corpus_file, tmp_path):
    output_dir = tmp_path / "cased-unigram"
    main(
        [
            "--train_files", corpus_file,
            "--output_dir", str(output_dir),
            "--vocab_size", "300",
            "--model_type", "unigram",
            "--cased",
        ]
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert tokenizer.decode(tokenizer(TEXT)["input_ids"], skip_special_tokens=True) == TEXT
    assert tokenizer.mask_token_id == 4


def test_wordpiece_training_is_deterministic(corpus_file, tmp_path):
    """The same text and options give the same tokenizer.json, byte for byte, in separate processes (the trainer of
    `tokenizers` alone numbers its `##` tokens in hash order, which differs from one process to the next)."""
    files = []
    for run in range(2):
        output = tmp_path / f"run{run}"
        result = subprocess.run(
            [sys.executable, "-m", "gmlp.tokenization_gmlp", "--train_files", corpus_file, "--output_dir", str(output),
             "--vocab_size", "150", "--min_frequency", "1"],
            check=False,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"},
            capture_output=True,
            text=True,
            timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        files.append((output / "tokenizer.json").read_bytes())
    assert files[0] == files[1]
    vocabulary = json.loads(files[0])["model"]["vocab"]
    assert len(vocabulary) == 150 and not any(
        t["content"].startswith("##") for t in json.loads(files[0])["added_tokens"]
    )


def test_the_command_line_takes_the_model_s_n(corpus_file, tmp_path):
    main(["--train_files", corpus_file, "--output_dir", str(tmp_path / "tiny"), "--vocab_size", "150",
          "--config_name", "gmlp-tiny"])  # fmt: skip
    assert AutoTokenizer.from_pretrained(tmp_path / "tiny").model_max_length == 128
    with pytest.raises(ScriptError, match="--model_max_length 512 is above the n = 128 of gmlp-tiny"):
        tokenizer_command(["--train_files", corpus_file, "--output_dir", str(tmp_path / "x"), "--config_name", "gmlp-tiny",
              "--model_max_length", "512"])  # fmt: skip
