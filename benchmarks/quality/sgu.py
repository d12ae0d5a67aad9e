"""Part `sgu`: the spatial gating unit variants of the paper's Table 3, pretrained with gMLP's chosen recipe at
every seed (--sgu_steps each, the warm-up scaled with them), the split SGU also widened to the unsplit variants'
parameter count, so that the order is judged at equal size as well as at equal shape; and the table's Transformer
rows at gMLP's count (BERT; ModernBERT and DeBERTa-v2 for the paper's BERT with relative positions), each with its
model's chosen recipe scaled the same way."""

from ..common import markdown_table
from .context import Context
from .curves import mean_std
from .mlm_runs import final_recipe, pretrain
from .models import TABLE3_TRANSFORMERS, config_parameters, sgu_configs, table3_transformer_configs

# Table 3's MLM validation perplexities (about 100M parameters, the paper's own pretraining); BERT with relative
# position biases for the relative-position Transformers.
PAPER = {
    "linear": 5.14,
    "additive": 4.97,
    "multiplicative": 4.53,
    "multiplicative_split": 4.35,
    "bert": 4.37,
    "modernbert": 4.26,
    "deberta-v2": 4.26,
}


def sgu_recipe(ctx: Context, model: str = "gmlp") -> dict:
    """`model`'s chosen recipe at --sgu_steps (its warm-up scaled with them)."""
    recipe = final_recipe(ctx, model)
    steps = ctx.args.sgu_steps
    if steps == ctx.args.max_steps:
        return recipe
    warmup = round(recipe["warmup_steps"] * steps / ctx.args.max_steps)
    return {**recipe, "warmup_steps": warmup, "max_steps": steps}


def measure(ctx: Context, models: list[str]) -> dict:
    """Per variant (gMLP's, when gMLP is among `models`) and per Transformer row (of `models`; DeBERTa-v2's with
    BERT, whose recipe it takes): parameters and, seed by seed, the validation and test perplexities and curves."""
    recipe = ctx.available(sgu_recipe, ctx) if "gmlp" in models else None
    configs = sgu_configs() if recipe else {}

    def one(variant):
        config = configs[variant]
        # The default variant at gMLP's shape is gMLP itself: its runs are the pretraining part's.
        name = "gmlp" if config.to_dict() == ctx.configs["gmlp"].to_dict() else f"sgu-{variant.replace(', ', '-')}"
        runs = [ctx.available(pretrain, ctx, name, seed, recipe, config, part="sgu") for seed in ctx.args.seeds]
        runs = [run for run in runs if run]
        if not runs:
            return None
        return {
            "parameters": config_parameters(config),
            "intermediate_size": config.intermediate_size,
            "seeds": [run["seed"] for run in runs],
            "perplexities": [run["perplexity"] for run in runs],
            "test_perplexities": [run["test_perplexity"] for run in runs],
            "curves": [run["curve"] for run in runs],
        }

    found = dict(zip(configs, ctx.parallel(one, list(configs))))

    def transformer(name):
        transformer_recipe = ctx.available(sgu_recipe, ctx, TABLE3_TRANSFORMERS[name])
        if transformer_recipe is None:
            return None
        config = transformers[name]
        runs = [ctx.available(pretrain, ctx, name, seed, transformer_recipe, config, part="sgu") for seed in seeds]
        runs = [run for run in runs if run]
        return runs and {
            "parameters": config_parameters(config),
            "intermediate_size": config.intermediate_size,
            "recipe_of": TABLE3_TRANSFORMERS[name],
            "seeds": [run["seed"] for run in runs],
            "perplexities": [run["perplexity"] for run in runs],
            "test_perplexities": [run["test_perplexity"] for run in runs],
            "curves": [run["curve"] for run in runs],
        }

    seeds = ctx.args.seeds
    transformers = {
        name: config for name, config in table3_transformer_configs().items() if TABLE3_TRANSFORMERS[name] in models
    }
    baselines = dict(zip(transformers, ctx.parallel(transformer, list(transformers))))
    return {
        "recipe": recipe,
        "variants": {variant: row for variant, row in found.items() if row},
        "transformers": {name: row for name, row in baselines.items() if row},
    }


def render(results: dict) -> str:
    rows = []
    transformers = {f"transformer: {name}": row for name, row in results["sgu"].get("transformers", {}).items()}
    for variant, row in {**transformers, **results["sgu"]["variants"]}.items():
        paper = PAPER.get(variant.removeprefix("transformer: "))
        rows.append(
            {
                "variant": variant,
                "d_ffn": row["intermediate_size"],
                "parameters": f"{row['parameters'] / 1e6:.2f}M",
                "validation perplexity": mean_std(row["perplexities"]),
                "test perplexity": mean_std(row["test_perplexities"]),
                "validation, seed by seed": " / ".join(f"{value:.1f}" for value in row["perplexities"]),
                "paper (Table 3)": f"{paper}" if paper else "–",
            }
        )
    return markdown_table(rows)
