"""The quality benchmark's Table 3 part: it makes the runs of the models asked for and no others."""

import pytest

from benchmarks.quality import parts
from benchmarks.quality.__main__ import parse_args
from benchmarks.quality.context import Context, sgu_configs


@pytest.fixture
def table3(tmp_path, monkeypatch):
    """parts.sgu_part with recipes and pretraining stood in for; returns (rows, the runs it asked for, the recipes)."""
    runs, recipes = [], []

    def final_recipe(ctx, name):
        recipes.append(name)
        return {"learning_rate": 1e-3, "lr_scheduler_type": "linear", "warmup_steps": 200}

    def pretrain(ctx, name, seed, recipe, config):
        runs.append((name, seed, recipe["max_steps"], recipe["warmup_steps"]))
        return {"seed": seed, "perplexity": 50.0 + seed, "test_perplexity": 48.0, "curve": []}

    monkeypatch.setattr(parts, "final_recipe", final_recipe)
    monkeypatch.setattr(parts, "pretrain", pretrain)

    def run(models):
        options = ["--work_dir", str(tmp_path), "--output", str(tmp_path / "quality.json"), "--models", *models]
        return parts.sgu_part(Context(parse_args(options))), runs, recipes

    return run


def test_a_transformer_alone_gets_its_row_without_gmlps_variants_or_another_models_search(table3):
    rows, runs, recipes = table3(["modernbert"])
    assert recipes == ["modernbert"]
    # --sgu_steps 1000 of --max_steps 2000: the chosen warm-up of 200 scaled to 100
    assert runs == [("modernbert", 0, 1000, 100), ("modernbert", 1, 1000, 100), ("modernbert", 2, 1000, 100)]
    assert rows["variants"] == {} and list(rows["transformers"]) == ["modernbert"]
    assert rows["transformers"]["modernbert"]["perplexities"] == [50.0, 51.0, 52.0]
    assert rows["transformers"]["modernbert"]["recipe_of"] == "modernbert"


def test_bert_brings_deberta_which_takes_its_recipe_and_gmlp_brings_every_variant(table3):
    rows, runs, recipes = table3(["gmlp", "bert"])
    assert set(recipes) == {"gmlp", "bert"}
    assert list(rows["transformers"]) == ["bert", "deberta-v2"]
    assert rows["transformers"]["deberta-v2"]["recipe_of"] == "bert"
    assert set(rows["variants"]) == set(sgu_configs())
    # the split SGU at gMLP's shape is gMLP itself: its runs keep gMLP's name
    assert {name for name, *_ in runs} == {
        "gmlp",
        "bert",
        "deberta-v2",
        "sgu-multiplicative",
        "sgu-additive",
        "sgu-linear",
        "sgu-multiplicative_split-wider",
    }
