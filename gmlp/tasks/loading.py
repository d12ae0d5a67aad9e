"""Loading what a run starts from, with clear errors: the files and folders named checked first, then the config, the
tokenizer, the model and the sequence length."""

import contextlib
import copy
import difflib
import json
import logging
import os
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.constants import is_offline_mode
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError, StrictDataclassError
from huggingface_hub.utils import validate_repo_id
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer

from ..configuration_gmlp import PRESETS, GMLPConfig
from .checkpoints import weights_problem
from .errors import ScriptError

logger = logging.getLogger(__name__)

# The options that name a file or a folder here, and which of the two.
LOCAL_OPTIONS = {"train_file": "file", "validation_file": "file", "test_file": "file", "glue_dir": "folder"}
LOCAL_OPTIONS |= {"train_dir": "folder", "validation_dir": "folder", "test_dir": "folder"}
LOCAL_OPTIONS |= {"resume_from_checkpoint": "folder"}
# The options that name a folder here or a Hub id (a model's, or a dataset's).
HUB_OPTIONS = ("model_name_or_path", "config_name", "tokenizer_name", "dataset_name")


def check_named_paths(model_args, *arguments, presets: dict = PRESETS) -> None:
    """Every file and folder that `model_args` and the other parsed `arguments` name, checked before anything looks on
    the Hub: one error naming all that are not here.

    A name that may be a Hub id (`HUB_OPTIONS`, not a preset) is a local path when it is a folder here or cannot be a
    Hub id (`local_only`); else, offline, a model's must be in the Hub cache. Online, it is left to the Hub: only the
    Hub can tell a Hub id from a folder missing here (Transformers takes every name that is no folder for a Hub id).
    A dataset's Hub id is left to `datasets`, which has a cache of its own."""
    missing, hub_ids, hints = [], [], []
    for args in (model_args, *arguments):
        for name, kind in LOCAL_OPTIONS.items():
            path = getattr(args, name, None)
            if path is not None and not (os.path.isfile if kind == "file" else os.path.isdir)(path):
                missing.append(f"--{name} {path}: no such {kind}")
        for name in HUB_OPTIONS:
            value = getattr(args, name, None)
            if value is None or value in presets or os.path.exists(value):
                continue
            if local_only(value):
                missing.append(f"--{name} {value}: no such folder")
            elif name == "dataset_name":  # left to `datasets`: its own cache, and its builders' names (imagefolder)
                continue
            elif not is_offline_mode():
                hub_ids.append(f"--{name} {value}")
            elif not in_hub_cache(value, model_args):
                missing.append(
                    f"--{name} {value}: not a folder here, and as a Hub id it needs the Hub, but this run is offline (HF_HUB_OFFLINE) and the Hub cache does not hold it"
                )
                hints += [preset_hint(value, presets)] if name == "config_name" else []
    if missing:
        if hub_ids:
            hints.append(f" ({', '.join(hub_ids)}: not a folder here either, so taken for a Hub id.)")
        raise ScriptError(f"{'; '.join(missing)}.{''.join(hints)}")


def local_only(name: str) -> bool:
    """Whether `name` can only be a path here: it is no Hub id by huggingface_hub's rule (absolute, `./` or `../`,
    more than one `/`, characters a Hub id has not, ...), or it is `FOLDER/NAME` with FOLDER a folder here."""
    try:
        validate_repo_id(name)
    except HFValidationError:
        return True
    return "/" in name and os.path.isdir(name.split("/")[0])


def in_hub_cache(repo_id: str, model_args) -> bool:
    """Whether the Hub cache holds the model `repo_id` at `--model_revision` (looked up on this machine only)."""
    try:
        snapshot_download(
            repo_id, revision=model_args.model_revision, cache_dir=model_args.cache_dir, local_files_only=True
        )
    except LocalEntryNotFoundError:
        return False
    return True


def preset_hint(name: str, presets) -> str:
    """The preset nearest to the misspelt `name`, and the presets, for a message."""
    near = difflib.get_close_matches(name, presets, n=1, cutoff=0.6)
    return (f" Did you mean the preset {near[0]!r}?" if near else "") + f" Presets: {', '.join(presets)}."


def from_name(load, name: str, option: str, presets=(), **kwargs):
    """`load(name, **kwargs)` (a `from_pretrained`), a name that is neither a directory nor on the Hub an error."""
    try:
        return load(name, **kwargs)
    except OSError as error:
        if os.path.exists(name):
            raise
        offline = is_offline_mode() or "connect" in str(error)
        hub = "could not be reached to look it up" if offline else "has no such model"
        hint = preset_hint(name, presets) if presets else ""
        what = "neither a preset nor" if presets else "not"
        raise ScriptError(
            f"{option} {name!r} is {what} a directory, and the Hub {hub} ({str(error).splitlines()[0]}).{hint}"
        ) from None


def load_config(model_args, config_class=GMLPConfig, presets: dict = PRESETS):
    """The config: a preset of `config_class`, a directory / Hub id, or the checkpoint's; then `--config_overrides`."""
    name = model_args.config_name or model_args.model_name_or_path
    if name is None:
        raise ScriptError("No model given: pass --model_name_or_path (a checkpoint) or --config_name (e.g. a preset).")
    if model_args.config_name in presets:
        config = config_class.from_preset(name)
    elif model_args.config_name is None and name in presets:
        raise ScriptError(f"--model_name_or_path {name} is a preset, not a checkpoint: pass it as --config_name.")
    else:
        option, known = ("--config_name", presets) if model_args.config_name else ("--model_name_or_path", ())
        config = from_name(AutoConfig.from_pretrained, name, option, known, **model_args.hub_kwargs())
    if not (overrides := model_args.config_overrides):
        return config
    if not all("=" in item for item in overrides.split(",")):
        raise ScriptError(f"--config_overrides takes `key=value` pairs separated by commas, got {overrides!r}.")
    pairs = dict(item.split("=", 1) for item in overrides.split(","))
    # `update_from_string` converts a value to the type of the field's current one; a field now None has none.
    unset = {key: value for key, value in pairs.items() if getattr(config, key, 0) is None}
    try:
        for key, value in unset.items():
            with contextlib.suppress(ValueError):  # a JSON number, true, false or null; else the string
                value = json.loads(value)
            setattr(config, key, value)
        if others := ",".join(f"{key}={value}" for key, value in pairs.items() if key not in unset):
            config.update_from_string(others)
        config.validate()
    except (ValueError, TypeError, StrictDataclassError) as error:
        keys = f" Valid keys: {sorted(config.to_dict())}." if isinstance(error, ValueError) else ""
        raise ScriptError(f"--config_overrides {overrides!r}: {error.__cause__ or error}.{keys}") from None
    logger.info(f"Config after --config_overrides: {config}")
    return config


def load_tokenizer(model_args, *, required: bool = True):
    """The tokenizer of `--tokenizer_name`, else of `--model_name_or_path`; else None (an error if `required`)."""
    name = model_args.tokenizer_name or model_args.model_name_or_path
    if name is None and required:
        raise ScriptError("No tokenizer: pass --tokenizer_name, or a --model_name_or_path that has one.")
    option = "--tokenizer_name" if model_args.tokenizer_name else "--model_name_or_path"
    return None if name is None else from_name(AutoTokenizer.from_pretrained, name, option, **model_args.hub_kwargs())


def load_model(auto_class, model_args, config, tokenizer=None):
    """`auto_class` from `--model_name_or_path`, or new from `config`; errors for weights of other shapes than
    `config`'s and for a `tokenizer` with more tokens than the model has embeddings."""
    name = model_args.model_name_or_path
    if name is None:
        logger.info("Training a new model from scratch")
        model = auto_class.from_config(config, trust_remote_code=model_args.trust_remote_code)
    elif os.path.isdir(name) and (problem := weights_problem(Path(name))):
        raise ScriptError(f"Cannot load --model_name_or_path {name}: {problem}.")
    else:
        options = model_args.hub_kwargs() | {"ignore_mismatched_sizes": model_args.ignore_mismatched_sizes}
        try:
            model = from_name(auto_class.from_pretrained, name, "--model_name_or_path", config=config, **options)
        except RuntimeError as error:
            if "ignore_mismatched_sizes" not in str(error):
                raise
            raise ScriptError(f"--model_name_or_path {name}: {mismatch_advice(name, auto_class, config)}") from None
    if tokenizer is not None and len(tokenizer) > (size := model.get_input_embeddings().num_embeddings):
        raise ScriptError(
            f"The tokenizer has {len(tokenizer)} tokens but the model's vocabulary only {size} (vocab_size). Use the model's own tokenizer or, training from scratch, --config_overrides vocab_size={len(tokenizer)}."
        )
    return model


def mismatch_advice(folder: str, auto_class, config) -> str:
    """Which weights of the checkpoint `folder` have other shapes than this run's model, and the fix: a new head
    (`--ignore_mismatched_sizes`) where only the head differs, else dropping the `--config_overrides` that change the
    body's sizes (`--ignore_mismatched_sizes` would start its learned weights afresh)."""
    head, body = mismatched_weights(folder, auto_class, config)
    keep_n = (
        " (n itself can change: --config_overrides max_position_embeddings=N keeps the learned spatial weights)"
        if config.model_type == "gmlp"
        else ""
    )
    if not head + body:
        return f"some of its weights have other shapes than this run's model. For a new head (another number of labels) pass --ignore_mismatched_sizes; else drop the --config_overrides that change the model's sizes{keep_n}."
    labels = f"; the data has {config.num_labels} labels" if any(key.startswith("classifier") for key in head) else ""
    differ = f"its weights {', '.join(head + body)} have other shapes than this run's model{labels}"
    if not body:
        return f"{differ}. Pass --ignore_mismatched_sizes to start the head afresh (a new head for the data's labels)."
    return f"{differ}. Drop the --config_overrides that change the sizes of the model's body{keep_n}: --ignore_mismatched_sizes is for a new head only, and would start the body's learned weights afresh."


def mismatched_weights(folder: str, auto_class, config) -> tuple[list[str], list[str]]:
    """The weights of the checkpoint `folder` whose shapes differ from those of `auto_class` built from `config`, as
    "name (shape) (this run: shape)": the head's, then the body's (the base model's). A text model is compared at
    the checkpoint's n, since `from_pretrained` resizes the spatial weights to another n."""
    if not (files := sorted(Path(folder).glob("*.safetensors")) if os.path.isdir(folder) else []):
        return [], []
    if config.model_type == "gmlp":
        config = copy.deepcopy(config)
        config.max_position_embeddings = AutoConfig.from_pretrained(folder).max_position_embeddings
    with torch.device("meta"):
        model = auto_class.from_config(config)
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    head, body = [], []
    for path in files:
        with safe_open(str(path), framework="pt") as weights:
            for key in weights.keys():  # noqa: SIM118
                shape = tuple(weights.get_slice(key).get_shape())
                if expected.get(key, shape) != shape:
                    part = body if key.startswith(f"{model.base_model_prefix}.") else head
                    part.append(f"{key} {shape} (this run: {expected[key]})")
    return head, body


def check_max_seq_length(max_seq_length: int | None, config, tokenizer, model_args) -> int:
    """`max_seq_length` (default: the model's n, or the tokenizer's `model_max_length` if smaller, unless
    `--config_overrides` gives a checkpoint another n, which its saved tokenizer's length predates), at most n and more
    than the tokenizer's special tokens; it becomes the tokenizer's `model_max_length`, so that the saved tokenizer
    says the length the model trained at."""
    n = config.max_position_embeddings
    if max_seq_length is None:
        resized = model_args.model_name_or_path is not None and "max_position_embeddings" in overridden(model_args)
        max_seq_length = n if resized else min(n, tokenizer.model_max_length)
        if max_seq_length < n:
            logger.warning(
                f"--max_seq_length {max_seq_length}, the tokenizer's model_max_length (the model's n is {n}); pass --max_seq_length {n} to use all of n."
            )
    elif max_seq_length > n:
        raise ScriptError(
            f"--max_seq_length {max_seq_length} is larger than the model's spatial size n = max_position_embeddings = {n}: pass at most {n}, or --config_overrides max_position_embeddings={max_seq_length} (a checkpoint keeps its learned spatial weights; the new positions start untrained)."
        )
    elif max_seq_length <= (special := tokenizer.num_special_tokens_to_add()):
        raise ScriptError(
            f"--max_seq_length {max_seq_length} leaves no room for text: the tokenizer adds {special} special tokens to every sequence. Pass at least {special + 1}."
        )
    tokenizer.model_max_length = max_seq_length
    return max_seq_length


def overridden(model_args) -> set[str]:
    """The config fields that `--config_overrides` sets."""
    return {item.split("=", 1)[0] for item in (model_args.config_overrides or "").split(",") if item}
