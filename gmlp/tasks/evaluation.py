"""What the scripts' evaluation reports through the Trainer: the loss averaged over every labelled item of the whole
evaluation set (each masked token, each example), whatever the batch size and the number of processes, beside each
script's scores."""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

# The problem type of a label per token, -100 where there is none (the masked LM); the others are the config's.
TOKEN_LEVEL = "token_classification"


def item_losses(logits: torch.Tensor, labels: torch.Tensor, problem_type: str) -> torch.Tensor:
    """The loss of each labelled item, as the model's loss averages them: per token for `TOKEN_LEVEL` (0 where the
    label is -100), else per example, for the config's `problem_type` (regression: squared error; multi-label: binary
    cross-entropy, averaged over the labels; else cross-entropy)."""
    logits = logits.float()
    if problem_type == TOKEN_LEVEL:
        flat = F.cross_entropy(logits.flatten(0, -2), labels.flatten(), reduction="none", ignore_index=-100)
        return flat.view(labels.shape)
    rows = len(labels)
    if problem_type == "regression":
        return F.mse_loss(logits.view(rows, -1), labels.float().view(rows, -1), reduction="none").mean(dim=1)
    if problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="none").mean(dim=1)
    return F.cross_entropy(logits.view(rows, -1), labels.view(rows), reduction="none")


@dataclass
class Evaluation:
    """`preprocess_logits_for_metrics` and `compute_metrics` for the Trainer of a model trained on `problem_type`.
    What `keep` takes of each batch's logits (all of them by default) and each labelled item's loss go through the
    Trainer's evaluation loop, which gathers them across processes with every example once; `compute_metrics` then
    reports their mean as `loss` (in place of the Trainer's own `eval_loss`, a mean of per-batch means, which moves
    with the batch size and the number of processes), the script's `scores` (named `score_names`) of the kept
    predictions and the labels, and with `perplexity`, exp(loss)."""

    problem_type: str
    scores: Callable[[np.ndarray, np.ndarray], dict]
    score_names: tuple[str, ...]
    keep: Callable[[torch.Tensor], torch.Tensor] | None = None
    perplexity: bool = False

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The metrics evaluation reports (without the Trainer's `eval_` prefix)."""
        return ("loss", *self.score_names, *(("perplexity",) if self.perplexity else ()))

    def preprocess_logits_for_metrics(self, logits, labels):
        logits = logits[0] if isinstance(logits, tuple) else logits
        kept = logits if self.keep is None else self.keep(logits)
        return kept if labels is None else (kept, item_losses(logits, labels, self.problem_type))

    def compute_metrics(self, eval_prediction) -> dict:
        (predictions, losses), labels = eval_prediction.predictions, eval_prediction.label_ids
        # The batches' token losses are padded to the longest batch with -100, as their labels are.
        labelled = labels != -100 if self.problem_type == TOKEN_LEVEL else np.ones(len(losses), dtype=bool)
        # Returned as "loss", this replaces the Trainer's `eval_loss` (it prefixes the metrics after setting its own).
        metrics = {"loss": float(losses[labelled].astype(np.float64).mean()), **self.scores(predictions, labels)}
        if self.perplexity:
            metrics["perplexity"] = math.exp(metrics["loss"]) if metrics["loss"] < 700 else math.inf
        return metrics
