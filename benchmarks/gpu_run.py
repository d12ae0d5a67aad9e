"""The GPU run: what this project checks and measures on an offline GPU machine, in stages of one call each.

Here, once, with access to PyPI (the wheels of benchmarks/gpu_wheels.txt and Transformers' common tests of that
transformers version, into .whl/, which git ignores and the run carries):

    python benchmarks/gpu_run.py prepare

There, in a copy of the repository with .whl/ (the machine's own python3 with torch; --out defaults to $OUT):

    python3 benchmarks/gpu_run.py A    # 540 s: the tests on the device (fp32, bf16), run_glue.py, FSDP2 with a
                                       # checkpoint resumed, run_mlm.py of gmlp-base compiled;
                                       # --parts tests_bf16,glue,fsdp,mlm for some of them (A and B do not fit
                                       # one 15-minute window together)
    python3 benchmarks/gpu_run.py B    # 380 s: the speed benchmark's gpu section, most important part first
    python3 benchmarks/gpu_run.py C --resume speed_gpu.json    # 540 s: what B did not reach, with B's batches

Every stage begins with a preflight: the GPU's name, a C compiler and Python.h (Triton builds its launcher with
them), the wheels installed into --site (with pip, or unpacked where the image has no pip), the versions imported
from there, and in stage A one small compiled step on the device. Each part then runs as a subprocess under
`timeout -s INT` (pytest prints its failures and summary on SIGINT; the benchmark saves what it measured), within the
time the stage's later parts leave it, so that the stage ends inside its budget; a part that fails or runs out of time
is recorded with its error and the stage goes on. Each stage writes under --out, as each part ends, stage_<X>.json
(the preflight, and per part its command, seconds, outcome and results) and one log per part: at most 8 files.

Rehearsed on the CPU with `--device cpu --size tiny` (tests/test_gpu_run.py tests the logic with stand-in parts).
This file needs only Python's standard library: it runs before the wheels are installed.
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
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEEL_LIST = ROOT / "benchmarks" / "gpu_wheels.txt"
# The platforms of the GPU machines (x86-64 Linux, Python 3.12); the listed wheels are pure Python.
WHEEL_PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64"]
TESTS_CACHE = "transformers-tests"  # under the wheels' folder: Transformers' common tests (tests/transformers_common)
# The device-aware test modules (docs/testing.md); on a GPU the others skip.
DEVICE_TESTS = (
    "tests/test_modeling.py",
    "tests/test_generation.py",
    "tests/test_bf16.py",
    "tests/test_peft.py",
    "tests/test_vision.py",
    "tests/test_mlm_sparse_logits.py",
    "tests/test_trainer_losses.py",
    "tests/test_devices.py",
    "tests/test_modeling_common_gmlp.py",
)
TEST_TIMEOUT = 60  # seconds for one test (pytest-timeout), so that one hung test does not take the stage
# The README's FSDP2 settings: each GMLPLayer its own group.
FSDP_CONFIG = '{"version": 2, "transformer_layer_cls_to_wrap": ["GMLPLayer"]}'
# Seconds each stage may take, and each part's share: a part may also use what the parts before it left unused. Stage
# A's are what each part took on an H200 (2026-11-26), with a margin: tests_fp32 100 s, glue's tokenizer 17 s, the
# first FSDP run 33 s, and more than the 20 s, 7 s, 12 s and 51 s that bf16's tests, run_glue.py, the resumed FSDP
# run and the compiled run_mlm.py were left. All of A and B do not fit one 15-minute window: `--parts` picks A's.
BUDGETS = {
    "A": {"preflight": 45, "tests_fp32": 125, "tests_bf16": 75, "glue": 60, "fsdp": 75, "mlm": 160},
    "B": {"preflight": 20, "speed_gpu": 360},
    "C": {"preflight": 20, "speed_gpu": 520},
}
GRACE = 15  # seconds between the SIGINT of `timeout` and its SIGKILL
SUMMARY = re.compile(r"^=* ?(\d+ (passed|failed|error|errors|skipped|deselected)\b.*?) ?=*$")
OUTCOME = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
ERROR = re.compile(r"\b\w*(Error|Exception): \S")


# ---- running parts ----------------------------------------------------------------------------------------------
class Stage:
    """One stage's record (stage_<X>.json under `out`, rewritten as each part ends) and its clock: a part gets the
    time left less what the stage's later parts are due."""

    def __init__(self, name: str, out: Path, budgets: dict[str, float]):
        self.name, self.out, self.budgets = name, out, budgets
        self.end = time.monotonic() + sum(budgets.values())
        self.record = {
            "stage": name,
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "budget_seconds": sum(budgets.values()),
            "parts": {},
        }
        out.mkdir(parents=True, exist_ok=True)

    def seconds_for(self, part: str) -> float:
        later = list(self.budgets)[list(self.budgets).index(part) + 1 :]
        return self.end - time.monotonic() - sum(self.budgets[name] for name in later)

    def save(self) -> None:
        (self.out / f"stage_{self.name}.json").write_text(json.dumps(self.record, indent=1))

    def run(self, part: str, argv: list[str], env: dict, seconds: float | None = None, log: str | None = None) -> dict:
        """`argv` as a subprocess with its output in the log `log` (default: the part's name), stopped by SIGINT when
        its time is up (`seconds`, at most what the stage leaves it) and killed `GRACE` seconds later; the outcome
        is recorded under the part's name (several commands of one part append to its log)."""
        seconds = min(seconds or float("inf"), self.seconds_for(part))
        entry = self.record["parts"].setdefault(part, {"runs": []})
        run = {"command": argv, "seconds_allowed": round(seconds)}
        entry["runs"].append(run)
        if seconds < 5:
            run["outcome"] = "not run: no time left in the stage"
            self.save()
            return run
        log_path = self.out / f"{log or part}.log"
        command = ["timeout", "-s", "INT", "-k", str(GRACE), str(int(seconds)), *argv]
        start = time.monotonic()
        with log_path.open("a") as log_file:
            shown = ("<script>" if "\n" in arg else arg for arg in argv)  # a `-c` script is in the record
            log_file.write(f"$ {' '.join(shown)}\n")
            log_file.flush()
            try:
                limit = seconds + 2 * GRACE
                output = {"stdout": log_file, "stderr": subprocess.STDOUT}
                code = subprocess.run(command, check=False, cwd=ROOT, env=env, timeout=limit, **output).returncode
            except (OSError, subprocess.TimeoutExpired) as error:
                code, run["error"] = None, f"{type(error).__name__}: {error}"
        run["seconds"] = round(time.monotonic() - start, 1)
        run["returncode"] = code
        run["outcome"] = {0: "ok", 124: "timed out (SIGINT)", 137: "timed out (killed)"}.get(code, f"failed ({code})")
        run["log"] = log_path.name
        if code != 0:
            lines = log_path.read_text(errors="replace").splitlines()
            run["log_tail"] = lines[-25:]
            # The exception itself, which a launcher's report (torchrun's) can push out of the tail.
            run["last_error"] = next((line for line in reversed(lines) if ERROR.search(line)), None)
        self.save()
        return run


def pytest_summary(log: Path) -> dict:
    """pytest's closing counts and its FAILED / ERROR lines, from a log of `pytest -v`; where pytest was stopped
    before its summary (a signal during its teardown), the counts of its per-test lines."""
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    counts = [match.group(1) for line in lines if (match := SUMMARY.match(line.strip()))]
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    summary = {"summary": counts[-1] if counts else None}
    if not counts:
        outcomes = [match.group(1) for line in lines if "::" in line and not line.startswith(("FAILED ", "ERROR "))
                    for match in [OUTCOME.search(line)] if match]  # fmt: skip
        summary["counted"] = {outcome.lower(): outcomes.count(outcome) for outcome in sorted(set(outcomes))}
        failed = [line for line in lines if "::" in line and re.search(r"\b(FAILED|ERROR)\b", line)]
    return summary | {"failed": failed[:100], "failed_count": len(failed)}


def json_file(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---- preflight --------------------------------------------------------------------------------------------------
def c_compiler() -> str | None:
    """The C compiler Triton would use ($CC, cc, gcc or clang) and its version line, or None."""
    for name in filter(None, (os.environ.get("CC"), "cc", "gcc", "clang")):
        if path := shutil.which(name):
            try:
                version = subprocess.run(
                    [path, "--version"], check=False, capture_output=True, text=True, timeout=20
                ).stdout
            except (OSError, subprocess.TimeoutExpired):
                version = ""
            return f"{path}: {version.splitlines()[0] if version else '(no version)'}"
    return None


def python_header() -> str | None:
    """Where this interpreter's Python.h is, or None."""
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return str(header) if header.is_file() else None


def install_wheels(wheels: Path, site: Path, python: str) -> dict:
    """The wheels of `wheels` installed into `site` (a folder for PYTHONPATH): with pip where the interpreter has it,
    else unpacked (a wheel is a zip archive; its .data/purelib and platlib go to the top, its scripts are left out).
    Skipped when `site` holds these wheels already."""
    files = sorted(wheels.glob("*.whl"))
    if not files:
        return {"wheels": [], "how": f"none in {wheels}"}
    names = [file.name for file in files]
    marker = site / ".gpu_run_wheels.json"
    if json_file(marker) == names:
        return {"wheels": names, "how": f"already in {site}"}
    has_pip = subprocess.run([python, "-m", "pip", "--version"], check=False, capture_output=True).returncode == 0
    if has_pip:
        options = ["--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site)]
        subprocess.run([python, "-m", "pip", "install", "-q", *options, *map(str, files)], check=True)
    else:
        site.mkdir(parents=True, exist_ok=True)
        for file in files:
            with zipfile.ZipFile(file) as archive:
                for member in archive.infolist():
                    parts = Path(member.filename).parts
                    if parts[0].endswith(".data"):
                        if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                            continue
                        member.filename = str(Path(*parts[2:]))
                    archive.extract(member, site)
    marker.write_text(json.dumps(names))
    return {"wheels": names, "how": f"pip install --target {site}" if has_pip else f"unpacked into {site} (no pip)"}


# What the preflight imports, from the installed wheels: the versions, the device, one small compiled step.
CHECK = """
import json, sys, time
import torch, transformers, datasets, evaluate, peft, pytest
device = torch.device(sys.argv[1])
report = {name: module.__version__ for name, module in
          {"torch": torch, "transformers": transformers, "datasets": datasets, "evaluate": evaluate,
           "peft": peft, "pytest": pytest}.items()}
report["python_version"] = sys.version.split()[0]
for plugin in ("pytest_timeout", "xdist"):
    try:
        __import__(plugin)
        report[plugin] = True
    except ImportError:
        report[plugin] = False
if device.type == "cuda":
    report["device"] = torch.cuda.get_device_name(device)
    report["memory_gib"] = torch.cuda.get_device_properties(device).total_memory / 2**30
print(json.dumps(report), flush=True)
if sys.argv[2] == "compile":
    start = time.monotonic()
    layer = torch.nn.Linear(64, 64, device=device)
    step = torch.compile(lambda x: torch.nn.functional.gelu(layer(x)).square().mean())
    step(torch.randn(8, 64, device=device)).backward()
    print(json.dumps({"compiled_step_seconds": time.monotonic() - start}), flush=True)
"""


def environment(site: Path, wheels: Path) -> dict:
    """The environment of every part: the installed wheels first on the path, offline, unbuffered output, the
    carried common tests."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    env |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env |= {
        "PYTHONUNBUFFERED": "1",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }
    if (wheels / TESTS_CACHE).is_dir():
        env["GMLP_TRANSFORMERS_TESTS_CACHE"] = str(wheels / TESTS_CACHE)
    return env


def preflight(stage: Stage, args, compile_step: bool) -> tuple[dict, dict]:
    """The checks every stage starts with; returns their record and the parts' environment."""
    found = {"python": sys.executable, "timeout": shutil.which("timeout")}
    found |= {"c_compiler": c_compiler(), "python_h": python_header()}
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        found["nvidia_smi"] = subprocess.run(query, check=False, capture_output=True, text=True).stdout.strip()
    try:
        found["wheels"] = install_wheels(args.wheels, args.site, sys.executable)
    except (OSError, subprocess.CalledProcessError, zipfile.BadZipFile) as error:
        found["wheels"] = {"error": f"{type(error).__name__}: {error}"}
    found["common_tests"] = str(args.wheels / TESTS_CACHE) if (args.wheels / TESTS_CACHE).is_dir() else None
    stage.record["preflight"] = found
    env = environment(args.site, args.wheels)
    argv = [sys.executable, "-c", CHECK, args.device, "compile" if compile_step else "versions"]
    stage.run("preflight", argv, env)
    for line in (args.out / "preflight.log").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            found |= json.loads(line)
    found["compile_ok"] = "compiled_step_seconds" in found if compile_step else None
    stage.save()
    return found, env


# ---- stage A ----------------------------------------------------------------------------------------------------
def sizes(args) -> dict:
    """The scripts' model and steps: gmlp-base on the GPU, gmlp-tiny and fewer steps in a CPU rehearsal."""
    if args.size == "base":
        return {"config": "gmlp-base", "steps": 30, "batch": 32, "fsdp_steps": 4}
    return {"config": "gmlp-tiny", "steps": 6, "batch": 8, "fsdp_steps": 2}


FIXTURES = """
import sys
from gmlp.tasks.mlm import DEFAULT_TRAIN_FILE
from gmlp.tokenization_gmlp import train_tokenizer
train_tokenizer([DEFAULT_TRAIN_FILE, sys.argv[2]], vocab_size=int(sys.argv[3])).save_pretrained(sys.argv[1])
"""
VOCABULARY = 8192
GOOD = ["a warm and moving film", "wonderful acting and a fine story", "i loved every minute", "a funny delight"]
BAD = ["a dull and boring mess", "terrible acting and a weak plot", "i hated every minute", "a cold tedious bore"]


def write_glue(folder: Path) -> Path:
    """A small SST-2 in GLUE's layout (train, dev, test), for run_glue.py --glue_dir."""
    task = folder / "SST-2"
    task.mkdir(parents=True, exist_ok=True)
    rows = [f"{GOOD[i % 4]} , said critic {i}\t1\n{BAD[i % 4]} , said critic {i}\t0\n" for i in range(48)]
    (task / "train.tsv").write_text("sentence\tlabel\n" + "".join(rows))
    (task / "dev.tsv").write_text("sentence\tlabel\n" + "".join(rows[:8]))
    (task / "test.tsv").write_text("index\tsentence\n" + "".join(f"{i}\t{t}\n" for i, t in enumerate(GOOD + BAD)))
    return task / "train.tsv"


def script_flags(args, output: Path, steps: int, **options) -> list[str]:
    """The flags every script run shares: a fresh output folder, no reporting, bf16."""
    flags = ["--output_dir", str(output), "--report_to", "none", "--max_steps", str(steps), "--bf16"]
    flags += ["--disable_tqdm", "true"]
    flags += ["--per_device_train_batch_size", str(sizes(args)["batch"]), "--logging_steps", "5"]
    for name, value in options.items():
        flags += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return flags


def stage_a(stage: Stage, args, env: dict, preflight_found: dict) -> None:
    python = [sys.executable, "-u"]
    pytest = [*python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rfE", "--durations", "10"]
    pytest += ["--device", args.device]
    if preflight_found.get("pytest_timeout"):
        pytest += ["--timeout", str(TEST_TIMEOUT)]
    if preflight_found.get("xdist") and args.test_workers > 1:
        pytest += ["-n", str(args.test_workers)]
    for part, dtype in (("tests_fp32", "fp32"), ("tests_bf16", "bf16")):
        if part not in stage.budgets:
            continue
        stage.run(part, [*pytest, "--dtype", dtype, *DEVICE_TESTS], env)
        stage.record["parts"][part] |= pytest_summary(args.out / f"{part}.log")
        stage.save()

    scripts = [part for part in ("glue", "fsdp", "mlm") if part in stage.budgets]
    if not scripts:
        return
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    size = sizes(args)
    tokenizer = work / "tokenizer"
    sentences = write_glue(work / "glue")
    base = ["--config_name", size["config"], "--config_overrides", f"vocab_size={VOCABULARY}"]
    base += ["--tokenizer_name", str(tokenizer)]
    # The tokenizer every script loads, as the first script part's first command.
    stage.run(scripts[0], [*python, "-c", FIXTURES, str(tokenizer), str(sentences), str(VOCABULARY)], env)
    if "glue" in stage.budgets:  # run_glue.py: a classifier from the preset, trained, evaluated and predicting
        glue = work / "glue_out"
        flags = script_flags(args, glue, size["steps"], task_name="sst2", glue_dir=work / "glue", max_seq_length=64)
        flags += ["--do_train", "--do_eval", "--do_predict", "--save_strategy", "no"]
        stage.run("glue", [*python, "run_glue.py", *base, *flags], env)
        stage.record["parts"]["glue"]["results"] = json_file(glue / "all_results.json")
        stage.save()
    # FSDP2 through the Trainer (the README's command, one process): a checkpoint, then a resumed run.
    if "fsdp" in stage.budgets:
        fsdp = work / "fsdp"
        torchrun = [*python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "run_mlm.py"]
        steps = size["fsdp_steps"]
        flags = ["--do_train", "--max_seq_length", "128", "--save_strategy", "steps", "--save_steps", str(steps // 2)]
        flags += ["--fsdp", "--fsdp_config", FSDP_CONFIG]
        first = stage.run("fsdp", [*torchrun, *base, *script_flags(args, fsdp, steps), *flags], env)
        checkpoint = fsdp / f"checkpoint-{steps}"
        if checkpoint.is_dir():
            stage.record["parts"]["fsdp"]["checkpoint"] = sorted(path.name for path in checkpoint.iterdir())
        if first.get("returncode") == 0:
            resumed = script_flags(args, fsdp, steps + steps // 2, resume_from_checkpoint=fsdp)
            stage.run("fsdp", [*torchrun, *base, *resumed, *flags], env)
            state = json_file(fsdp / "trainer_state.json") or {}
            stage.record["parts"]["fsdp"]["global_step_after_resume"] = state.get("global_step")
        stage.save()
    if "mlm" in stage.budgets:  # run_mlm.py as a user pretrains: gmlp-base, bf16, torch.compile
        mlm = work / "mlm"
        flags = script_flags(args, mlm, size["steps"], max_seq_length=128, save_strategy="no")
        flags += ["--do_train", "--torch_compile", "--dataloader_drop_last"]
        stage.run("mlm", [*python, "run_mlm.py", *base, *flags], env)
        stage.record["parts"]["mlm"]["results"] = json_file(mlm / "train_results.json")
        stage.save()


# ---- stages B and C ---------------------------------------------------------------------------------------------
def stage_b(stage: Stage, args, env: dict, preflight_found: dict) -> None:
    """The speed benchmark's gpu section, ending a few seconds inside the stage (its own --deadline, then SIGINT)."""
    seconds = stage.seconds_for("speed_gpu")
    output = args.out / "speed_gpu.json"
    argv = [sys.executable, "-u", "-m", "benchmarks.speed", "--device", args.device, "--sections", "gpu"]
    argv += ["--rounds", "5", "--repeats", "2", "--deadline", str(int(seconds - 2 * GRACE)), "--output", str(output)]
    if args.size == "tiny":
        argv += ["--quick", "--gpu-fft-layers", "1"]
    if not (preflight_found.get("c_compiler") and preflight_found.get("python_h")):
        argv.append("--no-gpu-compile")
        stage.record["note"] = "no C compiler or Python.h: Triton cannot build its launcher, so nothing is compiled"
    if stage.name == "C":
        argv += ["--gpu-resume", str(args.resume)]
    stage.run("speed_gpu", argv, env, seconds=seconds - GRACE)
    result = (json_file(output) or {}).get("gpu", {})
    stage.record["parts"]["speed_gpu"] |= {
        key: result.get(key) for key in ("part_seconds", "not_run", "errors", "batches")
    }
    stage.save()


# ---- prepare (here, with PyPI) ------------------------------------------------------------------------------------
def prepare(wheels: Path) -> None:
    """Download the wheel list and Transformers' common tests of its transformers version into `wheels`."""
    wheels.mkdir(parents=True, exist_ok=True)
    download = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", *WHEEL_PLATFORM]
    subprocess.run([*download, "-d", str(wheels), "-r", str(WHEEL_LIST)], check=True)
    listed = dict(line.split("==") for line in WHEEL_LIST.read_text().splitlines() if "==" in line)
    target = wheels / TESTS_CACHE
    if not target.is_dir():
        import transformers

        if transformers.__version__ != listed["transformers"]:
            sys.exit(
                f"The common tests are fetched for the installed transformers ({transformers.__version__}); install "
                f"transformers=={listed['transformers']} (the wheel list's) here first."
            )
        sys.path.insert(0, str(ROOT / "tests"))
        from transformers_common.upstream import fetch

        fetch(target)
    size = sum(path.stat().st_size for path in wheels.rglob("*") if path.is_file())
    print(f"{wheels}: {len(list(wheels.glob('*.whl')))} wheels and {TESTS_CACHE}/, {size / 2**20:.0f} MiB")


# ---- the command line -------------------------------------------------------------------------------------------
def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="benchmarks/gpu_run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("stage", choices=("prepare", "A", "B", "C"))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-run-out")), help="default: $OUT")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a rehearsal")
    parser.add_argument("--size", choices=("base", "tiny"), default="base", help="tiny for a CPU rehearsal")
    parser.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="the carried wheels (default: .whl)")
    parser.add_argument("--site", type=Path, default=Path("/tmp/gpu_run/site"), help="where the wheels install")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu_run/work"), help="the scripts' data and outputs")
    parser.add_argument("--resume", type=Path, help="stage C: stage B's speed_gpu.json")
    parser.add_argument("--budget", type=float, help="seconds for the stage (default: the sum of its BUDGETS)")
    parser.add_argument(
        "--parts",
        type=lambda text: text.split(","),
        help="stage A: the parts to run, e.g. tests_bf16,glue,fsdp,mlm (default: all)",
    )
    parser.add_argument(
        "--test-workers",
        type=int,
        default=min(8, (os.cpu_count() or 2) // 2),
        help="pytest-xdist processes for the tests (stage A; default: half the cores, at most 8)",
    )
    args = parser.parse_args(argv)
    if args.stage == "C" and not (args.resume and args.resume.is_file()):
        parser.error("stage C needs --resume FILE: stage B's speed_gpu.json")
    return args


def stage_budgets(args) -> dict[str, float]:
    """The stage's parts (`--parts`, or all) and their seconds; `--budget` scales every part but the preflight."""
    budgets = dict(BUDGETS[args.stage])
    if args.parts:
        if unknown := (set(args.parts) - set(budgets)) | ({"preflight"} & set(args.parts)):
            raise SystemExit(f"Stage {args.stage} has no part {sorted(unknown)}; its parts: {list(budgets)[1:]}.")
        budgets = {part: seconds for part, seconds in budgets.items() if part == "preflight" or part in args.parts}
    if args.budget:
        parts = sum(budgets.values()) - budgets["preflight"]
        scale = (args.budget - budgets["preflight"]) / parts
        budgets = {part: seconds if part == "preflight" else seconds * scale for part, seconds in budgets.items()}
    return budgets


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.stage == "prepare":
        prepare(args.wheels)
        return 0
    budgets = stage_budgets(args)
    stage = Stage(args.stage, args.out, budgets)
    found, env = preflight(stage, args, compile_step=args.stage == "A")
    (stage_a if args.stage == "A" else stage_b)(stage, args, env, found)
    stage.record["seconds"] = round(sum(budgets.values()) - (stage.end - time.monotonic()), 1)
    stage.save()
    print(json.dumps(stage.record["preflight"], indent=1))
    for part, entry in stage.record["parts"].items():
        outcomes = ", ".join(f"{run['outcome']} in {run.get('seconds', 0)} s" for run in entry["runs"])
        print(f"{part}: {outcomes}; {entry.get('summary') or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
