"""Labels, all of them: a classifier's label names (a checkpoint's own, so that its ids keep their meaning, or the
data's) and the config that says so; the task a custom dataset's labels imply (classes, several per example, or
scores); and each split's labels checked and turned into the model's ids (text files, GLUE data, image folders)."""

import logging

import datasets
import pandas as pd

from .errors import ScriptError

logger = logging.getLogger(__name__)


def model_labels(config) -> list[str]:
    """The label names of `config`, in id order."""
    return [config.id2label[i] for i in range(config.num_labels)]


def choose_labels(config, names: list[str], *, model_args, source: str, training: bool) -> list[str]:
    """The label names, in id order, of a classifier for data labelled `names`: a checkpoint's own label map when it
    names its labels (so that its ids keep their meaning), else `names`. Labels the checkpoint does not know are an
    error naming them, unless `--ignore_mismatched_sizes` asks for a new head with the data's labels in a run that
    is `training` (a run that trains nothing would score or predict with an untrained head)."""
    own = model_labels(config)
    if not model_args.model_name_or_path or own == [f"LABEL_{i}" for i in range(len(own))]:
        return list(names)
    unknown = ", ".join(repr(name) for name in names if name.lower() not in {label.lower() for label in own})
    if not unknown:
        return own
    listed, model = ", ".join(f"{i} = {name!r}" for i, name in enumerate(own)), model_args.model_name_or_path
    if model_args.ignore_mismatched_sizes and training:
        head = "a new head" if len(names) != len(own) else "its head, whose rows now stand for the new labels"
        logger.warning(
            f"--ignore_mismatched_sizes: {source} has labels the model does not know ({unknown}); fine-tuning {head}, with the data's labels {', '.join(names)} in place of the model's ({listed})."
        )
        return list(names)
    if not training:
        raise ScriptError(
            f"{source}: label(s) {unknown} are not labels of the model {model} (its labels: {listed}), and this run trains no head for them. Give the data the model's labels, or fine-tune a head for the data's first (--do_train --ignore_mismatched_sizes)."
        )
    raise ScriptError(
        f"{source}: label(s) {unknown} are not labels of the model {model} (its labels: {listed}). Use them, or pass --ignore_mismatched_sizes to fine-tune a new head on the data's."
    )


def set_labels(config, names: list[str] | None, *, multi_label: bool = False) -> None:
    """Make `config` a classifier of the labels `names` (in id order; with `multi_label`, any number of them per
    example), or a regression model (`names` None)."""
    if names is None:
        config.num_labels, config.problem_type = 1, "regression"
    else:
        config.id2label, config.label2id = dict(enumerate(names)), {name: i for i, name in enumerate(names)}
        config.problem_type = "multi_label_classification" if multi_label else "single_label_classification"


def align_labels(raw: datasets.DatasetDict, names: list[str], column: str = "label") -> datasets.DatasetDict:
    """`raw`, each split's labels (its `column`, a `ClassLabel`) changed to the ids of `names` where its differ."""
    label2id = {name: i for i, name in enumerate(names)}
    for split, dataset in raw.items():
        if column in dataset.column_names and getattr(dataset.features[column], "names", names) != list(names):
            raw[split] = dataset.align_labels_with_mapping(label2id, column)
    return raw


def label_images(raw: datasets.DatasetDict, column: str, config, *, model_args, training: bool) -> list[str]:
    """The model's label names, in id order (`choose_labels`; `training`: whether the run trains), with every labelled
    split's labels turned into those ids (an error names the labels the model does not know)."""
    for split, dataset in raw.items():
        if column in dataset.column_names and not isinstance(dataset.features[column], datasets.ClassLabel):
            raw[split] = dataset.class_encode_column(column)
    labelled = [split for split in raw if column in raw[split].column_names]
    if labelled and labelled[0] != "test":
        data_names = raw[labelled[0]].features[column].names
        source = f"The {labelled[0]} data"
        names = choose_labels(config, data_names, model_args=model_args, source=source, training=training)
    elif model_args.model_name_or_path:
        names = model_labels(config)
    else:
        raise ScriptError("Images to label need a model that knows the labels: pass --model_name_or_path.")
    for split in labelled:
        known = {name.lower() for name in names}
        if unknown := [name for name in raw[split].features[column].names if name.lower() not in known]:
            raise ScriptError(
                f"The {split} data has labels the model does not know: {unknown} (its labels: {names}). Give every split the same classes: the {split} data's class folders (or labels) must be among the model's."
            )
    align_labels(raw, names, column)
    return names


def data_labels(dataset, source: str) -> tuple[tuple[str, ...] | None, bool]:
    """The labels of a custom dataset (read from `source`), and whether there are several per example: the distinct
    labels, in order, as strings; lists of labels (logged) for multi-label classification; None (logged) for
    labels with decimals, which make a regression task."""
    check_no_blank_labels(dataset, source)
    if has_label_lists(dataset):
        names = tuple(sorted({str(label) for labels in dataset["label"] for label in labels}))
        if not names:
            raise ScriptError(f"{source}: every example's list of labels is empty; there is no label to learn.")
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        logger.warning(
            f"{source}: its labels are lists, so the task is multi-label classification: each example has any number of the {len(names)} labels {shown}."
        )
        return names, True
    if dataset.features["label"].dtype.startswith("float"):
        shown = ", ".join(map(str, dataset.unique("label")[:4]))
        logger.warning(
            f"{source}: its labels are numbers with decimals ({shown}, ...), so the task is regression. If they are classes, write them as integers or names."
        )
        return None, False
    return tuple(str(label) for label in sorted(dataset.unique("label"))), False


def encode_labels(dataset, task, source: str, first_line: int | None = None) -> list:
    """The labels of `dataset` (read from `source`) as `task`'s targets (`encode_label`), checked first: lists only
    for a multi-label task, none blank. An error names its row: by its line in `source` when `first_line` (that of
    the first example) is given, else by its index."""
    check_labels_fit_task(dataset, task, source)
    check_no_blank_labels(dataset, source)
    where = f"{source}, line {{}}" if first_line is not None else f"{source}, example {{}}"
    values = dataset["label"]
    if task.multi_label:
        values = [[str(label) for label in row] for row in values]
    elif not (task.ids_allowed or task.is_regression):
        values = map(str, values)
    return [encode_label(value, task, where.format(i + (first_line or 0))) for i, value in enumerate(values)]


def encode_label(value, task, where: str) -> int | float | list[float]:
    """`value` as the task's target: a label name, or an id as int or string, as its label id; a number, for
    regression; a list of labels, for a multi-label task, as a multi-hot row. An error names `where` and the task's
    labels for a label that is not one of them."""
    if task.is_regression:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ScriptError(f"{where}: label {value!r} is not a number; {task.name} is a regression task.") from None
    if task.multi_label:
        row = [0.0] * len(task.label_names)
        for label in value:
            row[class_id(label, task, where)] = 1.0
        return row
    return class_id(value, task, where)


def class_id(value, task, where: str) -> int:
    """The id of the label `value` (a name, or an id as int or string where the task allows ids)."""
    ids = {name.lower(): i for i, name in enumerate(task.label_names)}
    if task.ids_allowed:  # as numbers (1.0 == 1: a csv column of ids is read as floats when a cell is empty) or text
        ids |= {key: i for i in range(len(ids)) for key in (i, str(i))}
    key = value.lower() if isinstance(value, str) else value
    if key not in ids:
        listed = ", ".join(f"{i} = {name!r}" for i, name in enumerate(task.label_names))
        raise ScriptError(f"{where}: label {value!r} is not a {task.name} label; the labels are {listed}.")
    return ids[key]


def has_label_lists(dataset) -> bool:
    """Whether `dataset`'s labels are lists (several labels per example, or none)."""
    return isinstance(dataset.features["label"], datasets.List | datasets.LargeList)


def check_labels_fit_task(dataset, task, source: str) -> None:
    """An error when `dataset` (read from `source`) has lists of labels for a task of one label per example, or
    single labels for a multi-label task."""
    if has_label_lists(dataset) == task.multi_label:
        return
    if task.multi_label:
        raise ScriptError(
            f'{source}: its labels are single values, but the training data\'s are lists (multi-label): write each label as a list, e.g. "label": ["sports"].'
        )
    fix = "drop --task_name, to train" if task.folder else "give lists in every file, to train"
    raise ScriptError(
        f"{source}: its labels are lists (several per example), but {task.name} has one label per example: {fix} a multi-label classifier."
    )


def check_no_blank_labels(dataset: datasets.Dataset, source: str) -> None:
    """An error naming the examples of `dataset` (read from `source`) whose label is empty (an empty list is no
    blank: an example of a multi-label task may have no label)."""

    def blank(value) -> bool:
        return not isinstance(value, list) and (value is None or pd.isna(value) or str(value).strip() == "")

    if rows := [i for i, value in enumerate(dataset["label"]) if blank(value)]:
        shown = ", ".join(str(index) for index in rows[:5]) + (", ..." if len(rows) > 5 else "")
        raise ScriptError(
            f"{source}: {len(rows)} example(s) have an empty label (example {shown}, counting from 0 after the header). Fill in or remove them."
        )
