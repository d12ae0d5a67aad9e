"""The committed quality report is what the committed run records give: `benchmarks/results/quality.md`, and the
generated tables inside docs/quality.md and the README."""

from pathlib import Path

import pytest

from benchmarks.quality import pretrain, report
from benchmarks.quality.__main__ import collect, parse_args
from benchmarks.quality.context import Context
from benchmarks.quality.models import MODELS

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    args = parse_args(
        [
            "--report_only",
            "--work_dir",
            str(tmp_path_factory.mktemp("work")),
            "--output",
            str(RESULTS / "quality.json"),
        ]
    )
    results = collect(Context(args), list(MODELS))
    return results, report.tables(results)


def test_quality_md_is_the_report_of_the_records(rendered):
    results, tables = rendered
    assert report.markdown(results, tables) == (RESULTS / "quality.md").read_text()


@pytest.mark.parametrize("page", report.PAGES, ids=lambda page: page.name)
def test_the_pages_tables_are_those_of_the_records(rendered, page):
    text = page.read_text()
    assert report.filled(text, report.page_tables(rendered[1])) == text


def partial_results(finished: list[str]) -> dict:
    """Made-up results of a benchmark whose search is complete for every model and whose final runs exist for
    `finished` only."""
    curve = [(200, 300.0), (400, 100.0)]
    recipe = {"learning_rate": 1e-3, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 200}
    split = {"perplexity": 600.0, "accuracy": 0.05, "masked_tokens": 1000}
    results = {
        "settings": {"max_steps": 400},
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
    results["pretrain_derived"] = pretrain.derive(results)
    return results


def test_the_pages_show_the_search_until_every_model_has_its_final_runs():
    partial = report.page_tables(report.tables(partial_results(["gmlp"])))
    assert partial["summary"].startswith("Under way") and "bert" in partial["summary"]
    full = report.page_tables(report.tables(partial_results(list(MODELS))))
    rows = [line.split("|")[1].strip() for line in full["summary"].splitlines()[2:]]
    assert rows == [*MODELS, "unigram"]
