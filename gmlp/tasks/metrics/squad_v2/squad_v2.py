"""SQuAD v2.0 metric, offline: the inputs, outputs and numbers of the Hub's `squad_v2` metric.

The scores follow the official SQuAD v2.0 evaluation script (https://rajpurkar.github.io/SQuAD-explorer/),
run with a no-answer probability for every question, so the best-threshold scores are always reported.
"""

import re
import string
from collections import Counter

import datasets
import evaluate

_CITATION = """\
@inproceedings{Rajpurkar2018SQuAD20,
  title={Know What You Don't Know: Unanswerable Questions for SQuAD},
  author={Pranav Rajpurkar and Robin Jia and Percy Liang},
  booktitle={ACL},
  year={2018}
}
"""

_DESCRIPTION = """\
The official scores of version 2.0 of the Stanford Question Answering Dataset (SQuAD). SQuAD 2.0 adds to the
100,000 questions of SQuAD 1.1 over 50,000 unanswerable questions written to look like answerable ones: a system
must answer when the passage supports an answer and abstain (predict the empty string) when it does not.
"""

_KWARGS_DESCRIPTION = """
Computes SQuAD v2.0 exact match and F1, in percent, overall and for answerable and unanswerable questions.
Args:
    predictions: list of dicts with
        - 'id': the question id, as in the references
        - 'prediction_text': the predicted answer, "" to predict that the question has no answer
        - 'no_answer_probability': the model's probability that the question has no answer
    references: list of dicts with
        - 'id': the question id
        - 'answers': {'text': [gold answers], 'answer_start': [their character offsets]},
          both lists empty for an unanswerable question
    no_answer_threshold: float, default 1.0. A question whose no_answer_probability exceeds it counts as
        answered with "" whatever its prediction_text.
Returns:
    'exact', 'f1', 'total': exact match and F1 in percent over all questions, and their number
    'HasAns_exact', 'HasAns_f1', 'HasAns_total': the same over answerable questions (only if there are any)
    'NoAns_exact', 'NoAns_f1', 'NoAns_total': the same over unanswerable questions (only if there are any)
    'best_exact', 'best_exact_thresh': the best exact match over all no-answer probability thresholds, and
        the threshold reaching it
    'best_f1', 'best_f1_thresh': the same for F1
Examples:

    >>> squad_v2_metric = evaluate.load("path/to/gmlp/metrics/squad_v2")
    >>> squad_v2_metric.compute(
    ...     predictions=[{"id": "q1", "prediction_text": "1976", "no_answer_probability": 0.0}],
    ...     references=[{"id": "q1", "answers": {"text": ["1976"], "answer_start": [97]}}],
    ... )
    {'exact': 100.0, 'f1': 100.0, 'total': 1, 'HasAns_exact': 100.0, 'HasAns_f1': 100.0, 'HasAns_total': 1, \
'best_exact': 100.0, 'best_exact_thresh': 0.0, 'best_f1': 100.0, 'best_f1_thresh': 0.0}
"""

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


# The same normalisation as the squad metric's: evaluate copies only a metric's own folder, so it cannot be shared.
def normalize_answer(text: str) -> str:
    """Lowercase, remove punctuation and the articles a/an/the, and collapse whitespace."""
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def compute_exact(gold: str, prediction: str) -> int:
    """1 if the normalised prediction equals the normalised gold answer, else 0."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def compute_f1(gold: str, prediction: str) -> float:
    """The token-level F1 of the prediction against the gold answer; an empty answer only matches an empty one."""
    gold_tokens = normalize_answer(gold).split()
    prediction_tokens = normalize_answer(prediction).split()
    if not gold_tokens or not prediction_tokens:
        return float(gold_tokens == prediction_tokens)
    num_same = sum((Counter(gold_tokens) & Counter(prediction_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def get_raw_scores(predictions: dict[str, str], references: list[dict]) -> tuple[dict, dict]:
    """Per question id, the best exact match and F1 of the prediction over the gold answers.

    An unanswerable question's only gold answer is the empty string.
    """
    exact_scores, f1_scores = {}, {}
    for reference in references:
        gold_answers = [text for text in reference["answers"]["text"] if normalize_answer(text)] or [""]
        prediction = predictions[reference["id"]]
        exact_scores[reference["id"]] = max(compute_exact(gold, prediction) for gold in gold_answers)
        f1_scores[reference["id"]] = max(compute_f1(gold, prediction) for gold in gold_answers)
    return exact_scores, f1_scores


def apply_no_answer_threshold(
    scores: dict[str, float], no_answer_probabilities: dict[str, float], has_answer: dict[str, bool], threshold: float
) -> dict[str, float]:
    """The scores after replacing every prediction whose no-answer probability exceeds `threshold` by ""."""
    return {
        question_id: float(not has_answer[question_id]) if no_answer_probabilities[question_id] > threshold else score
        for question_id, score in scores.items()
    }


def make_eval_dict(exact_scores: dict, f1_scores: dict, question_ids: list[str]) -> dict:
    """Exact match and F1 in percent over `question_ids`, and their number."""
    total = len(question_ids)
    return {
        "exact": 100.0 * sum(exact_scores[question_id] for question_id in question_ids) / total,
        "f1": 100.0 * sum(f1_scores[question_id] for question_id in question_ids) / total,
        "total": total,
    }


def find_best_threshold(
    predictions: dict[str, str],
    scores: dict[str, float],
    no_answer_probabilities: dict[str, float],
    has_answer: dict[str, bool],
) -> tuple[float, float]:
    """The best score in percent over all no-answer thresholds, and the threshold reaching it.

    Starts from abstaining on every question (which scores the unanswerable ones), then answers the questions
    in increasing order of no-answer probability, keeping the best running total.
    """
    current = best = sum(not answerable for answerable in has_answer.values())
    best_threshold = 0.0
    # Only the questions scored: a prediction may carry an id that no reference has.
    scored_ids = [question_id for question_id in no_answer_probabilities if question_id in scores]
    for question_id in sorted(scored_ids, key=no_answer_probabilities.get):
        if has_answer[question_id]:
            current += scores[question_id]
        elif predictions[question_id]:
            current -= 1
        if current > best:
            best, best_threshold = current, no_answer_probabilities[question_id]
    return 100.0 * best / len(scores), best_threshold


def compute_score(
    predictions: dict[str, str],
    no_answer_probabilities: dict[str, float],
    references: list[dict],
    no_answer_threshold: float = 1.0,
) -> dict:
    """All SQuAD v2.0 scores (see the metric's description) of `predictions` against `references`."""
    missing = [reference["id"] for reference in references if reference["id"] not in predictions]
    if missing:
        raise ValueError(f"No prediction for the questions {missing}: give one prediction per reference.")
    has_answer = {reference["id"]: bool(reference["answers"]["text"]) for reference in references}
    exact_raw, f1_raw = get_raw_scores(predictions, references)
    exact = apply_no_answer_threshold(exact_raw, no_answer_probabilities, has_answer, no_answer_threshold)
    f1 = apply_no_answer_threshold(f1_raw, no_answer_probabilities, has_answer, no_answer_threshold)

    scores = make_eval_dict(exact, f1, list(has_answer))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        question_ids = [question_id for question_id, answerable in has_answer.items() if answerable == wanted]
        if question_ids:
            subset = make_eval_dict(exact, f1, question_ids)
            scores.update({f"{prefix}_{name}": value for name, value in subset.items()})

    scores["best_exact"], scores["best_exact_thresh"] = find_best_threshold(
        predictions, exact_raw, no_answer_probabilities, has_answer
    )
    scores["best_f1"], scores["best_f1_thresh"] = find_best_threshold(
        predictions, f1_raw, no_answer_probabilities, has_answer
    )
    return scores


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SquadV2(evaluate.Metric):
    """SQuAD v2.0 exact match and F1, with the HasAns/NoAns breakdown and the best no-answer thresholds."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": {
                        "id": datasets.Value("string"),
                        "prediction_text": datasets.Value("string"),
                        "no_answer_probability": datasets.Value("float32"),
                    },
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

    def _compute(self, predictions, references, no_answer_threshold=1.0):
        predicted_texts = {prediction["id"]: prediction["prediction_text"] for prediction in predictions}
        no_answer_probabilities = {prediction["id"]: prediction["no_answer_probability"] for prediction in predictions}
        return compute_score(predicted_texts, no_answer_probabilities, references, no_answer_threshold)
