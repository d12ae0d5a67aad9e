"""The quality benchmark's long runs: each model's chosen rate and warm-up at a constant rate for --long_steps, and
the figures their table reads off the curve."""

import math

import pytest

from benchmarks.quality import parts, pretraining, tables
from benchmarks.quality.__main__ import parse_args
from benchmarks.quality.context import Context


def test_the_long_run_keeps_the_chosen_rate_and_warm_up_but_not_a_decay(tmp_path, monkeypatch):
    ctx = Context(parse_args(["--work_dir", str(tmp_path), "--output", str(tmp_path / "quality.json")]))
    chosen = {"learning_rate": 3e-3, "lr_scheduler_type": "linear", "warmup_steps": 600}
    monkeypatch.setattr(parts, "final_recipe", lambda ctx, name: chosen)
    recipe = parts.long_recipe(ctx, "gmlp")
    assert recipe == {**chosen, "lr_scheduler_type": "constant_with_warmup", "max_steps": 6000}
    run = pretraining.settings(ctx, ctx.configs["gmlp"], recipe)
    assert (run["max_steps"], run["learning_rate"], run["warmup_steps"]) == (6000, 3e-3, 600)
    assert pretraining.settings(ctx, ctx.configs["gmlp"], chosen)["max_steps"] == 2000


def test_the_change_at_the_end_is_read_between_the_evaluations():
    # a perplexity falling 10% every 1,000 steps, evaluated every 400: 1,000 steps before the end is between two
    curve = [(step, 100 * 0.9 ** (step / 1000)) for step in range(400, 6001, 400)]
    assert tables.change(curve, 1000) == pytest.approx(-0.1)
    assert tables.change(curve, 2000) == pytest.approx(0.9**2 - 1)
    assert not math.isclose(tables.change(curve, 1000), curve[-1][1] / curve[-3][1] - 1)


def test_the_long_table_keeps_one_decimal_on_round_figures():
    # tabulate, left to parse figures, prints "23.0" as "23": the cells must stay as formatted
    curve = [[step, 100.0 - step / 100] for step in range(200, 4001, 200)]
    results = {
        "settings": {"max_steps": 2000, "long_steps": 4000},
        "pretrain_reference": {"unigram": {"valid": {"perplexity": 200.0}, "test": {"perplexity": 210.0}}},
        "long": {
            "gmlp": {
                "recipe": {"learning_rate": 3e-3, "warmup_steps": 600, "lr_scheduler_type": "constant_with_warmup"},
                "curve": curve,
                "test_perplexity": 23.0,
            }
        },
    }
    row = next(line for line in tables.long(results).splitlines() if line.startswith("| gmlp"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2:] == ["80.0", "60.0", "-14.3%", "never", "23.0"]
