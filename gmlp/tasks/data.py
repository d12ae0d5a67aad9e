"""Reading the data with clear errors: local files, Hub datasets or `save_to_disk` folders, columns and splits."""

import csv
import itertools
import os

import datasets

from ..tokenization_gmlp import check_text_file
from .errors import ScriptError

# File extension -> `datasets` builder. GLUE's sentences contain `"`, so TSV is read unquoted.
DATA_FILE_BUILDERS = {"txt": "text", "csv": "csv", "tsv": "csv", "json": "json", "jsonl": "json", "parquet": "parquet"}


def check_text(path: str, what: str) -> None:
    """`check_text_file`'s error (an empty, blank or non-UTF-8 file) as a `ScriptError`."""
    try:
        check_text_file(path, what)
    except ValueError as error:
        raise ScriptError(str(error)) from None


def load_data_files(data_files: dict, *, cache_dir: str | None = None, streaming: bool = False, **read_kwargs):
    """A `DatasetDict` (or, `streaming`, an `IterableDatasetDict`) of local files of one format, `{split: path}`."""
    extensions = set()
    for split, path in data_files.items():
        extension = path.rsplit(".", 1)[-1].lower()
        if extension not in DATA_FILE_BUILDERS:
            raise ScriptError(
                f"The {split} file {path!r} has an unsupported extension {extension!r} (not {', '.join(DATA_FILE_BUILDERS)})."
            )
        extensions.add(extension.replace("jsonl", "json"))
        if extension != "parquet":
            check_text(path, f"The {split} file")
        if extension in ("csv", "tsv") and not read_kwargs.get("column_names"):
            with open(path, encoding="utf-8-sig") as file:  # `datasets` fails on a file of one header line
                if len(list(itertools.islice((line for line in file if line.strip()), 2))) < 2:
                    raise ScriptError(f"The {split} file {path} has no examples (only a header).")
    if len(extensions) > 1:
        raise ScriptError(f"All data files must have the same format, got {sorted(extensions)}: {data_files}.")
    extension = extensions.pop()
    builder = DATA_FILE_BUILDERS[extension]
    kwargs = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if extension == "tsv" else {}
    kwargs |= {"cache_dir": cache_dir, "streaming": streaming, **read_kwargs}
    splits = {}
    for split, path in data_files.items():  # each on its own: the files may differ in columns (a test file's labels)
        try:
            splits[split] = datasets.load_dataset(builder, data_files={split: path}, split=split, **kwargs)
        except Exception as error:  # noqa: BLE001 (datasets raises ArrowInvalid, DatasetGenerationError, ...)
            while error.__cause__ or error.__context__:  # the first error: the one that says what is wrong
                error = error.__cause__ or error.__context__
            raise ScriptError(f"Could not read {path} as {builder}: {error}") from None
    return (datasets.IterableDatasetDict if streaming else datasets.DatasetDict)(splits)


def load_hub_dataset(data_args, model_args, config_name: str | None = None, **kwargs):
    """`--dataset_name` from the Hub (or its cache), in `config_name` (else `--dataset_config_name`), or from a folder
    written by `save_to_disk`."""
    name = data_args.dataset_name
    if os.path.isfile(os.path.join(name, "dataset_dict.json")):
        return datasets.load_from_disk(name)
    config_name = config_name or getattr(data_args, "dataset_config_name", None)
    try:
        return datasets.load_dataset(
            name, config_name, cache_dir=model_args.cache_dir, token=model_args.token, **kwargs
        )
    except (ConnectionError, datasets.exceptions.DatasetNotFoundError) as error:
        where = "cannot be reached (offline)" if isinstance(error, ConnectionError) else "has no such dataset"
        raise ScriptError(
            f"--dataset_name {name}: not a folder saved by `save_to_disk`, not in the datasets cache, and the Hub {where}. Load it once online (it is cached), pass a folder saved with `save_to_disk`, or local files (--train_file, --validation_file)."
        ) from None


def require_columns(dataset, columns, source: str, hint: str = "Rename the columns in the file.") -> None:
    """An error naming the `columns` that `dataset` (read from `source`) lacks."""
    if missing := [column for column in columns if column not in dataset.column_names]:
        raise ScriptError(f"{source} has no column(s) {missing} (its columns: {dataset.column_names}). {hint}")


def is_text(feature) -> bool:
    """Whether the `datasets` feature `feature` holds strings."""
    return getattr(feature, "dtype", None) in ("string", "large_string")


def take_split(data, split: str, flag: str, max_samples: int | None = None, *, source_flag: str | None = None):
    """The first `max_samples` examples of `data[split]` (all when None); an error now, not after training, if none."""
    if split not in data and source_flag:
        raise ScriptError(f"{flag} needs {split} data: pass {source_flag} (the data has {list(data) or 'none'}).")
    if split not in data:
        raise ScriptError(f"{flag} needs {split} data; the data has {list(data) or 'none'}.")
    if isinstance(data[split], datasets.IterableDataset):  # a stream, which cannot be counted ahead
        return data[split] if max_samples is None else data[split].take(max_samples)
    if len(data[split]) == 0:
        raise ScriptError(f"{flag} needs {split} data; the {split} split has no examples.")
    return data[split] if max_samples is None else data[split].select(range(min(max_samples, len(data[split]))))
