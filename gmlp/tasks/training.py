"""A run's training and its results: train (resuming if asked) and save, then log and write the metrics and the
predictions."""

import math
from pathlib import Path

from .checkpoints import resolve_checkpoint
from .disk_full import disk_full_explained
from .run_settings import RunSettings


def train_and_save(trainer, *, model_args, data_args, train_samples: int | None) -> None:
    """Train (resuming if asked, recording the run's settings in its checkpoints), then save the model, the metrics
    (`train_samples`: unknown for a stream) and the state."""
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
    """Log `metrics` and merge them into `<split>_results.json` and `all_results.json` of the output directory (as
    strict JSON: a metric that is no finite number, such as a diverged run's NaN loss, is null there)."""
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, finite_or_null(metrics))


def finite_or_null(value):
    """`value` (a dict, list or number) with None for every float that is not finite (NaN, ±inf), which JSON lacks."""
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_predictions(path: str, columns: dict[str, list]) -> None:
    """A predictions file: a header of `index` and the `columns`' names, then a row per example, tab-separated."""
    rows = ["\t".join(map(str, (i, *row))) + "\n" for i, row in enumerate(zip(*columns.values()))]
    Path(path).write_text("\t".join(["index", *columns]) + "\n" + "".join(rows), encoding="utf-8")
