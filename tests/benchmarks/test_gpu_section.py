"""The GPU run's measurements on the CPU (benchmarks/speed/gpu_stages.py and gpu_parts.py), at tiny sizes: the losses
and baselines compute what they claim; a row's ratio is paired by round and saved after every round; MFU is against the
datasheet's peak with the measured one beside; the preflight refuses what the run cannot use; the hybrid is checked
against float64 with the PyTorch unit's own error as the tolerance's baseline, and timed only within it; each unit's
bytes are its own; the hybrid runs eager where it does not compile; the gating unit's share is read off the unit's
time; a failing measurement is recorded and the next runs; and the GPU records' targets render off their rows."""

import json

import pytest
import torch
from transformers import AutoModelForMaskedLM, BertConfig

from benchmarks.common import bert_config, mlm_batch, modernbert_config
from benchmarks.speed import __main__ as speed_main
from benchmarks.speed import gpu, gpu_parts, gpu_stages, models
from gmlp import GMLPConfig

TINY = {"vocab_size": 97, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2}


def test_labelled_loss_is_each_models_masked_lm_loss():
    """The benchmark's loss (indices found once per batch, no boolean mask in the step) is the models' own MLM loss:
    gMLP's with sparse_prediction, BERT's and ModernBERT's with their full logits."""
    like = {**TINY, "max_position_embeddings": 16}
    gmlp = AutoModelForMaskedLM.from_config(GMLPConfig(**like, hidden_dropout_prob=0.0))
    target = gmlp.num_parameters()
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    bert = AutoModelForMaskedLM.from_config(bert_config(like, target, head_size=32, **no_dropout))
    modern = AutoModelForMaskedLM.from_config(modernbert_config(like, target, head_size=32))
    input_ids, labels = mlm_batch(3, 16, 97, mask_probability=0.3)
    index, targets = models.labelled_positions(labels)
    assert torch.equal(targets, labels[labels != -100])
    for model, kwargs in ((gmlp, {"sparse_prediction": True}), (bert, {}), (modern, {})):
        model.train()
        expected = model(input_ids=input_ids, labels=labels, **kwargs).loss
        torch.testing.assert_close(models.labelled_loss(model, input_ids, index, targets), expected)


def test_modernbert_of_equal_parameters_has_global_attention_everywhere():
    like = {**TINY, "max_position_embeddings": 128}
    config = modernbert_config(like, 500_000)
    assert config.layer_types == ["full_attention"] * TINY["num_hidden_layers"]
    per_width = 3 * TINY["hidden_size"] * TINY["num_hidden_layers"]  # GeGLU: 2 d in, d out per unit of width
    assert abs(AutoModelForMaskedLM.from_config(config).num_parameters() - 500_000) <= per_width
    assert isinstance(bert_config(like, 500_000), BertConfig)


def test_datasheet_peaks_by_device_name():
    assert gpu.datasheet_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu.datasheet_peak("NVIDIA H100 PCIe") == 756e12
    assert gpu.datasheet_peak("NVIDIA H200 NVL") == 835e12
    assert gpu.datasheet_peak("cpu") is None


def stage(tmp_path, name="step", kernels=("triton", "torch"), device_name=None) -> gpu_stages.Stage:
    found = gpu_stages.Stage(name, "cpu", tmp_path, "tiny", list(kernels))
    found.device_name = device_name or found.device_name
    return found


def test_rows_are_paired_by_round_and_saved_after_each(tmp_path, monkeypatch):
    """Each round's times extend the rows, which go to `save` after every round; a ratio is the median of the
    per-round ratios of tokens/s, tokens/s the tokens over the median time."""
    names = ["gmlp (torch)", gpu.REFERENCE]
    bench = stage(tmp_path).bench(gpu_parts.build("tiny", "cpu", names))
    rounds = iter([{"gmlp (torch)": [2.0], gpu.REFERENCE: [1.0]}, {"gmlp (torch)": [1.0], gpu.REFERENCE: [4.0]}] * 2)
    monkeypatch.setattr(gpu_parts, "interleaved", lambda steps, *args, **kwargs: next(rounds))
    saved = []
    rows = gpu_parts.time_group(bench, "inference", dict.fromkeys(names, "eager"), save=saved.append)
    assert [[row["times"] for row in rows] for rows in saved] == [[[2.0], [1.0]], [[2.0, 1.0], [1.0, 4.0]]] + [
        [[2.0, 1.0, 2.0], [1.0, 4.0, 1.0]]
    ]
    tokens = bench.batch * bench.length
    assert rows[0]["tokens_per_second"] == tokens / 2.0 and rows[1]["tokens_per_second"] == tokens / 1.0
    assert rows[0]["versus"] == {gpu.REFERENCE: pytest.approx(0.5)}  # median of 0.5, 4 and 0.5
    assert rows[1]["versus"] == {"gmlp (torch)": pytest.approx(2.0)}


def test_mfu_is_against_the_datasheet_peak_with_the_measured_one_beside(tmp_path, monkeypatch):
    """MFU's denominator is the datasheet's dense bf16 peak of the device named (989 TFLOP/s for an H100 SXM), fixed;
    the matmul ceiling measured in the stage gives the second figure."""
    bench = stage(tmp_path, device_name="NVIDIA H100 80GB HBM3").bench(
        gpu_parts.build("tiny", "cpu", ["gmlp (torch)"]), peak=790e12
    )
    assert (bench.datasheet, bench.peak) == (989e12, 790e12)
    monkeypatch.setattr(gpu_parts, "interleaved", lambda steps, *args, **kwargs: {key: [0.5] for key in steps})
    (row,) = gpu_parts.time_group(bench, "training", {"gmlp (torch)": "eager"})
    flops = row["tflops"] * 1e12
    assert row["mfu_datasheet_peak"] == pytest.approx(flops / 989e12)
    assert row["mfu_measured_peak"] == pytest.approx(flops / 790e12)


def test_the_preflight_refuses_what_the_run_cannot_use(tmp_path):
    """A pinned wheel not the one imported, and (in the same stage) the units' tiny steps where all is in place."""
    with pytest.raises(RuntimeError, match=r"transformers \S+ is imported where the wheel list pins 0\.1: install"):
        gpu_stages.main(["preflight", "--device", "cpu", "--out", str(tmp_path), "--pins", "transformers==0.1"])
    gpu_stages.main(["preflight", "--device", "cpu", "--out", str(tmp_path), "--kernels", "torch,triton"])
    record = json.loads((tmp_path / "preflight.json").read_text())
    assert record["errors"] == {} and set(record["losses"]) == {"torch", "triton"}
    assert record["losses"]["triton"] == pytest.approx(record["losses"]["torch"], rel=2e-2)


def test_bad_stage_arguments_are_one_error_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        gpu_stages.main(["unit", "--device", "cpu", "--out", str(tmp_path), "--kernels", "fused"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "python -m benchmarks.speed.gpu_stages: error: --kernels 'fused': give some of triton, torch, comma-separated"
    )


def test_the_hybrid_is_within_a_small_multiple_of_the_pytorch_units_own_error(tmp_path):
    """The unit stage's check: the hybrid's output and every gradient in bf16 (under Triton's interpreter here)
    against float64, within TOLERANCE_FACTOR x the PyTorch bf16 unit's largest error; a wrong W is caught."""
    run = stage(tmp_path, "unit")
    expected = gpu_stages.Unit(run, "torch", False).float64()
    baseline = gpu_stages.relative_errors(gpu_stages.Unit(run, "torch", True).training, expected)
    hybrid = gpu_stages.relative_errors(gpu_stages.Unit(run, "triton", True).training, expected)
    assert len(baseline) == len(hybrid) == 6 and 0 < max(baseline.values()) < 5e-2
    assert all(error <= gpu_stages.TOLERANCE_FACTOR * max(baseline.values()) for error in hybrid.values()), hybrid
    wrong = gpu_stages.Unit(run, "triton", True)
    with torch.no_grad():
        wrong.module.spatial_proj.weight.mul_(1.2)
    errors = gpu_stages.relative_errors(wrong.inference, expected)
    assert errors["output"] > gpu_stages.TOLERANCE_FACTOR * max(baseline.values())


def test_a_wrong_hybrid_is_not_timed(tmp_path, monkeypatch):
    """Its errors recorded and `hybrid_correct` false (the GPU run then leaves it out of the later stages); the
    PyTorch units timed in training and inference, eager and compiled, and profiled; each unit's own bytes beside."""
    original = gpu_stages.relative_errors

    def errors(case, expected):
        found = original(case, expected)
        return {name: 0.5 for name in found} if "triton" in case.__self__.module.kernel_choice else found

    monkeypatch.setattr(gpu_stages, "relative_errors", errors)
    gpu_stages.main(["unit", "--device", "cpu", "--out", str(tmp_path)])
    unit = json.loads((tmp_path / "unit.json").read_text())
    assert unit["errors"] == {} and unit["check"]["hybrid_correct"] is False
    assert unit["check"]["tolerance"] == gpu_stages.TOLERANCE_FACTOR * unit["check"]["baseline"] < 0.5
    trained = {(row["model"], row["mode"]) for row in unit["gpu"]["training"]}
    assert trained == {
        (model, mode) for model in ("gmlp (torch)", f"gmlp (torch){gpu.KEPT}") for mode in ("eager", "compiled")
    }
    assert {(row["model"], row["mode"]) for row in unit["gpu"]["inference"]} == {
        ("gmlp (torch)", "eager"),
        ("gmlp (torch)", "compiled"),
    }
    assert set(unit["kernels"]) == {"gmlp (torch) compiled", f"gmlp (torch){gpu.KEPT} compiled"}
    assert all(row["max_error"] == max(row["errors"].values()) > 0 for row in unit["gpu"]["training"])
    # Each unit's bytes outside the products: PyTorch's least, 5 gate widths a token forward and 9 backward; the
    # hybrid's kernels also write and read `mixed` and sum dM for db: 6 and 11 (bf16, 2 bytes a number).
    shape = unit["shape"]
    widths = 2 * shape["batch"] * shape["length"] * shape["gate"]
    assert unit["row_bytes"] == {
        "torch": {"forward": 5 * widths, "backward": 9 * widths},
        "triton": {"forward": 6 * widths, "backward": 11 * widths},
    }


def test_the_hybrid_runs_eager_where_it_does_not_compile(tmp_path, monkeypatch):
    """A compiled hybrid that fails is timed eager, its error recorded; PyTorch's unit and the other models compile."""
    run = stage(tmp_path)
    bench = run.bench(gpu_parts.build("tiny", "cpu", ["gmlp (triton)", "gmlp (torch)"]))

    def compile(forward, **options):  # a compiler that fails on the hybrid's blocks
        def compiled(*args, **kwargs):
            if forward.__self__.sgu.kernel_choice == "triton":
                raise RuntimeError("planted compile failure")
            return forward(*args, **kwargs)

        return compiled

    monkeypatch.setattr(torch, "compile", compile)
    assert gpu_stages.compiled_or_eager(run, bench, "gmlp (triton)", "training") == "eager"
    assert run.result["errors"] == {"gmlp (triton) training compiled": "RuntimeError: planted compile failure"}
    assert gpu_stages.compiled_or_eager(run, bench, "gmlp (torch)", "training") == "compiled"


def test_the_gating_units_share_is_the_units_time_over_the_steps(tmp_path):
    run = stage(tmp_path)
    bench = run.bench(gpu_parts.build("tiny", "cpu", ["gmlp (torch)"]))
    rows = [
        {"model": "gmlp (torch)", "mode": "compiled", "ms": 2.0},
        {"model": "gmlp (torch)", "mode": "eager", "ms": 9.0},
    ]
    step_row = {"model": "gmlp (torch)", "mode": "compiled", "tokens_per_second": bench.batch * bench.length / 0.1}
    assert gpu_stages.unit_share(run, bench, step_row) is None  # no unit record
    (tmp_path / "unit.json").write_text(json.dumps({"gpu": {"training": rows}}))
    layers = bench.models["gmlp (torch)"].config.num_hidden_layers
    assert gpu_stages.unit_share(run, bench, step_row) == pytest.approx(layers * 2e-3 / 0.1)


def test_the_long_stage_times_the_hybrids_direct_product_in_a_group_of_its_own(tmp_path, monkeypatch):
    """Where the step found the hybrid faster, the long stage times it beside BERT with the FFT's length beyond the
    input's (the hybrid covers the direct product only), after the PyTorch unit's group (the FFT product); a group that
    fails (planted: the hybrid at 128 tokens) leaves the other's rows."""
    timed = []

    def time_group(bench, task, modes, save=None):
        if "gmlp (triton)" in modes and bench.length == 128:
            raise torch.OutOfMemoryError("planted")
        fft = {name: getattr(bench.models[name].config, "spatial_fft_min_length", None) for name in modes}
        timed.append((bench.length, task, fft))
        save(rows := [{"model": name} for name in modes])
        return rows

    monkeypatch.setattr(gpu_parts, "time_group", time_group)
    gpu_stages.main(["long", "--device", "cpu", "--out", str(tmp_path), "--kernels", "triton,torch"])
    torch_fft, hybrid_direct = {"gmlp (torch)": 64, gpu.REFERENCE: None}, {"gmlp (triton)": 128, gpu.REFERENCE: None}
    assert timed == [
        (64, "training", torch_fft), (64, "inference", torch_fft),
        (64, "training", hybrid_direct), (64, "inference", hybrid_direct),
        (128, "training", torch_fft), (128, "inference", torch_fft),
    ]  # fmt: skip
    long = json.loads((tmp_path / "long.json").read_text())
    assert long["faster_unit"] == "triton" and list(long["gpu"]["128"]["gmlp (torch)"]["training"][0]) == ["model"]
    assert set(long["errors"]) == {"gmlp (triton) training 128", "gmlp (triton) inference 128"}


def test_a_failing_measurement_is_recorded_and_its_stage_goes_on(tmp_path):
    run = stage(tmp_path, "unit")
    assert run.attempt("planted", lambda: 1 / 0) is None
    assert run.attempt("next", lambda: 2) == 2
    assert json.loads((tmp_path / "unit.json").read_text())["errors"] == {
        "planted": "ZeroDivisionError: division by zero"
    }


def test_the_targets_are_read_off_the_rows():
    """Each gMLP kernel's rows against the goals of the records' day; the kept-activations row against its memory-lean
    model; the default spatial path against the fastest at 4,096 tokens."""

    def row(model, mode, versus, mfu=0.3):
        return {"model": model, "precision": "bf16", "mode": mode, "versus": versus, "mfu_measured_peak": mfu}

    kept = f"gmlp (triton){gpu.KEPT}"
    result = {
        "models": dict.fromkeys(["gmlp (triton)", "gmlp (torch)", kept, gpu.REFERENCE, gpu.MODERN]),
        "training": [
            row("gmlp (triton)", "compiled", {gpu.REFERENCE: 1.25, gpu.MODERN: 1.05}, mfu=0.43),
            row("gmlp (torch)", "eager", {gpu.REFERENCE: 0.84, gpu.MODERN: 1.29}),
            row(kept, "compiled", {"gmlp (triton)": 1.04, gpu.REFERENCE: 1.3}),
        ],
        "inference": [row("gmlp (triton)", "compiled", {gpu.REFERENCE: 1.02})],
        "fft": {"lengths": {"4096": {"spatial_projection_ms": {"Toeplitz FFT": 2.9, "Toeplitz default": 2.0}}}},
    }
    cells = {line.split("|")[1].strip(): line.split("|")[2:4] for line in gpu.targets(result)[2:-1]}
    assert [(value.strip(), goal.strip()) for value, goal in cells.values()] == [
        ("1.25x", "1.20x"), ("1.05x", "1.00x"), ("43%", "42%"),
        ("1.02x", "1.00x"),
        ("0.84x", "1.20x"), ("1.29x", "–"), ("30%", "–"),
        ("1.04x", "≤ 1.05x"),
        ("1.00x", "1.00x"),
    ]  # fmt: skip
    assert next(iter(cells)) == "gmlp (triton) training vs BERT (sdpa), compiled, paired"


def test_the_runs_targets_are_issue_61s_goals_read_off_its_stage_records(tmp_path, monkeypatch):
    """Each gMLP row of the step (training against BERT and ModernBERT with its datasheet MFU, inference against BERT),
    the kept-activations unit against the memory-lean one, and gMLP at 16,384 tokens against BERT, each against its
    goal, with whether it is met; the other models' rows, the lean unit's own and shorter long inputs left out; and a
    docs marker on gpu_run.json's targets renders them."""

    def row(model, mode, versus, **more):
        return {"model": model, "mode": mode, "versus": versus} | more

    step = {
        "training": [
            row("gmlp (torch)", "compiled", {gpu.REFERENCE: 1.31, gpu.MODERN: 1.1}, mfu_datasheet_peak=0.36),
            row("gmlp (triton)", "eager", {gpu.REFERENCE: 1.2}, mfu_datasheet_peak=None),
            row(gpu.REFERENCE, "compiled", {"gmlp (torch)": 0.76}, mfu_datasheet_peak=0.5),
        ],
        "inference": [row("gmlp (torch)", "compiled", {gpu.REFERENCE: 1.05})],
    }
    unit = [row("gmlp (torch)", "compiled", {}, versus_torch=1.0)]
    unit.append(row(f"gmlp (torch){gpu.KEPT}", "compiled", {}, versus_torch=1.02))
    long = {
        length: {"gmlp (torch)": {"training": [row("gmlp (torch)", "eager", {gpu.REFERENCE: speedup})]}}
        for length, speedup in (("8192", 1.7), ("16384", 1.4))
    }
    rows = gpu.run_targets({"step": {"gpu": step}, "unit": {"gpu": {"training": unit}}, "long": {"gpu": long}})
    assert rows == [
        ["gmlp (torch) training vs BERT (sdpa), compiled", "1.31x", "≥ 1.30x", "yes"],
        ["gmlp (torch) training vs ModernBERT (sdpa), compiled", "1.10x", "≥ 1.15x", "no"],
        ["gmlp (torch) training MFU, compiled (datasheet peak)", "36%", "≥ 35%", "yes"],
        ["gmlp (triton) training vs BERT (sdpa), eager", "1.20x", "≥ 1.30x", "no"],
        ["gmlp (triton) training vs ModernBERT (sdpa), eager", "–", "≥ 1.15x", "–"],
        ["gmlp (triton) training MFU, eager (datasheet peak)", "–", "≥ 35%", "–"],
        ["gmlp (torch) inference vs BERT (sdpa), compiled", "1.05x", "≥ 1.10x", "no"],
        [f"gmlp (torch){gpu.KEPT} vs the memory-lean default, the unit alone, training compiled", "1.02x", "≤ 1.03x",
         "yes"],
        ["gmlp (torch) training at 16,384 tokens vs BERT (sdpa), eager", "1.40x", "≥ 1.50x", "no"],
    ]  # fmt: skip
    assert gpu.run_targets({}) == []
    (tmp_path / "gpu_run_2027-01-02.json").write_text(json.dumps({"targets": rows}))
    monkeypatch.setattr(speed_main, "RESULTS_DIR", tmp_path)
    page = "<!-- table gpu_run_2027-01-02.json targets.table -->\nold\n<!-- end table -->\n"
    lines = speed_main.docs(page).splitlines()
    assert [cell.strip() for cell in lines[1].split("|")[1:-1]] == ["target (bf16)", "measured", "goal", "met"]
    assert len(lines) == 1 + 2 + len(rows) + 2 and lines[-1] == "<!-- end table -->"
    assert [line.split("|")[4].strip() for line in lines[3:-2]] == [found[3] for found in rows]
