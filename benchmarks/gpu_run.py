"""The GPU run: what this project measures and checks on an offline GPU machine, in two calls of the `run` tool
(docs/testing.md#the-gpu-run), each with carry [".whl"] (benchmarks/gpu_wheels.txt) and timeout_s 600:

    python3 benchmarks/gpu_run.py --call 1 --budget 570   # the question: ceilings, unit, step, long, profile, bandwidth
    python3 benchmarks/gpu_run.py --call 2 --budget 570   # then: the full tables, the kernels' tests on the device

Each stage (CALLS) a subprocess under `timeout -s INT`, writing its JSON under `--out` ($OUT) as it goes; a failing
stage is recorded and the run goes on. Fixed batches, no search. The Triton unit is timed after the unit stage found
its values and gradients right (else the later stages measure PyTorch's alone); give call 2 `--kernels torch` if call
1 found it wrong. Rehearsed with `--device cpu` (tiny sizes). Standard library only: it runs before the wheels install.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".whl"  # benchmarks/gpu_wheels.txt, downloaded as its first lines say
SITE = Path("/tmp/gpu_run/site")  # where the wheels install (kept on a warm machine)
KERNEL_TESTS = ("test_paths_property.py", "test_sgu_kernels.py")  # found by name under tests/
TEST_TIMEOUT = 60  # seconds for one test (pytest-timeout, where installed)
# Seconds per stage of each call, in order: H200 records of 2026-11-28 (benchmarks/results/gpu_run_2026-11-28*.json,
# speed_gpu_2026-11-28*.json), each stage's process start (~10 s) included. Preflight: the wheels installed and the
# versions imported (the old preflight took 28-38 s with a compiled step now gone). ceilings: a 1 GiB copy and an 8192^3
# product. unit: three units compiled (~10 s each), timed, profiled. step: three gMLP-base models compiled (11 s, 4 s
# and ~11 s first calls), paired over 3 rounds of 1 s. long: 3 models at 8,192 and 16,384 tokens, eager, training and
# inference. profile: four steps compiled again (inductor's cache warm). bandwidth: the unit compiled with inductor's
# caches off. tables: benchmarks/speed/gpu.py's PARTS in priority order until their deadline. kernel_tests: the
# kernels' file took 80 s on the H200 (and the model's property test did not finish in what was left).
CALLS = {
    1: {"preflight": 25, "ceilings": 15, "unit": 90, "step": 150, "long": 120, "profile": 60, "bandwidth": 80},
    2: {"preflight": 25, "tables": 385, "kernel_tests": 160},
}
MEASURING, STAGE_MODULE = ("ceilings", "unit", "step", "long", "profile", "bandwidth"), "benchmarks.speed.gpu_stages"
GRACE = 15  # seconds between the SIGINT of `timeout` and its SIGKILL
ERROR = re.compile(r"\b\w*(Error|Exception): \S")
OUTCOMES = {0: "ok", 124: "timed out (SIGINT)", 137: "timed out (killed)"}  # timeout's exit codes


class Run:
    """The run's record (gpu_run.json under `out`) and its clock: a stage gets the time left less the later ones'."""

    def __init__(self, out: Path, budgets: dict[str, float]):
        self.out, self.budgets = out, budgets
        self.end = time.monotonic() + sum(budgets.values())
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.record = {"started": started, "budget_seconds": sum(budgets.values()), "stages": {}}
        out.mkdir(parents=True, exist_ok=True)
        self.log = out / "gpu_run.log"

    def seconds_for(self, stage: str) -> float:
        later = list(self.budgets)[list(self.budgets).index(stage) + 1 :]
        return self.end - time.monotonic() - sum(self.budgets[name] for name in later)

    def save(self) -> None:
        (self.out / "gpu_run.json").write_text(json.dumps(self.record, indent=1))

    def run(self, stage: str, argv: list[str], env: dict | None, seconds: float | None = None) -> dict:
        """`argv` as a subprocess into the log, stopped by SIGINT when its time is up (at most what the run leaves the
        stage) and killed GRACE seconds later; the outcome recorded under the stage's name."""
        seconds = min(seconds or float("inf"), self.seconds_for(stage))
        entry = {"command": argv, "seconds_allowed": round(seconds)}
        self.record["stages"].setdefault(stage, {"runs": []})["runs"].append(entry)
        if seconds < 5:
            entry["outcome"] = "not run: no time left"
            self.save()
            return entry
        start = time.monotonic()
        with self.log.open("a") as log:
            shown = ("<script>" if "\n" in arg else arg for arg in argv)  # a `-c` script is in the record
            log.write(f"\n==== {stage}: $ {' '.join(shown)}\n")
            log.flush()
            offset = log.tell()
            command = ["timeout", "-s", "INT", "-k", str(GRACE), str(int(seconds)), *argv]
            options = {"cwd": ROOT, "env": env, "stdout": log, "stderr": subprocess.STDOUT}
            try:
                code = subprocess.run(command, check=False, timeout=seconds + 2 * GRACE, **options).returncode
            except (OSError, subprocess.TimeoutExpired) as error:
                code, entry["error"] = None, f"{type(error).__name__}: {error}"
        entry |= {"seconds": round(time.monotonic() - start, 1), "returncode": code}
        entry["outcome"] = OUTCOMES.get(code, f"failed ({code})")
        if code != 0:
            lines = self.log.read_bytes()[offset:].decode(errors="replace").splitlines()
            entry["log_tail"] = lines[-25:]
            # The exception itself, which a launcher's report (torchrun's) can push out of the tail.
            entry["last_error"] = next((line for line in reversed(lines) if ERROR.search(line)), None)
        self.save()
        return entry


def junit_summary(path: Path) -> dict:
    """pytest's counts and its failed tests from its JUnit XML report (written on SIGINT too)."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as error:
        return {"report": f"none ({type(error).__name__})"}
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failed = [
        f"{case.get('classname')}::{case.get('name')}: {(problem.get('message') or '')[:300]}"
        for case in suite.iter("testcase")
        for problem in (case.find("failure"), case.find("error"))
        if problem is not None
    ]
    return counts | {"failed": failed[:50]}


def json_file(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def install_wheels(wheels: Path, site: Path, python: str) -> dict:
    """The wheels installed into `site` (for PYTHONPATH) with pip, unless it holds them already (a warm machine)."""
    names = sorted(file.name for file in wheels.glob("*.whl"))
    marker = site / ".gpu_run_wheels.json"
    if not names or json_file(marker) == names:
        return {"wheels": names, "how": f"none in {wheels}" if not names else f"already in {site}"}
    options = ["--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site)]
    files = [str(wheels / name) for name in names]
    subprocess.run([python, "-m", "pip", "install", "-q", *options, *files], check=True)
    marker.write_text(json.dumps(names))
    return {"wheels": names, "how": f"pip install --target {site}"}


# What the preflight imports, from the installed wheels: the versions and the device.
CHECK = """
import json, sys
import accelerate, torch, transformers, triton, pytest
report = {module.__name__: module.__version__ for module in (accelerate, torch, transformers, triton, pytest)}
report["python_version"] = sys.version.split()[0]
device = torch.device(sys.argv[1])
if device.type == "cuda":
    report["device"] = torch.cuda.get_device_name(device)
    report["memory_gib"] = torch.cuda.get_device_properties(device).total_memory / 2**30
print(json.dumps(report), flush=True)
"""


def preflight(run: Run, args) -> dict:
    """What the machine has (a C compiler and Python.h, which Triton builds its launcher with; the wheels installed;
    the versions and the device); returns every stage's environment: the wheels first on the path, offline."""
    compilers = (os.environ.get("CC"), "cc", "gcc", "clang")
    compiler = next((path for name in compilers if name and (path := shutil.which(name))), None)
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    found = {"python": sys.executable, "c_compiler": compiler, "python_h": header.is_file()}
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        found["nvidia_smi"] = subprocess.run(query, check=False, capture_output=True, text=True).stdout.strip()
    try:
        found["wheels"] = install_wheels(WHEELS, args.site, sys.executable)
    except (OSError, subprocess.CalledProcessError) as error:
        found["wheels"] = {"error": f"{type(error).__name__}: {error}"}
    run.record["preflight"] = found
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(args.site), os.environ.get("PYTHONPATH")]))}
    env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env |= {"PYTHONUNBUFFERED": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", CHECK, args.device], check=False, env=env, cwd=ROOT, capture_output=True, timeout=120
    )
    found |= json.loads(probe.stdout) if probe.returncode == 0 else {"import_error": probe.stderr[-2000:].decode()}
    run.save()
    return env


def kernel_tests(run: Run, args, env: dict) -> None:
    """The kernels' tests on the device, pytest's counts and failures (and any test file not found) recorded."""
    found = {name: sorted(ROOT.glob(f"tests/**/{name}")) for name in KERNEL_TESTS}
    files = [str(path.relative_to(ROOT)) for paths in found.values() for path in paths]
    report = args.out / "kernel_tests.xml"
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", f"--junitxml={report}"]
    pytest += ["-o", f"timeout={TEST_TIMEOUT}", "--device", args.device, *files]
    if files:
        run.run("kernel_tests", pytest, env)
    missing = [name for name, paths in found.items() if not paths]
    summary = junit_summary(report) if files else {}
    stage = run.record["stages"].setdefault("kernel_tests", {"runs": []}) | {"files": files, "missing": missing}
    run.record["stages"]["kernel_tests"] = stage | summary
    run.save()


def measure(run: Run, args, env: dict, stage: str, kernels: list[str]) -> dict:
    """One of MEASURING in its own process; its record (STAGE.json under `out`) summarised into the run's."""
    argv = [sys.executable, "-m", STAGE_MODULE, stage, "--device", args.device]
    run.run(stage, [*argv, "--out", str(args.out), "--kernels", ",".join(kernels)], env)
    written = json_file(args.out / f"{stage}.json") or {}
    run.record["stages"][stage] |= {"errors": written.get("errors"), "file": f"{stage}.json" if written else None}
    run.save()
    return written


def checked_kernels(run: Run, kernels: list[str], unit: dict) -> list[str]:
    """`kernels` less the Triton unit unless the unit stage found its values and gradients right."""
    if "triton" in kernels and not unit.get("triton_correct"):
        run.record["triton_left_out"] = unit.get("triton_errors") or (
            unit.get("errors") or "the unit stage did not run"
        )
        return [kernel for kernel in kernels if kernel != "triton"]
    return kernels


def tables(run: Run, args, env: dict, kernels: list[str]) -> None:
    """The speed benchmark's gpu section (the full tables), ending inside its stage (its deadline, then SIGINT)."""
    seconds = run.seconds_for("tables")
    output = args.out / "speed_gpu.json"
    argv = [sys.executable, "-m", "benchmarks.speed", "--device", args.device, "--sections", "gpu", "--rounds", "3"]
    argv += ["--min-run-time", "0", "--deadline-at", str(time.time() + seconds - 2 * GRACE), "--output", str(output)]
    if args.device == "cpu":  # the compiled parts cannot compile the Triton op under its interpreter
        kernels = [kernel for kernel in kernels if kernel != "triton"]
        argv += ["--quick", "--threads", "1"]  # one thread: tiny steps on two spend their time in OpenMP's waits
    argv += ["--gpu-kernels", ",".join(kernels)]
    if args.parts:
        argv += ["--gpu-parts", args.parts]
    run.run("tables", argv, env, seconds=seconds - GRACE)
    result = (json_file(output) or {}).get("gpu", {})
    stage = run.record["stages"]["tables"] | {"sgu_kernels": result.get("sgu_kernels")}
    run.record["stages"]["tables"] = stage | {key: result.get(key) for key in ("part_seconds", "not_run", "errors")}
    run.save()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="benchmarks/gpu_run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--call", type=int, choices=list(CALLS), default=1, help=f"the call's stages: {CALLS}")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-run-out")), help="default: $OUT")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a rehearsal at tiny sizes")
    parser.add_argument("--stages", type=lambda text: text.split(","), help="some of the call's stages (default: all)")
    parser.add_argument(
        "--budget", type=float, help="seconds for the run: every stage's share scaled but the preflight's"
    )
    parser.add_argument("--kernels", default="triton,torch", help="the sgu_kernel values measured (default: both)")
    parser.add_argument("--parts", help="the tables stage's parts (benchmarks/speed/gpu.py's PARTS; default: all)")
    parser.add_argument("--site", type=Path, default=SITE, help="where the wheels install")
    return parser.parse_args(argv)


def budgets(args) -> dict[str, float]:
    """The call's stages to run and their seconds (`--budget` scales every stage's but the preflight's)."""
    chosen = dict(CALLS[args.call])
    if args.stages:
        if unknown := sorted(set(args.stages) - set(chosen)):
            raise SystemExit(
                f"error: call {args.call} has no stage {', '.join(unknown)}; its stages are {', '.join(chosen)}"
            )
        chosen = {stage: seconds for stage, seconds in chosen.items() if stage == "preflight" or stage in args.stages}
    if args.budget:
        scale = (args.budget - chosen["preflight"]) / (sum(chosen.values()) - chosen["preflight"])
        chosen = {stage: seconds if stage == "preflight" else seconds * scale for stage, seconds in chosen.items()}
    return chosen


def main(argv=None) -> int:
    args = parse_args(argv)
    run = Run(args.out, budgets(args))
    run.record["call"] = args.call
    env = preflight(run, args)
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # the Triton unit on CPU tensors, through Triton's interpreter
    kernels = args.kernels.split(",")
    for stage in list(run.budgets)[1:]:
        if stage in MEASURING:
            written = measure(run, args, env, stage, kernels)
            if stage == "unit":
                kernels = checked_kernels(run, kernels, written)
        elif stage == "tables":
            tables(run, args, env, kernels)
        else:
            kernel_tests(run, args, env)
    run.record["seconds"] = round(sum(run.budgets.values()) - (run.end - time.monotonic()), 1)
    run.save()
    print(json.dumps(run.record.get("preflight"), indent=1))
    for stage, entry in run.record["stages"].items():
        outcomes = ", ".join(f"{item['outcome']} in {item.get('seconds', 0)} s" for item in entry["runs"])
        print(f"{stage}: {outcomes}; errors: {entry.get('errors') or entry.get('failed') or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
