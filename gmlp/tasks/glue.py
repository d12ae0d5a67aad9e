"""GLUE for `run_glue.py`: the tasks, GLUE's own folders, custom files (their text columns and their labels, one or
several per example), label checks, the metrics and the predictions. Every dataset it returns has the columns and
label names of the Hub's `nyu-mll/glue`, whatever it was read from (a multi-label one: a multi-hot `label`)."""

import logging
import os
import re
from dataclasses import dataclass

import datasets
import numpy as np
import pandas as pd

from .data import is_text, load_data_files, require_columns
from .evaluation import Evaluation
from .metrics import GLUE_METRICS, glue_scores, multi_label_scores

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
    multi_label: bool = False  # each example has a list of labels, any number of them

    @property
    def is_regression(self) -> bool:
        return self.label_names is None

    @property
    def problem_type(self) -> str:
        """The model config's `problem_type` for the task."""
        if self.is_regression:
            return "regression"
        return "multi_label_classification" if self.multi_label else "single_label_classification"


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


def encode_label(value, task: TextClassificationTask, where: str) -> int | float | list[float]:
    """`value` as the task's target: a label name, or an id as int or string, as its label id; a number, for
    regression; a list of labels, for a multi-label task, as a multi-hot row. An error names `where` and the task's
    labels for a label that is not one of them."""
    if task.is_regression:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: label {value!r} is not a number; {task.name} is a regression task.") from None
    if task.multi_label:
        row = [0.0] * len(task.label_names)
        for label in value:
            row[class_id(label, task, where)] = 1.0
        return row
    return class_id(value, task, where)


def class_id(value, task: TextClassificationTask, where: str) -> int:
    """The id of the label `value` (a name, or an id as int or string where the task allows ids)."""
    ids = {name.lower(): i for i, name in enumerate(task.label_names)}
    if task.ids_allowed:  # as numbers (1.0 == 1: a csv column of ids is read as floats when a cell is empty) or text
        ids |= {key: i for i in range(len(ids)) for key in (i, str(i))}
    key = value.lower() if isinstance(value, str) else value
    if key not in ids:
        listed = ", ".join(f"{i} = {name!r}" for i, name in enumerate(task.label_names))
        raise ValueError(f"{where}: label {value!r} is not a {task.name} label; the labels are {listed}.")
    return ids[key]


def has_label_lists(dataset) -> bool:
    """Whether `dataset`'s labels are lists (several labels per example, or none)."""
    return isinstance(dataset.features["label"], datasets.List | datasets.LargeList)


def check_labels_fit_task(dataset, task: TextClassificationTask, source: str) -> None:
    """An error when `dataset` (read from `source`) has lists of labels for a task of one label per example, or
    single labels for a multi-label task."""
    if has_label_lists(dataset) == task.multi_label:
        return
    if task.multi_label:
        raise ValueError(
            f"{source}: its labels are single values, but the training data's are lists (multi-label): write each "
            'label as a list, e.g. "label": ["sports"].'
        )
    fix = "drop --task_name, to train" if task.name in GLUE_TASKS else "give lists in every file, to train"
    raise ValueError(
        f"{source}: its labels are lists (several per example), but {task.name} has one label per example: {fix} a "
        "multi-label classifier."
    )


def is_blank(value) -> bool:
    """Whether the label `value` is missing (an empty list is no blank: an example of a multi-label task may have
    no label)."""
    return not isinstance(value, list) and (value is None or pd.isna(value) or str(value).strip() == "")


def check_no_blank_labels(dataset: datasets.Dataset, source: str) -> None:
    """An error naming the examples of `dataset` (read from `source`) whose label is empty."""
    if blank := [i for i, value in enumerate(dataset["label"]) if is_blank(value)]:
        shown = ", ".join(str(index) for index in blank[:5]) + (", ..." if len(blank) > 5 else "")
        where = f"example {shown}, counting from 0 after the header"
        raise ValueError(f"{source}: {len(blank)} example(s) have an empty label ({where}). Fill in or remove them.")


def encode_task_labels(dataset, task: TextClassificationTask, source: str, labelled=True, first_line=None):
    """`dataset` with `task`'s Hub columns and features, its labels checked and encoded as the task's ids (-1, as on
    the Hub, when not `labelled`; a multi-hot row for a multi-label task). An error names its row: by its line in
    `source` when `first_line` (that of the first example) is given, else by its index."""
    columns = (*task.text_columns, "label") if labelled else task.text_columns
    require_columns(dataset, columns, f"{source} (--task_name {task.name})", hint=glue_file_hint(dataset, task))
    labels = [[0.0] * len(task.label_names) if task.multi_label else -1] * len(dataset)
    if labelled:
        check_labels_fit_task(dataset, task, source)
        check_no_blank_labels(dataset, source)
        where = f"{source}, line {{}}" if first_line is not None else f"{source}, example {{}}"
        values = dataset["label"]
        if task.multi_label:
            values = [[str(label) for label in row] for row in values]
        elif not (task.ids_allowed or task.is_regression):
            values = map(str, values)
        labels = [encode_label(value, task, where.format(i + (first_line or 0))) for i, value in enumerate(values)]
    dataset = dataset.remove_columns([c for c in ("label",) if c in dataset.column_names]).add_column("label", labels)
    if "idx" not in dataset.column_names:
        dataset = dataset.add_column("idx", list(range(len(dataset))))
    if task.is_regression:
        label = datasets.Value("float32")
    elif task.multi_label:
        label = datasets.List(datasets.Value("float32"), length=len(task.label_names))
    else:
        label = datasets.ClassLabel(names=list(task.label_names))
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


def custom_task(dataset, source: str, text_columns: tuple[str, ...] | None = None) -> TextClassificationTask:
    """A task for a custom csv/json dataset: its text columns (`choose_text_columns`), and its labels: the distinct
    labels of `dataset`, in order, as strings; regression (logged) for labels with decimals; multi-label
    classification (logged) for lists of labels."""
    require_columns(dataset, ["label"], source, hint=glue_file_hint(dataset))
    check_no_blank_labels(dataset, source)
    columns = choose_text_columns(dataset, source, text_columns)
    if has_label_lists(dataset):
        names = tuple(sorted({str(label) for labels in dataset["label"] for label in labels}))
        if not names:
            raise ValueError(f"{source}: every example's list of labels is empty; there is no label to learn.")
        logger.warning(
            f"{source}: its labels are lists, so the task is multi-label classification: each example has any "
            f"number of the {len(names)} labels {', '.join(names[:6])}{', ...' if len(names) > 6 else ''}."
        )
        return TextClassificationTask("custom", columns, names, ids_allowed=False, multi_label=True)
    if dataset.features["label"].dtype.startswith("float"):
        logger.warning(
            f"{source}: its labels are numbers with decimals ({', '.join(map(str, dataset.unique('label')[:4]))}, "
            "...), so the task is regression. If they are classes, write them as integers or names."
        )
        return TextClassificationTask("custom", columns, None)
    label_names = tuple(str(label) for label in sorted(dataset.unique("label")))
    return TextClassificationTask("custom", columns, label_names, ids_allowed=False)


# Names of columns that identify examples rather than hold their text.
ID_COLUMN = re.compile(r"(id|idx|index|guid|uid|.*_id)", re.IGNORECASE)


def choose_text_columns(dataset, source: str, named: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The text columns of a custom dataset (read from `source`): those `named` (--text_column_names), which must
    exist and hold text; else `sentence1` (and `sentence2`) if present; else the first one or two columns that hold
    text and are neither the label nor an id (Transformers' run_glue takes the first two of any kind). The choice is
    logged, as a warning where columns were left out."""
    if named:
        require_columns(dataset, named, source, hint="Name the columns as in the file in --text_column_names.")
        if not_text := [column for column in named if not is_text(dataset.features[column])]:
            kind = getattr(dataset.features[not_text[0]], "dtype", "non-text")
            raise ValueError(
                f"{source}: --text_column_names {','.join(named)} names the column {not_text[0]!r}, which holds "
                f"{kind} values, not text. Name the columns that hold the text."
            )
        return tuple(named)
    columns = [column for column in dataset.column_names if column not in ("label", "idx")]
    if "sentence1" in columns:
        chosen = ("sentence1", "sentence2") if "sentence2" in columns else ("sentence1",)
    else:
        texts = [c for c in columns if is_text(dataset.features[c]) and not ID_COLUMN.fullmatch(c)]
        if not texts:
            raise ValueError(
                f"{source} has no text column besides the label (its columns: {dataset.column_names}, none of them "
                "text but ids); name the text columns with --text_column_names."
            )
        chosen = tuple(texts[:2])
    if left := [column for column in columns if column not in chosen]:
        left_out = ", ".join(f"{column} ({column_kind(dataset, column)})" for column in left)
        logger.warning(
            f"{source}: reading the text from {', '.join(chosen)}; not from {left_out}. Pass --text_column_names to "
            "name the text columns."
        )
    else:
        logger.info(f"{source}: reading the text from {', '.join(chosen)}.")
    return chosen


def column_kind(dataset, column: str) -> str:
    """What `column` holds, in words: why `choose_text_columns` did not read the text from it."""
    if ID_COLUMN.fullmatch(column):
        return "an id"
    if not is_text(dataset.features[column]):
        return f"{getattr(dataset.features[column], 'dtype', 'non-text')} values"
    return "a further text column"


def glue_evaluation(task_name: str | None, task: TextClassificationTask, num_labels: int) -> Evaluation:
    """The evaluation's metrics (`Evaluation`): the loss, and the scores of the GLUE task, or for custom data
    Pearson/Spearman for regression, accuracy and F1 for two classes (of the model's `num_labels`), accuracy for more,
    micro-F1 and the share of examples with all labels right for multi-label classification."""
    if task.multi_label:
        return Evaluation(
            task.problem_type, lambda logits, labels: multi_label_scores(logits > 0, labels), ("f1", "accuracy")
        )
    config_name = task_name or ("stsb" if task.is_regression else "mrpc" if num_labels == 2 else "mnli")

    def scores(logits: np.ndarray, labels: np.ndarray) -> dict:
        predictions = np.squeeze(logits) if task.is_regression else np.argmax(logits, axis=1)
        return glue_scores(config_name, predictions, labels)

    return Evaluation(task.problem_type, scores, GLUE_METRICS[config_name])


def prediction_texts(logits: np.ndarray, task: TextClassificationTask, names: list[str] | None) -> list[str]:
    """Each example's prediction as GLUE's submissions write it: its label (of `names`), or its score for
    regression; for a multi-label task, its labels (those of positive logits) joined by commas."""
    if task.is_regression:
        return [f"{score:.3f}" for score in np.atleast_1d(np.squeeze(logits))]
    if task.multi_label:
        return [",".join(names[i] for i in np.flatnonzero(row > 0)) for row in logits]
    return [names[int(i)] for i in np.argmax(logits, axis=1)]
