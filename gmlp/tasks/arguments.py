"""Parsing: the dataclasses the scripts share, and the command line (flags, or a `.json` file then flags) read into
them; an unknown flag is an error naming what to pass instead, a number out of its option's range one naming the
range."""

import argparse
import dataclasses
import difflib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import HfArgumentParser, TrainingArguments
from transformers.hf_argparser import HfArg

from ..configuration_gmlp import PRESETS, VISION_PRESETS
from .errors import ParserErrors, Range, ScriptError, check_ranges

logger = logging.getLogger(__name__)

# Metrics of which less is better, besides the losses (the Trainer assumes more is better for all other names).
LOWER_IS_BETTER = ("perplexity",)

# What an option given neither on the command line nor in the arguments file holds after parsing.
UNSET = object()
# `--dataloader_pin_memory`'s default: on where there is an accelerator to pin memory for, not the Trainer's "always".
PIN_MEMORY = "dataloader_pin_memory"

# Flags of Transformers 4 or of the upstream example scripts that these scripts do not take: what to pass instead.
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
    "group_by_length": "now --train_sampling_strategy group_by_length",
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
    "overwrite_cache": "not an option here: `datasets` keys its cache on the data and the code, so it is never stale; drop it",
}

SEED = Range(at_least=0, at_most=2**32 - 1)  # numpy's seeds
# The range of every numeric option of the scripts: their own, and TrainingArguments' where Transformers or torch
# would refuse a value with a traceback (or mid-run), or run without a word as if another value had been given.
RANGES = {
    "--max_seq_length": Range(at_least=1),
    "--preprocessing_num_workers": Range(at_least=1),
    "--max_train_samples": Range(at_least=1),
    "--max_eval_samples": Range(at_least=1),
    "--max_predict_samples": Range(at_least=1),
    "--validation_split_percentage": Range(at_least=1, at_most=99),
    "--mlm_probability": Range(above=0, below=1),
    "--eval_mask_seed": SEED,
    "--doc_stride": Range(at_least=0),
    "--n_best_size": Range(at_least=1),
    "--max_answer_length": Range(at_least=1),
    "--null_score_diff_threshold": Range(),
    # TrainingArguments'
    "--per_device_train_batch_size": Range(at_least=1),
    "--per_device_eval_batch_size": Range(at_least=1),
    "--gradient_accumulation_steps": Range(at_least=1),
    "--eval_accumulation_steps": Range(at_least=1),
    "--num_train_epochs": Range(above=0),
    "--max_steps": Range(at_least=1, unset=(-1, "train for --num_train_epochs")),
    "--learning_rate": Range(at_least=0),
    "--warmup_steps": Range(at_least=0),
    "--weight_decay": Range(at_least=0),
    "--adam_beta1": Range(at_least=0, below=1),
    "--adam_beta2": Range(at_least=0, below=1),
    "--adam_epsilon": Range(at_least=0),
    "--max_grad_norm": Range(at_least=0),  # 0: no clipping
    "--label_smoothing_factor": Range(at_least=0, at_most=1),
    "--neftune_noise_alpha": Range(at_least=0),
    "--logging_steps": Range(above=0),  # these three: below 1, a share of the run's steps
    "--eval_steps": Range(above=0),
    "--save_steps": Range(above=0),
    "--eval_delay": Range(at_least=0),
    "--save_total_limit": Range(at_least=1),
    "--seed": SEED,
    "--data_seed": SEED,
    "--dataloader_num_workers": Range(at_least=0),
    "--dataloader_prefetch_factor": Range(at_least=1),
    "--ddp_timeout": Range(at_least=1),
    "--ddp_bucket_cap_mb": Range(at_least=1),
}


@dataclass
class ModelArguments:
    """Which model, config and tokenizer to start from."""

    model_name_or_path: str | None = HfArg(default=None, help="A checkpoint to start from (a directory or a Hub id).")
    config_name: str | None = HfArg(
        default=None, help=f"A new model: a preset ({', '.join(PRESETS | VISION_PRESETS)}), config folder or Hub id."
    )
    config_overrides: str | None = HfArg(
        default=None,
        help="Fields to set, e.g. num_hidden_layers=2,hidden_size=64. On a checkpoint, max_position_embeddings=N changes n, keeping the learned spatial weights.",
    )
    tokenizer_name: str | None = HfArg(default=None, help="A tokenizer directory or Hub id, if not the model's.")
    cache_dir: str | None = HfArg(default=None, help="Where to cache Hub downloads.")
    model_revision: str = HfArg(default="main", help="Branch, tag or commit of a Hub model.")
    token: str | None = HfArg(default=None, help="Hub token for private models and datasets.")
    trust_remote_code: bool = HfArg(default=False, help="Allow code from the Hub (gMLP's is in this package).")
    ignore_mismatched_sizes: bool = HfArg(default=False, help="A new head where the checkpoint's has another size.")

    def hub_kwargs(self) -> dict:
        """The keyword arguments of every `from_pretrained` call."""
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
    """`TrainingArguments` with `--overwrite_output_dir` (gone from Transformers 5), `--bf16` and several processes
    on the CPU without an accelerator, a lower perplexity better, and (set by `parse_arguments`) memory pinned where
    there is an accelerator."""

    overwrite_output_dir: bool = HfArg(default=False, help="Start afresh: remove --output_dir's results, checkpoints.")
    dataloader_pin_memory: bool = HfArg(
        default=True, help="Pin the data loader's memory; if not given, only where there is an accelerator."
    )

    def __post_init__(self):
        bf16 = self.bf16 or self.bf16_full_eval
        if bf16 and not self.use_cpu and not transformers.utils.is_torch_bf16_gpu_available():
            logger.warning("--bf16 without an accelerator: running bf16 autocast on the CPU (--use_cpu added).")
            self.use_cpu = True
        # Under torchrun without GPUs, Transformers runs data-parallel (gloo) only when told to use the CPU. Told so by
        # --use_cpu rather than by Accelerate's ACCELERATE_USE_CPU, which would also turn --deepspeed off.
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
            self.use_cpu = True
        metric = (self.metric_for_best_model or "").removeprefix("eval_")
        if self.greater_is_better is None and metric in LOWER_IS_BETTER:
            self.greater_is_better = False
        super().__post_init__()


class ScriptArgumentParser(ParserErrors, HfArgumentParser):
    """`HfArgumentParser`, its errors (a value of the wrong type, a choice that is not one) `ScriptError`s."""


def parse_arguments(*dataclass_types, argv: list[str]) -> tuple:
    """`argv` (flags, after an optional `.json` file whose values they override) as instances of `dataclass_types`
    (`TrainingArguments` standing for `AnyDeviceTrainingArguments`)."""
    types = [AnyDeviceTrainingArguments if kind is TrainingArguments else kind for kind in dataclass_types]
    options = {field.name for kind in types for field in dataclasses.fields(kind) if field.init}
    from_file = {}
    if argv and argv[0].endswith(".json"):
        path, argv = argv[0], argv[1:]
        from_file = read_json_arguments(path)
        if unknown := [key for key in from_file if key not in options]:
            raise ScriptError(f"The arguments file {path}: {unknown_options(unknown, options)}")
    # argparse fills in the defaults only of what the namespace lacks: the file's values stay unless a flag is given,
    # and an option still UNSET afterwards was given by neither.
    parser = ScriptArgumentParser(types)
    unset = {PIN_MEMORY: UNSET} if PIN_MEMORY in options else {}
    values, extra = parser.parse_known_args(argv, namespace=argparse.Namespace(**(unset | from_file)))
    if extra:
        raise ScriptError(f"Unknown command-line arguments: {unknown_flags(extra, options)}")
    check_ranges(values, RANGES)
    if getattr(values, PIN_MEMORY, None) is UNSET:
        # The Trainer pins memory by default; without an accelerator that does nothing but make torch warn.
        setattr(values, PIN_MEMORY, torch.accelerator.is_available())
    parsed = []
    for kind in types:
        names = {field.name for field in dataclasses.fields(kind) if field.init}
        try:
            parsed.append(kind(**{name: value for name, value in vars(values).items() if name in names}))
        except ValueError as error:  # `TrainingArguments` refusing a combination of values: the user's to fix
            raise ScriptError(str(error)) from None
    return tuple(parsed)


def read_json_arguments(path: str) -> dict:
    """The arguments in the JSON file `path`: one object of option names (without `--`) and values."""
    if not os.path.isfile(path):
        raise ScriptError(f"The arguments file {path!r} does not exist.")
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ScriptError(f"The arguments file {path} is not readable JSON: {error}.") from None
    if not isinstance(values, dict):
        raise ScriptError(f'The arguments file {path} must hold one JSON object, e.g. {{"do_train": true}}.')
    return values


def unknown_options(names: list[str], options: set[str]) -> str:
    """What to do about the unknown option `names` (without `--`): an upstream flag's replacement, or the nearest."""
    problems = []
    for name in names:
        near = difflib.get_close_matches(name, options, n=1, cutoff=0.75)
        fix = UPSTREAM_FLAGS.get(name) or (f"no such option; did you mean --{near[0]}?" if near else "no such option")
        problems.append(f"--{name}: {fix}")
    return f"{'; '.join(problems)}. `--help` lists the options."


def unknown_flags(arguments: list[str], options: set[str]) -> str:
    """`unknown_options` for the `arguments` argparse left over, and the stray values among them."""
    flags = [argument.split("=")[0].lstrip("-") for argument in arguments if argument.startswith("-")]
    stray = [a for i, a in enumerate(arguments) if a[:1] != "-" and (i == 0 or arguments[i - 1][:1] != "-")]
    message = unknown_options(flags, options) if flags else ""
    if stray:
        json_file = any(argument.endswith(".json") for argument in stray)
        fix = "a .json file of arguments must come first" if json_file else "a value with spaces needs quotes"
        message = f"{' '.join(stray)} follow(s) no option ({fix}). {message}"
    return message.strip()
