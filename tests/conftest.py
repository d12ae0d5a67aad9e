"""pytest configuration shared by the test suite: its options and markers, and the fixtures the test files share
(what they share that is not a fixture is in tests/helpers.py).

End-to-end tests (several processes, subprocesses that import everything afresh, whole training runs) are marked
`e2e` and skipped by default, so that `python -m pytest -q` stays quick; `--run-e2e` runs them too, as CI does.

The device and the dtype. `--device` (or the environment's GMLP_TEST_DEVICE; `cpu` by default, as in CI) is where the
device-aware tests build their models and inputs: the tests that depend on the `device` fixture, most of them
through `on_device`, which makes it torch's default device for the test (the model-value tests: test_modeling,
test_inputs, test_generation, test_bf16, test_peft, test_vision, test_mlm_sparse_logits, test_trainer_losses through
the Trainer's device, test_devices), and Transformers' common tests, whose `transformers.testing_utils.torch_device`
follows the option (TRANSFORMERS_TEST_DEVICE). On another device than the CPU, the tests that are not device-aware
(the scripts, subprocesses, end-to-end runs) and those marked `cpu_only` skip, each saying why: the CPU pass runs them.
The CPU pass hides CUDA devices (CUDA_VISIBLE_DEVICES=""), so that on a machine with a GPU the Trainer and the
subprocesses stay on the CPU as in CI; on CUDA, fp32 is fp32 (TF32 off).

`--dtype bf16` (or GMLP_TEST_DTYPE) is the bf16 pass: the tests that take the `dtype` fixture build their models and
floating inputs in bf16 and compare with the bf16 tolerance (helpers.assert_close); those marked `bf16`
(tests/model/test_bf16.py, which compare bf16 with fp32 themselves) run as in every pass; the others skip.
"""

import os
import sys


def selects_cuda(argv: list[str]) -> bool:
    """Whether this run's --device (or GMLP_TEST_DEVICE) is a CUDA device, read from the command line before pytest
    parses it."""
    name = os.environ.get("GMLP_TEST_DEVICE", "cpu")
    for index, argument in enumerate(argv):
        if argument == "--device" and index + 1 < len(argv):
            name = argv[index + 1]
        elif argument.startswith("--device="):
            name = argument.removeprefix("--device=")
    return name.startswith("cuda")


# Triton decides when it is first imported (`import gmlp` imports it, through torch._dynamo) whether its kernels are
# compiled or interpreted: a pass on the CPU interprets them (TRITON_INTERPRET=1), so that tests/model/test_sgu_kernels.py
# runs the fused spatial gating unit on CPU tensors; a pass with --device cuda compiles them.
if not selects_cuda(sys.argv):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import helpers
import pytest
import torch
from transformers import AutoTokenizer

from gmlp.tokenization_gmlp import train_tokenizer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def pytest_addoption(parser):
    parser.addoption("--run-e2e", action="store_true", help="also run the end-to-end tests (marked e2e), as CI does")
    parser.addoption(
        "--device",
        default=os.environ.get("GMLP_TEST_DEVICE", "cpu"),
        help="where the device-aware tests run: cpu (the default, CI's), cuda, cuda:1, ... (env GMLP_TEST_DEVICE); "
        "on another device than the CPU the other tests skip",
    )
    parser.addoption(
        "--dtype",
        default=os.environ.get("GMLP_TEST_DTYPE", "fp32"),
        help="fp32 (the default) or bf16 (env GMLP_TEST_DTYPE): with bf16, the tests that compare values with a "
        "bf16 tolerance run in bf16, and the others skip",
    )


def selected_device(config) -> torch.device:
    """The device of --device, checked: a torch device, and a CUDA one only where CUDA has it."""
    name = config.getoption("--device")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise pytest.UsageError(f"--device {name!r} (or GMLP_TEST_DEVICE) is not a torch device: {error}") from None
    if device.type == "cuda" and (device.index or 0) >= (
        torch.cuda.device_count() if torch.cuda.is_available() else 0
    ):
        raise pytest.UsageError(
            f"--device {name} (or GMLP_TEST_DEVICE): this machine has no such CUDA device. The default, "
            "--device cpu, is what CI runs."
        )
    return device


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: an end-to-end test, skipped unless --run-e2e is given")
    config.addinivalue_line(
        "markers", "cpu_only(reason): a device-aware module's test that runs in the CPU pass only, for this reason"
    )
    config.addinivalue_line("markers", "bf16: compares bf16 with fp32 itself, so runs in every --dtype pass")
    # Markers of Transformers' common tests (fetched at test time, see tests/model/transformers_common/upstream.py),
    # registered as in Transformers' own conftest.py so that pytest does not warn about unknown marks.
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

    if config.getoption("--dtype") not in DTYPES:
        raise pytest.UsageError(
            f"--dtype (or GMLP_TEST_DTYPE) is one of {', '.join(DTYPES)}, not {config.getoption('--dtype')!r}"
        )
    device = selected_device(config)
    if device.type == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CI's pass, also on a machine with a GPU
    elif device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    # Transformers' common tests read their device from transformers.testing_utils when they are imported (later).
    os.environ["TRANSFORMERS_TEST_DEVICE"] = str(device)
    if "transformers.testing_utils" in sys.modules:
        sys.modules["transformers.testing_utils"].torch_device = str(device)


def pytest_collection_modifyitems(config, items):
    device = torch.device(config.getoption("--device"))
    bf16_pass = config.getoption("--dtype") != "fp32"
    for item in items:
        cpu_only = item.get_closest_marker("cpu_only")
        if "e2e" in item.keywords and not config.getoption("--run-e2e"):
            reason = "end-to-end test: pass --run-e2e to run it (CI does)"
        elif device.type != "cpu" and "device" not in item.fixturenames:
            reason = f"not device-aware: the CPU pass runs it, not --device {device}"
        elif device.type != "cpu" and cpu_only:
            reason = f"CPU only: {cpu_only.args[0]}"
        elif bf16_pass and "dtype" not in item.fixturenames and "bf16" not in item.keywords:
            reason = "fp32 only: a --dtype bf16 pass runs the tests that take `dtype`, and tests/model/test_bf16.py"
        else:
            continue
        item.add_marker(pytest.mark.skip(reason=reason))


# ---- the device and the dtype ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def device(pytestconfig) -> torch.device:
    """The device of --device (GMLP_TEST_DEVICE), the CPU by default. A test that depends on it is device-aware."""
    return torch.device(pytestconfig.getoption("--device"))


@pytest.fixture
def on_device(device):
    """Makes `device` torch's default device for the test: the modules and tensors it creates are made there (and
    `from_pretrained` loads there). Random inputs drawn from a seeded generator: helpers.seeded."""
    with device:
        yield device


@pytest.fixture(scope="session")
def dtype(pytestconfig) -> torch.dtype:
    """The floating dtype of --dtype (GMLP_TEST_DTYPE): fp32 by default, bf16 in the bf16 pass. A test that takes it
    casts its models and floating inputs to it and compares with helpers.assert_close (bf16's tolerance in bf16)."""
    return DTYPES[pytestconfig.getoption("--dtype")]


# ---- tiny configs ------------------------------------------------------------------------------------------------
@pytest.fixture
def tiny_config():
    """A factory of tiny text configs (helpers.TINY_TEXT): `tiny_config(sizes_dict, ..., field=value)`."""
    return helpers.tiny_text_config


@pytest.fixture
def tiny_vision_config():
    """A factory of tiny vision configs (helpers.TINY_VISION): `tiny_vision_config(sizes_dict, ..., field=value)`."""
    return helpers.tiny_vision_config


# ---- tokenizers ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def make_tokenizer(tmp_path_factory):
    """A factory of small saved WordPiece tokenizers: `make_tokenizer(texts, vocab_size=120)` is the folder (a str,
    as the scripts take it) of one trained on `texts`, every word kept (min_frequency 1); once per session each."""
    folders = {}

    def make(texts, vocab_size: int = 120) -> str:
        key = (tuple(texts), vocab_size)
        if key not in folders:
            folder = tmp_path_factory.mktemp("tokenizer")
            train_tokenizer(iter(key[0]), vocab_size=vocab_size, min_frequency=1).save_pretrained(folder)
            folders[key] = str(folder)
        return folders[key]

    return make


@pytest.fixture(scope="session")
def tokenizer_dir(make_tokenizer) -> str:
    """The folder of the script tests' tokenizer, trained on helpers.rotated_lines(20) and the SQuAD paragraph
    (helpers.CONTEXT): under 120 tokens. A module whose fixtures use other words overrides it with make_tokenizer."""
    return make_tokenizer(helpers.rotated_lines(20) + [helpers.CONTEXT] * 3)


@pytest.fixture(scope="session")
def script_tokenizer(tokenizer_dir):
    """The script tests' tokenizer (`tokenizer_dir`), loaded."""
    return AutoTokenizer.from_pretrained(tokenizer_dir)
