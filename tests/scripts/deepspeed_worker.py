"""ZeRO-3 loading on the CPU: the work of one process under `torchrun --nproc_per_node 2` (gloo), for
tests/scripts/test_deepspeed.py.

Under a ZeRO-3 config (an `HfDeepSpeedConfig`, which the Trainer's arguments also create), Transformers builds every
model partitioned among the processes (`deepspeed.zero.Init`):

- `from_pretrained(SAVED)`: which parameters are not partitioned, the spatial weights (W and b of every block) and the
  logits on the input ids saved (torch.save) as INPUTS, gathered from the partitions;
- `from_config` of the tiny gMLP (Toeplitz and dense W) and aMLP: the spatial weights, gathered.

The first process saves them (torch.save) as OUTPUT; the test, not this file, asserts.

Usage: torchrun --nproc_per_node 2 tests/scripts/deepspeed_worker.py SAVED INPUTS OUTPUT
"""

import sys
from pathlib import Path

import deepspeed
import torch
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
from helpers import tiny_text_config
from transformers import AutoModelForMaskedLM
from transformers.integrations import HfDeepSpeedConfig

import gmlp  # noqa: F401  (registers the gMLP classes with the Auto classes)

# Every parameter partitioned, however small (a threshold > 0 keeps the small ones whole on every process).
ZERO3 = {
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    "train_micro_batch_size_per_gpu": 1,
}
CONFIGS = {
    "gmlp": {},
    "gmlp-dense": {"spatial_weight_type": "dense"},
    "amlp": {"tiny_attention_size": 8},
}


def spatial_weights(model) -> dict[str, torch.Tensor]:
    """W and b of every block, gathered from the processes' partitions."""
    weights = {name: weight for name, weight in model.named_parameters() if ".spatial_proj." in name}
    with deepspeed.zero.GatheredParameters(list(weights.values())):
        return {name: weight.detach().clone() for name, weight in weights.items()}


def whole(model) -> list[str]:
    """The parameters that are not partitioned: whole on this process, or not DeepSpeed's."""
    return [
        name
        for name, weight in model.named_parameters()
        if getattr(weight, "ds_status", None) is not ZeroParamStatus.NOT_AVAILABLE or weight.numel() > 0
    ]


def logits(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The model's logits, its weights gathered for the forward pass."""
    with deepspeed.zero.GatheredParameters(list(model.parameters())), torch.no_grad():
        return model.eval()(input_ids).logits


def main(saved: Path, inputs: Path, output: Path) -> None:
    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    zero3 = HfDeepSpeedConfig(ZERO3)  # Transformers builds models under ZeRO-3 while this object lives
    torch.manual_seed(0)
    loaded = AutoModelForMaskedLM.from_pretrained(saved)
    results = {
        "whole": whole(loaded),
        "spatial": spatial_weights(loaded),
        "logits": logits(loaded, torch.load(inputs)),
        "from_config": {
            name: spatial_weights(AutoModelForMaskedLM.from_config(tiny_text_config(changes)))
            for name, changes in CONFIGS.items()
        },
    }
    del zero3
    if deepspeed.comm.get_rank() == 0:
        torch.save(results, output)
    deepspeed.comm.barrier()


if __name__ == "__main__":
    main(*map(Path, sys.argv[1:4]))
