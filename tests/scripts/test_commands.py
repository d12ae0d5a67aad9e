"""Every command line of the package speaks as the scripts do: the tokenizer trainer, timm's converter, the pictures of
the spatial weights and the benchmarks end a user's mistake (a missing file, a number out of range, an option argparse
refuses) with one `error: ...` line on stderr and exit code 2, before anything is written; files named are checked
before anything else, all of them at once."""

import pytest
from helpers import python, write

from benchmarks.quality import __main__ as quality
from benchmarks.speed import __main__ as speed
from gmlp import GMLPConfig, GMLPForMaskedLM, convert_timm, tokenization_gmlp, visualize

COMMANDS = {
    "tokenizer": tokenization_gmlp.main,
    "converter": convert_timm.main,
    "pictures": visualize.main,
    "speed": speed.main,
    "quality": quality.main,
}


def tiny_checkpoint(folder):
    sizes = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 32, "max_position_embeddings": 8}
    GMLPForMaskedLM(GMLPConfig(num_hidden_layers=2, **sizes)).save_pretrained(folder)
    return folder


MISTAKES = {
    # name: (command, its arguments ({tmp}: tmp_path, {checkpoint}: a tiny gMLP checkpoint), the error line)
    "tokenizer: missing corpora": (
        "tokenizer",
        "--train_files {tmp}/corpus.txt {tmp}/more.txt --output_dir {tmp}/out",
        "--train_files {tmp}/corpus.txt {tmp}/more.txt: no such files.",
    ),
    "tokenizer: an empty corpus": (
        "tokenizer",
        "--train_files {tmp}/empty.txt --output_dir {tmp}/out",
        "The training file {tmp}/empty.txt is empty (or holds only blank lines).",
    ),
    "tokenizer: numbers out of range": (
        "tokenizer",
        "--train_files {tmp}/text.txt --output_dir {tmp}/out --vocab_size 5 --min_frequency 0",
        "--vocab_size 5: must be above 5; --min_frequency 0: must be at least 1.",
    ),
    "tokenizer: no --output_dir": (
        "tokenizer",
        "--train_files {tmp}/text.txt",
        "The following arguments are required: --output_dir. `--help` lists the options.",
    ),
    "tokenizer: a --config_name nowhere": (
        "tokenizer",
        "--train_files {tmp}/text.txt --output_dir {tmp}/out --config_name gmlp-tinyy",
        "--config_name 'gmlp-tinyy' is neither a gMLP preset (gmlp-base, gmlp-large, gmlp-xlarge, amlp-base, amlp-large, gmlp-tiny, amlp-tiny) nor a folder with a config.json.",
    ),
    "converter: a checkpoint that does not exist": (
        "converter",
        "--checkpoint {tmp}/timm.pth --output {tmp}/out",
        "--checkpoint {tmp}/timm.pth: no such file.",
    ),
    "converter: nothing to convert": (
        "converter",
        "--output {tmp}/out",
        "One of the arguments --timm-model/--timm_model --checkpoint is required. `--help` lists the options.",
    ),
    "pictures: a checkpoint folder that does not exist": (
        "pictures",
        "{tmp}/mlm --output {tmp}/out/filters.png",
        "{tmp}/mlm: not a checkpoint folder (it has no config.json).",
    ),
    "pictures: a folder for the picture that does not exist": (
        "pictures",
        "{checkpoint} --output {tmp}/out/filters.png",
        "--output {tmp}/out/filters.png: no such folder {tmp}/out.",
    ),
    "pictures: a layer the model lacks": (
        "pictures",
        "{checkpoint} --output {tmp}/filters.png --layers 0,2",
        "Layers [2] do not exist: the model has layers 0 to 1.",
    ),
    "pictures: a head that is no number": (
        "pictures",
        "{checkpoint} --head first",
        "--head: invalid int value: 'first'. `--help` lists the options.",
    ),
    "speed: numbers out of range": (
        "speed",
        "--threads 0 --lengths 128 0 --output {tmp}/out/speed.json",
        "--threads 0: must be at least 1; --lengths 0: must be at least 1.",
    ),
    "speed: a section that does not exist": (
        "speed",
        "--sections training,trainig --output {tmp}/out/speed.json",
        "Unknown sections trainig; choose from training, generation, precision, memory, scaling, padding_free. `--help` lists the options.",
    ),
    "speed: a device there is not": (
        "speed",
        "--device tpu --output {tmp}/out/speed.json",
        "--device tpu: not a device here; cpu, or cuda where torch finds a GPU.",
    ),
    "speed: padding_free without its data": (
        "speed",
        "--sections padding_free --data {tmp}/data --output {tmp}/out/speed.json",
        "--data {tmp}/data: no such folder (the padding_free section reads its GLUE files).",
    ),
    "quality: numbers out of range": (
        "quality",
        "--seeds 0 -1 --jobs 0 --work_dir {tmp}/out --output {tmp}/out/quality.json",
        "--jobs 0: must be at least 1; --seeds -1: must be at least 0 and at most 4294967295.",
    ),
    "quality: no data": (
        "quality",
        "--data {tmp}/data --work_dir {tmp}/out --output {tmp}/out/quality.json",
        "--data {tmp}/data: no wikitext-2/train.txt there; pass the shared data folder.",
    ),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_a_mistake_is_one_error_line_and_exit_code_2(case, tmp_path, capsys):
    command, arguments, message = MISTAKES[case]
    write(tmp_path / "text.txt", "the sky is blue\nbirds fly over the green forest\n")
    write(tmp_path / "empty.txt", "")
    checkpoint = tiny_checkpoint(tmp_path / "checkpoint") if "{checkpoint}" in arguments else None
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        COMMANDS[command](arguments.format(tmp=tmp_path, checkpoint=checkpoint).split())
    errors = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")
    ]  # after progress bars
    assert (stop.value.code, errors) == (2, [f"error: {message.format(tmp=tmp_path)}"])
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
@pytest.mark.parametrize(
    "module, arguments",
    [
        ("gmlp.tokenization_gmlp", ["--train_files", "missing.txt", "--output_dir", "tok"]),
        ("gmlp.convert_timm", ["--checkpoint", "missing.pth", "--output", "converted"]),
        ("gmlp.visualize", ["missing"]),
        ("benchmarks.speed", ["--rounds", "0"]),
        ("benchmarks.quality", ["--jobs", "0"]),
    ],
)
def test_each_module_run_as_a_command_prints_one_line_without_a_traceback(module, arguments, tmp_path):
    result = python(tmp_path, "-m", module, *arguments)
    assert result.returncode == 2, result.stderr[-3000:]
    assert [line[:7] for line in result.stderr.splitlines()] == ["error: "], result.stderr[-3000:]


@pytest.mark.e2e
def test_the_library_s_commands_leave_the_scripts_dependencies_alone(tmp_path):
    """They share the scripts' error path (gmlp/tasks/errors.py, the standard library only), not their imports."""
    code = "import sys, gmlp.tokenization_gmlp, gmlp.convert_timm, gmlp.visualize\nprint(sorted(m for m in ('datasets', 'evaluate') if m in sys.modules))"
    result = python(tmp_path, "-c", code)
    assert (result.returncode, result.stdout.strip()) == (0, "[]"), result.stderr[-3000:]
