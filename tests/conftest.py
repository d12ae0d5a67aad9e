"""pytest configuration shared by the test suite."""


def pytest_configure(config):
    # Markers of Transformers' vendored common tests (tests/transformers_common), registered as in Transformers' own
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
