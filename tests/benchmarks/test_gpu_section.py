"""The speed benchmark's gpu section and the GPU run's stages on the CPU (benchmarks/speed/gpu.py, gpu_parts.py and
gpu_stages.py), at tiny sizes: its losses and baselines compute what they claim, ratios are of tokens/s, MFU is against
the datasheet's peak, a failing part or measurement is recorded and the next one runs, the Triton unit is checked
before it is timed, and the targets are read off the rows."""

import json

import pytest
import torch
from transformers import AutoModelForMaskedLM, BertConfig

from benchmarks.common import bert_config, mlm_batch, modernbert_config
from benchmarks.speed import __main__ as cli
from benchmarks.speed import gpu, gpu_parts, gpu_stages, models
from gmlp import GMLPConfig
from gmlp.configuration_gmlp import PRESETS

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


def test_the_stock_shapes_are_bert_base_and_modernbert_base():
    """At base size the stock rows are the configs users load: bert-base-uncased's 110M and ModernBERT-base's 149M."""
    with torch.device("meta"):
        bert = AutoModelForMaskedLM.from_config(BertConfig(**gpu_parts.SIZES["base"]["stock"]))
    assert (bert.config.num_hidden_layers, bert.config.hidden_size) == (12, 768)
    assert round(bert.num_parameters() / 1e6) == 110


def test_datasheet_peaks_by_device_name():
    assert gpu.datasheet_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu.datasheet_peak("NVIDIA H100 PCIe") == 756e12
    assert gpu.datasheet_peak("NVIDIA H200 NVL") == 835e12
    assert gpu.datasheet_peak("cpu") is None


@pytest.fixture
def tiny_section(monkeypatch):
    """The gpu section's models at TINY sizes (n = 16) and a fixed matmul peak: the logic, not the sizes, is under
    test here."""
    monkeypatch.setitem(PRESETS, "gmlp-tiny", {**TINY, "max_position_embeddings": 16})
    monkeypatch.setitem(gpu_parts.SIZES, "tiny", gpu_parts.SIZES["tiny"] | {"fft_lengths": (16, 32)})
    monkeypatch.setattr(gpu, "matmul_peak_flops", lambda *args, **kwargs: 1e11)
    monkeypatch.setattr(cli, "matmul_peak_flops", lambda *args, **kwargs: 1e11)


def run_section(output, *parts, kernels="torch", extra=()):
    # One thread: tiny steps on two busy threads spend most of their time in OpenMP's waits.
    argv = ["--sections", "gpu", "--quick", "--threads", "1", "--gpu-kernels", kernels]
    cli.main([*argv, "--gpu-parts", ",".join(parts), "--output", str(output), *extra])
    return json.loads(output.read_text())["gpu"]


def test_a_failing_part_is_recorded_and_the_next_part_runs(tmp_path, monkeypatch, tiny_section):
    """The training part fails (planted), inference still runs, every model at the fixed batch."""
    parts = ("training-bf16-eager", "inference-bf16-eager")
    original = gpu_parts.time_group

    def failing_training(bench, task, *args, **kwargs):
        if task == "training":
            raise RuntimeError("planted failure")
        return original(bench, task, *args, **kwargs)

    monkeypatch.setattr(gpu_parts, "time_group", failing_training)
    first = run_section(tmp_path / "first.json", *parts)
    assert first["errors"] == {"training-bf16-eager": "RuntimeError: planted failure"}
    assert set(first["part_seconds"]) == {"inference-bf16-eager"}
    assert [(row["model"], row["batch"]) for row in first["inference"]] == [
        (name, gpu_parts.BATCH["tiny"])
        for name in ("gmlp (torch)", gpu.REFERENCE, gpu.MODERN, gpu.BERT_BASE, gpu.MODERN_BASE)
    ]


def test_ratios_are_of_tokens_per_second_when_the_batches_differ(monkeypatch, tiny_section):
    """Each model runs at its own batch: a model whose steps take twice as long at twice the batch is as fast (on an
    H200 the step-time ratio reported gMLP at 0.55x BERT for 0.84x its tokens/s)."""
    names = ["gmlp (torch)", gpu.REFERENCE]
    bench = gpu_parts.Bench(torch.device("cpu"), gpu_parts.build("tiny", "cpu", names), 16, 1e11, None, 3, 0.0, {})
    bench.batches["bf16"] = {"gmlp (torch)": 4, gpu.REFERENCE: 2}
    planted = {"gmlp (torch)": [2.0, 2.2, 1.8], gpu.REFERENCE: [1.0, 1.1, 0.9]}
    monkeypatch.setattr(gpu_parts, "interleaved", lambda steps, *args, **kwargs: {n: planted[n] for n in steps})
    rows = gpu_parts.time_group(bench, "inference", "bf16", dict.fromkeys(names, "eager")).rows
    assert rows[0]["versus"] == {gpu.REFERENCE: pytest.approx(1.0)} and rows[0]["tokens_per_second"] == 4 * 16 / 2.0
    assert rows[1]["versus"] == {"gmlp (torch)": pytest.approx(1.0)}


def test_mfu_is_against_the_datasheet_peak_with_the_measured_ceiling_beside(tmp_path, monkeypatch, tiny_section):
    """MFU's denominator is the datasheet's dense bf16 peak of the device named (989 TFLOP/s for an H100 SXM), fixed;
    the matmul ceiling the ceilings stage measured (ceilings.json) gives the second figure."""
    stage = gpu_stages.Stage("step", "cpu", tmp_path, "tiny", ["torch"])
    stage.device_name = "NVIDIA H100 80GB HBM3"
    assert stage.denominators() == (989e12, None)
    (tmp_path / "ceilings.json").write_text(json.dumps({"matmul_tflops_bf16": 790.0}))
    datasheet, measured = stage.denominators()
    assert (datasheet, measured) == (989e12, 790e12)
    models_ = gpu_parts.build("tiny", torch.device("cpu"), ["gmlp (torch)"])
    bench = gpu_parts.Bench(
        torch.device("cpu"), models_, 16, measured, datasheet, 3, 0.0, {"bf16": {"gmlp (torch)": 2}}
    )
    bench.optimizers = {"gmlp (torch)": gpu_parts.make_optimizer(models_["gmlp (torch)"], torch.device("cpu"))}
    monkeypatch.setattr(
        gpu_parts, "interleaved", lambda steps, *args, **kwargs: {key: [0.5, 0.4, 0.6] for key in steps}
    )
    (row,) = gpu_parts.time_group(bench, "training", "bf16", {"gmlp (torch)": "eager"}).rows
    flops = row["tflops"] * 1e12
    assert row["mfu_datasheet_peak"] == pytest.approx(flops / 989e12) and row["mfu_measured_peak"] == pytest.approx(
        flops / 790e12
    )
    assert row["tokens_per_second"] == 2 * 16 / 0.5  # the median round


def test_parts_that_would_end_after_the_deadline_are_left_for_later(tmp_path, tiny_section):
    result = run_section(tmp_path / "late.json", "inference-bf16-eager", "fft-crossover", extra=["--deadline-at", "1"])
    assert result["not_run"] == ["inference-bf16-eager", "fft-crossover"] and result["part_seconds"] == {}
    assert "Not run before the deadline: inference-bf16-eager, fft-crossover." in gpu.render(result)["not_run"]


def test_the_crossover_part_measures_the_default_path_beside_the_others(tmp_path, tiny_section):
    result = run_section(tmp_path / "fft.json", "fft-crossover")
    lengths = result["fft"]["lengths"]
    assert list(lengths) == ["16", "32"] and result["fft"]["crossover_length"] in (16, 32, None)
    paths = {"dense W", "Toeplitz direct", "Toeplitz FFT", "Toeplitz default"}
    assert set(lengths["32"]["spatial_projection_ms"]) == paths
    assert "`crossover_length`" in "\n".join(gpu.render(result)["fft"])


def test_the_targets_are_read_off_the_rows():
    """Each gMLP kernel's rows against the issue's goals; the kept-activations row against its memory-lean model; the
    default spatial path against the fastest at 4,096 tokens."""

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


def test_a_failing_measurement_is_recorded_and_its_stage_goes_on(tmp_path):
    stage = gpu_stages.Stage("unit", "cpu", tmp_path, "tiny", ["torch"])
    assert stage.attempt("planted", lambda: 1 / 0) is None
    assert stage.attempt("next", lambda: 2) == 2
    assert json.loads((tmp_path / "unit.json").read_text())["errors"] == {
        "planted": "ZeroDivisionError: division by zero"
    }


def test_the_units_compute_the_same_function_as_float64(tmp_path):
    """The unit stage's check: each unit's output and every gradient in bf16 against the PyTorch unit in float64, the
    Triton unit (under Triton's interpreter here) within the bf16 tolerance."""
    stage = gpu_stages.Stage("unit", "cpu", tmp_path, "tiny", ["triton", "torch"])
    for kernel, recompute in (("torch", True), ("triton", True)):
        errors = gpu_stages.relative_errors(
            gpu_stages.Unit(stage, kernel, recompute), gpu_stages.Unit(stage, "torch", False)
        )
        assert len(errors) == 6 and all(0 < error <= gpu_stages.BF16_TOLERANCE for error in errors.values()), errors


def test_a_wrong_triton_unit_is_not_timed(tmp_path, monkeypatch):
    """Its errors recorded, `triton_correct` false (the GPU run then leaves it out of the later stages), the PyTorch
    units timed and profiled; the least bytes and the products' FLOPs beside."""
    monkeypatch.setattr(gpu_stages, "relative_errors", lambda unit, reference: {"output": 0.5})
    gpu_stages.main(["unit", "--device", "cpu", "--out", str(tmp_path), "--kernels", "triton,torch"])
    unit = json.loads((tmp_path / "unit.json").read_text())
    assert unit["errors"] == {} and unit["triton_errors"] == {"output": 0.5} and unit["triton_correct"] is False
    assert set(unit["cases"]) == set(unit["kernels"]) == {"torch (recompute)", "torch (kept)"}
    assert set(unit["products"]) == {"W @ v (bmm)", "W^T @ dM (bmm)", "dW = dM v^T (mm)"}
    shape = unit["shape"]
    tokens = shape["batch"] * shape["length"]
    assert unit["row_bytes"] == {"forward": 2 * 5 * tokens * shape["gate"], "backward": 2 * 9 * tokens * shape["gate"]}
    assert unit["product_flops"] == 2 * tokens * shape["length"] * shape["gate"]


def test_inductors_bandwidth_lines_are_parsed():
    from torch._inductor.runtime.runtime_utils import create_bandwidth_info_str

    line = create_bandwidth_info_str(
        0.25, 0.5, 2000.0, suffix=" \t 40.00% \t triton_red_fused_gelu_native_layer_norm_0", color=False
    )
    assert gpu_stages.BANDWIDTH_LINE.findall(line) == [
        ("0.250", "0.500", "2000.00", "40.00", "triton_red_fused_gelu_native_layer_norm_0")
    ]
