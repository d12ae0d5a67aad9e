"""The model library is light: `import gmlp` loads neither `datasets` nor `evaluate` (they belong to the `train` extra
and to gmlp.tasks), and the task support finds its packaged data and metrics."""

import subprocess
import sys
from pathlib import Path

import pytest

from gmlp.tasks.metrics import load_metric
from gmlp.tasks.mlm import DEFAULT_TRAIN_FILE


@pytest.mark.e2e
def test_importing_the_library_leaves_the_task_dependencies_alone():
    code = "import sys, gmlp; print(sorted(m for m in ('datasets', 'evaluate', 'gmlp.tasks') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600)
    assert result.stdout.strip() == "[]"


def test_the_task_support_ships_its_data_and_metrics():
    assert Path(DEFAULT_TRAIN_FILE).stat().st_size > 100_000
    assert load_metric("glue", "sst2").compute(predictions=[0, 1], references=[0, 0]) == {"accuracy": 0.5}
