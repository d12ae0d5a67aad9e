"""The GPU run's driver (benchmarks/gpu_run.py) on the CPU: the documented call fits a session's device time with its
stages in the order of the answers' value; the preflight stops the run at once, without the wheels or when its stage
fails; each stage writes its file as it goes and a failing stage is recorded while the run goes on; a hybrid found
wrong is left out of the later stages and the long stage takes the unit the step found faster; a stage stopped at
its limit keeps its output; pytest's report survives an interrupt; AUTO_SGU_KERNEL's entries come from the records;
the wheel list is pinned within the project's requirements and, where downloaded, fits; and (end to end) the whole
call rehearses on the CPU, its targets read off its records. No test depends on the machine's speed: every limit is
minutes above what it guards, and the limit one test meets on purpose stops a process that would otherwise wait ten
minutes."""

import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import transformers
from packaging.requirements import Requirement

from benchmarks import gpu_run
from benchmarks.speed import gpu

ROOT = Path(__file__).resolve().parents[2]
DEVICE_SECONDS = 900  # a session's device time, the machine's start and idle time included
START = 120  # the machine's start, at most
INSTALL = 20  # the command's first part, pip installing the wheels (seconds, with margin)
FILES_BACK = 8  # what comes back from $OUT: at most 8 files
WHEELS_MIB = 40  # what the wheels may weigh (64 MiB travel in all, the working tree with them)


def documented_call() -> dict:
    """The `run` tool's call as docs/testing.md gives it: one JSON line with the command, carry and timeout_s."""
    (line,) = [
        line for line in (ROOT / "docs" / "testing.md").read_text().splitlines() if line.startswith('{"command"')
    ]
    return json.loads(line)


def test_the_call_fits_the_device_time_with_its_stages_in_order():
    """One call: the wheels installed into the target its PYTHONPATH names, then the run within 540 s; the call's
    timeout leaves room for the install, and a failed preflight can be followed by the whole call again within a
    session's device time, the machine's start included."""
    call = documented_call()
    install, run = call["command"].split("; ")
    target = re.fullmatch(r"python3 -m pip install -q --no-index --no-deps .*--target (\S+) \.whl/\*\.whl", install)
    assert target and run == f"PYTHONPATH={target[1]} python3 benchmarks/gpu_run.py" and call["carry"] == [".whl"]
    assert f"{install};\n    {run}" in gpu_run.__doc__ and len(call["command"]) <= 2000
    assert list(gpu_run.STAGES) == ["preflight", "kernel_tests", "unit", "step", "long", "paths_tests"]
    assert gpu_run.STAGES["paths_tests"] == 0  # only what the others leave
    budget = sum(gpu_run.STAGES.values())
    assert budget <= 540 and budget + INSTALL <= call["timeout_s"] <= 600
    assert START + INSTALL + gpu_run.STAGES["preflight"] + call["timeout_s"] <= DEVICE_SECONDS


def plant(folder: Path, version: str = transformers.__version__) -> tuple[Path, Path]:
    """A wheel list pinning the installed Transformers and a wheels folder with its (empty) wheel."""
    wheels = folder / "wheels"
    wheels.mkdir()
    (wheels / f"transformers-{version}-py3-none-any.whl").write_bytes(b"")
    (folder / "gpu_wheels.txt").write_text(f"# planted\ntransformers=={version}\n")
    return folder / "gpu_wheels.txt", wheels


def test_without_the_wheels_the_run_stops_before_any_stage(tmp_path, monkeypatch, capsys):
    wheel_list, wheels = plant(tmp_path, "5.24.0")
    (wheels / "transformers-5.24.0-py3-none-any.whl").unlink()
    monkeypatch.setattr(gpu_run, "WHEEL_LIST", wheel_list)
    out = tmp_path / "out"
    assert gpu_run.main(["--device", "cpu", "--out", str(out), "--wheels", str(wheels)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {wheels} holds no wheel for transformers==5.24.0: download them")
    assert gpu_run.DOWNLOAD in line
    record = json.loads((out / "gpu_run.json").read_text())
    assert record["stages"] == {} and record["stopped"] == line.removeprefix("error: ")


# The stages as benchmarks.speed.gpu_stages runs them, planted: each writes OUT/STAGE.json with the files it found
# there and the units it was given; the unit stage finds the hybrid right or wrong (HYBRID), the step the hybrid
# faster, and the step fails after writing its record; the preflight fails where PREFLIGHT says so.
PLANTED_STAGES = """
import argparse, json, os, sys
parser = argparse.ArgumentParser()
for flag in ("--device", "--out", "--kernels", "--pins"):
    parser.add_argument(flag)
parser.add_argument("stage")
args = parser.parse_args()
record = {"stage": args.stage, "kernels": args.kernels, "pins": args.pins, "found": sorted(os.listdir(args.out))}
record["errors"] = {}
if args.stage == "preflight" and os.environ.get("PREFLIGHT") == "fails":
    record["errors"]["stage"] = "RuntimeError: planted"
if args.stage == "unit":
    record["check"] = {"hybrid_correct": os.environ["HYBRID"] == "right"}
if args.stage == "step":
    rows = [{"model": "gmlp (torch)", "mode": "compiled", "tokens_per_second": 1.0}]
    rows += [{"model": "gmlp (triton)", "mode": "compiled", "tokens_per_second": 2.0}]
    record |= {"gpu": {"training": rows}, "errors": {"inference": "planted"}}
with open(os.path.join(args.out, args.stage + ".json"), "w") as file:
    json.dump(record, file)
sys.exit(1 if args.stage == "step" or record["errors"].get("stage") else 0)
"""
PLANTED_TESTS = {
    "conftest.py": "def pytest_addoption(parser):\n    parser.addoption('--device')\n",
    "test_passes.py": "def test_passes():\n    pass\n",
    "test_fails.py": "def test_fails():\n    assert 1 == 2, 'planted'\n",
}


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """The driver with PLANTED_STAGES, PLANTED_TESTS (the kernels' passing, the paths' failing) and a planted wheel."""
    for name, text in {"planted_stages.py": PLANTED_STAGES, **PLANTED_TESTS}.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(gpu_run, "STAGE_MODULE", "planted_stages")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    tests = {"kernel_tests": [str(tmp_path / "test_passes.py")], "paths_tests": [str(tmp_path / "test_fails.py")]}
    monkeypatch.setattr(gpu_run, "TESTS", tests)
    wheel_list, wheels = plant(tmp_path)
    monkeypatch.setattr(gpu_run, "WHEEL_LIST", wheel_list)
    return ["--device", "cpu", "--out", str(tmp_path / "out"), "--wheels", str(wheels), "--budget", "3600"]


@pytest.mark.parametrize("hybrid", ["right", "wrong"])
def test_each_stage_writes_its_file_as_it_goes_and_a_failing_stage_does_not_stop_the_run(
    planted, tmp_path, monkeypatch, hybrid
):
    """The stages in order, each finding the earlier ones' files; the step's failure recorded with its errors, the
    run going on; the tests' counts read back; a hybrid found wrong left out of the later stages, a right one measured
    and, faster in the step, the long stage's first unit."""
    monkeypatch.setenv("HYBRID", hybrid)
    assert gpu_run.main(planted) == 0
    out = tmp_path / "out"
    record = json.loads((out / "gpu_run.json").read_text())
    assert list(record["stages"]) == list(gpu_run.STAGES)
    outcomes = {stage: entry["outcome"] for stage, entry in record["stages"].items()}
    assert outcomes == dict.fromkeys(gpu_run.STAGES, "ok") | {"step": "failed (1)", "paths_tests": "failed (1)"}
    assert record["preflight"]["pins"] == f"transformers=={transformers.__version__}"
    assert record["stages"]["step"]["errors"] == {"inference": "planted"}
    assert (record["stages"]["kernel_tests"]["tests"], record["stages"]["kernel_tests"]["failures"]) == (1, 0)
    assert (record["stages"]["paths_tests"]["tests"], record["stages"]["paths_tests"]["failures"]) == (1, 1)
    written = {stage: json.loads((out / f"{stage}.json").read_text()) for stage in gpu_run.STAGE_FILES}
    for i, stage in enumerate(gpu_run.STAGE_FILES):  # every earlier stage's file was there when this one started
        assert {f"{earlier}.json" for earlier in gpu_run.STAGE_FILES[:i]} | {"kernel_tests.xml"} <= set(
            written[stage]["found"]
        )
    assert written["unit"]["kernels"] == "triton,torch"
    expected = {"right": ("triton,torch", "triton,torch"), "wrong": ("torch", "torch")}[hybrid]
    assert (written["step"]["kernels"], written["long"]["kernels"]) == expected
    assert ("hybrid_left_out" in record) == (hybrid == "wrong")
    assert not (out / "preflight.json").exists() and len(list(out.iterdir())) <= FILES_BACK


def test_a_failing_preflight_stops_the_run_at_once(planted, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PREFLIGHT", "fails")
    assert gpu_run.main(planted) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "error: the preflight stage failed (1): {'stage': 'RuntimeError: planted'}"
    record = json.loads((tmp_path / "out" / "gpu_run.json").read_text())
    assert list(record["stages"]) == ["preflight"] and record["preflight"]["errors"] == {
        "stage": "RuntimeError: planted"
    }


def python(script: str) -> list[str]:
    return [sys.executable, "-u", "-c", script]


def test_a_stage_stopped_at_its_limit_keeps_its_output_and_the_run_goes_on(tmp_path):
    """SIGINT reaches a stage at its limit less GRACE (here 10 s, against a stage that would wait 600 s) and the
    stage saves what it measured; a failing stage leaves its last error."""
    run = gpu_run.Run(tmp_path, {"slow": 10 + gpu_run.GRACE, "next": 600})
    slow = "import time\ntry:\n    print('started', flush=True)\n    time.sleep(600)\nexcept KeyboardInterrupt:\n"
    entry = run.run("slow", python(slow + "    print('saved what it measured')\n"), env=None)
    assert (entry["outcome"], entry["returncode"]) == ("timed out (SIGINT)", 124)
    assert entry["log_tail"][-2:] == ["started", "saved what it measured"]
    failing = run.run("next", python("raise SystemExit('planted error')"), env=None)
    assert failing["outcome"] == "failed (1)" and failing["log_tail"] == ["planted error"]
    assert run.run("next", python("raise ValueError('planted')"), env=None)["last_error"] == "ValueError: planted"
    record = json.loads((tmp_path / "gpu_run.json").read_text())
    assert [stage["outcome"] for stage in record["stages"].values()] == ["timed out (SIGINT)", "failed (1)"]


def test_a_stage_gets_the_time_its_later_stages_leave(tmp_path, monkeypatch):
    run = gpu_run.Run(tmp_path, {"first": 30, "second": 20, "third": 0})
    assert run.seconds_for("first") == pytest.approx(30, abs=1)
    monkeypatch.setattr(gpu_run.time, "monotonic", lambda: run.end - 25)  # "first" took 35 s: "second" gets 25
    assert run.seconds_for("second") == pytest.approx(25) and run.seconds_for("third") == pytest.approx(25)
    monkeypatch.setattr(gpu_run.time, "monotonic", lambda: run.end - 2)
    assert run.run("third", python("pass"), env=None)["outcome"] == "not run: no time left"


def test_pytest_interrupted_still_writes_its_report(tmp_path):
    """The tests' counts come from pytest's JUnit XML, which it writes when interrupted (SIGINT) too. Launched as the
    run launches a stage: under `timeout`, which gives it SIGINT's default action even where its parent ignores SIGINT
    (as a shell without job control makes a background command do)."""
    interrupt = f"import signal\ndef test_interrupted():\n    signal.raise_signal(signal.{signal.SIGINT.name})\n"
    (tmp_path / "test_planted.py").write_text(PLANTED_TESTS["test_fails.py"] + interrupt)
    report = tmp_path / "report.xml"
    pytest_ = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    run = gpu_run.Run(tmp_path / "out", {"tests": 600})
    entry = run.run("tests", [*pytest_, "--rootdir", str(tmp_path), str(tmp_path / "test_planted.py")], env=None)
    assert entry["outcome"] == "failed (2)"  # pytest's status when interrupted
    assert gpu_run.junit_summary(report) == {"tests": 1, "failures": 1, "errors": 0, "skipped": 0}
    assert gpu_run.junit_summary(tmp_path / "missing.xml") == {"report": "none (FileNotFoundError)"}


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--kernels", "fused"], "error: --kernels 'fused': give triton, torch or both, comma-separated"),
        (["--device", "tpu"], "error: --device 'tpu': give cuda (or cuda:N), or cpu for a rehearsal"),
        (["--budget", "-1"], "error: --budget -1: give the run's seconds, more than 0"),
    ],
)
def test_bad_arguments_are_one_error_line_and_nothing_written(tmp_path, capsys, argv, error):
    with pytest.raises(SystemExit) as stopped:
        gpu_run.main([*argv, "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"benchmarks/gpu_run.py: {error}")
    assert not (tmp_path / "out").exists()


def test_the_budget_scales_every_stages_share():
    assert gpu_run.parse_args([]).budgets == gpu_run.STAGES
    budgets = gpu_run.parse_args(["--budget", "1080"]).budgets
    assert budgets == {stage: 2 * seconds for stage, seconds in gpu_run.STAGES.items()}


def test_auto_sgu_kernel_entries_are_read_off_the_records(tmp_path):
    """An entry for each mode whose record has gMLP with both units, naming the faster and the record as the table
    does; a record read back as tests/model/test_modeling.py reads it gives the same unit."""

    def rows(mode, torch_speed, triton_speed):
        return [
            {"model": "gmlp (torch)", "mode": mode, "tokens_per_second": torch_speed},
            {"model": f"gmlp (torch){gpu.KEPT}", "mode": mode, "tokens_per_second": 9.0},
            {"model": "gmlp (triton)", "mode": mode, "tokens_per_second": triton_speed},
        ]

    step = {"gpu": {"training": rows("compiled", 2.0, 3.0), "inference": rows("compiled", 4.0, 3.0)}}
    unit = {"gpu": {"training": rows("eager", 1.0, 2.0), "inference": rows("compiled", 1.0, 2.0)}}  # no eager row
    (tmp_path / "step.json").write_text(json.dumps(step))
    (tmp_path / "unit.json").write_text(json.dumps(unit))
    entries = gpu_run.auto_entries({"step": step, "unit": unit}, "2027-01-02", "cuda")
    found = {tuple(entry["key"]): (entry["faster"], entry["hybrid_speedup"]) for entry in entries}
    assert found == {("cuda", True, True): ("triton", 1.5), ("cuda", False, True): ("torch", 0.75)} | {
        ("cuda", True, False): ("triton", 2.0)
    }
    for entry in entries:
        file, section, mode = entry["record"]
        stage = re.fullmatch(r"benchmarks/results/gpu_run_2027-01-02_(\w+)\.json", file)[1]
        speed = {
            row["model"]: row["tokens_per_second"]
            for row in json.loads((tmp_path / f"{stage}.json").read_text())["gpu"][section]
            if row["mode"] == mode
        }
        assert entry["faster"] == max(("torch", "triton"), key=lambda unit: speed[f"gmlp ({unit})"])


def test_the_wheel_list_pins_what_the_project_requires():
    """Each line NAME==VERSION, once; Transformers among them within pyproject.toml's requirement; the download
    command documented is the driver's."""
    pinned = gpu_run.pins()
    assert all(re.fullmatch(r"[\w.-]+==[\w.]+", pin) for pin in pinned) and len(pinned) == len(set(pinned))
    required = Requirement(re.search(r'"(transformers[<>=!~][^"]*)"', (ROOT / "pyproject.toml").read_text())[1])
    versions = dict(pin.split("==") for pin in pinned)
    assert required.specifier.contains(versions["transformers"])
    assert gpu_run.DOWNLOAD in (ROOT / "docs" / "testing.md").read_text()


def wheels_fit(folder: Path) -> None:
    """The folder's wheels are the list's, each installable on CPython 3.12 on x86-64 Linux, under WHEELS_MIB."""
    assert gpu_run.missing_wheels(gpu_run.pins(), folder) == []
    wheels = sorted(folder.glob("*.whl"))
    assert len(wheels) == len(gpu_run.pins())
    for wheel in wheels:
        python, abi, platform = wheel.name.removesuffix(".whl").split("-")[-3:]
        assert set(python.split(".")) & {"py3", "cp312"} and abi in ("none", "abi3", "cp312"), wheel.name
        assert platform == "any" or re.fullmatch(r"(manylinux\w*_x86_64\.?)+", platform), wheel.name
    assert sum(wheel.stat().st_size for wheel in wheels) < WHEELS_MIB * 2**20


@pytest.mark.skipif(not (ROOT / ".whl").is_dir(), reason="no .whl/ here: the wheels are downloaded for a GPU run")
def test_the_downloaded_wheels_are_the_lists_and_fit():
    wheels_fit(ROOT / ".whl")


def reaches_pypi() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.e2e
def test_the_wheel_list_resolves_for_the_images_python(tmp_path):
    """The documented download, run where PyPI is reachable, finds every pin for CPython 3.12 on x86-64 Linux, and
    the wheels fit."""
    if not reaches_pypi():
        pytest.skip("PyPI is not reachable from here: the list resolves only where the wheels can be downloaded")
    command = gpu_run.DOWNLOAD.replace("python3", sys.executable, 1).replace("-d .whl", f"-d {tmp_path}")
    subprocess.run(command.split(), check=True, cwd=ROOT, timeout=600)
    wheels_fit(tmp_path)


@pytest.mark.e2e
def test_the_whole_call_rehearses_on_the_cpu(tmp_path, monkeypatch):
    """The call end to end at tiny sizes (the Triton unit under Triton's interpreter, "compiled" as dynamo alone), one
    quick test of each test file, a budget that no stage nears: every stage ends without an error and writes its file,
    at most FILES_BACK in all, with the answers in them."""
    wheel_list, wheels = plant(tmp_path)
    monkeypatch.setattr(gpu_run, "WHEEL_LIST", wheel_list)
    kernels = "tests/model/test_sgu_kernels.py::test_a_bad_input_gets_a_clear_error"
    paths = "tests/model/test_paths_property.py::test_a_packed_sequence_longer_than_n_is_refused_by_name"
    monkeypatch.setattr(gpu_run, "TESTS", {"kernel_tests": [kernels], "paths_tests": [paths]})
    out = tmp_path / "out"
    assert gpu_run.main(["--device", "cpu", "--out", str(out), "--wheels", str(wheels), "--budget", "3600"]) == 0
    record = json.loads((out / "gpu_run.json").read_text())
    assert record["preflight"]["versions"]["transformers"] == transformers.__version__
    assert set(record["preflight"]["losses"]) == {"triton", "torch"} and "hybrid_left_out" not in record
    for stage, entry in record["stages"].items():
        assert entry["outcome"] == "ok" and not entry.get("errors") and not entry.get("failures"), stage
    assert all(record["stages"][stage]["tests"] >= 1 for stage in gpu_run.TESTS)
    assert len(list(out.iterdir())) <= FILES_BACK
    unit = json.loads((out / "unit.json").read_text())
    assert unit["check"]["hybrid_correct"] and all(
        row["max_error"] < unit["check"]["tolerance"] for row in unit["gpu"]["training"]
    )
    trained = {(row["model"], row["mode"]) for row in unit["gpu"]["training"]}
    models = ["gmlp (torch)", f"gmlp (torch){gpu.KEPT}", "gmlp (triton)"]
    assert trained == {(model, mode) for model in models for mode in ("eager", "compiled")}
    assert len(unit["gpu"]["inference"]) == 4 and len(unit["kernels"]) == 3
    step = json.loads((out / "step.json").read_text())["gpu"]
    for task in ("training", "inference"):
        assert [row["model"] for row in step[task]] == ["gmlp (torch)", "gmlp (triton)", gpu.REFERENCE, gpu.MODERN]
    cases = step["profile"]["cases"].values()
    assert len(cases) == 2 and all(
        0 < case["gating_unit_share_estimate"] and case["gating_rows_share"] for case in cases
    )
    assert set(gpu.render(step)) >= {"targets", "training", "inference", "profile"}
    long = json.loads((out / "long.json").read_text())
    assert list(long["gpu"]) == ["64", "128"] and all(
        list(groups) == ["gmlp (torch)"] for groups in long["gpu"].values()
    )
    for rows in (rows for groups in long["gpu"].values() for rows in groups.values()):
        assert [row["model"] for row in rows["training"]] == [row["model"] for row in rows["inference"]]
    assert len(record["auto_sgu_kernel"]) == 4
    measured = {row[0]: row[1] for row in record["targets"]}  # no 16,384 tokens here; no datasheet for a CPU
    assert len(measured) == 10 and all(value != "–" for target, value in measured.items() if "MFU" not in target)
