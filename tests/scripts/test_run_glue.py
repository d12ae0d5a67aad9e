"""run_glue.py end to end on tiny GLUE-layout, csv and `save_to_disk` fixtures; the GLUE readers and label checks;
padding-free batches. (A user's own data: test_custom_data.py.)"""

import json
from pathlib import Path

import datasets
import pytest
import torch
from helpers import SCRIPT_SIZES, flags, seeded, tiny_run
from transformers import AutoTokenizer

from gmlp import GMLPConfig, GMLPForSequenceClassification
from gmlp.tasks import loading, run_glue
from gmlp.tasks.errors import ScriptError
from gmlp.tasks.glue import GLUE_TASKS, get_task, load_glue_dir

GOOD = ["a great and moving film", "wonderful acting and a fine story", "i loved every minute", "a warm funny delight"]
BAD = ["a dull and boring mess", "terrible acting and a weak plot", "i hated every minute", "a cold tedious bore"]


@pytest.fixture(scope="module")
def tokenizer_dir(make_tokenizer):
    """A tokenizer that knows the reviews' words (conftest.py's make_tokenizer)."""
    return make_tokenizer((GOOD + BAD) * 5)


def write_tsv(path: Path, header: str | None, rows: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in ([header] if header else []) + rows), encoding="utf-8")


def sst2_dir(root: Path) -> Path:
    rows = [f"{text}\t{label}" for i in range(6) for text, label in ((GOOD[i % 4], 1), (BAD[i % 4], 0))]
    write_tsv(root / "SST-2" / "train.tsv", "sentence\tlabel", rows)
    write_tsv(root / "SST-2" / "dev.tsv", "sentence\tlabel", rows[:8])
    write_tsv(root / "SST-2" / "test.tsv", "index\tsentence", [f"{i}\t{text}" for i, text in enumerate(GOOD + BAD)])
    return root


def mnli_dir(root: Path) -> Path:
    header = "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\tlabel1\tgold_label"
    labels = ["entailment", "neutral", "contradiction"]
    rows = [
        f"{i}\t0\t0\tfiction\t-\t-\t-\t-\t{GOOD[i % 4]}\t{BAD[i % 4]}\t{labels[i % 3]}\t{labels[i % 3]}"
        for i in range(9)
    ]
    write_tsv(root / "MNLI" / "train.tsv", header, rows)
    write_tsv(root / "MNLI" / "dev_matched.tsv", header, rows[:6])
    write_tsv(root / "MNLI" / "dev_mismatched.tsv", header, rows[3:])
    return root


def glue_args(tokenizer_dir, output_dir, *extra, **options):
    """A tiny run of 3 steps (helpers.tiny_run), then `options` as flags and the `extra` arguments."""
    return tiny_run(
        output_dir,
        *extra,
        tokenizer=tokenizer_dir,
        overrides={"hidden_dropout_prob": 0},
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        **options,
    )


def test_sst2_from_a_glue_folder_trains_evaluates_and_predicts(tmp_path, tokenizer_dir):
    glue_dir = sst2_dir(tmp_path / "glue")
    output_dir = tmp_path / "out"
    run_glue.run(
        glue_args(
            tokenizer_dir,
            output_dir,
            task_name="SST-2",
            glue_dir=glue_dir,
            do_train=True,
            do_eval=True,
            do_predict=True,
        )
    )
    results = json.loads((output_dir / "all_results.json").read_text())
    assert results["eval_samples"] == 8 and results["train_samples"] == 12
    assert results["eval_accuracy"] in {i / 8 for i in range(9)}
    config = json.loads((output_dir / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"} and config["finetuning_task"] == "sst2"
    lines = (output_dir / "predict_results_sst2.txt").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 9
    assert {line.split("\t")[1] for line in lines[1:]} <= {"negative", "positive"}


def test_mnli_evaluates_matched_and_mismatched(tmp_path, tokenizer_dir):
    output_dir = tmp_path / "out"
    run_glue.run(
        glue_args(
            tokenizer_dir, output_dir, task_name="mnli", glue_dir=mnli_dir(tmp_path), do_train=True, do_eval=True
        )
    )
    results = json.loads((output_dir / "eval_results.json").read_text())
    assert results["eval_samples"] == 6 and results["eval_samples_mm"] == 6
    assert 0 <= results["eval_accuracy"] <= 1 and 0 <= results["eval_accuracy_mm"] <= 1


def test_custom_csv_regression_reports_pearson_and_spearman(tmp_path, tokenizer_dir):
    lines = ["sentence1,sentence2,label"] + [f"{GOOD[i % 4]},{BAD[i % 4]},{i % 5}.5" for i in range(16)]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    output_dir = tmp_path / "out"
    train = tmp_path / "train.csv"
    run_glue.run(
        glue_args(tokenizer_dir, output_dir, train_file=train, validation_file=train, do_train=True, do_eval=True)
    )
    results = json.loads((output_dir / "eval_results.json").read_text())
    assert {"eval_pearson", "eval_spearmanr"} <= set(results)


def test_custom_json_labels_are_the_training_labels(tmp_path, tokenizer_dir):
    rows = [
        {"text": GOOD[i % 4], "label": "pos"} if i % 2 else {"text": BAD[i % 4], "label": "neg"} for i in range(12)
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "dev.jsonl").write_text(json.dumps({"text": "fine", "label": "neutral"}) + "\n")
    with pytest.raises(
        ValueError, match=r"label 'neutral' is not a custom label; the labels are 0 = 'neg', 1 = 'pos'"
    ):
        run_glue.run(
            glue_args(
                tokenizer_dir,
                tmp_path / "out",
                train_file=tmp_path / "train.jsonl",
                validation_file=tmp_path / "dev.jsonl",
                do_train=True,
                do_eval=True,
            )
        )


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (
            "label",
            ["--task_name", "sst2"],
            r"train.tsv, line 3: label '2' is not a sst2 label; the labels are 0 = 'negative'",
        ),
        (
            "columns",
            ["--task_name", "sst2"],
            r"has no column\(s\) \['sentence'\] \(its columns: \['text', 'label'\]\)",
        ),
        ("none", ["--task_name", "rte"], r"No RTE folder in --glue_dir"),
        (
            "none",
            ["--task_name", "sst2", "--max_seq_length", "64"],
            r"--max_seq_length 64 is larger than the model's spatial size n",
        ),
    ],
)
def test_bad_glue_input_stops_early(tmp_path, tokenizer_dir, setup, args, message):
    glue_dir = sst2_dir(tmp_path / "glue")
    if setup == "label":
        write_tsv(glue_dir / "SST-2" / "train.tsv", "sentence\tlabel", ["fine\t1", "fine\t2"])
    if setup == "columns":
        write_tsv(glue_dir / "SST-2" / "train.tsv", "text\tlabel", ["fine\t1"])
    with pytest.raises(ScriptError, match=message):
        run_glue.run(glue_args(tokenizer_dir, tmp_path / "out", *args, glue_dir=glue_dir, do_train=True))


def test_missing_data_file_names_the_flag(tmp_path, tokenizer_dir):
    with pytest.raises(ScriptError, match=r"^--train_file \S*missing.csv: no such file\.$"):
        run_glue.run(glue_args(tokenizer_dir, tmp_path / "out", train_file=tmp_path / "missing.csv", do_train=True))


def test_glue_dir_reader_gives_the_hub_columns_and_labels(tmp_path):
    root = tmp_path / "glue"
    write_tsv(root / "CoLA" / "train.tsv", None, ["gj04\t1\t\tThe book is red .", "gj04\t0\t*\tBook the red is ."])
    write_tsv(root / "RTE" / "dev.tsv", "index\tsentence1\tsentence2\tlabel", ['7\tA "quote\tB\tnot_entailment'])
    write_tsv(root / "MRPC" / "train.tsv", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String", ["1\t1\t2\tA\tB"])
    cola = load_glue_dir(str(root), get_task("cola"), ["train"])["train"]
    assert cola[:] == {"sentence": ["The book is red .", "Book the red is ."], "label": [1, 0], "idx": [0, 1]}
    assert cola.features["label"].names == ["unacceptable", "acceptable"]
    rte = load_glue_dir(str(root), get_task("rte"), ["validation"])["validation"]
    assert rte[0] == {"sentence1": 'A "quote', "sentence2": "B", "label": 1, "idx": 7}
    mrpc = load_glue_dir(str(root), get_task("mrpc"), ["train"])["train"]
    assert mrpc[0] == {"sentence1": "A", "sentence2": "B", "label": 1, "idx": 0}
    assert sorted(GLUE_TASKS) == ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]


@pytest.mark.parametrize("task_name, make_dir", [("SST-2", sst2_dir), ("MNLI", mnli_dir)], ids=["single", "pairs"])
def test_padding_free_batches_train_and_evaluate_as_padded_ones(tmp_path, tokenizer_dir, task_name, make_dir):
    """--padding_free (every batch's examples in one row, positions restarting at 0; sentence pairs keep their
    token types) trains to the padded run's weights and gives its evaluation loss (dropout off: the same steps)."""
    glue_dir = make_dir(tmp_path / "glue")
    results = {}
    for name, extra in (("padded", ()), ("padding-free", ("--padding_free",))):
        output_dir = tmp_path / name
        args = glue_args(tokenizer_dir, output_dir, *extra, task_name=task_name, glue_dir=glue_dir)
        run_glue.run([*args, "--do_train", "--do_eval", "--per_device_eval_batch_size", "3"])
        results[name] = json.loads((output_dir / "all_results.json").read_text())
    padded, padding_free = results["padded"], results["padding-free"]
    assert padding_free["eval_loss"] == pytest.approx(padded["eval_loss"], rel=1e-4)
    assert padding_free["eval_accuracy"] == padded["eval_accuracy"]
    assert padding_free["train_loss"] == pytest.approx(padded["train_loss"], rel=1e-4)


def test_padding_free_is_refused_with_padding_to_the_maximum_length(tmp_path, tokenizer_dir):
    args = glue_args(tokenizer_dir, tmp_path / "out", "--padding_free", "--pad_to_max_length", task_name="SST-2")
    with pytest.raises(ValueError, match="--padding_free batches have no padding"):
        run_glue.run([*args, "--glue_dir", str(sst2_dir(tmp_path / "glue")), "--do_train"])


def test_a_dataset_saved_with_save_to_disk_is_read(tmp_path, tokenizer_dir):
    labels = datasets.ClassLabel(names=["negative", "positive"])
    features = datasets.Features(
        {"sentence": datasets.Value("string"), "label": labels, "idx": datasets.Value("int32")}
    )
    rows = {"sentence": (GOOD + BAD) * 2, "label": ([1] * 4 + [0] * 4) * 2, "idx": list(range(16))}
    split = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict(train=split, validation=split).save_to_disk(tmp_path / "sst2")
    options = {"task_name": "sst2", "dataset_name": tmp_path / "sst2", "do_train": True, "do_eval": True}
    metrics = run_glue.run(glue_args(tokenizer_dir, tmp_path / "out", **options))
    assert metrics["eval_samples"] == 16 and metrics["eval_accuracy"] in {i / 16 for i in range(17)}


def test_a_checkpoint_run_at_a_longer_n_keeps_its_spatial_weights(tmp_path, tokenizer_dir, monkeypatch):
    """`--config_overrides max_position_embeddings=32` on a checkpoint of n = 16, whose W is far from the init and b
    from one: the run's model keeps them (its new positions start at the init), gives the checkpoint's logits on
    inputs of up to 16 tokens, and its tokenizer's length follows the new n (the saved tokenizer's is 16)."""
    config = GMLPConfig(**{**SCRIPT_SIZES, "max_position_embeddings": 16}, vocab_size=120, spatial_init_eps=16.0)
    checkpoint = GMLPForSequenceClassification(config).eval()
    with torch.no_grad():
        for layer in checkpoint.gmlp.encoder.layer:
            layer.sgu.spatial_proj.bias.add_(seeded(torch.randn, (1, 16), seed=0))
    checkpoint.save_pretrained(tmp_path / "n16")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, model_max_length=16)
    tokenizer.save_pretrained(tmp_path / "n16")
    runs, load_model = [], loading.load_model

    def keep(auto_class, model_args, config, tokenizer=None):  # the run's model and tokenizer, as loaded
        runs.append((load_model(auto_class, model_args, config, tokenizer), tokenizer))
        return runs[-1][0]

    monkeypatch.setattr(loading, "load_model", keep)
    options = {"model_name_or_path": tmp_path / "n16", "config_overrides": "max_position_embeddings=32"}
    glue = {"task_name": "SST-2", "glue_dir": sst2_dir(tmp_path / "glue"), "output_dir": tmp_path / "out"}
    run_glue.run(flags(**options, **glue, do_eval=True, report_to="none"))
    ((model, run_tokenizer),) = runs
    assert model.config.max_position_embeddings == 32 and run_tokenizer.model_max_length == 32
    for layer, saved in zip(model.gmlp.encoder.layer, checkpoint.gmlp.encoder.layer, strict=True):
        weight, bias = layer.sgu.spatial_proj.weight.detach(), layer.sgu.spatial_proj.bias.detach()
        assert torch.equal(weight[:, 16:47], saved.sgu.spatial_proj.weight)  # the Toeplitz offsets -15..15
        assert torch.equal(bias[:, :16], saved.sgu.spatial_proj.bias)
        assert torch.equal(bias[:, 16:], torch.ones(1, 16))
    ids = tokenizer(GOOD + BAD, padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(**ids).logits, checkpoint(**ids).logits)
