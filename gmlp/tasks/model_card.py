"""The model card (README.md) that the scripts write next to a checkpoint they trained and push to the Hub: what the
model is, how to load it with `trust_remote_code=True`, what it was trained on, its results and settings."""

import json
import os
import re
from pathlib import Path

PAPER = "[Pay Attention to MLPs](https://arxiv.org/abs/2105.08050) (Liu, Dai, So, Le, NeurIPS 2021)"
AUTO_CLASSES = {  # task -> the Auto class that loads such a checkpoint
    "fill-mask": "AutoModelForMaskedLM",
    "text-classification": "AutoModelForSequenceClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "image-classification": "AutoModelForImageClassification",
}


def is_hub_id(name: str | None) -> bool:
    """Whether `name` looks like a Hub repository id (and not a local path)."""
    return bool(name) and not os.path.exists(name) and re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) is not None


def architecture(config) -> str:
    """One line on the model's shape, e.g. "aMLP: 8 blocks, d_model 128, d_ffn 768, n 128 tokens, ..."."""
    if config.model_type not in ("gmlp", "gmlp_vision"):
        return f"{config.model_type} model"
    blocks = f"{config.num_hidden_layers} blocks, d_model {config.hidden_size}, d_ffn {config.intermediate_size}"
    if config.model_type == "gmlp_vision":
        size, patch = config.image_size, config.patch_size
        return f"vision gMLP: {blocks}, {size}x{size} images in {patch}x{patch} patches"
    shape = f"{blocks}, n {config.max_position_embeddings} tokens, {config.spatial_weight_type} spatial weights"
    attention = f", tiny attention {config.tiny_attention_size}" if config.tiny_attention_size else ""
    return f"{'aMLP' if attention else 'gMLP'}: {shape}{attention}" + (", causal" if config.is_decoder else "")


def model_card(trainer, base_model: str | None, task: str, dataset: str | None) -> str:
    """The card's text: YAML metadata, description, a loading snippet, the data, results and training settings."""
    config, args, output_dir = trainer.model.config, trainer.args, Path(trainer.args.output_dir)
    repo_id, auto_class = args.hub_model_id or output_dir.resolve().name, AUTO_CLASSES[task]
    text = task != "image-classification"
    metadata = ["library_name: transformers", "tags:", "- gmlp", f"- {task}", f"pipeline_tag: {task}"]
    metadata += [f"base_model: {base_model}"] if is_hub_id(base_model) else []
    metadata += ["datasets:", f"- {dataset}"] if is_hub_id(dataset) else []
    if base_model is None:
        origin = "trained from scratch"
    elif is_hub_id(base_model):
        origin = f"fine-tuned from [{base_model}](https://huggingface.co/{base_model})"
    else:
        origin = f"fine-tuned from a local checkpoint ({os.path.basename(os.path.normpath(base_model))})"
    trained_on = os.path.basename(dataset) if dataset and os.path.exists(dataset) else dataset
    lines = [
        "---", *metadata, "---", "", f"# {repo_id}", "",
        f"A {architecture(config)}; {trainer.model.num_parameters() / 1e6:.2f}M parameters. The gMLP family is from {PAPER}: blocks of channel projections and a spatial gating unit instead of self-attention (aMLP adds a tiny attention). This model is for {task}, {origin}" + (f", on {trained_on}." if trained_on else "."),
        "", "## Usage", "",
        "The model's code is saved with its weights, so it loads without installing anything but `transformers`:",
        "", "```python", f"from transformers import {auto_class}" + (", AutoTokenizer" if text else ""), "",
        f'model = {auto_class}.from_pretrained("{repo_id}", trust_remote_code=True)',
        *([f'tokenizer = AutoTokenizer.from_pretrained("{repo_id}", trust_remote_code=True)'] if text else []),
        "```", "",
        "(With the `gmlp` package installed, `import gmlp` registers the classes and the flag is not needed.)",
    ]  # fmt: skip
    if text:
        note = "`AutoTokenizer` reads the model's config, which names gMLP's code, before the tokenizer's own files: "
        note += f'hence the flag. `PreTrainedTokenizerFast.from_pretrained("{repo_id}")` reads only those.'
        lines += ["", note]
    results = output_dir / "all_results.json"
    metrics = json.loads(results.read_text()) if results.is_file() else {}
    rows = [f"| {key} | {value:.4g} |" for key, value in sorted(metrics.items()) if isinstance(value, float | int)]
    lines += ["", "## Results", "", "| metric | value |", "|---|---|", *rows] if rows else []
    names = ("learning_rate", "gradient_accumulation_steps", "warmup_steps", "weight_decay", "seed")
    settings = {name: getattr(args, name) for name in names}
    settings["train_batch_size"] = args.per_device_train_batch_size * max(1, args.world_size)
    settings |= {"steps": args.max_steps} if args.max_steps > 0 else {"epochs": args.num_train_epochs}
    lines += ["", "## Training", "", "| hyperparameter | value |", "|---|---|"]
    return "\n".join([*lines, *(f"| {name} | {value} |" for name, value in settings.items())]) + "\n"


def publish(trainer, base_model: str | None, task: str, dataset: str | None = None) -> None:
    """Write the card of a run that trained (a run that did not saved no model to describe) through the Trainer's
    `create_model_card`, which `--push_to_hub` calls before it pushes."""

    def write_card(**_trainer_card_arguments):
        if trainer.is_world_process_zero() and trainer.args.do_train:
            card = model_card(trainer, base_model, task, dataset)
            (Path(trainer.args.output_dir) / "README.md").write_text(card, encoding="utf-8")

    trainer.create_model_card = write_card
    if trainer.args.push_to_hub:
        trainer.push_to_hub()
    else:
        write_card()
