"""A user's bad options, for every script: a flag that does not exist (Transformers 4's and upstream's names included),
a name that resolves nowhere, a model the data or the tokenizer do not fit, settings that could only fail after
training: each is refused before training with one clear error that names the problem and the fix. Table-driven, on
tiny fixtures."""

import json

import pytest
from helpers import SCRIPT_SIZES, config_overrides, flags, tiny_run, write
from script_runs import (
    COMMON,
    EVERY_STEP,
    LABELLED,
    csv_file,
    glue_run,
    image_run,
    mlm_run,
    squad_file,
    squad_run,
    trained_nothing,
)
from transformers import AutoModelForImageClassification, AutoTokenizer

from gmlp import GMLPConfig, GMLPForImageClassification, GMLPForSequenceClassification, GMLPVisionConfig
from gmlp.tasks import loading, run_glue, run_image_classification, run_mlm, run_squad
from gmlp.tasks.errors import ScriptError


def long_questions_file(path):
    """`script_runs.squad_file`, each question 15 tokens longer."""
    return write(path, squad_file(path).read_text().replace("where is", "where " * 15 + "is"))


def arguments_file(tmp, values: dict):
    return write(tmp / "args.json", json.dumps(values))


BAD_ARGUMENTS = {
    # name: (script, its arguments from the tokenizer folder and tmp_path, the error's message)
    # ---- something to do
    "nothing to do": (
        run_mlm,
        lambda tok, tmp: ["--output_dir", str(tmp / "out")],
        r"Nothing to do: pass --do_train and/or --do_eval",
    ),
    "run_mlm --do_predict": (
        run_mlm,
        lambda tok, tmp: ["--config_name", "gmlp-tiny", "--output_dir", str(tmp / "out"), "--do_predict"],
        r"run_mlm.py has no --do_predict.*--do_eval.*--fill_mask_text",
    ),
    # ---- flags that do not exist, and the arguments file
    "--evaluation_strategy (Transformers 4's name)": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, "--evaluation_strategy", "steps"),
        r"Unknown command-line arguments: --evaluation_strategy: renamed --eval_strategy\. `--help` lists",
    ),
    "--group_by_length (Transformers 4's flag)": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, "--group_by_length"),
        r"--group_by_length: now --train_sampling_strategy group_by_length\. `--help` lists",
    ),
    "--no_cuda and --overwrite_cache (upstream's flags)": (
        run_mlm,
        lambda tok, tmp: mlm_run(tok, tmp, "--no_cuda", "--overwrite_cache"),
        r"--no_cuda: renamed --use_cpu; --overwrite_cache: not an option here",
    ),
    "a misspelt flag": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, "--learnig_rate", "1e-3"),
        r"--learnig_rate: no such option; did you mean --learning_rate\?",
    ),
    "an arguments file after a flag": (
        run_glue,
        lambda tok, tmp: ["--do_train", "yes", str(arguments_file(tmp, {}))],
        r"args.json follow\(s\) no option \(a .json file of arguments must come first\)",
    ),
    "an unknown key in the arguments file": (
        run_glue,
        lambda tok, tmp: [str(arguments_file(tmp, {"output_dir": str(tmp / "out"), "text_columns": "a"}))],
        r"args.json: --text_columns: no such option; did you mean --text_column_names\?",
    ),
    "an arguments file that is no JSON object": (
        run_glue,
        lambda tok, tmp: [str(write(tmp / "args.json", "[1, 2]"))],
        r"The arguments file \S*args.json must hold one JSON object",
    ),
    "values that TrainingArguments refuses together": (
        run_glue,
        lambda tok, tmp: glue_run(
            tok, tmp, "--load_best_model_at_end", "--eval_strategy", "steps", "--save_strategy", "epoch"
        ),
        r"--load_best_model_at_end requires the save and eval strategy to match",
    ),
    # ---- names that resolve nowhere (offline, as CI runs)
    "a misspelt preset": (
        run_mlm,
        lambda tok, tmp: ["--config_name", "amlp-smal", "--do_train", "--output_dir", str(tmp / "out")],
        r"--config_name 'amlp-smal' is neither a preset nor a directory, and the Hub could not be reached.*Presets: gmlp-",
    ),
    "a preset typo": (
        run_mlm,
        lambda tok, tmp: ["--config_name", "gmlp-tinyy", "--do_train", "--output_dir", str(tmp / "out")],
        r"Did you mean the preset 'gmlp-tiny'.*Presets: gmlp-base",
    ),
    "a misspelt vision preset": (
        run_image_classification,
        lambda tok, tmp: ["--config_name", "gmlp-s61", "--do_train", "--output_dir", str(tmp / "out")],
        r"--config_name 'gmlp-s61' is neither a preset nor a directory, and the Hub could not be reached.*'gmlp-s16'\?",
    ),
    "a checkpoint nowhere": (
        run_glue,
        lambda tok, tmp: [
            *flags(model_name_or_path="nowhere/model", task_name="sst2", do_eval=True, output_dir=tmp / "out")
        ],
        r"--model_name_or_path 'nowhere/model' is not a directory, and the Hub could not be reached",
    ),
    "a preset as a checkpoint": (
        run_squad,
        lambda tok, tmp: flags(
            model_name_or_path="gmlp-tiny", dataset_name="rajpurkar/squad", do_train=True, output_dir=tmp / "out"
        ),
        r"--model_name_or_path gmlp-tiny is a preset, not a checkpoint: pass it as --config_name",
    ),
    "a tokenizer nowhere": (
        run_glue,
        lambda tok, tmp: glue_run("nowhere-tokenizer", tmp),
        r"--tokenizer_name 'nowhere-tokenizer' is not a directory, and the Hub could not be reached",
    ),
    "a Hub dataset offline": (
        run_glue,
        lambda tok, tmp: tiny_run(
            tmp / "out", tokenizer=tok, task_name="sst2", dataset_name="nowhere/glue", do_eval=True
        ),
        r"--dataset_name nowhere/glue: not a folder saved by `save_to_disk`, not in the datasets cache, and the Hub cannot be reached \(offline\)",
    ),
    # ---- a model that the tokenizer, the data or the settings do not fit
    "a model vocabulary smaller than the tokenizer's": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, config_overrides=config_overrides(vocab_size=50)),
        r"The tokenizer has 11\d tokens but the model's vocabulary only 50 \(vocab_size\)",
    ),
    "layer_norm_eps=-1": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, config_overrides=config_overrides(layer_norm_eps=-1)),
        r"`layer_norm_eps` must be positive",
    ),
    "max_position_embeddings=1": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, config_overrides=config_overrides(max_position_embeddings=1)),
        r"`max_position_embeddings` \(the spatial size n\) must be at least 2",
    ),
    "--report_to tensorboard without tensorboard": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, "--report_to", "tensorboard"),
        r"--report_to tensorboard: not installed. Install it \(`pip install tensorboard`\)",
    ),
    "--validation_split_percentage 0": (
        run_mlm,
        lambda tok, tmp: mlm_run(tok, tmp, "--do_eval", validation_split_percentage=0),
        r"--validation_split_percentage 0: the share of the training text held out for evaluation is between 1 and 99",
    ),
    # ---- settings that could only fail after training
    "run_glue --metric_for_best_model acc": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, *EVERY_STEP, "--load_best_model_at_end", "--metric_for_best_model", "acc"),
        r"--metric_for_best_model acc: run_glue.py's evaluation reports loss, accuracy, f1 .*Did you mean --metric_for_best_model accuracy\?",
    ),
    "run_mlm --metric_for_best_model top5": (
        run_mlm,
        lambda tok, tmp: mlm_run(tok, tmp, *EVERY_STEP, "--metric_for_best_model", "top5"),
        r"run_mlm.py's evaluation reports loss, accuracy, perplexity",
    ),
    "run_image_classification --metric_for_best_model f1": (
        run_image_classification,
        lambda tok, tmp: image_run(tmp, *EVERY_STEP, "--metric_for_best_model", "f1"),
        r"run_image_classification.py's evaluation reports loss, accuracy \(each also as eval_<name>\), not f1",
    ),
    "run_squad --eval_strategy steps": (
        run_squad,
        lambda tok, tmp: squad_run(tok, tmp, *EVERY_STEP),
        r"--eval_strategy steps: run_squad.py scores its answers .* after training",
    ),
    "run_glue --do_predict without a test file": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, "--do_predict"),
        r"--do_predict needs test data; the data has \['train', 'validation'\]",
    ),
    "run_glue --max_eval_samples 0": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, "--do_eval", max_eval_samples=0),
        r"--do_eval: --max_eval_samples 0 keeps no example; pass at least 1",
    ),
    "run_glue --prediction_loss_only": (
        run_glue,
        lambda tok, tmp: glue_run(tok, tmp, "--do_eval", "--prediction_loss_only"),
        r"--prediction_loss_only: run_glue.py computes its evaluation metrics",
    ),
    "run_mlm --push_to_hub offline": (
        run_mlm,
        lambda tok, tmp: mlm_run(tok, tmp, "--push_to_hub"),
        r"--push_to_hub needs the Hub, but this run is offline \(HF_HUB_OFFLINE is set\)",
    ),
    "run_squad --doc_stride too large for the evaluation questions": (
        run_squad,
        lambda tok, tmp: squad_run(
            tok,
            tmp,
            "--do_eval",
            validation_file=long_questions_file(tmp / "dev.json"),
            max_seq_length=24,
            doc_stride=8,
        ),
        r"A question of \d+ tokens leaves -?\d+ context tokens per feature with --max_seq_length 24",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_a_bad_option_is_refused_before_training_with_the_fix(case, tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # as CI runs: no lookup leaves the machine
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("transformers.integrations.integration_utils.is_tensorboard_available", lambda: False)
    script, arguments, message = BAD_ARGUMENTS[case]
    with pytest.raises(ScriptError, match=message):
        script.run(arguments(tokenizer_dir, tmp_path))
    assert trained_nothing(tmp_path / "out")


def test_an_arguments_file_takes_flags_that_override_it(tokenizer_dir, tmp_path):
    values = {
        "config_name": "gmlp-tiny",
        "config_overrides": config_overrides(),
        "tokenizer_name": tokenizer_dir,
        "train_file": str(csv_file(tmp_path / "train.csv", LABELLED)),
        "max_seq_length": 16,
        "do_train": True,
        "output_dir": str(tmp_path / "out"),
        "report_to": "none",
        "save_strategy": "steps",
        "save_steps": 1,
        "max_steps": 1,
        "learning_rate": 1e-3,
        "per_device_train_batch_size": 2,
    }
    run_glue.run([str(arguments_file(tmp_path, values)), "--max_steps", "2"])
    assert json.loads((tmp_path / "out" / "trainer_state.json").read_text())["global_step"] == 2  # the flag's
    settings = json.loads((tmp_path / "out" / "checkpoint-2" / "run_settings.json").read_text())
    assert settings["learning_rate"] == 1e-3 and settings["per_device_train_batch_size"] == 2  # the file's


def test_a_head_of_another_size_is_named_with_the_fix(tokenizer_dir, tmp_path):
    """A checkpoint whose classifier has two unnamed labels (LABEL_0, LABEL_1), fine-tuned on data of three."""
    checkpoint = tmp_path / "two"
    GMLPForSequenceClassification(GMLPConfig(vocab_size=120, num_labels=2, **SCRIPT_SIZES)).save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(checkpoint)
    data = csv_file(tmp_path / "abc.csv", [(text, "abc"[i % 3]) for i, (text, _) in enumerate(LABELLED)])
    arguments = [
        *flags(model_name_or_path=checkpoint, output_dir=tmp_path / "out", train_file=data, max_seq_length=16),
        *flags(do_train=True, max_steps=1, save_strategy="no"),
        *COMMON,
    ]
    message = r"--model_name_or_path .*two: its weights .*classifier.out_proj.weight \(2, 32\) \(this run: \(3, 32\)\).* have other shapes than this run's model; the data has 3 labels. Pass --ignore_mismatched_sizes"
    with pytest.raises(ScriptError, match=message):
        run_glue.run(arguments)
    run_glue.run([*arguments, "--ignore_mismatched_sizes"])
    assert GMLPForSequenceClassification.from_pretrained(tmp_path / "out").config.num_labels == 3


def test_a_body_of_another_size_is_named_and_not_started_afresh(tokenizer_dir, tmp_path):
    """A checkpoint whose blocks are wider than `--config_overrides` makes them: the fix is to drop those overrides
    (n alone may change), not `--ignore_mismatched_sizes`, which would start the blocks' learned weights afresh."""
    checkpoint = tmp_path / "wide"
    GMLPForSequenceClassification(GMLPConfig(vocab_size=120, num_labels=2, **SCRIPT_SIZES)).save_pretrained(checkpoint)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(checkpoint)
    data = csv_file(tmp_path / "train.csv", LABELLED)
    arguments = [
        *flags(model_name_or_path=checkpoint, output_dir=tmp_path / "out", train_file=data, max_seq_length=16),
        *flags(config_overrides="intermediate_size=48,max_position_embeddings=16", do_train=True, max_steps=1),
        *COMMON,
    ]
    message = (
        r"--model_name_or_path .*wide: its weights .*gmlp\.encoder\.layer\.0\.channel_proj_in\.weight \(64, 32\) \(this "
        r"run: \(48, 32\)\).* have other shapes than this run's model\. Drop the --config_overrides that change the "
        r"sizes of the model's body \(n itself can change: --config_overrides max_position_embeddings=N keeps the "
        r"learned spatial weights\): --ignore_mismatched_sizes is for a new head only, and would start the body's "
        r"learned weights afresh\.$"
    )
    with pytest.raises(ScriptError, match=message) as raised:
        run_glue.run(arguments)
    assert "spatial_proj" not in str(raised.value)  # n = 16 in place of the checkpoint's 32 loads: it is no mismatch


def test_an_image_checkpoint_of_another_image_size_is_named_as_its_body(tmp_path):
    """An image model's n is its number of patches, which its image size sets: a checkpoint of another size differs
    in its spatial weights, part of the body (there is no n to change, and no new head to advise)."""
    sizes = {"patch_size": 4, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_labels": 2}
    GMLPForImageClassification(GMLPVisionConfig(image_size=8, **sizes)).save_pretrained(tmp_path / "small")
    config = GMLPVisionConfig(image_size=16, **sizes)
    advice = loading.mismatch_advice(str(tmp_path / "small"), AutoModelForImageClassification, config)
    assert advice == (
        "its weights gmlp.encoder.layer.0.sgu.spatial_proj.bias (1, 4) (this run: (1, 16)), "
        "gmlp.encoder.layer.0.sgu.spatial_proj.weight (1, 4, 4) (this run: (1, 16, 16)) have other shapes than this "
        "run's model. Drop the --config_overrides that change the sizes of the model's body: --ignore_mismatched_sizes "
        "is for a new head only, and would start the body's learned weights afresh."
    )
