"""The Hub's `glue`, `squad` and `squad_v2` evaluation metrics, shipped with the package to work offline.

Each metric is an `evaluate` metric script in its own folder here (`glue/glue.py`, ...), giving the same names,
inputs, outputs and numbers as the metric of the same name on the Hub. Load one with `load_metric`, or with
`evaluate.load(metric_path(name), config_name)`.
"""

from pathlib import Path

import evaluate

METRIC_NAMES = ("glue", "squad", "squad_v2")


def metric_path(name: str) -> str:
    """The path of the metric script `name`, for `evaluate.load`."""
    if name not in METRIC_NAMES:
        raise ValueError(f"Unknown metric {name!r}: the package ships {list(METRIC_NAMES)}.")
    return str(Path(__file__).parent / name / f"{name}.py")


def load_metric(name: str, config_name: str | None = None, **kwargs) -> evaluate.EvaluationModule:
    """Load the packaged metric `name` (a GLUE task name as `config_name` for "glue") without the Hub.

    Extra keyword arguments go to `evaluate.load` (e.g. `experiment_id`, `num_process`, `process_id`).
    """
    return evaluate.load(metric_path(name), config_name, **kwargs)


__all__ = ["METRIC_NAMES", "load_metric", "metric_path"]
