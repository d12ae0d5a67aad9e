"""The GPU run's driver (benchmarks/gpu_run.py) on the CPU: its two calls fit the device time with the question's
stages in the first, in order; each stage writes its file as it finishes and a failing one is recorded while the run
goes on; a Triton unit found wrong is left out of the later stages; a stage's time limit keeps what its process wrote;
and (end to end) the first call rehearses at tiny sizes."""

import json
import re
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_run
from benchmarks.speed import gpu

ROOT = Path(__file__).resolve().parents[2]
DEVICE_SECONDS = 1800  # a session's device time, the machine's start included
START = 120  # the machine's start, at most
PER_CALL = 600  # one command's limit (the run tool's timeout_s)
FILES_BACK = 8  # what comes back from $OUT: at most 8 files
COMMAND = re.compile(r"python3 benchmarks/gpu_run\.py --call (\d) --budget (\d+)")


def python(script: str) -> list[str]:
    return [sys.executable, "-u", "-c", script]


def test_two_calls_fit_the_device_time_and_the_first_holds_the_question():
    """Each documented call's budget leaves 30 s of its 600 (a last stage may take GRACE more after its SIGINT); the
    first call measures the ceilings, the unit, the step, long inputs, the profile and inductor's bandwidth, in that
    order; the tables reach every bf16 part and the FFT's cross-over before the kernels' tests."""
    assert list(gpu_run.CALLS[1]) == ["preflight", "ceilings", "unit", "step", "long", "profile", "bandwidth"]
    assert list(gpu_run.CALLS[2]) == ["preflight", "tables", "kernel_tests"]
    for page in (ROOT / "benchmarks" / "gpu_run.py", ROOT / "docs" / "testing.md"):
        commands = {int(call): int(budget) for call, budget in COMMAND.findall(page.read_text())}
        assert commands == {1: 570, 2: 570}, page
    for call, budget in commands.items():
        assert sum(gpu_run.CALLS[call].values()) <= budget and budget + 2 * gpu_run.GRACE <= PER_CALL
    assert START + len(commands) * PER_CALL <= DEVICE_SECONDS
    bf16 = list(gpu.PARTS)[: list(gpu.PARTS).index("fft-crossover") + 1]
    assert 25 + sum(gpu.PARTS[part] for part in bf16) <= gpu_run.CALLS[2]["tables"] - 2 * gpu_run.GRACE
    assert gpu_run.KERNEL_TESTS == ("test_paths_property.py", "test_sgu_kernels.py")


# A stage as benchmarks.speed.gpu_stages runs it, planted: it writes OUT/STAGE.json with the files it found there and
# the kernels it was given; the unit stage fails after finding the Triton unit wrong.
PLANTED_STAGES = """
import argparse, json, os, sys
parser = argparse.ArgumentParser()
for flag in ("--device", "--out", "--kernels"):
    parser.add_argument(flag)
parser.add_argument("stage")
args = parser.parse_args()
record = {"stage": args.stage, "kernels": args.kernels, "found": sorted(os.listdir(args.out)), "errors": {}}
if args.stage == "unit":
    record |= {"triton_correct": False, "triton_errors": {"output": 0.5}, "errors": {"timing": "planted"}}
with open(os.path.join(args.out, args.stage + ".json"), "w") as file:
    json.dump(record, file)
sys.exit(1 if args.stage == "unit" else 0)
"""


def test_each_stage_writes_its_file_as_it_finishes_and_a_failing_stage_does_not_stop_the_run(tmp_path, monkeypatch):
    (tmp_path / "planted_stages.py").write_text(PLANTED_STAGES)
    monkeypatch.setattr(gpu_run, "STAGE_MODULE", "planted_stages")
    monkeypatch.setattr(gpu_run, "preflight", lambda run, args: {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    out = tmp_path / "out"
    gpu_run.main(["--call", "1", "--device", "cpu", "--out", str(out)])
    record = json.loads((out / "gpu_run.json").read_text())
    measured = list(gpu_run.CALLS[1])[1:]
    assert list(record["stages"]) == measured
    outcomes = {stage: entry["runs"][-1]["outcome"] for stage, entry in record["stages"].items()}
    assert outcomes == dict.fromkeys(measured, "ok") | {"unit": "failed (1)"}
    assert record["stages"]["unit"]["errors"] == {"timing": "planted"}
    assert record["triton_left_out"] == {"output": 0.5}
    written = {stage: json.loads((out / f"{stage}.json").read_text()) for stage in measured}
    for i, stage in enumerate(measured):  # every earlier stage's file was there when this one started
        assert {f"{earlier}.json" for earlier in measured[:i]} <= set(written[stage]["found"])
        assert written[stage]["kernels"] == ("triton,torch" if i <= measured.index("unit") else "torch")
    assert len(list(out.iterdir())) <= FILES_BACK


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


def test_the_kernel_tests_run_on_the_device_and_a_missing_file_is_recorded(tmp_path, monkeypatch):
    commands = []

    def run(self, stage, argv, env, seconds=None):
        commands.append(argv)
        (tmp_path / "kernel_tests.xml").write_text('<testsuites><testsuite tests="3" skipped="1"/></testsuites>')
        self.record["stages"].setdefault(stage, {"runs": []})
        return {"returncode": 0}

    monkeypatch.setattr(gpu_run.Run, "run", run)
    monkeypatch.setattr(gpu_run, "KERNEL_TESTS", ("test_paths_property.py", "test_no_such_kernels.py"))
    args = gpu_run.parse_args(["--call", "2", "--out", str(tmp_path)])
    stage = gpu_run.Run(tmp_path, gpu_run.CALLS[2])
    gpu_run.kernel_tests(stage, args, {})
    assert commands[-1][-1].endswith("test_paths_property.py") and commands[-1][-3:-1] == ["--device", "cuda"]
    recorded = stage.record["stages"]["kernel_tests"]
    assert recorded["missing"] == ["test_no_such_kernels.py"] and (recorded["tests"], recorded["skipped"]) == (3, 1)


def test_stages_and_budgets_asked_for():
    """`--stages` leaves the call's others out (the preflight always runs), `--budget` scales every stage but the
    preflight, and a stage the call does not have is one line of error."""
    assert list(gpu_run.budgets(gpu_run.parse_args([]))) == list(gpu_run.CALLS[1])
    chosen = gpu_run.budgets(gpu_run.parse_args(["--stages", "unit,step", "--budget", "300"]))
    assert list(chosen) == ["preflight", "unit", "step"] and sum(chosen.values()) == pytest.approx(300)
    assert chosen["preflight"] == gpu_run.CALLS[1]["preflight"]
    with pytest.raises(SystemExit, match="error: call 2 has no stage unit; its stages are preflight, tables, kernel"):
        gpu_run.budgets(gpu_run.parse_args(["--call", "2", "--stages", "unit"]))


def test_the_wheels_carried_are_pinned():
    wheel_list = ROOT / "benchmarks" / "gpu_wheels.txt"
    listed = [line for line in wheel_list.read_text().splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[\w-]+==[\w.]+", line) for line in listed) and len(listed) == len(set(listed))


@pytest.mark.e2e
def test_the_first_call_rehearses_on_the_cpu(tmp_path):
    """The first call end to end at tiny sizes (the Triton unit under Triton's interpreter, nothing compiled but the
    bandwidth stage's unit): every stage ends without an error and writes its file, at most FILES_BACK in all."""
    out = tmp_path / "out"
    gpu_run.main(["--call", "1", "--device", "cpu", "--out", str(out), "--site", str(tmp_path / "site")])
    record = json.loads((out / "gpu_run.json").read_text())
    assert record["preflight"]["torch"] and "triton_left_out" not in record
    for stage in list(gpu_run.CALLS[1])[1:]:
        assert record["stages"][stage]["runs"][-1]["outcome"] == "ok" and record["stages"][stage]["errors"] == {}
    assert len(list(out.iterdir())) <= FILES_BACK
    unit = json.loads((out / "unit.json").read_text())
    assert unit["triton_correct"] and set(unit["cases"]) == {"torch (recompute)", "torch (kept)", "triton"}
    step = json.loads((out / "step.json").read_text())
    assert [row["model"] for row in step["training"]] == ["gmlp (torch)", f"gmlp (torch){gpu.KEPT}", "gmlp (triton)"]
    long = json.loads((out / "long.json").read_text())
    assert all(set(rows) >= {"training", "inference"} for rows in long["lengths"].values())
    assert json.loads((out / "bandwidth.json").read_text())["trace"]
