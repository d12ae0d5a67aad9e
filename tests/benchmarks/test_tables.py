"""The committed benchmark tables are what the committed results give: every `benchmarks/results/speed_*.md` is the
markdown of its JSON and the docs' marked tables are those of the results they name (the quality report:
test_quality_report.py)."""

import json

import pytest

from benchmarks.common import RESULTS_DIR, ROOT
from benchmarks.speed import __main__ as report


@pytest.mark.parametrize("table", sorted(p.name for p in RESULTS_DIR.glob("speed_*.md")))
def test_each_speed_table_is_the_markdown_of_its_results(table):
    results = json.loads((RESULTS_DIR / table).with_suffix(".json").read_text())
    assert report.markdown(results) == (RESULTS_DIR / table).read_text()


@pytest.mark.parametrize("page", report.DOCS, ids=lambda page: page.name)
def test_the_docs_tables_are_those_of_the_results(page):
    text = page.read_text()
    assert report.docs(text) == text


def test_the_benchmarks_page_marks_its_tables():
    """The page the commands write: every section's tables are marked, so a changed result shows as a failure."""
    marked = report.MARKED.findall((ROOT / "docs" / "benchmarks.md").read_text())
    assert {section for _, _, section, _, _ in marked} >= {"training", "precision", "memory", "gpu", "padding_free"}
