"""A user's bad options, for every script: a flag that does not exist (Transformers 4's and upstream's names included),
a name that resolves nowhere, a model the data or the tokenizer do not fit, settings that could only fail after
training, a number out of its option's range, files and folders that are not there (all named at once, before any
look-up on the Hub): each is refused before training with one clear error that names the problem and the fix.
Table-driven, on tiny fixtures."""

import dataclasses
import json
import shlex
import shutil
import typing

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
from gmlp.tasks.arguments import RANGES, AnyDeviceTrainingArguments, ModelArguments
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
        r"--config_name amlp-smal: not a folder here, and as a Hub id it needs the Hub, but this run is offline \(HF_HUB_OFFLINE\) and the Hub cache does not hold it\..*Presets: gmlp-",
    ),
    "a preset typo": (
        run_mlm,
        lambda tok, tmp: ["--config_name", "gmlp-tinyy", "--do_train", "--output_dir", str(tmp / "out")],
        r"Did you mean the preset 'gmlp-tiny'.*Presets: gmlp-base",
    ),
    "a misspelt vision preset": (
        run_image_classification,
        lambda tok, tmp: ["--config_name", "gmlp-s61", "--do_train", "--output_dir", str(tmp / "out")],
        r"--config_name gmlp-s61: not a folder here, .* offline \(HF_HUB_OFFLINE\).* Did you mean the preset 'gmlp-s16'\?",
    ),
    "a checkpoint nowhere": (
        run_glue,
        lambda tok, tmp: [
            *flags(model_name_or_path="nowhere/model", task_name="sst2", do_eval=True, output_dir=tmp / "out")
        ],
        r"--model_name_or_path nowhere/model: not a folder here, and as a Hub id it needs the Hub, but this run is offline",
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
        r"--tokenizer_name nowhere-tokenizer: not a folder here, and as a Hub id it needs the Hub, but this run is offline",
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


# ---- numbers out of range --------------------------------------------------------------------------------------------
SCRIPTS = {
    # name: (script, its arguments from the tokenizer folder, tmp_path and extra arguments)
    "mlm": (run_mlm, mlm_run),
    "glue": (run_glue, glue_run),
    "squad": (run_squad, squad_run),
    "images": (run_image_classification, lambda tok, tmp, *extra: image_run(tmp, *extra)),
}
OUT_OF_RANGE = [
    # (script, its extra arguments, the error line): the first, then every other option with a range
    ("mlm", "--max_seq_length 0", "--max_seq_length 0: must be at least 1."),
    ("mlm", "--max_seq_length 0 --line_by_line", "--max_seq_length 0: must be at least 1."),
    ("glue", "--max_seq_length 0", "--max_seq_length 0: must be at least 1."),
    ("glue", "--max_seq_length -5", "--max_seq_length -5: must be at least 1."),
    (
        "mlm",
        "--max_seq_length 2 --line_by_line",
        "--max_seq_length 2 leaves no room for text: the tokenizer adds 2 special tokens to every sequence. Pass at least 3.",
    ),
    (
        "glue",
        "--max_seq_length 2",
        "--max_seq_length 2 leaves no room for text: the tokenizer adds 2 special tokens to every sequence. Pass at least 3.",
    ),
    ("glue", "--max_seq_length abc", "--max_seq_length/--max-seq-length: invalid int value: 'abc'. `--help` lists the options."),
    ("glue", "--learning_rate -1 --max_seq_length 0", "--max_seq_length 0: must be at least 1; --learning_rate -1.0: must be at least 0."),
    ("glue", "--preprocessing_num_workers -1", "--preprocessing_num_workers -1: must be at least 1."),
    ("glue", "--max_train_samples 0", "--max_train_samples 0: must be at least 1."),
    ("glue", "--do_eval --max_eval_samples 0", "--max_eval_samples 0: must be at least 1."),
    ("glue", "--max_predict_samples -1", "--max_predict_samples -1: must be at least 1."),
    ("images", "--max_predict_samples 0", "--max_predict_samples 0: must be at least 1."),
    ("mlm", "--validation_split_percentage 0", "--validation_split_percentage 0: must be at least 1 and at most 99."),
    ("mlm", "--validation_split_percentage 100", "--validation_split_percentage 100: must be at least 1 and at most 99."),
    ("mlm", "--mlm_probability 0", "--mlm_probability 0.0: must be above 0 and below 1."),
    ("mlm", "--mlm_probability nan", "--mlm_probability nan: must be a finite number above 0 and below 1."),
    ("mlm", "--eval_mask_seed -1", "--eval_mask_seed -1: must be at least 0 and at most 4294967295."),
    ("squad", "--doc_stride -1", "--doc_stride -1: must be at least 0."),
    ("squad", "--n_best_size 0", "--n_best_size 0: must be at least 1."),
    ("squad", "--max_answer_length 0", "--max_answer_length 0: must be at least 1."),
    ("squad", "--null_score_diff_threshold nan", "--null_score_diff_threshold nan: must be a finite number."),
    # TrainingArguments': each one Transformers or torch takes without a word, or refuses with a traceback
    ("glue", "--per_device_train_batch_size 0", "--per_device_train_batch_size 0: must be at least 1."),
    ("glue", "--per_device_eval_batch_size 0", "--per_device_eval_batch_size 0: must be at least 1."),
    ("glue", "--gradient_accumulation_steps 0", "--gradient_accumulation_steps 0: must be at least 1."),
    ("glue", "--gradient_accumulation_steps -1", "--gradient_accumulation_steps -1: must be at least 1."),
    ("glue", "--eval_accumulation_steps 0", "--eval_accumulation_steps 0: must be at least 1."),
    ("glue", "--num_train_epochs 0", "--num_train_epochs 0.0: must be above 0."),
    ("glue", "--num_train_epochs inf", "--num_train_epochs inf: must be a finite number above 0."),
    ("glue", "--max_steps 0", "--max_steps 0: must be at least 1, or -1 (train for --num_train_epochs)."),
    ("glue", "--max_steps -5", "--max_steps -5: must be at least 1, or -1 (train for --num_train_epochs)."),
    ("glue", "--learning_rate nan", "--learning_rate nan: must be a finite number at least 0."),
    ("glue", "--warmup_steps inf", "--warmup_steps inf: must be a finite number at least 0."),
    ("glue", "--weight_decay -0.1", "--weight_decay -0.1: must be at least 0."),
    ("glue", "--adam_beta1 1", "--adam_beta1 1.0: must be at least 0 and below 1."),
    ("glue", "--adam_beta2 -0.5", "--adam_beta2 -0.5: must be at least 0 and below 1."),
    ("glue", "--adam_epsilon=-1e-8", "--adam_epsilon -1e-08: must be at least 0."),
    ("glue", "--max_grad_norm -1", "--max_grad_norm -1.0: must be at least 0."),
    ("glue", "--label_smoothing_factor 1.5", "--label_smoothing_factor 1.5: must be at least 0 and at most 1."),
    ("glue", "--neftune_noise_alpha -1", "--neftune_noise_alpha -1.0: must be at least 0."),
    ("glue", "--logging_steps -1", "--logging_steps -1.0: must be above 0."),
    ("glue", "--eval_strategy steps --eval_steps 0", "--eval_steps 0.0: must be above 0."),
    ("glue", "--save_strategy steps --save_steps 0", "--save_steps 0.0: must be above 0."),
    ("glue", "--eval_delay -1", "--eval_delay -1.0: must be at least 0."),
    ("glue", "--save_total_limit 0", "--save_total_limit 0: must be at least 1."),
    ("glue", "--seed -1", "--seed -1: must be at least 0 and at most 4294967295."),
    ("glue", "--data_seed 4294967296", "--data_seed 4294967296: must be at least 0 and at most 4294967295."),
    ("glue", "--dataloader_num_workers -1", "--dataloader_num_workers -1: must be at least 0."),
    ("glue", "--dataloader_prefetch_factor 0", "--dataloader_prefetch_factor 0: must be at least 1."),
    ("glue", "--ddp_timeout 0", "--ddp_timeout 0: must be at least 1."),
    ("glue", "--ddp_bucket_cap_mb 0", "--ddp_bucket_cap_mb 0: must be at least 1."),
]  # fmt: skip


@pytest.mark.parametrize("script, extra, message", OUT_OF_RANGE, ids=[f"{s} {e}" for s, e, _ in OUT_OF_RANGE])
def test_a_number_out_of_range_is_one_error_line_before_anything_is_written(
    script, extra, message, tokenizer_dir, tmp_path, capsys
):
    run, arguments = SCRIPTS[script]
    with pytest.raises(SystemExit) as stop:
        run.main(arguments(tokenizer_dir, tmp_path, *shlex.split(extra)))
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert (stop.value.code, errors) == (2, [f"error: {message}"])
    assert not (tmp_path / "out").exists()


def test_a_number_given_as_text_in_the_arguments_file_is_refused(tokenizer_dir, tmp_path):
    values = {"output_dir": str(tmp_path / "out"), "do_train": True, "max_seq_length": "16"}
    with pytest.raises(ScriptError, match=r"^--max_seq_length '16': must be a finite number at least 1\.$"):
        run_glue.run(
            [str(arguments_file(tmp_path, values)), "--train_file", str(csv_file(tmp_path / "t.csv", LABELLED))]
        )


def numeric_options(kind) -> set[str]:
    """The flags of the dataclass `kind`'s int and float fields (also where None is allowed)."""
    hints = typing.get_type_hints(kind)
    numeric = {name for name, hint in hints.items() if {int, float} & {hint, *typing.get_args(hint)}}
    return {f"--{field.name}" for field in dataclasses.fields(kind) if field.init and field.name in numeric}


def test_every_numeric_option_of_the_scripts_has_a_range():
    scripts = [run_mlm, run_glue, run_squad, run_image_classification]
    ours = [ModelArguments, *(script.DataTrainingArguments for script in scripts)]
    assert set().union(*map(numeric_options, ours)) - set(RANGES) == set()
    assert set(RANGES) - set().union(*map(numeric_options, [*ours, AnyDeviceTrainingArguments])) == set()


# ---- files and folders that are not there ----------------------------------------------------------------------------
NOT_THERE = {
    # name: (script, its arguments from the tokenizer folder and tmp_path, the error's message; {tmp} is tmp_path)
    "every missing file and folder at once": (
        "mlm",
        lambda tok, tmp: mlm_run(
            tmp / "tok", tmp, train_file=tmp / "train.txt", validation_file=tmp / "valid.txt", do_eval=True
        ),
        "--tokenizer_name {tmp}/tok: no such folder; --train_file {tmp}/train.txt: no such file; --validation_file {tmp}/valid.txt: no such file.",
    ),
    "a test file and a checkpoint to resume": (
        "glue",
        lambda tok, tmp: glue_run(tok, tmp, test_file=tmp / "test.csv", resume_from_checkpoint=tmp / "run"),
        "--test_file {tmp}/test.csv: no such file; --resume_from_checkpoint {tmp}/run: no such folder.",
    ),
    "a folder given as a data file": (
        "glue",
        lambda tok, tmp: glue_run(tok, tmp, validation_file=tmp),
        "--validation_file {tmp}: no such file.",
    ),
    "a GLUE folder": (
        "glue",
        lambda tok, tmp: tiny_run(tmp / "out", tokenizer=tok, task_name="sst2", glue_dir=tmp / "glue", do_eval=True),
        "--glue_dir {tmp}/glue: no such folder.",
    ),
    "a relative checkpoint folder and a Hub id not in the cache": (
        "squad",
        lambda tok, tmp: squad_run("some-user/tokenizer", tmp, model_name_or_path="./trained"),
        "--model_name_or_path ./trained: no such folder; --tokenizer_name some-user/tokenizer: not a folder here, and as a Hub id it needs the Hub, but this run is offline (HF_HUB_OFFLINE) and the Hub cache does not hold it.",
    ),
    "image folders": (
        "images",
        lambda tok, tmp: image_run(tmp, "--do_eval", train_dir=tmp / "train", validation_dir=tmp / "valid"),
        "--train_dir {tmp}/train: no such folder; --validation_dir {tmp}/valid: no such folder.",
    ),
}


@pytest.mark.parametrize("case", sorted(NOT_THERE))
def test_files_and_folders_not_there_are_named_together_before_the_hub(case, tokenizer_dir, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr(loading, "snapshot_download", cached_nowhere)
    script, arguments, message = NOT_THERE[case]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScriptError) as error:
        SCRIPTS[script][0].run(arguments(tokenizer_dir, tmp_path))
    assert str(error.value) == message.format(tmp=tmp_path)
    assert not (tmp_path / "out").exists()


def cached_nowhere(repo_id, **kwargs):
    """`snapshot_download(local_files_only=True)` of an empty Hub cache: the only way the check may look a name up."""
    assert kwargs["local_files_only"] is True
    raise loading.LocalEntryNotFoundError(f"{repo_id} is not in the cache")


@pytest.mark.parametrize(
    "name, local",
    [
        ("tok", False),
        ("google-bert/bert-base-uncased", False),
        ("./tok", True),
        ("../tok", True),
        ("/abs/tok", True),
        ("runs/mlm/checkpoint-8", True),
        ("~/tok", True),
        ("here/tok", True),  # `here` is a folder in the working directory
        ("elsewhere/tok", False),
    ],
)
def test_a_name_is_a_local_path_where_it_cannot_be_a_hub_id(name, local, tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path)
    assert loading.local_only(name) is local


def test_offline_a_hub_id_in_the_cache_passes_the_check(tokenizer_dir, tmp_path, monkeypatch):
    """The Hub cache's layout: models--OWNER--NAME/refs/main names the snapshot folder that holds the files (a model
    repository's tokenizer and config)."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    repo = tmp_path / "cache" / "models--some-user--tokenizer"
    write(repo / "refs" / "main", "0" * 40)
    shutil.copytree(tokenizer_dir, repo / "snapshots" / ("0" * 40))
    GMLPConfig(vocab_size=120, **SCRIPT_SIZES).save_pretrained(repo / "snapshots" / ("0" * 40))
    model_args = ModelArguments(tokenizer_name="some-user/tokenizer", cache_dir=str(tmp_path / "cache"))
    loading.check_named_paths(model_args)
    assert len(loading.load_tokenizer(model_args)) == len(AutoTokenizer.from_pretrained(tokenizer_dir))
    with pytest.raises(ScriptError, match="--tokenizer_name some-user/other: not a folder here, and as a Hub id"):
        loading.check_named_paths(dataclasses.replace(model_args, tokenizer_name="some-user/other"))
