"""SQuAD v2.0's metric, offline: the inputs, outputs and numbers of the Hub's `squad_v2` metric."""

import datasets
import evaluate

# The scores live in the package, which the scripts call directly: one implementation for both.
from gmlp.tasks.metrics import SQUAD_PREDICTION, SQUAD_REFERENCE, squad_v2_scores


class SquadV2(evaluate.Metric):
    """SQuAD v2.0's exact match and F1 with the HasAns/NoAns breakdown and the best no-answer thresholds."""

    def _info(self):
        predictions = {**SQUAD_PREDICTION, "no_answer_probability": datasets.Value("float32")}
        return evaluate.MetricInfo(
            description="SQuAD v2.0's scores (https://rajpurkar.github.io/SQuAD-explorer/), with the best thresholds.",
            citation="Rajpurkar, Jia, Liang, Know What You Don't Know: Unanswerable Questions for SQuAD, ACL 2018.",
            inputs_description="predictions: [{'id', 'prediction_text' ('' for no answer), 'no_answer_probability'}]; references: [{'id', 'answers': {'text': [...], 'answer_start': [...]}}], empty for no answer; no_answer_threshold (1.0): above it a question counts as abstaining.",
            features=datasets.Features({"predictions": predictions, "references": SQUAD_REFERENCE}),
        )

    def _compute(self, predictions, references, no_answer_threshold=1.0):
        texts = {p["id"]: p["prediction_text"] for p in predictions}
        no_answer = {p["id"]: p["no_answer_probability"] for p in predictions}
        return squad_v2_scores(texts, no_answer, references, no_answer_threshold)
