"""The model card (README.md) that the scripts write next to a checkpoint and push to the Hub: what the model is, how
to load it with `trust_remote_code=True`, what it was trained on, and its results."""

import os
import re

PAPER = "[Pay Attention to MLPs](https://arxiv.org/abs/2105.08050) (Liu, Dai, So, Le, NeurIPS 2021)"
# task -> the Auto class that loads such a checkpoint
AUTO_CLASSES = {
    "fill-mask": "AutoModelForMaskedLM",
    "text-classification": "AutoModelForSequenceClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "image-classification": "AutoModelForImageClassification",
    "text-generation": "AutoModelForCausalLM",
}


def is_hub_id(name: str | None) -> bool:
    """Whether `name` looks like a Hub repository id (and not a local path)."""
    return bool(name) and not os.path.exists(name) and re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) is not None


def architecture(config) -> str:
    """One line on the model's shape, e.g. "aMLP: 8 blocks, d_model 128, d_ffn 768, n 128, tiny attention 32"."""
    if config.model_type not in ("gmlp", "gmlp_vision"):
        return f"{config.model_type} model"
    if config.model_type == "gmlp_vision":
        return (
            f"vision gMLP: {config.num_hidden_layers} blocks, d_model {config.hidden_size}, d_ffn "
            f"{config.intermediate_size}, {config.image_size}x{config.image_size} images in "
            f"{config.patch_size}x{config.patch_size} patches"
        )
    kind = "aMLP" if config.tiny_attention_size else "gMLP"
    shape = (
        f"{kind}: {config.num_hidden_layers} blocks, d_model {config.hidden_size}, d_ffn {config.intermediate_size}, "
        f"n {config.max_position_embeddings} tokens, {config.spatial_weight_type} spatial weights"
    )
    if config.tiny_attention_size:
        shape += f", tiny attention {config.tiny_attention_size}"
    return shape + (", causal" if config.is_decoder else "")


def model_card(
    config,
    repo_id: str,
    task: str,
    parameters: int,
    base_model: str | None = None,
    dataset: str | None = None,
    metrics: dict | None = None,
    hyperparameters: dict | None = None,
) -> str:
    """The card's text: YAML metadata, description, a loading snippet, training data and results."""
    metadata = ["---", "library_name: transformers", "tags:", "- gmlp", f"- {task}"]
    auto_class = AUTO_CLASSES.get(task, "AutoModel")
    if task in AUTO_CLASSES:
        metadata.append(f"pipeline_tag: {task}")
    if is_hub_id(base_model):
        metadata.append(f"base_model: {base_model}")
    if is_hub_id(dataset):
        metadata += ["datasets:", f"- {dataset}"]
    metadata.append("---")
    if base_model is None:
        origin = "trained from scratch"
    elif is_hub_id(base_model):
        origin = f"fine-tuned from [{base_model}](https://huggingface.co/{base_model})"
    else:
        origin = f"fine-tuned from a local checkpoint ({os.path.basename(os.path.normpath(base_model))})"
    trained_on = os.path.basename(dataset) if dataset and os.path.exists(dataset) else dataset
    text = config.model_type != "gmlp_vision"
    lines = [
        *metadata,
        "",
        f"# {repo_id}",
        "",
        f"A {architecture(config)}; {parameters / 1e6:.2f}M parameters. The gMLP family is from {PAPER}: "
        "blocks of channel projections and a spatial gating unit instead of self-attention (aMLP adds a tiny "
        f"attention). This model is for {task}, {origin}" + (f", on {trained_on}." if trained_on else "."),
        "",
        "## Usage",
        "",
        "The model's code is saved with its weights, so it loads without installing anything but `transformers`:",
        "",
        "```python",
        f"from transformers import {auto_class}" + (", AutoTokenizer" if text else ""),
        "",
        f'model = {auto_class}.from_pretrained("{repo_id}", trust_remote_code=True)',
        *([f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}", trust_remote_code=True)'] if text else []),
        "```",
        "",
        "(With the `gmlp` package installed, `import gmlp` registers the classes and `trust_remote_code` is not needed.)",
    ]
    if text:
        tokenizer_note = (
            "The tokenizer is Transformers' own fast tokenizer (`tokenizer.json`); `AutoTokenizer` reads the model's "
            "config first, which names gMLP's code, hence the same `trust_remote_code=True` (without it, Transformers "
            f'asks whether to run that code). `PreTrainedTokenizerFast.from_pretrained("{repo_id}")` reads the '
            "tokenizer's files alone."
        )
        lines += ["", tokenizer_note]
    if metrics:
        lines += ["", "## Results", "", "| metric | value |", "|---|---|"]
        lines += [
            f"| {name} | {value:.4g} |" for name, value in sorted(metrics.items()) if isinstance(value, float | int)
        ]
    if hyperparameters:
        lines += ["", "## Training", "", "| hyperparameter | value |", "|---|---|"]
        lines += [f"| {name} | {value} |" for name, value in hyperparameters.items()]
    return "\n".join(lines) + "\n"
