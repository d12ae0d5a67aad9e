"""The GPU run's logic on the CPU (benchmarks/gpu_run.py and the speed benchmark's gpu section), with stand-in parts
where the real ones take minutes: a part's time limit keeps what its process printed, a failing part is recorded and
the run goes on, the wheels install without pip, the benchmark's losses and baselines compute what they claim, and a
resumed run takes the earlier run's batches and does only what it lacks."""

import json
import re
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM, BertConfig

from benchmarks import gpu_run
from benchmarks.common import bert_config, mlm_batch
from benchmarks.speed import __main__ as cli
from benchmarks.speed import gpu, models, scaling

ROOT = Path(__file__).resolve().parent.parent
TINY = {"vocab_size": 97, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2}


# ---- the driver: parts, time limits, the record ------------------------------------------------------------------
def python(script: str) -> list[str]:
    return [sys.executable, "-u", "-c", script]


def test_a_part_stopped_at_its_limit_keeps_its_output_and_the_stage_goes_on(tmp_path):
    stage = gpu_run.Stage("A", tmp_path, {"slow": 6, "next": 15})
    # As pytest does: on SIGINT, print the summary of what ran, then exit.
    slow = "import time\nprint('1 failed, 2 passed so far')\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
    slow += "    print('FAILED tests/x.py::test_y - planted')\n    print('1 failed, 2 passed in 5.0s')\n"
    run = stage.run("slow", python(slow), env=None)
    assert run["outcome"] == "timed out (SIGINT)" and run["returncode"] == 124
    assert pytest_summary_of(tmp_path / "slow.log") == (
        "1 failed, 2 passed in 5.0s",
        ["FAILED tests/x.py::test_y - planted"],
    )
    failing = stage.run("next", python("raise SystemExit('planted error')"), env=None)
    assert failing["outcome"] == "failed (1)" and "planted error" in failing["log_tail"][-1]
    raising = stage.run("next", python("raise ValueError('planted')"), env=None)
    assert raising["last_error"] == "ValueError: planted"
    record = json.loads((tmp_path / "stage_A.json").read_text())
    assert list(record["parts"]) == ["slow", "next"] and record["budget_seconds"] == 21


def pytest_summary_of(log: Path) -> tuple:
    summary = gpu_run.pytest_summary(log)
    return summary["summary"], summary["failed"]


def test_a_part_gets_the_time_its_later_parts_leave(tmp_path, monkeypatch):
    stage = gpu_run.Stage("B", tmp_path, {"first": 30, "second": 20, "third": 10})
    assert stage.seconds_for("first") == pytest.approx(30, abs=1)
    monkeypatch.setattr(gpu_run.time, "monotonic", lambda: stage.end - 25)  # "first" took 35 s: "second" gets 15
    assert stage.seconds_for("second") == pytest.approx(15)
    assert stage.run("third", python("pass"), env=None, seconds=60)["seconds_allowed"] == 25
    monkeypatch.setattr(gpu_run.time, "monotonic", lambda: stage.end - 2)
    assert stage.run("third", python("pass"), env=None)["outcome"] == "not run: no time left in the stage"


def test_pytest_summary_reads_the_closing_line_with_or_without_rules(tmp_path):
    log = tmp_path / "tests.log"
    log.write_text("..F.\nFAILED a.py::b - x\nERROR c.py::d\n==== 3 failed, 900 passed, 12 skipped in 61.2s ====\n")
    assert gpu_run.pytest_summary(log) == {
        "summary": "3 failed, 900 passed, 12 skipped in 61.2s",
        "failed": ["FAILED a.py::b - x", "ERROR c.py::d"],
        "failed_count": 2,
    }
    assert gpu_run.pytest_summary(tmp_path / "missing.log")["summary"] is None
    # Stopped in its teardown, before the summary: the per-test lines of -v (with and without xdist) are counted.
    log.write_text(
        "[gw0] [ 50%] PASSED tests/a.py::test_b \n[gw1] [100%] FAILED tests/a.py::test_c[x] \n"
        "tests/d.py::test_e SKIPPED (no GPU)   [100%]\nKeyboardInterrupt\n"
    )
    assert gpu_run.pytest_summary(log) == {
        "summary": None,
        "counted": {"failed": 1, "passed": 1, "skipped": 1},
        "failed": ["[gw1] [100%] FAILED tests/a.py::test_c[x] "],
        "failed_count": 1,
    }


def test_wheels_unpack_where_the_image_has_no_pip(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "tiny-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("tiny/__init__.py", "VALUE = 7\n")
        wheel.writestr("tiny-1.0.dist-info/METADATA", "Name: tiny\nVersion: 1.0\n")
        wheel.writestr("tiny-1.0.data/purelib/tiny_extra.py", "")
        wheel.writestr("tiny-1.0.data/scripts/tiny-tool", "#!/bin/sh\n")
    site = tmp_path / "site"
    installed = gpu_run.install_wheels(wheels, site, "false")  # `false -m pip --version` fails, as without pip
    assert installed["how"].startswith("unpacked")
    assert (site / "tiny" / "__init__.py").read_text() == "VALUE = 7\n"
    assert (site / "tiny_extra.py").is_file() and (site / "tiny-1.0.dist-info" / "METADATA").is_file()
    assert not any(path.name == "tiny-tool" for path in site.rglob("*"))
    assert gpu_run.install_wheels(wheels, site, "false")["how"] == f"already in {site}"


def test_stage_b_and_c_commands(tmp_path, monkeypatch):
    """Stage B's benchmark ends inside the stage (its deadline, then SIGINT); C resumes B's file; without a C
    compiler nothing is compiled."""
    commands = []

    def run(self, part, argv, env, seconds=None):
        commands.append(argv)
        self.record["parts"][part] = {"runs": []}

    monkeypatch.setattr(gpu_run.Stage, "run", run)
    resume = tmp_path / "speed_gpu.json"
    resume.write_text("{}")
    for name in ("B", "C"):
        args = gpu_run.parse_args([name, "--out", str(tmp_path), "--resume", str(resume)])
        stage = gpu_run.Stage(name, tmp_path, gpu_run.BUDGETS[name])
        gpu_run.stage_b(stage, args, {}, {"c_compiler": "cc", "python_h": "Python.h"})
    gpu_run.stage_b(stage, args, {}, {"c_compiler": None, "python_h": "Python.h"})
    b, c, no_compiler = commands
    deadline = float(b[b.index("--deadline") + 1])
    assert gpu_run.BUDGETS["B"]["speed_gpu"] - 2 * gpu_run.GRACE - 1 <= deadline < gpu_run.BUDGETS["B"]["speed_gpu"]
    assert "--gpu-resume" not in b and c[c.index("--gpu-resume") + 1] == str(resume)
    assert "--no-gpu-compile" in no_compiler and "--no-gpu-compile" not in b


def test_stage_a_runs_the_parts_asked_for_within_the_budget_asked_for(tmp_path, monkeypatch):
    """A window that ran the fp32 tests and stage B runs the rest of A next time: `--parts` leaves the others out
    (no pytest command), the tokenizer is made for the first script part, and `--budget` scales every part but the
    preflight (which on an H200 needed 15-40 s)."""
    commands = []

    def run(self, part, argv, env, seconds=None):
        commands.append((part, argv))
        self.record["parts"].setdefault(part, {"runs": []})
        return {"returncode": 1}

    monkeypatch.setattr(gpu_run.Stage, "run", run)
    args = gpu_run.parse_args(["A", "--out", str(tmp_path), "--work", str(tmp_path / "work"), "--size", "tiny"])
    args.parts = ["fsdp", "mlm"]
    budgets = gpu_run.stage_budgets(args)
    assert list(budgets) == ["preflight", "fsdp", "mlm"]
    gpu_run.stage_a(gpu_run.Stage("A", tmp_path, budgets), args, {}, {})
    assert [part for part, _ in commands] == ["fsdp", "fsdp", "mlm"]  # the tokenizer, then the first FSDP run
    assert "torch.distributed.run" in commands[1][1] and "run_mlm.py" in commands[2][1]

    args.budget = 200.0
    scaled = gpu_run.stage_budgets(args)
    assert scaled["preflight"] == gpu_run.BUDGETS["A"]["preflight"] and sum(scaled.values()) == pytest.approx(200)
    with pytest.raises(SystemExit, match="no part"):
        gpu_run.stage_budgets(gpu_run.parse_args(["A", "--parts", "tests_fp32,glu"]))


def test_the_run_uses_the_readme_fsdp_settings_and_existing_test_modules():
    readme = (ROOT / "README.md").read_text()
    assert json.loads(re.search(r"--fsdp --fsdp_config '(\{.*\})'", readme).group(1)) == json.loads(
        gpu_run.FSDP_CONFIG
    )
    assert all((ROOT / module).is_file() for module in gpu_run.DEVICE_TESTS)
    listed = [line for line in gpu_run.WHEEL_LIST.read_text().splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[\w-]+==[\w.]+", line) for line in listed) and len(listed) == len(set(listed))


# ---- the benchmark's pieces --------------------------------------------------------------------------------------
def test_labelled_loss_is_each_models_masked_lm_loss():
    """The benchmark's loss (indices found once per batch, no boolean mask in the step) is the models' own MLM loss:
    gMLP's with sparse_prediction, BERT's and ModernBERT's with their full logits."""
    from gmlp import GMLPConfig

    like = {**TINY, "max_position_embeddings": 16}
    gmlp = AutoModelForMaskedLM.from_config(GMLPConfig(**like, hidden_dropout_prob=0.0))
    target = gmlp.num_parameters()
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    bert = AutoModelForMaskedLM.from_config(bert_config(like, target, head_size=32, **no_dropout))
    modern = AutoModelForMaskedLM.from_config(models.modernbert_config(like, target, head_size=32))
    input_ids, labels = mlm_batch(3, 16, 97, mask_probability=0.3)
    index, targets = models.labelled_positions(labels)
    assert torch.equal(targets, labels[labels != -100])
    for model, kwargs in ((gmlp, {"sparse_prediction": True}), (bert, {}), (modern, {})):
        model.train()
        expected = model(input_ids=input_ids, labels=labels, **kwargs).loss
        torch.testing.assert_close(models.labelled_loss(model, input_ids, index, targets), expected)


def test_modernbert_of_equal_parameters_has_global_attention_everywhere():
    like = {**TINY, "max_position_embeddings": 128}
    config = models.modernbert_config(like, 500_000)
    assert config.layer_types == ["full_attention"] * TINY["num_hidden_layers"]
    per_width = 3 * TINY["hidden_size"] * TINY["num_hidden_layers"]  # GeGLU: 2 d in, d out per unit of width
    assert abs(AutoModelForMaskedLM.from_config(config).num_parameters() - 500_000) <= per_width
    assert isinstance(bert_config(like, 500_000), BertConfig)


def test_plain_toeplitz_matrix_is_the_models_w():
    shape = {**TINY, "max_position_embeddings": 32}
    module = scaling.spatial_projection(32, shape)
    torch.testing.assert_close(scaling.toeplitz_matrix(module.weight, 32), module.matrix(32))
    gate = torch.randn(2, 32, TINY["intermediate_size"] // 2, requires_grad=True)
    for step in scaling.plain_spatial_steps(module, gate, "fp32", "cpu").values():
        step()
    assert gate.grad is not None


def test_datasheet_peaks_by_device_name():
    assert gpu.datasheet_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu.datasheet_peak("NVIDIA H100 PCIe") == 756e12
    assert gpu.datasheet_peak("NVIDIA H200 NVL") == 835e12
    assert gpu.datasheet_peak("cpu") is None


def test_ratios_are_of_tokens_per_second_when_the_batches_differ():
    """Each model runs at its own largest batch: a model whose steps take twice as long at twice the batch is as fast
    (on an H200 the step-time ratio reported gMLP at 0.55x BERT for 0.84x its tokens/s)."""
    times = {"gmlp": [2.0, 2.2, 1.8], gpu.REFERENCE: [1.0, 1.1, 0.9]}
    tokens = {"gmlp": 368 * 512, gpu.REFERENCE: 184 * 512}
    assert gpu.throughput_ratio(times, tokens, "gmlp", gpu.REFERENCE) == pytest.approx(1.0)
    tokens["gmlp"] = 92 * 512
    assert gpu.throughput_ratio(times, tokens, "gmlp", gpu.REFERENCE) == pytest.approx(0.25)


def test_the_batch_search_counts_what_the_allocator_caches_as_free(monkeypatch):
    """The caching allocator keeps the previous model's blocks after its step; a search that reads the device's free
    memory without releasing them finds a batch sized to the leftovers (an H200 gave aMLP 24 where fp32 gave 216)."""
    gib = 2**30
    device = {"total": 100 * gib, "cached": 90 * gib}  # the earlier model's step left 90 GiB in the cache
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda _: (device["total"] - device["cached"], device["total"]))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: device.update(cached=0))
    monkeypatch.setattr(gpu, "step_peak_gib", lambda step, _: step())
    found = gpu.largest_batch(lambda batch: lambda: 1.0 + batch * 0.25, lambda: None, torch.device("cuda"))
    assert found["free_gib"] == 100 and found["batch"] == 352  # 90% of 100 GiB at a quarter GiB a sequence


def test_the_kept_activations_step_runs_gmlp_without_recomputing_and_switches_back(monkeypatch):
    """The row "gmlp, activations kept" is gMLP's own model and optimizer with its memory-lean training off during its
    step only: no block checkpoints its gating unit there, every block does in the default step, the same loss."""
    from gmlp import GMLPConfig, modeling_gmlp

    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(GMLPConfig(**TINY, max_position_embeddings=16, hidden_dropout_prob=0.0))
    checkpointed = []
    original = modeling_gmlp.checkpoint
    monkeypatch.setattr(modeling_gmlp, "checkpoint", lambda *a, **k: checkpointed.append(1) or original(*a, **k))
    input_ids, labels = mlm_batch(2, 16, TINY["vocab_size"])
    index, targets = models.labelled_positions(labels)
    losses = []

    def step():
        loss = models.labelled_loss(model, input_ids, index, targets)
        loss.backward()
        losses.append(loss.item())

    model.train()
    gpu.keeping_activations(step, model)()
    assert checkpointed == [] and model.config.recompute_gating
    assert all(layer.recompute_gating for layer in model.gmlp.encoder.layer)
    step()
    assert len(checkpointed) == TINY["num_hidden_layers"] and losses[0] == pytest.approx(losses[1])


@pytest.fixture
def small_section(monkeypatch):
    """The gpu section's four models at TINY sizes (n = 16) and a fixed matmul peak: the logic, not the sizes, is
    under test here (the CPU rehearsal runs the tiny presets)."""

    def build(size, device):
        from gmlp import GMLPConfig

        like = {**TINY, "max_position_embeddings": 16}
        torch.manual_seed(0)
        gmlp = AutoModelForMaskedLM.from_config(GMLPConfig(**like))
        amlp = AutoModelForMaskedLM.from_config(GMLPConfig(**like, tiny_attention_size=16))
        target = gmlp.num_parameters()
        bert = bert_config(like, target, head_size=32)
        modern = models.modernbert_config(like, target, head_size=32)
        built = {"gmlp": gmlp, "amlp": amlp, gpu.REFERENCE: AutoModelForMaskedLM.from_config(bert)}
        return built | {gpu.MODERN: AutoModelForMaskedLM.from_config(modern, attn_implementation="sdpa")}

    monkeypatch.setattr(gpu, "build", build)
    for module in (gpu, cli):
        monkeypatch.setattr(module, "matmul_peak_flops", lambda *args, **kwargs: 1e11)


def test_a_failing_part_is_recorded_and_a_resumed_run_does_only_what_is_missing(tmp_path, monkeypatch, small_section):
    """The gpu section on the CPU: the training part fails (planted), inference still runs; resumed
    from that file, the run keeps its batches and rows and runs the training part alone."""
    output = tmp_path / "speed_gpu.json"
    # One thread: tiny steps on two busy threads spend most of their time in OpenMP's waits.
    common = ["--sections", "gpu", "--quick", "--threads", "1", "--gpu-batch", "2", "--output"]
    parts = ["--gpu-parts", "batches-bf16,training-bf16-eager,inference-bf16-eager"]
    original = gpu.time_group

    def failing_training(cases, args, device, inference):
        if not inference:
            raise RuntimeError("planted failure")
        return original(cases, args, device, inference)

    monkeypatch.setattr(gpu, "time_group", failing_training)
    cli.main([*common, str(output), *parts])
    first = json.loads(output.read_text())["gpu"]
    assert first["errors"] == {"training-bf16-eager": "RuntimeError: planted failure"}
    assert set(first["part_seconds"]) == {"batches-bf16", "inference-bf16-eager"}
    assert set(first["inference"]) == {f"{name} | bf16 | eager" for name in first["models"]}
    assert first["host_syncs_per_step"]["gmlp | bf16"] == 0  # no CUDA here: the count is the GPU run's

    monkeypatch.setattr(gpu, "time_group", original)
    resumed_output = tmp_path / "resumed.json"
    cli.main([*common, str(resumed_output), *parts, "--gpu-resume", str(output)])
    resumed = json.loads(resumed_output.read_text())["gpu"]
    assert resumed["errors"] == {} and set(resumed["part_seconds"]) == set(first["part_seconds"]) | {
        "training-bf16-eager"
    }
    assert resumed["inference"] == first["inference"] and resumed["batches"] == first["batches"]
    assert set(resumed["training"]) == {f"{name} | bf16 | eager" for name in first["models"]}
    assert "Failed" not in "\n".join(gpu.render(resumed)["targets"])


def test_parts_that_would_end_after_the_deadline_are_left_for_later(tmp_path, monkeypatch, small_section):
    monkeypatch.setattr(gpu, "process_start", lambda: 0.0)  # started long ago: every deadline has passed
    output = tmp_path / "speed_gpu.json"
    argv = ["--sections", "gpu", "--quick", "--threads", "1", "--gpu-parts", "batches-bf16,fft", "--deadline", "60"]
    cli.main([*argv, "--output", str(output)])
    result = json.loads(output.read_text())["gpu"]
    assert result["not_run"] == ["batches-bf16", "fft"] and result["part_seconds"] == {}
    assert "Not run before the deadline: batches-bf16, fft." in gpu.render(result)["not_run"]


def test_the_kept_activations_row_is_paired_with_gmlp_and_bert(tmp_path, small_section):
    output = tmp_path / "speed_gpu.json"
    argv = ["--sections", "gpu", "--quick", "--threads", "1", "--gpu-batch", "2", "--output", str(output)]
    cli.main([*argv, "--gpu-parts", "batches-bf16,training-bf16-eager-kept"])
    result = json.loads(output.read_text())["gpu"]
    assert result["errors"] == {} and list(result["training"]) == [f"{gpu.KEPT} | bf16 | eager"]
    row = result["training"][f"{gpu.KEPT} | bf16 | eager"]
    assert row["vs_gmlp_recomputing"] > 0 and row["vs_bert_sdpa"] > 0 and row["vs_modernbert_sdpa"] is None
    rendered = gpu.render(result)
    assert any(line.startswith(f"| {gpu.KEPT} ") for line in rendered["training"])
    assert any("activations kept vs recomputed" in line for line in rendered["targets"])
