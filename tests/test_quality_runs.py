"""The quality benchmark's pretraining runs survive an interruption: a run resumes from its newest complete
checkpoint, and its training time counts the steps made before the resume."""

import json

import torch
from safetensors.torch import save_file

from benchmarks.quality import mlm_runs
from benchmarks.quality.__main__ import parse_args
from benchmarks.quality.context import Context


def checkpoint(folder, complete=True):
    folder.mkdir(parents=True)
    save_file({"weight": torch.zeros(2)}, str(folder / "model.safetensors"))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": int(folder.name.split("-")[1])}))
    torch.save({}, folder / "scheduler.pt")
    if complete:
        torch.save({}, folder / "optimizer.pt")


def launched(tmp_path, monkeypatch, output):
    """The arguments run_mlm.py would be started with for a run into `output`."""
    ctx = Context(parse_args(["--work_dir", str(tmp_path), "--output", str(tmp_path / "results" / "quality.json")]))
    calls = []
    monkeypatch.setattr(ctx.run, "script", lambda script, arguments, name, priority: calls.append(arguments))
    recipe = {"learning_rate": 1e-3, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 200}
    run_settings = mlm_runs.settings(ctx, ctx.configs["gmlp"], recipe)
    mlm_runs.run_mlm(ctx, "run", output, ctx.configs["gmlp"], run_settings, 0, 1)
    (arguments,) = calls
    return arguments


def test_a_fresh_run_saves_checkpoints_and_does_not_resume(tmp_path, monkeypatch):
    arguments = launched(tmp_path, monkeypatch, tmp_path / "run")
    assert arguments["resume_from_checkpoint"] is None
    assert arguments["save_strategy"] == "steps" and arguments["save_steps"] == arguments["eval_steps"]
    assert not (tmp_path / "run" / mlm_runs.START_STEP_FILE).exists()


def test_an_interrupted_run_resumes_from_its_newest_complete_checkpoint(tmp_path, monkeypatch):
    output = tmp_path / "run"
    checkpoint(output / "checkpoint-200")
    checkpoint(output / "checkpoint-400", complete=False)  # killed while saving
    arguments = launched(tmp_path, monkeypatch, output)
    assert arguments["resume_from_checkpoint"] == output / "checkpoint-200"
    assert (output / mlm_runs.START_STEP_FILE).read_text() == "200"
    # the Trainer timed steps 200 to 2,000 only: 900 s for 1,800 steps is 1,000 s for the run's 2,000
    history = [{"loss": 5.0, "step": 2000}, {"train_runtime": 900.0}]
    assert mlm_runs.training_time(output, history, 2000) == 1000.0


def test_a_run_without_a_complete_checkpoint_starts_afresh(tmp_path, monkeypatch):
    output = tmp_path / "run"
    checkpoint(output / "checkpoint-200", complete=False)
    assert launched(tmp_path, monkeypatch, output)["resume_from_checkpoint"] is None
    assert mlm_runs.training_time(output, [{"train_runtime": 900.0}], 2000) == 900.0
