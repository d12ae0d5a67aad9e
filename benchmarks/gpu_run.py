"""The GPU run: one call of the `run` tool on an offline GPU machine (docs/testing.md#the-gpu-run), carrying .whl/
(benchmarks/gpu_wheels.txt, downloaded with DOWNLOAD), which the command installs first:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl;
    PYTHONPATH=/tmp/site python3 benchmarks/gpu_run.py

Its STAGES, in the order of the answers' value, each a subprocess under `timeout -s INT` with its share and what the
stages before it left, each writing its JSON under `--out` ($OUT) as it measures. A failing stage is recorded and the
run goes on; a failing preflight stops it at once (exit 1, the reason on stderr). `--device cpu`: the rehearsal.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent
WHEEL_LIST = ROOT / "benchmarks" / "gpu_wheels.txt"
# The wheels for the GPU machines' image (x86-64 Linux, CPython 3.12), where PyPI is reachable, into .whl/.
DOWNLOAD = (
    "python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform "
    "manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl -r benchmarks/gpu_wheels.txt"
)
# Seconds per stage, in order, from the H200's records of 2026-11-28 (results/gpu_run_2026-11-28*.json,
# speed_gpu_2026-11-28*.json), each process's start included: the kernels' tests took 80 s; the unit compiles five
# graphs (about 10 s each); the step four models (3-11 s first calls), timed paired like the six of its training and
# inference tables (62 s and 16 s); long inputs are eager. The paths' test gets only what the others leave.
STAGES = {"preflight": 30, "kernel_tests": 110, "unit": 100, "step": 170, "long": 130, "paths_tests": 0}
# The tests run on the device (the property test is one test of some 50 cases: no time limit per test).
TESTS = {"kernel_tests": ["tests/model/test_sgu_kernels.py"], "paths_tests": ["tests/model/test_paths_property.py"]}
STAGE_MODULE = "benchmarks.speed.gpu_stages"
STAGE_FILES = ("unit", "step", "long")  # the stages that write a record of their own
GRACE = 5  # seconds between a stage's SIGINT and its SIGKILL, both within its time
OUTCOMES = {0: "ok", 124: "timed out (SIGINT)", 137: "timed out (killed)"}  # timeout's exit codes
ERROR = re.compile(r"\b\w*(Error|Exception): \S")
# AUTO_SGU_KERNEL's modes (training, compiled) -> the record of gMLP with each unit there: (stage, section, mode).
AUTO_RECORDS = {(True, True): ("step", "training", "compiled"), (False, True): ("step", "inference", "compiled")}
AUTO_RECORDS |= {(True, False): ("unit", "training", "eager"), (False, False): ("unit", "inference", "eager")}


class Run:
    """The run's record (gpu_run.json under `out`) and its clock: a stage gets the time left less the later ones'."""

    def __init__(self, out: Path, budgets: dict[str, float]):
        self.out, self.budgets = out, budgets
        self.end = time.monotonic() + sum(budgets.values())
        started = datetime.datetime.now(datetime.timezone.utc)
        self.record = {"started": started.isoformat(timespec="seconds"), "budget_seconds": sum(budgets.values())}
        self.record |= {"date": started.date().isoformat(), "stages": {}}
        out.mkdir(parents=True, exist_ok=True)
        self.log = out / "gpu_run.log"

    def seconds_for(self, stage: str) -> float:
        later = list(self.budgets)[list(self.budgets).index(stage) + 1 :]
        return self.end - time.monotonic() - sum(self.budgets[name] for name in later)

    def save(self) -> None:
        (self.out / "gpu_run.json").write_text(json.dumps(self.record, indent=1))

    def run(self, stage: str, argv: list[str], env: dict | None) -> dict:
        """`argv` as a subprocess into the log, sent SIGINT GRACE seconds before the time the run leaves the stage and
        killed at it; the outcome recorded under the stage's name."""
        seconds = self.seconds_for(stage)
        entry = self.record["stages"][stage] = {"command": argv, "seconds_allowed": round(seconds)}
        if seconds < 2 * GRACE:
            entry["outcome"] = "not run: no time left"
            self.save()
            return entry
        start = time.monotonic()
        with self.log.open("a") as log:
            log.write(f"\n==== {stage}: $ {' '.join(argv)}\n")
            log.flush()
            offset = log.tell()
            command = ["timeout", "-s", "INT", "-k", str(GRACE), f"{seconds - GRACE:.0f}", *argv]
            options = {"cwd": ROOT, "env": env, "stdout": log, "stderr": subprocess.STDOUT}
            try:
                code = subprocess.run(command, check=False, timeout=seconds + GRACE, **options).returncode
            except (OSError, subprocess.TimeoutExpired) as error:
                code, entry["error"] = None, f"{type(error).__name__}: {error}"
        entry |= {"seconds": round(time.monotonic() - start, 1), "returncode": code}
        entry["outcome"] = OUTCOMES.get(code, f"failed ({code})")
        if code != 0:
            lines = self.log.read_bytes()[offset:].decode(errors="replace").splitlines()
            entry["log_tail"] = lines[-25:]
            entry["last_error"] = next((line for line in reversed(lines) if ERROR.search(line)), None)
        self.save()
        return entry


def pins() -> list[str]:
    """The wheel list's NAME==VERSION lines."""
    return [line.strip() for line in WHEEL_LIST.read_text().splitlines() if line.strip() and line[0] != "#"]


def missing_wheels(pinned: list[str], folder: Path) -> list[str]:
    """The pins without a wheel in `folder` (a wheel's file name starts NAME-VERSION-, the name's runs of -_. as _)."""
    have = {"==".join(path.name.lower().split("-")[:2]) for path in folder.glob("*.whl")}
    return [pin for pin in pinned if re.sub(r"[-_.]+(?=.*==)", "_", pin.lower()) not in have]


def json_file(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def junit_summary(path: Path) -> dict:
    """pytest's counts from its JUnit XML report (written when interrupted too; the failures are in it and the log)."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as error:
        return {"report": f"none ({type(error).__name__})"}
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    return {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}


def stage_command(args, stage: str, kernels: list[str], *more: str) -> list[str]:
    argv = [sys.executable, "-m", STAGE_MODULE, stage, "--device", args.device, "--out", str(args.out)]
    return [*argv, "--kernels", ",".join(kernels), *more]


def preflight(run: Run, args, env: dict) -> str | None:
    """Why the run cannot go on, or None: a pinned wheel missing from `--wheels`, or the preflight stage failing (its
    record, preflight.json, moved into the run's)."""
    pinned = pins()
    if missing := missing_wheels(pinned, args.wheels):
        return f"{args.wheels} holds no wheel for {', '.join(missing)}: download them where PyPI is ({DOWNLOAD})"
    entry = run.run("preflight", stage_command(args, "preflight", args.kernels, "--pins", ",".join(pinned)), env)
    found = run.record["preflight"] = json_file(args.out / "preflight.json")
    (args.out / "preflight.json").unlink(missing_ok=True)
    run.save()
    if entry["outcome"] != "ok":
        return f"the preflight stage {entry['outcome']}: {found.get('errors') or entry.get('last_error')}"
    return None


def run_stage(run: Run, args, env: dict, stage: str, kernels: list[str]) -> dict:
    """`stage` in its own process: TESTS[stage] by pytest on the device, its counts read back from its JUnit report,
    or a stage of gpu_stages.py, its errors read back from its record (STAGE.json under `out`, returned)."""
    if stage in TESTS:
        report = args.out / f"{stage}.xml"
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", f"--junitxml={report}"]
        run.run(stage, [*argv, "--device", args.device, *TESTS[stage]], env)
        run.record["stages"][stage] |= junit_summary(report)
        return {}
    run.run(stage, stage_command(args, stage, kernels), env)
    run.record["stages"][stage]["errors"] = (written := json_file(args.out / f"{stage}.json")).get("errors")
    return written


def speeds(record: dict, section: str, mode: str) -> dict[str, float]:
    """tokens/s of gMLP with each unit ("torch", "triton") in a stage record's section and mode."""
    units = {f"gmlp ({unit})": unit for unit in ("torch", "triton")}
    rows = [row for row in record.get("gpu", {}).get(section) or [] if row["mode"] == mode and row["model"] in units]
    return {units[row["model"]]: row["tokens_per_second"] for row in rows}


def auto_entries(records: dict[str, dict], date: str, device_type: str) -> list[dict]:
    """Each mode of AUTO_SGU_KERNEL whose record (`records`: stage -> JSON) has gMLP with both units: its key, the
    faster unit, the hybrid's speed over PyTorch's, the record as the table names it (its benchmarks/results/ file)."""
    entries = []
    for (training, compiled), (stage, section, mode) in AUTO_RECORDS.items():
        if len(speed := speeds(records.get(stage, {}), section, mode)) == 2:
            record = [f"benchmarks/results/gpu_run_{date}_{stage}.json", section, mode]
            entry = {"key": [device_type, training, compiled], "faster": max(speed, key=speed.get), "record": record}
            entries.append(entry | {"hybrid_speedup": speed["triton"] / speed["torch"]})
    return entries


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="benchmarks/gpu_run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-run-out")), help="default: $OUT")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a rehearsal at tiny sizes")
    parser.add_argument("--budget", type=float, help="seconds for the run (default: STAGES'), every share scaled")
    parser.add_argument("--kernels", type=lambda text: text.split(","), default=["triton", "torch"], help="the units")
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="the downloaded wheels (default: .whl)")
    args = parser.parse_args(argv)
    if not (args.device == "cpu" or args.device.startswith("cuda")):
        parser.error(f"--device {args.device!r}: give cuda (or cuda:N), or cpu for a rehearsal")
    if not set(args.kernels) <= {"triton", "torch"}:
        parser.error(f"--kernels {','.join(args.kernels)!r}: give triton, torch or both, comma-separated")
    if args.budget is not None and args.budget <= 0:
        parser.error(f"--budget {args.budget:g}: give the run's seconds, more than 0")
    scale = args.budget / sum(STAGES.values()) if args.budget else 1.0
    args.budgets = {stage: seconds * scale for stage, seconds in STAGES.items()}
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    run = Run(args.out, args.budgets)
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env |= {"PYTHONUNBUFFERED": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # the Triton unit on CPU tensors, through Triton's interpreter
    if reason := preflight(run, args, env):
        run.record["stopped"] = reason
        run.save()
        print(f"error: {reason}", file=sys.stderr)
        return 1
    kernels = list(args.kernels)
    for stage in list(run.budgets)[1:]:
        if stage == "long":  # the unit the step found faster first
            faster = speeds(json_file(args.out / "step.json"), "training", "compiled")
            kernels.sort(key=lambda unit: (-faster.get(unit, 0), unit == "triton"))  # PyTorch's where unknown
        written = run_stage(run, args, env, stage, kernels)
        if stage == "unit" and "triton" in kernels and not written.get("check", {}).get("hybrid_correct"):
            run.record["hybrid_left_out"] = written.get("check") or written.get("errors") or "no unit record"
            kernels.remove("triton")
        run.save()
    records = {stage: json_file(args.out / f"{stage}.json") for stage in STAGE_FILES}
    run.record["auto_sgu_kernel"] = auto_entries(records, run.record["date"], args.device.split(":")[0])
    run.record["seconds"] = round(sum(run.budgets.values()) - (run.end - time.monotonic()), 1)
    run.save()
    for stage, entry in run.record["stages"].items():
        found = entry.get("errors") or entry.get("failures") or "none"
        print(f"{stage}: {entry['outcome']} in {entry.get('seconds', 0)} s; errors: {found}")
    print(json.dumps({"auto_sgu_kernel": run.record["auto_sgu_kernel"]}, indent=1))
    sys.path.insert(0, str(ROOT))  # run as a file, the driver has benchmarks/ on its path; the tables import torch
    from benchmarks.speed import gpu

    run.record["targets"] = gpu.run_targets(records)
    run.save()
    print("\n".join(gpu.render_targets(run.record["targets"])["table"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
