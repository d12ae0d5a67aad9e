"""Pictures of the learned spatial weights W of a gMLP checkpoint (the paper's Figures 3 and 4).

Text models: for every layer, the row of W for the middle token, i.e. how much that token takes from each position
(Figure 4 shows Toeplitz-like, forward-looking, backward-looking and bidirectional filters). Vision models: for every
layer, the rows of W of a few patches reshaped to the patch grid (Figure 3: local, roughly shift-invariant filters).

    python -m gmlp.visualize CHECKPOINT_DIR --output filters.png [--layers 0,3,5] [--head 0] [--patches 27,36]

Needs matplotlib (`pip install matplotlib`).
"""

import math
import os

import numpy as np
import torch
from transformers import AutoConfig, AutoModel

import gmlp  # noqa: F401  (registers gMLP with the Auto classes)

from .tasks.errors import ArgumentParser, ScriptError, script_main


def spatial_weights(model) -> list[np.ndarray]:
    """Every layer's full spatial weight matrix, shape (heads, n, n) (Toeplitz and causal weights materialised)."""
    base = model.base_model
    n = base.config.max_position_embeddings
    with torch.no_grad():
        return [layer.sgu.spatial_proj.matrix(n).float().cpu().numpy() for layer in base.encoder.layer]


def middle_token_filters(weights: list[np.ndarray], head: int = 0) -> np.ndarray:
    """Row n // 2 of each layer's W (one head): shape (layers, n); entry j weighs position j for the middle token."""
    return np.stack([matrix[head, matrix.shape[-1] // 2] for matrix in weights])


def default_patches(grid_size: int) -> list[int]:
    """Five patches to show: the centre one and one in each quadrant, as row-major patch indices."""
    quarter, centre, three_quarters = grid_size // 4, grid_size // 2, (3 * grid_size) // 4
    rows_cols = [
        (centre, centre),
        (quarter, quarter),
        (quarter, three_quarters),
        (three_quarters, quarter),
        (three_quarters, three_quarters),
    ]
    return [row * grid_size + col for row, col in rows_cols]


def patch_filters(weights: list[np.ndarray], grid_size: int, patches: list[int], head: int = 0) -> np.ndarray:
    """The rows of W for `patches`, reshaped to the patch grid: shape (layers, len(patches), grid, grid)."""
    return np.stack([matrix[head, patches].reshape(len(patches), grid_size, grid_size) for matrix in weights])


def plot_text_filters(filters: np.ndarray, layers: list[int], output: str) -> None:
    """One small line plot per layer: the middle token's weight on each position, against relative position."""
    from matplotlib.figure import Figure

    columns = min(4, len(layers))
    rows = math.ceil(len(layers) / columns)
    figure = Figure(figsize=(3.2 * columns, 2.2 * rows), layout="constrained")
    n = filters.shape[-1]
    offsets = np.arange(n) - n // 2
    for index, layer in enumerate(layers):
        axes = figure.add_subplot(rows, columns, index + 1)
        axes.plot(offsets, filters[index], linewidth=0.9)
        axes.axvline(0, color="grey", linewidth=0.5, linestyle=":")
        axes.set_title(f"layer {layer}", fontsize=9)
        axes.tick_params(labelsize=7)
    figure.supxlabel("position relative to the middle token", fontsize=9)
    figure.supylabel("W[middle, j]", fontsize=9)
    figure.savefig(output, dpi=120)


def plot_vision_filters(filters: np.ndarray, layers: list[int], patches: list[int], output: str) -> None:
    """A grid of images, a row per layer and a column per patch; the patch itself is marked with a dot."""
    from matplotlib.figure import Figure

    grid_size = filters.shape[-1]
    figure = Figure(figsize=(1.6 * len(patches), 1.6 * len(layers)), layout="constrained")
    axes_grid = figure.subplots(len(layers), len(patches), squeeze=False)
    for row, layer in enumerate(layers):
        for column, patch in enumerate(patches):
            axes = axes_grid[row][column]
            image = filters[row, column]
            limit = float(np.abs(image).max()) or 1.0
            axes.imshow(image, cmap="RdBu_r", vmin=-limit, vmax=limit)
            axes.plot(patch % grid_size, patch // grid_size, marker=".", color="black", markersize=3)
            axes.set_xticks([])
            axes.set_yticks([])
            if column == 0:
                axes.set_ylabel(f"layer {layer}", fontsize=8)
            if row == 0:
                axes.set_title(f"patch {patch}", fontsize=8)
    figure.savefig(output, dpi=120)


def visualize(
    checkpoint: str,
    output: str,
    layers: list[int] | None = None,
    head: int = 0,
    patches: list[int] | None = None,
) -> np.ndarray:
    """Draw the spatial filters of the gMLP checkpoint directory `checkpoint` into the PNG `output`; returns the
    plotted values ((layers, n) for text models, (layers, patches, grid, grid) for vision models). Layers, a head or
    patches that the model does not have are a `ScriptError` (a `ValueError`)."""
    config = AutoConfig.from_pretrained(checkpoint)
    is_vision = config.model_type == "gmlp_vision"
    model = AutoModel.from_pretrained(checkpoint, config=config).eval()
    weights = spatial_weights(model)
    layers = list(range(len(weights))) if layers is None else layers
    bad = [layer for layer in layers if not 0 <= layer < len(weights)]
    if bad:
        raise ScriptError(f"Layers {bad} do not exist: the model has layers 0 to {len(weights) - 1}.")
    if not 0 <= head < weights[0].shape[0]:
        raise ScriptError(f"Head {head} does not exist: the model has {weights[0].shape[0]} SGU head(s).")
    weights = [weights[layer] for layer in layers]
    if is_vision:
        grid_size = config.image_size // config.patch_size
        patches = default_patches(grid_size) if patches is None else patches
        bad = [patch for patch in patches if not 0 <= patch < grid_size**2]
        if bad:
            raise ScriptError(f"Patches {bad} do not exist: the model has patches 0 to {grid_size**2 - 1}.")
        filters = patch_filters(weights, grid_size, patches, head)
        plot_vision_filters(filters, layers, patches, output)
    else:
        filters = middle_token_filters(weights, head)
        plot_text_filters(filters, layers, output)
    return filters


def _int_list(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item]


def run(argv: list[str]) -> None:
    """Draw the filters of the checkpoint the command line's arguments `argv` name."""
    parser = ArgumentParser(
        prog="python -m gmlp.visualize", description="Draw the learned spatial filters of a gMLP checkpoint as a PNG."
    )
    parser.add_argument("checkpoint", help="a checkpoint directory (text or vision gMLP)")
    parser.add_argument("--output", default="filters.png", help="the PNG file to write")
    parser.add_argument("--layers", type=_int_list, help="comma-separated layer indices (default: all)")
    parser.add_argument("--head", type=int, default=0, help="which SGU head's weights to draw")
    parser.add_argument("--patches", type=_int_list, help="vision: comma-separated patch indices (row-major)")
    args = parser.parse_args(argv)
    # Checked here, not by `from_pretrained`, which takes a name that is no folder for a Hub id.
    if not os.path.isfile(os.path.join(args.checkpoint, "config.json")):
        raise ScriptError(f"{args.checkpoint}: not a checkpoint folder (it has no config.json).")
    if not os.path.isdir(folder := os.path.dirname(args.output) or "."):
        raise ScriptError(f"--output {args.output}: no such folder {folder}.")
    filters = visualize(args.checkpoint, args.output, args.layers, args.head, args.patches)
    print(f"Wrote {args.output} ({filters.shape[0]} layers).")


main = script_main(run)

if __name__ == "__main__":
    main()
