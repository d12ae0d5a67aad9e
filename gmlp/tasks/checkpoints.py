"""Checkpoints and the settings of a run: an output directory that holds no other run, which checkpoints are complete
and which one a resume continues from, the settings each checkpoint records, and a clear error when the disk fills
up while one is saved (its partial folder removed)."""

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import traceback
import zipfile
from dataclasses import asdict
from pathlib import Path

from safetensors import safe_open
from transformers import TrainerCallback, TrainingArguments

logger = logging.getLogger(__name__)

# Settings that may change when a run is resumed without changing what it trains: where and how often it reports,
# saves and evaluates, and how long it goes on.
BOOKKEEPING = re.compile(
    r"eval|predict|test|log|hub|report|save|^do_|output_dir|resume|run_name|max_steps|epochs|^token$|cache"
)
# Where the Trainer saves (and `RunSettings` records) a checkpoint or the model: an error raised inside one of these
# was raised while saving.
SAVING = {"_save_checkpoint", "save_model", "on_save"}


def checkpoint_folders(folder: Path) -> list[Path]:
    """The Trainer's `checkpoint-N` folders in `folder`, oldest (smallest N) first."""
    numbered = [path for path in folder.glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", path.name)]
    return sorted((path for path in numbered if path.is_dir()), key=lambda path: int(path.name[11:]))


def prepare_output_dir(training_args: TrainingArguments, loads: list[str] = ()) -> None:
    """Make `--output_dir` hold nothing of another run: with `--overwrite_output_dir`, remove its results and
    checkpoints (but none the run `loads`); without, refuse them, unless the run resumes (it continues their run)."""
    output_dir = Path(training_args.output_dir)
    if not output_dir.is_dir() or training_args.resume_from_checkpoint is not None:
        return
    results, checkpoints = sorted(output_dir.glob("*_results.json")), checkpoint_folders(output_dir)
    if training_args.overwrite_output_dir and (results or checkpoints):
        if loaded := [path for path in checkpoints if any(path.resolve() == Path(name).resolve() for name in loads)]:
            raise ValueError(
                f"--overwrite_output_dir would remove {loaded[0]}, which this run loads; choose another --output_dir."
            )
        for path in results:
            path.unlink()
        for path in checkpoints:
            shutil.rmtree(path)
        logger.warning(
            f"--overwrite_output_dir: removed the earlier run's {', '.join(p.name for p in results + checkpoints)} "
            f"from {output_dir}; this is a fresh run, and only its own checkpoints can be resumed."
        )
    elif results:
        raise FileExistsError(
            f"--output_dir {output_dir} holds the results of an earlier run ({', '.join(p.name for p in results)}), "
            "which this run's would be mixed with. Choose another --output_dir, or pass --overwrite_output_dir."
        )
    elif checkpoints and training_args.do_train:
        raise FileExistsError(
            f"--output_dir {output_dir} holds the checkpoints of an earlier run ({checkpoints[-1].name} the newest). "
            f"Pass --resume_from_checkpoint {output_dir} to continue it, --overwrite_output_dir to start afresh "
            "(removing them), or choose another --output_dir."
        )


def sharded_state(folder: Path, prefix: str) -> Path | None:
    """The `torch.distributed.checkpoint` folder `prefix`_N in `folder` that FSDP's sharded saving writes (the
    Trainer's `pytorch_model_fsdp_0`, `optimizer_0`), if it is complete (its `.metadata` is written last)."""
    return next((path for path in sorted(folder.glob(f"{prefix}_*")) if (path / ".metadata").is_file()), None)


def weights_problem(folder: Path) -> str | None:
    """Why the model weights in `folder` cannot be read (missing, truncated or corrupt), or None."""
    names = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "adapter_model.safetensors")
    names += ("pytorch_model_fsdp.bin",)  # FSDP's full state dict (the Trainer's --fsdp with FULL_STATE_DICT)
    present = [folder / name for name in names if (folder / name).is_file()]
    if not present and sharded_state(folder, "pytorch_model_fsdp") is not None:
        return None  # FSDP's sharded weights: torch.distributed.checkpoint reads them when resuming
    if not present:
        return "it has no model weights (model.safetensors or pytorch_model.bin)"
    for path in [path for path in present if path.suffix == ".safetensors"]:
        try:
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except Exception as error:  # noqa: BLE001 (safetensors has its own types for a bad header or a short file)
            return f"{path} is truncated or corrupt ({error})"
    if cut := next((path for path in present if path.suffix == ".bin" and not zipfile.is_zipfile(path)), None):
        return f"{cut} is truncated or corrupt"  # torch.save writes a zip archive; a short one lacks its directory
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """Why the Trainer checkpoint `folder` cannot be resumed from (a file missing, cut short or unreadable), or None.
    Every file a resume reads is read here, not only seen: its weights opened, each JSON file parsed (the config,
    the trainer state, `run_settings.json`, the tokenizer's), each torch archive's directory found."""
    if problem := weights_problem(folder):
        return problem
    needed = [folder / "trainer_state.json", folder / "scheduler.pt"]
    if sharded_state(folder, "optimizer") is None:  # else FSDP's sharded optimizer state
        # FSDP's full optimizer state (the Trainer's --fsdp with FULL_STATE_DICT) is optimizer.bin.
        full = folder / "optimizer.bin"
        needed.append(full if full.is_file() else folder / "optimizer.pt")
    if missing := next((path for path in needed if not path.is_file()), None):
        return f"{missing} is missing"
    for path in sorted(folder.iterdir()):
        if path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as error:
                return f"{path} is not readable JSON ({error})"
        # torch.save writes zip archives; a file cut short lacks the archive's closing directory.
        elif path.suffix in (".pt", ".bin", ".pth") and not zipfile.is_zipfile(path):
            return f"{path} is truncated or corrupt"
    return None


def resolve_checkpoint(training_args: TrainingArguments) -> str | None:
    """`--resume_from_checkpoint`: a checkpoint, or of a run directory's `checkpoint-*` folders the newest complete one
    (a run killed while saving leaves an incomplete one behind), logging why each newer one is skipped."""
    path = training_args.resume_from_checkpoint
    if path is None:
        return None
    if not Path(path).is_dir():
        raise FileNotFoundError(f"--resume_from_checkpoint {path!r} is not a directory; pass a checkpoint-* folder.")
    skipped = []
    for checkpoint in checkpoint_folders(Path(path))[::-1] or [Path(path)]:
        if problem := checkpoint_problem(checkpoint):
            skipped.append(f"{checkpoint.name}: {problem}")
            continue
        for reason in skipped:
            logger.warning(f"Skipping the incomplete checkpoint {reason}")
        logger.warning(f"Resuming from {checkpoint}")
        return str(checkpoint)
    raise ValueError(f"No complete checkpoint to resume from in {path}: {'; '.join(skipped)}.")


class RunSettings(TrainerCallback):
    """The settings of a run that shape its training (every argument but bookkeeping), written into every checkpoint
    it saves (`run_settings.json`), so that a resume can say how the run that wrote its checkpoint differed."""

    def __init__(self, arguments):
        values = {}
        for args in arguments:
            values |= args.to_dict() if isinstance(args, TrainingArguments) else asdict(args)
        settings = {key: value for key, value in values.items() if not BOOKKEEPING.search(key)}
        self.settings = json.loads(json.dumps(settings, default=str))

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and checkpoint.is_dir():
            write_atomically(checkpoint / "run_settings.json", json.dumps(self.settings, indent=1, sort_keys=True))

    def compare(self, checkpoint: str) -> None:
        """Log each setting in which the run that wrote `checkpoint` differs from this one."""
        path = Path(checkpoint) / "run_settings.json"
        if not path.is_file():
            logger.warning(f"{checkpoint} does not say which settings wrote it (run_settings.json); not compared.")
            return
        saved, now = json.loads(path.read_text()), self.settings
        keys = [key for key in sorted(saved | now) if saved.get(key) != now.get(key)]
        if changed := [f"{key} {saved.get(key)!r} (this run: {now.get(key)!r})" for key in keys]:
            logger.warning(
                f"{checkpoint} was written by a run with other settings: {'; '.join(changed)}. The optimizer and "
                "learning-rate schedule continue from the checkpoint's."
            )


def write_atomically(path: Path, text: str) -> None:
    """`path` with `text`, written under a temporary name and then renamed: a run killed meanwhile leaves no file cut
    short (a resume would read it), only the temporary one."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


@contextlib.contextmanager
def disk_full_explained(trainer):
    """Training and saving with `trainer` inside, where a full disk while saving (which torch reports as e.g.
    `basic_ios::clear: iostream error`) becomes an error that says so, naming the folder and the space a checkpoint
    needs; the checkpoint it left half written is removed first (a resume would skip it anyway)."""
    try:
        yield
    except Exception as error:
        if (explained := disk_full_error(trainer, error)) is None:
            raise
        raise explained from None


def disk_full_error(trainer, error: Exception) -> OSError | None:
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
    return OSError(
        errno.ENOSPC,
        f"No space left on device while saving {partial if saving_checkpoint else output_dir}: a checkpoint needs "
        f"about {megabytes(needed)}, and {megabytes(free)} is free there ({error}). Free some space, or save "
        f"elsewhere (--output_dir) or fewer checkpoints (--save_total_limit).{fate}",
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
