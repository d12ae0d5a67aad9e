"""run_mlm.py end to end on tiny fixtures: outputs, metrics, fill-mask, line by line (its padding, the tokens it
truncates), whole words, streaming, errors, resuming. (Two processes: test_processes.py.)"""

import json
import logging
import math
import re
from pathlib import Path

import datasets
import pytest
from helpers import WORDS, config_overrides, rotated_lines, tiny_run, write
from script_runs import mlm_run
from transformers import AutoModelForMaskedLM, AutoTokenizer, TrainingArguments

from gmlp import GMLPConfig, GMLPModel
from gmlp.tasks import loading, run_mlm
from gmlp.tasks.arguments import ModelArguments, parse_arguments
from gmlp.tasks.errors import ScriptError
from gmlp.tasks.mlm import DEFAULT_TRAIN_FILE, tokenize_for_mlm, train_or_load_tokenizer

ROOT = Path(__file__).parents[2]

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the king", "a small bird"]
VERBS = ["sat on", "looked at", "walked to", "thought about", "sang to", "ran past"]
OBJECTS = ["the garden", "a red house", "the river", "the castle", "an open window", "the green hill"]


def write_corpus(path: Path, lines: int, offset: int = 0) -> Path:
    """Deterministic English-like sentences, one per line."""
    text = [
        f"{SUBJECTS[(i + offset) % 6]} {VERBS[(i * 5 + offset) % 6]} {OBJECTS[(i * 7 + offset) % 6]} and then slept ."
        for i in range(lines)
    ]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def mlm_args(tmp_path: Path, output_dir: Path, *extra: str) -> list[str]:
    """A tiny run from scratch (helpers.tiny_run; the tokenizer trained on the training file, of at most 300
    tokens) on 60 training and 12 validation sentences."""
    return tiny_run(
        output_dir,
        *extra,
        overrides={"vocab_size": 300},
        train_file=write_corpus(tmp_path / "train.txt", 60),
        validation_file=write_corpus(tmp_path / "validation.txt", 12, offset=3),
        do_train=True,
        do_eval=True,
        max_seq_length=32,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        learning_rate=1e-3,
        seed=7,
    )


def test_pretrains_from_text_files_and_predicts_a_mask(tmp_path, capsys):
    output_dir = tmp_path / "out"
    metrics = run_mlm.run(
        mlm_args(tmp_path, output_dir, "--max_steps", "4", "--fill_mask_text", "the cat [MASK] on the river .")
    )

    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "eval_results.json",
        "all_results.json",
        "train_results.json",
        "trainer_state.json",
    ):
        assert (output_dir / name).is_file(), name
    results = json.loads((output_dir / "eval_results.json").read_text())
    assert results["perplexity"] == pytest.approx(math.exp(results["eval_loss"]))
    assert 0.0 <= results["eval_accuracy"] <= 1.0
    assert metrics["eval_loss"] == results["eval_loss"]
    assert json.loads((output_dir / "trainer_state.json").read_text())["global_step"] == 4

    # The tokenizer was trained on the training file (vocab_size from the config) and the model sized to it.
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForMaskedLM.from_pretrained(output_dir)
    assert model.config.vocab_size == len(tokenizer) <= 300
    assert tokenizer.tokenize("the cat sat") == ["the", "cat", "sat"]

    printed = capsys.readouterr().out
    fill_lines = printed[printed.index("Fill-mask: the cat [MASK] on the river .") :].splitlines()[1:6]
    assert len(fill_lines) == 5
    assert all(float(line.split()[0]) >= 0 for line in fill_lines)


def test_line_by_line_whole_word_masking_from_csv(tmp_path):
    csv_path = tmp_path / "train.csv"
    lines = write_corpus(tmp_path / "lines.txt", 40).read_text().splitlines()
    csv_path.write_text("id,text\n" + "\n".join(f"{i},{line}" for i, line in enumerate(lines)) + "\n")
    output_dir = tmp_path / "out"
    args = mlm_args(
        tmp_path,
        output_dir,
        "--max_steps",
        "2",
        "--line_by_line",
        "--whole_word_mask",
        "--validation_split_percentage",
        "10",
        "--max_train_samples",
        "20",
    )
    args[args.index("--train_file") + 1] = str(csv_path)
    del args[args.index("--validation_file") : args.index("--validation_file") + 2]
    run_mlm.run(args)

    train = json.loads((output_dir / "train_results.json").read_text())
    evaluation = json.loads((output_dir / "eval_results.json").read_text())
    assert train["train_samples"] == 20
    assert evaluation["eval_samples"] == 4  # 10% of the 40 lines, one sequence per line


def test_no_data_arguments_use_the_packaged_english_text():
    args = run_mlm.DataTrainingArguments()
    assert args.train_file == DEFAULT_TRAIN_FILE
    text = Path(DEFAULT_TRAIN_FILE).read_text(encoding="utf-8")
    assert text.startswith("Shakespeare, William (1564--1616), English poet, player and playwright")
    assert len(text.split()) > 30_000
    assert "--config_name" in run_mlm.DEMO_ARGS and "gmlp-tiny" in run_mlm.DEMO_ARGS


def test_the_readme_gives_the_size_of_the_model_the_main_job_builds(tmp_path):
    """The main job (no arguments) builds its model as here: the demo's config, its vocabulary filled by the tokenizer
    it trains on the packaged text (so the config keeps its size). The README's quick start says both figures; its
    presets table gives gmlp-tiny / amlp-tiny at their default vocabulary (the bare encoder, as docs/design.md)."""
    argv = [*run_mlm.DEMO_ARGS, "--output_dir", str(tmp_path)]
    model_args, data_args, training_args = parse_arguments(
        ModelArguments, run_mlm.DataTrainingArguments, TrainingArguments, argv=argv
    )
    config = loading.load_config(model_args)
    tokenizer = train_or_load_tokenizer(run_mlm.load_raw_datasets(data_args, model_args), config, training_args)
    assert len(tokenizer) == config.vocab_size
    model = loading.load_model(AutoModelForMaskedLM, model_args, config)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())  # its lines joined
    said = re.search(
        r"it pretrains `gmlp-tiny` at a vocabulary of ([\d,]+) tokens \((\d+\.\d\d)M parameters\)", readme
    )
    assert said, "README.md's quick start no longer gives the main job's model size"
    assert (int(said[1].replace(",", "")), said[2]) == (config.vocab_size, f"{parameters / 1e6:.2f}")
    tiny = [GMLPModel(GMLPConfig.from_preset(name)).num_parameters() for name in ("gmlp-tiny", "amlp-tiny")]
    assert f"`gmlp-tiny` / `amlp-tiny` {tiny[0] / 1e6:.2f}M / {tiny[1] / 1e6:.2f}M |" in readme


BAD_INPUTS = {  # the flag changed -> what the error says
    "--train_file missing.txt": (
        {"--train_file": "missing.txt"},
        "missing.txt: no such file.",
    ),
    "--train_file train.docx": ({"--train_file": "train.docx"}, "unsupported extension 'docx'"),
    "--max_seq_length 64": (
        {"--max_seq_length": "64"},
        "--max_seq_length 64 is larger than the model's spatial size n = max_position_embeddings = 32",
    ),
    "a misspelt config key": (
        {"--config_overrides": "num_hidden_layer=2"},
        "key num_hidden_layer isn't in the original config",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_stops_early_with_a_fix(tmp_path, case):
    change, message = BAD_INPUTS[case]
    args = mlm_args(tmp_path, tmp_path / "out", "--max_steps", "1")
    for flag, value in change.items():
        args[args.index(flag) + 1] = value if "/" in value or flag != "--train_file" else str(tmp_path / value)
    (tmp_path / "train.docx").write_text("x")
    with pytest.raises(ScriptError, match=re.escape(message)):
        run_mlm.run(args)
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_resume_from_checkpoint_continues_the_global_step(tmp_path):
    output_dir = tmp_path / "out"
    # The later --save_strategy wins over mlm_args' "no".
    common = ["--logging_steps", "1", "--save_strategy", "steps", "--save_steps", "2"]
    first = mlm_args(tmp_path, output_dir, "--max_steps", "2", *common)
    first.remove("--do_eval")
    run_mlm.run(first)
    state_2 = json.loads((output_dir / "checkpoint-2" / "trainer_state.json").read_text())
    assert state_2["global_step"] == 2

    # As if the run had been killed after checkpoint 2: resume it with a longer schedule; the tokenizer comes from
    # the checkpoint (not trained again).
    resumed = [arg if arg != "2" or i != first.index("--max_steps") + 1 else "4" for i, arg in enumerate(first)]
    resumed += ["--resume_from_checkpoint", str(output_dir / "checkpoint-2")]
    run_mlm.run(resumed)
    state_4 = json.loads((output_dir / "trainer_state.json").read_text())
    assert state_4["global_step"] == 4
    losses = {entry["step"]: entry["loss"] for entry in state_4["log_history"] if "loss" in entry}
    assert sorted(losses) == [1, 2, 3, 4]
    # Steps 1-2 are the first run's, carried over from the checkpoint.
    assert [losses[1], losses[2]] == [entry["loss"] for entry in state_2["log_history"] if "loss" in entry]


def test_line_by_line_logs_the_tokens_it_truncates(tokenizer_dir, tmp_path, caplog):
    train = write(tmp_path / "train.txt", "\n".join([" ".join(WORDS * 10)] * 4) + "\n")
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_mlm.run(
            mlm_run(tokenizer_dir, tmp_path, "--line_by_line", train_file=train, validation_file=train, max_steps=1)
        )
    message = next(
        record.getMessage() for record in caplog.records if "--line_by_line: The train file" in record.getMessage()
    )
    assert "4 of 4 lines longer than --max_seq_length 16" in message
    assert f"{train}" in message and "Without --line_by_line" in message
    lost = int(message.split(" lost ")[1].split(" of ")[0].replace(",", ""))
    assert lost == 4 * (len(WORDS) * 10 + 2 - 16)  # every line: its words, [CLS] and [SEP], less the 16 kept


def test_line_by_line_pads_to_max_seq_length_when_asked(tmp_path, script_tokenizer):
    lines = ["the cat sat", "the old dog slept by the warm fire and the cat sat on a red mat"]
    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": lines})})
    arguments = TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    dynamic, fixed = (
        tokenize_for_mlm(raw, script_tokenizer, 16, training_args=arguments, line_by_line=True, pad_to_max_length=pad)[
            "train"
        ]
        for pad in (False, True)
    )
    assert sorted(len(ids) for ids in dynamic["input_ids"]) == [5, 16]
    assert [len(ids) for ids in fixed["input_ids"]] == [16, 16]
    assert fixed["input_ids"][0][:5] == dynamic["input_ids"][0]


def test_the_vocabulary_is_sized_to_the_tokenizer_and_says_so(tokenizer_dir, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_mlm.run(mlm_run(tokenizer_dir, tmp_path, config_overrides=config_overrides(vocab_size=300), max_steps=1))
    assert re.search(r"vocab_size set to the tokenizer's 11\d tokens \(the config had 300\)", caplog.text)
    vocab_size = json.loads((tmp_path / "out" / "config.json").read_text())["vocab_size"]
    assert vocab_size == len(AutoTokenizer.from_pretrained(tokenizer_dir)) < 300


def test_run_mlm_streams_a_corpus(tokenizer_dir, tmp_path):
    text = write(tmp_path / "stream.txt", "\n".join(rotated_lines(200)) + "\n")
    options = {"train_file": text, "validation_file": text, "max_eval_samples": 8}
    metrics = run_mlm.run(mlm_run(tokenizer_dir, tmp_path, "--do_eval", "--streaming", **options))
    assert metrics["eval_samples"] == 8 and metrics["perplexity"] > 1
    assert json.loads((tmp_path / "out" / "trainer_state.json").read_text())["global_step"] == 2
    without_steps = mlm_run(tokenizer_dir, tmp_path, "--do_eval", "--streaming", **options, max_steps=None)
    with pytest.raises(ScriptError, match="--streaming needs --max_steps"):
        run_mlm.run([*without_steps, "--output_dir", str(tmp_path / "other")])
