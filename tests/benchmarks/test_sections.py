"""Every section of the speed benchmark measures end to end on the CPU at tiny sizes and writes the tables of what it
measured; the helpers the benchmarks share give what they promise."""

import json
import time
from functools import partial

import pytest
import torch
from transformers import BertForMaskedLM

from benchmarks import common
from benchmarks.speed import __main__ as cli
from benchmarks.speed import models, report, saved, scaling
from benchmarks.speed.memory_worker import measure_in_fresh_process

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 1000}
SECTIONS = {
    "training": [],
    "inference": [],
    "precision": [],
    "profile": [],
    "generation": ["--new-tokens", "4", "--generation-rounds", "1"],
    "memory": ["--memory-lengths", "64"],
    "saved": ["--saved-length", "64"],
    "scaling": ["--lengths", "32", "64", "--scaling-tokens", "128", "--scaling-layers", "1", "--scaling-rounds", "1"],
    # torch.compile is the precision section's to test: compiling costs minutes on two cores.
    "gpu": ["--quick", "--gpu-batch", "2", "--gpu-parts", "batches-bf16,inference-bf16-eager,fft-crossover"],
}


@pytest.fixture
def tiny_models(monkeypatch):
    """The benchmark's model at a tiny size (the memory-measuring processes are given it too)."""
    for key, value in TINY.items():
        monkeypatch.setitem(models.SMALL, key, value)


@pytest.mark.e2e
@pytest.mark.parametrize("section", SECTIONS)
def test_each_section_measures_and_writes_its_tables(tiny_models, tmp_path, section):
    output = tmp_path / "speed.json"
    # One thread: tiny steps on two busy threads spend most of their time in OpenMP's waits.
    argv = ["--sections", section, "--rounds", "1", "--min-run-time", "0", "--threads", "1", "--output", str(output)]
    cli.main([*argv, *SECTIONS[section]])
    results = json.loads(output.read_text())
    assert results[section] and results[section].get("errors", {}) == {}
    assert output.with_suffix(".md").read_text() == report.markdown(results)


def test_interleaved_rounds_time_each_case_and_pair_them():
    """Every round times every case (the median per call of its block); a step that takes twice as long is paired
    round by round at half the speed."""
    calls = {"short": 0, "long": 0}

    def step(name, seconds):
        calls[name] += 1
        time.sleep(seconds)

    times = common.interleaved({"short": partial(step, "short", 0.002), "long": partial(step, "long", 0.004)}, 3)
    assert [len(runs) for runs in times.values()] == [3, 3]
    assert all(0.002 <= t < 0.02 for t in times["short"]) and all(0.004 <= t < 0.04 for t in times["long"])
    assert calls["short"] >= 1 + 3 * 2  # the warm-up, then per round a call that sizes the block and a timed one
    assert 1.5 < common.paired_ratio(times, "short", "long") < 2.5


def test_bert_of_equal_parameter_count():
    """The FFN width that matches a count lands within one width step of it."""
    like = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "max_position_embeddings": 128}
    target = 300_000
    config = common.bert_config(like, target)
    per_width = 2 * like["num_hidden_layers"] * (like["hidden_size"] + 1)
    assert abs(BertForMaskedLM(config).num_parameters() - target) <= per_width


def test_the_saved_tensor_account_counts_a_shared_storage_once(tiny_models):
    """Without recomputation both halves of the split GELU output are saved, views of one tensor: their storage is
    counted once. Recomputing the gating saves fewer bytes in every block."""
    input_ids = torch.randint(5, 1000, (1, 32))
    plain = saved.account(models.encoder("gmlp", 32, recompute_gating=False), input_ids)
    recomputed = saved.account(models.encoder("gmlp", 32), input_ids)
    for entries in (plain, recomputed):
        assert {"encoder.layer.0", "encoder.layer.1"} <= {entry["block"] for entry in entries}
    assert any(entry["bytes"] == 0 for entry in plain), "the split gate's halves share a storage"

    def block_bytes(entries):
        return sum(entry["bytes"] for entry in entries if entry["block"] == "encoder.layer.0")

    assert block_bytes(recomputed) < block_bytes(plain)


def test_the_crossover_is_where_the_fft_stays_faster():
    def lengths(*ratios):
        return {"lengths": {str(128 * 2**i): {"fft_vs_direct_spatial": r} for i, r in enumerate(ratios)}}

    assert scaling.crossover(lengths(0.5, 0.9, 1.1, 1.8)) == 512
    assert scaling.crossover(lengths(1.2, 0.9, 1.1, 1.8)) == 512  # faster at 128 by noise, slower again at 256
    assert scaling.crossover(lengths(1.0, 1.2)) == 128
    assert scaling.crossover(lengths(0.5, 0.9)) is None


def test_a_failed_memory_measurement_raises():
    with pytest.raises(RuntimeError, match="No training case 'no such case'"):
        measure_in_fresh_process(["case", "no such case"], threads=1)


def test_the_baseline_is_the_model_at_a_git_revision():
    """gMLP at HEAD, loaded from git as a package of its own, builds the same model as the working tree's (this
    branch does not change the model)."""
    import gmlp
    from benchmarks.baseline import gmlp_at, label

    config = {**TINY, "max_position_embeddings": 32}
    then = gmlp_at("HEAD").GMLPForMaskedLM(gmlp_at("HEAD").GMLPConfig(**config))
    now = gmlp.GMLPForMaskedLM(gmlp.GMLPConfig(**config))
    assert type(then).__module__ != type(now).__module__
    assert then.num_parameters() == now.num_parameters()
    assert label("gmlp", "main") == "gmlp @main"
