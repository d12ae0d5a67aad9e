"""The quality benchmark's fine-tuning chain: the rate from the SST-2 sweep, the pair tasks' pooling for the MLP
models, and BERT's recipe probes, of which one that beats the recipe by a point or more runs at every seed."""

import pytest

from benchmarks.quality import finetuning
from benchmarks.quality.__main__ import parse_args
from benchmarks.quality.context import Context

SWEEP = {1e-4: 0.70, 3e-4: 0.80, 1e-3: 0.78}  # SST-2 accuracy by rate: 3e-4 best, 1e-3 second
NO_DROPOUT_GAIN = {"sst2": 0.005, "mnli": 0.02}  # a point or more only on MNLI


def fake_finetune(calls):
    """A stand-in for `finetuning.finetune` whose metric depends on the rate and the probe, noting every run."""

    def run(ctx, task, name, seed, learning_rate, overrides=None, warmup_ratio=0.1):
        calls.append((task, name, seed, learning_rate, overrides, warmup_ratio))
        value = SWEEP[learning_rate] + (NO_DROPOUT_GAIN[task] if overrides == "hidden_dropout_prob=0.0" else 0)
        value -= 0.01 if warmup_ratio != 0.1 else 0
        settings = {"learning_rate": learning_rate, "overrides": overrides, "warmup_ratio": warmup_ratio}
        keys = [key for _, key in finetuning.TASK_METRICS[task]]
        return {"task": task, "seed": seed, "settings": settings, "metrics": dict.fromkeys(keys, value)}

    return run


@pytest.fixture
def chain(tmp_path, monkeypatch):
    ctx = Context(parse_args(["--work_dir", str(tmp_path), "--output", str(tmp_path / "quality.json")]))
    calls = []
    monkeypatch.setattr(finetuning, "finetune", fake_finetune(calls))
    return lambda name: (finetuning.model_chain(ctx, name), calls)


def test_bert_runs_its_best_rate_at_every_seed_and_adopts_a_probe_only_where_it_wins_a_point(chain):
    out, calls = chain("bert")
    assert out["sweep"] == {str(rate): value for rate, value in SWEEP.items()}
    assert sorted(out["rows"]["mnli"]) == ["bert", "bert, no dropout"]
    assert list(out["rows"]["sst2"]) == ["bert"]  # the probe's half point on SST-2 is not adopted
    assert {
        run["settings"]["learning_rate"] for rows in out["rows"].values() for runs in rows.values() for run in runs
    } == {3e-4}
    assert [run["seed"] for run in out["rows"]["mnli"]["bert, no dropout"]] == [0, 1, 2]
    probes = out["probes"]
    assert probes["none: the recipe"] == {"sst2": 0.80, "mnli": 0.80}
    assert probes["no dropout"] == pytest.approx({"sst2": 0.805, "mnli": 0.82})
    assert probes[finetuning.SECOND_RATE] == {"sst2": 0.78, "mnli": 0.78}
    # the probes run on the first seed, the adopted one then at every seed
    seeds = {}
    for task, _, seed, rate, overrides, warmup in calls:
        seeds.setdefault((task, rate, overrides, warmup), set()).add(seed)
    assert seeds[("sst2", 3e-4, None, 0.3)] == seeds[("mnli", 3e-4, None, 0.3)] == {0}
    assert seeds[("mnli", 1e-3, None, 0.1)] == {0}
    assert seeds[("sst2", 3e-4, "hidden_dropout_prob=0.0", 0.1)] == {0}
    assert seeds[("mnli", 3e-4, "hidden_dropout_prob=0.0", 0.1)] == {0, 1, 2}


def test_the_mlp_models_pool_the_mean_on_sentence_pairs_and_run_no_probes(chain):
    out, calls = chain("gmlp")
    assert list(out["rows"]["mnli"]) == ["gmlp, mean pooling"]
    assert list(out["rows"]["sst2"]) == list(out["rows"]["squad"]) == ["gmlp"]
    assert out["probes"] == {}
    assert {call[4] for call in calls if call[0] == "mnli"} == {finetuning.MEAN_POOLING}
    assert {call[4] for call in calls if call[0] != "mnli"} == {None}
    assert len(set(calls)) == len(SWEEP) + 3 * 3 - 1  # the sweep's best-rate run is also seed 0's SST-2 row
