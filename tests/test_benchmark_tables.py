"""The committed benchmark tables are what the committed results give: every `benchmarks/results/speed_*.md` is the
markdown of its JSON and docs/benchmarks.md's tables are those of the results they name (the quality report:
test_quality_report.py)."""

import json
from pathlib import Path

import pytest

from benchmarks.speed import report

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


@pytest.mark.parametrize("table", sorted(p.name for p in RESULTS.glob("speed_*.md")))
def test_each_speed_table_is_the_markdown_of_its_results(table):
    results = json.loads((RESULTS / table).with_suffix(".json").read_text())
    assert report.markdown(results) == (RESULTS / table).read_text()


@pytest.mark.parametrize("page", report.DOCS, ids=lambda page: page.name)
def test_the_docs_tables_are_those_of_the_results(page):
    text = page.read_text()
    assert "<!-- table " in text
    assert report.docs(text) == text
