"""Bad inputs and faults a new user runs into: each gives a clear error that names the file and the problem (or the
right result), never a deep `datasets`/torch error or a silently wrong run. Table-driven, on tiny fixtures."""

import json
import logging

import pytest
import torch
from helpers import CONTEXT, WORDS, config_overrides, flags, rotated_lines, tiny_run, write
from PIL import Image
from transformers import TrainingArguments

import run_glue
import run_image_classification
import run_mlm
import run_squad
from gmlp.tasks.checkpoints import checkpoint_problem, resolve_checkpoint

# One step of batches of 2.
ONE_STEP = {"per_device_train_batch_size": 2, "per_device_eval_batch_size": 2, "max_steps": 1}


def scratch_run(tokenizer_dir, tmp_path, *extra, **options):
    """A tiny run from scratch into tmp_path/out (helpers.tiny_run) with conftest.py's tokenizer: one training step
    and an evaluation; then `options` as flags and the `extra` arguments."""
    return tiny_run(
        tmp_path / "out", *extra, tokenizer=tokenizer_dir, do_train=True, do_eval=True, **ONE_STEP, **options
    )


def squad_json(answer_start_shift: int = 0, answers=None, start=None) -> str:
    qas = []
    for i, answer in enumerate(["the green forest", "small birds", "the old river"]):
        offset = CONTEXT.index(answer) + answer_start_shift if start is None else start
        given = [{"text": answer, "answer_start": offset}] if answers is None else answers
        qas.append({"id": f"question-{i}", "question": f"where is {answer}", "answers": given})
    return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]})


# ---- run_mlm.py -----------------------------------------------------------------------------------------------
def mlm_args(tokenizer_dir, tmp_path, train, *extra):
    return scratch_run(
        tokenizer_dir, tmp_path, *extra, overrides={"vocab_size": 120}, train_file=train, max_seq_length=16
    )


MLM_FILES = {
    # name: (file name, content, extra flags, what the message must say)
    "empty txt": ("train.txt", "", [], "is empty"),
    "blank-line txt, line by line": ("train.txt", "\n   \n\n", ["--line_by_line"], "is empty"),
    "empty csv": ("train.csv", "", [], "is empty"),
    "header-only csv": ("train.csv", "text\n", [], "has no examples"),
    "empty json": ("train.json", "", [], "is empty"),
    "numbers as the first csv column": ("train.csv", "id\n1\n2\n3\n4\n", [], "not text"),
    "non-UTF-8 txt": ("train.txt", "caf\xe9 au lait\n".encode("latin-1"), [], "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(MLM_FILES))
def test_run_mlm_names_the_bad_file_and_the_problem(case, tokenizer_dir, tmp_path):
    name, content, extra, problem = MLM_FILES[case]
    train = write(tmp_path / name, content)
    with pytest.raises(ValueError, match=problem) as error:
        run_mlm.main(mlm_args(tokenizer_dir, tmp_path, train, *extra))
    assert str(train) in str(error.value)


def test_run_mlm_with_nothing_to_do_says_so(tmp_path):
    with pytest.raises(ValueError, match="Nothing to do: pass --do_train and/or --do_eval"):
        run_mlm.main(["--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_line_by_line_logs_the_tokens_it_truncates(tokenizer_dir, tmp_path, caplog):
    train = write(tmp_path / "train.txt", "\n".join([" ".join(WORDS * 10)] * 4) + "\n")
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_mlm.main(mlm_args(tokenizer_dir, tmp_path, train, "--line_by_line", "--validation_file", str(train)))
    message = next(
        record.getMessage() for record in caplog.records if "--line_by_line: The train file" in record.getMessage()
    )
    assert "4 of 4 lines longer than --max_seq_length 16" in message
    assert f"{train}" in message and "Without --line_by_line" in message
    lost = int(message.split(" lost ")[1].split(" of ")[0].replace(",", ""))
    assert lost == 4 * (len(WORDS) * 10 + 2 - 16)  # every line: its words, [CLS] and [SEP], less the 16 kept


def test_a_preset_typo_suggests_the_preset(tmp_path):
    with pytest.raises(ValueError, match="Did you mean the preset 'gmlp-tiny'.*Presets: gmlp-base"):
        run_mlm.main(["--config_name", "gmlp-tinyy", "--output_dir", str(tmp_path / "out"), "--do_train"])


# ---- the output directory and resuming ------------------------------------------------------------------------
def test_an_output_dir_with_another_runs_results_is_refused_unless_overwritten(tokenizer_dir, tmp_path):
    train = write(tmp_path / "train.txt", "\n".join(rotated_lines(40)) + "\n")
    run_mlm.main(mlm_args(tokenizer_dir, tmp_path, train))
    out = tmp_path / "out"
    assert "train_loss" in json.loads((out / "all_results.json").read_text())
    evaluate = flags(
        model_name_or_path=out,
        validation_file=train,
        output_dir=out,
        do_eval=True,
        max_seq_length=16,
        report_to="none",
    )
    with pytest.raises(FileExistsError, match="holds the results of an earlier run.*--overwrite_output_dir"):
        run_mlm.main(evaluate)
    run_mlm.main([*evaluate, "--overwrite_output_dir"])
    results = json.loads((out / "all_results.json").read_text())
    assert "eval_loss" in results and "train_loss" not in results  # no stale figure of the earlier run
    assert not (out / "train_results.json").exists()


def test_resume_takes_the_newest_complete_checkpoint(tokenizer_dir, tmp_path, caplog):
    train = write(tmp_path / "train.txt", "\n".join(rotated_lines(40)) + "\n")
    args = mlm_args(tokenizer_dir, tmp_path, train)
    args[args.index("--save_strategy") + 1] = "steps"
    args[args.index("--max_steps") + 1] = "3"
    run_mlm.main([*args, "--save_steps", "1"])
    out = tmp_path / "out"
    # A run killed while saving checkpoint-3: its config and weights are written, its optimizer state is not.
    (out / "checkpoint-3" / "optimizer.pt").unlink()
    # checkpoint-2's weights were cut short.
    weights = out / "checkpoint-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert "optimizer.pt is missing" in checkpoint_problem(out / "checkpoint-3")
    assert str(weights) in checkpoint_problem(out / "checkpoint-2")
    args[args.index("--max_steps") + 1] = "4"
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_mlm.main([*args, "--save_steps", "1", "--resume_from_checkpoint", str(out), "--overwrite_output_dir"])
    messages = [record.getMessage() for record in caplog.records]
    skipped = " ".join(m for m in messages if "Skipping the incomplete checkpoint" in m)
    assert "checkpoint-3: " in skipped and "checkpoint-2: " in skipped
    assert f"Resuming from {out / 'checkpoint-1'}" in messages
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4


def test_truncated_weights_are_named(tokenizer_dir, tmp_path):
    train = write(tmp_path / "train.txt", "\n".join(rotated_lines(40)) + "\n")
    run_mlm.main(mlm_args(tokenizer_dir, tmp_path, train))
    weights = tmp_path / "out" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-50])
    with pytest.raises(ValueError, match="truncated or corrupt") as error:
        run_mlm.main(
            flags(
                model_name_or_path=tmp_path / "out",
                validation_file=train,
                output_dir=tmp_path / "eval",
                do_eval=True,
                report_to="none",
            )
        )
    assert str(weights) in str(error.value)


# ---- run_glue.py ----------------------------------------------------------------------------------------------
def glue_args(tokenizer_dir, tmp_path, *extra):
    return scratch_run(tokenizer_dir, tmp_path, *extra, max_seq_length=32)


def labelled_csv(blank_row: int | None = None) -> str:
    rows = [f"{text},{'' if i == blank_row else i % 2}" for i, text in enumerate(rotated_lines(8))]
    return "sentence,label\n" + "\n".join(rows) + "\n"


@pytest.mark.parametrize("task", [["--task_name", "sst2"], []], ids=["sst2", "custom"])
def test_a_blank_label_is_named_by_its_row(task, tokenizer_dir, tmp_path):
    train = write(tmp_path / "train.csv", labelled_csv(blank_row=5))
    with pytest.raises(ValueError, match=r"1 example\(s\) have an empty label \(example 5") as error:
        run_glue.main(
            glue_args(tokenizer_dir, tmp_path, *task, "--train_file", str(train), "--validation_file", str(train))
        )
    assert str(train) in str(error.value)


GLUE_FILES = {
    "empty train.tsv": ("", "is empty"),
    "header-only train.tsv": ("sentence\tlabel\n", "has no examples"),
}


@pytest.mark.parametrize("case", sorted(GLUE_FILES))
def test_run_glue_names_a_bad_glue_dir_file(case, tokenizer_dir, tmp_path):
    content, problem = GLUE_FILES[case]
    train = write(tmp_path / "glue" / "SST-2" / "train.tsv", content)
    write(
        tmp_path / "glue" / "SST-2" / "dev.tsv", "sentence\tlabel\n" + "\n".join(f"{s}\t1" for s in rotated_lines(4))
    )
    with pytest.raises(ValueError, match=problem) as error:
        run_glue.main(glue_args(tokenizer_dir, tmp_path, "--task_name", "sst2", "--glue_dir", str(tmp_path / "glue")))
    assert str(train) in str(error.value)


# ---- run_squad.py ---------------------------------------------------------------------------------------------
def squad_args(tokenizer_dir, tmp_path, train, *extra):
    validation = write(tmp_path / "dev.json", squad_json())
    return scratch_run(
        tokenizer_dir, tmp_path, *extra, overrides={"vocab_size": 120}, train_file=train, validation_file=validation
    )


SQUAD_FILES = {
    "answers shifted by 7": (squad_json(answer_start_shift=7), "3 of 3 training questions.*question-0: answer"),
    "answer_start past the context": (squad_json(start=500), "is not at character 500"),
    "no answer in SQuAD 1.1": (squad_json(answers=[]), "no answer .*--version_2_with_negative"),
}


@pytest.mark.parametrize("case", sorted(SQUAD_FILES))
def test_run_squad_refuses_answers_that_do_not_match_their_context(case, tokenizer_dir, tmp_path):
    content, problem = SQUAD_FILES[case]
    train = write(tmp_path / "train.json", content)
    with pytest.raises(ValueError, match=problem) as error:
        run_squad.main(squad_args(tokenizer_dir, tmp_path, train))
    assert str(train) in str(error.value) and "--skip_invalid_answers" in str(error.value)


def test_run_squad_can_skip_the_bad_answers_with_a_count(tokenizer_dir, tmp_path, caplog):
    good = json.loads(squad_json())
    bad = json.loads(squad_json(answer_start_shift=7))["data"][0]["paragraphs"][0]["qas"][:1]
    bad[0]["id"] = "shifted"
    good["data"][0]["paragraphs"][0]["qas"] += bad
    train = write(tmp_path / "train.json", json.dumps(good))
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        run_squad.main(squad_args(tokenizer_dir, tmp_path, train, "--skip_invalid_answers"))
    assert any(
        "skipping 1 of 4 training questions" in r.getMessage() and "shifted" in r.getMessage() for r in caplog.records
    )
    assert json.loads((tmp_path / "out" / "train_results.json").read_text())["train_samples"] >= 3


def test_run_squad_names_a_non_utf8_file(tokenizer_dir, tmp_path):
    train = write(tmp_path / "train.json", squad_json().replace("river", "rivi\xe8re").encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8") as error:
        run_squad.main(squad_args(tokenizer_dir, tmp_path, train))
    assert str(train) in str(error.value)


def test_run_squad_defaults_fit_a_model_of_128_tokens(tokenizer_dir, tmp_path):
    train = write(tmp_path / "train.json", squad_json())
    args = squad_args(tokenizer_dir, tmp_path, train)
    args[args.index("--config_overrides") + 1] = config_overrides(vocab_size=120, max_position_embeddings=128)
    run_squad.main(args)  # no --max_seq_length / --doc_stride: 128 and 32, derived from n
    assert (tmp_path / "out" / "eval_results.json").is_file()


# ---- run_image_classification.py ------------------------------------------------------------------------------
def test_imagefolder_with_train_and_validation_dirs(tmp_path):
    for split in ("train", "validation"):
        for label, colour in (("red", (255, 0, 0)), ("blue", (0, 0, 255))):
            folder = tmp_path / split / label
            folder.mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (12, 12), tuple(max(0, c - 10 * i) for c in colour)).save(folder / f"{i}.png")
    metrics = run_image_classification.main(
        flags(
            dataset_name="imagefolder",
            train_dir=tmp_path / "train",
            validation_dir=tmp_path / "validation",
            config_name="gmlp-tiny",
            output_dir=tmp_path / "out",
            do_train=True,
            do_eval=True,
            report_to="none",
            save_strategy="no",
            **ONE_STEP,
        )
    )
    assert metrics["eval_samples"] == 6
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert sorted(config["id2label"].values()) == ["blue", "red"]


def test_a_checkpoint_saved_whole_by_fsdp_counts_as_complete(tmp_path):
    """Under the README's --fsdp command the Trainer saves FSDP's full state dicts: the weights as
    pytorch_model_fsdp.bin (beside model.safetensors), the optimizer as optimizer.bin, no optimizer.pt (the resume of
    such a checkpoint was refused on an H200); a file of them cut short is still caught."""
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    torch.save({"weight": torch.ones(3)}, folder / "pytorch_model_fsdp.bin")
    torch.save({}, folder / "scheduler.pt")
    torch.save({}, folder / "rng_state.pth")
    write(folder / "trainer_state.json", json.dumps({"global_step": 4}))
    assert "optimizer.pt is missing" in checkpoint_problem(folder)
    write(folder / "optimizer.bin", b"PK\x03\x04 cut short")
    assert "optimizer.bin is truncated or corrupt" in checkpoint_problem(folder)
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.bin")
    assert checkpoint_problem(folder) is None
    training_args = TrainingArguments(output_dir=str(tmp_path / "out"), resume_from_checkpoint=str(tmp_path))
    assert resolve_checkpoint(training_args) == str(folder)
    write(folder / "pytorch_model_fsdp.bin", b"PK\x03\x04 cut short")
    assert "pytorch_model_fsdp.bin is truncated or corrupt" in checkpoint_problem(folder)


def test_a_checkpoint_saved_sharded_by_fsdp_counts_as_complete(tmp_path):
    """FSDP's sharded saving (its SHARDED_STATE_DICT) writes `torch.distributed.checkpoint` folders in place of
    model.safetensors and optimizer.pt; such a checkpoint resumes once each folder's `.metadata` (written last) is
    there."""
    folder = tmp_path / "checkpoint-4"
    for name in ("pytorch_model_fsdp_0", "optimizer_0"):
        write(folder / name / "__0_0.distcp", b"shard")
    write(folder / "trainer_state.json", json.dumps({"global_step": 4}))
    torch.save({}, folder / "scheduler.pt")
    assert "no model weights" in checkpoint_problem(folder)
    write(folder / "pytorch_model_fsdp_0" / ".metadata", b"m")
    assert "optimizer.pt is missing" in checkpoint_problem(folder)
    write(folder / "optimizer_0" / ".metadata", b"m")
    assert checkpoint_problem(folder) is None
