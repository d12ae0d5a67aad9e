"""The suite on a device (conftest.py's --device and --dtype): the device-aware tests build their models and inputs
where they are asked to, Transformers' common tests follow, and a bad label gives the same clear error on every
device, through the scripts' collator (the model checks labels on the CPU only: on an accelerator a bad label would be
a device-side assert, and a check there would synchronise every step).

The option itself is checked in fresh interpreters with `--device meta`, a device with no data, where every tensor
a device-aware test makes must land (a tensor made on the CPU beside them is an error), and a dry run of the model
tests there finds no tensor left on the CPU."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import seeded
from transformers import DataCollatorWithPadding, Trainer, TrainingArguments, default_data_collator, testing_utils

from gmlp import GMLPForImageClassification, GMLPForMaskedLM, GMLPForSequenceClassification
from gmlp.tasks.collators import CheckedCollator
from gmlp.tasks.mlm import MaskedLMCollator

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


def is_on(tensor: torch.Tensor, device: torch.device) -> bool:
    return tensor.device.type == device.type and device.index in (None, tensor.device.index)


def test_models_inputs_and_the_common_tests_are_on_the_selected_device(on_device, device, tiny_config):
    model = GMLPForMaskedLM(tiny_config()).eval()
    ids = seeded(torch.randint, 0, 64, (2, 8), seed=0)
    assert all(is_on(param, device) for param in model.parameters()) and is_on(ids, device)
    with torch.no_grad():
        assert is_on(model(ids).logits, device)
    assert testing_utils.torch_device == str(device)  # what Transformers' common tests build on


# ---- a bad label: the same clear error on every device, from the scripts' collator --------------------------------
def labelled_batch(head: str, tokenizer, tiny_config, tiny_vision_config):
    """A model, the collator its script uses, and two examples, the second with a label outside the model's ids."""
    if head == "sequence classification":  # run_glue.py
        model = GMLPForSequenceClassification(tiny_config(vocab_size=len(tokenizer), num_labels=2))
        collator = CheckedCollator(DataCollatorWithPadding(tokenizer), input_ids=len(tokenizer), labels=2)
        examples = [{**tokenizer(text), "label": label} for text, label in [("the cat", 1), ("a dog", 5)]]
    elif head == "masked lm":  # run_mlm.py (a fixed evaluation mask: the labels are already in the examples)
        model = GMLPForMaskedLM(tiny_config(vocab_size=len(tokenizer)))
        collator = CheckedCollator(MaskedLMCollator(tokenizer), input_ids=len(tokenizer), labels=len(tokenizer))
        examples = [{**tokenizer(text)} for text in ("the cat sat", "a dog slept")]
        for example, label in zip(examples, (7, 1000)):
            example["labels"] = [-100, label] + [-100] * (len(example["input_ids"]) - 2)
    else:  # run_image_classification.py
        model = GMLPForImageClassification(tiny_vision_config())
        collator = CheckedCollator(default_data_collator, labels=model.config.num_labels)
        examples = [{"pixel_values": torch.zeros(3, 16, 16), "labels": label} for label in (2, 7)]
    return model, collator, examples


@pytest.mark.parametrize("head", ["sequence classification", "masked lm", "image classification"])
def test_a_bad_label_gives_the_same_clear_error_on_the_selected_device(
    head, device, script_tokenizer, tiny_config, tiny_vision_config, tmp_path
):
    model, collator, examples = labelled_batch(head, script_tokenizer, tiny_config, tiny_vision_config)
    with pytest.raises(ValueError, match=r"A batch holds labels \d+, outside the model's ids 0\.\.\d+") as checked:
        collator(examples)  # the collator alone, on the CPU
    calls = []
    model.register_forward_pre_hook(lambda *args: calls.append(args))
    arguments = TrainingArguments(
        str(tmp_path / "out"),
        report_to="none",
        max_steps=1,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        use_cpu=device.type == "cpu",
    )
    trainer = Trainer(
        model=model, args=arguments, train_dataset=examples, eval_dataset=examples, data_collator=collator
    )
    assert trainer.args.device.type == device.type, f"the Trainer chose {trainer.args.device}, not {device}"
    for run in (trainer.train, trainer.evaluate):
        with pytest.raises(ValueError) as error:
            run()
        assert str(error.value) == str(checked.value)
    assert calls == []  # the model never saw the batch
    assert all(param.device.type == device.type for param in model.parameters())


# ---- the options themselves, in fresh interpreters -----------------------------------------------------------------
PROBE = """
import os

import pytest
import torch
from transformers import testing_utils

from gmlp import GMLPForMaskedLM

pytestmark = pytest.mark.usefixtures("on_device")


def test_device_aware(device, dtype, tiny_config):
    model = GMLPForMaskedLM(tiny_config()).to(dtype)
    ids = torch.randint(0, 64, (2, 8))
    parameter = next(model.parameters())
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    print("PROBE", device, parameter.device, parameter.dtype, ids.device, testing_utils.torch_device, repr(hidden))


@pytest.mark.cpu_only("a reason given here")
def test_cpu_only(device):
    pass
"""
NOT_DEVICE_AWARE = """
def test_not_device_aware():
    pass
"""


def run_pytest(folder: Path, *options: str, **environment: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **environment}
    for name in ("GMLP_TEST_DEVICE", "GMLP_TEST_DTYPE", "CUDA_VISIBLE_DEVICES"):  # this run's are not its
        if name not in environment:
            env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-rs", "-p", "no:cacheprovider", *options],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def probe_folder(tmp_path_factory) -> Path:
    """The suite's conftest.py and helpers.py beside two small test files."""
    folder = tmp_path_factory.mktemp("probe")
    for name in ("conftest.py", "helpers.py"):
        shutil.copy(TESTS / name, folder / name)
    (folder / "test_probe.py").write_text(PROBE)
    (folder / "test_plain.py").write_text(NOT_DEVICE_AWARE)
    return folder


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["option", "environment"])
def test_device_meta_puts_models_inputs_and_the_common_tests_there_and_skips_the_rest(probe_folder, how):
    if how == "option":
        result = run_pytest(probe_folder, "--device", "meta")
    else:
        result = run_pytest(probe_folder, GMLP_TEST_DEVICE="meta")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "PROBE meta meta torch.float32 meta meta None" in output
    assert "not device-aware: the CPU pass runs it, not --device meta" in output
    assert "CPU only: a reason given here" in output
    assert re.search(r"1 passed, 2 skipped", output), output[-2000:]


@pytest.mark.e2e
def test_the_default_is_the_cpu_with_accelerators_hidden_and_bf16_is_a_pass_of_its_own(probe_folder):
    result = run_pytest(probe_folder)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "PROBE cpu cpu torch.float32 cpu cpu ''" in output, output[-3000:]
    assert "3 passed" in output
    result = run_pytest(probe_folder, "--dtype", "bf16")
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "PROBE cpu cpu torch.bfloat16 cpu cpu ''" in output, output[-3000:]
    assert "fp32 only: a --dtype bf16 pass runs the tests that take `dtype`" in output  # test_plain, test_cpu_only
    assert re.search(r"1 passed, 2 skipped", output), output[-2000:]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--device", "gpu"], "--device 'gpu' (or GMLP_TEST_DEVICE) is not a torch device"),
        (["--device", "cuda:7"], "--device cuda:7 (or GMLP_TEST_DEVICE): this machine has no such CUDA device"),
        (["--dtype", "fp16"], "--dtype (or GMLP_TEST_DTYPE) is one of fp32, bf16, not 'fp16'"),
    ],
)
def test_a_device_or_dtype_that_cannot_be_had_is_a_usage_error(probe_folder, options, message):
    if options[1].startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    result = run_pytest(probe_folder, *options)
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout[-2000:] + result.stderr[-2000:]
    assert message in result.stderr


# The model-value files, all of whose tests are device-aware (Transformers' common tests are too, and build on
# `torch_device` as upstream does; a dry run of them takes minutes).
DRY_RUN_FILES = [
    "model/test_modeling.py",
    "model/test_inputs.py",
    "model/test_generation.py",
    "model/test_bf16.py",
    "ecosystem/test_peft.py",
    "model/test_vision.py",
    "model/test_mlm_sparse_logits.py",
    "ecosystem/test_trainer_losses.py",
]
DEVICE_MIXES = ("is not on the expected device", "Expected all tensors to be on the same device")


@pytest.mark.e2e
def test_a_dry_run_on_the_meta_device_leaves_no_tensor_on_the_cpu():
    """On `meta` no value can be read, so most tests fail there; none may fail because a tensor was made on the CPU
    beside the device's (what would fail on a GPU), and the tests did run there."""
    files = [f"tests/{name}" for name in DRY_RUN_FILES]
    result = run_pytest(ROOT, "--device", "meta", "--tb=line", "-k", "not torch_compile", *files)  # compiling: slow
    output = result.stdout + result.stderr
    assert "meta tensors" in output and "passed" in output, output[-3000:]
    assert not [line for line in output.splitlines() if any(mix in line for mix in DEVICE_MIXES)]
