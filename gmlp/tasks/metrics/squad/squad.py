"""SQuAD v1.1 metric, offline: the inputs, outputs and numbers of the Hub's `squad` metric.

The scores follow the official SQuAD v1.1 evaluation script (https://rajpurkar.github.io/SQuAD-explorer/).
"""

import re
import string
from collections import Counter

import datasets
import evaluate
from evaluate.utils import logging

logger = logging.get_logger(__name__)

_CITATION = """\
@inproceedings{Rajpurkar2016SQuAD10,
  title={SQuAD: 100, 000+ Questions for Machine Comprehension of Text},
  author={Pranav Rajpurkar and Jian Zhang and Konstantin Lopyrev and Percy Liang},
  booktitle={EMNLP},
  year={2016}
}
"""

_DESCRIPTION = """\
The official scores of version 1.1 of the Stanford Question Answering Dataset (SQuAD), a reading comprehension
dataset of questions posed by crowdworkers on Wikipedia articles, where the answer to every question is a span of
the passage.
"""

_KWARGS_DESCRIPTION = """
Computes SQuAD v1.1 exact match and F1, in percent.
Args:
    predictions: list of dicts with
        - 'id': the question id, as in the references
        - 'prediction_text': the predicted answer
    references: list of dicts with
        - 'id': the question id
        - 'answers': {'text': [gold answers], 'answer_start': [their character offsets]}
          (answer_start is not used for scoring)
Returns:
    'exact_match': percentage of questions whose normalised prediction equals a normalised gold answer
    'f1': mean over questions of the best token-level F1 against any gold answer, in percent
    A question without a prediction scores 0.
Examples:

    >>> squad_metric = evaluate.load("path/to/gmlp/metrics/squad")
    >>> squad_metric.compute(
    ...     predictions=[{"id": "q1", "prediction_text": "1976"}],
    ...     references=[{"id": "q1", "answers": {"text": ["1976"], "answer_start": [97]}}],
    ... )
    {'exact_match': 100.0, 'f1': 100.0}
"""

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, remove punctuation and the articles a/an/the, and collapse whitespace."""
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    """Whether the normalised prediction equals the normalised gold answer."""
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> float:
    """The F1 of the bag of normalised tokens of the prediction against those of the gold answer."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    num_same = sum((Counter(prediction_tokens) & Counter(ground_truth_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return 2 * precision * recall / (precision + recall)


def compute_score(predictions: dict[str, str], references: list[dict]) -> dict[str, float]:
    """Exact match and F1 in percent, each the best over a question's gold answers, averaged over `references`.

    `predictions` maps question ids to predicted answers; `references` holds SQuAD-format questions.
    """
    exact_match = f1 = 0.0
    for reference in references:
        question_id, ground_truths = reference["id"], reference["answers"]["text"]
        if not ground_truths:
            raise ValueError(
                f"Question {question_id!r} has no gold answer. SQuAD v1.1 questions all have one; "
                "score unanswerable questions with the squad_v2 metric."
            )
        if question_id not in predictions:
            logger.warning(f"Unanswered question {question_id} will receive score 0.")
            continue
        prediction = predictions[question_id]
        exact_match += max(exact_match_score(prediction, truth) for truth in ground_truths)
        f1 += max(f1_score(prediction, truth) for truth in ground_truths)
    total = len(references)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Squad(evaluate.Metric):
    """SQuAD v1.1 exact match and F1."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")},
                    "references": {
                        "id": datasets.Value("string"),
                        "answers": datasets.features.Sequence(
                            {"text": datasets.Value("string"), "answer_start": datasets.Value("int32")}
                        ),
                    },
                }
            ),
            codebase_urls=["https://rajpurkar.github.io/SQuAD-explorer/"],
            reference_urls=["https://rajpurkar.github.io/SQuAD-explorer/"],
        )

    def _compute(self, predictions, references):
        predicted_texts = {prediction["id"]: prediction["prediction_text"] for prediction in predictions}
        return compute_score(predicted_texts, references)
