"""The side effects of starting a run: `start` (the arguments, logging), and after the checks
`prepare_run`."""

import logging
import os
import shutil
import sys

import datasets
import huggingface_hub
import transformers

from .arguments import ModelArguments, parse_arguments
from .checkpoints import earlier_run

logger = logging.getLogger(__name__)

# Accelerate's switch for regional compilation, which the Trainer's `--torch_compile` goes through.
REGIONAL = "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"


def start(data_arguments: type, argv: list[str]) -> tuple:
    """`argv` parsed into the model's, `data_arguments` and the training arguments, logging on."""
    parsed = parse_arguments(ModelArguments, data_arguments, transformers.TrainingArguments, argv=argv)
    start_logging(parsed[-1])
    return parsed


def start_logging(training_args) -> None:
    """Log to stdout at the Trainer's per-process level, starting (at INFO) with the process's place in the run."""
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", stream=sys.stdout)
    level = training_args.get_process_log_level()
    for name in ("gmlp", "__main__"):
        logging.getLogger(name).setLevel(level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    transformers.utils.logging.enable_explicit_format()
    # Each of these libraries prints its records with a handler of its own (stderr); passed on to the root logger's
    # handler above as well, each would print twice (huggingface_hub's and datasets' do by default, Transformers'
    # with CI=true).
    for library in (datasets, huggingface_hub, transformers):
        library.utils.logging.disable_propagation()
    args = training_args
    logger.info(f"Process rank: {args.process_index}, device: {args.device}, world size: {args.world_size}")
    # What `accelerate launch --num_processes N` leaves when it starts one process: an address, no WORLD_SIZE.
    if args.world_size == 1 and "MASTER_ADDR" in os.environ and "ACCELERATE_MIXED_PRECISION" in os.environ:
        logger.warning(
            "accelerate launch was asked for several processes but started one (world size 1): with --cpu, or a config whose distributed_type is not MULTI_GPU, it runs a single process. On the CPU, start N processes with `accelerate launch --multi_gpu --num_processes N` (gloo) or `torchrun --nproc_per_node N`."
        )


def prepare_run(training_args, data_args=None) -> None:
    """The seed; DeepSpeed's processes joined; `--torch_compile`'s regional compiling and padding;
    `--overwrite_output_dir`'s earlier run removed."""
    transformers.set_seed(training_args.seed)
    if training_args.deepspeed:
        # ZeRO-3 builds the model partitioned among DeepSpeed's processes (`zero.Init`), before the Trainer starts
        # DeepSpeed: joined here (on GPUs Accelerate has done it; on the CPU, --use_cpu's gloo group is taken over).
        import deepspeed  # TrainingArguments takes --deepspeed only with DeepSpeed installed

        deepspeed.init_distributed()
    if training_args.torch_compile and REGIONAL not in os.environ:
        # Compiling the whole model grows with the depth (docs/benchmarks.md, "Compile once").
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
