"""Several processes and the devices they run on: torchrun's two CPU processes train one run; a run that `accelerate
launch` asked for several processes but started alone says so (and docs/scripts.md's command starts them); FSDP on
the CPU is refused rather than silently run as DDP; --bf16 runs on a CPU; --torch_compile pads every example to one
length and compiles each block once. (Two nodes: test_nodes.py; the evaluation's loss over two processes:
test_evaluation.py; DeepSpeed: test_deepspeed.py.)"""

import json
import logging
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import free_port, python, rotated_lines, tiny_run, write
from script_runs import COMMON, csv_file, mlm_run
from transformers import Trainer, TrainingArguments

from gmlp import GMLPForMaskedLM
from gmlp.tasks import run_glue, run_mlm, run_squad, setup
from gmlp.tasks.arguments import ModelArguments, parse_arguments
from gmlp.tasks.errors import ScriptError

ROOT = Path(__file__).parents[2]
# Each process's start-up line ("Process rank: ..., world size: ...") is logged at INFO.
VERBOSE = ["--log_level", "info", "--log_level_replica", "info"]


@pytest.mark.e2e
def test_two_processes_with_torchrun_on_cpu(tmp_path):
    train = write(tmp_path / "train.txt", "\n".join(rotated_lines(60)) + "\n")
    arguments = tiny_run(tmp_path / "out", overrides={"vocab_size": 300}, train_file=train, validation_file=train)
    arguments += [
        *[
            "--do_train",
            "--do_eval",
            "--max_seq_length",
            "32",
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "4",
        ],
        *VERBOSE,
    ]
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", free_port()]
    result = python(tmp_path, *launch, ROOT / "run_mlm.py", *arguments)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "world size: 2" in result.stdout + result.stderr
    output_dir = tmp_path / "out"
    assert (output_dir / "model.safetensors").is_file()
    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["train_batch_size"] == 4  # 4 sequences on each of the 2 processes
    # The loss averages over both processes' labelled tokens (not their sum): an untrained model's is near ln(V).
    vocab_size = json.loads((output_dir / "config.json").read_text())["vocab_size"]
    train_loss = json.loads((output_dir / "train_results.json").read_text())["train_loss"]
    assert 0.7 * math.log(vocab_size) < train_loss < 1.3 * math.log(vocab_size)
    assert json.loads((output_dir / "eval_results.json").read_text())["eval_loss"] > 0


# ---- accelerate launch ----------------------------------------------------------------------------------------------
def accelerate_environment(launch_arguments: list[str]) -> dict[str, str]:
    """The environment that `accelerate launch` gives a script it starts with its simple (one-process) launcher."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    args, _, _ = _validate_launch_command(launch_command_parser().parse_args([*launch_arguments, "run_glue.py"]))
    return prepare_simple_launcher_cmd_env(args)[1]


def default_config(tmp_path) -> str:
    """The config file that `accelerate config default` writes."""
    from accelerate.commands.config.default import write_basic_config

    write_basic_config(save_location=str(tmp_path / "accelerate.json"))
    return str(tmp_path / "accelerate.json")


LAUNCHES = {
    # name: `accelerate launch`'s arguments from tmp_path, which ask for two processes and start one
    "--num_processes 2 --cpu": lambda tmp: ["--num_processes", "2", "--cpu"],
    "a default config, --num_processes 2": lambda tmp: ["--config_file", default_config(tmp), "--num_processes", "2"],
}
ONE_PROCESS = "accelerate launch was asked for several processes but started one (world size 1): with --cpu, or a config whose distributed_type is not MULTI_GPU, it runs a single process. On the CPU, start N processes with `accelerate launch --multi_gpu --num_processes N` (gloo) or `torchrun --nproc_per_node N`."


@pytest.mark.parametrize("case", sorted(LAUNCHES))
def test_a_run_that_accelerate_asked_for_two_processes_but_started_alone_says_so(case, tmp_path, monkeypatch, caplog):
    for name, value in accelerate_environment(LAUNCHES[case](tmp_path)).items():
        monkeypatch.setenv(name, value)
    (training_args,) = parse_arguments(TrainingArguments, argv=["--output_dir", str(tmp_path / "out"), "--do_train"])
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        setup.start_logging(training_args)
    said = [record.getMessage() for record in caplog.records if "accelerate launch was asked" in record.getMessage()]
    assert said == [ONE_PROCESS]


@pytest.mark.e2e
def test_the_docs_accelerate_command_starts_two_processes_on_the_cpu(tokenizer_dir, tmp_path):
    command = re.search(
        r"accelerate launch (--multi_gpu --num_processes 2) run_glue\.py", (ROOT / "docs" / "scripts.md").read_text()
    )
    assert command, "docs/scripts.md's accelerate command for several CPU processes is gone"
    data = csv_file(tmp_path / "train.csv", zip(rotated_lines(8), ["no", "yes"] * 4))
    options = {"train_file": data, "do_train": True, "max_steps": 2, "max_seq_length": 16}
    arguments = tiny_run(tmp_path / "out", *COMMON, *VERBOSE, tokenizer=tokenizer_dir, **options)
    script = [str(ROOT / "run_glue.py"), *arguments]
    bin_dir = Path(sys.executable).parent
    launch = [
        str(bin_dir / "accelerate"),
        "launch",
        *command.group(1).split(),
        "--main_process_port",
        str(free_port()),
    ]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env["HF_HOME"] = str(tmp_path / "hf")  # nor the user's accelerate config
    result = subprocess.run(
        [*launch, *script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert sorted(re.findall(r"Process rank: (\d), device: cpu\S*, world size: 2", output)) == ["0", "1"]
    assert "accelerate launch was asked" not in output


# ---- engines and devices ----------------------------------------------------------------------------------------
FSDP = ["--fsdp", "full_shard auto_wrap", "--fsdp_config", '{"transformer_layer_cls_to_wrap": ["GMLPLayer"]}']


def test_fsdp_on_the_cpu_is_refused_rather_than_silently_run_as_ddp(tokenizer_dir, tmp_path):
    """Accelerate enables FSDP only for accelerator runs; on the CPU the Trainer would train plain DDP under the flag
    (seen with torchrun, 2 processes), so the scripts refuse it with the reason."""
    with pytest.raises(ScriptError, match="--fsdp needs accelerators.*silently be plain data-parallel"):
        run_mlm.run(mlm_run(tokenizer_dir, tmp_path, *FSDP))
    assert not (tmp_path / "out").exists()


def test_bf16_runs_on_the_cpu_without_use_cpu(tokenizer_dir, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        metrics = run_mlm.run(mlm_run(tokenizer_dir, tmp_path, "--do_eval", "--bf16"))
    assert any("--use_cpu added" in record.getMessage() for record in caplog.records)
    assert metrics["eval_loss"] > 0
    assert json.loads((tmp_path / "out" / "trainer_state.json").read_text())["global_step"] == 2


@pytest.mark.parametrize("script", [run_glue, run_squad, run_mlm], ids=["run_glue", "run_squad", "run_mlm"])
def test_torch_compile_pads_every_example_to_one_length(script, tmp_path, caplog, monkeypatch):
    """Padded to each batch's longest example, compiled models recompile at nearly every batch; with --torch_compile
    the scripts pad to --max_seq_length (and say so), without it they keep dynamic padding."""
    monkeypatch.setenv(setup.REGIONAL, "false")  # restored after the test
    types = (ModelArguments, script.DataTrainingArguments, TrainingArguments)
    data = {run_glue: ["--task_name", "sst2"], run_squad: ["--dataset_name", "rajpurkar/squad"], run_mlm: []}[script]
    common = ["--output_dir", str(tmp_path / "out"), "--do_train", "--report_to", "none", *data]
    for argv in (common, [*common, "--torch_compile"]):
        _, data_args, training_args = parse_arguments(*types, argv=argv)
        with caplog.at_level(logging.WARNING):
            setup.prepare_run(training_args, data_args)
        assert data_args.pad_to_max_length is training_args.torch_compile
    assert "--pad_to_max_length added" in caplog.text


@pytest.mark.parametrize("asked", [None, "false"])
def test_torch_compile_compiles_each_block_once(asked, tmp_path, monkeypatch, tiny_config):
    """The whole model compiled unrolls every block into one graph (gMLP-base's 48 took minutes on an H200); with
    --torch_compile the scripts have Accelerate compile each block, the head and the embeddings on their own, unless
    the user set Accelerate's switch for it."""
    monkeypatch.setenv(setup.REGIONAL, "false")  # records its absence, restored after the test
    if asked is None:
        monkeypatch.delenv(setup.REGIONAL)
    types = (ModelArguments, run_mlm.DataTrainingArguments, TrainingArguments)
    argv = ["--output_dir", str(tmp_path / "out"), "--do_train", "--report_to", "none", "--torch_compile"]
    _, data_args, training_args = parse_arguments(*types, argv=argv)
    setup.prepare_run(training_args, data_args)
    model = GMLPForMaskedLM(tiny_config())
    prepared = Trainer(model=model, args=training_args).accelerator.prepare_model(model)  # compiling is lazy
    compiled = torch._dynamo.eval_frame.OptimizedModule
    if asked is None:
        assert not isinstance(prepared, compiled)
        assert all(isinstance(layer, compiled) for layer in prepared.gmlp.encoder.layer)
        assert isinstance(prepared.lm_head, compiled)
    else:
        assert isinstance(prepared, compiled) and not isinstance(prepared._orig_mod.gmlp.encoder.layer[0], compiled)
