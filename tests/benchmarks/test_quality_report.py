"""The committed quality report is what the committed run records give: `benchmarks/results/quality.md`, and the
generated tables inside docs/quality.md; each record is found by the key of its settings, whatever the version of
Transformers; and the report of a study under way shows what exists."""

import json
import math
from pathlib import Path

import pytest
import transformers
from transformers import configuration_utils

from benchmarks.quality import __main__ as report
from benchmarks.quality import parts, tables
from benchmarks.quality.__main__ import parse_args
from benchmarks.quality.context import MODELS, Context, config_settings, settings_key
from gmlp import GMLPConfig

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    work = tmp_path_factory.mktemp("work")
    results = parts.collect(Context(parse_args(["--report_only", "--work_dir", str(work)])))
    return results, tables.rendered(results)


def but_the_last_digits(value):
    """`value` with every float as `pytest.approx` (1e-12 relative): a figure derived through a logarithm may differ
    in its last digit from one CPU to another (numpy's AVX-512 log is one ULP from its AVX2 log at some points)."""
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-12, abs=0)
    if isinstance(value, dict):
        return {key: but_the_last_digits(item) for key, item in value.items()}
    return [but_the_last_digits(item) for item in value] if isinstance(value, list) else value


def test_quality_json_and_md_are_the_report_of_the_records(rendered):
    results, rendered_tables = rendered
    assert json.loads(json.dumps(results)) == but_the_last_digits(json.loads((RESULTS / "quality.json").read_text()))
    assert report.markdown(results, rendered_tables) == (RESULTS / "quality.md").read_text()


@pytest.mark.parametrize("page", report.PAGES, ids=lambda page: page.name)
def test_the_pages_tables_are_those_of_the_records(rendered, page):
    text = page.read_text()
    assert "<!-- /quality:" in text  # a page with generated tables
    assert report.filled(text, rendered[1]) == text


def as_a_newer_transformers(monkeypatch) -> None:
    """Transformers as a later release would be: another version stamp, and a config field added at its default."""
    to_dict = transformers.PretrainedConfig.to_dict
    monkeypatch.setattr(configuration_utils, "__version__", "99.0.0")
    monkeypatch.setattr(transformers.PretrainedConfig, "to_dict", lambda self: to_dict(self) | {"added_later": None})


@pytest.mark.parametrize("library", ["installed", "newer"])
def test_the_report_finds_every_committed_record_by_the_key_of_its_settings(library, tmp_path, monkeypatch):
    if library == "newer":
        as_a_newer_transformers(monkeypatch)
    looked_up = []
    record = Context.record
    monkeypatch.setattr(Context, "record", lambda ctx, name: looked_up.append(name) or record(ctx, name))
    ctx = Context(parse_args(["--report_only", "--work_dir", str(tmp_path)]))
    parts.collect(ctx)
    assert sorted(set(looked_up)) == sorted(path.stem for path in ctx.records.glob("*.json"))


@pytest.mark.parametrize("folder", ["quality_runs", "quality_round1_runs"])
def test_every_committed_record_is_named_by_the_key_of_the_settings_it_holds(folder):
    paths = sorted((RESULTS / folder).glob("*.json"))
    assert paths
    for path in paths:
        assert settings_key(json.loads(path.read_text())["settings"]) in path.stem.split("-"), path.name


def test_a_configs_settings_are_its_model_type_and_the_fields_set_away_from_their_defaults(monkeypatch):
    config = GMLPConfig(hidden_size=64, hidden_dropout_prob=0.1, recompute_gating=False)  # 0.1: the default dropout
    expected = {"model_type": "gmlp", "hidden_size": 64}
    assert config_settings(config) == expected
    as_a_newer_transformers(monkeypatch)
    assert config.to_dict()["transformers_version"] == "99.0.0"
    assert config_settings(config) == expected
    assert config_settings(GMLPConfig(hidden_size=64, sgu_variant="linear")) == expected | {"sgu_variant": "linear"}


def partial_results(finished: list[str]) -> dict:
    """Made-up results of a benchmark whose search is complete for every model and whose final runs exist for
    `finished` only."""
    curve = [(200, 300.0), (400, 100.0)]
    recipe = {"learning_rate": 1e-3, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 200}
    split = {"perplexity": 600.0, "accuracy": 0.05, "masked_tokens": 1000}
    results = {
        "settings": {"max_steps": 400, "batch_size": 32, "max_eval_samples": 64, "finetune_steps": 10, "seeds": [0]},
        "pretrain_reference": {"unigram": {"valid": split, "test": split}},
        "step_time": {
            "models": {
                name: {"parameters": 2_270_000, "train_step_seconds": 0.5, "eval_seconds": 10.0} for name in MODELS
            }
        },
        "search": {
            name: {
                "complete": True,
                "runs": [{**recipe, "max_steps": 400, "perplexity": 100.0, "accuracy": 0.3, "curve": curve}],
                "chosen": recipe,
            }
            for name in MODELS
        },
        "pretrain": {
            name: {
                "parameters": 2_270_000,
                "dropout": 0.1,
                "recipe": recipe,
                "max_steps": 400,
                "perplexities": [100.0],
                "test_perplexities": [95.0],
                "accuracies": [0.3],
                "curves": [curve],
            }
            for name in finished
        },
    }
    results["pretrain_derived"] = parts.derive(results)
    return results


def summary_rows(summary: str) -> list[str]:
    return [line.split("|")[1].strip() for line in summary.splitlines()[2:] if line.startswith("|")]


def test_a_report_under_way_has_the_tables_of_what_exists():
    rendered_tables = tables.rendered(partial_results(["gmlp"]))
    assert list(rendered_tables) == ["reference", "step_time", "search", "pretrain_steps", "pretrain_time", "summary"]
    assert summary_rows(rendered_tables["summary"]) == ["gmlp", "unigram"]
    row = next(line for line in rendered_tables["summary"].splitlines() if line.startswith("| gmlp"))
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells == ["gmlp", "2.27M", "0.1", *["100.0 (n=1)"] * 2, "95.0 (n=1)", "200", *["not run yet"] * 3]
    full = tables.rendered(partial_results(list(MODELS)))["summary"]
    assert summary_rows(full) == [*MODELS, "unigram"]


def test_the_summary_names_an_adopted_probe_and_leaves_the_pretraining_only_variants_blank():
    results = partial_results(["modernbert"])
    results["pretrain"]["gmlp-dropout0"] = results["pretrain"]["modernbert"]  # pretrained only: no fine-tuning cells
    results["pretrain_derived"] = parts.derive(results)
    results["finetune"] = {
        "tasks": {
            "sst2": {"modernbert": {"accuracy": [0.80, 0.78]}},
            "mnli": {"modernbert": {"accuracy": [0.36, 0.38]}, "modernbert, mean pooling": {"accuracy": [0.41, 0.43]}},
        }
    }
    row = next(line for line in tables.summary(results).splitlines() if line.startswith("| modernbert"))
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[-3:] == ["79.0 ± 1.4 (n=2)", "42.0 ± 1.4 (n=2), mean pooling", "not run yet"]
    variant = next(line for line in tables.summary(results).splitlines() if line.startswith("| gmlp-dropout0"))
    assert [cell.strip() for cell in variant.split("|")[1:-1]][-3:] == ["–", "–", "–"]


def test_the_equal_time_budget_is_the_fastest_models_whole_run_however_its_step_time_rounds():
    # 2000 x 0.6822230865001984 / 0.6822230865001984 is 2000.0000000000002 in floating point: past the last evaluation.
    results = partial_results(list(MODELS))
    for name, seconds in zip(MODELS, (0.93, 0.86, 0.6822230865001984, 0.72)):
        results["step_time"]["models"][name]["train_step_seconds"] = seconds
        results["pretrain"][name].update(max_steps=2000, curves=[[(200, 300.0), (2000, 100.0)]])
    derived = parts.derive(results)
    assert derived["models"]["gmlp"]["equal_time_steps"] == 2000
    assert derived["models"]["gmlp"]["equal_time_perplexities"] == [pytest.approx(100.0)]
    assert derived["models"]["bert"]["equal_time_steps"] == pytest.approx(2000 * 0.6822230865001984 / 0.93)


def test_the_runtime_table_counts_each_run_under_its_part(tmp_path):
    """The SGU part's split variant at gMLP's shape is gMLP's own run name; its length puts it with the SGU runs."""
    ctx = Context(parse_args(["--report_only", "--work_dir", str(tmp_path), "--output", str(tmp_path / "q.json")]))
    args = ctx.args
    runs = {
        "pretrain-gmlp-aaaa-seed0": ("pretrain", args.max_steps, 3600.0),
        "pretrain-gmlp-bbbb-seed0": ("pretrain", args.sgu_steps, 1800.0),
        "pretrain-sgu-linear-cccc-seed0": ("pretrain", args.sgu_steps, 1800.0),
        "pretrain-bert-dddd-seed0": ("pretrain", args.long_steps, 7200.0),
        "finetune-sst2-gmlp-eeee-seed0": ("finetune", None, 900.0),
        "pretrain-gmlp-ffff-seed1": ("pretrain", args.max_steps, None),  # no training time: not counted
    }
    for name, (kind, steps, runtime) in runs.items():
        ctx.save(name, {"kind": kind, "settings": {"max_steps": steps}, "train_runtime": runtime})
    found = parts.runtimes(ctx)
    assert found == {
        "search and final pretraining": {"runs": 1, "hours": 1.0},
        "long runs": {"runs": 1, "hours": 2.0},
        "fine-tuning": {"runs": 1, "hours": 0.25},
        "SGU variants": {"runs": 2, "hours": 1.0},
    }
    total = tables.runtime({"runtime": found}).splitlines()[-1]
    assert [cell.strip() for cell in total.split("|")[1:-1]] == ["total", "5", "4.2"]


def test_the_runtime_table_does_not_depend_on_the_records_names(tmp_path):
    """Their sum is exact: renaming the records (a new key) reorders them without moving a digit."""
    seconds = [0.1, 0.2, 0.3]  # in hours, added up in one order and in the other, they differ in the last digit
    found = []
    for names in ("abc", "cba"):
        ctx = Context(
            parse_args(["--report_only", "--work_dir", str(tmp_path), "--output", str(tmp_path / names / "q.json")])
        )
        for name, runtime in zip(names, seconds):
            ctx.save(f"finetune-{name}", {"kind": "finetune", "settings": {}, "train_runtime": runtime})
        found.append(parts.runtimes(ctx)["fine-tuning"])
    assert found[0] == found[1] == {"runs": 3, "hours": math.fsum(seconds) / 3600}
