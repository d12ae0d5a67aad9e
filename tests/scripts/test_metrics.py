"""Tests of the offline glue, squad and squad_v2 metrics against values worked out by hand."""

import math
from pathlib import Path

import evaluate
import pytest

from gmlp.tasks.metrics import (
    METRIC_NAMES,
    glue_scores,
    load_metric,
    metric_path,
    multi_label_scores,
    normalize_answer,
)

# Binary labels with 3 true positives, 1 true negative, 1 false positive and 1 false negative.
BINARY_PREDICTIONS = [1, 0, 1, 1, 0, 1]
BINARY_REFERENCES = [1, 0, 0, 1, 1, 1]
TP, TN, FP, FN = 3, 1, 1, 1


def pearson(xs: list[float], ys: list[float]) -> float:
    """Pearson's correlation from its definition."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    return covariance / math.sqrt(sum((x - mean_x) ** 2 for x in xs) * sum((y - mean_y) ** 2 for y in ys))


@pytest.mark.parametrize(
    "config_name", ["sst2", "mnli", "mnli_matched", "mnli_mismatched", "qnli", "rte", "wnli", "hans"]
)
def test_glue_accuracy(config_name):
    metric = load_metric("glue", config_name)
    assert metric.compute(predictions=[0, 1, 2, 2], references=[0, 2, 2, 1]) == {"accuracy": 0.5}


@pytest.mark.parametrize("config_name", ["mrpc", "qqp"])
def test_glue_accuracy_and_f1(config_name):
    result = load_metric("glue", config_name).compute(predictions=BINARY_PREDICTIONS, references=BINARY_REFERENCES)
    assert result == pytest.approx({"accuracy": 4 / 6, "f1": 2 * TP / (2 * TP + FP + FN)})
    assert result["f1"] == pytest.approx(0.75)


def test_glue_matthews_correlation():
    result = load_metric("glue", "cola").compute(predictions=BINARY_PREDICTIONS, references=BINARY_REFERENCES)
    expected = (TP * TN - FP * FN) / math.sqrt((TP + FP) * (TP + FN) * (TN + FP) * (TN + FN))
    assert expected == 0.25
    assert result == pytest.approx({"matthews_correlation": expected})


def test_glue_pearson_and_spearman():
    predictions, references = [1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 3.0, 2.0, 5.0, 4.5]
    result = load_metric("glue", "stsb").compute(predictions=predictions, references=references)
    # Ranks of the references are 1 3 2 5 4: squared rank differences sum to 4, so rho = 1 - 6 * 4 / (5 * 24).
    assert result == pytest.approx({"pearson": pearson(predictions, references), "spearmanr": 0.8})
    assert result["pearson"] == pytest.approx(9 / math.sqrt(112))


def test_glue_unknown_config_lists_the_configs():
    with pytest.raises(KeyError, match="sst2.*as the config name"):
        load_metric("glue", "imdb")


def test_glue_loads_from_its_folder_with_evaluate():
    metric = evaluate.load(str(Path(metric_path("glue")).parent), "mrpc")
    assert metric.name == "glue"
    assert metric.compute(predictions=[0, 1], references=[0, 1]) == {"accuracy": 1.0, "f1": 1.0}


@pytest.mark.parametrize("config_name", ["cola", "mrpc", "stsb", "sst2"])
def test_the_scripts_glue_scores_are_the_metrics(config_name):
    predictions, references = BINARY_PREDICTIONS, BINARY_REFERENCES
    if config_name == "stsb":
        predictions, references = [1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 3.0, 2.0, 5.0, 4.5]
    metric = load_metric("glue", config_name).compute(predictions=predictions, references=references)
    # The metric reads stsb's similarity scores as float32.
    assert glue_scores(config_name, predictions, references) == pytest.approx(metric, rel=1e-6)


def test_multi_label_scores():
    # Multi-hot rows: 2 labels right (true positives), 1 predicted wrongly, none missed; rows 2 and 3 all right.
    predictions = [[1, 0, 1], [0, 1, 0], [0, 0, 0]]
    references = [[1, 0, 0], [0, 1, 0], [0, 0, 0]]
    result = multi_label_scores(predictions, references)
    assert result == pytest.approx({"f1": 2 * 2 / (2 * 2 + 1 + 0), "accuracy": 2 / 3})
    assert multi_label_scores([[0, 0]], [[0, 0]]) == {"f1": 0.0, "accuracy": 1.0}  # no label anywhere: F1 is 0


def test_unknown_metric_lists_the_names():
    with pytest.raises(ValueError, match=r"'bleu'.*\['glue', 'squad', 'squad_v2'\]"):
        load_metric("bleu")
    assert METRIC_NAMES == ("glue", "squad", "squad_v2")


def squad_reference(question_id: str, *answers: str) -> dict:
    return {"id": question_id, "answers": {"text": list(answers), "answer_start": [0] * len(answers)}}


def squad_prediction(question_id: str, text: str) -> dict:
    return {"id": question_id, "prediction_text": text}


@pytest.fixture(scope="module")
def squad():
    return load_metric("squad")


def test_normalize_answer():
    assert normalize_answer("The  Cat!") == "cat"
    assert normalize_answer("An apple, a pear and THE banana.") == "apple pear and banana"
    assert normalize_answer("theatre") == "theatre"


def test_squad_normalisation_gives_an_exact_match(squad):
    result = squad.compute(
        predictions=[squad_prediction("q1", "The  Cat!")], references=[squad_reference("q1", "cat")]
    )
    assert result == {"exact_match": 100.0, "f1": 100.0}


def test_squad_partial_overlap_f1(squad):
    # Tokens "big red dog" against "red dog" (the article dropped): precision 2/3, recall 1, F1 0.8.
    result = squad.compute(
        predictions=[squad_prediction("q1", "big red dog")], references=[squad_reference("q1", "the red dog")]
    )
    assert result == pytest.approx({"exact_match": 0.0, "f1": 80.0})


def test_squad_takes_the_best_gold_answer(squad):
    result = squad.compute(
        predictions=[squad_prediction("q1", "red dog")], references=[squad_reference("q1", "blue", "a red dog", "dog")]
    )
    assert result == {"exact_match": 100.0, "f1": 100.0}


def test_squad_averages_over_questions(squad):
    predictions = [squad_prediction("q1", "1976"), squad_prediction("q2", "big red dog")]
    references = [squad_reference("q1", "1976"), squad_reference("q2", "red dog")]
    assert squad.compute(predictions=predictions, references=references) == pytest.approx(
        {"exact_match": 50.0, "f1": 90.0}
    )


def test_squad_unanswered_question_scores_zero(squad):
    predictions = [squad_prediction("q1", "1976"), squad_prediction("other", "1976")]
    references = [squad_reference("q1", "1976"), squad_reference("q2", "1976")]
    assert squad.compute(predictions=predictions, references=references) == {"exact_match": 50.0, "f1": 50.0}


@pytest.fixture(scope="module")
def squad_v2():
    return load_metric("squad_v2")


def squad_v2_prediction(question_id: str, text: str, no_answer_probability: float) -> dict:
    return {"id": question_id, "prediction_text": text, "no_answer_probability": no_answer_probability}


# q1 answered right; q2 unanswerable and left empty (right); q3 unanswerable but answered (wrong);
# q4 answered with F1 0.8 and no exact match.
V2_PREDICTIONS = [
    squad_v2_prediction("q1", "1976", 0.1),
    squad_v2_prediction("q2", "", 0.9),
    squad_v2_prediction("q3", "in 1980", 0.8),
    squad_v2_prediction("q4", "big red dog", 0.2),
]
V2_REFERENCES = [
    squad_reference("q1", "1976"),
    squad_reference("q2"),
    squad_reference("q3"),
    squad_reference("q4", "the red dog"),
]


def test_squad_v2_scores_answerable_and_unanswerable_questions(squad_v2):
    result = squad_v2.compute(predictions=V2_PREDICTIONS, references=V2_REFERENCES)
    # Best thresholds: abstaining everywhere scores 2 (q2, q3); answering in increasing no-answer probability
    # adds q1 (+1 -> 3 at 0.1), q4 (exact +0, F1 +0.8 -> 3.8 at 0.2), q3 (-1), q2 (0).
    expected = {
        "exact": 50.0,
        "f1": 70.0,
        "total": 4,
        "HasAns_exact": 50.0,
        "HasAns_f1": 90.0,
        "HasAns_total": 2,
        "NoAns_exact": 50.0,
        "NoAns_f1": 50.0,
        "NoAns_total": 2,
        "best_exact": 75.0,
        "best_exact_thresh": 0.1,
        "best_f1": 95.0,
        "best_f1_thresh": 0.2,
    }
    assert list(result) == list(expected)
    assert result == pytest.approx(expected)


def test_squad_v2_no_answer_threshold_abstains_on_likely_unanswerable(squad_v2):
    # q2 and q3 exceed the threshold, so both count as abstentions: right, as neither has an answer.
    result = squad_v2.compute(predictions=V2_PREDICTIONS, references=V2_REFERENCES, no_answer_threshold=0.5)
    assert result["exact"] == pytest.approx(75.0)
    assert result["f1"] == pytest.approx(95.0)
    assert (result["NoAns_exact"], result["HasAns_exact"]) == pytest.approx((100.0, 50.0))


def test_squad_v2_answerable_only_has_no_noans_keys(squad_v2):
    result = squad_v2.compute(
        predictions=[squad_v2_prediction("q1", "1976", 0.0)], references=[squad_reference("q1", "1976")]
    )
    assert result == {
        "exact": 100.0,
        "f1": 100.0,
        "total": 1,
        "HasAns_exact": 100.0,
        "HasAns_f1": 100.0,
        "HasAns_total": 1,
        "best_exact": 100.0,
        "best_exact_thresh": 0.0,
        "best_f1": 100.0,
        "best_f1_thresh": 0.0,
    }


def test_squad_v2_missing_prediction_is_named(squad_v2):
    with pytest.raises(ValueError, match="No prediction for the questions \\['q2'\\]"):
        squad_v2.compute(
            predictions=[squad_v2_prediction("q1", "", 0.5), squad_v2_prediction("other", "", 0.5)],
            references=[squad_reference("q1"), squad_reference("q2")],
        )
