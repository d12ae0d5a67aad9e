"""The GPU run's stages (benchmarks/gpu_run.py runs each in a process of its own), bf16, every model at one batch:

    python -m benchmarks.speed.gpu_stages STAGE --device cuda --out DIR [--kernels triton,torch]

Each writes DIR/STAGE.json as each measurement exists; a failing one is recorded under "errors" and the next runs.
At base size on a GPU; on the CPU (the rehearsal) at tiny sizes, the Triton unit under its interpreter and "compiled"
as dynamo with the eager backend (inductor's C++ takes minutes on two cores; the Triton op compiles on a GPU only).
"""

import argparse
import importlib.metadata
import json
import os
import statistics
import sys
import time
import traceback
from functools import partial
from pathlib import Path

import torch

from gmlp import GMLPConfig, GMLPForMaskedLM, modeling_gmlp
from gmlp.modeling_gmlp import GMLPSpatialGatingUnit, TokenLayout

from ..common import interleaved, matmul_peak_flops, mlm_batch, paired_ratio
from . import gpu_parts
from .gpu import datasheet_peak
from .gpu_parts import KEPT, MODERN, REFERENCE, ROUNDS, SIZES, Bench, by_kernel, is_matmul

# Per size: the unit's batch, length and d_ffn (the step's model's: a gate of d_ffn / 2, one SGU head), the long
# inputs' lengths and tokens a step, the seconds of timed calls per case and round, the matmul timed as the ceiling.
SPECS = {
    "base": {"unit": (64, 512, 3072), "long": ((8192, 16384), 32768), "min_run_time": 0.5, "matmul": 8192},
    "tiny": {"unit": (2, 32, 256), "long": ((64, 128), 256), "min_run_time": 0.0, "matmul": 256},
}
KERNELS = ("triton", "torch")  # the sgu_kernel values a stage can measure
# The unit's cases: model -> (sgu_kernel, recompute in training). Inference takes the first of each kernel.
UNITS = {"gmlp (torch)": ("torch", True), f"gmlp (torch){KEPT}": ("torch", False), "gmlp (triton)": ("triton", True)}
# The hybrid's values and gradients pass within this multiple of the PyTorch bf16 unit's largest error against
# float64 (same device, same inputs). Under the interpreter at three small shapes: PyTorch's 3.8e-3 to 2.6e-2, the
# hybrid's 3.9e-3 to 9.0e-3, no tensor more than 1.8x PyTorch's own.
TOLERANCE_FACTOR = 4
# The unit's traffic outside the spatial products, per token in gate widths C of bf16 (2C bytes), forward and
# backward (the unit stage's `row_bytes`). PyTorch's: the least a schedule needs that keeps the product P and the
# normalised gate v: forward Z2 read, v written, Z1 and P read, the output written (5); backward Z1, Z2, dOut, P and v
# read, dZ1, dZ2 and dM written, W^T dM read (9). The hybrid's, read off its kernels (gmlp/kernels_gmlp.py; the fp32
# statistics, 8 bytes a token, and W's cast, 2L / batch bytes a token, left out): forward `_gate_norm_kernel` reads Z2
# and writes v (2), `_combine_kernel` reads P and Z1 and writes `mixed` and the output (4); backward
# `_mixed_grad_kernel` reads Z2, Z1, dOut and `mixed` and writes v, dM and dZ1 (7), db's sum reads dM (1),
# `_gate_norm_backward_kernel` reads Z2 and W^T dM and writes dZ2 (3).
ROW_TRAFFIC = {"torch": {"forward": 5, "backward": 9}, "triton": {"forward": 6, "backward": 11}}


class Stage:
    """One stage's record (DIR/NAME.json, rewritten by `save`) and what its measurements share."""

    def __init__(self, name: str, device: str, out: Path, size: str, kernels: list[str], pins=()):
        self.name, self.device, self.out, self.size, self.kernels = name, torch.device(device), out, size, kernels
        self.spec, self.pins, self.on_gpu = SPECS[size], pins, self.device.type == "cuda"
        self.device_name = torch.cuda.get_device_name(self.device) if self.on_gpu else self.device.type
        self.backend, self.path = "inductor" if self.on_gpu else "eager", out / f"{name}.json"
        self.start = time.monotonic()
        self.result = {"stage": name, "device": self.device_name, "size": size, "backend": self.backend, "errors": {}}

    def save(self) -> None:
        self.result["seconds"] = round(time.monotonic() - self.start, 1)
        self.out.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.result, indent=1, default=str))

    def attempt(self, key: str, work):
        """`work()`, its failure recorded under `key` (and None returned); the record saved either way."""
        print(f"  {self.name}: {key} ...", file=sys.stderr, flush=True)
        try:
            return work()
        except Exception as error:  # noqa: BLE001 (a failing measurement is recorded and the next one runs)
            self.result["errors"][key] = f"{type(error).__name__}: {error}"[:2000]
            traceback.print_exc()
            return None
        finally:
            self.save()

    def keep(self, record: dict, key: str, value) -> None:
        """`value` under `key` of `record` (a part of this stage's), saved."""
        record[key] = value
        self.save()

    def bench(self, models: dict, batch=None, peak=None) -> Bench:
        """`models` at a fixed batch (default: their size's) for timing, their optimizers' states made."""
        length = next(iter(models.values())).config.max_position_embeddings
        datasheet, batch = datasheet_peak(self.device_name), batch or SIZES[self.size]["batch"]
        found = Bench(self.device, models, length, batch, peak, datasheet, self.spec["min_run_time"], self.backend)
        found.optimizers = {name: gpu_parts.make_optimizer(model, self.device) for name, model in models.items()}
        return found


def preflight(run: Stage) -> None:
    """Each pinned wheel imported at its pin (Transformers at the project's least version, which the image's 5.17 is
    not) and a tiny gMLP's bf16 forward and backward with each unit of `run.kernels` on the device; any failure exits 1
    with the reason."""
    versions = {"python": sys.version.split()[0], "torch": torch.__version__, "triton": None, "transformers": None}
    run.result["versions"] = {name: version or importlib.metadata.version(name) for name, version in versions.items()}
    for name, version in (pin.split("==") for pin in run.pins):
        if (installed := importlib.metadata.version(name)) != version:
            raise RuntimeError(f"{name} {installed} is imported where the wheel list pins {version}: install .whl/")
    if "triton" in run.kernels and modeling_gmlp.load_sgu_kernel() is None:
        raise RuntimeError("the Triton unit cannot run here (Triton missing, or no CUDA without TRITON_INTERPRET=1)")
    run.result["losses"] = {}
    for kernel in run.kernels:
        config = GMLPConfig.from_preset("gmlp-tiny", num_hidden_layers=2, sgu_kernel=kernel)
        torch.manual_seed(0)
        model = GMLPForMaskedLM(config).to(run.device)
        input_ids, labels = mlm_batch(2, config.max_position_embeddings, config.vocab_size, run.device)
        with torch.autocast(run.device.type, dtype=torch.bfloat16):
            loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        if not (loss.isfinite() and all(p.grad.isfinite().all() for p in model.parameters() if p.grad is not None)):
            raise RuntimeError(f"the {kernel} unit's loss or gradients are not finite")
        run.result["losses"][kernel] = loss.item()


class Unit:
    """gMLP's spatial gating unit alone (the model's own module, `sgu_kernel` chosen, compiled or eager) on bf16 inputs
    under autocast, W and b drawn away from their near-zero init; in inference or training (all inputs' gradients)."""

    def __init__(self, run: Stage, kernel: str, recompute: bool, compiled: bool = False, seed: int = 0):
        batch, length, width = run.spec["unit"]
        config = GMLPConfig(intermediate_size=width, max_position_embeddings=length, sgu_kernel=kernel)
        torch.manual_seed(seed)
        self.module = GMLPSpatialGatingUnit(config).to(run.device)
        with torch.no_grad():
            for parameter in self.module.parameters():
                parameter.uniform_(-1.0, 1.0).mul_(1.0 if parameter.ndim == 1 else length**-0.5)
        self.device, self.recompute = run.device, recompute
        self.layout = TokenLayout.sequential(length, run.device)
        generator = torch.Generator().manual_seed(seed + 1)
        self.projected = torch.randn(batch, length, width, generator=generator).to(run.device, torch.bfloat16)
        self.grad = torch.randn(batch, length, width // 2, generator=generator).to(run.device, torch.bfloat16)
        self.inputs = [self.projected.requires_grad_(True), *self.module.parameters()]
        self.function = torch.compile(self.apply, dynamic=False, backend=run.backend) if compiled else self.apply

    def apply(self, projected):  # recompute as the model's blocks do: in training only
        return self.module(projected, layout=self.layout, recompute=self.recompute and torch.is_grad_enabled())

    def forward(self):
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            return self.function(self.projected)

    def inference(self):
        with torch.no_grad():
            return [self.forward()]

    def training(self):
        out = self.forward()
        return [out, *torch.autograd.grad(out, self.inputs, self.grad)]

    def float64(self) -> list[torch.Tensor]:
        """The PyTorch unit's output and gradients in float64 from the same parameters and inputs."""
        self.module.double()
        projected = self.projected.detach().double().requires_grad_(True)
        with torch.autocast(self.device.type, enabled=False):
            out = self.module.gating(projected, self.layout, None, None)
        return [out.detach(), *torch.autograd.grad(out, [projected, *self.module.parameters()], self.grad.double())]


def relative_errors(case, expected: list[torch.Tensor]) -> dict[str, float]:
    """||got - expected|| / ||expected|| of the output and of every gradient that `case()` gives."""
    got, names = case(), ["output", "grad projected", "grad norm weight", "grad norm bias", "grad W", "grad b"]
    return {name: float((a.detach().double() - b).norm() / b.norm()) for name, a, b in zip(names, got, expected)}


def unit(run: Stage) -> None:
    """The unit alone: every case's values against float64 (the hybrid left out beyond the tolerance), then all cases
    timed side by side over rounds (the rows saved after each), then each training case's kernels."""
    batch, length, width = run.spec["unit"]
    tokens, gate = batch * length, width // 2
    run.result["shape"] = {"batch": batch, "length": length, "intermediate_size": width, "gate": gate, "sgu_heads": 1}
    run.result["gpu"] = {"training": [], "inference": []}
    row_bytes = {kernel: ROW_TRAFFIC[kernel].items() for kernel in run.kernels}  # bf16: 2 bytes a number
    run.result["row_bytes"] = {k: {way: 2 * tokens * gate * n for way, n in row_bytes[k]} for k in run.kernels}
    expected = run.attempt("float64", lambda: Unit(run, "torch", False).float64())
    cases, errors = {}, {}  # "model task mode" -> the function timed, its errors against float64
    for model, (kernel, recompute) in UNITS.items():
        for mode in ("eager", "compiled") if kernel in run.kernels else ():
            built = run.attempt(f"{model} {mode}", partial(Unit, run, kernel, recompute, mode == "compiled"))
            for task in (("training", "inference") if recompute else ("training",)) if built else ():
                name, case = f"{model} {task} {mode}", getattr(built, task)
                if (found := run.attempt(name, partial(relative_errors, case, expected))) is not None:
                    cases[name], errors[name] = case, found
    baseline = max(errors.get("gmlp (torch) training eager", {"none": float("nan")}).values())
    hybrid = errors.get("gmlp (triton) training eager", {})
    correct = bool(hybrid) and all(error <= TOLERANCE_FACTOR * baseline for error in hybrid.values())
    run.result["check"] = {"baseline": baseline, "tolerance": TOLERANCE_FACTOR * baseline, "hybrid_correct": correct}
    cases = {name: case for name, case in cases.items() if correct or not name.startswith("gmlp (triton)")}

    def timing():
        measured = {name: [] for name in cases}
        for _ in range(ROUNDS):
            for name, seconds in interleaved(cases, 1, run.spec["min_run_time"], warmup=0).items():
                measured[name] += seconds
            for task in ("training", "inference"):
                rows = [unit_row(name, measured, errors, tokens) for name in cases if f" {task} " in name]
                run.result["gpu"][task] = rows
            run.save()

    run.attempt("timing", timing)
    for model, (kernel, _) in UNITS.items():
        mode = "compiled" if f"{model} training compiled" in cases else "eager"
        if f"{model} training {mode}" in cases:
            run.attempt(f"kernels {model}", partial(unit_kernels, run, model, mode, kernel, cases))


def unit_row(name: str, measured: dict, errors: dict, tokens: int) -> dict:
    """A case's row: its median time, tokens/s, its speed over PyTorch's unit in the same task and mode (paired by
    round; None without it) and its errors against float64."""
    model, task, mode = name.rsplit(" ", 2)
    seconds = statistics.median(measured[name])
    torch_name = f"gmlp (torch) {task} {mode}"
    versus = paired_ratio(measured, name, torch_name) if torch_name in measured else None
    found = {"model": model, "mode": mode, "ms": 1e3 * seconds, "tokens_per_second": tokens / seconds}
    return found | {"versus_torch": versus, "errors": errors[name], "max_error": max(errors[name].values())}


def unit_kernels(run: Stage, model: str, mode: str, kernel: str, cases: dict) -> None:
    """`model`'s unit in training by the profiler's kernels (ms and launches a call): the products' time and TFLOP/s,
    the others' time and GB/s of `row_bytes` (forward and backward together)."""
    batch, length, width = run.spec["unit"]
    profiler = gpu_parts.profiled(cases[f"{model} training {mode}"], run.device, calls=3)
    kernels = by_kernel(profiler, run.on_gpu, calls=3)
    flops = 3 * batch * length**2 * width  # W v, W^T dM and dM v^T, 2 x batch x L x L x C each
    matmul_ms = sum(row["ms"] for key, row in kernels.items() if is_matmul(key))
    row_ms = sum(row["ms"] for key, row in kernels.items() if not is_matmul(key))
    least = sum(run.result["row_bytes"][kernel].values())
    found = {"matmul_ms": matmul_ms, "matmul_tflops": flops / matmul_ms / 1e9 if matmul_ms else None}
    found |= {"row_ms": row_ms, "row_gbps": least / row_ms / 1e6 if row_ms else None, "kernels": kernels}
    run.result.setdefault("kernels", {})[f"{model} {mode}"] = found


def compiled_or_eager(run: Stage, bench: Bench, name: str, task: str) -> str:
    """The mode to time `name` in: compiled, but the hybrid eager where its compiled step fails (its error kept)."""
    if "triton" not in name:
        return "compiled"
    bench.set_mode(bench.models[name], "compiled")
    with torch.inference_mode(task == "inference"):
        compiled = run.attempt(f"{name} {task} compiled", lambda: bench.step(name, task)[0]() or True)
    bench.set_mode(bench.models[name], "eager")
    return "compiled" if compiled else "eager"


def step(run: Stage) -> None:
    """The bf16 MLM training step, then the encoder's inference, of gMLP with each unit, BERT and ModernBERT at equal
    parameters and shape (compiled), paired over rounds (rows saved after each); then one training step of each gMLP by
    the profiler, with the gating unit's share. Its section renders as the gpu section's tables (gpu.render)."""
    names = [f"gmlp ({kernel})" for kernel in KERNELS[::-1] if kernel in run.kernels] + [REFERENCE, MODERN]
    peak = matmul_peak_flops(run.device, torch.bfloat16, size=run.spec["matmul"])
    bench = run.bench(gpu_parts.build(run.size, run.device, names), peak=peak)
    section = run.result["gpu"] = {"device": run.device_name, "size": run.size, "length": bench.length, "not_run": []}
    section |= {"batch": bench.batch, "models": gpu_parts.describe(bench.models), "errors": run.result["errors"]}
    datasheet = bench.datasheet and bench.datasheet / 1e12
    section |= {"matmul_peak_tflops_bf16": peak / 1e12, "datasheet_peak_tflops_bf16": datasheet}
    for task in ("training", "inference"):
        modes = {name: compiled_or_eager(run, bench, name, task) for name in names}
        run.attempt(task, partial(gpu_parts.time_group, bench, task, modes, save=partial(run.keep, section, task)))
        gpu_parts.free_memory()
    clock = "CUDA kernel time by kernel" if run.on_gpu else "self CPU time by operator"
    section["profile"] = {"clock": clock, "steps": 1, "cases": {}}
    for row in (row for row in section.get("training", []) if row["model"].startswith("gmlp")):
        profiled = partial(gpu_parts.kernel_profile, bench, row["model"], row["mode"])
        if found := run.attempt(f"profile {row['model']}", profiled):
            found["gating_unit_share_estimate"] = unit_share(run, bench, row)
            section["profile"]["cases"][f"{row['model']} bf16 {row['mode']}"] = found


def unit_share(run: Stage, bench: Bench, step_row: dict) -> float | None:
    """The gating unit's share of a gMLP training step: the layers times the unit stage's time of the same unit and
    mode (its products included) over the step's time; None without that row."""
    record = json.loads(path.read_text()) if (path := run.out / "unit.json").is_file() else {}
    ms = {(row["model"], row["mode"]): row["ms"] for row in record.get("gpu", {}).get("training", [])}
    ms = ms.get((step_row["model"], step_row["mode"]))
    layers = bench.models[step_row["model"]].config.num_hidden_layers
    return ms and layers * ms / 1e3 / (bench.batch * bench.length / step_row["tokens_per_second"])


def long(run: Stage) -> None:
    """Long inputs: gMLP with a Toeplitz W against BERT with SDPA at equal parameters, bf16 training then inference,
    eager, a fixed number of tokens a step: tokens/s and peak memory. gMLP with the PyTorch unit (the FFT product, the
    model's choice at these lengths) and, where the step found the hybrid faster (`run.kernels`' first), with the
    hybrid (the direct product: the FFT's length set beyond; W, L x L, kept by each block), each beside BERT in a group
    of its own models, so that one that does not fit leaves the other's rows."""
    lengths, tokens = run.spec["long"]
    toeplitz = {"spatial_weight_type": "toeplitz", "spatial_fft_min_length": min(lengths)}
    run.result |= {"faster_unit": run.kernels[0], "tokens_per_step": tokens, "gmlp": toeplitz, "gpu": {}}
    for length in lengths:
        groups = {"torch": toeplitz} | {"triton": toeplitz | {"spatial_fft_min_length": 2 * length}}
        for unit in ("torch", "triton") if run.kernels[0] == "triton" else ("torch",):
            rows = run.result["gpu"].setdefault(str(length), {})[f"gmlp ({unit})"] = {}
            run.attempt(f"gmlp ({unit}) at {length}", partial(long_rows, run, length, unit, groups[unit], rows))
            gpu_parts.free_memory()


def long_rows(run: Stage, length: int, unit: str, overrides: dict, rows: dict) -> None:
    """gMLP with `unit` (and `overrides`) beside BERT at `length`, training then inference, saved after every round."""
    names = [f"gmlp ({unit})", REFERENCE]
    models = gpu_parts.build(run.size, run.device, names, max_position_embeddings=length, **overrides)
    bench = run.bench(models, batch=max(1, run.spec["long"][1] // length))
    rows |= {"batch": bench.batch, "models": gpu_parts.describe(models)}
    for task in ("training", "inference"):
        save = partial(run.keep, rows, task)
        timed = partial(gpu_parts.time_group, bench, task, dict.fromkeys(models, "eager"), save=save)
        run.attempt(f"gmlp ({unit}) {task} {length}", timed)


STAGES = {"preflight": preflight, "unit": unit, "step": step, "long": long}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed.gpu_stages", description=__doc__)
    add = parser.add_argument
    add("stage", choices=list(STAGES))
    add("--device", default="cuda")
    add("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-run-out")))
    add("--kernels", default="triton,torch", help="the units measured (long: the first)")
    add("--pins", default="", help="preflight: the wheels' NAME==VERSION, comma-separated")
    args = parser.parse_args(argv)
    if not set(kernels := args.kernels.split(",")) <= set(KERNELS):
        parser.error(f"--kernels {args.kernels!r}: give some of {', '.join(KERNELS)}, comma-separated")
    if on_gpu := args.device.startswith("cuda"):
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # before CUDA starts
    else:
        torch.set_num_threads(1)  # tiny steps on two threads spend their time in OpenMP's waits
    torch._dynamo.config.recompile_limit = 128  # the blocks of every model share one code object
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    pins = [pin for pin in args.pins.split(",") if pin]
    run = Stage(args.stage, args.device, args.out, "base" if on_gpu else "tiny", kernels, pins)
    try:
        STAGES[args.stage](run)
    except KeyboardInterrupt:
        run.result["errors"]["interrupted"] = "the stage's time limit"
        raise
    except Exception as error:
        run.result["errors"]["stage"] = f"{type(error).__name__}: {error}"[:2000]
        raise
    finally:
        run.save()


if __name__ == "__main__":
    main()
