"""Training (resuming if asked) and saving; the metrics and predictions written."""

import math
from pathlib import Path

from .checkpoints import resolve_checkpoint
from .disk_full import disk_full_explained
from .run_settings import RunSettings


def train_and_save(trainer, *, model_args, data_args, train_samples: int | None) -> None:
    """Train (resuming if asked), then save the model, the metrics (`train_samples`: None for a stream) and the state."""
    settings = RunSettings(model_args, data_args, trainer.args)
    trainer.add_callback(settings)
    if checkpoint := resolve_checkpoint(trainer.args):
        settings.compare(checkpoint)
    with disk_full_explained(trainer):
        metrics = trainer.train(resume_from_checkpoint=checkpoint).metrics
        trainer.save_model()
    record_metrics(trainer, "train", metrics | ({} if train_samples is None else {"train_samples": train_samples}))
    trainer.save_state()


def record_metrics(trainer, split: str, metrics: dict) -> None:
    """Log `metrics` and merge them into `<split>_results.json` and `all_results.json` (a NaN or inf as null)."""
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, finite_or_null(metrics))


def finite_or_null(value):
    """`value` (a dict, list or number) with None for every non-finite float, which strict JSON lacks."""
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_predictions(path: str, columns: dict[str, list]) -> None:
    """A tab-separated predictions file: `index` and the `columns`, a row per example."""
    rows = ["\t".join(map(str, (i, *row))) + "\n" for i, row in enumerate(zip(*columns.values()))]
    Path(path).write_text("\t".join(["index", *columns]) + "\n" + "".join(rows), encoding="utf-8")
