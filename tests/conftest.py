"""pytest configuration shared by the test suite.

End-to-end tests (several processes, subprocesses that import everything afresh, whole training runs) are marked
`e2e` and skipped by default, so that `python -m pytest -q` stays quick; `--run-e2e` runs them too, as CI does.
"""

import pytest

from gmlp import GMLPConfig, GMLPVisionConfig

# The tiny models of the tests: small enough to run hundreds of times, dropout off so that outputs are deterministic,
# and a visible spatial init (W near zero would hide token mixing). A test's own sizes go in as overrides.
TINY_TEXT = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "max_position_embeddings": 16,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "spatial_init_eps": 16.0,
}
TINY_VISION = {
    "image_size": 16,
    "patch_size": 4,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_labels": 3,
    "spatial_init_eps": 16.0,
    "drop_path_rate": 0.0,
}


def tiny(config_class, defaults: dict, *sizes: dict, **overrides):
    """`config_class` with the tiny defaults, then each dict of `sizes`, then `overrides`."""
    settings = dict(defaults)
    for size in sizes:
        settings.update(size)
    settings.update(overrides)
    return config_class(**settings)


@pytest.fixture
def tiny_config():
    """A factory of tiny text configs: `tiny_config(sizes_dict, ..., field=value)`."""
    return lambda *sizes, **overrides: tiny(GMLPConfig, TINY_TEXT, *sizes, **overrides)


@pytest.fixture
def tiny_vision_config():
    """A factory of tiny vision configs: `tiny_vision_config(sizes_dict, ..., field=value)`."""
    return lambda *sizes, **overrides: tiny(GMLPVisionConfig, TINY_VISION, *sizes, **overrides)


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
