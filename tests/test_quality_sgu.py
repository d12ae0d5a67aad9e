"""The quality benchmark's Table 3 part: it makes the runs of the models asked for and no others."""

import pytest

from benchmarks.quality import sgu
from benchmarks.quality.__main__ import parse_args
from benchmarks.quality.context import Context
from benchmarks.quality.models import sgu_configs


@pytest.fixture
def table3(tmp_path, monkeypatch):
    """sgu.measure with recipes and pretraining stood in for; returns (rows, the runs it asked for, the recipes)."""
    ctx = Context(parse_args(["--work_dir", str(tmp_path), "--output", str(tmp_path / "quality.json")]))
    runs, recipes = [], []

    def final_recipe(ctx, name):
        recipes.append(name)
        return {"learning_rate": 1e-3, "lr_scheduler_type": "linear", "warmup_steps": 200}

    def pretrain(ctx, name, seed, recipe, config, part):
        runs.append((name, seed, recipe["max_steps"], part))
        return {"seed": seed, "perplexity": 50.0 + seed, "test_perplexity": 48.0, "curve": []}

    monkeypatch.setattr(sgu, "final_recipe", final_recipe)
    monkeypatch.setattr(sgu, "pretrain", pretrain)
    return lambda models: (sgu.measure(ctx, models), runs, recipes)


def test_a_transformer_alone_gets_its_row_without_gmlps_variants_or_another_models_search(table3):
    rows, runs, recipes = table3(["modernbert"])
    assert recipes == ["modernbert"]
    assert {name for name, *_ in runs} == {"modernbert"}
    assert [(seed, steps, part) for _, seed, steps, part in runs] == [
        (0, 1000, "sgu"),
        (1, 1000, "sgu"),
        (2, 1000, "sgu"),
    ]
    assert rows["variants"] == {} and list(rows["transformers"]) == ["modernbert"]
    assert rows["transformers"]["modernbert"]["perplexities"] == [50.0, 51.0, 52.0]


def test_bert_brings_deberta_which_takes_its_recipe_and_gmlp_brings_every_variant(table3):
    rows, runs, recipes = table3(["gmlp", "bert"])
    assert set(recipes) == {"gmlp", "bert"}
    assert list(rows["transformers"]) == ["bert", "deberta-v2"]
    assert set(rows["variants"]) == set(sgu_configs())
    assert {name for name, *_ in runs} >= {"gmlp", "bert", "deberta-v2"}
    assert "modernbert" not in {name for name, *_ in runs}
