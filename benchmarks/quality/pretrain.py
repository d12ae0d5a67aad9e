"""Part `pretrain`: each model pretrained with its chosen recipe at every seed (the search's run is seed 0), and the
tables at equal steps and at equal wall-clock time, each beside the unigram floor."""

import pandas as pd

from .context import Context
from .curves import at_step, first_step_below, mean_std
from .models import num_parameters
from .pretraining import pretrain
from .search import describe

# a run record's field -> the seed-by-seed list in quality.json
FIELDS = {
    "perplexity": "perplexities",
    "accuracy": "accuracies",
    "test_perplexity": "test_perplexities",
    "test_accuracy": "test_accuracies",
    "curve": "curves",
    "accuracy_curve": "accuracy_curves",
    "train_loss_curve": "train_loss_curves",
}


def measure(ctx: Context, models: list[str]) -> dict:
    """Per model: its recipe and, seed by seed, every figure of its final runs."""

    def one(name):
        runs = [ctx.available(pretrain, ctx, name, seed) for seed in ctx.args.seeds]
        runs = [run for run in runs if run]
        if not runs:
            return None
        return {
            "parameters": num_parameters(ctx.configs[name]),
            "recipe": {
                key: runs[0]["settings"][key] for key in ("learning_rate", "lr_scheduler_type", "warmup_steps")
            },
            "max_steps": runs[0]["settings"]["max_steps"],
            "seeds": [run["seed"] for run in runs],
            **{plural: [run[field] for run in runs] for field, plural in FIELDS.items()},
        }

    found = dict(zip(models, ctx.parallel(one, models)))
    return {name: row for name, row in found.items() if row}


def equal_time_budget(results: dict) -> float:
    """The longest training time every model's curves reach: the fastest full run's (seconds, from the step times)."""
    times = results["step_time"]["models"]
    return min(row["max_steps"] * times[name]["train_step_seconds"] for name, row in results["pretrain"].items())


def render_equal_steps(results: dict) -> str:
    floor = results["pretrain_reference"]["unigram"]
    rows = []
    for name, row in results["pretrain"].items():
        valid_floor = floor["valid"]["perplexity"]
        rows.append(
            {
                "model": name,
                "parameters": f"{row['parameters'] / 1e6:.2f}M",
                "recipe": describe(row["recipe"]),
                "validation perplexity": mean_std(row["perplexities"]),
                "test perplexity": mean_std(row["test_perplexities"]),
                "masked-token accuracy, validation (%)": mean_std(row["accuracies"], 100),
                "validation, seed by seed": " / ".join(f"{value:.1f}" for value in row["perplexities"]),
                "first step at ≤ unigram / 4": " / ".join(
                    str(first_step_below(curve, valid_floor / 4) or "never") for curve in row["curves"]
                ),
            }
        )
    rows.append(
        {
            "model": "unigram (reference)",
            "parameters": "–",
            "recipe": "training-split frequencies, add-one",
            "validation perplexity": f"{floor['valid']['perplexity']:.1f}",
            "test perplexity": f"{floor['test']['perplexity']:.1f}",
            "masked-token accuracy, validation (%)": f"{100 * floor['valid']['accuracy']:.1f}",
            "validation, seed by seed": "–",
            "first step at ≤ unigram / 4": "–",
        }
    )
    return pd.DataFrame(rows).to_markdown(index=False)


def render_equal_time(results: dict) -> str:
    times = results["step_time"]["models"]
    budget = equal_time_budget(results)
    floor = results["pretrain_reference"]["unigram"]["valid"]["perplexity"]
    rows = []
    for name, row in results["pretrain"].items():
        step = budget / times[name]["train_step_seconds"]
        rows.append(
            {
                "model": name,
                "parameters": f"{row['parameters'] / 1e6:.2f}M",
                "s / step": f"{times[name]['train_step_seconds']:.3f}",
                "steps in the budget": f"{step:,.0f}",
                "validation perplexity": mean_std([at_step(curve, step) for curve in row["curves"]]),
            }
        )
    rows.append(
        {
            "model": "unigram (reference)",
            "parameters": "–",
            "s / step": "–",
            "steps in the budget": "–",
            "validation perplexity": f"{floor:.1f}",
        }
    )
    return f"Budget: {budget / 60:.1f} minutes of training on one thread.\n\n" + pd.DataFrame(rows).to_markdown(
        index=False
    )
