"""The committed benchmark tables are what the committed results give: every `benchmarks/results/speed_*.md` is the
markdown of its JSON (the README copies its figures from these tables; the quality report: test_quality_report.py)."""

import json
import sys
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))

import speed


@pytest.mark.parametrize("table", sorted(p.name for p in RESULTS.glob("speed_*.md")))
def test_each_speed_table_is_the_markdown_of_its_results(table):
    results = json.loads((RESULTS / table).with_suffix(".json").read_text())
    assert speed.markdown(results) == (RESULTS / table).read_text()
