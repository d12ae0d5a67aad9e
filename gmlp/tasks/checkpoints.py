"""Resuming: a run directory's checkpoints, which are complete, and which one `--resume_from_checkpoint` takes."""

import json
import logging
import re
import zipfile
from pathlib import Path

from safetensors import safe_open

from .errors import ScriptError

logger = logging.getLogger(__name__)


def checkpoint_folders(folder: Path) -> list[Path]:
    """The Trainer's `checkpoint-N` folders in `folder`, oldest first."""
    numbered = [path for path in folder.glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", path.name)]
    return sorted((path for path in numbered if path.is_dir()), key=lambda path: int(path.name[11:]))


def earlier_run(training_args) -> tuple[list[Path], list[Path]]:
    """The results (`*_results.json`) and checkpoints of an earlier run in `--output_dir`; none when resuming."""
    output_dir = Path(training_args.output_dir)
    if not output_dir.is_dir() or training_args.resume_from_checkpoint is not None:
        return [], []
    return sorted(output_dir.glob("*_results.json")), checkpoint_folders(output_dir)


def sharded_state(folder: Path, prefix: str) -> Path | None:
    """FSDP's complete sharded folder `prefix`_N in `folder` (its `.metadata` is written last), if any."""
    return next((path for path in sorted(folder.glob(f"{prefix}_*")) if (path / ".metadata").is_file()), None)


def deepspeed_state(folder: Path) -> Path | None:
    """DeepSpeed's state in `folder` (the Trainer's --deepspeed: weights, optimizer and scheduler), if complete: the
    `global_stepN` folder that its `latest` file names, which DeepSpeed writes once the state is saved."""
    latest = folder / "latest"
    state = folder / latest.read_text(encoding="utf-8", errors="replace").strip() if latest.is_file() else None
    return state if state is not None and state.is_dir() else None


def weights_problem(folder: Path) -> str | None:
    """Why the model weights in `folder` cannot be read, or None."""
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
    """Why the checkpoint `folder` cannot be resumed from (a file a resume reads missing or unreadable), or None."""
    deepspeed = deepspeed_state(folder)  # else the Trainer's own files hold the weights, optimizer and scheduler
    if deepspeed is None and (problem := weights_problem(folder)):
        return problem
    needed = [folder / "trainer_state.json"]
    if deepspeed is None:
        needed.append(folder / "scheduler.pt")
        if sharded_state(folder, "optimizer") is None:  # else FSDP's sharded optimizer state
            full = folder / "optimizer.bin"  # FSDP's full optimizer state (--fsdp with FULL_STATE_DICT)
            needed.append(full if full.is_file() else folder / "optimizer.pt")
    if missing := next((path for path in needed if not path.is_file()), None):
        return f"{missing} is missing"
    for path in sorted([*folder.iterdir(), *(deepspeed.iterdir() if deepspeed else [])]):
        if path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as error:
                return f"{path} is not readable JSON ({error})"
        elif path.suffix in (".pt", ".bin", ".pth") and not zipfile.is_zipfile(path):
            return f"{path} is truncated or corrupt"
    return None


def resolve_checkpoint(training_args) -> str | None:
    """`--resume_from_checkpoint`: a checkpoint, or the newest complete one of a run directory (logging why)."""
    path = training_args.resume_from_checkpoint
    if path is None:
        return None
    skipped = []
    for checkpoint in checkpoint_folders(Path(path))[::-1] or [Path(path)]:
        if problem := checkpoint_problem(checkpoint):
            skipped.append(f"{checkpoint.name}: {problem}")
            continue
        for reason in skipped:
            logger.warning(f"Skipping the incomplete checkpoint {reason}")
        logger.warning(f"Resuming from {checkpoint}")
        return str(checkpoint)
    raise ScriptError(f"No complete checkpoint to resume from in {path}: {'; '.join(skipped)}.")
