"""pytest configuration shared by the test suite.

End-to-end tests (several processes, subprocesses that import everything afresh, whole training runs) are marked
`e2e` and skipped by default, so that `python -m pytest -q` stays quick; `--run-e2e` runs them too, as CI does.
"""

import pytest


def pytest_addoption(parser):
    parser.addoption("--run-e2e", action="store_true", help="also run the end-to-end tests (marked e2e), as CI does")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-e2e"):
        return
    skip = pytest.mark.skip(reason="end-to-end test: pass --run-e2e to run it (CI does)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    # Markers of Transformers' common tests (fetched at test time, see tests/transformers_common/upstream.py), registered as in Transformers' own
    # conftest.py so that pytest does not warn about unknown marks.
    config.addinivalue_line("markers", "e2e: an end-to-end test, skipped unless --run-e2e is given")
    markers = (
        "slow",
        "accelerate_tests",
        "flash_attn_test",
        "flash_attn_3_test",
        "flash_attn_4_test",
        "torch_compile_test",
    )
    for marker in markers:
        config.addinivalue_line("markers", f"{marker}: marks a test of Transformers' common tests")
