"""What the scripts share around the stock `Trainer`: arguments, loading configs, tokenizers, models and local data
files with clear errors, label maps, checkpoints and resuming, and the bookkeeping of results."""

import csv
import difflib
import itertools
import json
import logging
import os
import re
import shutil
import sys
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import datasets
import torch
import transformers
from huggingface_hub.constants import is_offline_mode
from huggingface_hub.errors import StrictDataclassClassValidationError
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer, HfArgumentParser, TrainerCallback, TrainingArguments
from transformers.hf_argparser import HfArg
from transformers.integrations import get_available_reporting_integrations

from ..configuration_gmlp import PRESETS, VISION_PRESETS, GMLPConfig
from ..tokenization_gmlp import check_text_file

logger = logging.getLogger(__name__)

# File extension -> `datasets` builder. GLUE's sentences contain `"`, so TSV is read unquoted.
DATA_FILE_BUILDERS = {"txt": "text", "csv": "csv", "tsv": "csv", "json": "json", "jsonl": "json", "parquet": "parquet"}


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
    there is no accelerator (Transformers refuses it there unless `--use_cpu` is given too)."""

    overwrite_output_dir: bool = HfArg(default=False, help="Start afresh: remove --output_dir's results, checkpoints.")

    def __post_init__(self):
        bf16 = self.bf16 or self.bf16_full_eval
        if bf16 and not self.use_cpu and not transformers.utils.is_torch_bf16_gpu_available():
            logger.warning("--bf16 without an accelerator: running bf16 autocast on the CPU (--use_cpu added).")
            self.use_cpu = True
        super().__post_init__()


def parse_arguments(dataclass_types, argv: list[str] | None = None, no_predict: str | None = None):
    """The command line (or one `.json` file of arguments) parsed into `dataclass_types`, then checked before anything
    loads: something to do (`no_predict`: why the script refuses `--do_predict`), `--report_to` installed, and an
    `--output_dir` that holds no other run."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        # Under torchrun without GPUs, Transformers runs data-parallel (gloo) only when told to use the CPU.
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    types = [AnyDeviceTrainingArguments if kind is TrainingArguments else kind for kind in dataclass_types]
    parser = HfArgumentParser(types)
    argv = sys.argv[1:] if argv is None else argv
    json_file = len(argv) == 1 and argv[0].endswith(".json")
    parsed = parser.parse_json_file(argv[0]) if json_file else parser.parse_args_into_dataclasses(args=argv)
    training_args = next(args for args in parsed if isinstance(args, TrainingArguments))
    setup_logging(training_args)
    transformers.set_seed(training_args.seed)
    for flag, asked in (("--fsdp", training_args.fsdp_plugin_args), ("--deepspeed", training_args.deepspeed)):
        if asked is not None and training_args.device.type == "cpu":
            raise ValueError(
                f"{flag} needs accelerators: Accelerate turns it on only for GPU (and similar) runs, and on the CPU "
                f"the run would silently be plain data-parallel (DDP). Drop {flag} on the CPU, or run on GPUs."
            )
    for args in parsed:
        if training_args.torch_compile and getattr(args, "pad_to_max_length", True) is False:
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
    if training_args.process_index == 0:
        loads = [getattr(args, name, None) for args in parsed for name in ("model_name_or_path", "tokenizer_name")]
        prepare_output_dir(training_args, [path for path in loads if path])
    return tuple(parsed)


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


def checkpoint_folders(folder: Path) -> list[Path]:
    """The Trainer's `checkpoint-N` folders in `folder`, oldest (smallest N) first."""
    numbered = [path for path in folder.glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", path.name)]
    return sorted((path for path in numbered if path.is_dir()), key=lambda path: int(path.name[11:]))


def prepare_output_dir(training_args: AnyDeviceTrainingArguments, loads: list[str] = ()) -> None:
    """Make `--output_dir` hold nothing of another run: with `--overwrite_output_dir`, remove its results and
    checkpoints (but none the run `loads`); without, refuse them, unless the run resumes (it continues their run)."""
    output_dir = Path(training_args.output_dir)
    if not output_dir.is_dir() or training_args.resume_from_checkpoint is not None:
        return
    results, checkpoints = sorted(output_dir.glob("*_results.json")), checkpoint_folders(output_dir)
    if training_args.overwrite_output_dir and (results or checkpoints):
        if loaded := [path for path in checkpoints if any(path.resolve() == Path(name).resolve() for name in loads)]:
            raise ValueError(
                f"--overwrite_output_dir would remove {loaded[0]}, which this run loads; choose another --output_dir."
            )
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
            f"--output_dir {output_dir} holds the results of an earlier run ({', '.join(p.name for p in results)}), "
            "which this run's would be mixed with. Choose another --output_dir, or pass --overwrite_output_dir."
        )
    elif checkpoints and training_args.do_train:
        raise FileExistsError(
            f"--output_dir {output_dir} holds the checkpoints of an earlier run ({checkpoints[-1].name} the newest). "
            f"Pass --resume_from_checkpoint {output_dir} to continue it, --overwrite_output_dir to start afresh "
            "(removing them), or choose another --output_dir."
        )


def from_name(load, name: str, option: str, presets=(), **kwargs):
    """`load(name, **kwargs)` (a `from_pretrained`); a name that is no directory and not found on the Hub is an
    error saying so, whether the Hub could be reached, and which presets there are."""
    try:
        return load(name, **kwargs)
    except OSError as error:
        if os.path.exists(name):
            raise
        offline = is_offline_mode() or "connect" in str(error)
        hub = "could not be reached to look it up" if offline else "has no such model"
        near = difflib.get_close_matches(name, presets, n=1, cutoff=0.6)
        raise ValueError(
            f"{option} {name!r} is {'neither a preset nor' if presets else 'not'} a directory, and the Hub {hub} "
            f"({str(error).splitlines()[0]})."
            + (f" Did you mean the preset {near[0]!r}?" if near else "")
            + (f" Presets: {', '.join(presets)}." if presets else "")
        ) from error


def load_config(model_args: ModelArguments, config_class=GMLPConfig, presets: dict = PRESETS):
    """The config: a preset of `config_class`, a directory / Hub id, or the checkpoint's; then `--config_overrides`."""
    name = model_args.config_name or model_args.model_name_or_path
    if name is None:
        raise ValueError("No model given: pass --model_name_or_path (a checkpoint) or --config_name (e.g. a preset).")
    if model_args.config_name in presets:
        config = config_class.from_preset(name)
    elif model_args.config_name is None and name in presets:
        raise ValueError(f"--model_name_or_path {name} is a preset, not a checkpoint: pass it as --config_name.")
    elif model_args.config_name:
        config = from_name(AutoConfig.from_pretrained, name, "--config_name", presets, **model_args.hub_kwargs())
    else:
        config = from_name(AutoConfig.from_pretrained, name, "--model_name_or_path", **model_args.hub_kwargs())
    if not (overrides := model_args.config_overrides):
        return config
    if not all("=" in item for item in overrides.split(",")):
        raise ValueError(f"--config_overrides takes `key=value` pairs separated by commas, got {overrides!r}.")
    try:
        config.update_from_string(overrides)
        config.validate()
    except (ValueError, StrictDataclassClassValidationError) as error:
        keys = f" Valid keys: {sorted(config.to_dict())}." if isinstance(error, ValueError) else ""
        raise ValueError(f"--config_overrides {overrides!r}: {error.__cause__ or error}.{keys}") from error
    logger.info(f"Config after --config_overrides: {config}")
    return config


def load_tokenizer(model_args: ModelArguments, required: bool = True):
    """The tokenizer of `--tokenizer_name`, else of `--model_name_or_path`; else None (an error if `required`)."""
    name = model_args.tokenizer_name or model_args.model_name_or_path
    if name is None and required:
        raise ValueError("No tokenizer: pass --tokenizer_name, or a --model_name_or_path that has one.")
    option = "--tokenizer_name" if model_args.tokenizer_name else "--model_name_or_path"
    return name and from_name(AutoTokenizer.from_pretrained, name, option, **model_args.hub_kwargs())


def load_model(auto_class, model_args: ModelArguments, config, tokenizer=None):
    """`auto_class` (e.g. `AutoModelForMaskedLM`) from `--model_name_or_path`, or a new one from `config`; an error
    when `tokenizer` has more tokens than the model has embeddings (its ids past them have none)."""
    name = model_args.model_name_or_path
    if name is None:
        logger.info("Training a new model from scratch")
        model = auto_class.from_config(config, trust_remote_code=model_args.trust_remote_code)
    elif os.path.isdir(name) and (problem := weights_problem(Path(name))):
        raise ValueError(f"Cannot load --model_name_or_path {name}: {problem}.")
    else:
        options = model_args.hub_kwargs() | {"ignore_mismatched_sizes": model_args.ignore_mismatched_sizes}
        model = from_name(auto_class.from_pretrained, name, "--model_name_or_path", config=config, **options)
    if tokenizer is not None and len(tokenizer) > (size := model.get_input_embeddings().num_embeddings):
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but the model's vocabulary only {size} (vocab_size). Use the "
            f"model's own tokenizer or, training from scratch, --config_overrides vocab_size={len(tokenizer)}."
        )
    return model


def check_max_seq_length(max_seq_length: int | None, config, tokenizer) -> int:
    """`max_seq_length`, or the model's n (capped by the tokenizer) when not given; an error above n (W is n x n)."""
    n = config.max_position_embeddings
    if max_seq_length is None:
        return min(n, tokenizer.model_max_length)
    if max_seq_length > n:
        raise ValueError(
            f"--max_seq_length {max_seq_length} is larger than the model's spatial size n = max_position_embeddings "
            f"= {n}: pass at most {n}, or, from scratch, --config_overrides max_position_embeddings={max_seq_length}."
        )
    return max_seq_length


def choose_labels(config, names: list[str], model_args: ModelArguments, source: str) -> list[str]:
    """The label names, in id order, of a classifier for data labelled `names`: a checkpoint's own label map when it
    names its labels (so that its ids keep their meaning), else `names`. Labels the checkpoint does not know are an
    error naming them, unless `--ignore_mismatched_sizes` asks for a new head with the data's labels."""
    own = [config.id2label[i] for i in range(config.num_labels)]
    if not model_args.model_name_or_path or own == [f"LABEL_{i}" for i in range(len(own))]:
        return list(names)
    unknown = [name for name in names if name.lower() not in {label.lower() for label in own}]
    if not unknown:
        return own
    listed = ", ".join(f"{i} = {name!r}" for i, name in enumerate(own))
    if model_args.ignore_mismatched_sizes:
        head = "a new head" if len(names) != len(own) else "its head, whose rows now stand for the new labels"
        logger.warning(
            f"--ignore_mismatched_sizes: {source} has labels the model does not know ({', '.join(unknown)}); "
            f"fine-tuning {head}, with the data's labels {', '.join(names)} in place of the model's ({listed})."
        )
        return list(names)
    raise ValueError(
        f"{source}: label(s) {', '.join(map(repr, unknown))} are not labels of the model "
        f"{model_args.model_name_or_path} (its labels: {listed}). Use them, or pass --ignore_mismatched_sizes to "
        "fine-tune a new head on the data's."
    )


def set_labels(config, names: list[str] | None) -> None:
    """Make `config` a classifier of the labels `names` (in id order), or a regression model (`names` None)."""
    if names is None:
        config.num_labels, config.problem_type = 1, "regression"
    else:
        config.id2label, config.label2id = dict(enumerate(names)), {name: i for i, name in enumerate(names)}
        config.problem_type = "single_label_classification"


class CheckedCollator:
    """`collator`, then a check of each batch on the CPU: its `input_ids` below `input_ids` (the vocabulary size) and
    its integer `labels` below `labels` (the number of classes, or the vocabulary size), or -100. A bad id thus gives
    this clear error on every device (an accelerator fails with a device-side assert), at no synchronisation."""

    ADVICE = {
        "input_ids": "the tokenizer does not match the model's vocabulary (vocab_size); use the model's tokenizer.",
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


def load_data_files(data_files: dict, cache_dir: str | None = None, streaming: bool = False, **read_kwargs):
    """A `DatasetDict` (with `streaming`, read as it goes) from local files, `{split: path}`, all of one format, which
    the extension names (`DATA_FILE_BUILDERS`; .txt gives a "text" column, a line each). `read_kwargs` go to it."""
    extensions = set()
    for split, path in data_files.items():
        if not os.path.isfile(path):
            raise FileNotFoundError(f"The {split} file {path!r} does not exist; check the --{split}_file path.")
        extension = path.rsplit(".", 1)[-1].lower()
        if extension not in DATA_FILE_BUILDERS:
            known = ", ".join(DATA_FILE_BUILDERS)
            raise ValueError(f"The {split} file {path!r} has an unsupported extension {extension!r} (not {known}).")
        extensions.add(extension.replace("jsonl", "json"))
        if extension != "parquet":
            check_text_file(path, f"The {split} file")
        if extension in ("csv", "tsv") and not read_kwargs.get("column_names"):
            with open(path, encoding="utf-8-sig") as file:  # `datasets` fails on a file of one header line
                if len(list(itertools.islice((line for line in file if line.strip()), 2))) < 2:
                    raise ValueError(f"The {split} file {path} has no examples (only a header).")
    if len(extensions) > 1:
        raise ValueError(f"All data files must have the same format, got {sorted(extensions)}: {data_files}.")
    extension = extensions.pop()
    builder = DATA_FILE_BUILDERS[extension]
    kwargs = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if extension == "tsv" else {}
    try:
        return datasets.load_dataset(
            builder, data_files=data_files, cache_dir=cache_dir, streaming=streaming, **kwargs, **read_kwargs
        )
    except Exception as error:  # datasets raises many types (ArrowInvalid, DatasetGenerationError, ...) for bad files
        raise ValueError(f"Could not read {', '.join(data_files.values())} as {builder}: {error}") from error


def load_hub_dataset(data_args, model_args: ModelArguments, config_name: str | None = None, **kwargs):
    """`--dataset_name` from the Hub, in the configuration `config_name` (else `--dataset_config_name`), or a folder
    written by `save_to_disk`, whose splits are used as they are. `kwargs` go to `datasets.load_dataset`."""
    name = data_args.dataset_name
    if os.path.isfile(os.path.join(name, "dataset_dict.json")):
        return datasets.load_from_disk(name)
    config_name = config_name or getattr(data_args, "dataset_config_name", None)
    return datasets.load_dataset(name, config_name, cache_dir=model_args.cache_dir, token=model_args.token, **kwargs)


def require_columns(dataset, columns, source: str, hint: str = "Rename the columns in the file.") -> None:
    """An error naming the `columns` that `dataset` (read from `source`) lacks, and `hint`."""
    if missing := [column for column in columns if column not in dataset.column_names]:
        raise ValueError(f"{source} has no column(s) {missing} (its columns: {dataset.column_names}). {hint}")


def take_split(data, split: str, flag: str, max_samples: int | None = None):
    """The first `max_samples` examples of `data[split]` (all when None); an error without it (`flag` needs it)."""
    if split not in data:
        raise ValueError(f"{flag} needs {split} data; the data has {list(data) or 'none'}.")
    if max_samples is None:
        return data[split]
    if isinstance(data[split], datasets.IterableDataset):
        return data[split].take(max_samples)
    return data[split].select(range(min(max_samples, len(data[split]))))


def weights_problem(folder: Path) -> str | None:
    """Why the model weights in `folder` cannot be read (missing, truncated or corrupt), or None."""
    names = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "adapter_model.safetensors")
    present = [folder / name for name in names if (folder / name).is_file()]
    if not present:
        return "it has no model weights (model.safetensors or pytorch_model.bin)"
    for path in [path for path in present if path.suffix == ".safetensors"]:
        try:
            with safe_open(str(path), framework="pt") as weights:
                weights.keys()
        except Exception as error:  # noqa: BLE001 (safetensors has its own types for a bad header or a short file)
            return f"{path} is truncated or corrupt ({error})"
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """Why the Trainer checkpoint `folder` cannot be resumed from (a file missing, unreadable, cut short), or None."""
    if problem := weights_problem(folder):
        return problem
    for path in (folder / "trainer_state.json", folder / "optimizer.pt", folder / "scheduler.pt"):
        if not path.is_file() or path.stat().st_size == 0:
            return f"{path} is missing or empty"
        # torch.save writes zip archives; a file cut short lacks the archive's closing directory.
        if path.suffix == ".pt" and not zipfile.is_zipfile(path):
            return f"{path} is truncated or corrupt"
    try:
        json.loads((folder / "trainer_state.json").read_text())
    except ValueError as error:
        return f"{folder / 'trainer_state.json'} is not readable JSON ({error})"
    return None


def resolve_checkpoint(training_args: TrainingArguments) -> str | None:
    """`--resume_from_checkpoint`: a checkpoint, or of a run directory's `checkpoint-*` folders the newest complete one
    (a run killed while saving leaves an incomplete one behind), logging why each newer one is skipped."""
    path = training_args.resume_from_checkpoint
    if path is None:
        return None
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--resume_from_checkpoint {path!r} is not a directory; pass a checkpoint-* folder.")
    skipped = []
    for checkpoint in checkpoint_folders(Path(path))[::-1] or [Path(path)]:
        if problem := checkpoint_problem(checkpoint):
            skipped.append(f"{checkpoint.name}: {problem}")
            continue
        for reason in skipped:
            logger.warning(f"Skipping the incomplete checkpoint {reason}")
        logger.warning(f"Resuming from {checkpoint}")
        return str(checkpoint)
    raise ValueError(f"No complete checkpoint to resume from in {path}: {'; '.join(skipped)}.")


# Settings that may change when a run is resumed without changing what it trains: where and how often it reports,
# saves and evaluates, and how long it goes on.
BOOKKEEPING = re.compile(
    r"eval|predict|test|log|hub|report|save|^do_|output_dir|resume|run_name|max_steps|epochs|^token$|cache"
)


class RunSettings(TrainerCallback):
    """The settings of a run that shape its training (every argument but bookkeeping), written into every checkpoint
    it saves (`run_settings.json`), so that a resume can say how the run that wrote its checkpoint differed."""

    def __init__(self, arguments):
        values = {}
        for args in arguments:
            values |= args.to_dict() if isinstance(args, TrainingArguments) else asdict(args)
        settings = {key: value for key, value in values.items() if not BOOKKEEPING.search(key)}
        self.settings = json.loads(json.dumps(settings, default=str))

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and checkpoint.is_dir():
            (checkpoint / "run_settings.json").write_text(json.dumps(self.settings, indent=1, sort_keys=True))

    def compare(self, checkpoint: str) -> None:
        """Log each setting in which the run that wrote `checkpoint` differs from this one."""
        path = Path(checkpoint) / "run_settings.json"
        if not path.is_file():
            logger.warning(f"{checkpoint} does not say which settings wrote it (run_settings.json); not compared.")
            return
        saved, now = json.loads(path.read_text()), self.settings
        keys = [key for key in sorted(saved | now) if saved.get(key) != now.get(key)]
        if changed := [f"{key} {saved.get(key)!r} (this run: {now.get(key)!r})" for key in keys]:
            logger.warning(
                f"{checkpoint} was written by a run with other settings: {'; '.join(changed)}. The optimizer and "
                "learning-rate schedule continue from the checkpoint's."
            )


def train_and_save(trainer, num_train_samples: int | None, arguments) -> None:
    """Train (resuming if asked; `arguments` go to `RunSettings`), then save the model, the metrics and the state."""
    settings = RunSettings(arguments)
    trainer.add_callback(settings)
    if checkpoint := resolve_checkpoint(trainer.args):
        settings.compare(checkpoint)
    metrics = trainer.train(resume_from_checkpoint=checkpoint).metrics
    trainer.save_model()
    if num_train_samples is not None:  # unknown for a streamed dataset
        metrics["train_samples"] = num_train_samples
    record_metrics(trainer, "train", metrics)
    trainer.save_state()


def record_metrics(trainer, split: str, metrics: dict) -> None:
    """Log `metrics` and merge them into `<split>_results.json` and `all_results.json` of the output directory."""
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, metrics)


def write_predictions(path: str, columns: dict[str, list]) -> None:
    """A predictions file: a header of `index` and the `columns`' names, then a row per example, tab-separated."""
    rows = ["\t".join(map(str, (i, *row))) + "\n" for i, row in enumerate(zip(*columns.values()))]
    Path(path).write_text("\t".join(["index", *columns]) + "\n" + "".join(rows), encoding="utf-8")
