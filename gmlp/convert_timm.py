r"""Convert timm's gMLP image classifiers (`gmlp_ti16_224`, `gmlp_s16_224`, `gmlp_b16_224`) to `GMLPForImageClassification`.

timm's `MlpMixer` with `SpatialGatingBlock` is the same network as ours: a conv patch stem, blocks of
LayerNorm -> fc1 -> exact GELU -> split SGU (LayerNorm on the gate half, a Linear over the patches) -> fc2 with a
residual, a final LayerNorm, the mean over patches and a linear head, all LayerNorms with eps 1e-6. Only the names
differ, so conversion is a renaming (plus a head axis on the spatial weights). timm itself is needed only to build or
download a model by name; a saved timm state dict (.pth / .safetensors) converts without it. timm needs torchvision,
and a bare `pip install timm` takes PyPI's, which brings a CUDA build of torch in place of a CPU one (and PyPI's
torchvision does not load beside the CPU build). Beside the CPU build, pin torch as it is and take torchvision's
CPU build from PyTorch's index:

    pip install timm "torch==$(python -c 'import torch; print(torch.__version__)')" \
        --extra-index-url https://download.pytorch.org/whl/cpu

    python -m gmlp.convert_timm --timm-model gmlp_s16_224 --output gmlp-s16-224      # timm's ImageNet weights
    python -m gmlp.convert_timm --checkpoint gmlp_s16.pth --output gmlp-s16-224       # a local timm state dict
"""

import math
import re
import zipfile
from pathlib import Path

import torch
from transformers import ConvNextImageProcessorPil
from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, PILImageResampling

from .configuration_gmlp import GMLPVisionConfig
from .modeling_gmlp import GMLPForImageClassification
from .tasks.errors import ArgumentParser, ScriptError, script_main

# timm name (a regular expression over one parameter's name) -> our name.
_RENAMES = [
    (r"stem\.proj\.", "gmlp.embeddings.projection."),
    (r"blocks\.(\d+)\.norm\.", r"gmlp.encoder.layer.\1.norm."),
    (r"blocks\.(\d+)\.mlp_channels\.fc1\.", r"gmlp.encoder.layer.\1.channel_proj_in."),
    (r"blocks\.(\d+)\.mlp_channels\.gate\.norm\.", r"gmlp.encoder.layer.\1.sgu.gate_norm."),
    (r"blocks\.(\d+)\.mlp_channels\.gate\.proj\.", r"gmlp.encoder.layer.\1.sgu.spatial_proj."),
    (r"blocks\.(\d+)\.mlp_channels\.fc2\.", r"gmlp.encoder.layer.\1.channel_proj_out."),
    (r"norm\.", "gmlp.final_norm."),
    (r"head\.", "classifier."),
]


def _rename(timm_name: str) -> str:
    for pattern, replacement in _RENAMES:
        if re.match(pattern, timm_name):
            return re.sub(f"^{pattern}", replacement, timm_name)
    raise ValueError(
        f"Unexpected parameter {timm_name!r} in the timm state dict: only timm's gMLP models (MlpMixer with "
        f"SpatialGatingBlock, e.g. `gmlp_s16_224`) can be converted."
    )


def convert_timm_state_dict(timm_state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a timm gMLP state dict to `GMLPForImageClassification`'s names and shapes."""
    converted = {}
    for name, tensor in timm_state_dict.items():
        new_name = _rename(name)
        if ".spatial_proj." in new_name:
            tensor = tensor.unsqueeze(0)  # our W and b have a leading axis for the SGU heads; timm has one head
        converted[new_name] = tensor
    return converted


def config_from_timm_state_dict(timm_state_dict: dict[str, torch.Tensor], **overrides) -> GMLPVisionConfig:
    """The `GMLPVisionConfig` whose model has exactly the shapes of the given timm gMLP state dict."""
    missing = [
        name
        for name in ("stem.proj.weight", "blocks.0.mlp_channels.gate.proj.weight", "head.weight")
        if name not in timm_state_dict
    ]
    if missing:
        raise ValueError(f"Not a timm gMLP classifier state dict: it has no {', '.join(missing)}.")
    hidden_size, num_channels, patch_size, _ = timm_state_dict["stem.proj.weight"].shape
    num_patches = timm_state_dict["blocks.0.mlp_channels.gate.proj.weight"].shape[0]
    patches_per_side = math.isqrt(num_patches)
    num_blocks = len({name.split(".")[1] for name in timm_state_dict if name.startswith("blocks.")})
    fields = {
        "hidden_size": hidden_size,
        "num_channels": num_channels,
        "patch_size": patch_size,
        "image_size": patches_per_side * patch_size,
        "intermediate_size": timm_state_dict["blocks.0.mlp_channels.fc1.weight"].shape[0],
        "num_hidden_layers": num_blocks,
        "num_labels": timm_state_dict["head.weight"].shape[0],
        "layer_norm_eps": 1e-6,
        "hidden_act": "gelu",
    }
    return GMLPVisionConfig(**{**fields, **overrides})


def convert_timm_model(timm_state_dict: dict[str, torch.Tensor], **config_overrides) -> GMLPForImageClassification:
    """A `GMLPForImageClassification` holding the weights of a timm gMLP state dict."""
    model = GMLPForImageClassification(config_from_timm_state_dict(timm_state_dict, **config_overrides))
    model.load_state_dict(convert_timm_state_dict(timm_state_dict), strict=True)
    return model.eval()


def timm_image_processor(image_size: int = 224, crop_pct: float = 0.875) -> ConvNextImageProcessorPil:
    """timm's evaluation transform for its gMLPs: bicubic resize of the shorter side to image_size / crop_pct (256 for
    224), a centre crop of image_size, ImageNet mean and std. ConvNeXT's processor implements exactly this."""
    return ConvNextImageProcessorPil(
        size={"shortest_edge": image_size},
        crop_pct=crop_pct,
        resample=PILImageResampling.BICUBIC,
        image_mean=list(IMAGENET_DEFAULT_MEAN),
        image_std=list(IMAGENET_DEFAULT_STD),
    )


# timm's gMLP image classifiers, the models `--timm-model` converts.
TIMM_GMLPS = ("gmlp_ti16_224", "gmlp_s16_224", "gmlp_b16_224")


def _load_timm_state_dict(checkpoint: str | None, timm_model: str | None) -> dict[str, torch.Tensor]:
    """The timm state dict of the file `checkpoint`, else of timm's pretrained `timm_model`; a `ScriptError` saying
    what to do when it cannot be had (no such file, not a state dict, no timm, not a gMLP, the Hub out of reach)."""
    if checkpoint:
        if not Path(checkpoint).is_file():
            raise ScriptError(f"--checkpoint {checkpoint}: no such file.")
        if checkpoint.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(checkpoint)
        try:
            state_dict = torch.load(checkpoint, map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 (torch raises UnpicklingError, RuntimeError, ... for a bad file)
            # torch.save writes zip archives: one that holds more than tensors is a pickled object (a whole model).
            what = (
                "holds objects besides tensors (a whole model?)"
                if zipfile.is_zipfile(checkpoint)
                else "is no file of torch.save"
            )
            raise ScriptError(
                f"--checkpoint {checkpoint} {what}. Save the timm model's weights with "
                "torch.save(model.state_dict(), path), or pass a .safetensors file."
            ) from None
        return state_dict.get("state_dict", state_dict)
    if timm_model.split(".")[0] not in TIMM_GMLPS:  # a name, or a name and a tag (gmlp_s16_224.ra3_in1k)
        raise ScriptError(f"--timm-model {timm_model}: only timm's gMLPs convert ({', '.join(TIMM_GMLPS)}).")
    try:
        import timm
    except (ImportError, RuntimeError) as error:  # RuntimeError: a torchvision built for another torch
        raise ScriptError(
            f"--timm-model needs timm, which does not import here ({error}). With the CPU build of torch, install timm and torchvision's CPU build beside it: pip install timm \"torch==$(python -c 'import torch; print(torch.__version__)')\" --extra-index-url https://download.pytorch.org/whl/cpu (a bare `pip install timm` brings a CUDA torch). Or pass --checkpoint with a saved timm state dict."
        ) from error
    try:
        return timm.create_model(timm_model, pretrained=True).state_dict()
    except OSError as error:  # huggingface_hub's errors for a Hub out of reach are OSErrors
        raise ScriptError(
            f"--timm-model {timm_model}: its weights are not in the cache and the Hub cannot be reached "
            f"({str(error).splitlines()[0]}). Run once online, or pass --checkpoint with a saved timm state dict."
        ) from None


def run(argv: list[str]) -> None:
    """Convert the timm model the command line's arguments `argv` name, and save it."""
    parser = ArgumentParser(
        prog="python -m gmlp.convert_timm",
        description="Convert a timm gMLP image classifier to a Transformers checkpoint.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    # Each option also under the scripts' spelling (underscores, --output_dir).
    source.add_argument("--timm-model", "--timm_model", help=f"timm model to download: {', '.join(TIMM_GMLPS)}")
    source.add_argument("--checkpoint", help="a local timm gMLP state dict (.pth/.bin or .safetensors)")
    parser.add_argument("--output", "--output_dir", required=True, help="directory to write the checkpoint to")
    args = parser.parse_args(argv)
    if Path(args.output).is_file():
        raise ScriptError(f"--output {args.output} is a file; name a folder to write the checkpoint to.")
    state_dict = _load_timm_state_dict(args.checkpoint, args.timm_model)
    try:
        model = convert_timm_model(state_dict)
    except ValueError as error:  # a state dict of another model
        raise ScriptError(f"--checkpoint {args.checkpoint}: {error}") from None
    output = Path(args.output)
    model.save_pretrained(output)
    timm_image_processor(model.config.image_size).save_pretrained(output)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"Wrote {output} ({parameters / 1e6:.2f}M parameters, {model.config.num_labels} classes).")


main = script_main(run)

if __name__ == "__main__":
    main()
