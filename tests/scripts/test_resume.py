"""A resume continues the run exactly: a resumed run_mlm.py logs the losses of the run that was never interrupted, step
for step (the masks are drawn from the seed, the epoch and the batch). Which checkpoint a resume takes:
test_output_dirs.py."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import rotated_lines, tiny_run, write

from gmlp.tasks import run_mlm
from gmlp.tasks.mlm import MaskedLMCollator


def mlm(tokenizer_dir, tmp_path, output_dir, *extra, **options) -> list[str]:
    """A tiny run_mlm.py run on 40 lines (dropout on), saving a checkpoint every `save_steps` and logging every
    step's loss."""
    defaults = {"max_seq_length": 16, "per_device_train_batch_size": 4, "logging_steps": 1, "save_strategy": "steps"}
    return tiny_run(
        output_dir,
        *extra,
        tokenizer=tokenizer_dir,
        overrides={"vocab_size": 120},
        train_file=write(tmp_path / "train.txt", "\n".join(rotated_lines(40)) + "\n"),
        do_train=True,
        **(defaults | options),
    )


def logged_losses(output_dir: Path) -> dict[int, float]:
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


# ---- a resumed run continues the same curve ------------------------------------------------------------------------
RESUMES = {  # case -> run_mlm.py's options, the checkpoints resumed from, and their epochs
    # About 60 blocks of 16 tokens: 8 batches of 8 an epoch.
    "blocks, three epochs": (
        {"max_steps": 20, "save_steps": 4, "per_device_train_batch_size": 8},
        ["checkpoint-4", "checkpoint-8", "checkpoint-12"],
        [0.5, 1.0, 1.5],
    ),
    # A worker process kept across epochs collates: it reads the epoch from shared memory, so a resume in the second
    # epoch (whose workers start there) draws the masks the uninterrupted run's worker drew.
    "blocks, a persistent data-loader worker": (
        {"max_steps": 14, "save_steps": 12, "per_device_train_batch_size": 8, "dataloader_num_workers": 1}
        | {"dataloader_persistent_workers": True},
        ["checkpoint-12"],
        [1.5],
    ),
    "gradient accumulation, whole words": (
        {"max_steps": 6, "save_steps": 2, "gradient_accumulation_steps": 2, "line_by_line": True},
        ["checkpoint-2", "checkpoint-4"],
        [0.4, 0.8],
    ),
}


@pytest.mark.parametrize("case", sorted(RESUMES))
def test_a_resumed_run_logs_the_uninterrupted_runs_losses(case, tokenizer_dir, tmp_path):
    """Killed just after a checkpoint (its folder is what the killed run left) and resumed, run_mlm.py logs every
    loss the uninterrupted run logged, to the last digit, with dropout on; mid-epoch and at an epoch's end. Before,
    the first resumed batch's mask came from torch's global random state, which the Trainer restores only after
    collating that batch, and every later draw (masks and dropout) was shifted: losses off by up to 0.04."""
    options, checkpoints, epochs = RESUMES[case]
    extra = ["--whole_word_mask"] if "whole words" in case else []
    whole = tmp_path / "whole"
    run_mlm.run(mlm(tokenizer_dir, tmp_path, whole, *extra, **options))
    expected = logged_losses(whole)
    assert sorted(expected) == list(range(1, options["max_steps"] + 1))
    for name, epoch in zip(checkpoints, epochs, strict=True):
        assert json.loads((whole / name / "trainer_state.json").read_text())["epoch"] == pytest.approx(epoch)
        resumed = tmp_path / f"resumed-from-{name}"
        shutil.copytree(whole / name, resumed / name)
        run_mlm.run(mlm(tokenizer_dir, tmp_path, resumed, *extra, **options, resume_from_checkpoint=resumed))
        assert logged_losses(resumed) == expected, name


def test_the_masks_differ_from_epoch_to_epoch_and_from_batch_to_batch(script_tokenizer):
    """The masks' seeds: the same batch gets the same mask in the same epoch, another one in the next epoch, and two
    batches of one epoch differ; torch's global random state is neither used nor changed."""
    collator = MaskedLMCollator(script_tokenizer, mlm_probability=0.5, mask_seed=0)
    batch = [{"input_ids": script_tokenizer(line)["input_ids"]} for line in rotated_lines(4)]
    other = [{"input_ids": script_tokenizer(line)["input_ids"]} for line in rotated_lines(8)[4:]]
    state = torch.get_rng_state()
    first, again, second = collator(batch)["labels"], collator(batch)["labels"], collator(other)["labels"]
    collator.on_epoch_end(None, None, None)
    next_epoch = collator(batch)["labels"]
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, again)
    assert not torch.equal(first, next_epoch)
    assert not torch.equal(first != -100, second != -100)
