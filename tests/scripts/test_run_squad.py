"""run_squad.py end to end on tiny SQuAD-format fixtures (its defaults, answers skipped on request); features and
post-processing of gmlp.tasks.squad. (Bad SQuAD data: test_bad_inputs.py.)"""

import json
import logging

import numpy as np
import pytest
from helpers import tiny_run

from gmlp.tasks import run_squad
from gmlp.tasks.errors import ScriptError
from gmlp.tasks.metrics import load_metric
from gmlp.tasks.squad import (
    load_squad_json,
    postprocess_qa_predictions,
    prepare_train_features,
    prepare_validation_features,
)

CONTEXTS = [
    "the red fox lives in the green forest near the old river and eats small birds every day",
    "the king built a tall castle on the hill in the year one thousand and sang to his sister",
]
QAS = [
    (0, "where does the fox live", "the green forest"),
    (0, "what does the fox eat", "small birds"),
    (1, "what did the king build", "a tall castle"),
    (1, "who did the king sing to", "his sister"),
]


def squad_file(path, version_2=False):
    paragraphs = []
    for c, context in enumerate(CONTEXTS):
        qas = []
        for i, (index, question, answer) in enumerate(QAS):
            if index == c:
                qas.append(
                    {
                        "id": f"q{i}",
                        "question": question,
                        "answers": [{"text": answer, "answer_start": context.index(answer)}],
                    }
                )
        if version_2:
            qas.append(
                {
                    "id": f"impossible{c}",
                    "question": "what is the colour of the sky",
                    "answers": [],
                    "is_impossible": True,
                }
            )
        paragraphs.append({"context": context, "qas": qas})
    path.write_text(
        json.dumps({"version": "2.0" if version_2 else "1.1", "data": [{"title": "Tiny", "paragraphs": paragraphs}]})
    )
    return path


@pytest.fixture(scope="module")
def tokenizer_dir(make_tokenizer):
    """A tokenizer that knows the paragraphs' and the questions' words (conftest.py's make_tokenizer)."""
    texts = CONTEXTS * 5 + [question for _, question, _ in QAS] * 5 + ["what is the colour of the sky"]
    return make_tokenizer(texts, vocab_size=150)


def squad_args(tokenizer_dir, data, output_dir, *extra):
    """A tiny run of 3 steps on `data` (helpers.tiny_run), n = 48, windows of 24 tokens."""
    return tiny_run(
        output_dir,
        *extra,
        tokenizer=tokenizer_dir,
        overrides={"max_position_embeddings": 48, "hidden_dropout_prob": 0},
        train_file=data,
        validation_file=data,
        do_train=True,
        do_eval=True,
        max_steps=3,
        max_seq_length=24,
        doc_stride=6,
        per_device_train_batch_size=4,
    )


@pytest.mark.parametrize("version_2", [False, True])
def test_trains_and_writes_official_predictions_and_metrics(tmp_path, tokenizer_dir, version_2):
    data = squad_file(tmp_path / "squad.json", version_2)
    output_dir = tmp_path / "out"
    extra = ["--version_2_with_negative"] if version_2 else []
    run_squad.run(squad_args(tokenizer_dir, data, output_dir, *extra))

    predictions = json.loads((output_dir / "predictions.json").read_text())
    examples = load_squad_json(str(data))
    assert sorted(predictions) == sorted(examples["id"])
    for example in examples:  # every answer is a span of its context (or empty)
        assert predictions[example["id"]] in example["context"]
    nbest = json.loads((output_dir / "nbest_predictions.json").read_text())
    assert set(nbest) == set(predictions) and all(
        0.99 < sum(c["probability"] for c in v) < 1.01 for v in nbest.values()
    )
    assert (output_dir / "null_odds.json").is_file() == version_2

    # The reported metrics are the packaged SQuAD metric on predictions.json.
    metric = load_metric("squad_v2" if version_2 else "squad")
    references = [{"id": e["id"], "answers": e["answers"]} for e in examples]
    if version_2:
        preds = [{"id": k, "prediction_text": v, "no_answer_probability": 0.0} for k, v in predictions.items()]
        expected = metric.compute(predictions=preds, references=references)
        keys = {"exact": "eval_exact", "f1": "eval_f1"}
    else:
        preds = [{"id": k, "prediction_text": v} for k, v in predictions.items()]
        expected = metric.compute(predictions=preds, references=references)
        keys = {"exact_match": "eval_exact_match", "f1": "eval_f1"}
    for name in ("eval_results.json", "all_results.json"):
        results = json.loads((output_dir / name).read_text())
        for key, reported in keys.items():
            assert results[reported] == expected[key]
    assert results["eval_samples"] == len(examples)


def test_long_context_is_split_and_answers_are_located(tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    batch = load_squad_json(str(squad_file_path(tokenizer_dir)))[:1]
    train = prepare_train_features(batch, tokenizer, max_seq_length=16, doc_stride=4)
    assert len(train["input_ids"]) > 1  # the context did not fit one window
    found = 0
    for ids, start, end in zip(train["input_ids"], train["start_positions"], train["end_positions"]):
        if start != 0:
            assert tokenizer.decode(ids[start : end + 1]) == "the green forest"
            found += 1
    assert found >= 1
    features = prepare_validation_features(batch, tokenizer, max_seq_length=16, doc_stride=4)
    assert features["example_id"] == ["q0"] * len(features["input_ids"])
    assert all(offset is None for offset in features["offset_mapping"][0][:3])  # [CLS] and the question


def squad_file_path(tokenizer_dir):
    from pathlib import Path

    return squad_file(Path(tokenizer_dir) / "fixture.json")


def test_postprocessing_picks_the_best_span_and_the_null_answer(tmp_path):
    import datasets

    examples = datasets.Dataset.from_list(
        [{"id": "a", "context": "red fox jumps"}, {"id": "b", "context": "blue sky"}]
    )
    offsets = [None, (0, 3), (4, 7), (8, 13)]
    features = datasets.Dataset.from_list(
        [
            {"example_id": "a", "offset_mapping": offsets},
            {"example_id": "b", "offset_mapping": [None, (0, 4), (5, 8), None]},
        ]
    )
    start = np.array([[0.0, 1.0, 5.0, 0.0], [9.0, 1.0, 0.0, 0.0]])
    end = np.array([[0.0, 0.0, 1.0, 6.0], [9.0, 0.0, 2.0, 0.0]])
    v1 = postprocess_qa_predictions(examples, features, (start, end))
    assert v1 == {"a": "fox jumps", "b": "blue sky"}
    v2 = postprocess_qa_predictions(
        examples, features, (start, end), version_2_with_negative=True, output_dir=str(tmp_path)
    )
    assert v2 == {"a": "fox jumps", "b": ""}  # b's null score 18 beats its best span 3
    assert json.loads((tmp_path / "null_odds.json").read_text()) == {"a": -11.0, "b": 15.0}
    v1_short = postprocess_qa_predictions(examples, features, (start, end), max_answer_length=1)
    assert v1_short["a"] == "fox"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"version": "1.1"}, r"is not in SQuAD's format"),
        (None, r"^--train_file \S*squad.json: no such file; --validation_file \S*squad.json: no such file\.$"),
    ],
)
def test_bad_squad_files_stop_early(tmp_path, tokenizer_dir, content, message):
    data = tmp_path / "squad.json"
    if content is not None:
        data.write_text(json.dumps(content))
    with pytest.raises(ScriptError, match=message):
        run_squad.run(squad_args(tokenizer_dir, data, tmp_path / "out"))


def test_jsonl_without_answers_names_the_missing_column(tmp_path, tokenizer_dir):
    data = tmp_path / "squad.jsonl"
    data.write_text(json.dumps({"id": "1", "question": "q", "context": "c"}) + "\n")
    with pytest.raises(ValueError, match=r"has no column\(s\) \['answers'\]"):
        run_squad.run(squad_args(tokenizer_dir, data, tmp_path / "out"))


def test_bad_answers_can_be_skipped_with_a_count(tmp_path, tokenizer_dir, caplog):
    document = json.loads(squad_file(tmp_path / "squad.json").read_text())
    shifted = {
        "id": "shifted",
        "question": "where does the fox live",
        "answers": [{"text": "the green forest", "answer_start": 3}],
    }
    document["data"][0]["paragraphs"][0]["qas"].append(shifted)
    (tmp_path / "train.json").write_text(json.dumps(document))
    arguments = squad_args(tokenizer_dir, tmp_path / "train.json", tmp_path / "out", "--skip_invalid_answers")
    arguments[arguments.index("--validation_file") + 1] = str(tmp_path / "squad.json")
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_squad.run(arguments)
    assert "--skip_invalid_answers: skipping 1 of 5 training questions" in caplog.text and "shifted" in caplog.text
    assert json.loads((tmp_path / "out" / "train_results.json").read_text())["train_samples"] >= 4


def test_the_defaults_fit_a_model_of_128_tokens(tmp_path, tokenizer_dir):
    arguments = squad_args(tokenizer_dir, squad_file(tmp_path / "squad.json"), tmp_path / "out")
    for flag in ("--max_seq_length", "--doc_stride"):  # 128 and 32, derived from n
        del arguments[arguments.index(flag) : arguments.index(flag) + 2]
    arguments[arguments.index("--config_overrides") + 1] += ",max_position_embeddings=128"
    run_squad.run(arguments)
    assert json.loads((tmp_path / "out" / "eval_results.json").read_text())["eval_samples"] == 4
