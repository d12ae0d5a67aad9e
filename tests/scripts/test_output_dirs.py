"""Output folders and checkpoints: an output folder holds one run (another run's results or checkpoints are refused,
or removed by --overwrite_output_dir, which makes a fresh run); a resume takes the newest complete checkpoint (every
file a resume reads is read; FSDP's checkpoints count), says how its run's settings differ, and the settings are
written whole or not at all; a full disk while saving says so and leaves no partial checkpoint."""

import json
import logging
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import flags, write
from script_runs import mlm_run
from transformers import TrainerCallback, TrainingArguments

from gmlp.tasks import disk_full, run_mlm
from gmlp.tasks.checkpoints import checkpoint_folders, checkpoint_problem, resolve_checkpoint
from gmlp.tasks.errors import ScriptError
from gmlp.tasks.run_settings import RunSettings


def saving_run(tokenizer_dir, tmp_path, *extra, **options) -> list[str]:
    """`script_runs.mlm_run`, saving a checkpoint every step."""
    return mlm_run(tokenizer_dir, tmp_path, *extra, save_strategy="steps", save_steps=1, **options)


def warnings_of(caplog, run, arguments) -> list[str]:
    """The warnings that `run(arguments)` logs."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run(arguments)
    return [record.getMessage() for record in caplog.records]


# ---- an output folder holds one run -------------------------------------------------------------------------------
def test_an_output_dir_with_another_runs_results_is_refused_unless_overwritten(tokenizer_dir, tmp_path):
    run_mlm.run(mlm_run(tokenizer_dir, tmp_path, "--do_eval", max_steps=1))
    out = tmp_path / "out"
    assert "train_loss" in json.loads((out / "all_results.json").read_text())
    evaluate = flags(model_name_or_path=out, validation_file=tmp_path / "train.txt", output_dir=out, do_eval=True)
    evaluate += flags(max_seq_length=16, report_to="none")
    with pytest.raises(ScriptError, match="holds the results of an earlier run.*--overwrite_output_dir"):
        run_mlm.run(evaluate)
    run_mlm.run([*evaluate, "--overwrite_output_dir"])
    results = json.loads((out / "all_results.json").read_text())
    assert "eval_loss" in results and "train_loss" not in results  # no stale figure of the earlier run
    assert not (out / "train_results.json").exists()


def test_training_into_a_directory_with_another_runs_checkpoints_is_refused(tokenizer_dir, tmp_path):
    run_mlm.run(saving_run(tokenizer_dir, tmp_path, max_steps=1))
    for name in ("all_results.json", "train_results.json"):  # a run killed before its end leaves only checkpoints
        (tmp_path / "out" / name).unlink()
    message = r"holds the checkpoints of an earlier run \(checkpoint-1 the newest\).*--resume_from_checkpoint"
    with pytest.raises(ScriptError, match=message):
        run_mlm.run(saving_run(tokenizer_dir, tmp_path, max_steps=1))
    checkpoint = tmp_path / "out" / "checkpoint-1"
    evaluate = ["--model_name_or_path", str(checkpoint), "--do_eval", "--overwrite_output_dir"]
    with pytest.raises(ScriptError, match=f"--overwrite_output_dir would remove {checkpoint}, which this run loads"):
        run_mlm.run([*saving_run(tokenizer_dir, tmp_path, max_steps=1), *evaluate])
    assert checkpoint.is_dir()


def test_overwrite_removes_the_earlier_runs_checkpoints_so_a_resume_continues_this_run(
    tokenizer_dir, tmp_path, caplog
):
    out = tmp_path / "out"
    run_mlm.run(saving_run(tokenizer_dir, tmp_path, max_steps=3, learning_rate=1e-3))
    fresh = saving_run(tokenizer_dir, tmp_path, "--overwrite_output_dir", max_steps=2, learning_rate=5e-4)
    messages = warnings_of(caplog, run_mlm.run, fresh)
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert any("removed the earlier run's" in message and "checkpoint-3" in message for message in messages)
    resumed = saving_run(tokenizer_dir, tmp_path, max_steps=3, learning_rate=5e-4, resume_from_checkpoint=out)
    messages = warnings_of(caplog, run_mlm.run, resumed)
    assert f"Resuming from {out / 'checkpoint-2'}" in messages
    assert not any("other settings" in message for message in messages)  # the same run, one step longer


# ---- a resume takes the newest complete checkpoint and says how its settings differ ---------------------------------
def test_a_resume_takes_the_newest_complete_checkpoint_and_names_the_others(tokenizer_dir, tmp_path, caplog):
    """A run killed while saving checkpoint-3 (its optimizer state not yet written); checkpoint-2 as one killed as its
    settings were written (every file present, run_settings.json empty): the resume takes checkpoint-1, saying why."""
    out = tmp_path / "out"
    run_mlm.run(saving_run(tokenizer_dir, tmp_path, max_steps=3))
    (out / "checkpoint-3" / "optimizer.pt").unlink()
    (out / "checkpoint-2" / "run_settings.json").write_text("")
    resumed = saving_run(tokenizer_dir, tmp_path, "--overwrite_output_dir", max_steps=4, resume_from_checkpoint=out)
    messages = warnings_of(caplog, run_mlm.run, resumed)
    skipped = [message for message in messages if message.startswith("Skipping the incomplete checkpoint")]
    assert skipped == [
        f"Skipping the incomplete checkpoint checkpoint-3: {out / 'checkpoint-3' / 'optimizer.pt'} is missing",
        f"Skipping the incomplete checkpoint checkpoint-2: {out / 'checkpoint-2' / 'run_settings.json'} is not readable JSON (Expecting value: line 1 column 1 (char 0))",
    ]
    assert f"Resuming from {out / 'checkpoint-1'}" in messages
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4


def test_a_resume_from_a_run_with_other_settings_says_which(tokenizer_dir, tmp_path, caplog):
    out = tmp_path / "out"
    run_mlm.run(saving_run(tokenizer_dir, tmp_path, max_steps=2, learning_rate=1e-3))
    resumed = saving_run(tokenizer_dir, tmp_path, max_steps=3, learning_rate=5e-5, resume_from_checkpoint=out)
    expected = (
        f"{out / 'checkpoint-2'} was written by a run with other settings: learning_rate 0.001 (this run: 5e-05)."
    )
    assert any(message.startswith(expected) for message in warnings_of(caplog, run_mlm.run, resumed))


@pytest.fixture(scope="module")
def checkpoint(tokenizer_dir, tmp_path_factory) -> Path:
    """A complete checkpoint of a tiny run_mlm.py run (not to be changed: copy it)."""
    tmp_path = tmp_path_factory.mktemp("run")
    run_mlm.run(saving_run(tokenizer_dir, tmp_path, max_steps=1))
    return tmp_path / "out" / "checkpoint-1"


CUT_SHORT = {  # a file a resume reads -> the problem named when it is cut to its first 10 bytes
    "config.json": "is not readable JSON",
    "tokenizer.json": "is not readable JSON",
    "tokenizer_config.json": "is not readable JSON",
    "trainer_state.json": "is not readable JSON",
    "run_settings.json": "is not readable JSON",
    "rng_state.pth": "is truncated or corrupt",
    "scheduler.pt": "is truncated or corrupt",
    "optimizer.pt": "is truncated or corrupt",
    "model.safetensors": "is truncated or corrupt",
}


@pytest.mark.parametrize("name", sorted(CUT_SHORT))
def test_every_file_a_resume_reads_is_read_by_the_completeness_check(name, checkpoint, tmp_path):
    folder = shutil.copytree(checkpoint, tmp_path / "checkpoint-1")
    assert checkpoint_problem(folder) is None
    path = folder / name
    path.write_bytes(path.read_bytes()[:10])
    assert checkpoint_problem(folder).startswith(f"{path} {CUT_SHORT[name]}")


def test_a_kill_while_the_settings_are_written_leaves_no_file_cut_short(checkpoint, tmp_path, monkeypatch):
    """RunSettings writes run_settings.json under a temporary name, then renames it: killed half-way, the checkpoint
    has no settings file (a resume logs that it cannot compare them) rather than a file cut short."""
    folder = shutil.copytree(checkpoint, tmp_path / "checkpoint-1")
    (folder / "run_settings.json").unlink()

    def killed_half_way(path, text, **kwargs):
        with open(path, "w", **kwargs) as file:
            file.write(text[: len(text) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", killed_half_way)
    settings = RunSettings(TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-3))
    state = SimpleNamespace(global_step=1, is_world_process_zero=True)
    with pytest.raises(KeyboardInterrupt):
        settings.on_save(SimpleNamespace(output_dir=str(tmp_path)), state, None)
    monkeypatch.undo()
    assert not (folder / "run_settings.json").exists()
    assert '"learning_rate": 0.001' in json.dumps(settings.settings, indent=1)
    assert (folder / ".run_settings.json.partial").is_file()
    assert checkpoint_problem(folder) is None


def test_a_checkpoint_saved_whole_by_fsdp_counts_as_complete(tmp_path):
    """Under docs/scripts.md's --fsdp command the Trainer saves FSDP's full state dicts: the weights as
    pytorch_model_fsdp.bin (beside model.safetensors), the optimizer as optimizer.bin, no optimizer.pt (the resume of
    such a checkpoint was refused on an H200); a file of them cut short is still caught."""
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    torch.save({"weight": torch.ones(3)}, folder / "pytorch_model_fsdp.bin")
    torch.save({}, folder / "scheduler.pt")
    torch.save({}, folder / "rng_state.pth")
    write(folder / "trainer_state.json", json.dumps({"global_step": 4}))
    assert "optimizer.pt is missing" in checkpoint_problem(folder)
    write(folder / "optimizer.bin", b"PK\x03\x04 cut short")
    assert "optimizer.bin is truncated or corrupt" in checkpoint_problem(folder)
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.bin")
    assert checkpoint_problem(folder) is None
    training_args = TrainingArguments(output_dir=str(tmp_path / "out"), resume_from_checkpoint=str(tmp_path))
    assert resolve_checkpoint(training_args) == str(folder)
    write(folder / "pytorch_model_fsdp.bin", b"PK\x03\x04 cut short")
    assert "pytorch_model_fsdp.bin is truncated or corrupt" in checkpoint_problem(folder)


def test_a_checkpoint_saved_sharded_by_fsdp_counts_as_complete(tmp_path):
    """FSDP's sharded saving (its SHARDED_STATE_DICT) writes `torch.distributed.checkpoint` folders in place of
    model.safetensors and optimizer.pt; such a checkpoint resumes once each folder's `.metadata` (written last) is
    there."""
    folder = tmp_path / "checkpoint-4"
    for name in ("pytorch_model_fsdp_0", "optimizer_0"):
        write(folder / name / "__0_0.distcp", b"shard")
    write(folder / "trainer_state.json", json.dumps({"global_step": 4}))
    torch.save({}, folder / "scheduler.pt")
    assert "no model weights" in checkpoint_problem(folder)
    write(folder / "pytorch_model_fsdp_0" / ".metadata", b"m")
    assert "optimizer.pt is missing" in checkpoint_problem(folder)
    write(folder / "optimizer_0" / ".metadata", b"m")
    assert checkpoint_problem(folder) is None


# ---- a full disk while saving a checkpoint ------------------------------------------------------------------------
class FullDiskAt(TrainerCallback):
    """Makes `name` of the checkpoint that `step` saves a link to /dev/full, where every write fails with "no space
    left on device" (torch reports it as its own RuntimeError, Python as OSError ENOSPC)."""

    def __init__(self, step: int, name: str):
        self.step, self.name = step, name

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            folder = Path(args.output_dir) / f"checkpoint-{self.step}"
            folder.mkdir(parents=True)
            (folder / self.name).symlink_to("/dev/full")


def trainer_with_callback(callback):
    """The Trainer class, its instances made with `callback` too."""
    from transformers import Trainer

    class WithCallback(Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, callbacks=[callback], **kwargs)

    return WithCallback


FULL_DISK = {
    # name: (the file written to the full disk, free space the filesystem reports, or None for the real figure)
    "torch's optimizer state": ("optimizer.pt", 0),
    "the run's settings (Python's OSError)": (".run_settings.json.partial", None),  # renamed once written
}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux) to fail writes")
@pytest.mark.parametrize("case", sorted(FULL_DISK))
def test_a_full_disk_while_saving_says_so_and_removes_the_partial_checkpoint(
    case, tokenizer_dir, tmp_path, monkeypatch
):
    name, free = FULL_DISK[case]
    if free is not None:  # the test's filesystem is not full: it reports that it is
        total = shutil.disk_usage(tmp_path).total
        usage = SimpleNamespace(total=total, used=total - free, free=free)
        monkeypatch.setattr(disk_full.shutil, "disk_usage", lambda path: usage)
    monkeypatch.setattr(run_mlm, "Trainer", trainer_with_callback(FullDiskAt(2, name)))
    arguments = saving_run(tokenizer_dir, tmp_path, max_steps=3)
    out = tmp_path / "out"
    with pytest.raises(ScriptError, match="No space left on device while saving") as error:
        run_mlm.run(arguments)
    message = str(error.value)
    assert f"{out / 'checkpoint-2'}: a checkpoint needs about " in message
    needed = float(re.search(r"needs about ([\d.,]+) MB", message).group(1))
    assert needed == pytest.approx(disk_full.folder_size(out / "checkpoint-1") / 2**20, abs=0.051)
    assert (
        f"The partial checkpoint-2 was removed. --resume_from_checkpoint {out} continues from checkpoint-1." in message
    )
    assert [path.name for path in checkpoint_folders(out)] == ["checkpoint-1"]
    assert checkpoint_problem(out / "checkpoint-1") is None
    monkeypatch.undo()
    run_mlm.run([*arguments, "--resume_from_checkpoint", str(out)])
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
