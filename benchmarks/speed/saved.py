"""What autograd saves for the backward pass in a training step, tensor by tensor, grouped per block: gMLP and aMLP
against BERT (SDPA) of equal parameter count (the memory section's 12-layer encoders, batch 1, n = `--saved-length`),
and with `--baseline REF` gMLP at that git revision.

Every tensor that `torch.autograd.graph.saved_tensors_hooks` sees packed is recorded with the module that was running
(by its name in the model), the operation that produced it (its `grad_fn`; a leaf has none), its shape, dtype and
the bytes of its storage. A storage is counted once, at its first saved tensor (views of one tensor, such as the two
halves of the split gate, share it); the model's parameters are resident anyway and are not counted.
"""

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from ..baseline import label
from ..common import table
from .models import SMALL, encoder

MODELS = ("gmlp", "amlp", "BERT (sdpa)")
# Backward nodes of views: the tensor's data was made by the operation before them.
VIEWS = {"View", "UnsafeView", "Split", "SplitWithSizes", "Unsqueeze", "Squeeze", "Transpose", "T", "Permute"}
VIEWS |= {
    "Expand",
    "Select",
    "Slice",
    "AsStrided",
    "Reshape",
    "ReshapeAlias",
    "Alias",
    "Unflatten",
    "Flatten",
    "Chunk",
}


def producer(tensor: torch.Tensor) -> str:
    """The operation that made `tensor`'s data, by its backward node's name (`NativeLayerNormBackward0` ->
    NativeLayerNorm), looking through views; tensors outside autograd's graph (inputs, indices, masks, a
    normalisation's statistics) have none."""
    node, viewed = tensor.grad_fn, False
    while node is not None:
        name = node.name().removesuffix("Backward0").removesuffix("Backward1")
        if name not in VIEWS:
            return name + (", viewed" if viewed else "")
        viewed = True
        node = node.next_functions[0][0] if node.next_functions else None
    return "(outside autograd's graph)"


def account(model: torch.nn.Module, input_ids: torch.Tensor) -> list[dict]:
    """Every tensor saved in one forward pass of `model` (an encoder) in training mode, in order; a block is a
    `GradientCheckpointingLayer` (Transformers' class of the repeated layers)."""
    running: list[str] = []
    names = {module: name for name, module in model.named_modules()}

    def enter(module, _) -> None:
        running.append(names[module])

    def leave(module, _, __) -> None:  # a forward hook's return value would replace the module's output
        running.pop()

    hooks = [
        hook for m in model.modules() for hook in (m.register_forward_pre_hook(enter), m.register_forward_hook(leave))
    ]
    resident = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    saved = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer in resident:
            return tensor
        block = next(
            (n for n in reversed(running) if isinstance(model.get_submodule(n), GradientCheckpointingLayer)), ""
        )
        module = running[-1] if running else ""
        saved.append(
            {
                "block": block or "(outside the blocks)",
                "module": module.removeprefix(block).removeprefix(".") or type(model.get_submodule(module)).__name__,
                "op": producer(tensor),
                "shape": list(tensor.shape),
                "dtype": str(tensor.dtype).removeprefix("torch."),
                "bytes": 0 if pointer in seen else storage.nbytes(),
            }
        )
        seen.add(pointer)
        return tensor

    model.train()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            model(input_ids=input_ids).last_hidden_state.mean()
    finally:
        for hook in hooks:
            hook.remove()
    return saved


def measure(args) -> dict:
    length = args.saved_length
    device = torch.device(args.device)
    input_ids = torch.randint(5, SMALL["vocab_size"], (1, length), device=device)
    refs = (None, args.baseline) if args.baseline else (None,)
    cases = [(name, ref) for name in MODELS for ref in (refs if name in ("gmlp", "amlp") else (None,))]
    results = {"length": length, "batch_size": 1, "models": {}}
    for name, ref in cases:
        saved = account(encoder(name, length, ref=ref).to(device), input_ids)
        blocks = {}
        for entry in saved:
            blocks[entry["block"]] = blocks.get(entry["block"], 0) + entry["bytes"]
        results["models"][label(name, ref)] = {"tensors": saved, "bytes_by_block": blocks}
    return results


def first_block(model: dict) -> str:
    return next(block for block in model["bytes_by_block"] if not block.startswith("("))


def render(result: dict) -> dict[str, list[str]]:
    """A summary per model, then each model's first block tensor by tensor."""
    length, mib = result["length"], 2**20
    summary = []
    for name, model in result["models"].items():
        in_blocks = [b for block, b in model["bytes_by_block"].items() if not block.startswith("(")]
        outside = sum(b for block, b in model["bytes_by_block"].items() if block.startswith("("))
        summary.append(
            [
                name,
                len(in_blocks),
                f"{in_blocks[0] / mib:.1f}",
                f"{in_blocks[0] / length / 1024:.1f}",
                f"{sum(in_blocks) / mib:.0f}",
                f"{outside / mib:.1f}",
                f"{(sum(in_blocks) + outside) / mib:.0f}",
            ]
        )
    headers = ["model", "blocks", "saved per block (MiB)", "per token per block (KiB)", "all blocks (MiB)"]
    parts = {
        "summary": [
            f"### What autograd saves for the backward pass, batch {result['batch_size']} x {length} tokens",
            "",
            *table([*headers, "outside the blocks (MiB)", "total (MiB)"], summary),
        ]
    }
    for name, model in result["models"].items():
        block = first_block(model)
        body = [
            [
                entry["module"],
                entry["op"],
                " x ".join(map(str, entry["shape"])),
                entry["dtype"],
                f"{entry['bytes'] / 1024:.0f}" if entry["bytes"] else "(its storage counted above)",
            ]
            for entry in model["tensors"]
            if entry["block"] == block
        ]
        parts[f"block {name}"] = [
            f"{name}, block `{block}`, each saved tensor:",
            "",
            *table(["module", "made by", "shape", "dtype", "KiB"], body),
        ]
    return parts
