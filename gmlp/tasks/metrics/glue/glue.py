"""GLUE metric, offline: the configurations, inputs, outputs and numbers of the Hub's `glue` metric."""

import datasets
import evaluate
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef

_CITATION = """\
@inproceedings{wang2019glue,
  title={{GLUE}: A Multi-Task Benchmark and Analysis Platform for Natural Language Understanding},
  author={Wang, Alex and Singh, Amanpreet and Michael, Julian and Hill, Felix and Levy, Omer and Bowman, Samuel R.},
  note={In the Proceedings of ICLR.},
  year={2019}
}
"""

_DESCRIPTION = """\
GLUE, the General Language Understanding Evaluation benchmark (https://gluebenchmark.com/), is a collection of
resources for training, evaluating and analysing natural language understanding systems. This metric scores one
GLUE task, chosen by the configuration name.
"""

_KWARGS_DESCRIPTION = """
Computes the evaluation metric of one GLUE task.
Args:
    predictions: predicted labels (integers), or predicted similarity scores (floats) for stsb.
    references: gold labels (integers), or gold similarity scores (floats) for stsb.
Returns, depending on the configuration:
    cola: "matthews_correlation"
    sst2, mnli, mnli_matched, mnli_mismatched, qnli, rte, wnli, hans: "accuracy"
    mrpc, qqp: "accuracy" and "f1" (label 1 is the positive class)
    stsb: "pearson" and "spearmanr"
Examples:

    >>> glue_metric = evaluate.load("path/to/gmlp/metrics/glue", "mrpc")
    >>> glue_metric.compute(predictions=[0, 1], references=[0, 1])
    {'accuracy': 1.0, 'f1': 1.0}
"""


def accuracy(predictions, references) -> dict[str, float]:
    """The fraction of predictions equal to their reference."""
    return {"accuracy": float((predictions == references).mean())}


def accuracy_and_f1(predictions, references) -> dict[str, float]:
    """Accuracy and the F1 score of the positive class (label 1)."""
    return {**accuracy(predictions, references), "f1": float(f1_score(y_true=references, y_pred=predictions))}


def pearson_and_spearman(predictions, references) -> dict[str, float]:
    """Pearson's and Spearman's correlation between predicted and gold scores."""
    return {
        "pearson": float(pearsonr(predictions, references)[0]),
        "spearmanr": float(spearmanr(predictions, references)[0]),
    }


def matthews_correlation(predictions, references) -> dict[str, float]:
    """Matthews' correlation coefficient between predicted and gold labels."""
    return {"matthews_correlation": float(matthews_corrcoef(references, predictions))}


SCORERS = {
    "cola": matthews_correlation,
    "stsb": pearson_and_spearman,
    "mrpc": accuracy_and_f1,
    "qqp": accuracy_and_f1,
    **dict.fromkeys(["sst2", "mnli", "mnli_mismatched", "mnli_matched", "qnli", "rte", "wnli", "hans"], accuracy),
}


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Glue(evaluate.Metric):
    """The metric of the GLUE task named by `config_name`."""

    def _info(self):
        # A KeyError, as the Hub's metric raises for an unknown configuration.
        if self.config_name not in SCORERS:
            raise KeyError(
                f"Unknown GLUE configuration {self.config_name!r}: pass one of {list(SCORERS)} as the config name, "
                "e.g. evaluate.load(path, 'sst2')."
            )
        value_type = "float32" if self.config_name == "stsb" else "int64"
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value(value_type), "references": datasets.Value(value_type)}
            ),
            codebase_urls=[],
            reference_urls=[],
            format="numpy",
        )

    def _compute(self, predictions, references):
        return SCORERS[self.config_name](predictions, references)
