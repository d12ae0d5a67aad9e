"""The scripts' one error path for users: a user's mistake ends the script with one `error: ...` line on stderr and exit
code 2, as argparse does, without a traceback (under torchrun, each process that meets it prints its line); a bug in
our code still shows its traceback; a run that succeeds exits with 0, also as an installed command. Every error the
task code raises for users is a `ScriptError`, and every message in it is one string literal, so that grepping the
message a user saw finds it."""

import ast
import io
import tokenize
from pathlib import Path

import pytest
from helpers import python, tiny_run
from script_runs import LABELLED, csv_file, glue_run

from gmlp.tasks import loading, run_glue, run_mlm

ROOT = Path(__file__).parents[2]
TASKS = ROOT / "gmlp" / "tasks"
MISSING = "--train_file {tmp}/missing.csv: no such file."


def test_a_user_error_is_one_line_on_stderr_and_exit_code_2(tokenizer_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        run_glue.main(glue_run(tokenizer_dir, tmp_path, train_file=tmp_path / "missing.csv"))
    assert stop.value.code == 2
    assert capsys.readouterr().err == f"error: {MISSING.format(tmp=tmp_path)}\n"


def test_a_message_of_several_lines_is_printed_as_one(tmp_path, capsys):
    """Transformers' own refusals of option values come in several lines."""
    options = ["--do_train", "--load_best_model_at_end", "--eval_strategy", "steps", "--save_strategy", "epoch"]
    with pytest.raises(SystemExit) as stop:
        run_mlm.main(["--output_dir", str(tmp_path / "out"), *options])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and error.count("\n") == 1
    assert error.startswith("error: --load_best_model_at_end requires the save and eval strategy to match")


def test_a_bug_is_not_taken_for_a_user_error(tokenizer_dir, tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(loading, "load_config", broken)
    with pytest.raises(KeyError, match="a bug"):
        run_glue.main(glue_run(tokenizer_dir, tmp_path))
    assert "error:" not in capsys.readouterr().err


@pytest.mark.e2e
def test_the_scripts_print_a_user_error_without_a_traceback(tokenizer_dir, tmp_path):
    arguments = glue_run(tokenizer_dir, tmp_path, train_file=tmp_path / "missing.csv")
    result = python(tmp_path, ROOT / "run_glue.py", *arguments)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == f"error: {MISSING.format(tmp=tmp_path)}"
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == result.stderr.splitlines()[
        -1:
    ]
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.e2e
def test_a_bug_shows_its_traceback(tmp_path):
    code = "import gmlp.tasks.loading as loading, sys\ndef broken(*args, **kwargs):\n    raise KeyError('a bug in our code')\nloading.load_config = broken\nfrom gmlp.tasks.run_mlm import main\nsys.exit(main())"
    result = python(tmp_path, "-c", code, "--config_name", "gmlp-tiny", "--do_train", "--output_dir", tmp_path / "out")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr and "KeyError: 'a bug in our code'" in result.stderr
    assert not any(line.startswith("error: ") for line in result.stderr.splitlines())


@pytest.mark.e2e
def test_a_run_that_succeeds_exits_with_0_as_an_installed_command(tokenizer_dir, tmp_path):
    """The command `gmlp-run-glue` is `sys.exit(main())`: main returns nothing, which exits with 0."""
    arguments = glue_run(tokenizer_dir, tmp_path, max_steps=1)
    result = python(tmp_path, "-c", "import sys\nfrom gmlp.tasks.run_glue import main\nsys.exit(main())", *arguments)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "out" / "model.safetensors").is_file()


@pytest.mark.e2e
def test_under_torchrun_each_process_prints_the_users_error_once(tokenizer_dir, tmp_path):
    train = csv_file(tmp_path / "train.csv", LABELLED)
    arguments = tiny_run(tmp_path / "out", tokenizer=tokenizer_dir, train_file=train, do_train=True, max_seq_length=64)
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", ROOT / "run_glue.py"]
    result = python(tmp_path, *launch, *arguments)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    message = "error: --max_seq_length 64 is larger than the model's spatial size n = max_position_embeddings = 32"
    assert sum(line.startswith(message) for line in output.splitlines()) == 2, output[-3000:]
    assert "gmlp/tasks" not in output  # no traceback of the scripts' code (torchrun adds a report of its own)


# ---- every error for users is a ScriptError, its message one literal ---------------------------------------------
def sources() -> list[Path]:
    return sorted(path for path in TASKS.rglob("*.py") if "metrics" not in path.parts)


# A run that leaves its process group to the interpreter's exit: held by a reference cycle, as the Trainer's cycles hold
# the model's DDP wrapper.
RUN_WITH_A_GROUP = """
import sys, weakref
import torch.distributed as dist
from gmlp.tasks.errors import script_main

class Holder:
    pass

def run(argv):
    global held
    dist.init_process_group("gloo", init_method=argv[0], rank=0, world_size=1)
    holder = Holder()
    holder.cycle, holder.group = holder, dist.group.WORLD
    held = weakref.ref(holder)

script_main(run)(sys.argv[1:])
print(dist.is_initialized(), held() is None)
"""


def test_a_run_ends_its_process_group_while_python_runs(tmp_path):
    """A gloo thread that frees a collective's tensors while Python exits aborts the process at random ("terminate
    called without an active exception"): a run's group is destroyed, what holds it collected, before `main` returns."""
    result = python(tmp_path, "-c", RUN_WITH_A_GROUP, f"file://{tmp_path / 'store'}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]


def test_every_error_the_scripts_raise_is_a_script_error():
    """`raise` of a new exception anywhere in gmlp/tasks is a ScriptError (the metrics' `evaluate` interface aside, a
    library's API); a bare `raise` or a variable passes an error on."""
    others = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", None))
                if name not in ("ScriptError", "SystemExit"):  # SystemExit: `main`'s exit code 2
                    others.append(f"{path.relative_to(ROOT)}:{node.lineno} raises {name}")
    assert others == []


def test_no_message_is_split_across_adjacent_string_literals():
    """Adjacent literals are joined by Python into one message, which then appears nowhere whole in the code."""
    starts = {tokenize.STRING, getattr(tokenize, "FSTRING_START", tokenize.STRING)}  # f-strings are tokens from 3.12
    ends = {tokenize.STRING, getattr(tokenize, "FSTRING_END", tokenize.STRING)}
    skipped = {tokenize.NL, tokenize.COMMENT}  # inside one statement; a NEWLINE ends it
    split = []
    for path in sorted(TASKS.rglob("*.py")):
        previous = None
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if token.type in skipped:
                continue
            if token.type in starts and previous in ends:
                split.append(f"{path.relative_to(ROOT)}:{token.start[0]}")
            previous = token.type
    assert split == []
