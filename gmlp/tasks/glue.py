"""GLUE for `run_glue.py`: the tasks, GLUE's own folders, custom files, label checks and the metric. Every dataset
it returns has the columns and label names of the Hub's `nyu-mll/glue`, whatever it was read from."""

import logging
import os
from dataclasses import dataclass

import datasets
import numpy as np
import pandas as pd

from .metrics import load_metric
from .training import load_data_files, require_columns

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TextClassificationTask:
    """A text-classification (or regression) task: a GLUE task, with its Hub columns and labels and the fields of
    GLUE's TSV files that hold them, or the user's own data (`custom_task`, which has no GLUE folder)."""

    name: str
    text_columns: tuple[str, ...]  # Hub column names, e.g. ("sentence1", "sentence2")
    label_names: tuple[str, ...] | None  # None for regression (STS-B)
    folder: str | None = None  # the task's folder in GLUE's layout, e.g. "SST-2"
    tsv_fields: tuple[str, ...] = ()  # the TSV header fields of the text columns, then of the label
    headerless_fields: tuple[str, ...] | None = None  # the fields of CoLA's train/dev files, which have no header
    eval_splits: tuple[str, ...] = ("validation",)
    test_splits: tuple[str, ...] = ("test",)
    ids_allowed: bool = True  # labels may be given as ids (0, 1, ...) as well as names

    @property
    def is_regression(self) -> bool:
        return self.label_names is None


PAIR = ("sentence1", "sentence2")
# Each task: its name, Hub text columns and labels, folder in GLUE's layout, and TSV fields (texts, then label).
GLUE_TASKS = {
    task.name: task
    for task in [
        TextClassificationTask("cola", ("sentence",), ("unacceptable", "acceptable"), "CoLA", ("sentence", "label"),
                               headerless_fields=("source", "label", "orig_label", "sentence")),
        TextClassificationTask("sst2", ("sentence",), ("negative", "positive"), "SST-2", ("sentence", "label")),
        TextClassificationTask("mrpc", PAIR, ("not_equivalent", "equivalent"), "MRPC",
                               ("#1 String", "#2 String", "Quality")),
        TextClassificationTask("stsb", PAIR, None, "STS-B", (*PAIR, "score")),
        TextClassificationTask("qqp", ("question1", "question2"), ("not_duplicate", "duplicate"), "QQP",
                               ("question1", "question2", "is_duplicate")),
        TextClassificationTask("mnli", ("premise", "hypothesis"), ("entailment", "neutral", "contradiction"), "MNLI",
                               (*PAIR, "gold_label"), eval_splits=("validation_matched", "validation_mismatched"),
                               test_splits=("test_matched", "test_mismatched")),
        TextClassificationTask("qnli", ("question", "sentence"), ("entailment", "not_entailment"), "QNLI",
                               ("question", "sentence", "label")),
        TextClassificationTask("rte", PAIR, ("entailment", "not_entailment"), "RTE", (*PAIR, "label")),
        TextClassificationTask("wnli", PAIR, ("not_entailment", "entailment"), "WNLI", (*PAIR, "label")),
    ]
}  # fmt: skip


def get_task(name: str) -> TextClassificationTask:
    """The GLUE task `name` (case-insensitive: "sst2", "SST-2" and "sst-2" all work)."""
    key = name.lower().replace("-", "")
    if key not in GLUE_TASKS:
        raise ValueError(f"Unknown GLUE task {name!r}; choose one of {', '.join(GLUE_TASKS)}.")
    return GLUE_TASKS[key]


def load_glue_dir(glue_dir: str, task: TextClassificationTask, splits) -> datasets.DatasetDict:
    """The `splits` of `task` from a GLUE folder (`<glue_dir>/<folder>/{train,dev,test}.tsv`, GLUE's own layout), or
    `.jsonl` files there with the Hub's columns (e.g. MNLI's `dev_matched.jsonl`). Test files have no labels: their
    `label` is -1, as on the Hub."""
    task_dir = os.path.join(glue_dir, task.folder)
    if not os.path.isdir(task_dir):
        raise FileNotFoundError(
            f"No {task.folder} folder in --glue_dir {glue_dir!r}: expected GLUE's layout, {task_dir}/train.tsv, ..."
        )
    result = {}
    for split in splits:
        stem, labelled = os.path.join(task_dir, split.replace("validation", "dev")), not split.startswith("test")
        path = next((stem + ext for ext in (".tsv", ".jsonl") if os.path.isfile(stem + ext)), None)
        if path is None:
            raise FileNotFoundError(
                f"The {split} split of {task.name} needs {stem}.tsv (GLUE's layout) or {stem}.jsonl; neither exists."
            )
        headerless = task.headerless_fields if labelled and path.endswith(".tsv") else None
        first_line = 1 if headerless or path.endswith(".jsonl") else 2
        if path.endswith(".tsv"):
            dataset = load_data_files({split: path}, column_names=headerless, na_filter=False)[split]
            dataset = dataset.cast(datasets.Features(dict.fromkeys(dataset.column_names, datasets.Value("string"))))
            fields = dict(zip(task.tsv_fields, (*task.text_columns, "label")))  # TSV field -> Hub column
            fields = {field: column for field, column in fields.items() if labelled or column != "label"}
            require_columns(dataset, fields, path, hint=f"Is it GLUE's {task.folder} file?")
            short = min((i for f in fields for i, value in enumerate(dataset[f]) if value is None), default=None)
            if short is not None:
                raise ValueError(f"{path}, line {short + first_line}: fewer fields than the header's.")
            fields |= {"index": "idx"} if "index" in dataset.column_names else {}
            dataset = dataset.select_columns(list(fields)).rename_columns({f: c for f, c in fields.items() if f != c})
        else:
            dataset = load_data_files({split: path})[split]
        result[split] = encode_task_labels(dataset, task, path, labelled, first_line)
    return datasets.DatasetDict(result)


def encode_label(value, task: TextClassificationTask, where: str) -> int | float:
    """`value` (a label name, or an id as int or string) as the task's label id, or as a float for regression; an
    error naming `where` and the task's labels for a value that is not one of them."""
    if task.is_regression:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: label {value!r} is not a number; {task.name} is a regression task.") from None
    ids = {name.lower(): i for i, name in enumerate(task.label_names)}
    if task.ids_allowed:  # as numbers (1.0 == 1: a csv column of ids is read as floats when a cell is empty) or text
        ids |= {key: i for i in range(len(ids)) for key in (i, str(i))}
    key = value.lower() if isinstance(value, str) else value
    if key not in ids:
        listed = ", ".join(f"{i} = {name!r}" for i, name in enumerate(task.label_names))
        raise ValueError(f"{where}: label {value!r} is not a {task.name} label; the labels are {listed}.")
    return ids[key]


def check_no_blank_labels(dataset: datasets.Dataset, source: str) -> None:
    """An error naming the examples of `dataset` (read from `source`) whose label is empty."""
    if blank := [i for i, value in enumerate(dataset["label"]) if pd.isna(value) or str(value).strip() == ""]:
        shown = ", ".join(str(index) for index in blank[:5]) + (", ..." if len(blank) > 5 else "")
        where = f"example {shown}, counting from 0 after the header"
        raise ValueError(f"{source}: {len(blank)} example(s) have an empty label ({where}). Fill in or remove them.")


def encode_task_labels(dataset, task: TextClassificationTask, source: str, labelled=True, first_line=None):
    """`dataset` with `task`'s Hub columns and features, its labels checked and encoded as the task's ids (-1, as on
    the Hub, when not `labelled`). An error names its row: by its line in `source` when `first_line` (that of the
    first example) is given, else by its index."""
    columns = (*task.text_columns, "label") if labelled else task.text_columns
    require_columns(dataset, columns, f"{source} (--task_name {task.name})", hint=glue_file_hint(dataset, task))
    labels = [-1] * len(dataset)
    if labelled:
        check_no_blank_labels(dataset, source)
        where = f"{source}, line {{}}" if first_line is not None else f"{source}, example {{}}"
        values = dataset["label"] if task.ids_allowed or task.is_regression else map(str, dataset["label"])
        labels = [encode_label(value, task, where.format(i + (first_line or 0))) for i, value in enumerate(values)]
    dataset = dataset.remove_columns([c for c in ("label",) if c in dataset.column_names]).add_column("label", labels)
    if "idx" not in dataset.column_names:
        dataset = dataset.add_column("idx", list(range(len(dataset))))
    label = datasets.Value("float32") if task.is_regression else datasets.ClassLabel(names=list(task.label_names))
    features = dict.fromkeys(task.text_columns, datasets.Value("string"))
    features |= {"label": label, "idx": datasets.Value("int32")}
    return dataset.select_columns(list(features)).cast(datasets.Features(features))


def glue_file_hint(dataset, task: TextClassificationTask | None = None) -> str:
    """What to do about a file without the expected columns: read it with --glue_dir if its header is that of one of
    GLUE's own TSV files, else rename its columns."""
    header = {column.lstrip("\ufeff") for column in dataset.column_names}
    for glue in [task] if task and task.tsv_fields else GLUE_TASKS.values():
        if set(glue.tsv_fields) <= header:
            return (
                f"It is GLUE's own {glue.folder} file: read it with --task_name {glue.name} --glue_dir DIR, where DIR "
                f"holds {glue.folder}/train.tsv and {glue.folder}/dev.tsv (GLUE's layout)."
            )
    text = "/".join(task.text_columns) if task else "`sentence1`/`sentence2` (or the first two other columns)"
    return f"Rename the columns in the file: the text is read from {text}, the labels from `label`."


def custom_task(dataset, source: str) -> TextClassificationTask:
    """A task for a custom csv/json dataset: its text columns, and its labels (the distinct labels of `dataset`, in
    order, as strings), or regression (logged) for labels with decimals."""
    require_columns(dataset, ["label"], source, hint=glue_file_hint(dataset))
    check_no_blank_labels(dataset, source)
    text_columns = infer_text_columns(dataset.column_names)
    if dataset.features["label"].dtype.startswith("float"):
        logger.warning(
            f"{source}: its labels are numbers with decimals ({', '.join(map(str, dataset.unique('label')[:4]))}, "
            "...), so the task is regression. If they are classes, write them as integers or names."
        )
        return TextClassificationTask("custom", text_columns, None)
    label_names = tuple(str(label) for label in sorted(dataset.unique("label")))
    return TextClassificationTask("custom", text_columns, label_names, ids_allowed=False)


def infer_text_columns(column_names: list[str]) -> tuple[str, ...]:
    """The text columns of a custom dataset: `sentence1`/`sentence2` if present, else the first one or two
    non-label columns (as in Transformers' run_glue)."""
    if "sentence1" in column_names:
        return ("sentence1", "sentence2") if "sentence2" in column_names else ("sentence1",)
    others = [name for name in column_names if name not in ("label", "idx")]
    if not others:
        raise ValueError(f"The data has no text column besides the label (its columns: {column_names}).")
    return tuple(others[:2])


def glue_compute_metrics(task_name: str | None, is_regression: bool, num_labels: int):
    """A `compute_metrics` function for the Trainer: the packaged `glue` metric of the task, or for custom data
    Pearson/Spearman for regression, accuracy and F1 for two classes, accuracy for more."""
    config_name = task_name or ("stsb" if is_regression else "mrpc" if num_labels == 2 else "mnli")
    metric = load_metric("glue", config_name)

    def compute_metrics(eval_prediction):
        logits = eval_prediction.predictions
        logits = logits[0] if isinstance(logits, tuple) else logits
        predictions = np.squeeze(logits) if is_regression else np.argmax(logits, axis=1)
        return metric.compute(predictions=predictions, references=eval_prediction.label_ids)

    return compute_metrics
