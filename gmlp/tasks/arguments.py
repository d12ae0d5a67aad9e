"""The scripts' arguments: the dataclasses they share, and the parsing of flags (or a `.json` file of arguments, then
flags that override it) into them, with a clear error for a flag that does not exist (upstream names that Transformers
5 renamed or removed included); then the checks of what could otherwise only fail later: something to do, trackers
installed, the Hub reachable for `--push_to_hub`, and an output directory that holds no other run."""

import argparse
import dataclasses
import difflib
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
import transformers
from huggingface_hub import get_token
from huggingface_hub.constants import is_offline_mode
from transformers import HfArgumentParser, TrainingArguments
from transformers.hf_argparser import HfArg
from transformers.integrations import get_available_reporting_integrations

from ..configuration_gmlp import PRESETS, VISION_PRESETS
from .checkpoints import prepare_output_dir

logger = logging.getLogger(__name__)

# Metrics of which less is better, besides the losses (the Trainer assumes more is better for all other names).
LOWER_IS_BETTER = ("perplexity",)

# Flags of Transformers 4's `TrainingArguments` that version 5 renamed or removed, and flags of the upstream example
# scripts that these scripts do not take: what to pass instead.
DROP = "removed in Transformers 5: drop it"
UPSTREAM_FLAGS = {
    "evaluation_strategy": "renamed --eval_strategy",
    "no_cuda": "renamed --use_cpu",
    "per_gpu_train_batch_size": "renamed --per_device_train_batch_size",
    "per_gpu_eval_batch_size": "renamed --per_device_eval_batch_size",
    "push_to_hub_token": "renamed --hub_token",
    "push_to_hub_model_id": "renamed --hub_model_id",
    "push_to_hub_organization": "now part of --hub_model_id ORGANIZATION/NAME",
    "use_auth_token": "renamed --token",
    "include_inputs_for_metrics": "now --include_for_metrics inputs",
    "split_batches": """now --accelerator_config '{"split_batches": true}'""",
    "dispatch_batches": """now --accelerator_config '{"dispatch_batches": true}'""",
    "fsdp_transformer_layer_cls_to_wrap": """now --fsdp_config '{"transformer_layer_cls_to_wrap": ["GMLPLayer"]}'""",
    "fsdp_min_num_params": """now --fsdp_config '{"min_num_params": N}'""",
    "sharded_ddp": "now --fsdp",
    "xpu_backend": "now --ddp_backend",
    "torchdynamo": "now --torch_compile_backend",
    "adafactor": "now --optim adafactor",
    "logging_dir": "removed in Transformers 5: each tracker has its own setting (TensorBoard: TENSORBOARD_LOGGING_DIR)",
    "use_mps_device": "removed in Transformers 5: Apple's MPS is used when there is one; drop it",
    "save_safetensors": "removed in Transformers 5: checkpoints are always safetensors; drop it",
    **dict.fromkeys(["fp16_backend", "half_precision_backend", "fp16_opt_level", "tpu_num_cores", "use_ipex"], DROP),
    **dict.fromkeys(["jit_mode_eval", "past_index", "ray_scope", "use_legacy_prediction_loop", "mp_parameters"], DROP),
    "low_cpu_mem_usage": "removed in Transformers 5 (models always load with little memory): drop it",
    "use_fast_tokenizer": "not an option here: the scripts always use the fast tokenizer; drop it",
    "overwrite_cache": "not an option here: `datasets` keys its cache on the data and the code, so it is never "
    "stale; drop it",
}


@dataclass
class ModelArguments:
    """Which model, config and tokenizer to start from."""

    model_name_or_path: str | None = HfArg(default=None, help="A checkpoint to start from (a directory or a Hub id).")
    config_name: str | None = HfArg(
        default=None, help=f"A new model: a preset ({', '.join(PRESETS | VISION_PRESETS)}), config folder or Hub id."
    )
    config_overrides: str | None = HfArg(default=None, help="Fields to set, e.g. num_hidden_layers=2,hidden_size=64.")
    tokenizer_name: str | None = HfArg(default=None, help="A tokenizer directory or Hub id, if not the model's.")
    cache_dir: str | None = HfArg(default=None, help="Where to cache Hub downloads.")
    model_revision: str = HfArg(default="main", help="Branch, tag or commit of a Hub model.")
    token: str | None = HfArg(default=None, help="Hub token for private models and datasets.")
    trust_remote_code: bool = HfArg(default=False, help="Allow code from the Hub (gMLP's is in this package).")
    ignore_mismatched_sizes: bool = HfArg(default=False, help="A new head where the checkpoint's has another size.")

    def hub_kwargs(self) -> dict:
        """The keyword arguments every `from_pretrained` call takes from these options."""
        names = ("cache_dir", "token", "trust_remote_code")
        return {"revision": self.model_revision} | {name: getattr(self, name) for name in names}


@dataclass
class TextDataArguments:
    """The data options of the text scripts."""

    dataset_name: str | None = HfArg(default=None, help="A Hub dataset, or a folder saved by save_to_disk.")
    dataset_config_name: str | None = HfArg(default=None, help="Its configuration, if any.")
    train_file: str | None = HfArg(default=None, help="A local training file.")
    validation_file: str | None = HfArg(default=None, help="A local evaluation file, same format.")
    max_seq_length: int | None = HfArg(default=None, help="Tokens per sequence (longer ones are cut); at most n.")
    pad_to_max_length: bool = HfArg(default=False, help="Pad all to max_seq_length, not to the longest of a batch.")
    preprocessing_num_workers: int | None = HfArg(default=None, help="Processes for preprocessing.")
    max_train_samples: int | None = HfArg(default=None, help="Keep only this many training examples.")
    max_eval_samples: int | None = HfArg(default=None, help="Keep only this many evaluation examples.")

    def data_files(self) -> dict[str, str]:
        """The local files given, by split (`test` where the script predicts)."""
        paths = (self.train_file, self.validation_file, getattr(self, "test_file", None))
        return {split: path for split, path in zip(("train", "validation", "test"), paths) if path}


@dataclass
class AnyDeviceTrainingArguments(TrainingArguments):
    """`TrainingArguments` with `--overwrite_output_dir` (gone from Transformers 5), that run `--bf16` on the CPU when
    there is no accelerator (Transformers refuses it there unless `--use_cpu` is given too), and know that a lower
    perplexity is better (for `--metric_for_best_model perplexity`)."""

    overwrite_output_dir: bool = HfArg(default=False, help="Start afresh: remove --output_dir's results, checkpoints.")

    def __post_init__(self):
        bf16 = self.bf16 or self.bf16_full_eval
        if bf16 and not self.use_cpu and not transformers.utils.is_torch_bf16_gpu_available():
            logger.warning("--bf16 without an accelerator: running bf16 autocast on the CPU (--use_cpu added).")
            self.use_cpu = True
        metric = (self.metric_for_best_model or "").removeprefix("eval_")
        if self.greater_is_better is None and metric in LOWER_IS_BETTER:
            self.greater_is_better = False
        super().__post_init__()


# Accelerate's switch for regional compilation, which the Trainer's `--torch_compile` goes through.
REGIONAL = "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"


def parse_arguments(dataclass_types, argv: list[str] | None = None, no_predict: str | None = None):
    """The command line (flags, or a `.json` file of arguments and then flags that override it) parsed into
    `dataclass_types`, then checked before anything loads: something to do (`no_predict`: why the script refuses
    `--do_predict`), `--report_to` installed, the Hub at hand for `--push_to_hub`, and an `--output_dir` that holds no
    other run."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        # Under torchrun without GPUs, Transformers runs data-parallel (gloo) only when told to use the CPU.
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    types = [AnyDeviceTrainingArguments if kind is TrainingArguments else kind for kind in dataclass_types]
    parsed = read_command_line(types, sys.argv[1:] if argv is None else argv)
    training_args = next(args for args in parsed if isinstance(args, TrainingArguments))
    setup_logging(training_args)
    if training_args.world_size == 1 and "MASTER_ADDR" in os.environ and "ACCELERATE_MIXED_PRECISION" in os.environ:
        # What `accelerate launch --num_processes N` leaves when it starts one process (its --cpu, or a config that
        # is not multi-GPU): the rendezvous address of N processes, and none of torchrun's WORLD_SIZE.
        logger.warning(
            "accelerate launch was asked for several processes but started one (world size 1): with --cpu, or a config whose distributed_type is not MULTI_GPU, it runs a single process. On the CPU, start N processes with `accelerate launch --multi_gpu --num_processes N` (gloo) or `torchrun --nproc_per_node N`."
        )
    check_save_on_each_node(training_args)
    transformers.set_seed(training_args.seed)
    for flag, asked in (("--fsdp", training_args.fsdp_plugin_args), ("--deepspeed", training_args.deepspeed)):
        if asked is not None and training_args.device.type == "cpu":
            raise ValueError(
                f"{flag} needs accelerators: Accelerate turns it on only for GPU (and similar) runs, and on the CPU "
                f"the run would silently be plain data-parallel (DDP). Drop {flag} on the CPU, or run on GPUs."
            )
    if training_args.torch_compile and REGIONAL not in os.environ:
        # Accelerate then compiles one block and reuses its code for the others; the whole model compiled unrolls all
        # of them into one graph, whose compiling grows with the depth (docs/benchmarks.md, "Compile once").
        os.environ[REGIONAL] = "true"
        logger.warning(f"--torch_compile: compiling each block once ({REGIONAL}=false compiles the whole model).")
    for args in parsed:
        padding_free = getattr(args, "padding_free", False)  # no padding to add: the rows' lengths vary anyway
        if training_args.torch_compile and getattr(args, "pad_to_max_length", True) is False and not padding_free:
            # Padded to its longest example, nearly every batch has a new length, which recompiles the model.
            logger.warning("--torch_compile: padding every example to --max_seq_length (--pad_to_max_length added).")
            args.pad_to_max_length = True
    if training_args.do_predict and no_predict:
        raise ValueError(no_predict)
    if not (training_args.do_train or training_args.do_eval or training_args.do_predict):
        raise ValueError("Nothing to do: pass --do_train and/or --do_eval (or --do_predict where the script has it).")
    if missing := sorted(set(training_args.report_to) - {"none", "all", *get_available_reporting_integrations()}):
        raise ValueError(
            f"--report_to {' '.join(missing)}: not installed. Install it (`pip install {' '.join(missing)}`) or "
            "report elsewhere (--report_to none logs to the console only)."
        )
    check_hub_push(training_args)
    if training_args.process_index == 0:
        loads = [getattr(args, name, None) for args in parsed for name in ("model_name_or_path", "tokenizer_name")]
        prepare_output_dir(training_args, [path for path in loads if path])
    return tuple(parsed)


def read_command_line(dataclass_types, argv: list[str]) -> list:
    """`argv` as instances of `dataclass_types`: flags, or a `.json` file of arguments first, then flags, which win
    over the file's values. An error names each flag (or key of the file) that no dataclass has, and what to pass."""
    parser = HfArgumentParser(dataclass_types)
    options = {field.name for kind in dataclass_types for field in dataclasses.fields(kind) if field.init}
    from_file = {}
    if argv and argv[0].endswith(".json"):
        path, argv = argv[0], argv[1:]
        from_file = read_json_arguments(path)
        if unknown := [key for key in from_file if key not in options]:
            raise ValueError(f"The arguments file {path}: {unknown_options(unknown, options)}")
    # argparse fills in the defaults only of what the namespace lacks: the file's values stay unless a flag is given.
    namespace, extra = parser.parse_known_args(argv, namespace=argparse.Namespace(**from_file))
    if extra:
        raise ValueError(f"Unknown command-line arguments: {unknown_flags(extra, options)}")
    values = vars(namespace)
    parsed = []
    for kind in dataclass_types:
        names = {field.name for field in dataclasses.fields(kind) if field.init}
        parsed.append(kind(**{name: value for name, value in values.items() if name in names}))
    return parsed


def read_json_arguments(path: str) -> dict:
    """The arguments in the JSON file `path`: one object of option names (without `--`) and values."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"The arguments file {path!r} does not exist.")
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"The arguments file {path} is not readable JSON: {error}.") from None
    if not isinstance(values, dict):
        raise ValueError(f'The arguments file {path} must hold one JSON object, e.g. {{"do_train": true}}.')  # noqa: TRY004
    return values


def unknown_options(names: list[str], options: set[str]) -> str:
    """What to do about the option `names` (without `--`) that no dataclass has: each one's upstream replacement,
    else the nearest option, if any."""
    problems = []
    for name in names:
        if name in UPSTREAM_FLAGS:
            problems.append(f"--{name}: {UPSTREAM_FLAGS[name]}")
        elif near := difflib.get_close_matches(name, options, n=1, cutoff=0.75):
            problems.append(f"--{name}: no such option; did you mean --{near[0]}?")
        else:
            problems.append(f"--{name}: no such option")
    return "; ".join(problems) + ". `--help` lists the options."


def unknown_flags(arguments: list[str], options: set[str]) -> str:
    """`unknown_options` for the command-line `arguments` that argparse left over (a value after an unknown flag is
    its value; any other is a stray value, e.g. a `.json` file that is not the first argument)."""
    flags, stray = [], []
    for i, argument in enumerate(arguments):
        if argument.startswith("-"):
            flags.append(argument.split("=")[0].lstrip("-"))
        elif i == 0 or not arguments[i - 1].startswith("-"):
            stray.append(argument)
    message = unknown_options(flags, options) if flags else ""
    if stray:
        json_file = any(argument.endswith(".json") for argument in stray)
        fix = "a .json file of arguments must come first" if json_file else "a value with spaces needs quotes"
        message = f"{' '.join(stray)} follow(s) no option ({fix}). " + message
    return message.strip()


def check_save_on_each_node(training_args: TrainingArguments) -> None:
    """`--save_on_each_node` on several nodes is refused: Transformers 5 writes the model's weights and config on the
    first process only (`save_pretrained`), whatever the flag says, so the other nodes' checkpoints could not be
    resumed, and their folders would not be cleaned by `--overwrite_output_dir` or checked for another run's."""
    nodes = training_args.world_size // int(os.environ.get("LOCAL_WORLD_SIZE", training_args.world_size))
    if training_args.save_on_each_node and nodes > 1:
        raise ValueError(
            f"--save_on_each_node on {nodes} nodes: Transformers saves the model's weights and config from the first "
            "process only, so the other nodes' checkpoints would lack them and could not be resumed. Drop "
            "--save_on_each_node and give every node the same --output_dir on a shared folder (a network file "
            "system): the first process writes each checkpoint there, and every node resumes from it."
        )


def check_hub_push(training_args: TrainingArguments) -> None:
    """`--push_to_hub` needs the Hub and a token: an error now rather than after training."""
    if not training_args.push_to_hub:
        return
    if is_offline_mode():
        raise ValueError(
            "--push_to_hub needs the Hub, but this run is offline (HF_HUB_OFFLINE is set). Unset it, or drop "
            "--push_to_hub: the model is saved in --output_dir, and `hf upload` pushes that folder later."
        )
    if training_args.hub_token is None and get_token() is None:
        raise ValueError("--push_to_hub needs a Hub token: log in (`hf auth login`) or pass --hub_token.")


def setup_logging(args: TrainingArguments) -> None:
    """Log to stdout at the Trainer's per-process level (info on the main process, warnings on the others)."""
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", stream=sys.stdout)
    level = args.get_process_log_level()
    for name in ("gmlp", "__main__"):
        logging.getLogger(name).setLevel(level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    transformers.utils.logging.enable_explicit_format()
    logger.warning(f"Process rank: {args.process_index}, device: {args.device}, world size: {args.world_size}")
