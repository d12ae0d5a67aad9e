"""A classifier's labels: which names its ids stand for (a checkpoint's own, so that its ids keep their meaning, or
the data's), and the config that says so."""

import logging

from .arguments import ModelArguments

logger = logging.getLogger(__name__)


def choose_labels(config, names: list[str], model_args: ModelArguments, source: str, *, training: bool) -> list[str]:
    """The label names, in id order, of a classifier for data labelled `names`: a checkpoint's own label map when it
    names its labels (so that its ids keep their meaning), else `names`. Labels the checkpoint does not know are an
    error naming them, unless `--ignore_mismatched_sizes` asks for a new head with the data's labels in a run that
    is `training` (a run that trains nothing would score or predict with an untrained head)."""
    own = [config.id2label[i] for i in range(config.num_labels)]
    if not model_args.model_name_or_path or own == [f"LABEL_{i}" for i in range(len(own))]:
        return list(names)
    unknown = [name for name in names if name.lower() not in {label.lower() for label in own}]
    if not unknown:
        return own
    listed = ", ".join(f"{i} = {name!r}" for i, name in enumerate(own))
    if model_args.ignore_mismatched_sizes and training:
        head = "a new head" if len(names) != len(own) else "its head, whose rows now stand for the new labels"
        logger.warning(
            f"--ignore_mismatched_sizes: {source} has labels the model does not know ({', '.join(unknown)}); "
            f"fine-tuning {head}, with the data's labels {', '.join(names)} in place of the model's ({listed})."
        )
        return list(names)
    if not training:
        raise ValueError(
            f"{source}: label(s) {', '.join(map(repr, unknown))} are not labels of the model {model_args.model_name_or_path} (its labels: {listed}), and this run trains no head for them. Give the data the model's labels, or fine-tune a head for the data's first (--do_train --ignore_mismatched_sizes)."
        )
    raise ValueError(
        f"{source}: label(s) {', '.join(map(repr, unknown))} are not labels of the model "
        f"{model_args.model_name_or_path} (its labels: {listed}). Use them, or pass --ignore_mismatched_sizes to "
        "fine-tune a new head on the data's."
    )


def set_labels(config, names: list[str] | None, multi_label: bool = False) -> None:
    """Make `config` a classifier of the labels `names` (in id order; with `multi_label`, any number of them per
    example), or a regression model (`names` None)."""
    if names is None:
        config.num_labels, config.problem_type = 1, "regression"
    else:
        config.id2label, config.label2id = dict(enumerate(names)), {name: i for i, name in enumerate(names)}
        config.problem_type = "multi_label_classification" if multi_label else "single_label_classification"
