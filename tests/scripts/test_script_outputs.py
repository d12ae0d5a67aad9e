"""What the scripts save fits the model, and the README's set-ups run as written: the tokenizer every script saves
says the length the model was trained at (the run's --max_seq_length, at most n), never the limit of the tokenizer
the run started from; --config_overrides sets a field whose default is None; the README's tokenizer line loads
without asking to run code; the README's causal-pretraining set-up gives a folder that Transformers' stock
run_clm.py takes (it loads through AutoModelForCausalLM where this package is not installed)."""

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import CONTEXT, load_as_remote_code, rotated_lines, tiny_run, write
from transformers import AutoTokenizer

import run_glue
import run_mlm
import run_squad
from gmlp import GMLPConfig, GMLPModel
from gmlp.tasks.arguments import ModelArguments
from gmlp.tasks.loading import load_config

README = (Path(__file__).parents[1] / "README.md").read_text()


# ---- the saved tokenizer says the length the model was trained at -------------------------------------------------
def squad_json() -> str:
    answer = {"text": "the green forest", "answer_start": CONTEXT.index("the green forest")}
    qas = [{"id": "q0", "question": "where is the green forest", "answers": [answer]}]
    return json.dumps({"version": "v1.1", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]})


SCRIPTS = {  # script -> its main and the name and text of its training file
    "run_mlm": (run_mlm.main, "train.txt", "\n".join(rotated_lines(40)) + "\n"),
    "run_glue": (
        run_glue.main,
        "train.csv",
        "sentence,label\n" + "".join(f"{s},{i % 2}\n" for i, s in enumerate(rotated_lines(8))),
    ),
    "run_squad": (run_squad.main, "train.json", squad_json()),
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
    with pytest.raises(ValueError, match="--config_overrides 'classifier_dropout=much': Field 'classifier_dropout'"):
        load_config(ModelArguments(config_name="gmlp-tiny", config_overrides="classifier_dropout=much"))
    message = "--config_overrides 'id2label=3': You can only update int, float, bool or string values"
    with pytest.raises(ValueError, match=message):
        load_config(ModelArguments(config_name="gmlp-tiny", config_overrides="id2label=3"))


# ---- the README's set-ups ------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_the_readme_tokenizer_line_loads_without_asking_to_run_code(tokenizer_dir, tmp_path):
    """The Deploying section's tokenizer line, in a process where this package is not installed and no one answers:
    no "Do you wish to run the custom code?" prompt (15 s in a terminal), no warning about the model type."""
    section = README.split("\n## Deploying\n", 1)[1].split("\n## ", 1)[0]
    line = re.search(r"^tokenizer = AutoTokenizer\.from_pretrained\(.*$", section, re.MULTILINE).group(0)
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
        timeout=120,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert "custom code" not in output and "model of type" not in output, output[-3000:]
    assert run.stdout.strip().splitlines()[-1] == str(
        AutoTokenizer.from_pretrained(tokenizer_dir)("a cat")["input_ids"]
    )


@pytest.mark.e2e
def test_the_readme_causal_set_up_loads_through_auto_model_for_causal_lm(tokenizer_dir, tmp_path, monkeypatch):
    """The Scripts section's causal set-up (an untrained GMLPForCausalLM and its tokenizer, the folder that
    Transformers' run_clm.py takes as --model_name_or_path with --trust_remote_code) run as written: the folder loads
    through AutoModelForCausalLM where this package is not installed and gives the model's logits."""
    setup = re.search(r'^python -c "(import gmlp.*?)"$', README, re.MULTILINE | re.DOTALL).group(1)
    monkeypatch.chdir(tmp_path)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained("tok")
    exec(setup, {})  # noqa: S102 (the README's own code, run as a user runs it)
    config = json.loads((tmp_path / "clm-init" / "config.json").read_text())
    assert config["is_decoder"] and config["auto_map"]["AutoModelForCausalLM"] == "modeling_gmlp.GMLPForCausalLM"
    inputs = torch.tensor([AutoTokenizer.from_pretrained("clm-init")("the cat sat")["input_ids"]])
    remote = load_as_remote_code(tmp_path / "clm-init", "AutoModelForCausalLM", inputs, tmp_path / "remote")
    from gmlp import GMLPForCausalLM

    with torch.no_grad():
        expected = GMLPForCausalLM.from_pretrained(tmp_path / "clm-init").eval()(inputs).logits
    torch.testing.assert_close(remote["result"], expected)
