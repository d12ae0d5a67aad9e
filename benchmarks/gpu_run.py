"""The GPU run: what this project checks and measures on an offline GPU machine, in one call of 540 s that leaves,
with the machine's start, a quick rerun (240 s) inside 15 minutes of device time (docs/testing.md#the-gpu-run):

    python3 benchmarks/gpu_run.py                        # with .whl/ (gpu_wheels.txt): every stage, into $OUT
    python3 benchmarks/gpu_run.py --quick --resume FILE  # a rerun in what is left, continuing its speed_gpu.json

Each stage (STAGES) a subprocess under `timeout -s INT`; a failing stage is recorded and the run goes on. Rehearsed
with `--device cpu`. Standard library only: it runs before the wheels install.
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
SITE, WORK = Path("/tmp/gpu_run/site"), Path("/tmp/gpu_run/work")  # the installed wheels, the FSDP runs' files
KERNEL_TESTS = ("test_sgu_kernels.py", "test_paths_property.py")  # found by name under tests/
TEST_TIMEOUT = 60  # seconds for one test (pytest-timeout, where installed)
# The documented FSDP2 settings (docs/scripts.md): each GMLPLayer its own group.
FSDP_CONFIG = '{"version": 2, "transformer_layer_cls_to_wrap": ["GMLPLayer"]}'
# Seconds per stage. The preflight took 28-38 s on an H200 with a compiled step that is gone; the two FSDP runs 33 s
# and about as much again; the kernels' tests 80 s on an H200 before the model's property test (2026-11-28); the speed
# stage is what the rest leaves (benchmarks/speed/gpu.py's PARTS in priority order).
STAGES = {"preflight": 25, "kernel_tests": 100, "speed": 345, "fsdp": 70}
QUICK = {"preflight": 20, "kernel_tests": 100, "speed": 120}
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


def kernel_tests(run: Run, args, env: dict) -> bool:
    """The kernels' tests on the device; True if every file was found, some test ran and none failed."""
    found = {name: sorted(ROOT.glob(f"tests/**/{name}")) for name in KERNEL_TESTS}
    files = [str(path.relative_to(ROOT)) for paths in found.values() for path in paths]
    report = args.out / "kernel_tests.xml"
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", f"--junitxml={report}"]
    pytest += ["-o", f"timeout={TEST_TIMEOUT}", "--device", args.device, *files]
    entry = run.run("kernel_tests", pytest, env) if files else {}
    missing = [name for name, paths in found.items() if not paths]
    summary = junit_summary(report) if files else {}
    stage = run.record["stages"].setdefault("kernel_tests", {"runs": []}) | {"files": files, "missing": missing}
    run.record["stages"]["kernel_tests"] = stage | summary
    run.save()
    ran = summary.get("tests", 0) - summary.get("skipped", 0)  # tests that skip on the device check nothing there
    return entry.get("returncode") == 0 and not missing and ran > 0


def speed(run: Run, args, env: dict, *, kernels_pass: bool) -> None:
    """The speed benchmark's gpu section, ending inside its stage (its deadline, then SIGINT)."""
    seconds = run.seconds_for("speed")
    output = args.out / "speed_gpu.json"
    argv = [sys.executable, "-m", "benchmarks.speed", "--device", args.device, "--sections", "gpu", "--rounds", "3"]
    argv += ["--min-run-time", "0", "--deadline-at", str(time.time() + seconds - 2 * GRACE), "--output", str(output)]
    argv += ["--gpu-kernels", "triton,torch" if kernels_pass else "torch"]
    if args.device == "cpu":
        argv += ["--quick", "--threads", "1"]  # one thread: tiny steps on two spend their time in OpenMP's waits
    if args.parts:
        argv += ["--gpu-parts", args.parts]
    if args.resume:
        argv += ["--gpu-resume", str(args.resume)]
    run.run("speed", argv, env, seconds=seconds - GRACE)
    result = (json_file(output) or {}).get("gpu", {})
    stage = run.record["stages"]["speed"] | {"sgu_kernels": result.get("sgu_kernels")}
    run.record["stages"]["speed"] = stage | {key: result.get(key) for key in ("part_seconds", "not_run", "errors")}
    run.save()


# The tokenizer the FSDP runs load, trained on the MLM script's own sample text.
TOKENIZER = """
import sys
from gmlp.tasks.mlm import DEFAULT_TRAIN_FILE
from gmlp.tokenization_gmlp import train_tokenizer
train_tokenizer([DEFAULT_TRAIN_FILE], vocab_size=8192).save_pretrained(sys.argv[1])
"""


def fsdp(run: Run, args, env: dict) -> None:
    """FSDP2 through the Trainer (the documented command, one process): a checkpoint, then a run resumed from it."""
    work = WORK
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run.run("fsdp", [sys.executable, "-c", TOKENIZER, str(work / "tokenizer")], env)
    config, steps = "gmlp-base" if args.device == "cuda" else "gmlp-tiny", 4
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "run_mlm.py"]
    tokenizer = str(work / "tokenizer")
    flags = ["--config_name", config, "--config_overrides", "vocab_size=8192", "--tokenizer_name", tokenizer]
    flags += ["--output_dir", str(work / "fsdp"), "--report_to", "none", "--bf16", "--disable_tqdm", "true"]
    flags += ["--do_train", "--per_device_train_batch_size", "8", "--max_seq_length", "128", "--logging_steps", "1"]
    flags += ["--save_strategy", "steps", "--save_steps", str(steps // 2), "--fsdp", "--fsdp_config", FSDP_CONFIG]
    first = run.run("fsdp", [*torchrun, *flags, "--max_steps", str(steps)], env)
    stage = run.record["stages"]["fsdp"]
    checkpoint = work / "fsdp" / f"checkpoint-{steps}"
    stage["checkpoint"] = sorted(path.name for path in checkpoint.iterdir()) if checkpoint.is_dir() else None
    if first.get("returncode") == 0:
        resumed = ["--max_steps", str(steps + steps // 2), "--resume_from_checkpoint", str(work / "fsdp")]
        run.run("fsdp", [*torchrun, *flags, *resumed], env)
        stage["global_step_after_resume"] = (json_file(work / "fsdp" / "trainer_state.json") or {}).get("global_step")
    run.save()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="benchmarks/gpu_run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-run-out")), help="default: $OUT")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a rehearsal at tiny sizes")
    parser.add_argument("--quick", action="store_true", help=f"the rerun's budget: {QUICK}")
    parser.add_argument("--stages", type=lambda text: text.split(","), help="some of the stages (default: all)")
    parser.add_argument(
        "--budget", type=float, help="seconds for the run: every stage's share scaled but the preflight's"
    )
    parser.add_argument("--parts", help="the speed stage's parts (benchmarks/speed/gpu.py's PARTS; default: all)")
    parser.add_argument("--resume", type=Path, help="a speed_gpu.json of an earlier run on this device to continue")
    parser.add_argument("--site", type=Path, default=SITE, help="where the wheels install")
    args = parser.parse_args(argv)
    if args.resume and not args.resume.is_file():
        parser.error(f"--resume {args.resume}: no such file; give the speed_gpu.json of an earlier run")
    return args


def budgets(args) -> dict[str, float]:
    """The stages to run and their seconds (`--budget` scales every stage's but the preflight's)."""
    chosen = dict(QUICK if args.quick else STAGES)
    if args.stages:
        if unknown := sorted(set(args.stages) - set(STAGES)):
            raise SystemExit(f"error: no stage {', '.join(unknown)}; the stages are {', '.join(STAGES)}")
        chosen = {stage: seconds for stage, seconds in chosen.items() if stage == "preflight" or stage in args.stages}
    if args.budget:
        scale = (args.budget - chosen["preflight"]) / (sum(chosen.values()) - chosen["preflight"])
        chosen = {stage: seconds if stage == "preflight" else seconds * scale for stage, seconds in chosen.items()}
    return chosen


def main(argv=None) -> int:
    args = parse_args(argv)
    run = Run(args.out, budgets(args))
    env = preflight(run, args)
    kernels_pass = kernel_tests(run, args, env) if "kernel_tests" in run.budgets else True
    if "speed" in run.budgets:
        speed(run, args, env, kernels_pass=kernels_pass)
    if "fsdp" in run.budgets:
        fsdp(run, args, env)
    run.record["seconds"] = round(sum(run.budgets.values()) - (run.end - time.monotonic()), 1)
    run.save()
    print(json.dumps(run.record["preflight"], indent=1))
    for stage, entry in run.record["stages"].items():
        outcomes = ", ".join(f"{item['outcome']} in {item.get('seconds', 0)} s" for item in entry["runs"])
        print(f"{stage}: {outcomes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
