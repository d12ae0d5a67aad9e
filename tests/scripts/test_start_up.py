"""What a run prints on its way in, and only once: the process's place in the run is a routine line, at INFO (shown
with --log_level info, not at the default WARNING); no warning of torch's that a CPU user cannot act on (the data
loader pins memory where there is an accelerator, unless --dataloader_pin_memory says otherwise); and each warning of
a failing Hub request once (huggingface_hub and datasets print through a handler of their own, which the root
logger's handler must not repeat); what the command line names that is not here, named at once, before any request
to the Hub."""

import json
import logging
import re
import socket

import datasets
import pytest
import torch
import transformers
from helpers import free_port, python, write
from script_runs import mlm_run
from transformers import TrainingArguments

from gmlp.tasks import run_mlm, setup
from gmlp.tasks.arguments import ModelArguments, parse_arguments


@pytest.fixture
def restored_verbosity():
    """Transformers' and datasets' verbosity put back after the test (a run sets them to its log level)."""
    levels = transformers.utils.logging.get_verbosity(), datasets.utils.logging.get_verbosity()
    yield
    transformers.utils.logging.set_verbosity(levels[0])
    datasets.utils.logging.set_verbosity(levels[1])


@pytest.mark.parametrize("log_level", ["warning", "info"])
def test_the_start_up_line_is_logged_at_info(tmp_path, caplog, restored_verbosity, log_level):
    with caplog.at_level(logging.DEBUG, logger="gmlp"):
        setup.start(run_mlm.DataTrainingArguments, ["--output_dir", str(tmp_path), "--log_level", log_level])
    said = [record for record in caplog.records if record.getMessage().startswith("Process rank: 0, device: ")]
    assert [record.levelname for record in said] == (["INFO"] if log_level == "info" else [])
    assert said == [] or said[0].getMessage().endswith("world size: 1")


def test_a_run_pins_memory_only_for_an_accelerator_and_torch_does_not_warn(tokenizer_dir, tmp_path, recwarn):
    run_mlm.run(mlm_run(tokenizer_dir, tmp_path, do_eval=True))
    assert [str(warning.message) for warning in recwarn if "pin_memory" in str(warning.message)] == []


@pytest.mark.parametrize(
    "given, pinned",
    [
        ([], None),
        (["--dataloader_pin_memory"], True),
        (["--dataloader_pin_memory", "false"], False),
        (["--no_dataloader_pin_memory"], False),
        (["FILE"], True),
        (["FILE", "--no_dataloader_pin_memory"], False),
    ],
    ids=["not given", "flag", "flag false", "no_ flag", "arguments file", "file then flag"],
)
def test_pin_memory_follows_the_device_unless_given(tmp_path, given, pinned):
    """Not given: pinned where there is an accelerator (none in the CPU pass); given, as given, also on a CPU."""
    file = write(tmp_path / "args.json", json.dumps({"output_dir": str(tmp_path), "dataloader_pin_memory": True}))
    argv = [str(file), *given[1:]] if given[:1] == ["FILE"] else ["--output_dir", str(tmp_path), *given]
    *_, training_args = parse_arguments(ModelArguments, TrainingArguments, argv=argv)
    expected = torch.accelerator.is_available() if pinned is None else pinned
    assert training_args.dataloader_pin_memory is expected


def test_each_warning_of_a_failing_hub_request_is_printed_once(tmp_path):
    """huggingface_hub tries a request that fails (nothing listens at HF_ENDPOINT) 6 times, with a warning for each
    failure and each retry; its waits between tries are skipped here."""
    code = "import sys, time\ntime.sleep = lambda seconds: None\nfrom gmlp.tasks.run_mlm import main\nsys.exit(main())"
    hub = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", "HF_HOME": str(tmp_path / "hf")}
    arguments = ["--model_name_or_path", "some-user/some-model", "--output_dir", str(tmp_path / "out"), "--do_eval"]
    result = python(tmp_path, "-c", code, *arguments, env=hub)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    assert "the Hub could not be reached" in result.stderr.splitlines()[-1]
    retries = re.findall(r"Retrying in \S+ \[Retry (\d+)/(\d+)\]", output)
    assert retries and len(retries) == len(set(retries)), output[-3000:]
    failures = [line for line in output.splitlines() if "thrown while requesting HEAD" in line]
    assert len(failures) == len(retries) + 1, output[-3000:]
    assert "Process rank" not in output  # at INFO: not shown at the default level, WARNING


def test_what_is_not_here_is_named_at_once_without_a_request_to_the_hub(tmp_path):
    """Online (HF_HUB_OFFLINE unset) with the Hub out of reach, as a fresh machine without network: the files and
    folders that are not here, all of them, in one line (the tokenizer's folder, in a folder that is here); a name
    that may be a Hub id is said to be taken for one. The Hub (HF_ENDPOINT) is a port that listens and never answers:
    any request would connect to it."""
    code = "import sys\nfrom gmlp.tasks.run_mlm import main\nsys.exit(main())"
    (tmp_path / "tokenizers").mkdir()
    arguments = ["--model_name_or_path", "some-user/gmlp-mlm", "--tokenizer_name", "tokenizers/tok"]
    arguments += ["--train_file", "train.txt", "--validation_file", "valid.txt", "--do_train", "--do_eval"]
    arguments += ["--output_dir", "out"]
    with socket.create_server(("127.0.0.1", 0)) as hub:
        hub_env = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{hub.getsockname()[1]}"}
        hub_env |= {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_ETAG_TIMEOUT": "1", "HF_HUB_DOWNLOAD_TIMEOUT": "1"}
        result = python(tmp_path, "-c", code, *arguments, env=hub_env)
        hub.setblocking(False)
        with pytest.raises(BlockingIOError):  # no connection waits to be accepted
            hub.accept()
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        "error: --tokenizer_name tokenizers/tok: no such folder; --train_file train.txt: no such file; --validation_file valid.txt: no such file. (--model_name_or_path some-user/gmlp-mlm: not a folder here either, so taken for a Hub id.)"
    ]
