"""Two nodes emulated on one machine: two `torchrun --nnodes 2 --nproc_per_node 1` processes (gloo, CPU), node ranks 0
and 1, each in its own working directory, as separate disks are. `--save_on_each_node` is refused on both nodes at
start, with one `error: ...` line on each (Transformers saves the model from the first process only, so the second
node's checkpoints would have no weights); with one shared output folder, a resume on both nodes continues the
checkpoint and logs the uninterrupted run's losses, and `--overwrite_output_dir` leaves nothing of the earlier run."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import child_env, free_port, rotated_lines, tiny_run, write

ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.e2e


def on_two_nodes(tmp_path: Path, arguments: list[str]) -> list[subprocess.CompletedProcess]:
    """run_mlm.py with `arguments` on two emulated nodes, node i working in `tmp_path / f"node{i}"` (where each has its
    own copy of the training text): each node's finished process."""
    port = str(free_port())
    nodes = []
    for rank in (0, 1):
        folder = tmp_path / f"node{rank}"
        write(folder / "train.txt", "\n".join(rotated_lines(40)) + "\n")
        launch = ["--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(rank)]
        launch += ["--master_addr", "127.0.0.1", "--master_port", port]
        command = [sys.executable, "-m", "torch.distributed.run", *launch, str(ROOT / "run_mlm.py"), *arguments]
        nodes.append(
            subprocess.Popen(command, cwd=folder, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    return [
        subprocess.CompletedProcess(node.args, node.wait(timeout=600), node.stdout.read().decode()) for node in nodes
    ]


def mlm(tokenizer_dir, output_dir, *extra, **options) -> list[str]:
    """A tiny run_mlm.py run on each node's train.txt (dropout on), a checkpoint every 2 steps, every loss logged."""
    options = {"max_seq_length": 16, "per_device_train_batch_size": 4, "logging_steps": 1, **options}
    return tiny_run(
        output_dir,
        *extra,
        tokenizer=tokenizer_dir,
        overrides={"vocab_size": 120},
        train_file="train.txt",
        do_train=True,
        save_strategy="steps",
        save_steps=2,
        **options,
    )


def logged_losses(output_dir: Path) -> dict[int, float]:
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


def test_save_on_each_node_is_refused_on_both_nodes_before_anything_is_written(tokenizer_dir, tmp_path):
    nodes = on_two_nodes(tmp_path, mlm(tokenizer_dir, "out", "--save_on_each_node", max_steps=2))
    message = "error: --save_on_each_node on 2 nodes: Transformers saves the model's weights and config from the first process"
    for rank, node in enumerate(nodes):
        assert node.returncode != 0, node.stdout[-3000:]
        # One line of its own on each node, no traceback of the scripts' code (torchrun adds a report of its own).
        errors = [line for line in node.stdout.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and errors[0].startswith(message), node.stdout[-3000:]
        assert "give every node the same --output_dir on a shared folder" in errors[0]
        assert "gmlp/tasks" not in node.stdout
        assert not list((tmp_path / f"node{rank}").glob("out/checkpoint-*"))


def test_on_a_shared_folder_both_nodes_resume_the_run_and_overwriting_leaves_nothing_of_it(tokenizer_dir, tmp_path):
    shared = tmp_path / "shared"
    verbose = ["--log_level", "info", "--log_level_replica", "info"]  # the start-up line, at INFO, on each node
    for node in on_two_nodes(tmp_path, mlm(tokenizer_dir, shared / "whole", *verbose, max_steps=4)):
        assert node.returncode == 0, node.stdout[-3000:]
    assert "world size: 2" in node.stdout
    expected = logged_losses(shared / "whole")
    assert sorted(expected) == [1, 2, 3, 4]

    # Killed after checkpoint-2 (its folder is what the killed run left), resumed on both nodes.
    resumed = shared / "resumed"
    shutil.copytree(shared / "whole" / "checkpoint-2", resumed / "checkpoint-2")
    nodes = on_two_nodes(tmp_path, mlm(tokenizer_dir, resumed, max_steps=4, resume_from_checkpoint=resumed))
    for node in nodes:
        assert node.returncode == 0, node.stdout[-3000:]
    assert f"Resuming from {resumed / 'checkpoint-2'}" in nodes[0].stdout
    assert logged_losses(resumed) == expected

    # A fresh, shorter run over it: the earlier run's checkpoints and results are gone, its own are there.
    nodes = on_two_nodes(tmp_path, mlm(tokenizer_dir, resumed, "--overwrite_output_dir", max_steps=2))
    for node in nodes:
        assert node.returncode == 0, node.stdout[-3000:]
    assert (
        "removed the earlier run's all_results.json, train_results.json, checkpoint-2, checkpoint-4" in nodes[0].stdout
    )
    assert sorted(path.name for path in resumed.glob("checkpoint-*")) == ["checkpoint-2"]
    assert json.loads((resumed / "trainer_state.json").read_text())["global_step"] == 2
