"""The side effects of starting a run, as steps the scripts call in order: `set_environment` (what Accelerate reads
when the arguments are parsed), `start_logging`, and, once the checks have passed, `prepare_run`: the seed, compiling,
and an output directory emptied of an earlier run with `--overwrite_output_dir`."""

import logging
import os
import shutil
import sys

import datasets
import torch
import transformers

from .checkpoints import earlier_run

logger = logging.getLogger(__name__)

# Accelerate's switch for regional compilation, which the Trainer's `--torch_compile` goes through.
REGIONAL = "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"


def set_environment() -> None:
    """Before the arguments are parsed: under torchrun without GPUs, Transformers runs data-parallel (gloo) only when
    told to use the CPU."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")


def start_logging(training_args) -> None:
    """Log to stdout at the Trainer's per-process level (info on the main process, warnings on the others), starting
    with the process's place in the run."""
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", stream=sys.stdout)
    level = training_args.get_process_log_level()
    for name in ("gmlp", "__main__"):
        logging.getLogger(name).setLevel(level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    transformers.utils.logging.enable_explicit_format()
    args = training_args
    logger.warning(f"Process rank: {args.process_index}, device: {args.device}, world size: {args.world_size}")
    if args.world_size == 1 and "MASTER_ADDR" in os.environ and "ACCELERATE_MIXED_PRECISION" in os.environ:
        # What `accelerate launch --num_processes N` leaves when it starts one process (its --cpu, or a config that
        # is not multi-GPU): the rendezvous address of N processes, and none of torchrun's WORLD_SIZE.
        logger.warning(
            "accelerate launch was asked for several processes but started one (world size 1): with --cpu, or a config whose distributed_type is not MULTI_GPU, it runs a single process. On the CPU, start N processes with `accelerate launch --multi_gpu --num_processes N` (gloo) or `torchrun --nproc_per_node N`."
        )


def prepare_run(training_args, data_args=None) -> None:
    """The seed; with `--torch_compile`, each block compiled once and (`data_args`) every example padded to one
    length; with `--overwrite_output_dir`, the earlier run's results and checkpoints removed (by the first process)."""
    transformers.set_seed(training_args.seed)
    if training_args.torch_compile and REGIONAL not in os.environ:
        # Accelerate then compiles one block and reuses its code for the others; the whole model compiled unrolls all
        # of them into one graph, whose compiling grows with the depth (docs/benchmarks.md, "Compile once").
        os.environ[REGIONAL] = "true"
        logger.warning(f"--torch_compile: compiling each block once ({REGIONAL}=false compiles the whole model).")
    padding_free = getattr(data_args, "padding_free", False)  # no padding to add: the rows' lengths vary anyway
    if training_args.torch_compile and getattr(data_args, "pad_to_max_length", True) is False and not padding_free:
        # Padded to its longest example, nearly every batch has a new length, which recompiles the model.
        logger.warning("--torch_compile: padding every example to --max_seq_length (--pad_to_max_length added).")
        data_args.pad_to_max_length = True
    results, checkpoints = earlier_run(training_args)
    if training_args.overwrite_output_dir and training_args.process_index == 0 and results + checkpoints:
        for path in results:
            path.unlink()
        for path in checkpoints:
            shutil.rmtree(path)
        names = ", ".join(path.name for path in results + checkpoints)
        logger.warning(
            f"--overwrite_output_dir: removed the earlier run's {names} from {training_args.output_dir}; this is a fresh run, and only its own checkpoints can be resumed."
        )
