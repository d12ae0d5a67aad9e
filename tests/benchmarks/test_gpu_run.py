"""The GPU run's driver (benchmarks/gpu_run.py) on the CPU: its plan fits the device time, a stage's time limit keeps
what its process wrote, a failing stage is recorded and the run goes on, failing kernel tests leave the PyTorch path
to be measured, and the whole run rehearses at tiny sizes (end to end)."""

import json
import re
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_run
from benchmarks.speed import gpu

ROOT = Path(__file__).resolve().parents[2]
DEVICE_SECONDS = 900  # a task's device time, the machine's start included
START = 120  # the machine's start, at most
PER_CALL = 600  # one command's limit


def python(script: str) -> list[str]:
    return [sys.executable, "-u", "-c", script]


def test_the_full_run_and_a_quick_rerun_fit_the_device_time():
    full, quick = sum(gpu_run.STAGES.values()), sum(gpu_run.QUICK.values())
    assert full + 2 * gpu_run.GRACE <= PER_CALL
    assert START + full + quick <= DEVICE_SECONDS
    # The speed stage reaches every bf16 table and the FFT's cross-over at base size (setup: 25 s).
    core = list(gpu.PARTS)[: list(gpu.PARTS).index("fft-crossover") + 1]
    assert 25 + sum(gpu.PARTS[part] for part in core) <= gpu_run.STAGES["speed"] - 2 * gpu_run.GRACE


def test_a_stage_stopped_at_its_limit_keeps_its_output_and_the_run_goes_on(tmp_path):
    run = gpu_run.Run(tmp_path, {"slow": 6, "next": 15})
    slow = "import time\nprint('started', flush=True)\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
    slow += "    print('saved what it measured')\n"
    entry = run.run("slow", python(slow), env=None)
    assert entry["outcome"] == "timed out (SIGINT)" and entry["returncode"] == 124
    assert entry["log_tail"][-2:] == ["started", "saved what it measured"]
    failing = run.run("next", python("raise SystemExit('planted error')"), env=None)
    assert failing["outcome"] == "failed (1)" and failing["log_tail"] == ["planted error"]
    raising = run.run("next", python("raise ValueError('planted')"), env=None)
    assert raising["last_error"] == "ValueError: planted"
    record = json.loads((tmp_path / "gpu_run.json").read_text())
    assert list(record["stages"]) == ["slow", "next"] and record["budget_seconds"] == 21
    assert [len(stage["runs"]) for stage in record["stages"].values()] == [1, 2]


def test_a_stage_gets_the_time_its_later_stages_leave(tmp_path, monkeypatch):
    run = gpu_run.Run(tmp_path, {"first": 30, "second": 20, "third": 10})
    assert run.seconds_for("first") == pytest.approx(30, abs=1)
    monkeypatch.setattr(gpu_run.time, "monotonic", lambda: run.end - 25)  # "first" took 35 s: "second" gets 15
    assert run.seconds_for("second") == pytest.approx(15)
    assert run.run("third", python("pass"), env=None, seconds=60)["seconds_allowed"] == 25
    monkeypatch.setattr(gpu_run.time, "monotonic", lambda: run.end - 2)
    assert run.run("third", python("pass"), env=None)["outcome"] == "not run: no time left"


def test_pytest_stopped_by_sigint_still_writes_its_report(tmp_path):
    """The kernel tests' counts come from pytest's JUnit XML, which it writes when stopped at its limit too."""
    (tmp_path / "test_planted.py").write_text(
        "import time\ndef test_passes():\n    pass\ndef test_fails():\n    assert 1 == 2, 'planted'\n"
        "def test_hangs():\n    time.sleep(120)\n"
    )
    report = tmp_path / "report.xml"
    run = gpu_run.Run(tmp_path / "out", {"tests": 25})  # time to start pytest on a busy machine
    pytest_ = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    entry = run.run("tests", [*pytest_, "--rootdir", str(tmp_path), str(tmp_path / "test_planted.py")], env=None)
    assert entry["outcome"] in ("timed out (SIGINT)", "failed (2)")
    summary = gpu_run.junit_summary(report)
    assert (summary["tests"], summary["failures"]) == (2, 1)
    assert summary["failed"] == ["test_planted::test_fails: AssertionError: planted\nassert 1 == 2"]
    assert gpu_run.junit_summary(tmp_path / "missing.xml") == {"report": "none (FileNotFoundError)"}


def test_failing_or_missing_kernel_tests_leave_the_pytorch_path_to_be_measured(tmp_path, monkeypatch):
    """A kernel that fails on the device is recorded, and the speed stage measures sgu_kernel="torch" alone: no
    minute is lost, and no wrong kernel is timed. A kernel test file that is not there, or tests that all skip,
    count as failing."""
    commands, skipped = [], []

    def run(self, stage, argv, env, seconds=None):  # pytest's report: 3 tests, `skipped` of them skipped
        commands.append(argv)
        (tmp_path / "kernel_tests.xml").write_text(
            f'<testsuites><testsuite tests="3" skipped="{len(skipped)}"/></testsuites>'
        )
        self.record["stages"].setdefault(stage, {"runs": []})
        return {"returncode": 0}

    monkeypatch.setattr(gpu_run.Run, "run", run)
    args = gpu_run.parse_args(["--out", str(tmp_path)])
    stage = gpu_run.Run(tmp_path, gpu_run.STAGES)
    monkeypatch.setattr(gpu_run, "KERNEL_TESTS", ("test_paths_property.py",))
    assert gpu_run.kernel_tests(stage, args, {}) is True
    assert commands[-1][-1].endswith("test_paths_property.py") and "--device" in commands[-1]
    skipped += [1, 2, 3]  # every test skipped on the device (no Triton there, say): nothing was checked
    assert gpu_run.kernel_tests(stage, args, {}) is False
    skipped.clear()
    monkeypatch.setattr(gpu_run, "KERNEL_TESTS", ("test_paths_property.py", "test_no_such_kernels.py"))
    assert gpu_run.kernel_tests(stage, args, {}) is False
    for passed in (True, False):
        allowed = stage.seconds_for("speed")  # its own and what the stages before it left
        gpu_run.speed(stage, args, {}, kernels_pass=passed)
        argv = commands[-1]
        assert argv[argv.index("--gpu-kernels") + 1] == ("triton,torch" if passed else "torch")
        deadline = float(argv[argv.index("--deadline-at") + 1]) - gpu_run.time.time()
        assert allowed - 2 * gpu_run.GRACE - 2 <= deadline <= allowed - 2 * gpu_run.GRACE


def test_stages_and_budgets_asked_for():
    """`--stages` leaves the others out (the preflight always runs), `--quick` takes the rerun's budget, `--budget`
    scales every stage but the preflight, and an unknown stage is one line of error."""
    assert list(gpu_run.budgets(gpu_run.parse_args([]))) == ["preflight", "kernel_tests", "speed", "fsdp"]
    assert gpu_run.budgets(gpu_run.parse_args(["--quick"])) == gpu_run.QUICK
    chosen = gpu_run.budgets(gpu_run.parse_args(["--stages", "speed,fsdp", "--budget", "300"]))
    assert list(chosen) == ["preflight", "speed", "fsdp"] and sum(chosen.values()) == pytest.approx(300)
    assert chosen["preflight"] == gpu_run.STAGES["preflight"]
    with pytest.raises(SystemExit, match="error: no stage tests; the stages are preflight, kernel_tests, speed, fsdp"):
        gpu_run.budgets(gpu_run.parse_args(["--stages", "tests"]))


def test_the_run_uses_the_documented_fsdp_settings_and_pinned_wheels():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    documented = [m.group(1) for page in pages for m in re.finditer(r"--fsdp_config '(\{.*?\})'", page.read_text())]
    assert documented and all(json.loads(found) == json.loads(gpu_run.FSDP_CONFIG) for found in documented)
    wheel_list = ROOT / "benchmarks" / "gpu_wheels.txt"
    listed = [line for line in wheel_list.read_text().splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[\w-]+==[\w.]+", line) for line in listed) and len(listed) == len(set(listed))


@pytest.mark.e2e
def test_the_run_rehearses_on_the_cpu(tmp_path, monkeypatch):
    """The preflight, the kernel tests (here: a file that is not there yet, so the PyTorch path alone), and the
    speed stage's first parts at tiny sizes, as on the device."""
    monkeypatch.setattr(gpu_run, "KERNEL_TESTS", ("test_sgu_kernels.py",))
    argv = ["--device", "cpu", "--out", str(tmp_path), "--stages", "kernel_tests,speed", "--budget", "900"]
    gpu_run.main([*argv, "--parts", "batches-bf16,inference-bf16-eager", "--site", str(tmp_path / "site")])
    record = json.loads((tmp_path / "gpu_run.json").read_text())
    assert record["preflight"]["torch"] and record["preflight"]["python_h"] in (True, False)
    speed = record["stages"]["speed"]
    assert speed["runs"][-1]["outcome"] == "ok" and speed["errors"] == {}
    assert set(speed["part_seconds"]) == {"batches-bf16", "inference-bf16-eager"}
    kernels_found = any(ROOT.glob("tests/**/test_sgu_kernels.py"))
    assert speed["sgu_kernels"] == (["triton", "torch"] if kernels_found else ["torch"])
    results = json.loads((tmp_path / "speed_gpu.json").read_text())
    assert (tmp_path / "speed_gpu.md").read_text().startswith("Machine: ")
    assert {row["model"] for row in results["gpu"]["inference"]} >= {"gmlp (torch)", gpu.REFERENCE, gpu.BERT_BASE}
