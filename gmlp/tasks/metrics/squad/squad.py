"""SQuAD v1.1's metric, offline: the inputs, outputs and numbers of the Hub's `squad` metric."""

import datasets
import evaluate

# The scores live in the package, which the scripts call directly: one implementation for both.
from gmlp.tasks.metrics import SQUAD_PREDICTION, SQUAD_REFERENCE, squad_scores


class Squad(evaluate.Metric):
    """SQuAD v1.1's exact match and F1, in percent."""

    def _info(self):
        return evaluate.MetricInfo(
            description="The official scores of SQuAD v1.1 (https://rajpurkar.github.io/SQuAD-explorer/).",
            citation="Rajpurkar et al., SQuAD: 100,000+ Questions for Machine Comprehension of Text, EMNLP 2016.",
            inputs_description="predictions: [{'id', 'prediction_text'}]; references: [{'id', 'answers': {'text': [...], 'answer_start': [...]}}]. Returns exact_match and f1, in percent.",
            features=datasets.Features({"predictions": SQUAD_PREDICTION, "references": SQUAD_REFERENCE}),
        )

    def _compute(self, predictions, references):
        return squad_scores({p["id"]: p["prediction_text"] for p in predictions}, references)
