"""Every section of the speed benchmark measures end to end on the CPU at tiny sizes and writes the tables of what it
measured; the helpers the benchmarks share give what they promise."""

import json
from functools import partial

import pytest
from torch.utils.benchmark import Timer
from transformers import BertForMaskedLM

from benchmarks import common
from benchmarks.speed import __main__ as cli
from benchmarks.speed import models
from benchmarks.speed.memory import measure_in_fresh_process

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 1000}
SECTIONS = {
    "training": [],
    "precision": [],
    "generation": ["--new-tokens", "4"],
    "memory": ["--memory-lengths", "64"],
    "scaling": ["--lengths", "32", "64", "--scaling-tokens", "128", "--scaling-layers", "1"],
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
    assert output.with_suffix(".md").read_text() == cli.markdown(results)


def test_interleaved_rounds_time_each_case_and_pair_them(monkeypatch):
    """Every round times every case (the median per call of its block); a step that takes twice as long is paired
    round by round at half the speed. The steps advance a clock of their own, so that a loaded machine's delays do
    not enter the figures."""
    calls = {"short": 0, "long": 0}
    clock = [0.0]
    monkeypatch.setattr(common, "Timer", partial(Timer, timer=lambda: clock[0]))

    def step(name, seconds):
        calls[name] += 1
        clock[0] += seconds

    times = common.interleaved({"short": partial(step, "short", 0.002), "long": partial(step, "long", 0.004)}, 3)
    assert times == {"short": [pytest.approx(0.002)] * 3, "long": [pytest.approx(0.004)] * 3}
    assert calls["short"] >= 1 + 3 * 2  # the warm-up, then per round a call that sizes the block and a timed one
    assert common.paired_ratio(times, "short", "long") == pytest.approx(2.0)


def test_bert_of_equal_parameter_count():
    """The FFN width that matches a count lands within one width step of it."""
    like = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "max_position_embeddings": 128}
    target = 300_000
    config = common.bert_config(like, target)
    per_width = 2 * like["num_hidden_layers"] * (like["hidden_size"] + 1)
    assert abs(BertForMaskedLM(config).num_parameters() - target) <= per_width


def test_a_failed_memory_measurement_raises():
    with pytest.raises(RuntimeError, match="No training case 'no such case'"):
        measure_in_fresh_process({"case": "no such case"}, threads=1)
