"""Part `pretrain`: each model pretrained with its chosen recipe at every seed (the search's run is seed 0), and the
tables at equal steps and at equal wall-clock time, each beside the unigram floor."""

from ..common import markdown_table
from .context import Context
from .curves import at_step, first_step_below, mean_std
from .mlm_runs import RECIPE_FIELDS, pretrain
from .models import DROPOUT_VARIANTS, config_parameters, dropout_of
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


def rows(models: list[str]) -> list[str]:
    """The models, then the dropout variants of those among them (their model's recipe at the others' dropout)."""
    return [*models, *(variant for variant, (name, _) in DROPOUT_VARIANTS.items() if name in models)]


def measure(ctx: Context, models: list[str]) -> dict:
    """Per model (and dropout variant): its recipe, dropout and, seed by seed, every figure of its final runs."""

    def one(name):
        runs = [ctx.available(pretrain, ctx, name, seed) for seed in ctx.args.seeds]
        runs = [run for run in runs if run]
        if not runs:
            return None
        return {
            "parameters": config_parameters(ctx.configs[name]),
            "dropout": dropout_of(ctx.configs[name]),
            "recipe": {key: runs[0]["settings"][key] for key in RECIPE_FIELDS},
            "max_steps": runs[0]["settings"]["max_steps"],
            "seeds": [run["seed"] for run in runs],
            **{plural: [run[field] for run in runs] for field, plural in FIELDS.items()},
        }

    names = rows(models)
    found = dict(zip(names, ctx.parallel(one, names)))
    return {name: row for name, row in found.items() if row}


def derive(results: dict) -> dict:
    """The figures the tables read off the curves, seed by seed: where each run first reaches half and a quarter of
    the unigram perplexity, and (with the step times) each model's perplexity at the equal-time budget, the fastest
    model's full run, interpolated at the step count that budget buys it."""
    floor = results["pretrain_reference"]["unigram"]["valid"]["perplexity"]
    derived = {
        name: {
            f"first_step_at_unigram_over_{divisor}": [
                first_step_below(curve, floor / divisor) for curve in row["curves"]
            ]
            for divisor in (2, 4)
        }
        for name, row in results["pretrain"].items()
    }
    measured = results.get("step_time", {}).get("models", {})
    times = {name: measured[name]["train_step_seconds"] for name in results["pretrain"] if name in measured}
    if not times:
        return {"models": derived}
    budget = min(results["pretrain"][name]["max_steps"] * seconds for name, seconds in times.items())
    for name, row in results["pretrain"].items():
        if name not in times:
            continue
        steps = min(budget / times[name], row["max_steps"])  # the budget's own model: its full run, unrounded
        derived[name]["equal_time_steps"] = steps
        derived[name]["equal_time_perplexities"] = [at_step(curve, steps) for curve in row["curves"]]
    return {"equal_time_budget_seconds": budget, "models": derived}


def render_equal_steps(results: dict) -> str:
    floor = results["pretrain_reference"]["unigram"]
    derived = results["pretrain_derived"]["models"]
    rows = []
    for name, row in results["pretrain"].items():
        rows.append(
            {
                "model": name,
                "parameters": f"{row['parameters'] / 1e6:.2f}M",
                "dropout": f"{row['dropout']:g}" if "dropout" in row else "–",
                "recipe": describe(row["recipe"]),
                "validation perplexity": mean_std(row["perplexities"]),
                "test perplexity": mean_std(row["test_perplexities"]),
                "masked-token accuracy, validation (%)": mean_std(row["accuracies"], 100),
                "validation, seed by seed": " / ".join(f"{value:.1f}" for value in row["perplexities"]),
                **{
                    f"first step at ≤ unigram / {divisor}": " / ".join(
                        str(step or "never") for step in derived[name][f"first_step_at_unigram_over_{divisor}"]
                    )
                    for divisor in (2, 4)
                },
            }
        )
    rows.append(
        {
            "model": "unigram (reference)",
            "recipe": "training-split frequencies, add-one",
            "validation perplexity": f"{floor['valid']['perplexity']:.1f}",
            "test perplexity": f"{floor['test']['perplexity']:.1f}",
            "masked-token accuracy, validation (%)": f"{100 * floor['valid']['accuracy']:.1f}",
        }
    )
    return markdown_table(rows)


def render_equal_time(results: dict) -> str:
    times = results["step_time"]["models"]
    derived = results["pretrain_derived"]
    floor = results["pretrain_reference"]["unigram"]["valid"]["perplexity"]
    rows = [
        {
            "model": name,
            "parameters": f"{row['parameters'] / 1e6:.2f}M",
            "s / step": f"{times[name]['train_step_seconds']:.3f}",
            "steps in the budget": f"{derived['models'][name]['equal_time_steps']:,.0f}",
            "validation perplexity": mean_std(derived["models"][name]["equal_time_perplexities"]),
        }
        for name, row in results["pretrain"].items()
        if name in times
    ]
    rows.append({"model": "unigram (reference)", "validation perplexity": f"{floor:.1f}"})
    budget = derived["equal_time_budget_seconds"] / 60
    table = markdown_table(rows)
    return f"Budget: {budget:.1f} minutes of training on one thread (evaluations not counted).\n\n{table}"
