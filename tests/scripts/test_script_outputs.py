"""What the scripts write: a model card that says what the model is and how to load it (only where a run trained), a
tokenizer that says the length the model was trained at (the run's --max_seq_length, at most n, never the limit of
the tokenizer the run started from), predictions of --do_predict alone, strict JSON; --config_overrides sets a field
whose default is None; and the docs' set-ups run as written: docs/deploy.md's tokenizer line loads without asking to
run code, docs/scripts.md's causal-pretraining set-up gives a folder that Transformers' stock run_clm.py takes (it loads through
AutoModelForCausalLM where this package is not installed)."""

import json
import logging
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import CONTEXT, SCRIPT_SIZES, WORDS, flags, load_as_remote_code, rotated_lines, tiny_run, write
from huggingface_hub.errors import StrictDataclassError
from script_runs import COMMON, strict_json
from transformers import AutoTokenizer, Trainer, TrainingArguments

from gmlp import GMLPConfig, GMLPForQuestionAnswering, GMLPForSequenceClassification, GMLPModel
from gmlp.tasks import run_glue, run_mlm, run_squad, squad, training
from gmlp.tasks.arguments import ModelArguments
from gmlp.tasks.loading import load_config

DOCS = Path(__file__).parents[2] / "docs"


# ---- the model card: what the model is, how to load it; only where a run trained ---------------------------------
TWO_STEPS = flags(report_to="none", save_strategy="no", per_device_train_batch_size=2, max_steps=2, max_seq_length=16)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, tokenizer_dir):
    """A tiny aMLP checkpoint (n = 16), pretrained from scratch by run_mlm.py."""
    root = tmp_path_factory.mktemp("mlm")
    text = write(root / "text.txt", "\n".join(rotated_lines(30)) + "\n")
    options = {"config_name": "amlp-tiny", "overrides": {"max_position_embeddings": 16}, "tokenizer": tokenizer_dir}
    run_mlm.run(tiny_run(root / "model", *TWO_STEPS, train_file=text, do_train=True, do_eval=True, **options))
    return root / "model"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, pretrained):
    """A sentence classifier fine-tuned from `pretrained` by run_glue.py."""
    root = tmp_path_factory.mktemp("glue")
    train = write(
        root / "train.csv",
        "sentence,label\n" + "\n".join(f"{' '.join(WORDS[i : i + 6])},{i % 2}" for i in range(12)) + "\n",
    )
    arguments = flags(
        model_name_or_path=pretrained, train_file=train, validation_file=train, do_train=True, do_eval=True
    )
    run_glue.run([*arguments, "--output_dir", str(root / "classifier"), *TWO_STEPS])
    return root / "classifier"


def test_pretraining_card_says_what_the_model_is_and_how_to_load_it(pretrained):
    card = (pretrained / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\ntags:\n- gmlp\n- fill-mask\npipeline_tag: fill-mask\n")
    assert "base_model" not in card and "huggingface.co//" not in card
    assert "aMLP: 2 blocks, d_model 32, d_ffn 64, n 16 tokens, toeplitz spatial weights, tiny attention 32" in card
    assert "trained from scratch, on text.txt." in card and "Pay Attention to MLPs" in card
    assert 'AutoModelForMaskedLM.from_pretrained("model", trust_remote_code=True)' in card
    results = json.loads((pretrained / "all_results.json").read_text())
    assert f"| perplexity | {results['perplexity']:.4g} |" in card
    assert "| learning_rate | 5e-05 |" in card and "| steps | 2 |" in card


def test_fine_tuning_card_names_its_local_base_without_a_broken_link(pretrained, classifier):
    card = (classifier / "README.md").read_text()
    assert "fine-tuned from a local checkpoint (model), on train.csv." in card
    assert "base_model" not in card and "https://huggingface.co/" + str(pretrained) not in card
    assert 'AutoModelForSequenceClassification.from_pretrained("classifier", trust_remote_code=True)' in card
    assert "| eval_accuracy |" in card


def test_evaluating_writes_no_model_card(classifier, tmp_path):
    arguments = flags(model_name_or_path=classifier, validation_file=classifier.parent / "train.csv", do_eval=True)
    run_glue.run([*arguments, "--output_dir", str(tmp_path / "out"), *TWO_STEPS])
    assert (tmp_path / "out" / "eval_results.json").is_file() and not (tmp_path / "out" / "README.md").exists()


LOAD_CARD = """
import re, sys
sys.modules["gmlp"] = None  # the package is not installed
exec(re.search(r"```python\\n(.*?)```", open(sys.argv[1]).read(), re.S).group(1))
print(type(model).__name__, type(tokenizer).__name__)
"""


@pytest.mark.e2e
def test_the_cards_snippet_loads_model_and_tokenizer_without_gmlp_and_without_a_prompt(classifier, tmp_path):
    command = [sys.executable, "-c", LOAD_CARD, str(classifier / "README.md")]
    result = subprocess.run(command, cwd=classifier.parent, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    assert result.stdout.split()[-2:] == ["GMLPForSequenceClassification", "TokenizersBackend"]


# ---- --do_predict alone predicts; strict JSON -------------------------------------------------------------------
def questions(with_answers: bool) -> str:
    qas = [
        {"id": f"q{i}", "question": f"where is {answer}"}
        for i, answer in enumerate(["the green forest", "small birds"])
    ]
    for qa in qas if with_answers else []:
        answer = qa["question"].removeprefix("where is ")
        qa["answers"] = [{"text": answer, "answer_start": CONTEXT.index(answer)}]
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]})


@pytest.mark.parametrize("with_answers", [False, True], ids=["questions only", "with answers"])
def test_run_squad_predicts_a_test_file_alone(script_tokenizer, tmp_path, with_answers):
    GMLPForQuestionAnswering(GMLPConfig(vocab_size=120, **SCRIPT_SIZES)).save_pretrained(tmp_path / "qa")
    script_tokenizer.save_pretrained(tmp_path / "qa")
    test, out = write(tmp_path / "test.json", questions(with_answers)), tmp_path / "out"
    run_squad.run(
        [*flags(model_name_or_path=tmp_path / "qa", test_file=test, do_predict=True, output_dir=out), *COMMON]
    )
    predictions = json.loads((out / "predict_predictions.json").read_text())
    assert sorted(predictions) == ["q0", "q1"] and all(text in CONTEXT for text in predictions.values())
    results = json.loads((out / "predict_results.json").read_text())
    assert ("predict_exact_match" in results) == with_answers and results["predict_samples"] == 2
    assert not (out / "README.md").exists()  # nothing was trained: no card claims it was


def test_null_odds_of_a_question_without_any_span_are_finite(tmp_path):
    examples = [{"id": "q0", "context": CONTEXT}, {"id": "q1", "context": CONTEXT}]
    # q0's only window has no context token: no span at all; q1's best span is "red fox" against a null score of 0.
    features = {"example_id": ["q0", "q1"], "offset_mapping": [[None] * 4, [None, (4, 7), (8, 11), None]]}
    logits = ([[0.0, 1.0, 0.0, 0.0], [0.0, 3.0, 1.0, 0.0]], [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 2.0, 0.0]])
    options = {"version_2_with_negative": True, "n_best_size": 2, "output_dir": str(tmp_path)}
    answers = squad.postprocess_qa_predictions(examples, features, logits, **options)
    assert answers == {"q0": "", "q1": "red fox"}
    assert strict_json(tmp_path / "null_odds.json") == {"q0": sys.float_info.max, "q1": -5.0}
    assert strict_json(tmp_path / "predictions.json") == answers


def test_metrics_that_are_no_finite_number_are_written_as_null(tmp_path):
    arguments = TrainingArguments(str(tmp_path), report_to="none")
    trainer = Trainer(model=GMLPForSequenceClassification(GMLPConfig(vocab_size=120, **SCRIPT_SIZES)), args=arguments)
    training.record_metrics(trainer, "eval", {"eval_loss": math.nan, "eval_perplexity": math.inf, "eval_samples": 3})
    expected = {"eval_loss": None, "eval_perplexity": None, "eval_samples": 3}
    assert strict_json(tmp_path / "eval_results.json") == expected == strict_json(tmp_path / "all_results.json")


# ---- the saved tokenizer says the length the model was trained at -------------------------------------------------
def squad_json() -> str:
    answer = {"text": "the green forest", "answer_start": CONTEXT.index("the green forest")}
    qas = [{"id": "q0", "question": "where is the green forest", "answers": [answer]}]
    return json.dumps({"version": "v1.1", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]})


SCRIPTS = {  # script -> its main and the name and text of its training file
    "run_mlm": (run_mlm.run, "train.txt", "\n".join(rotated_lines(40)) + "\n"),
    "run_glue": (
        run_glue.run,
        "train.csv",
        "sentence,label\n" + "".join(f"{s},{i % 2}\n" for i, s in enumerate(rotated_lines(8))),
    ),
    "run_squad": (run_squad.run, "train.json", squad_json()),
}
LENGTHS = {  # case -> the tokenizer's model_max_length, --max_seq_length, the model_max_length saved (n is 32)
    "a longer tokenizer, a shorter run": (512, 24, 24),
    "a longer tokenizer, no length given": (512, None, 32),
    "a shorter tokenizer, the model's n": (16, 32, 32),
    "a shorter tokenizer, no length given": (16, None, 16),
}


@pytest.mark.parametrize("case", sorted(LENGTHS))
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_saved_tokenizer_says_the_length_the_model_was_trained_at(
    script, case, tokenizer_dir, tmp_path, caplog, capfd
):
    limit, max_seq_length, saved = LENGTHS[case]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, model_max_length=limit)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    main, name, text = SCRIPTS[script]
    options = {"max_seq_length": max_seq_length, "max_steps": 1, "per_device_train_batch_size": 2}
    arguments = tiny_run(tmp_path / "out", tokenizer=tmp_path / "tokenizer", overrides={"vocab_size": 120}, **options)
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        main([*arguments, "--train_file", str(write(tmp_path / name, text)), "--do_train"])
    assert json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["model_max_length"] == saved
    assert AutoTokenizer.from_pretrained(tmp_path / "out").model_max_length == saved
    assert "will result in indexing errors" not in capfd.readouterr().err  # Transformers' warning, false here
    chosen = f"--max_seq_length {saved}, the tokenizer's model_max_length (the model's n is 32)"
    assert (chosen in caplog.text) == (max_seq_length is None and saved < 32)


# ---- --config_overrides sets a field whose default is None --------------------------------------------------------
def test_config_overrides_set_a_field_whose_default_is_none():
    """classifier_dropout is None by default, which Transformers' `update_from_string` cannot type (it ended in its
    TypeError); the value is read as JSON, and the config's own checks then judge it."""
    config = load_config(
        ModelArguments(config_name="gmlp-tiny", config_overrides="classifier_dropout=0.1,bos_token_id=2")
    )
    assert (config.classifier_dropout, config.bos_token_id) == (0.1, 2)
    # The libraries' own reasons, in the words of the installed versions, follow the override they refuse.
    config = GMLPConfig.from_preset("gmlp-tiny")
    with pytest.raises(StrictDataclassError) as refused:
        config.classifier_dropout = "much"
        config.validate()
    with pytest.raises(TypeError) as not_updated:
        GMLPConfig.from_preset("gmlp-tiny").update_from_string("id2label=3")
    for override, reason in (
        ("classifier_dropout=much", refused.value.__cause__ or refused.value),
        ("id2label=3", not_updated.value),
    ):
        with pytest.raises(ValueError, match=re.escape(f"--config_overrides {override!r}: {reason}.")):
            load_config(ModelArguments(config_name="gmlp-tiny", config_overrides=override))


# ---- the set-ups of docs/deploy.md and docs/scripts.md ------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_the_deploy_docs_tokenizer_line_loads_without_asking_to_run_code(tokenizer_dir, tmp_path):
    """docs/deploy.md's tokenizer line, in a process where this package is not installed and no one answers:
    no "Do you wish to run the custom code?" prompt (15 s in a terminal), no warning about the model type."""
    deploying = (DOCS / "deploy.md").read_text()
    line = re.search(r"^tokenizer = AutoTokenizer\.from_pretrained\(.*$", deploying, re.MULTILINE).group(0)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(tmp_path / "my-gmlp")
    GMLPModel(GMLPConfig.from_preset("gmlp-tiny", num_hidden_layers=1)).save_pretrained(tmp_path / "my-gmlp")
    script = f"import sys\nsys.modules['gmlp'] = None\nfrom transformers import AutoTokenizer\n{line}\nprint(tokenizer('a cat')['input_ids'])"
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PATH": "/usr/bin:/bin"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert "custom code" not in output and "model of type" not in output, output[-3000:]
    assert run.stdout.strip().splitlines()[-1] == str(
        AutoTokenizer.from_pretrained(tokenizer_dir)("a cat")["input_ids"]
    )


@pytest.mark.e2e
def test_the_scripts_docs_causal_set_up_loads_through_auto_model_for_causal_lm(tokenizer_dir, tmp_path, monkeypatch):
    """docs/scripts.md's causal set-up (an untrained GMLPForCausalLM and its tokenizer, the folder that
    Transformers' run_clm.py takes as --model_name_or_path with --trust_remote_code) run as written: the folder loads
    through AutoModelForCausalLM where this package is not installed and gives the model's logits."""
    scripts = (DOCS / "scripts.md").read_text()
    setup = re.search(r'^python -c "(import gmlp.*?)"$', scripts, re.MULTILINE | re.DOTALL).group(1)
    monkeypatch.chdir(tmp_path)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained("tok")
    exec(setup, {})  # noqa: S102 (the docs' own code, run as a user runs it)
    config = json.loads((tmp_path / "clm-init" / "config.json").read_text())
    assert config["is_decoder"] and config["auto_map"]["AutoModelForCausalLM"] == "modeling_gmlp.GMLPForCausalLM"
    inputs = torch.tensor([AutoTokenizer.from_pretrained("clm-init")("the cat sat")["input_ids"]])
    remote = load_as_remote_code(tmp_path / "clm-init", "AutoModelForCausalLM", inputs, tmp_path / "remote")
    from gmlp import GMLPForCausalLM

    with torch.no_grad():
        expected = GMLPForCausalLM.from_pretrained(tmp_path / "clm-init").eval()(inputs).logits
    torch.testing.assert_close(remote["result"], expected)
