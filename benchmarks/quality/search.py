"""Part `search`: the same pretraining recipe search for every model (rates, warm-up, schedule; first seed), the
runs' validation perplexities, and the recipe each model is pretrained with from then on."""

from ..common import markdown_table
from .context import Context
from .curves import first_step_below
from .mlm_runs import RECIPE_FIELDS, best, search


def measure(ctx: Context, models: list[str]) -> dict:
    """Per model: every search run (recipe, validation and test perplexity, curve) and the chosen recipe."""

    def one(name):
        runs, complete = search(ctx, name)
        if not runs:
            return None
        chosen = best(runs)["settings"]
        return {
            "complete": complete,
            "runs": [
                {
                    **{key: run["settings"][key] for key in RECIPE_FIELDS},
                    "max_steps": run["settings"]["max_steps"],
                    "perplexity": run["perplexity"],
                    "accuracy": run["accuracy"],
                    "test_perplexity": run["test_perplexity"],
                    "curve": run["curve"],
                }
                for run in runs
            ],
            # the best so far while the search is incomplete
            "chosen": {key: chosen[key] for key in RECIPE_FIELDS},
        }

    found = dict(zip(models, ctx.parallel(one, models)))
    return {name: row for name, row in found.items() if row}


def describe(recipe: dict) -> str:
    schedule = "constant" if recipe["lr_scheduler_type"].startswith("constant") else "linear decay"
    return f"lr {recipe['learning_rate']:g}, warm-up {recipe['warmup_steps']}, {schedule}"


def render(results: dict) -> str:
    """One row per search run: its recipe, the validation perplexity at the end, and the first evaluation at or
    below half and a quarter of the unigram perplexity (where the model leaves the plateau)."""
    floor = results["pretrain_reference"]["unigram"]["valid"]["perplexity"]
    rows = []
    for name, search_result in results["search"].items():
        for run in search_result["runs"]:
            chosen = all(run[key] == search_result["chosen"][key] for key in search_result["chosen"])
            mark = " **(chosen)**" if search_result["complete"] else " (best so far; search under way)"
            rows.append(
                {
                    "model": name,
                    "recipe": describe(run) + (mark if chosen else ""),
                    "validation perplexity": f"{run['perplexity']:.1f}",
                    "step at ≤ unigram / 2": first_step_below(run["curve"], floor / 2) or "never",
                    "step at ≤ unigram / 4": first_step_below(run["curve"], floor / 4) or "never",
                }
            )
    return markdown_table(rows)
