"""The committed benchmark tables are what the committed results give: every `benchmarks/results/speed_*.md` is the
markdown of its JSON, docs/benchmarks.md's tables are those of the results they name, and `quality.md` is the report
of the run records in `quality_runs/` (the README copies its figures from these tables)."""

import json
import sys
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))

import quality

from benchmarks.speed import report


@pytest.mark.parametrize("table", sorted(p.name for p in RESULTS.glob("speed_*.md")))
def test_each_speed_table_is_the_markdown_of_its_results(table):
    results = json.loads((RESULTS / table).with_suffix(".json").read_text())
    assert report.markdown(results) == (RESULTS / table).read_text()


@pytest.mark.parametrize("page", report.DOCS, ids=lambda page: page.name)
def test_the_docs_tables_are_those_of_the_results(page):
    text = page.read_text()
    assert "<!-- table " in text
    assert report.docs(text) == text


def test_the_quality_tables_are_the_report_of_the_run_records(tmp_path):
    args = quality.parse_args(
        ["--report_only", "--work_dir", str(tmp_path), "--output", str(RESULTS / "quality.json")]
    )
    results = quality.collect(quality.Quality(args))
    assert quality.markdown(results) == (RESULTS / "quality.md").read_text()
    assert results["pretrain"]["gmlp"]["perplexities"], "the records hold gMLP's pretraining"
