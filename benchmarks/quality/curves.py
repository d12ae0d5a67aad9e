"""Reading the validation curves: at a step, at a time, below a level."""

import math

import numpy as np


def first_step_below(curve: list, level: float) -> int | None:
    """The first evaluated step whose perplexity is at or below `level` (None if none is)."""
    return next((step for step, value in curve if value <= level), None)


def at_step(curve: list, step: float) -> float:
    """The perplexity at `step`, interpolated linearly in log-perplexity between the evaluations around it."""
    steps, values = zip(*curve)
    if not steps[0] <= step <= steps[-1]:
        raise ValueError(f"step {step:.0f} is outside the curve's evaluations ({steps[0]} to {steps[-1]})")
    return math.exp(np.interp(step, steps, np.log(values)))


def mean_std(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    """`mean ± standard deviation (n=...)` of `values` x `scale` (the value alone when n = 1)."""
    values = [value * scale for value in values]
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (n=1)"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f} (n={len(values)})"
