"""SQuAD for `run_squad.py`: the official JSON files, questions checked and cut into windows, logits back into answers,
and their scores, as Transformers' examples/pytorch/question-answering do."""

import collections
import contextlib
import itertools
import json
import logging
import os
import sys
from pathlib import Path

import datasets
import numpy as np

from .data import check_text, load_data_files
from .errors import ScriptError, first_few
from .metrics import ANSWERS, squad_scores, squad_v2_scores
from .training import finite_or_null

logger = logging.getLogger(__name__)

# The null odds of a question without any span (JSON has no Infinity): SQuAD 2.0's script ranks it first.
NO_SPAN_ODDS = sys.float_info.max
SQUAD_FEATURES = datasets.Features(dict.fromkeys(["id", "title", "context", "question"], datasets.Value("string")))


def load_squad_json(path: str, document=None) -> datasets.Dataset:
    """The questions of an official SQuAD JSON file (or its parsed `document`), with the Hub's `squad` columns."""
    if document is None:
        check_text(path, "The SQuAD file")
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        expected = '{"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}'
        raise ScriptError(f"{path} is not in SQuAD's format: expected {expected}.")
    rows = []
    for article, paragraph in ((a, p) for a in document["data"] for p in a["paragraphs"]):
        for qa in paragraph["qas"]:
            answers = [] if qa.get("is_impossible", False) else qa.get("answers", [])
            answers = {key: [answer[key] for answer in answers] for key in ("text", "answer_start")}
            row = {"id": qa["id"], "title": article.get("title", ""), "context": paragraph["context"]}
            rows.append({**row, "question": qa["question"], "answers": answers})
    return datasets.Dataset.from_list(rows, features=datasets.Features({**SQUAD_FEATURES, "answers": ANSWERS}))


def load_squad_files(data_files: dict[str, str], cache_dir: str | None = None) -> datasets.DatasetDict:
    """SQuAD splits from local files: SQuAD's official JSON, or the Hub's columns in what `load_data_files` reads."""
    splits = {}
    for split, path in data_files.items():
        document = None
        if path.lower().endswith(".json"):
            check_text(path, "The SQuAD file")
            with contextlib.suppress(json.JSONDecodeError):  # else JSON lines
                document = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(document, dict):
            splits[split] = load_squad_json(path, document)
        else:
            splits[split] = load_data_files({split: path}, cache_dir=cache_dir)[split]
    return datasets.DatasetDict(splits)


def check_unique_ids(examples, source: str) -> None:
    """An error naming the question ids that `examples` repeat (answers are matched to questions by id)."""
    if repeated := [qid for qid, count in collections.Counter(examples["id"]).items() if count > 1]:
        raise ScriptError(
            f"{source}: {len(repeated)} question id(s) are used by more than one question ({first_few(repeated)}). Answers are matched to questions by id: give every question its own id."
        )


def check_training_answers(examples, source: str, *, version_2_with_negative: bool, skip: bool = False):
    """`examples`, checked that their answers lie in their contexts (or with `skip`, without those that do not)."""
    bad, unanswered = {}, []
    for qid, context, answers in zip(examples["id"], examples["context"], examples["answers"]):
        if not answers["text"] and not version_2_with_negative:
            bad[qid] = "no answer (unanswerable questions need --version_2_with_negative)"
            unanswered.append(qid)
        for text, start in zip(answers["text"], answers["answer_start"]):
            if context[start : start + len(text)] != text:
                bad[qid] = f"answer {text!r} is not at character {start} of its context"
                break
    if unanswered and not skip:
        raise ScriptError(
            f"{source}: {len(unanswered)} of {len(examples)} training questions have no answer ({first_few(unanswered)}), as SQuAD 2.0's unanswerable ones. Pass --version_2_with_negative to train on them as SQuAD 2.0 (--skip_invalid_answers would drop them all)."
        )
    shown = first_few((f"{qid}: {reason}" for qid, reason in bad.items()), separator="; ")
    if bad and not skip:
        raise ScriptError(
            f"{source}: {len(bad)} of {len(examples)} training questions have answers that do not match their contexts ({shown}). Fix answer_start, or pass --skip_invalid_answers."
        )
    if bad:
        logger.warning(
            f"--skip_invalid_answers: skipping {len(bad)} of {len(examples)} training questions of {source} ({shown})"
        )
    return examples.filter(lambda example: example["id"] not in bad) if bad else examples


def check_unanswered(examples, source: str, *, version_2_with_negative: bool, flag: str) -> None:
    """An error when questions for `flag` have no answer without `--version_2_with_negative` (SQuAD v1.1 scores none);
    `--do_predict` takes questions that all lack answers."""
    if version_2_with_negative or "answers" not in examples.column_names:
        return
    unanswered = [qid for qid, gold in zip(examples["id"], examples["answers"]) if not gold["text"]]
    if not unanswered or (flag == "--do_predict" and len(unanswered) == len(examples)):
        return
    if len(unanswered) == len(examples):
        raise ScriptError(
            f"{source}: none of its {len(examples)} questions has an answer, so {flag} has nothing to score against. For SQuAD 2.0 data pass --version_2_with_negative; to predict answers only, pass the questions as --test_file with --do_predict."
        )
    raise ScriptError(
        f"{source}: {len(unanswered)} of {len(examples)} questions have no answer ({first_few(unanswered)}), as SQuAD 2.0's unanswerable ones. Pass --version_2_with_negative to score them as SQuAD 2.0 ({flag} would score none of them as SQuAD v1.1)."
    )


def tokenize_windows(examples, tokenizer, max_seq_length: int, doc_stride: int, pad_to_max_length: bool):
    """Question/context pairs tokenized into windows overlapping by `doc_stride` tokens, and the context's segment."""
    pad_on_right = tokenizer.padding_side == "right"
    # Leading spaces in questions waste tokens and can push the context out of the window.
    questions = [question.lstrip() for question in examples["question"]]
    longest = max((len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]), default=0)
    window = max_seq_length - longest - 3  # [CLS] question [SEP] context [SEP]
    if window <= doc_stride:
        smaller_stride = f"a smaller --doc_stride (e.g. {window // 2}) or " if window > 1 else ""
        raise ScriptError(
            f"A question of {longest} tokens leaves {window} context tokens per feature with --max_seq_length {max_seq_length}, not more than --doc_stride {doc_stride}: use {smaller_stride}a larger max_seq_length."
        )
    texts = (questions, examples["context"]) if pad_on_right else (examples["context"], questions)
    windows = {"stride": doc_stride, "return_overflowing_tokens": True, "return_offsets_mapping": True}
    padding, truncation = "max_length" if pad_to_max_length else False, "only_second" if pad_on_right else "only_first"
    tokenized = tokenizer(*texts, truncation=truncation, max_length=max_seq_length, padding=padding, **windows)
    return tokenized, 1 if pad_on_right else 0


def prepare_train_features(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length=False):
    """Windows with the answer's `start_positions`/`end_positions`; [CLS] where the window lacks it."""
    tokenized, context_index = tokenize_windows(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length)
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    tokenized["start_positions"], tokenized["end_positions"] = [], []
    for i, offsets in enumerate(tokenized.pop("offset_mapping")):
        input_ids = tokenized["input_ids"][i]
        start = end = input_ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in input_ids else 0
        answers = examples["answers"][sample_mapping[i]]
        if answers["answer_start"]:
            start_char = answers["answer_start"][0]
            end_char = start_char + len(answers["text"][0])
            sequence_ids = tokenized.sequence_ids(i)
            first = sequence_ids.index(context_index)
            last = len(input_ids) - 1 - sequence_ids[::-1].index(context_index)
            if offsets[first][0] <= start_char and offsets[last][1] >= end_char:
                while first < len(offsets) and offsets[first][0] <= start_char:
                    first += 1
                while offsets[last][1] >= end_char:
                    last -= 1
                start, end = first - 1, last + 1
        tokenized["start_positions"].append(start)
        tokenized["end_positions"].append(end)
    return tokenized


def prepare_validation_features(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length=False):
    """Windows for prediction with their `example_id`, and an `offset_mapping` that is None outside the context."""
    tokenized, context_index = tokenize_windows(examples, tokenizer, max_seq_length, doc_stride, pad_to_max_length)
    tokenized["example_id"] = [examples["id"][sample] for sample in tokenized.pop("overflow_to_sample_mapping")]
    for i, offsets in enumerate(tokenized["offset_mapping"]):
        in_context = [segment == context_index for segment in tokenized.sequence_ids(i)]
        tokenized["offset_mapping"][i] = [offset if inside else None for offset, inside in zip(offsets, in_context)]
    return tokenized


def postprocess_qa_predictions(
    examples, features, predictions, *, version_2_with_negative=False, n_best_size=20, max_answer_length=30,
    null_score_diff_threshold=0.0, output_dir: str | None = None, prefix: str | None = None,
) -> dict[str, str]:  # fmt: skip
    """The answer of every example: its best span of at most `max_answer_length` tokens (with `version_2_with_negative`,
    none where the null score beats it by more than `null_score_diff_threshold`); with `output_dir`, written there
    (`[prefix_]predictions.json`, `nbest_predictions.json`, v2.0's `null_odds.json`)."""
    all_start_logits, all_end_logits = predictions
    features_per_example = collections.defaultdict(list)
    for i, example_id in enumerate(features["example_id"]):
        features_per_example[example_id].append(i)
    all_offsets = features["offset_mapping"]
    answers, all_nbest, null_odds = {}, {}, {}
    for example in examples:
        indices, candidates = features_per_example[example["id"]], []
        min_null_score = min(all_start_logits[i][0] + all_end_logits[i][0] for i in indices)  # start and end at [CLS]
        for i in indices:
            start_logits, end_logits, offsets = all_start_logits[i], all_end_logits[i], all_offsets[i]
            best = [np.argsort(logits)[-1 : -n_best_size - 1 : -1] for logits in (start_logits, end_logits)]
            for start, end in itertools.product(*best):
                # Spans outside the context (offset None, or past the features' padding) or too long are skipped.
                inside = max(start, end) < len(offsets) and offsets[start] is not None and offsets[end] is not None
                if inside and 0 <= end - start < max_answer_length:
                    text = example["context"][offsets[start][0] : offsets[end][1]]
                    logits = {"start_logit": float(start_logits[start]), "end_logit": float(end_logits[end])}
                    candidates.append({"text": text, "score": float(start_logits[start] + end_logits[end]), **logits})
        if version_2_with_negative:
            candidates.append({"text": "", "score": float(min_null_score), "start_logit": None, "end_logit": None})
        candidates = sorted(candidates, key=lambda candidate: candidate["score"], reverse=True)[:n_best_size]
        candidates = candidates or [{"text": "", "score": 0.0, "start_logit": 0.0, "end_logit": 0.0}]
        probabilities = np.exp((scores := np.array([c["score"] for c in candidates])) - scores.max())
        for candidate, probability in zip(candidates, probabilities / probabilities.sum()):
            candidate["probability"] = float(probability)
        answers[example["id"]], all_nbest[example["id"]] = candidates[0]["text"], candidates
        if version_2_with_negative:
            best_span = next((candidate for candidate in candidates if candidate["text"]), None)
            odds = float(min_null_score) - best_span["score"] if best_span else NO_SPAN_ODDS
            answers[example["id"]] = best_span["text"] if best_span and odds <= null_score_diff_threshold else ""
            null_odds[example["id"]] = odds
    if output_dir is not None:
        files = {"predictions.json": answers, "nbest_predictions.json": all_nbest}
        os.makedirs(output_dir, exist_ok=True)
        for name, content in (files | ({"null_odds.json": null_odds} if version_2_with_negative else {})).items():
            path = Path(output_dir) / (f"{prefix}_{name}" if prefix else name)
            path.write_text(json.dumps(finite_or_null(content), indent=4, ensure_ascii=False), encoding="utf-8")
            logger.info(f"Wrote {path}")
    return answers


def score_answers(answers: dict[str, str], examples, *, version_2_with_negative: bool) -> dict:
    """SQuAD's (or SQuAD 2.0's) scores of `answers` against `examples`' gold answers; none when they have none."""
    if "answers" not in examples.column_names or not any(gold["text"] for gold in examples["answers"]):
        logger.info("The questions have no answers to score the predictions against.")
        return {}
    references = [{"id": example["id"], "answers": example["answers"]} for example in examples]
    if version_2_with_negative:
        return squad_v2_scores(answers, dict.fromkeys(answers, 0.0), references)
    return squad_scores(answers, references)
