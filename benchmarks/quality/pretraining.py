"""MLM pretraining runs (run_mlm.py on WikiText-2 train, validation on valid under a fixed mask, the last checkpoint's
test perplexity), and the recipe search that chooses each model's rate, warm-up and schedule."""

import json
import math
import shutil
from pathlib import Path

from gmlp.tasks.checkpoints import checkpoint_folders, checkpoint_problem

from .context import DROPOUT_VARIANTS, TRAIN_FILE, Context, MissingRun, config_settings, pick, settings_key

RECIPE_FIELDS = ("learning_rate", "lr_scheduler_type", "warmup_steps")
SEARCH_SCHEDULE = "constant_with_warmup"
# Rates a model's search tries beyond --search_rates: post-LN BERT is known to be fragile at high rates, and at 1e-3
# it stayed near the unigram floor in an earlier probe (so it gets one rate more than the MLP models, not fewer).
EXTRA_RATES = {"bert": (1e-4,)}
START_STEP_FILE = "resumed_at_step"  # in a resumed run's output: the step of the checkpoint it resumed from
# run_mlm.py's evaluation, the same for the validation curve and the last checkpoint's test figures
EVALUATION = {"max_seq_length": 128, "do_eval": True, "per_device_eval_batch_size": 64, "report_to": "none"}


def settings(ctx: Context, config, recipe: dict) -> dict:
    """What decides a pretraining run's result (its record's key)."""
    args = ctx.args
    return {
        "config": config_settings(config),
        "tokenizer": ctx.tokenizer_hash,
        "train_file": TRAIN_FILE,
        "max_steps": recipe.get("max_steps", args.max_steps),
        "batch_size": args.batch_size,
        **pick(recipe, RECIPE_FIELDS),
        "weight_decay": 0.01,
        "eval_steps": args.eval_steps,
        "max_eval_samples": args.max_eval_samples,
        "eval_mask_seed": 0,
    }


def finished(output: Path, max_steps: int) -> bool:
    """Whether `output` holds a run that reached `max_steps` and saved its weights and metrics."""
    if not all((output / name).exists() for name in ("eval_results.json", "trainer_state.json", "model.safetensors")):
        return False
    return json.loads((output / "trainer_state.json").read_text())["global_step"] == max_steps


def pretrain(ctx: Context, name: str, seed: int, recipe=None, config=None, *, need_checkpoint=False) -> dict:
    """The record of `name`'s pretraining under `recipe` (default: its model's chosen one) with `seed`, made if missing
    (or taken from its output where it finished before its record was written)."""
    config = ctx.configs[name] if config is None else config
    recipe = final_recipe(ctx, DROPOUT_VARIANTS.get(name, (name,))[0]) if recipe is None else recipe
    run_settings = settings(ctx, config, recipe)
    run_name = f"pretrain-{name}-{settings_key(run_settings)}-seed{seed}"
    output = ctx.args.work_dir / run_name
    with ctx.run_lock(run_name):
        record = ctx.record(run_name)
        if record and (not need_checkpoint or (output / "model.safetensors").exists()):
            return record
        if ctx.args.report_only:
            raise MissingRun(run_name)
        if not finished(output, run_settings["max_steps"]):
            run_mlm(ctx, run_name, output, config, run_settings, seed)
        if not (output / "test" / "eval_results.json").exists():
            evaluation = {"validation_file": ctx.wikitext / "test.txt", "output_dir": output / "test"}
            evaluation |= {"max_eval_samples": ctx.args.max_eval_samples, "eval_mask_seed": 0}
            ctx.script("run_mlm.py", {**EVALUATION, "model_name_or_path": output, **evaluation}, f"{run_name}-test")
        for checkpoint in checkpoint_folders(output):  # only kept to resume an interrupted run
            shutil.rmtree(checkpoint)
        metrics = json.loads((output / "eval_results.json").read_text())
        test = json.loads((output / "test" / "eval_results.json").read_text())
        history = json.loads((output / "trainer_state.json").read_text())["log_history"]
        evaluations = [e for e in history if "eval_loss" in e]
        record = {
            "kind": "pretrain",
            "model": name,
            "seed": seed,
            "settings": run_settings,
            "checkpoint": str(output),
            "perplexity": metrics["perplexity"],
            "accuracy": metrics["eval_accuracy"],
            "test_perplexity": test["perplexity"],
            "test_accuracy": test["eval_accuracy"],
            "curve": [(e["step"], math.exp(e["eval_loss"])) for e in evaluations],
            "accuracy_curve": [(e["step"], e["eval_accuracy"]) for e in evaluations],
            "train_loss_curve": [(e["step"], e["loss"]) for e in history if "loss" in e],
            "train_runtime": training_time(output, history, run_settings["max_steps"]),
        }
        return ctx.save(run_name, record)


def training_time(output: Path, history: list[dict], max_steps: int) -> float | None:
    """The training time (s) as the Trainer measured it; for a resumed run, its last part's per step times all."""
    runtime = next((e["train_runtime"] for e in history if "train_runtime" in e), None)
    start = output / START_STEP_FILE
    start_step = int(start.read_text()) if start.exists() else 0
    return runtime and runtime * max_steps / (max_steps - start_step)


def run_mlm(ctx: Context, run_name: str, output: Path, config, run_settings: dict, seed: int) -> None:
    """run_mlm.py with the run's settings into `output`, a checkpoint per evaluation; resumes an interrupted run."""
    config_dir = ctx.args.work_dir / "configs" / run_name
    config.save_pretrained(config_dir)
    complete = [checkpoint for checkpoint in checkpoint_folders(output) if checkpoint_problem(checkpoint) is None]
    if complete:  # the step the training time counts from
        (output / START_STEP_FILE).write_text(complete[-1].name.removeprefix("checkpoint-"))
    s = run_settings
    arguments = {
        **EVALUATION,
        "config_name": config_dir,
        "tokenizer_name": ctx.tokenizer,
        "train_file": ctx.wikitext / s["train_file"],
        "validation_file": ctx.wikitext / "valid.txt",
        "do_train": True,
        "output_dir": output,
        "per_device_train_batch_size": s["batch_size"],
        **pick(s, ("max_steps", *RECIPE_FIELDS, "weight_decay", "eval_steps", "max_eval_samples", "eval_mask_seed")),
        "eval_strategy": "steps",
        "logging_steps": max(1, s["eval_steps"] // 4),
        "save_strategy": "steps",
        "save_steps": s["eval_steps"],
        "save_total_limit": 1,
        "resume_from_checkpoint": complete[-1] if complete else None,
        "seed": seed,
        "data_seed": 0,
    }
    ctx.script("run_mlm.py", arguments, run_name)


def best(records: list[dict]) -> dict:
    """The record with the lowest validation perplexity."""
    return min(records, key=lambda record: record["perplexity"])


def neighbour(rate: float, *, up: bool) -> float:
    """The next rate of the grid 1, 3, 10, 30, ... x 10^k above or below `rate` (itself on it)."""
    decade = math.floor(math.log10(rate) + 1e-9)
    mantissa = round(rate / 10**decade)
    if up:
        return float(f"3e{decade}") if mantissa == 1 else float(f"1e{decade + 1}")
    return float(f"1e{decade}") if mantissa == 3 else float(f"3e{decade - 1}")


def search(ctx: Context, name: str) -> tuple[list[dict], bool]:
    """The same recipe search for every model (first seed): the runs' records, and whether it is complete. (a) the
    rates of --search_rates (and EXTRA_RATES), constant after warm-up, the grid (1, 3, 10, 30, ... x 10^k) extended
    beyond the winning end (at most twice); (b) the best with --long_warmup_steps; (c) the best with a linear decay."""
    args = ctx.args
    base = {"lr_scheduler_type": SEARCH_SCHEDULE, "warmup_steps": args.warmup_steps}
    rates = sorted({*args.search_rates, *EXTRA_RATES.get(name, ())})
    records = []

    def runs(recipes) -> bool:
        found = ctx.parallel(lambda recipe: ctx.available(pretrain, ctx, name, args.seeds[0], recipe), recipes)
        records.extend(record for record in found if record)
        return all(found)

    if not runs([{**base, "learning_rate": rate} for rate in rates]):
        return records, False
    for _ in range(2):
        rate = best(records)["settings"]["learning_rate"]
        if rate not in (rates[0], rates[-1]):
            break
        rate = neighbour(rate, up=rate == rates[-1])
        rates = sorted([*rates, rate])
        if not runs([{**base, "learning_rate": rate}]):
            return records, False
    rate = best(records)["settings"]["learning_rate"]
    if not runs([{**base, "learning_rate": rate, "warmup_steps": args.long_warmup_steps}]):
        return records, False
    chosen = pick(best(records)["settings"], ("learning_rate", "warmup_steps"))
    return records, runs([{**chosen, "lr_scheduler_type": "linear"}])


def final_recipe(ctx: Context, name: str) -> dict:
    """The recipe of the model's search run with the best validation perplexity, once the search is complete."""
    records, complete = search(ctx, name)
    if not complete:
        raise MissingRun(f"{name}'s recipe search (to choose its recipe)")
    return pick(best(records)["settings"], RECIPE_FIELDS)
