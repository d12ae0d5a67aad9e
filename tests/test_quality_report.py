"""The committed quality report is what the committed run records give: `benchmarks/results/quality.md`, and the
generated tables inside docs/quality.md and the README."""

from pathlib import Path

import pytest

from benchmarks.quality import report
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
