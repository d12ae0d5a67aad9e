"""FSDP2 on the CPU: the work of one process under `torchrun --nproc_per_node 2` (gloo), for tests/ecosystem/test_fsdp.py.

Each process trains its half of every global batch under PyTorch's `fully_shard`, in two groupings:

- `layers`: `fully_shard` on each `GMLPLayer`, then on the root (the plain FSDP2 recipe);
- `accelerate` (and `accelerate_default`): the groups that Accelerate's FSDP2 preparation makes, by calling its own
  `fsdp2_prepare_model` as the Trainer's `--fsdp` does on GPUs, with the wrap class of docs/scripts.md's command
  (`GMLPLayer`) or, for `accelerate_default`, the model's `_no_split_modules`. BERT's masked LM is prepared the
  same way as a control (it fails there, its decoder bias being tied to another module's parameter).

It writes what the test compares with the unsharded model (losses, gathered weights) under the output folder, saves
the `layers` model with `save_pretrained` as the Trainer does (its gathered weights, from rank 0), and saves it and
its optimizer with `torch.distributed.checkpoint`, then loads them into a fresh sharded model and optimizer. The
test, not this file, asserts.

Usage: torchrun --nproc_per_node 2 tests/ecosystem/fsdp_worker.py OUTPUT_DIR
"""

import json
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from helpers import TINY_TEXT
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard
from transformers import BertConfig, BertForMaskedLM

from gmlp import GMLPConfig, GMLPForMaskedLM
from gmlp.modeling_gmlp import GMLPLayer

# The tests' tiny text sizes; aMLP adds the tiny attention.
TINY = TINY_TEXT
VARIANTS = {"gmlp": {}, "amlp": {"tiny_attention_size": 8}}
WORLD_SIZE = 2
STEPS = 3
GLOBAL_BATCH = 4
LEARNING_RATE = 1e-2


def build(variant: str, seed: int = 0) -> torch.nn.Module:
    """A tiny masked LM, initialised from `seed`: gMLP, aMLP or (the control) BERT."""
    torch.manual_seed(seed)
    if variant == "bert":
        config = BertConfig(
            vocab_size=TINY["vocab_size"],
            hidden_size=TINY["hidden_size"],
            intermediate_size=TINY["intermediate_size"],
            num_hidden_layers=TINY["num_hidden_layers"],
            num_attention_heads=2,
            max_position_embeddings=TINY["max_position_embeddings"],
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        return BertForMaskedLM(config)
    return GMLPForMaskedLM(GMLPConfig(**TINY, **VARIANTS[variant]))


def global_batches(steps: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same `steps` global batches (input ids, labels: 30% of positions and the first) in every process."""
    generator = torch.Generator().manual_seed(1234)
    batches = []
    for _ in range(steps):
        shape = (GLOBAL_BATCH, TINY["max_position_embeddings"])
        input_ids = torch.randint(0, TINY["vocab_size"], shape, generator=generator)
        labels = torch.where(torch.rand(shape, generator=generator) < 0.3, input_ids, -100)
        labels[:, 0] = input_ids[:, 0]
        batches.append((input_ids, labels))
    return batches


def train(model, optimizer, ranks, batches) -> list[float]:
    """AdamW steps over `batches`; this process computes the rows of `ranks` (rank r has the r-th half).

    Sharded, `ranks` is the process's own rank and FSDP averages the gradients over the processes; unsharded, `ranks`
    is every rank and the loss is the mean of theirs, so both take the same steps. Returns each step's loss, the mean
    over the ranks."""
    losses = []
    rows = GLOBAL_BATCH // WORLD_SIZE
    for input_ids, labels in batches:
        halves = [slice(rank * rows, (rank + 1) * rows) for rank in ranks]
        loss = sum(model(input_ids=input_ids[half], labels=labels[half]).loss for half in halves) / len(ranks)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        reported = loss.detach().clone()
        if dist.is_initialized():
            dist.all_reduce(reported)
            reported /= WORLD_SIZE
        losses.append(reported.item())
    return losses


def adamw(model) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)


def shard_layers(model) -> torch.nn.Module:
    """The plain FSDP2 recipe: each GMLPLayer its own group, the rest (embeddings, tied head) the root's."""
    for module in model.modules():
        if isinstance(module, GMLPLayer):
            fully_shard(module)
    fully_shard(model)
    return model


def shard_as_accelerate(model, layer_classes) -> torch.nn.Module:
    """Accelerate's own FSDP2 preparation (what the Trainer runs under `--fsdp` with FSDP version 2), called with a
    stand-in for the Accelerator: on the CPU Accelerate does not build an FSDP state, it trains DDP instead."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=layer_classes,
        reshard_after_forward=True,
    )
    accelerator = SimpleNamespace(
        state=SimpleNamespace(fsdp_plugin=plugin),
        torch_device_mesh=None,
        mixed_precision="no",
        is_main_process=dist.get_rank() == 0,
        device=torch.device("cpu"),
    )
    return fsdp2_prepare_model(accelerator, model)


def groups(model) -> list[list[str]]:
    """The FSDP groups, each as the sorted names of its parameters; a tied parameter is named by all its names, joined
    by " = " (e.g. the word embeddings and the decoder weight)."""
    names = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    found = []
    for module in model.modules():
        if isinstance(module, FSDPModule):
            for group in module._get_fsdp_state()._fsdp_param_groups:
                entry = sorted(" = ".join(sorted(names[id(p.sharded_param)])) for p in group.fsdp_params)
                if entry not in found:
                    found.append(entry)
    return found


def full_state(model) -> dict[str, torch.Tensor]:
    """The whole model's weights gathered on rank 0 (every process takes part)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {name: tensor.clone() for name, tensor in get_model_state_dict(model, options=options).items()}


def run_layers(variant: str, output: Path, rank: int) -> dict:
    model = shard_layers(build(variant))
    optimizer = adamw(model)
    result = {"losses": train(model, optimizer, [rank], global_batches())}
    trained = full_state(model)
    if rank == 0:  # as the Trainer saves a sharded model: the gathered weights, from the main process
        model.save_pretrained(output / f"{variant}-saved", state_dict=dict(trained))  # it empties the dict
        result["class_after_save"] = type(model).__name__

    # Sharded save (each process writes its shards), then a sharded load into a fresh model (another seed) and a
    # fresh optimizer.
    checkpoint = output / f"{variant}-checkpoint"
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=checkpoint)

    fresh = shard_layers(build(variant, seed=1))
    fresh_optimizer = adamw(fresh)
    before_load = full_state(fresh)
    model_state, optimizer_state = get_state_dict(fresh, fresh_optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=checkpoint)
    set_state_dict(fresh, fresh_optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    loaded = full_state(fresh)
    embeddings = fresh.get_input_embeddings().weight
    result["tied_after_load"] = fresh.get_output_embeddings().weight is embeddings

    # One more step from the loaded model and optimizer, and from the original ones: a resumed run continues alike.
    next_batch = global_batches(STEPS + 1)[-1:]
    result["next_loss_original"] = train(model, optimizer, [rank], next_batch)[0]
    result["next_loss_loaded"] = train(fresh, fresh_optimizer, [rank], next_batch)[0]
    if rank == 0:
        torch.save(
            {"trained": trained, "before_load": before_load, "loaded": loaded}, output / f"{variant}-weights.pt"
        )
    return result


def run_accelerate(variant: str, layer_classes, rank: int) -> dict:
    """Accelerate's grouping, then training; a failure is recorded with its message."""
    model = build(variant)
    try:
        model = shard_as_accelerate(model, layer_classes)
        return {"groups": groups(model), "losses": train(model, adamw(model), [rank], global_batches())}
    except (ValueError, TypeError, RuntimeError) as error:  # the test reads the message
        return {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}


def main(output: Path) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    assert dist.get_world_size() == WORLD_SIZE
    results = {}
    for variant in VARIANTS:
        results[f"layers/{variant}"] = run_layers(variant, output, rank)
        results[f"accelerate/{variant}"] = run_accelerate(variant, ["GMLPLayer"], rank)
        results[f"accelerate_default/{variant}"] = run_accelerate(variant, None, rank)
    results["accelerate/bert"] = run_accelerate("bert", ["BertLayer"], rank)
    if rank == 0:
        (output / "results.json").write_text(json.dumps(results, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
