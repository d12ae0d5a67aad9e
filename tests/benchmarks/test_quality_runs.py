"""The quality benchmark's runs: the project's scripts started with the run's flags, and pretraining runs that
survive an interruption (a run resumes from its newest complete checkpoint, and its training time counts the steps
made before the resume)."""

import json
import os

import pytest
import torch
from safetensors.torch import save_file

from benchmarks.quality import pretraining
from benchmarks.quality.__main__ import parse_args
from benchmarks.quality.context import Context


@pytest.fixture
def ctx(tmp_path):
    return Context(parse_args(["--work_dir", str(tmp_path), "--output", str(tmp_path / "results" / "quality.json")]))


def test_a_script_gets_its_flags_and_a_failure_names_its_log(ctx, tmp_path):
    script = tmp_path / "echo.py"
    script.write_text(
        "import os, sys\nprint(sys.argv[1:], os.environ['OMP_NUM_THREADS'])\nsys.exit(sys.argv[-1] == 'no')\n"
    )
    # a first argument ending in .json would be read as an arguments file by the project's scripts: never `--x=a.json`
    flags = {"train_file": "a.json", "steps": 0, "do_train": True, "resume": None, "fp16": False, "rate": 1e-3}
    ctx.script(str(script), flags, "echo")
    log = tmp_path / "logs" / "echo.log"
    threads = max(1, (os.cpu_count() or 1) // 2)  # --jobs 2
    expected = ["--train_file", "a.json", "--steps", "0", "--do_train", "--rate", "0.001"]
    assert log.read_text() == f"{expected} {threads}\n"
    with pytest.raises(RuntimeError, match=rf"^failing failed; see {log.with_name('failing.log')}:\n"):
        ctx.script(str(script), {"flag": "no"}, "failing")


def checkpoint(folder, complete=True):
    folder.mkdir(parents=True)
    save_file({"weight": torch.zeros(2)}, str(folder / "model.safetensors"))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": int(folder.name.split("-")[1])}))
    torch.save({}, folder / "scheduler.pt")
    if complete:
        torch.save({}, folder / "optimizer.pt")


def launched(ctx, monkeypatch, output):
    """The arguments run_mlm.py would be started with for a run into `output`."""
    calls = []
    monkeypatch.setattr(ctx, "script", lambda command, arguments, name: calls.append((command, arguments)))
    recipe = {"learning_rate": 1e-3, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 200}
    run_settings = pretraining.settings(ctx, ctx.configs["gmlp"], recipe)
    pretraining.run_mlm(ctx, "run", output, ctx.configs["gmlp"], run_settings, 0)
    ((command, arguments),) = calls
    assert command == "run_mlm.py"
    return arguments


def test_a_fresh_run_saves_checkpoints_and_does_not_resume(ctx, tmp_path, monkeypatch):
    arguments = launched(ctx, monkeypatch, tmp_path / "run")
    assert arguments["resume_from_checkpoint"] is None
    assert arguments["save_strategy"] == "steps" and arguments["save_steps"] == arguments["eval_steps"] == 200
    assert (arguments["max_steps"], arguments["learning_rate"], arguments["eval_mask_seed"]) == (2000, 1e-3, 0)
    assert not (tmp_path / "run" / pretraining.START_STEP_FILE).exists()


def test_an_interrupted_run_resumes_from_its_newest_complete_checkpoint(ctx, tmp_path, monkeypatch):
    output = tmp_path / "run"
    checkpoint(output / "checkpoint-200")
    checkpoint(output / "checkpoint-400", complete=False)  # killed while saving
    arguments = launched(ctx, monkeypatch, output)
    assert arguments["resume_from_checkpoint"] == output / "checkpoint-200"
    assert (output / pretraining.START_STEP_FILE).read_text() == "200"
    # the Trainer timed steps 200 to 2,000 only: 900 s for 1,800 steps is 1,000 s for the run's 2,000
    history = [{"loss": 5.0, "step": 2000}, {"train_runtime": 900.0}]
    assert pretraining.training_time(output, history, 2000) == 1000.0


def test_a_run_without_a_complete_checkpoint_starts_afresh(ctx, tmp_path, monkeypatch):
    output = tmp_path / "run"
    checkpoint(output / "checkpoint-200", complete=False)
    assert launched(ctx, monkeypatch, output)["resume_from_checkpoint"] is None
    assert pretraining.training_time(output, [{"train_runtime": 900.0}], 2000) == 900.0
