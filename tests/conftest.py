"""pytest configuration shared by the test suite."""


def pytest_configure(config):
    # Markers of Transformers' common tests (fetched at test time, see tests/transformers_common/upstream.py), registered as in Transformers' own
    # conftest.py so that pytest does not warn about unknown marks.
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
