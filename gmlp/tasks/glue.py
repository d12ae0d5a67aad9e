"""GLUE for `run_glue.py`: the tasks, their data (the Hub, GLUE's own folders, or custom files with their text columns),
the metrics and the predictions. Every dataset it returns has the columns and label names of the Hub's `nyu-mll/glue`,
whatever it was read from (a multi-label one: a multi-hot `label`)."""

import logging
import os
import re
from dataclasses import dataclass, replace

import datasets
import numpy as np

from . import labels
from .data import is_text, load_data_files, load_hub_dataset, require_columns
from .errors import ScriptError
from .evaluation import Evaluation
from .metrics import GLUE_METRICS, glue_scores, multi_label_scores

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TextClassificationTask:
    """A text-classification (or regression) task: a GLUE task, with its Hub columns and labels and the fields of
    GLUE's TSV files that hold them, or the user's own data (named "custom", which has no GLUE folder)."""

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
    if (key := name.lower().replace("-", "")) not in GLUE_TASKS:
        raise ScriptError(f"Unknown GLUE task {name!r}; choose one of {', '.join(GLUE_TASKS)}.")
    return GLUE_TASKS[key]


def load_task(data_args, training_args, model_args, config) -> tuple[TextClassificationTask, datasets.DatasetDict]:
    """The task and its splits: a GLUE task's (Hub or --glue_dir) with GLUE's label ids, local files' as read. A custom
    task's labels are those of its first labelled file, or, with only a --test_file, the model's."""
    files, named = data_args.data_files(), data_args.text_columns()
    if not files:
        task = get_task(data_args.task_name)
        if data_args.glue_dir is None:
            return task, load_hub_dataset(data_args, model_args, data_args.dataset_config_name or task.name)
        asked = {("train",): training_args.do_train, task.eval_splits: training_args.do_eval}
        asked[task.test_splits] = training_args.do_predict
        return task, load_glue_dir(data_args.glue_dir, task, [s for splits, on in asked.items() if on for s in splits])
    raw = load_data_files(files, cache_dir=model_args.cache_dir)
    if "test" in raw and "label" in raw["test"].column_names:
        raw["test"] = raw["test"].remove_columns("label")  # test labels are not used
    if data_args.task_name:  # files have one validation and one test split, MNLI's too
        task = replace(get_task(data_args.task_name), eval_splits=("validation",), test_splits=("test",))
        return (replace(task, text_columns=named) if named else task), raw
    if labelled := [split for split in raw if split != "test"]:
        return custom_task(raw[labelled[0]], files[labelled[0]], named), raw
    if not model_args.model_name_or_path:
        raise ScriptError("A --test_file alone needs --model_name_or_path, a classifier whose labels it predicts.")
    regression = config.problem_type == "regression" or config.num_labels == 1
    names = None if regression else tuple(labels.model_labels(config))
    multi_label = config.problem_type == "multi_label_classification"
    columns = choose_text_columns(raw["test"], files["test"], named)
    return TextClassificationTask("custom", columns, names, ids_allowed=False, multi_label=multi_label), raw


def label_task_data(raw, task: TextClassificationTask, names: list[str] | None, files: dict) -> datasets.DatasetDict:
    """The splits with their labels as the model's ids (of `names`): local files' encoded (an unknown label is an
    error naming its row), a GLUE task's then aligned with the model's where its order differs from GLUE's."""
    if files:
        task = task if task.folder else replace(task, label_names=names and tuple(names))
        raw = datasets.DatasetDict({s: encode_task(raw[s], task, files[s], labelled=s != "test") for s in raw})
    return raw if names is None or list(names) == list(task.label_names) else labels.align_labels(raw, names)


def load_glue_dir(glue_dir: str, task: TextClassificationTask, splits) -> datasets.DatasetDict:
    """The `splits` of `task` from a GLUE folder (`<glue_dir>/<folder>/{train,dev,test}.tsv`, GLUE's own layout), or
    `.jsonl` files there with the Hub's columns (e.g. MNLI's `dev_matched.jsonl`). Test files have no labels: their
    `label` is -1, as on the Hub."""
    task_dir = os.path.join(glue_dir, task.folder)
    if not os.path.isdir(task_dir):
        raise ScriptError(
            f"No {task.folder} folder in --glue_dir {glue_dir!r}: expected GLUE's layout, {task_dir}/train.tsv, ..."
        )
    result = {}
    for split in splits:
        stem, labelled = os.path.join(task_dir, split.replace("validation", "dev")), not split.startswith("test")
        if (path := next((stem + ext for ext in (".tsv", ".jsonl") if os.path.isfile(stem + ext)), None)) is None:
            raise ScriptError(
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
            short = min((i for f in fields for i, v in enumerate(dataset[f]) if v is None), default=None)
            if short is not None:
                raise ScriptError(f"{path}, line {short + first_line}: fewer fields than the header's.")
            fields |= {"index": "idx"} if "index" in dataset.column_names else {}
            dataset = dataset.select_columns(list(fields)).rename_columns({f: c for f, c in fields.items() if f != c})
        else:
            dataset = load_data_files({split: path})[split]
        result[split] = encode_task(dataset, task, path, labelled=labelled, first_line=first_line)
    return datasets.DatasetDict(result)


def encode_task(dataset, task: TextClassificationTask, source: str, *, labelled=True, first_line=None):
    """`dataset` with `task`'s Hub columns and features, its labels checked and encoded as the task's ids (-1, as on
    the Hub, when not `labelled`; a multi-hot row for a multi-label task; `labels.encode_labels`)."""
    columns = (*task.text_columns, "label") if labelled else task.text_columns
    require_columns(dataset, columns, f"{source} (--task_name {task.name})", hint=glue_file_hint(dataset, task))
    encoded = [[0.0] * len(task.label_names) if task.multi_label else -1] * len(dataset)
    if labelled:
        encoded = labels.encode_labels(dataset, task, source, first_line)
    dataset = dataset.remove_columns([c for c in ("label",) if c in dataset.column_names]).add_column("label", encoded)
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
            return f"It is GLUE's own {glue.folder} file: read it with --task_name {glue.name} --glue_dir DIR, where DIR holds {glue.folder}/train.tsv and {glue.folder}/dev.tsv (GLUE's layout)."
    text = "/".join(task.text_columns) if task else "`sentence1`/`sentence2` (or the first two other columns)"
    return f"Rename the columns in the file: the text is read from {text}, the labels from `label`."


def custom_task(dataset, source: str, text_columns: tuple[str, ...] | None = None) -> TextClassificationTask:
    """A task for a custom csv/json dataset: its text columns (`choose_text_columns`) and the labels its labels imply
    (`labels.data_labels`: classes, several per example, or scores)."""
    require_columns(dataset, ["label"], source, hint=glue_file_hint(dataset))
    names, multi_label = labels.data_labels(dataset, source)
    columns = choose_text_columns(dataset, source, text_columns)
    return TextClassificationTask("custom", columns, names, ids_allowed=False, multi_label=multi_label)


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
            raise ScriptError(
                f"{source}: --text_column_names {','.join(named)} names the column {not_text[0]!r}, which holds {kind} values, not text. Name the columns that hold the text."
            )
        return tuple(named)
    columns = [column for column in dataset.column_names if column not in ("label", "idx")]
    if "sentence1" in columns:
        chosen = ("sentence1", "sentence2") if "sentence2" in columns else ("sentence1",)
    elif texts := [c for c in columns if is_text(dataset.features[c]) and not ID_COLUMN.fullmatch(c)]:
        chosen = tuple(texts[:2])
    else:
        raise ScriptError(
            f"{source} has no text column besides the label (its columns: {dataset.column_names}, none of them text but ids); name the text columns with --text_column_names."
        )
    if left := ", ".join(f"{c} ({column_kind(dataset, c)})" for c in columns if c not in chosen):
        logger.warning(
            f"{source}: reading the text from {', '.join(chosen)}; not from {left}. Pass --text_column_names to name the text columns."
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
        scores = lambda logits, labels: multi_label_scores(logits > 0, labels)
        return Evaluation("multi_label_classification", scores, ("f1", "accuracy"))
    config_name = task_name or ("stsb" if task.is_regression else "mrpc" if num_labels == 2 else "mnli")

    def scores(logits: np.ndarray, labels: np.ndarray) -> dict:
        predictions = np.squeeze(logits) if task.is_regression else np.argmax(logits, axis=1)
        return glue_scores(config_name, predictions, labels)

    problem_type = "regression" if task.is_regression else "single_label_classification"
    return Evaluation(problem_type, scores, GLUE_METRICS[config_name])


def prediction_texts(logits: np.ndarray, task: TextClassificationTask, names: list[str] | None) -> list[str]:
    """Each example's prediction as GLUE's submissions write it: its label (of `names`), or its score for
    regression; for a multi-label task, its labels (those of positive logits) joined by commas."""
    if task.is_regression:
        return [f"{score:.3f}" for score in np.atleast_1d(np.squeeze(logits))]
    if task.multi_label:
        return [",".join(names[i] for i in np.flatnonzero(row > 0)) for row in logits]
    return [names[int(i)] for i in np.argmax(logits, axis=1)]
