"""The scripts in the Hugging Face ecosystem: the model card they write, and `--bf16` on a machine without an
accelerator."""

import json
import logging

import datasets
import pytest
from helpers import WORDS, flags, rotated_lines, tiny_run
from transformers import TrainingArguments

import run_glue
import run_mlm
from gmlp.tasks.mlm import tokenize_for_mlm

COMMON = flags(report_to="none", save_strategy="no", per_device_train_batch_size=2, max_steps=2, max_seq_length=16)


def corpus(path, lines=30):
    path.write_text("\n".join(rotated_lines(lines)) + "\n")
    return path


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, tokenizer_dir):
    """A tiny aMLP checkpoint (n = 16), pretrained from scratch by run_mlm.py."""
    root = tmp_path_factory.mktemp("mlm")
    run_mlm.main(
        tiny_run(
            root / "model",
            *COMMON,
            config_name="amlp-tiny",
            overrides={"max_position_embeddings": 16},
            tokenizer=tokenizer_dir,
            train_file=corpus(root / "text.txt"),
            do_train=True,
            do_eval=True,
        )
    )
    return root / "model"


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


def test_fine_tuning_card_names_its_local_base_without_a_broken_link(pretrained, tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("sentence,label\n" + "\n".join(f"{' '.join(WORDS[i : i + 6])},{i % 2}" for i in range(12)) + "\n")
    run_glue.main(
        [
            "--model_name_or_path",
            str(pretrained),
            "--train_file",
            str(train),
            "--validation_file",
            str(train),
            "--output_dir",
            str(tmp_path / "classifier"),
            "--do_train",
            "--do_eval",
            *COMMON,
        ]
    )
    card = (tmp_path / "classifier" / "README.md").read_text()
    assert "fine-tuned from a local checkpoint (model), on train.csv." in card
    assert "base_model" not in card and "https://huggingface.co/" + str(pretrained) not in card
    assert 'AutoModelForSequenceClassification.from_pretrained("classifier", trust_remote_code=True)' in card
    assert "| eval_accuracy |" in card


def test_bf16_runs_on_the_cpu_without_use_cpu(pretrained, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="gmlp"):
        metrics = run_mlm.main(
            [
                "--model_name_or_path",
                str(pretrained),
                "--train_file",
                str(corpus(tmp_path / "t.txt")),
                "--output_dir",
                str(tmp_path / "bf16"),
                "--do_train",
                "--do_eval",
                "--bf16",
                *COMMON,
            ]
        )
    assert any("--use_cpu added" in record.getMessage() for record in caplog.records)
    assert metrics["eval_loss"] > 0
    state = json.loads((tmp_path / "bf16" / "trainer_state.json").read_text())
    assert state["global_step"] == 2


def test_run_glue_reads_a_dataset_saved_with_save_to_disk(pretrained, tmp_path):
    import datasets

    features = datasets.Features(
        {
            "sentence": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["negative", "positive"]),
            "idx": datasets.Value("int32"),
        }
    )
    rows = {
        "sentence": [" ".join(WORDS[i : i + 6]) for i in range(12)],
        "label": [i % 2 for i in range(12)],
        "idx": list(range(12)),
    }
    split = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict(train=split, validation=split).save_to_disk(tmp_path / "sst2")
    metrics = run_glue.main(
        [
            "--model_name_or_path",
            str(pretrained),
            "--task_name",
            "sst2",
            "--dataset_name",
            str(tmp_path / "sst2"),
            "--output_dir",
            str(tmp_path / "out"),
            "--do_train",
            "--do_eval",
            *COMMON,
        ]
    )
    assert metrics["eval_samples"] == 12 and 0 <= metrics["eval_accuracy"] <= 1


def test_run_mlm_streams_a_corpus(pretrained, tmp_path):
    text = corpus(tmp_path / "stream.txt", lines=200)
    args = [
        "--model_name_or_path",
        str(pretrained),
        "--train_file",
        str(text),
        "--validation_file",
        str(text),
        "--output_dir",
        str(tmp_path / "streamed"),
        "--do_train",
        "--do_eval",
        "--streaming",
        "--max_eval_samples",
        "8",
        *COMMON,
    ]
    metrics = run_mlm.main(args)
    assert metrics["eval_samples"] == 8 and metrics["perplexity"] > 1
    assert json.loads((tmp_path / "streamed" / "trainer_state.json").read_text())["global_step"] == 2
    at = args.index("--max_steps")
    without_steps = args[:at] + args[at + 2 :]
    with pytest.raises(ValueError, match="--streaming needs --max_steps"):
        run_mlm.main([*without_steps, "--output_dir", str(tmp_path / "other")])


@pytest.mark.parametrize(
    "engine",
    [
        ["--fsdp", "full_shard auto_wrap", "--fsdp_config", '{"transformer_layer_cls_to_wrap": ["GMLPLayer"]}'],
        ["--deepspeed", '{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}'],
    ],
    ids=["fsdp", "deepspeed"],
)
def test_sharding_engines_on_the_cpu_are_refused_rather_than_silently_run_as_ddp(engine, pretrained, tmp_path):
    """Accelerate enables FSDP and DeepSpeed only for accelerator runs; on the CPU the Trainer would train plain DDP
    under the flag (seen with torchrun, 2 processes), so the scripts refuse it with the reason."""
    if engine[0] == "--deepspeed":
        pytest.importorskip(
            "deepspeed", reason="TrainingArguments reads a --deepspeed config only with DeepSpeed installed"
        )
    with pytest.raises(ValueError, match=f"{engine[0]} needs accelerators.*silently be plain data-parallel"):
        run_mlm.main(
            [
                "--model_name_or_path",
                str(pretrained),
                "--train_file",
                str(corpus(tmp_path / "t.txt")),
                "--output_dir",
                str(tmp_path / "engine"),
                "--do_train",
                *engine,
                *COMMON,
            ]
        )


@pytest.mark.parametrize("script", ["run_glue", "run_squad", "run_mlm"])
def test_torch_compile_pads_every_example_to_one_length(script, tmp_path, caplog):
    """Padded to each batch's longest example, compiled models recompile at nearly every batch; with --torch_compile
    the scripts pad to --max_seq_length (and say so), without it they keep dynamic padding."""
    from gmlp.tasks import run_glue as glue_script
    from gmlp.tasks import run_mlm as mlm_script
    from gmlp.tasks import run_squad as squad_script
    from gmlp.tasks.arguments import parse_arguments

    module = {"run_glue": glue_script, "run_squad": squad_script, "run_mlm": mlm_script}[script]
    dataclasses = (module.ModelArguments, module.DataTrainingArguments, TrainingArguments)
    data = {"run_glue": ["--task_name", "sst2"], "run_squad": ["--dataset_name", "rajpurkar/squad"], "run_mlm": []}
    common = ["--output_dir", str(tmp_path / "out"), "--do_train", "--report_to", "none", *data[script]]
    _, plain, _ = parse_arguments(dataclasses, common)
    with caplog.at_level(logging.WARNING):
        _, compiled, training_args = parse_arguments(dataclasses, [*common, "--torch_compile"])
    assert training_args.torch_compile
    assert plain.pad_to_max_length is False and compiled.pad_to_max_length is True
    assert "--pad_to_max_length added" in caplog.text


@pytest.mark.parametrize("asked", [None, "false"])
def test_torch_compile_compiles_each_block_once(asked, tmp_path, monkeypatch, tiny_config):
    """The whole model compiled unrolls every block into one graph (gMLP-base's 48 took minutes on an H200); with
    --torch_compile the scripts have Accelerate compile each block, the head and the embeddings on their own, unless
    the user set Accelerate's switch for it."""
    import torch
    from transformers import Trainer

    from gmlp import GMLPForMaskedLM
    from gmlp.tasks import run_mlm as mlm_script
    from gmlp.tasks.arguments import REGIONAL, parse_arguments

    monkeypatch.setenv(REGIONAL, "false")  # records its absence, restored after the test
    if asked is None:
        monkeypatch.delenv(REGIONAL)
    dataclasses = (mlm_script.ModelArguments, mlm_script.DataTrainingArguments, TrainingArguments)
    argv = ["--output_dir", str(tmp_path / "out"), "--do_train", "--report_to", "none", "--torch_compile"]
    *_, training_args = parse_arguments(dataclasses, argv)
    model = GMLPForMaskedLM(tiny_config())
    prepared = Trainer(model=model, args=training_args).accelerator.prepare_model(model)  # compiling is lazy
    compiled = torch._dynamo.eval_frame.OptimizedModule
    if asked is None:
        assert not isinstance(prepared, compiled)
        assert all(isinstance(layer, compiled) for layer in prepared.gmlp.encoder.layer)
        assert isinstance(prepared.lm_head, compiled)
    else:
        assert isinstance(prepared, compiled) and not isinstance(prepared._orig_mod.gmlp.encoder.layer[0], compiled)


def test_line_by_line_mlm_pads_to_max_seq_length_when_asked(tmp_path, script_tokenizer):
    tokenizer = script_tokenizer
    lines = ["the cat sat", "the old dog slept by the warm fire and the cat sat on a red mat"]
    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": lines})})
    arguments = TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    dynamic, fixed = (
        tokenize_for_mlm(raw, tokenizer, 16, True, arguments, pad_to_max_length=pad)["train"] for pad in (False, True)
    )
    assert sorted(len(ids) for ids in dynamic["input_ids"]) == [5, 16]
    assert [len(ids) for ids in fixed["input_ids"]] == [16, 16]
    assert fixed["input_ids"][0][:5] == dynamic["input_ids"][0]
