"""The checks before a run starts, of what would otherwise fail later (after training, or on another process)."""

import difflib
import importlib.util
import os
from pathlib import Path

from accelerate.utils import parse_flag_from_env
from huggingface_hub import get_token
from huggingface_hub.constants import is_offline_mode
from transformers.integrations import get_available_reporting_integrations

from .checkpoints import earlier_run
from .errors import ScriptError

# What DeepSpeed reads to join its processes without MPI, and torchrun sets.
LAUNCHER_ENVIRONMENT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def check_arguments(training_args, *, loads: list[str | None], no_predict: str | None = None) -> None:
    """Before anything loads (`loads`: the paths the run loads; `no_predict`: why the script refuses `--do_predict`)."""
    check_processes(training_args)
    if training_args.do_predict and no_predict:
        raise ScriptError(no_predict)
    if not (training_args.do_train or training_args.do_eval or training_args.do_predict):
        raise ScriptError("Nothing to do: pass --do_train and/or --do_eval (or --do_predict where the script has it).")
    installed = {"none", "all", *get_available_reporting_integrations()}
    if missing := " ".join(sorted(set(training_args.report_to) - installed)):
        raise ScriptError(
            f"--report_to {missing}: not installed. Install it (`pip install {missing}`) or report elsewhere (--report_to none logs to the console only)."
        )
    if training_args.push_to_hub and is_offline_mode():
        raise ScriptError(
            "--push_to_hub needs the Hub, but this run is offline (HF_HUB_OFFLINE is set). Unset it, or drop --push_to_hub: the model is saved in --output_dir, and `hf upload` pushes that folder later."
        )
    if training_args.push_to_hub and training_args.hub_token is None and get_token() is None:
        raise ScriptError("--push_to_hub needs a Hub token: log in (`hf auth login`) or pass --hub_token.")
    if training_args.process_index == 0:
        check_output_dir(training_args, [path for path in loads if path])


def check_processes(training_args) -> None:
    """Refused: `--save_on_each_node` on several nodes, `--fsdp` on the CPU, and `--deepspeed` where the Trainer
    would not run it."""
    nodes = training_args.world_size // int(os.environ.get("LOCAL_WORLD_SIZE", training_args.world_size))
    if training_args.save_on_each_node and nodes > 1:
        raise ScriptError(
            f"--save_on_each_node on {nodes} nodes: Transformers saves the model's weights and config from the first process only, so the other nodes' checkpoints would lack them and could not be resumed. Drop --save_on_each_node and give every node the same --output_dir on a shared folder (a network file system): the first process writes each checkpoint there, and every node resumes from it."
        )
    if training_args.fsdp_plugin_args is not None and training_args.device.type == "cpu":
        raise ScriptError(
            "--fsdp needs accelerators: Accelerate turns it on only for GPU (and similar) runs, and on the CPU the run would silently be plain data-parallel (DDP). Drop --fsdp on the CPU, or run on GPUs."
        )
    if training_args.deepspeed is not None:
        check_deepspeed_launch()


def check_deepspeed_launch() -> None:
    """`--deepspeed` started where DeepSpeed runs: not under Accelerate's CPU switch, and by a launcher (or MPI)."""
    if parse_flag_from_env("ACCELERATE_USE_CPU"):
        raise ScriptError(
            "--deepspeed with Accelerate's --cpu (ACCELERATE_USE_CPU, or use_cpu in its config): Accelerate then turns DeepSpeed off, and the run would silently train without it. Drop --cpu: started by `torchrun --nproc_per_node N` or `accelerate launch --multi_gpu --num_processes N`, DeepSpeed runs on the CPU too."
        )
    if not all(name in os.environ for name in LAUNCHER_ENVIRONMENT) and importlib.util.find_spec("mpi4py") is None:
        raise ScriptError(
            "--deepspeed needs a launcher: DeepSpeed finds its processes in the environment that torchrun gives them (or through MPI, with mpi4py installed). Start the script with `torchrun --nproc_per_node N` (N = 1 for one process), or `accelerate launch --multi_gpu --num_processes N`."
        )


def check_output_dir(training_args, loads: list[str]) -> None:
    """An `--output_dir` without another run's results or (training) checkpoints, unless `--overwrite_output_dir`."""
    (results, checkpoints), output_dir = earlier_run(training_args), training_args.output_dir
    if training_args.overwrite_output_dir:
        if loaded := [path for path in checkpoints if any(path.resolve() == Path(name).resolve() for name in loads)]:
            raise ScriptError(
                f"--overwrite_output_dir would remove {loaded[0]}, which this run loads; choose another --output_dir."
            )
    elif results:
        raise ScriptError(
            f"--output_dir {output_dir} holds the results of an earlier run ({', '.join(p.name for p in results)}), which this run's would be mixed with. Choose another --output_dir, or pass --overwrite_output_dir."
        )
    elif checkpoints and training_args.do_train:
        raise ScriptError(
            f"--output_dir {output_dir} holds the checkpoints of an earlier run ({checkpoints[-1].name} the newest). Pass --resume_from_checkpoint {output_dir} to continue it, --overwrite_output_dir to start afresh (removing them), or choose another --output_dir."
        )


def check_evaluation_arguments(training_args, metric_names: tuple[str, ...], *, script: str) -> None:
    """`compute_metrics` gets the whole evaluation set, and `--metric_for_best_model` is one of `metric_names`."""
    for flag, asked in (
        ("--prediction_loss_only", training_args.prediction_loss_only),
        ("--batch_eval_metrics", training_args.batch_eval_metrics),
        ("--eval_do_concat_batches False", not training_args.eval_do_concat_batches),
    ):
        if asked:
            raise ScriptError(
                f"{flag}: {script} computes its evaluation metrics, its loss averaged over every labelled token or example included, over the whole evaluation set at once. Drop it."
            )
    metric = (training_args.metric_for_best_model or "loss").removeprefix("eval_")
    if metric not in metric_names:
        near = [name for name in metric_names if name.startswith(metric)]
        near = near or difflib.get_close_matches(metric, metric_names)
        hint = f" Did you mean --metric_for_best_model {near[0]}?" if near else ""
        raise ScriptError(
            f"--metric_for_best_model {training_args.metric_for_best_model}: {script}'s evaluation reports {', '.join(metric_names)} (each also as eval_<name>), not {metric}.{hint}"
        )


def check_no_evaluation_during_training(training_args, *, script: str) -> None:
    """For a script that scores only after training: no evaluation during it, no best checkpoint."""
    strategy, metric = training_args.eval_strategy.value, training_args.metric_for_best_model
    asked = [f"--eval_strategy {strategy}"] * (strategy != "no") + [f"--metric_for_best_model {metric}"] * bool(metric)
    if asked:
        raise ScriptError(
            f"{' and '.join(asked)}: {script} scores its answers (exact match, F1) after training, with --do_eval; it does not evaluate during training, nor choose the best checkpoint. Drop them, and score a checkpoint with --do_eval --model_name_or_path OUTPUT_DIR/checkpoint-N."
        )
