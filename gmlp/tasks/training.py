"""Plumbing shared by `run_mlm.py`, `run_glue.py` and `run_squad.py`: arguments, config/tokenizer/model loading,
local data files, checkpoints and the train/evaluate bookkeeping around the stock `Trainer`."""

import codecs
import difflib
import json
import logging
import os
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import transformers
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer, HfArgumentParser, PreTrainedConfig, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from ..configuration_gmlp import PRESETS, GMLPConfig
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
            "help": "Replace the results of an earlier run in --output_dir; without it, an output directory that "
            "holds another run's results (*_results.json) is refused, so that results never mix."
        },
    )


def parse_arguments(dataclass_types, argv: list[str] | None = None):
    """Parse the command line (or a single `.json` file of arguments) into the given dataclasses (one of them
    `TrainingArguments`), plus `RunArguments`, and check the run before anything loads: that it has something to do
    and that its output directory holds no other run's results."""
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
    if not (training_args.do_train or training_args.do_eval or training_args.do_predict):
        raise ValueError("Nothing to do: pass --do_train and/or --do_eval (or --do_predict where the script has it).")
    if training_args.process_index == 0:
        prepare_output_dir(training_args, run_args.overwrite_output_dir)
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


def prepare_output_dir(training_args: TrainingArguments, overwrite: bool) -> None:
    """Refuse an output directory holding another run's results (or, with `overwrite`, delete those results), and say
    how to resume when it holds checkpoints that this run would start over from."""
    output_dir = Path(training_args.output_dir)
    if not output_dir.is_dir():
        return
    results = sorted(path.name for path in output_dir.glob("*_results.json"))
    if results and training_args.resume_from_checkpoint is None:
        if not overwrite:
            raise FileExistsError(
                f"--output_dir {output_dir} holds the results of an earlier run ({', '.join(results)}); this run's "
                "results would be mixed with them. Choose another --output_dir, or pass --overwrite_output_dir to "
                "replace them."
            )
        for name in results:
            (output_dir / name).unlink()
        logger.warning(f"--overwrite_output_dir: removed the earlier run's {', '.join(results)} from {output_dir}")
    if training_args.do_train and training_args.resume_from_checkpoint is None:
        last = get_last_checkpoint(str(output_dir))
        if last is not None:
            logger.warning(
                f"{output_dir} holds checkpoints; this run starts from scratch. To continue the earlier run instead, "
                f"pass --resume_from_checkpoint {last}."
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
    config.validate()
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
        return auto_class.from_pretrained(model_args.model_name_or_path, config=config, **model_args.hub_kwargs())
    logger.info("Training a new model from scratch")
    return auto_class.from_config(config, trust_remote_code=model_args.trust_remote_code)


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


def check_text_file(path: str, what: str) -> None:
    """Raise ValueError naming `path` if it is empty, blank or not UTF-8 text."""
    blank = True
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as file:
        offset = 0
        while chunk := file.read(1 << 20):
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{what} {path} is not UTF-8 text (byte {offset + error.start}: {error.reason}); convert it, "
                    "e.g. `iconv -f latin1 -t utf-8`."
                ) from None
            blank = blank and not text.strip()
            offset += len(chunk)
    if blank:
        raise ValueError(f"{what} {path} is empty (or holds only blank lines).")


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
    numbered = [
        (int(match.group(1)), child)
        for child in folder.iterdir()
        if child.is_dir() and (match := re.fullmatch(r"checkpoint-(\d+)", child.name))
    ]
    if not numbered:
        problem = checkpoint_problem(folder)
        if problem:
            raise ValueError(f"Cannot resume from --resume_from_checkpoint {path}: {problem}.")
        return str(folder)
    skipped = []
    for _, checkpoint in sorted(numbered, reverse=True):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            for name, reason in skipped:
                logger.warning(f"Skipping the incomplete checkpoint {name}: {reason}")
            logger.warning(f"Resuming from {checkpoint}")
            return str(checkpoint)
        skipped.append((checkpoint.name, problem))
    reasons = "; ".join(f"{name}: {reason}" for name, reason in skipped)
    raise ValueError(f"No complete checkpoint to resume from in {path} ({reasons}).")


def train_and_save(trainer, training_args: TrainingArguments, num_train_samples: int | None) -> None:
    """Train (resuming if asked), save the model and tokenizer, and log/save the train metrics and state."""
    train_result = trainer.train(resume_from_checkpoint=resolve_checkpoint(training_args))
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
    output directory, and push to the Hub with `--push_to_hub`."""

    def write_card(**_trainer_card_arguments):
        if not trainer.is_world_process_zero():
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
            hyperparameters=hyperparameters if training_args.do_train else None,
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
