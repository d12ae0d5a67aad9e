"""SQuAD for `run_squad.py`: reading the official JSON files, turning examples into features (long contexts split
with a stride), and turning start/end logits back into answer texts, as in Transformers' examples/pytorch/
question-answering (run_qa.py and utils_qa.py)."""

import collections
import json
import logging
import os

import datasets
import numpy as np

from .training import check_text_file, load_data_files, require_columns

logger = logging.getLogger(__name__)

SQUAD_FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "title": datasets.Value("string"),
        "context": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answers": {
            "text": datasets.Sequence(datasets.Value("string")),
            "answer_start": datasets.Sequence(datasets.Value("int32")),
        },
    }
)


def load_squad_json(path: str) -> datasets.Dataset:
    """The questions of an official SQuAD v1.1 / v2.0 JSON file, one row each, with the Hub's `squad` columns.

    Unanswerable v2.0 questions (`is_impossible`) get empty answers.
    """
    squad = read_json(path)
    if squad is None:
        raise ValueError(f"{path} is not a JSON file; expected SQuAD's official JSON format.")
    return squad_rows(squad, path)


def read_json(path: str):
    """The JSON document in `path`, or None if it is not one (e.g. JSON lines); clear errors for a missing, empty or
    non-UTF-8 file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"SQuAD file {path!r} does not exist; check the --train_file / --validation_file path."
        )
    check_text_file(path, "The SQuAD file")
    with open(path, encoding="utf-8") as file:
        try:
            return json.load(file)
        except json.JSONDecodeError:
            return None


def squad_rows(squad, path: str) -> datasets.Dataset:
    """The questions of a parsed official SQuAD document (read from `path`), with the Hub's `squad` columns."""
    if not isinstance(squad, dict) or not isinstance(squad.get("data"), list):
        raise ValueError(  # noqa: TRY004 (a file's content, not an argument's type)
            f'{path} is not in SQuAD\'s format: expected {{"data": [{{"title", "paragraphs": [{{"context", '
            '"qas": [...]}]}]}]}.'
        )
    rows = []
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [] if qa.get("is_impossible", False) else qa.get("answers", [])
                rows.append(
                    {
                        "id": qa["id"],
                        "title": article.get("title", ""),
                        "context": paragraph["context"],
                        "question": qa["question"],
                        "answers": {
                            "text": [answer["text"] for answer in answers],
                            "answer_start": [answer["answer_start"] for answer in answers],
                        },
                    }
                )
    return datasets.Dataset.from_list(rows, features=SQUAD_FEATURES)


def load_squad_files(data_files: dict[str, str | None], cache_dir: str | None = None) -> datasets.DatasetDict:
    """SQuAD splits from local files: official SQuAD JSON (`.json` with a top-level "data" list), or files with the
    Hub's columns (`id`, `question`, `context`, `answers`) in any format that `load_data_files` reads."""
    splits = {}
    for split, path in data_files.items():
        if path is None:
            continue
        document = read_json(path) if path.lower().endswith(".json") else None
        if isinstance(document, dict):  # SQuAD's official layout, rather than JSON lines
            splits[split] = squad_rows(document, path)
        else:
            splits[split] = load_data_files({split: path}, cache_dir=cache_dir)[split]
    return datasets.DatasetDict(splits)


def check_training_answers(
    examples: datasets.Dataset, source: str, version_2_with_negative: bool, skip: bool = False
) -> datasets.Dataset:
    """`examples` whose answers all lie in their contexts (`context[start:start + len(text)] == text`): a shifted
    `answer_start` would train on the wrong span without any error. Raises ValueError naming the bad questions'
    ids, or, with `skip`, drops them and logs how many. An empty answer list is only allowed in SQuAD 2.0."""
    bad = {}
    for qid, context, answers in zip(examples["id"], examples["context"], examples["answers"]):
        if not answers["text"]:
            if not version_2_with_negative:
                bad[qid] = "no answer (unanswerable questions need --version_2_with_negative)"
            continue
        for text, start in zip(answers["text"], answers["answer_start"]):
            if context[start : start + len(text)] != text:
                bad[qid] = f"answer {text!r} is not at character {start} of its context"
                break
    if not bad:
        return examples
    shown = "; ".join(f"{qid}: {reason}" for qid, reason in list(bad.items())[:3])
    if not skip:
        raise ValueError(
            f"{source}: {len(bad)} of {len(examples)} training questions have answers that do not match their "
            f"contexts ({shown}{'; ...' if len(bad) > 3 else ''}). Fix the answer_start offsets, or pass "
            "--skip_invalid_answers to train without those questions."
        )
    logger.warning(
        f"--skip_invalid_answers: skipping {len(bad)} of {len(examples)} training questions of {source} ({shown})"
    )
    return examples.filter(lambda example: example["id"] not in bad)


def check_squad_columns(dataset: datasets.Dataset, source: str, needs_answers: bool) -> None:
    """Raise ValueError naming the SQuAD columns (`id`, `question`, `context`, `answers`) that `dataset` lacks."""
    columns = ["id", "question", "context"] + (["answers"] if needs_answers else [])
    require_columns(dataset, columns, source, hint=f"SQuAD needs {columns}.")


def _check_window(questions: list[str], tokenizer, max_seq_length: int, doc_stride: int) -> None:
    """Raise ValueError when a question leaves a context window no longer than `doc_stride` tokens (the windows
    could not advance; the tokenizer would fail with a panic)."""
    longest = max((len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]), default=0)
    # [CLS] question [SEP] context [SEP]
    window = max_seq_length - longest - 3
    if window <= doc_stride:
        smaller_stride = f"a smaller --doc_stride (e.g. {window // 2}) or " if window > 1 else ""
        raise ValueError(
            f"A question of {longest} tokens leaves {window} context tokens per feature with --max_seq_length "
            f"{max_seq_length}, not more than --doc_stride {doc_stride}. Use {smaller_stride}a larger --max_seq_length."
        )


def _tokenize_windows(examples, tokenizer, max_seq_length: int, doc_stride: int, pad_to_max_length: bool):
    """Question/context pairs tokenized into overlapping windows of the context; also the context's segment index."""
    pad_on_right = tokenizer.padding_side == "right"
    # Leading spaces in questions waste tokens and can push the context out of the window.
    questions = [question.lstrip() for question in examples["question"]]
    _check_window(questions, tokenizer, max_seq_length, doc_stride)
    tokenized = tokenizer(
        questions if pad_on_right else examples["context"],
        examples["context"] if pad_on_right else questions,
        truncation="only_second" if pad_on_right else "only_first",
        max_length=max_seq_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding="max_length" if pad_to_max_length else False,
    )
    return tokenized, 1 if pad_on_right else 0


def prepare_train_features(examples, tokenizer, max_seq_length: int, doc_stride: int, pad_to_max_length: bool = False):
    """Tokenized question/context pairs with `start_positions`/`end_positions` of the answer's tokens.

    A context too long for `max_seq_length` gives several features that overlap by `doc_stride` tokens; a feature
    that does not contain the answer (or an unanswerable question) points at [CLS] (index 0).
    """
    tokenized, context_index = _tokenize_windows(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length)
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    offset_mapping = tokenized.pop("offset_mapping")
    tokenized["start_positions"], tokenized["end_positions"] = [], []
    for i, offsets in enumerate(offset_mapping):
        input_ids = tokenized["input_ids"][i]
        cls_index = input_ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in input_ids else 0
        sequence_ids = tokenized.sequence_ids(i)
        answers = examples["answers"][sample_mapping[i]]
        if len(answers["answer_start"]) == 0:
            tokenized["start_positions"].append(cls_index)
            tokenized["end_positions"].append(cls_index)
            continue
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        token_start = sequence_ids.index(context_index)
        token_end = len(input_ids) - 1 - sequence_ids[::-1].index(context_index)
        if not (offsets[token_start][0] <= start_char and offsets[token_end][1] >= end_char):
            tokenized["start_positions"].append(cls_index)
            tokenized["end_positions"].append(cls_index)
            continue
        while token_start < len(offsets) and offsets[token_start][0] <= start_char:
            token_start += 1
        tokenized["start_positions"].append(token_start - 1)
        while offsets[token_end][1] >= end_char:
            token_end -= 1
        tokenized["end_positions"].append(token_end + 1)
    return tokenized


def prepare_validation_features(
    examples, tokenizer, max_seq_length: int, doc_stride: int, pad_to_max_length: bool = False
):
    """Tokenized question/context pairs for evaluation, each with the `example_id` it came from and an
    `offset_mapping` that is None outside the context (so that only context tokens can be predicted)."""
    tokenized, context_index = _tokenize_windows(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length)
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    tokenized["example_id"] = []
    for i in range(len(tokenized["input_ids"])):
        sequence_ids = tokenized.sequence_ids(i)
        tokenized["example_id"].append(examples["id"][sample_mapping[i]])
        tokenized["offset_mapping"][i] = [
            offset if sequence_ids[k] == context_index else None
            for k, offset in enumerate(tokenized["offset_mapping"][i])
        ]
    return tokenized


def postprocess_qa_predictions(
    examples: datasets.Dataset,
    features: datasets.Dataset,
    predictions: tuple[np.ndarray, np.ndarray],
    version_2_with_negative: bool = False,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    null_score_diff_threshold: float = 0.0,
    output_dir: str | None = None,
    prefix: str | None = None,
) -> dict[str, str]:
    """The answer text of every example from the start/end logits of its features.

    For each feature the `n_best_size` best start and end positions are paired into spans of the context at most
    `max_answer_length` tokens long; an example's answer is its best span over all its features. With
    `version_2_with_negative`, the answer is empty when the null score (start and end at [CLS]) beats the best span's
    score by more than `null_score_diff_threshold`.

    With `output_dir`, writes `predictions.json` ({id: text}, SQuAD's official format), `nbest_predictions.json`
    and, for v2.0, `null_odds.json` there (prefixed by `prefix_`).
    """
    all_start_logits, all_end_logits = predictions
    if len(all_start_logits) != len(features):
        raise ValueError(f"Got {len(all_start_logits)} predictions for {len(features)} features.")
    features_per_example = collections.defaultdict(list)
    example_index = {example_id: i for i, example_id in enumerate(examples["id"])}
    for i, example_id in enumerate(features["example_id"]):
        features_per_example[example_index[example_id]].append(i)

    all_offsets = features["offset_mapping"]
    answers, all_nbest, null_odds = {}, {}, {}
    for index, example in enumerate(examples):
        context = example["context"]
        min_null_score, candidates = None, []
        for feature_index in features_per_example[index]:
            start_logits, end_logits = all_start_logits[feature_index], all_end_logits[feature_index]
            offsets = all_offsets[feature_index]
            null_score = start_logits[0] + end_logits[0]
            if min_null_score is None or null_score < min_null_score:
                min_null_score = null_score
            start_indexes = np.argsort(start_logits)[-1 : -n_best_size - 1 : -1]
            end_indexes = np.argsort(end_logits)[-1 : -n_best_size - 1 : -1]
            for start in start_indexes:
                for end in end_indexes:
                    # Spans outside the context (offset None, or past the features' padding) or too long are skipped.
                    if start >= len(offsets) or end >= len(offsets) or offsets[start] is None or offsets[end] is None:
                        continue
                    if end < start or end - start + 1 > max_answer_length:
                        continue
                    candidates.append(
                        {
                            "offsets": (offsets[start][0], offsets[end][1]),
                            "score": float(start_logits[start] + end_logits[end]),
                            "start_logit": float(start_logits[start]),
                            "end_logit": float(end_logits[end]),
                        }
                    )
        candidates = sorted(candidates, key=lambda candidate: candidate["score"], reverse=True)[:n_best_size]
        for candidate in candidates:
            start_char, end_char = candidate.pop("offsets")
            candidate["text"] = context[start_char:end_char]
        if version_2_with_negative:
            null = {"text": "", "score": float(min_null_score), "start_logit": None, "end_logit": None}
            candidates = sorted(candidates + [null], key=lambda candidate: candidate["score"], reverse=True)[
                :n_best_size
            ]
        if not candidates:
            candidates = [{"text": "", "score": 0.0, "start_logit": 0.0, "end_logit": 0.0}]
        scores = np.array([candidate["score"] for candidate in candidates])
        probabilities = np.exp(scores - scores.max())
        probabilities /= probabilities.sum()
        for candidate, probability in zip(candidates, probabilities):
            candidate["probability"] = float(probability)

        best_span = next((candidate for candidate in candidates if candidate["text"]), None)
        if not version_2_with_negative:
            answers[example["id"]] = candidates[0]["text"]
        else:
            best_span_score = best_span["score"] if best_span is not None else -np.inf
            score_diff = float(min_null_score) - best_span_score
            null_odds[example["id"]] = score_diff
            answers[example["id"]] = "" if score_diff > null_score_diff_threshold else best_span["text"]
        all_nbest[example["id"]] = candidates

    if output_dir is not None:
        write_prediction_files(output_dir, prefix, answers, all_nbest, null_odds if version_2_with_negative else None)
    return answers


def write_prediction_files(output_dir: str, prefix: str | None, answers: dict, nbest: dict, null_odds: dict | None):
    """Write `predictions.json`, `nbest_predictions.json` and (v2.0) `null_odds.json` into `output_dir`."""
    os.makedirs(output_dir, exist_ok=True)
    stem = f"{prefix}_" if prefix else ""
    files = {"predictions.json": answers, "nbest_predictions.json": nbest}
    if null_odds is not None:
        files["null_odds.json"] = null_odds
    for name, content in files.items():
        path = os.path.join(output_dir, stem + name)
        with open(path, "w", encoding="utf-8") as file:
            json.dump(content, file, indent=4, ensure_ascii=False)
        logger.info(f"Wrote {path}")


def metric_inputs(answers: dict[str, str], examples: datasets.Dataset, version_2_with_negative: bool):
    """`predictions` and `references` in the format of the `squad` / `squad_v2` metrics."""
    if version_2_with_negative:
        predictions = [
            {"id": example_id, "prediction_text": text, "no_answer_probability": 0.0}
            for example_id, text in answers.items()
        ]
    else:
        predictions = [{"id": example_id, "prediction_text": text} for example_id, text in answers.items()]
    references = [{"id": example["id"], "answers": example["answers"]} for example in examples]
    return predictions, references


__all__ = [
    "SQUAD_FEATURES",
    "check_squad_columns",
    "load_squad_files",
    "load_squad_json",
    "metric_inputs",
    "postprocess_qa_predictions",
    "prepare_train_features",
    "prepare_validation_features",
    "write_prediction_files",
]
