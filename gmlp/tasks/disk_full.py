"""A full disk while a run saves: an error that says so, naming the folder and the space a checkpoint needs, with the
checkpoint it left half written removed (a resume would skip it anyway)."""

import contextlib
import errno
import shutil
import traceback
from pathlib import Path

from .checkpoints import checkpoint_folders, checkpoint_problem
from .errors import ScriptError

# Where the Trainer saves (and `RunSettings` records) a checkpoint or the model: an error raised inside one of these
# was raised while saving.
SAVING = {"_save_checkpoint", "save_model", "on_save"}


@contextlib.contextmanager
def disk_full_explained(trainer):
    """Training and saving with `trainer` inside, where a full disk while saving (which torch reports as e.g.
    `basic_ios::clear: iostream error`) becomes a `ScriptError` that says so."""
    try:
        yield
    except Exception as error:
        if (explained := disk_full_error(trainer, error)) is None:
            raise
        raise explained from None


def disk_full_error(trainer, error: Exception) -> ScriptError | None:
    """The error to raise for `error` if it was raised while `trainer` saved and the disk is full (no space left, or
    less than a checkpoint needs), after removing the partial checkpoint; else None."""
    frames = {frame.f_code.co_name for frame, _ in traceback.walk_tb(error.__traceback__)}
    if not frames & SAVING:
        return None
    output_dir = Path(trainer.args.output_dir)
    partial = output_dir / f"checkpoint-{trainer.state.global_step}"
    # The final `save_model` writes into the output directory; a checkpoint is saved (and its settings recorded) by
    # the others, and lacks what failed to be written even where the files a resume needs are all there.
    saving_checkpoint = partial.is_dir() and bool(frames & {"_save_checkpoint", "on_save"})
    complete = [path for path in checkpoint_folders(output_dir) if checkpoint_problem(path) is None]
    complete = [path for path in complete if not (saving_checkpoint and path == partial)]
    needed = folder_size(complete[-1]) if complete else state_size(trainer)
    free = shutil.disk_usage(output_dir).free
    if not (no_space_left(error) or free < needed):
        return None
    fate = ""
    if saving_checkpoint and trainer.is_world_process_zero():
        shutil.rmtree(partial, ignore_errors=True)
        fate = f" The partial {partial.name} was removed."
    if complete:
        fate += f" --resume_from_checkpoint {output_dir} continues from {complete[-1].name}."
    where = partial if saving_checkpoint else output_dir
    return ScriptError(
        f"No space left on device while saving {where}: a checkpoint needs about {megabytes(needed)}, and {megabytes(free)} is free there ({error}). Free some space, or save elsewhere (--output_dir) or fewer checkpoints (--save_total_limit).{fate}"
    )


def no_space_left(error: BaseException | None) -> bool:
    """Whether `error`, or an error it was raised from, is the operating system's "no space left on device"."""
    while error is not None:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        error = error.__cause__ or error.__context__
    return False


def folder_size(folder: Path) -> int:
    """The bytes of the files in `folder` and below."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def state_size(trainer) -> int:
    """The bytes of `trainer`'s model weights and optimizer state: about what its checkpoints take."""
    tensors = list(trainer.model.state_dict().values())
    if trainer.optimizer is not None:
        tensors += [value for state in trainer.optimizer.state_dict()["state"].values() for value in state.values()]
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors if hasattr(tensor, "element_size"))


def megabytes(size: int) -> str:
    return f"{size / 2**20:,.1f} MB"
