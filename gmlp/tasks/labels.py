"""Labels: a classifier's label names and config, what a custom dataset's labels imply, and labels encoded as ids."""

import logging

import datasets
import pandas as pd

from .errors import ScriptError, first_few

logger = logging.getLogger(__name__)


def model_labels(config) -> list[str]:
    return [config.id2label[i] for i in range(config.num_labels)]


def choose_labels(config, names: list[str], *, model_args, source: str, training: bool) -> list[str]:
    """The label names, in id order, for data labelled `names`: a checkpoint's own when it names them (its ids keep
    their meaning), else `names`; new labels need `--ignore_mismatched_sizes` and `training`."""
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
    """Make `config` a classifier of the labels `names` (in id order), or a regression model (`names` None)."""
    if names is None:
        config.num_labels, config.problem_type = 1, "regression"
    else:
        config.id2label, config.label2id = dict(enumerate(names)), {name: i for i, name in enumerate(names)}
        config.problem_type = "multi_label_classification" if multi_label else "single_label_classification"


def align_labels(raw: datasets.DatasetDict, names: list[str], column: str = "label") -> datasets.DatasetDict:
    """`raw` with each split's `ClassLabel` `column` changed to the ids of `names` where they differ."""
    label2id = {name: i for i, name in enumerate(names)}
    for split, dataset in raw.items():
        if column in dataset.column_names and getattr(dataset.features[column], "names", names) != list(names):
            raw[split] = dataset.align_labels_with_mapping(label2id, column)
    return raw


def label_images(raw: datasets.DatasetDict, column: str, config, *, model_args, training: bool) -> list[str]:
    """The model's label names, in id order (`choose_labels`), with every labelled split's labels as their ids."""
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
    """The distinct labels of a custom dataset as strings (None for decimals: regression), and whether they are lists."""
    check_no_blank_labels(dataset, source)
    if has_label_lists(dataset):
        names = tuple(sorted({str(label) for labels in dataset["label"] for label in labels}))
        if not names:
            raise ScriptError(f"{source}: every example's list of labels is empty; there is no label to learn.")
        logger.warning(
            f"{source}: its labels are lists, so the task is multi-label classification: each example has any number of the {len(names)} labels {first_few(names, 6)}."
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
    """The labels of `dataset` as `task`'s targets, checked; an error names its line (from `first_line`) or index."""
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
    """`value` as the task's target: a label id, a number (regression) or a multi-hot row (multi-label)."""
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
    """The id of the label `value`: a name, or an id as int or string where the task allows ids."""
    ids = {name.lower(): i for i, name in enumerate(task.label_names)}
    if task.ids_allowed:  # as numbers (1.0 == 1: a csv column of ids is read as floats when a cell is empty) or text
        ids |= {key: i for i in range(len(ids)) for key in (i, str(i))}
    key = value.lower() if isinstance(value, str) else value
    if key not in ids:
        listed = ", ".join(f"{i} = {name!r}" for i, name in enumerate(task.label_names))
        raise ScriptError(f"{where}: label {value!r} is not a {task.name} label; the labels are {listed}.")
    return ids[key]


def has_label_lists(dataset) -> bool:
    return isinstance(dataset.features["label"], datasets.List | datasets.LargeList)


def check_labels_fit_task(dataset, task, source: str) -> None:
    """An error for lists of labels in a task of one label per example, or single labels in a multi-label task."""
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
    """An error naming the examples whose label is empty (an empty list is allowed: multi-label)."""

    def blank(value) -> bool:
        return not isinstance(value, list) and (value is None or pd.isna(value) or str(value).strip() == "")

    if rows := [i for i, value in enumerate(dataset["label"]) if blank(value)]:
        raise ScriptError(
            f"{source}: {len(rows)} example(s) have an empty label (example {first_few(rows, 5)}, counting from 0 after the header). Fill in or remove them."
        )
