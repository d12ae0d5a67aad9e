"""The scores of GLUE and SQuAD (as SQuAD's official scripts compute them), which the scripts call directly; and the
Hub's `glue`, `squad` and `squad_v2` metrics over them offline (`load_metric`, or `evaluate.load` of a folder)."""

import re
import string
from collections import Counter
from pathlib import Path

import datasets
import evaluate
import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef

METRIC_NAMES = ("glue", "squad", "squad_v2")
# The squad and squad_v2 metrics' inputs, as on the Hub; ANSWERS is also the Hub's SQuAD datasets' answers feature.
SQUAD_PREDICTION = {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")}
ANSWERS = datasets.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})
SQUAD_REFERENCE = {"id": datasets.Value("string"), "answers": ANSWERS}


def metric_path(name: str) -> str:
    if name not in METRIC_NAMES:
        raise ValueError(f"Unknown metric {name!r}: the package ships {list(METRIC_NAMES)}.")
    return str(Path(__file__).parent / name / f"{name}.py")


def load_metric(name: str, config_name: str | None = None) -> evaluate.EvaluationModule:
    """The packaged metric `name` (for "glue", a GLUE task as `config_name`), loaded by `evaluate` without the Hub."""
    return evaluate.load(metric_path(name), config_name)


def accuracy(predictions, references) -> dict:
    return {"accuracy": float((np.asarray(predictions) == np.asarray(references)).mean())}


# Each GLUE score, from predicted and reference labels (or similarity scores, for pearson and spearmanr).
SCORES = {
    "accuracy": lambda p, r: accuracy(p, r)["accuracy"],
    "f1": lambda p, r: float(f1_score(y_true=r, y_pred=p)),
    "matthews_correlation": lambda p, r: float(matthews_corrcoef(r, p)),
    "pearson": lambda p, r: float(pearsonr(p, r)[0]),
    "spearmanr": lambda p, r: float(spearmanr(p, r)[0]),
}
# The scores of each of the glue metric's configurations (the GLUE tasks, and HANS).
GLUE_METRICS = {
    "cola": ("matthews_correlation",),
    "stsb": ("pearson", "spearmanr"),
    **dict.fromkeys(["mrpc", "qqp"], ("accuracy", "f1")),
    **dict.fromkeys(["sst2", "mnli", "mnli_mismatched", "mnli_matched", "qnli", "rte", "wnli", "hans"], ("accuracy",)),
}


def glue_scores(config_name: str, predictions, references) -> dict:
    """The scores of the GLUE task `config_name`."""
    return {name: SCORES[name](predictions, references) for name in GLUE_METRICS[config_name]}


def multi_label_scores(predictions, references) -> dict:
    """Micro-averaged F1 of multi-hot predictions, and the share of examples whose labels are all right."""
    predictions, references = np.asarray(predictions).astype(int), np.asarray(references).astype(int)
    return {
        "f1": float(f1_score(y_true=references, y_pred=predictions, average="micro", zero_division=0.0)),
        "accuracy": float((predictions == references).all(axis=1).mean()),
    }


def normalize_answer(text: str) -> str:
    """Lowercase, remove punctuation and the articles a/an/the, and collapse whitespace."""
    text = "".join(char for char in text.lower() if char not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def exact_and_f1(prediction: str, gold: str, empty_matches_empty: bool) -> tuple[int, float]:
    """Whether the normalised texts are equal, and the F1 of their tokens (`empty_matches_empty`: SQuAD v2.0's)."""
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if empty_matches_empty and not (predicted and expected):
        return int(predicted == expected), float(predicted == expected)
    same = sum((Counter(predicted) & Counter(expected)).values())
    f1 = 0.0 if same == 0 else 2 * same / (len(predicted) + len(expected))
    return int(predicted == expected), f1


def squad_scores(predictions: dict[str, str], references: list[dict]) -> dict:
    """SQuAD v1.1's exact match and F1 in percent, each the best over a question's gold answers."""
    exact = f1 = 0.0
    for reference in references:
        golds = reference["answers"]["text"]
        if not golds:
            raise ValueError(f"Question {reference['id']!r} has no gold answer: score SQuAD v2.0 with squad_v2.")
        if reference["id"] in predictions:
            scores = [exact_and_f1(predictions[reference["id"]], gold, False) for gold in golds]
            exact, f1 = exact + max(s[0] for s in scores), f1 + max(s[1] for s in scores)
    return {"exact_match": 100.0 * exact / len(references), "f1": 100.0 * f1 / len(references)}


def squad_v2_scores(predictions: dict[str, str], no_answer: dict[str, float], references: list[dict], threshold=1.0):
    """SQuAD v2.0's scores in percent, overall, HasAns and NoAns (above `threshold` a question abstains), and the best
    of each over all thresholds."""
    if missing := [reference["id"] for reference in references if reference["id"] not in predictions]:
        raise ValueError(f"No prediction for the questions {missing}: give one prediction per reference.")
    has_answer = {reference["id"]: bool(reference["answers"]["text"]) for reference in references}
    raw = {}  # id -> (exact, f1), the best over the gold answers; an unanswerable question's only one is ""
    for reference in references:
        golds = [text for text in reference["answers"]["text"] if normalize_answer(text)] or [""]
        scores = [exact_and_f1(predictions[reference["id"]], gold, True) for gold in golds]
        raw[reference["id"]] = (max(s[0] for s in scores), max(s[1] for s in scores))
    answerable = [qid for qid in raw if has_answer[qid]]
    groups = {"": list(raw), "HasAns_": answerable, "NoAns_": [qid for qid in raw if not has_answer[qid]]}
    result = {}
    for prefix, ids in groups.items():
        for kind, index in (("exact", 0), ("f1", 1)) if ids else ():
            # Above `threshold` a question abstains, which is right only where it has no answer.
            scores = [float(not has_answer[qid]) if no_answer[qid] > threshold else raw[qid][index] for qid in ids]
            result[f"{prefix}{kind}"] = 100.0 * sum(scores) / len(ids)
        result |= {f"{prefix}total": len(ids)} if ids else {}
    for kind, index in (("exact", 0), ("f1", 1)):
        # Abstaining everywhere scores the unanswerable questions; then answer them by rising no-answer probability.
        current = best = sum(not answerable for answerable in has_answer.values())
        best_threshold = 0.0
        for qid in sorted((q for q in no_answer if q in raw), key=no_answer.get):
            current += raw[qid][index] if has_answer[qid] else -bool(predictions[qid])
            if current > best:
                best, best_threshold = current, no_answer[qid]
        result |= {f"best_{kind}": 100.0 * best / len(raw), f"best_{kind}_thresh": best_threshold}
    return result
