"""Plumbing shared by `run_mlm.py`, `run_glue.py` and `run_squad.py`: arguments, config/tokenizer/model loading,
local data files, checkpoints and the train/evaluate bookkeeping around the stock `Trainer`."""

import logging
import os
import sys
from dataclasses import dataclass, field

import datasets
import torch
import transformers
from transformers import AutoConfig, AutoTokenizer, HfArgumentParser, PreTrainedConfig, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from .configuration_gmlp import PRESETS, GMLPConfig

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
        metadata={"help": "Config fields to override, e.g. `num_hidden_layers=2,hidden_size=64,hidden_dropout_prob=0`."},
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


def parse_arguments(dataclass_types, argv: list[str] | None = None):
    """Parse the command line (or a single `.json` file of arguments) into the given dataclasses."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        # Under torchrun on a machine without GPUs, Transformers only runs data-parallel (gloo) when told to use the
        # CPU; otherwise every process would train alone.
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    parser = HfArgumentParser(dataclass_types)
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    return parser.parse_args_into_dataclasses(args=argv)


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
    model_args: ModelArguments, config_class: type[PreTrainedConfig] = GMLPConfig, presets: dict = PRESETS, **task_kwargs
) -> PreTrainedConfig:
    """The model config: a preset of `config_class`, a config path / Hub id, or the checkpoint's, then
    `--config_overrides`.

    `task_kwargs` (e.g. `num_labels`, `finetuning_task`) are set on the config.
    """
    if model_args.config_name in presets:
        config = config_class.from_preset(model_args.config_name, **task_kwargs)
    elif model_args.config_name or model_args.model_name_or_path:
        name = model_args.config_name or model_args.model_name_or_path
        config = AutoConfig.from_pretrained(name, **task_kwargs, **model_args.hub_kwargs())
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
        raise ValueError(f"--config_overrides {overrides!r}: {error}. Valid keys: {sorted(config.to_dict())}.") from error
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


def load_data_files(data_files: dict[str, str | None], cache_dir: str | None = None) -> datasets.DatasetDict:
    """A `DatasetDict` from local files, one per split (`{"train": path, ...}`; None entries are skipped).

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
    if len(builders) > 1:
        raise ValueError(f"All data files must have the same format, got {sorted(builders)}: {data_files}.")
    builder, builder_kwargs = DATA_FILE_BUILDERS[builders.pop()]
    return datasets.load_dataset(builder, data_files=data_files, cache_dir=cache_dir, **builder_kwargs)


def require_columns(dataset: datasets.Dataset, columns, source: str) -> None:
    """Raise ValueError naming the columns of `columns` that `dataset` (read from `source`) lacks."""
    missing = [column for column in columns if column not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{source} has no column(s) {missing} (its columns: {dataset.column_names}). Rename the columns in the "
            "file or pass the option that names them."
        )


def select_samples(dataset: datasets.Dataset, max_samples: int | None) -> datasets.Dataset:
    """The first `max_samples` examples of `dataset` (all of them when None)."""
    if max_samples is None:
        return dataset
    return dataset.select(range(min(max_samples, len(dataset))))


def resolve_checkpoint(training_args: TrainingArguments) -> str | None:
    """The checkpoint to resume from: `--resume_from_checkpoint`, either a checkpoint or a run directory holding
    `checkpoint-*` folders (the last one is taken)."""
    path = training_args.resume_from_checkpoint
    if path is None:
        return None
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--resume_from_checkpoint {path!r} is not a directory; pass a checkpoint-* folder.")
    last = get_last_checkpoint(path)
    return last if last is not None else path


def warn_if_checkpoints_ignored(training_args: TrainingArguments) -> None:
    """Say how to resume when the output directory already holds checkpoints that this run would overwrite."""
    if training_args.do_train and training_args.resume_from_checkpoint is None and os.path.isdir(training_args.output_dir):
        last = get_last_checkpoint(training_args.output_dir)
        if last is not None:
            logger.warning(
                f"{training_args.output_dir} holds checkpoints; this run starts from scratch. To continue the earlier "
                f"run instead, pass --resume_from_checkpoint {last}."
            )


def train_and_save(trainer, training_args: TrainingArguments, num_train_samples: int) -> None:
    """Train (resuming if asked), save the model and tokenizer, and log/save the train metrics and state."""
    train_result = trainer.train(resume_from_checkpoint=resolve_checkpoint(training_args))
    trainer.save_model()
    metrics = train_result.metrics
    metrics["train_samples"] = num_train_samples
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()


def record_metrics(trainer, split: str, metrics: dict) -> None:
    """Log `metrics` and merge them into `<split>_results.json` and `all_results.json` of the output directory."""
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, metrics)


def publish(trainer, training_args: TrainingArguments, model_args: ModelArguments, **card_kwargs) -> None:
    """Push to the Hub with `--push_to_hub`, else write a model card into the output directory."""
    card_kwargs = {"finetuned_from": model_args.model_name_or_path, **card_kwargs}
    card_kwargs = {key: value for key, value in card_kwargs.items() if value is not None}
    if training_args.push_to_hub:
        trainer.push_to_hub(**card_kwargs)
    elif trainer.is_world_process_zero():
        trainer.create_model_card(**card_kwargs)


__all__ = [
    "DATA_FILE_BUILDERS",
    "ModelArguments",
    "apply_config_overrides",
    "check_max_seq_length",
    "load_config",
    "load_data_files",
    "load_model",
    "load_tokenizer",
    "parse_arguments",
    "publish",
    "record_metrics",
    "require_columns",
    "resolve_checkpoint",
    "select_samples",
    "setup_logging",
    "train_and_save",
    "warn_if_checkpoints_ignored",
]
