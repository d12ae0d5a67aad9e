"""Plumbing shared by `run_mlm.py`, `run_glue.py` and `run_squad.py`: arguments, config/tokenizer/model loading,
local data files, checkpoints and the train/evaluate bookkeeping around the stock `Trainer`."""

import dataclasses
import difflib
import json
import logging
import os
import re
import shutil
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import transformers
from huggingface_hub.errors import StrictDataclassClassValidationError
from safetensors import safe_open
from transformers import (
    AutoConfig,
    AutoTokenizer,
    HfArgumentParser,
    PreTrainedConfig,
    TrainerCallback,
    TrainingArguments,
)
from transformers.integrations import get_available_reporting_integrations

from ..configuration_gmlp import PRESETS, GMLPConfig
from ..tokenization_gmlp import check_text_file
from .model_card import model_card

logger = logging.getLogger(__name__)

# File extension -> (`datasets` builder, extra builder arguments).
DATA_FILE_BUILDERS = {
    "txt": ("text", {}),
    "csv": ("csv", {}),
    "tsv": ("csv", {"delimiter": "\t", "quoting": 3}),  # quoting=3 (QUOTE_NONE): GLUE sentences contain `"`
    "json": ("json", {}),
    "jsonl": ("json", {}),
    "parquet": ("parquet", {}),
}


@dataclass
class ModelArguments:
    """Which model, config and tokenizer to start from."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A checkpoint to start from (a directory or a Hub id)."}
    )
    config_name: str | None = field(
        default=None,
        metadata={"help": f"A preset ({', '.join(PRESETS)}) or a config directory / Hub id, to train from scratch."},
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "Config fields to override, e.g. `num_hidden_layers=2,hidden_size=64,hidden_dropout_prob=0`."
        },
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "A tokenizer directory or Hub id, if not the one of --model_name_or_path."}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where to cache Hub downloads."})
    model_revision: str = field(default="main", metadata={"help": "Branch, tag or commit of a Hub model."})
    token: str | None = field(default=None, metadata={"help": "Hub token for private models and datasets."})
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow code from the Hub (not needed for gMLP: importing gmlp registers it)."}
    )
    ignore_mismatched_sizes: bool = field(
        default=False,
        metadata={
            "help": "Load a checkpoint whose head has another size than this task needs (e.g. 2 labels for a "
            "3-label task): the head is trained anew, with the data's labels."
        },
    )

    def hub_kwargs(self) -> dict:
        """The keyword arguments every `from_pretrained` call takes from these options."""
        return {
            "cache_dir": self.cache_dir,
            "revision": self.model_revision,
            "token": self.token,
            "trust_remote_code": self.trust_remote_code,
        }


@dataclass
class RunArguments:
    """Options of the run itself that Transformers' `TrainingArguments` does not have (every script takes them)."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start a fresh run in an --output_dir used before: the earlier run's results (*_results.json) "
            "and checkpoints (checkpoint-*) are removed first, so that nothing of it is mixed in or resumed. Without "
            "it such a directory is refused (unless --resume_from_checkpoint continues the run in it)."
        },
    )


def parse_arguments(dataclass_types, argv: list[str] | None = None, no_predict: str | None = None):
    """Parse the command line (or a single `.json` file of arguments) into the given dataclasses (one of them
    `TrainingArguments`), plus `RunArguments`, and check the run before anything loads: that it has something to do
    (`no_predict`: why `--do_predict` is refused, for a script without it), that what `--report_to` names is
    installed, and that its output directory holds nothing of another run."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        # Under torchrun on a machine without GPUs, Transformers only runs data-parallel (gloo) when told to use the
        # CPU; otherwise every process would train alone.
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    parser = HfArgumentParser((*dataclass_types, RunArguments))
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].endswith(".json"):
        arguments = json.loads(Path(argv[0]).read_text())
        if bf16_needs_the_cpu(arguments.get("bf16") or arguments.get("bf16_full_eval"), arguments.get("use_cpu")):
            arguments["use_cpu"] = True
        *parsed, run_args = parser.parse_dict(arguments)
    else:
        asks_bf16 = any(
            arg in ("--bf16", "--bf16_full_eval") and value.lower() not in ("false", "0")
            for arg, value in zip(argv, [*argv[1:], "true"])
        )
        if bf16_needs_the_cpu(asks_bf16, "--use_cpu" in argv):
            argv = [*argv, "--use_cpu"]
        *parsed, run_args = parser.parse_args_into_dataclasses(args=argv)
    training_args = next(args for args in parsed if isinstance(args, TrainingArguments))
    for flag, asked in (
        ("--fsdp", training_args.fsdp_plugin_args is not None),
        ("--deepspeed", training_args.deepspeed),
    ):
        if asked and training_args.device.type == "cpu":
            raise ValueError(
                f"{flag} needs accelerators: Accelerate turns it on only for GPU (and similar) runs, and on the CPU the "
                f"run would silently be plain data-parallel (DDP). Drop {flag} on the CPU (torchrun or accelerate "
                "launch then run DDP over gloo), or run on GPUs."
            )
    if training_args.torch_compile:
        pad_every_example_for_compile(parsed)
    if training_args.do_predict and no_predict:
        raise ValueError(no_predict)
    if not (training_args.do_train or training_args.do_eval or training_args.do_predict):
        raise ValueError("Nothing to do: pass --do_train and/or --do_eval (or --do_predict where the script has it).")
    missing = sorted(set(training_args.report_to) - {"none", "all", *get_available_reporting_integrations()})
    if missing:
        raise ValueError(
            f"--report_to {' '.join(missing)}: not installed. Install it (`pip install {' '.join(missing)}`) or "
            "report elsewhere (--report_to none logs to the console only)."
        )
    if training_args.process_index == 0:
        loads = [getattr(args, name, None) for args in parsed for name in ("model_name_or_path", "tokenizer_name")]
        prepare_output_dir(training_args, run_args.overwrite_output_dir, [path for path in loads if path])
    return tuple(parsed)


def pad_every_example_for_compile(parsed_arguments) -> None:
    """Under --torch_compile, pad every example to --max_seq_length: padded to the longest example of each batch, the
    inputs take a new length at nearly every batch, and each new length recompiles the model (minutes per shape on a
    CPU) until dynamo falls back to slower dynamic-shape code."""
    for arguments in parsed_arguments:
        if getattr(arguments, "pad_to_max_length", True) is False:
            logger.warning(
                "--torch_compile: padding every example to --max_seq_length (--pad_to_max_length added), so that the "
                "model compiles for one input shape instead of once per batch length."
            )
            arguments.pad_to_max_length = True


def bf16_needs_the_cpu(asks_bf16, uses_cpu) -> bool:
    """Whether `--bf16` must run on the CPU: without an accelerator, Transformers refuses `--bf16` unless `--use_cpu`
    is given too ("Your setup doesn't support bf16/gpu"); the scripts add it, and say so."""
    if not asks_bf16 or uses_cpu or transformers.utils.is_torch_bf16_gpu_available():
        return False
    logger.warning("--bf16 without an accelerator: running bf16 autocast on the CPU (--use_cpu added).")
    return True


def checkpoint_folders(output_dir: Path) -> list[Path]:
    """The Trainer's `checkpoint-N` folders in `output_dir`, oldest (smallest N) first."""
    numbered = [
        (int(match.group(1)), child)
        for child in output_dir.iterdir()
        if child.is_dir() and (match := re.fullmatch(r"checkpoint-(\d+)", child.name))
    ]
    return [child for _, child in sorted(numbered)]


def prepare_output_dir(training_args: TrainingArguments, overwrite: bool, loads: list[str] = ()) -> None:
    """Make `--output_dir` hold nothing of another run: with `overwrite`, remove the earlier run's results and
    checkpoints (a fresh run); without it, refuse a directory holding them, unless this run resumes from a checkpoint
    (it then continues the run the directory belongs to). A checkpoint among `loads` (what the run loads) is never
    removed: that is an error."""
    output_dir = Path(training_args.output_dir)
    if not output_dir.is_dir() or training_args.resume_from_checkpoint is not None:
        return
    results = sorted(output_dir.glob("*_results.json"))
    checkpoints = checkpoint_folders(output_dir)
    loaded = [path for path in checkpoints if any(path.resolve() == Path(name).resolve() for name in loads)]
    if overwrite and loaded:
        raise ValueError(
            f"--overwrite_output_dir would remove {loaded[0]}, which this run loads; choose another --output_dir."
        )
    if overwrite and (results or checkpoints):
        for path in results:
            path.unlink()
        for path in checkpoints:
            shutil.rmtree(path)
        logger.warning(
            f"--overwrite_output_dir: removed the earlier run's {', '.join(p.name for p in results + checkpoints)} "
            f"from {output_dir}; this is a fresh run, and only its own checkpoints can be resumed."
        )
    elif results:
        raise FileExistsError(
            f"--output_dir {output_dir} holds the results of an earlier run ({', '.join(p.name for p in results)}); "
            "this run's results would be mixed with them. Choose another --output_dir, or pass "
            "--overwrite_output_dir to replace them."
        )
    elif checkpoints and training_args.do_train:
        raise FileExistsError(
            f"--output_dir {output_dir} holds the checkpoints of an earlier run ({checkpoints[-1].name} the newest); "
            "this run's checkpoints would be mixed with them. Pass --resume_from_checkpoint "
            f"{output_dir} to continue that run, --overwrite_output_dir to start a fresh one (which removes them), "
            "or choose another --output_dir."
        )


def setup_logging(training_args: TrainingArguments) -> None:
    """Log to stdout at the Trainer's per-process level (info on the main process, warnings on the others)."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    for name in ("gmlp", "__main__"):
        logging.getLogger(name).setLevel(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    logger.warning(
        f"Process rank: {training_args.process_index}, device: {training_args.device}, "
        f"world size: {training_args.world_size}, bf16: {training_args.bf16}"
    )


def load_config(
    model_args: ModelArguments,
    config_class: type[PreTrainedConfig] = GMLPConfig,
    presets: dict = PRESETS,
    **task_kwargs,
) -> PreTrainedConfig:
    """The model config: a preset of `config_class`, a config path / Hub id, or the checkpoint's, then
    `--config_overrides`.

    `task_kwargs` (e.g. `num_labels`, `finetuning_task`) are set on the config.
    """
    if model_args.config_name in presets:
        config = config_class.from_preset(model_args.config_name, **task_kwargs)
    elif model_args.config_name or model_args.model_name_or_path:
        name = model_args.config_name or model_args.model_name_or_path
        try:
            config = AutoConfig.from_pretrained(name, **task_kwargs, **model_args.hub_kwargs())
        except OSError as error:
            near = difflib.get_close_matches(name, presets, n=1, cutoff=0.75)
            if near and not os.path.exists(name):
                raise ValueError(
                    f"{name!r} is neither a preset nor a config directory, and could not be loaded from the Hub. "
                    f"Did you mean the preset {near[0]!r}? Presets: {', '.join(presets)}."
                ) from error
            raise
    else:
        raise ValueError(
            "No model given: pass --model_name_or_path (a checkpoint) or --config_name (a preset: "
            f"{', '.join(presets)}, or a config directory / Hub id) to train from scratch."
        )
    if model_args.config_overrides:
        apply_config_overrides(config, model_args.config_overrides)
    return config


def apply_config_overrides(config: PreTrainedConfig, overrides: str) -> None:
    """Set `k=v,k=v` fields on `config` (values typed like the current ones) and validate the result."""
    for item in overrides.split(","):
        if "=" not in item:
            raise ValueError(f"--config_overrides takes `key=value` pairs separated by commas, got {item!r}.")
    try:
        config.update_from_string(overrides)
    except ValueError as error:
        raise ValueError(
            f"--config_overrides {overrides!r}: {error}. Valid keys: {sorted(config.to_dict())}."
        ) from error
    try:
        config.validate()
    except StrictDataclassClassValidationError as error:
        raise ValueError(f"--config_overrides {overrides!r}: {error.__cause__ or error}") from error
    logger.info(f"Config after --config_overrides: {config}")


def load_tokenizer(model_args: ModelArguments, required: bool = True):
    """The tokenizer of `--tokenizer_name`, else of `--model_name_or_path`; None (or an error if `required`) if neither."""
    name = model_args.tokenizer_name or model_args.model_name_or_path
    if name is None:
        if required:
            raise ValueError(
                "No tokenizer: pass --tokenizer_name (a tokenizer directory or Hub id, e.g. one saved by "
                "`python -m gmlp.tokenization_gmlp` or by run_mlm.py) or --model_name_or_path of a checkpoint "
                "that has one."
            )
        return None
    return AutoTokenizer.from_pretrained(name, **model_args.hub_kwargs())


def load_model(auto_class, model_args: ModelArguments, config: PreTrainedConfig):
    """`auto_class` (e.g. `AutoModelForMaskedLM`) from `--model_name_or_path`, or a new one from `config`."""
    if model_args.model_name_or_path:
        if os.path.isdir(model_args.model_name_or_path):
            problem = weights_problem(Path(model_args.model_name_or_path))
            if problem:
                raise ValueError(f"Cannot load --model_name_or_path {model_args.model_name_or_path}: {problem}.")
        return auto_class.from_pretrained(
            model_args.model_name_or_path,
            config=config,
            ignore_mismatched_sizes=model_args.ignore_mismatched_sizes,
            **model_args.hub_kwargs(),
        )
    logger.info("Training a new model from scratch")
    return auto_class.from_config(config, trust_remote_code=model_args.trust_remote_code)


def has_label_map(config: PreTrainedConfig) -> bool:
    """Whether `config` names its labels (rather than Transformers' placeholders LABEL_0, LABEL_1, ...)."""
    return any(name != f"LABEL_{i}" for i, name in config.id2label.items())


def choose_labels(
    config: PreTrainedConfig, names: list[str], model_args: ModelArguments, source: str, ids_allowed: bool = False
) -> list[str]:
    """The label names, in id order, of a classifier for data labelled with `names`: a checkpoint's own label map
    when it has one (so that its ids keep their meaning), else `names`.

    Data labels the checkpoint does not know are an error naming them, unless `--ignore_mismatched_sizes` asks for a
    new head with the data's labels; with `ids_allowed` (integer labels), labels 0..n-1 may also be the checkpoint's
    ids.
    """
    if not (model_args.model_name_or_path and has_label_map(config)):
        return list(names)
    own = [config.id2label[i] for i in range(config.num_labels)]
    known = {name.lower() for name in own}
    unknown = [name for name in names if name.lower() not in known]
    if not unknown:
        return own
    listed = ", ".join(f"{i} = {name!r}" for i, name in enumerate(own))
    if ids_allowed and all(name.isdigit() and int(name) < len(own) for name in names):
        logger.warning(f"{source}: its labels {', '.join(names)} are taken as the model's label ids ({listed}).")
        return own
    if model_args.ignore_mismatched_sizes:
        head = "a new head" if len(names) != len(own) else "its head, whose rows now stand for the new labels"
        logger.warning(
            f"--ignore_mismatched_sizes: {source} has labels the model does not know ({', '.join(unknown)}); "
            f"fine-tuning {head}, with the data's labels {', '.join(names)} in place of the model's ({listed})."
        )
        return list(names)
    raise ValueError(
        f"{source}: label(s) {', '.join(map(repr, unknown))} are not labels of the model "
        f"{model_args.model_name_or_path} (its labels: {listed}). Use the model's labels, or pass "
        "--ignore_mismatched_sizes to fine-tune a new classification head on the data's labels."
    )


def set_labels(config: PreTrainedConfig, names: list[str] | None) -> None:
    """Make `config` a classifier of the labels `names` (in id order), or a regression model (`names` None)."""
    if names is None:
        config.num_labels = 1
        config.problem_type = "regression"
    else:
        config.id2label = dict(enumerate(names))
        config.label2id = {name: i for i, name in enumerate(names)}
        config.problem_type = "single_label_classification"


def check_vocabulary(tokenizer, model) -> None:
    """Raise ValueError when `tokenizer` has more tokens than `model` has embeddings (its ids past the model's
    vocabulary would index past them)."""
    size = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > size:
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but the model's vocabulary only {size} (vocab_size): its ids "
            f"from {size} on have no embedding. Use the model's own tokenizer (--tokenizer_name), or, training from "
            f"scratch, --config_overrides vocab_size={len(tokenizer)}."
        )


class CheckedCollator:
    """`collator`, then a check of each batch on the CPU, before it reaches the device: its `input_ids` below
    `input_ids` (the model's vocabulary size) and its integer `labels` below `labels` (the number of classes, or the
    vocabulary size for a language model), or -100. A bad id thus gives this clear error on every device (on an
    accelerator, an embedding or a loss fails with a device-side assert), at no per-step synchronisation."""

    ADVICE = {
        "input_ids": "the tokenizer does not match the model's vocabulary (vocab_size); use the model's own tokenizer.",
        "labels": "labels must be mapped to the model's label ids (num_labels).",
    }

    def __init__(self, collator, **limits: int | None):
        self.collator, self.limits = collator, limits

    def __call__(self, examples):
        batch = self.collator(examples)
        for key, limit in self.limits.items():
            values = batch.get(key)
            if limit is None or not isinstance(values, torch.Tensor) or values.is_floating_point():
                continue
            bad = values[((values < 0) & (values != -100)) | (values >= limit)]
            if bad.numel():
                raise ValueError(
                    f"A batch holds {key} {bad[0].item()}, outside the model's ids 0..{limit - 1}: {self.ADVICE[key]}"
                )
        return batch


def check_max_seq_length(max_seq_length: int | None, config: PreTrainedConfig, tokenizer) -> int:
    """The sequence length to use: `max_seq_length`, or the model's n (capped by the tokenizer) when not given.

    Raises ValueError when `max_seq_length` exceeds the model's spatial size n (`max_position_embeddings`), since
    the spatial weights W are n x n and cannot take longer inputs.
    """
    n = config.max_position_embeddings
    if max_seq_length is None:
        return min(n, tokenizer.model_max_length)
    if max_seq_length > n:
        raise ValueError(
            f"--max_seq_length {max_seq_length} is larger than the model's spatial size n = max_position_embeddings "
            f"= {n} (its spatial weights are n x n). Pass --max_seq_length {n} or less, or, when training from "
            f"scratch, --config_overrides max_position_embeddings={max_seq_length}."
        )
    if max_seq_length < 1:
        raise ValueError(f"--max_seq_length must be positive, got {max_seq_length}.")
    return max_seq_length


def load_data_files(
    data_files: dict[str, str | None], cache_dir: str | None = None, streaming: bool = False
) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """A `DatasetDict` from local files, one per split (`{"train": path, ...}`; None entries are skipped), or with
    `streaming` an `IterableDatasetDict` that reads them as it goes.

    The format follows the extension: .txt (one example per line, column "text"), .csv, .tsv, .json / .jsonl
    (JSON lines, or one JSON document), .parquet. All files must share one format.
    """
    data_files = {split: path for split, path in data_files.items() if path is not None}
    builders = set()
    for split, path in data_files.items():
        if not os.path.isfile(path):
            raise FileNotFoundError(f"The {split} file {path!r} does not exist; check the --{split}_file path.")
        extension = path.rsplit(".", 1)[-1].lower()
        if extension not in DATA_FILE_BUILDERS:
            raise ValueError(
                f"The {split} file {path!r} has an unsupported extension {extension!r}; "
                f"use one of {', '.join('.' + ext for ext in DATA_FILE_BUILDERS)}."
            )
        builders.add(extension if extension != "jsonl" else "json")
        if extension != "parquet":
            check_text_file(path, f"The {split} file")
        if extension in ("csv", "tsv") and not has_a_row_after_the_header(path):
            raise ValueError(f"The {split} file {path} has no examples (only a header).")
    if len(builders) > 1:
        raise ValueError(f"All data files must have the same format, got {sorted(builders)}: {data_files}.")
    builder, builder_kwargs = DATA_FILE_BUILDERS[builders.pop()]
    try:
        loaded = datasets.load_dataset(
            builder, data_files=data_files, cache_dir=cache_dir, streaming=streaming, **builder_kwargs
        )
    except Exception as error:  # datasets raises many types (ArrowInvalid, DatasetGenerationError, ...) for bad files
        raise ValueError(f"Could not read {', '.join(data_files.values())} as {builder}: {error}") from error
    for split, dataset in loaded.items():
        if not streaming and len(dataset) == 0:
            raise ValueError(f"The {split} file {data_files[split]} has no examples (only a header, or blank lines).")
    return loaded


def has_a_row_after_the_header(path: str) -> bool:
    """Whether the csv/tsv file `path` has a non-blank line after its first one."""
    with open(path, encoding="utf-8-sig") as file:
        non_blank = (line for line in file if line.strip())
        return next(non_blank, None) is not None and next(non_blank, None) is not None


def load_dataset_or_saved(name: str, config_name: str | None = None, **kwargs) -> datasets.DatasetDict:
    """`datasets.load_dataset(name, config_name)`, or, when `name` is a folder written by `save_to_disk`, that
    folder (whose splits are used as they are; `config_name` then only names the task)."""
    if os.path.isfile(os.path.join(name, "dataset_dict.json")):
        return datasets.load_from_disk(name)
    return datasets.load_dataset(name, config_name, **kwargs)


def require_columns(
    dataset: datasets.Dataset,
    columns,
    source: str,
    hint: str = "Rename the columns in the file or pass the option that names them.",
) -> None:
    """Raise ValueError naming the columns of `columns` that `dataset` (read from `source`) lacks, and `hint`."""
    missing = [column for column in columns if column not in dataset.column_names]
    if missing:
        raise ValueError(f"{source} has no column(s) {missing} (its columns: {dataset.column_names}). {hint}")


def select_samples(dataset: datasets.Dataset, max_samples: int | None) -> datasets.Dataset:
    """The first `max_samples` examples of `dataset` (all of them when None); for a streamed dataset, a stream of
    them."""
    if max_samples is None:
        return dataset
    if isinstance(dataset, datasets.IterableDataset):
        return dataset.take(max_samples)
    return dataset.select(range(min(max_samples, len(dataset))))


# What a checkpoint written by the Trainer holds besides its weights; all of it is needed to resume.
CHECKPOINT_STATE_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "adapter_model.safetensors")


def weights_problem(folder: Path) -> str | None:
    """Why the model weights in `folder` cannot be read (missing, truncated or corrupt), or None."""
    present = [name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not present:
        return f"it has no model weights ({' or '.join(WEIGHT_FILES[:1] + WEIGHT_FILES[2:3])})"
    for name in present:
        if name.endswith(".safetensors"):
            try:
                with safe_open(str(folder / name), framework="pt") as weights:
                    weights.keys()
            except Exception as error:  # noqa: BLE001 (safetensors raises its own types for a bad header or a short file)
                return f"{folder / name} is truncated or corrupt ({error})"
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """Why the Trainer checkpoint `folder` cannot be resumed from (a file missing, unreadable or truncated), or None."""
    problem = weights_problem(folder)
    if problem:
        return problem
    for name in CHECKPOINT_STATE_FILES:
        path = folder / name
        if not path.is_file() or path.stat().st_size == 0:
            return f"{path} is missing or empty"
    try:
        json.loads((folder / "trainer_state.json").read_text())
    except (OSError, ValueError) as error:
        return f"{folder / 'trainer_state.json'} is not readable JSON ({error})"
    for name in ("optimizer.pt", "scheduler.pt"):
        # torch.save writes zip archives; a file cut short lacks the archive's closing directory.
        if not zipfile.is_zipfile(folder / name):
            return f"{folder / name} is truncated or corrupt"
    return None


def resolve_checkpoint(training_args: TrainingArguments) -> str | None:
    """The checkpoint to resume from: `--resume_from_checkpoint`, either a checkpoint or a run directory holding
    `checkpoint-*` folders, of which the newest complete one is taken (a run killed while saving leaves an incomplete
    one behind); the ones skipped are logged with the reason."""
    path = training_args.resume_from_checkpoint
    if path is None:
        return None
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"--resume_from_checkpoint {path!r} is not a directory; pass a checkpoint-* folder.")
    numbered = checkpoint_folders(folder)
    if not numbered:
        problem = checkpoint_problem(folder)
        if problem:
            raise ValueError(f"Cannot resume from --resume_from_checkpoint {path}: {problem}.")
        return str(folder)
    skipped = []
    for checkpoint in reversed(numbered):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            for name, reason in skipped:
                logger.warning(f"Skipping the incomplete checkpoint {name}: {reason}")
            logger.warning(f"Resuming from {checkpoint}")
            return str(checkpoint)
        skipped.append((checkpoint.name, problem))
    reasons = "; ".join(f"{name}: {reason}" for name, reason in skipped)
    raise ValueError(f"No complete checkpoint to resume from in {path} ({reasons}).")


# Settings that may change when a run is resumed without changing what it trains: where and how often it reports
# and saves, what it evaluates, and how long it goes on.
BOOKKEEPING = re.compile(
    r"eval|predict|test|log|hub|report|save|^do_|output_dir|resume|run_name|max_steps|num_train_epochs|^token$|cache_dir"
)
RUN_SETTINGS = "run_settings.json"


def run_settings(arguments) -> dict:
    """The settings of a run that shape its training: every field of its argument dataclasses but bookkeeping."""
    settings = {}
    for args in arguments:
        values = args.to_dict() if isinstance(args, TrainingArguments) else dataclasses.asdict(args)
        settings.update({key: value for key, value in values.items() if not BOOKKEEPING.search(key)})
    return json.loads(json.dumps(settings, default=str))


class RunSettingsCallback(TrainerCallback):
    """Writes the run's settings into every checkpoint it saves (`run_settings.json`), so that a resume can tell
    whether the checkpoint was written by a run with other settings."""

    def __init__(self, settings: dict):
        self.settings = settings

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and checkpoint.is_dir():
            (checkpoint / RUN_SETTINGS).write_text(json.dumps(self.settings, indent=1, sort_keys=True))


def compare_settings(checkpoint: str, settings: dict) -> None:
    """Log each setting in which the run that wrote `checkpoint` differs from this one."""
    path = Path(checkpoint) / RUN_SETTINGS
    if not path.is_file():
        logger.warning(f"{checkpoint} does not say which settings wrote it ({RUN_SETTINGS}); they are not compared.")
        return
    saved = json.loads(path.read_text())
    changed = [
        f"{key} {saved.get(key)!r} (this run: {settings.get(key)!r})"
        for key in sorted(set(saved) | set(settings))
        if saved.get(key) != settings.get(key)
    ]
    if changed:
        logger.warning(
            f"{checkpoint} was written by a run with other settings: {'; '.join(changed)}. The optimizer and "
            "learning-rate schedule continue from the checkpoint's."
        )


def train_and_save(trainer, num_train_samples: int | None, arguments) -> None:
    """Train (resuming if asked), save the model and tokenizer, and log/save the train metrics and state.

    `arguments` are the run's parsed argument dataclasses: their settings go into every checkpoint, and are compared
    with those of the checkpoint a resume starts from.
    """
    training_args = trainer.args
    settings = run_settings(arguments)
    trainer.add_callback(RunSettingsCallback(settings))
    checkpoint = resolve_checkpoint(training_args)
    if checkpoint is not None:
        compare_settings(checkpoint, settings)
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    logger.info(f"Trained as {type(trainer.model_wrapped).__name__} in {training_args.world_size} process(es)")
    trainer.save_model()
    metrics = train_result.metrics
    if num_train_samples is not None:  # unknown for a streamed dataset
        metrics["train_samples"] = num_train_samples
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()


def record_metrics(trainer, split: str, metrics: dict) -> None:
    """Log `metrics` and merge them into `<split>_results.json` and `all_results.json` of the output directory."""
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, metrics)


def publish(
    trainer, training_args: TrainingArguments, model_args: ModelArguments, task: str, dataset: str | None = None
) -> None:
    """Write the model card (`gmlp.model_card`: what the model is, how to load it, its data and results) into the
    output directory of a run that trained (a run that did not saved no model to describe), and push to the Hub with
    `--push_to_hub`."""

    def write_card(**_trainer_card_arguments):
        if not trainer.is_world_process_zero() or not training_args.do_train:
            return
        output_dir = Path(training_args.output_dir)
        results = output_dir / "all_results.json"
        hyperparameters = {
            "learning_rate": training_args.learning_rate,
            "train_batch_size": training_args.per_device_train_batch_size * max(1, training_args.world_size),
            "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
            "steps" if training_args.max_steps > 0 else "epochs": (
                training_args.max_steps if training_args.max_steps > 0 else training_args.num_train_epochs
            ),
            "warmup_steps": training_args.warmup_steps,
            "weight_decay": training_args.weight_decay,
            "seed": training_args.seed,
        }
        card = model_card(
            trainer.model.config,
            repo_id=training_args.hub_model_id or output_dir.resolve().name,
            task=task,
            parameters=sum(p.numel() for p in {id(p): p for p in trainer.model.parameters()}.values()),
            base_model=model_args.model_name_or_path,
            dataset=dataset,
            metrics=json.loads(results.read_text()) if results.is_file() else None,
            hyperparameters=hyperparameters,
        )
        (output_dir / "README.md").write_text(card, encoding="utf-8")

    # The Trainer's push_to_hub writes the card through this method: ours replaces its generic one.
    trainer.create_model_card = write_card
    if training_args.push_to_hub:
        trainer.push_to_hub()
    else:
        write_card()


__all__ = [
    "DATA_FILE_BUILDERS",
    "ModelArguments",
    "apply_config_overrides",
    "check_max_seq_length",
    "check_text_file",
    "load_config",
    "load_data_files",
    "load_dataset_or_saved",
    "load_model",
    "load_tokenizer",
    "parse_arguments",
    "prepare_output_dir",
    "publish",
    "record_metrics",
    "require_columns",
    "resolve_checkpoint",
    "select_samples",
    "setup_logging",
    "train_and_save",
]
