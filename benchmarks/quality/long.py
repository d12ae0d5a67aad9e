"""Part `long`: each model's chosen rate and warm-up at a constant rate for --long_steps (seed 0): where its
validation curve flattens for a reason other than the schedule reaching zero, and whether more steps than the tables
compare at take BERT to a quarter of the unigram perplexity."""

from ..common import markdown_table
from .context import Context
from .curves import at_step, first_step_below
from .mlm_runs import RECIPE_FIELDS, SEARCH_SCHEDULE, final_recipe, pretrain
from .search import describe

LAST_STEPS = 1000  # the table's change of the perplexity at the end: over this many steps


def long_recipe(ctx: Context, name: str) -> dict:
    """The model's chosen rate and warm-up, constant after the warm-up, --long_steps steps."""
    recipe = final_recipe(ctx, name)
    return {**recipe, "lr_scheduler_type": SEARCH_SCHEDULE, "max_steps": ctx.args.long_steps}


def measure(ctx: Context, models: list[str]) -> dict:
    """Per model: the long run's recipe, steps, final validation and test figures, and its curves."""

    def one(name):
        recipe = ctx.available(long_recipe, ctx, name)
        run = recipe and ctx.available(pretrain, ctx, name, ctx.args.seeds[0], recipe, part="long")
        if not run:
            return None
        return {
            "recipe": {key: recipe[key] for key in RECIPE_FIELDS},
            "max_steps": recipe["max_steps"],
            "seed": run["seed"],
            "perplexity": run["perplexity"],
            "test_perplexity": run["test_perplexity"],
            "accuracy": run["accuracy"],
            "curve": run["curve"],
            "accuracy_curve": run["accuracy_curve"],
        }

    found = dict(zip(models, ctx.parallel(one, models)))
    return {name: row for name, row in found.items() if row}


def change(curve: list, over: int) -> float:
    """The relative change of the perplexity over the curve's last `over` steps (negative: still falling)."""
    end = curve[-1][0]
    return curve[-1][1] / at_step(curve, end - over) - 1


def render(results: dict) -> str:
    """One row per model: the validation perplexity at each multiple of the tables' step count, its change over the
    last LAST_STEPS steps, the first evaluation at or below a quarter of the unigram perplexity, and the
    end's test perplexity; the unigram floor beside them."""
    floor = results["pretrain_reference"]["unigram"]
    end = results["settings"]["long_steps"]
    marks = range(results["settings"]["max_steps"], end + 1, results["settings"]["max_steps"])
    test = f"test ppl, step {end:,}"
    rows = [
        {
            "model": name,
            "recipe": describe(row["recipe"]),
            **{f"valid ppl, step {mark:,}": f"{at_step(row['curve'], mark):.1f}" for mark in marks},
            f"change over the last {LAST_STEPS:,} steps": f"{100 * change(row['curve'], LAST_STEPS):+.1f}%",
            "step at ≤ unigram / 4": first_step_below(row["curve"], floor["valid"]["perplexity"] / 4) or "never",
            test: f"{row['test_perplexity']:.1f}",
        }
        for name, row in results["long"].items()
    ]
    rows.append(
        {
            "model": "unigram (reference)",
            "recipe": "training-split frequencies, add-one",
            **{f"valid ppl, step {mark:,}": f"{floor['valid']['perplexity']:.1f}" for mark in marks},
            test: f"{floor['test']['perplexity']:.1f}",
        }
    )
    return markdown_table(rows)
