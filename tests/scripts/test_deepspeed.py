"""DeepSpeed with the stock Trainer, on the CPU: run_mlm.py trains under docs/deepspeed/zero3.json on 2 processes
(torchrun, gloo) and saves a model whose logits are those of the ZeRO checkpoint's fp32 weights (the model at the end
of training); resumed from its first checkpoint, it ends with the uninterrupted run's weights; Transformers' ZeRO-3
loading (deepspeed_worker.py) partitions every parameter, leaves the spatial weights as saved and initialises them
from a config as the paper says. Where the Trainer would not run DeepSpeed, the scripts refuse --deepspeed with the
reason."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import TINY_TEXT, free_port, python, rotated_lines, tiny_run, write
from safetensors.torch import load_file
from script_runs import COMMON, mlm_run
from transformers import TrainingArguments

from gmlp import GMLPConfig, GMLPForMaskedLM
from gmlp.tasks import run_mlm
from gmlp.tasks.checkpoints import checkpoint_problem, resolve_checkpoint
from gmlp.tasks.errors import ScriptError

pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (the dev extra has it)")

ROOT = Path(__file__).resolve().parents[2]
ZERO3 = ROOT / "docs" / "deepspeed" / "zero3.json"
STEPS = 3
TWO_PROCESSES = ["-m", "torch.distributed.run", "--nproc_per_node", "2"]


def zero3_arguments(output_dir: Path, tokenizer_dir: str, *extra) -> list[str]:
    """run_mlm.py under ZeRO-3 for STEPS steps, a checkpoint at each; W drawn wide (spatial_init_eps 16), so that the
    spatial weights count in the logits."""
    train = write(output_dir.parent / "train.txt", "\n".join(rotated_lines(40)) + "\n")
    return tiny_run(
        output_dir,
        *COMMON,
        *["--deepspeed", ZERO3, "--save_strategy", "steps", "--save_steps", "1", *extra],
        tokenizer=tokenizer_dir,
        overrides={"vocab_size": 120, "spatial_init_eps": 16.0},
        train_file=train,
        do_train=True,
        max_steps=STEPS,
        max_seq_length=16,
    )


def run_on_two_processes(work: Path, arguments: list[str]) -> str:
    """run_mlm.py with `arguments` on 2 CPU processes (torchrun, gloo): its output."""
    result = python(work, *TWO_PROCESSES, "--master_port", free_port(), ROOT / "run_mlm.py", *arguments)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def zero3_run(tokenizer_dir, tmp_path_factory) -> Path:
    """The output folder of run_mlm.py trained under ZeRO-3 on 2 CPU processes."""
    work = tmp_path_factory.mktemp("zero3")
    run_on_two_processes(work, zero3_arguments(work / "out", tokenizer_dir))
    return work / "out"


@pytest.fixture(scope="module")
def input_ids(tmp_path_factory) -> Path:
    """Two rows of 16 ids within the run's vocabulary (the tokenizer's 117), saved (torch.save)."""
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    path = tmp_path_factory.mktemp("inputs") / "inputs.pt"
    torch.save(ids, path)
    return path


@pytest.fixture(scope="module")
def zero3_loads(zero3_run, input_ids, tmp_path_factory) -> dict:
    """What deepspeed_worker.py gathers from the models that Transformers builds under ZeRO-3 on 2 processes."""
    output = tmp_path_factory.mktemp("zero3_loads") / "loads.pt"
    worker = Path(__file__).with_name("deepspeed_worker.py")
    launch = [*TWO_PROCESSES, "--master_port", free_port()]
    result = python(ROOT, *launch, worker, zero3_run, input_ids, output, paths=(ROOT / "tests",))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return torch.load(output)


def plain_logits(model, input_ids: Path) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(torch.load(input_ids)).logits


@pytest.mark.e2e
def test_zero3_on_two_cpu_processes_saves_the_model_it_trained(zero3_run, input_ids):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    checkpoint = zero3_run / f"checkpoint-{STEPS}"
    # DeepSpeed ran ZeRO-3 (each process saved its partition of the weights), not plain data parallelism.
    assert sorted(path.name for path in (checkpoint / f"global_step{STEPS}").glob("*model_states.pt")) == [
        "zero_pp_rank_0_mp_rank_00_model_states.pt",
        "zero_pp_rank_1_mp_rank_00_model_states.pt",
    ]
    # The model at the end of training: the optimizer's fp32 weights, gathered from the two partitions.
    trained = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint))
    saved = GMLPForMaskedLM.from_pretrained(zero3_run)  # without DeepSpeed
    expected = GMLPForMaskedLM(saved.config)
    expected.load_state_dict(trained, strict=False)  # the decoder is tied to the word embeddings
    expected.tie_weights()
    assert set(expected.state_dict()) == set(trained) | {"lm_head.decoder.weight"}
    torch.testing.assert_close(plain_logits(saved, input_ids), plain_logits(expected, input_ids), rtol=0, atol=0)
    # and the folder's final model is the last checkpoint's
    final, last = load_file(zero3_run / "model.safetensors"), load_file(checkpoint / "model.safetensors")
    assert final.keys() == last.keys() and all(torch.equal(final[name], last[name]) for name in final)


@pytest.mark.e2e
def test_a_zero3_run_resumed_from_its_first_checkpoint_ends_with_the_uninterrupted_runs_weights(
    zero3_run, tokenizer_dir, tmp_path
):
    shutil.copytree(zero3_run / "checkpoint-1", tmp_path / "out" / "checkpoint-1")
    output = run_on_two_processes(
        tmp_path, zero3_arguments(tmp_path / "out", tokenizer_dir, "--resume_from_checkpoint", tmp_path / "out")
    )
    assert f"Resuming from {tmp_path / 'out' / 'checkpoint-1'}" in output
    resumed, uninterrupted = (
        load_file(tmp_path / "out" / "model.safetensors"),
        load_file(zero3_run / "model.safetensors"),
    )
    first = load_file(zero3_run / "checkpoint-1" / "model.safetensors")
    assert resumed.keys() == uninterrupted.keys()
    for name, weight in uninterrupted.items():
        torch.testing.assert_close(resumed[name], weight, rtol=0, atol=0, msg=name)
    assert any(not torch.equal(first[name], weight) for name, weight in uninterrupted.items())  # it trained on


@pytest.mark.e2e
def test_zero3_from_pretrained_partitions_every_parameter_and_keeps_the_spatial_weights(
    zero3_run, zero3_loads, input_ids
):
    assert zero3_loads["whole"] == []
    saved = load_file(zero3_run / "model.safetensors")
    spatial = {name: weight for name, weight in saved.items() if ".spatial_proj." in name}
    assert len(spatial) == 2 * 2  # W and b of each block
    assert zero3_loads["spatial"].keys() == spatial.keys()
    for name, weight in spatial.items():
        torch.testing.assert_close(zero3_loads["spatial"][name], weight, rtol=0, atol=0, msg=name)
    # trained, b has moved off the init's 1 (which a re-initialised b would be)
    assert all(not torch.all(weight == 1) for name, weight in spatial.items() if name.endswith("bias"))
    plain = plain_logits(GMLPForMaskedLM.from_pretrained(zero3_run), input_ids)
    torch.testing.assert_close(zero3_loads["logits"], plain, rtol=0, atol=0)


@pytest.mark.e2e
@pytest.mark.parametrize("variant", ["gmlp", "gmlp-dense", "amlp"])
def test_zero3_from_config_initialises_the_spatial_weights_as_the_paper_says(zero3_loads, variant):
    """Section 2.1: W uniform in +-spatial_init_eps / n, b = 1; drawn on the gathered weights, not on the empty
    partitions that ZeRO-3 leaves each process."""
    config = GMLPConfig(**TINY_TEXT)
    bound = config.spatial_init_eps / config.max_position_embeddings
    spatial = zero3_loads["from_config"][variant]
    weights = [weight for name, weight in sorted(spatial.items()) if name.endswith("weight")]
    assert len(weights) == config.num_hidden_layers
    for weight in weights:
        assert weight.abs().max() <= bound
        assert weight.min() < -bound / 2 and weight.max() > bound / 2  # spread over the interval, not W = 0
    assert not torch.equal(weights[0], weights[1])  # each block draws its own
    for name, bias in spatial.items():
        if name.endswith("bias"):
            assert torch.all(bias == 1), name


# ---- where the Trainer would not run DeepSpeed -----------------------------------------------------------------
ZERO2 = '{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}'


def test_deepspeed_under_accelerates_cpu_switch_is_refused(tokenizer_dir, tmp_path, monkeypatch):
    """`accelerate launch --cpu` (ACCELERATE_USE_CPU) makes Accelerate drop DeepSpeed: the run would train without."""
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    with pytest.raises(ScriptError, match=r"--deepspeed with Accelerate's --cpu .* silently train without it"):
        run_mlm.run(mlm_run(tokenizer_dir, tmp_path, "--deepspeed", ZERO2))
    assert not (tmp_path / "out").exists()


def test_deepspeed_without_a_launcher_is_refused(tokenizer_dir, tmp_path, monkeypatch):
    """Started alone, DeepSpeed looks for its processes through MPI (mpi4py)."""
    if importlib.util.find_spec("mpi4py") is not None:
        pytest.skip("mpi4py is installed: DeepSpeed finds a lone process through MPI")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):  # what torchrun sets
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ScriptError, match=r"--deepspeed needs a launcher: .* `torchrun --nproc_per_node N`"):
        run_mlm.run(mlm_run(tokenizer_dir, tmp_path, "--deepspeed", ZERO2))
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_saved_by_deepspeed_counts_as_complete_once_deepspeed_names_it_latest(tmp_path):
    """DeepSpeed saves the weights, optimizer and scheduler in its own folder (`global_stepN`, one file of each per
    process under ZeRO-3), which its `latest` file names once they are written; the Trainer writes no optimizer.pt.
    A file of them cut short is still caught."""
    folder = tmp_path / "checkpoint-3"
    state = folder / "global_step3"
    state.mkdir(parents=True)
    for rank in (0, 1):
        torch.save({"module": None}, state / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
        torch.save({"optimizer_state_dict": {}}, state / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    write(folder / "trainer_state.json", json.dumps({"global_step": 3}))
    assert "it has no model weights" in checkpoint_problem(folder)  # DeepSpeed was killed before `latest`
    write(folder / "latest", "global_step3")
    assert checkpoint_problem(folder) is None
    training_args = TrainingArguments(output_dir=str(tmp_path / "out"), resume_from_checkpoint=str(tmp_path))
    assert resolve_checkpoint(training_args) == str(folder)
    cut = state / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    cut.write_bytes(cut.read_bytes()[:10])
    assert checkpoint_problem(folder) == f"{cut} is truncated or corrupt"
