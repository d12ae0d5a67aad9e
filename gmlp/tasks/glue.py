"""GLUE for `run_glue.py`: the task table, readers of GLUE's official TSV folders, label checks and metrics.

Every dataset this module returns has the columns and label names of the Hub's `nyu-mll/glue` (e.g. `sentence1`,
`sentence2`, `label`, `idx`), whether it comes from the Hub, a GLUE folder or a csv/json file.
"""

import csv
import logging
import math
import os
from dataclasses import dataclass

import datasets
import numpy as np

from .metrics import load_metric
from .training import check_text_file, require_columns

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TextClassificationTask:
    """A text-classification (or regression) task: a GLUE task, with its Hub columns and labels and where they are in
    GLUE's TSV files, or the user's own data (`custom_task`, which has no GLUE folder)."""

    name: str
    text_columns: tuple[str, ...]  # Hub column names, e.g. ("sentence1", "sentence2")
    label_names: tuple[str, ...] | None  # None for regression (STS-B)
    folder: str | None = None  # the task's folder in GLUE's data layout, e.g. "SST-2"
    tsv_columns: dict[str, str] | None = None  # Hub column -> TSV header field ("label" included)
    headerless_fields: tuple[str, ...] | None = None  # field names of CoLA's train/dev files, which have no header
    eval_splits: tuple[str, ...] = ("validation",)
    test_splits: tuple[str, ...] = ("test",)
    ids_allowed: bool = True  # labels may be given as ids (0, 1, ...) as well as names

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def num_labels(self) -> int:
        return 1 if self.is_regression else len(self.label_names)


_PAIR = {"sentence1": "sentence1", "sentence2": "sentence2"}
GLUE_TASKS = {
    task.name: task
    for task in [
        TextClassificationTask(
            name="cola",
            folder="CoLA",
            text_columns=("sentence",),
            label_names=("unacceptable", "acceptable"),
            tsv_columns={"sentence": "sentence", "label": "label"},
            headerless_fields=("source", "label", "orig_label", "sentence"),
        ),
        TextClassificationTask(
            name="sst2",
            folder="SST-2",
            text_columns=("sentence",),
            label_names=("negative", "positive"),
            tsv_columns={"sentence": "sentence", "label": "label"},
        ),
        TextClassificationTask(
            name="mrpc",
            folder="MRPC",
            text_columns=("sentence1", "sentence2"),
            label_names=("not_equivalent", "equivalent"),
            tsv_columns={"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality"},
        ),
        TextClassificationTask(
            name="stsb",
            folder="STS-B",
            text_columns=("sentence1", "sentence2"),
            label_names=None,
            tsv_columns={**_PAIR, "label": "score"},
        ),
        TextClassificationTask(
            name="qqp",
            folder="QQP",
            text_columns=("question1", "question2"),
            label_names=("not_duplicate", "duplicate"),
            tsv_columns={"question1": "question1", "question2": "question2", "label": "is_duplicate"},
        ),
        TextClassificationTask(
            name="mnli",
            folder="MNLI",
            text_columns=("premise", "hypothesis"),
            label_names=("entailment", "neutral", "contradiction"),
            tsv_columns={"premise": "sentence1", "hypothesis": "sentence2", "label": "gold_label"},
            eval_splits=("validation_matched", "validation_mismatched"),
            test_splits=("test_matched", "test_mismatched"),
        ),
        TextClassificationTask(
            name="qnli",
            folder="QNLI",
            text_columns=("question", "sentence"),
            label_names=("entailment", "not_entailment"),
            tsv_columns={"question": "question", "sentence": "sentence", "label": "label"},
        ),
        TextClassificationTask(
            name="rte",
            folder="RTE",
            text_columns=("sentence1", "sentence2"),
            label_names=("entailment", "not_entailment"),
            tsv_columns={**_PAIR, "label": "label"},
        ),
        TextClassificationTask(
            name="wnli",
            folder="WNLI",
            text_columns=("sentence1", "sentence2"),
            label_names=("not_entailment", "entailment"),
            tsv_columns={**_PAIR, "label": "label"},
        ),
    ]
}

# Split -> file stem in GLUE's layout.
SPLIT_FILES = {
    "train": "train",
    "validation": "dev",
    "validation_matched": "dev_matched",
    "validation_mismatched": "dev_mismatched",
    "test": "test",
    "test_matched": "test_matched",
    "test_mismatched": "test_mismatched",
}


def get_task(name: str) -> TextClassificationTask:
    """The GLUE task `name` (case-insensitive: "sst2", "SST-2" and "sst-2" all work)."""
    key = name.lower().replace("-", "")
    if key not in GLUE_TASKS:
        raise ValueError(f"Unknown GLUE task {name!r}; choose one of {', '.join(GLUE_TASKS)}.")
    return GLUE_TASKS[key]


def dataset_features(task: TextClassificationTask) -> datasets.Features:
    """The Hub's features for `task`: the text columns, `label` (a ClassLabel, or float32 for STS-B) and `idx`."""
    label = datasets.Value("float32") if task.is_regression else datasets.ClassLabel(names=list(task.label_names))
    return datasets.Features(
        {
            **{column: datasets.Value("string") for column in task.text_columns},
            "label": label,
            "idx": datasets.Value("int32"),
        }
    )


def load_glue_dir(glue_dir: str, task: TextClassificationTask, splits) -> datasets.DatasetDict:
    """The `splits` of `task` from a GLUE folder (`<glue_dir>/<folder>/{train,dev,test}.tsv`, GLUE's own layout).

    A split may also be a `.jsonl` file with the Hub's column names (e.g. MNLI's `dev_matched.jsonl`). Test files
    have no labels: their `label` is -1, as on the Hub.
    """
    task_dir = os.path.join(glue_dir, task.folder)
    if not os.path.isdir(task_dir):
        raise FileNotFoundError(
            f"No {task.folder} folder in --glue_dir {glue_dir!r}: expected GLUE's layout {task_dir}/train.tsv, dev.tsv."
        )
    result = {}
    for split in splits:
        stem = os.path.join(task_dir, SPLIT_FILES[split])
        if os.path.isfile(stem + ".tsv"):
            path = stem + ".tsv"
            check_text_file(path, f"The {split} file")
            rows = read_glue_tsv(path, task, is_test=split.startswith("test"))
        elif os.path.isfile(stem + ".jsonl"):
            path = stem + ".jsonl"
            check_text_file(path, f"The {split} file")
            rows = read_glue_jsonl(path, task)
        else:
            raise FileNotFoundError(
                f"The {split} split of {task.name} needs {stem}.tsv (GLUE's layout) or {stem}.jsonl; neither exists."
            )
        if not rows:
            raise ValueError(f"The {split} file {path} has no examples (only a header).")
        result[split] = datasets.Dataset.from_list(rows, features=dataset_features(task))
    return datasets.DatasetDict(result)


def read_glue_tsv(path: str, task: TextClassificationTask, is_test: bool = False) -> list[dict]:
    """The examples of one GLUE TSV file, with the Hub's columns; labels checked and mapped to ids."""
    # GLUE's sentences contain unbalanced `"`, so no quoting; MRPC's header starts with a byte-order mark.
    with open(path, encoding="utf-8-sig", newline="") as file:
        reader = csv.reader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        if task.headerless_fields and not is_test:
            header = list(task.headerless_fields)
        else:
            header = next(reader)
        wanted = {column: source for column, source in task.tsv_columns.items() if not (is_test and column == "label")}
        missing = [source for source in wanted.values() if source not in header]
        if missing:
            raise ValueError(
                f"{path} has no column(s) {missing} (its header: {header}); is it GLUE's {task.folder} file?"
            )
        positions = {column: header.index(source) for column, source in wanted.items()}
        # MNLI's gold label is the last column, after a variable number of annotator labels.
        if task.name == "mnli" and "label" in positions:
            positions["label"] = -1
        index_position = header.index("index") if "index" in header else None
        rows = []
        first_line = 1 if task.headerless_fields and not is_test else 2
        for line_number, fields in enumerate(reader, start=first_line):
            if len(fields) <= max(position for position in positions.values()):
                raise ValueError(
                    f"{path}, line {line_number}: {len(fields)} fields, fewer than the header's {len(header)}."
                )
            row = {column: fields[position] for column, position in positions.items()}
            row["label"] = -1 if is_test else encode_label(row["label"], task, f"{path}, line {line_number}")
            row["idx"] = int(fields[index_position]) if index_position is not None else len(rows)
            rows.append(row)
    return rows


def read_glue_jsonl(path: str, task: TextClassificationTask) -> list[dict]:
    """The examples of a JSON-lines file with the Hub's column names (labels as names or ids)."""
    dataset = datasets.load_dataset("json", data_files=path, split="train")
    require_columns(dataset, (*task.text_columns, "label"), path)
    return [
        {
            **{column: example[column] for column in task.text_columns},
            "label": encode_label(example["label"], task, f"{path}, line {index + 1}"),
            "idx": example.get("idx", index),
        }
        for index, example in enumerate(dataset)
    ]


def encode_label(value, task: TextClassificationTask, where: str) -> int | float:
    """`value` (a label name, or an id as int or string) as the task's label id, or as a float for regression.

    Raises ValueError naming `where` and the task's labels for a value that is not one of them.
    """
    if task.is_regression:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: label {value!r} is not a number; {task.name} is a regression task.") from None
    if isinstance(value, str):
        names = [name.lower() for name in task.label_names]
        if value.lower() in names:
            return names.index(value.lower())
        label_id = int(value) if value.isdigit() and task.ids_allowed else None
    elif isinstance(value, float) and value.is_integer() and task.ids_allowed:
        label_id = int(value)  # a csv column of ids is read as floats when a cell is empty elsewhere
    else:
        label_id = value if isinstance(value, int) and task.ids_allowed else None
    if label_id is None or not 0 <= label_id < task.num_labels:
        raise ValueError(
            f"{where}: label {value!r} is not a {task.name} label; the labels are "
            f"{', '.join(f'{i} = {name!r}' for i, name in enumerate(task.label_names))}."
        )
    return label_id


def check_no_blank_labels(dataset: datasets.Dataset, source: str) -> None:
    """Raise ValueError naming the examples of `dataset` (read from `source`) whose label is empty."""
    blank = [
        index
        for index, value in enumerate(dataset["label"])
        if value is None
        or (isinstance(value, float) and math.isnan(value))
        or (isinstance(value, str) and not value.strip())
    ]
    if blank:
        shown = ", ".join(str(index) for index in blank[:5]) + (", ..." if len(blank) > 5 else "")
        raise ValueError(
            f"{source}: {len(blank)} example(s) have an empty label (example {shown}, counting from 0 after the "
            "header). Fill in or remove those rows."
        )


def encode_task_labels(
    dataset: datasets.Dataset, task: TextClassificationTask, source: str, labelled: bool = True
) -> datasets.Dataset:
    """A csv/json `dataset` with `task`'s columns, its labels checked and cast to the task's label ids (-1, as on
    the Hub, for an unlabelled test set)."""
    columns = (*task.text_columns, "label") if labelled else task.text_columns
    require_columns(dataset, columns, f"{source} (--task_name {task.name})", hint=glue_file_hint(dataset, task))
    if labelled:
        check_no_blank_labels(dataset, source)
        values = dataset["label"] if task.ids_allowed or task.is_regression else [str(v) for v in dataset["label"]]
        labels = [encode_label(value, task, f"{source}, example {i}") for i, value in enumerate(values)]
    else:
        labels = [-1] * len(dataset)
    if "label" in dataset.column_names:
        dataset = dataset.remove_columns("label")
    dataset = dataset.add_column("label", labels)
    if "idx" not in dataset.column_names:
        dataset = dataset.add_column("idx", list(range(len(dataset))))
    return dataset.select_columns(list(dataset_features(task))).cast(dataset_features(task))


def glue_file_hint(dataset: datasets.Dataset, task: TextClassificationTask | None = None) -> str:
    """What to do about a file without the expected columns: if its header is that of one of GLUE's own TSV files,
    read it with --glue_dir; else rename its columns."""
    header = {column.lstrip("\ufeff") for column in dataset.column_names}
    for glue_task in [task] if task and task.tsv_columns else GLUE_TASKS.values():
        if set(glue_task.tsv_columns.values()) <= header:
            return (
                f"It is GLUE's own {glue_task.folder} file: read it with --task_name {glue_task.name} --glue_dir DIR, "
                f"where DIR holds {glue_task.folder}/train.tsv and {glue_task.folder}/dev.tsv (GLUE's layout)."
            )
    text = "/".join(task.text_columns) if task else "`sentence1`/`sentence2` (or the first two other columns)"
    return f"Rename the columns in the file: the text is read from {text}, the labels from `label`."


def custom_task(dataset: datasets.Dataset, source: str) -> TextClassificationTask:
    """A task for a custom csv/json dataset: its text columns, and its labels (the distinct labels of `dataset`, in
    order, as strings), or regression (logged) for labels with decimals."""
    require_columns(dataset, ["label"], source, hint=glue_file_hint(dataset))
    check_no_blank_labels(dataset, source)
    text_columns = infer_text_columns(dataset.column_names)
    if dataset.features["label"].dtype.startswith("float"):
        logger.warning(
            f"{source}: its labels are numbers with decimals ({', '.join(map(str, dataset.unique('label')[:4]))}, "
            "...), so the task is regression (one output, mean squared error). If they are classes, write them as "
            "integers or names."
        )
        return TextClassificationTask(name="custom", text_columns=text_columns, label_names=None)
    label_names = tuple(str(label) for label in sorted(dataset.unique("label")))
    return TextClassificationTask(name="custom", text_columns=text_columns, label_names=label_names, ids_allowed=False)


def infer_text_columns(column_names: list[str]) -> tuple[str, ...]:
    """The text columns of a custom dataset: `sentence1`/`sentence2` if present, else the first one or two
    non-label columns (as in Transformers' run_glue)."""
    if "sentence1" in column_names:
        return ("sentence1", "sentence2") if "sentence2" in column_names else ("sentence1",)
    others = [name for name in column_names if name not in ("label", "idx")]
    if not others:
        raise ValueError(f"The data has no text column besides the label (its columns: {column_names}).")
    return tuple(others[:2])


def metric_config(task_name: str | None, is_regression: bool, num_labels: int) -> str:
    """The `glue` metric configuration for a task, or for custom data: Pearson/Spearman for regression,
    accuracy and F1 for two classes, accuracy for more."""
    if task_name is not None:
        return task_name
    if is_regression:
        return "stsb"
    return "mrpc" if num_labels == 2 else "mnli"


def glue_compute_metrics(config_name: str, is_regression: bool, **load_kwargs):
    """A `compute_metrics` function for the Trainer that scores with the packaged `glue` metric."""
    metric = load_metric("glue", config_name, **load_kwargs)

    def compute_metrics(eval_prediction):
        logits = (
            eval_prediction.predictions[0]
            if isinstance(eval_prediction.predictions, tuple)
            else eval_prediction.predictions
        )
        predictions = np.squeeze(logits) if is_regression else np.argmax(logits, axis=1)
        return metric.compute(predictions=predictions, references=eval_prediction.label_ids)

    return compute_metrics


def write_predictions(path: str, predictions: np.ndarray, label_names: list[str] | None) -> None:
    """Write GLUE's submission format: `index<TAB>prediction`, the label name (or the score for regression)."""
    with open(path, "w", encoding="utf-8") as file:
        file.write("index\tprediction\n")
        for index, prediction in enumerate(predictions):
            value = f"{prediction:.3f}" if label_names is None else label_names[int(prediction)]
            file.write(f"{index}\t{value}\n")


__all__ = [
    "GLUE_TASKS",
    "TextClassificationTask",
    "custom_task",
    "dataset_features",
    "encode_label",
    "encode_task_labels",
    "get_task",
    "glue_compute_metrics",
    "infer_text_columns",
    "load_glue_dir",
    "metric_config",
    "read_glue_tsv",
    "write_predictions",
]
