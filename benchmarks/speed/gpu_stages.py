"""The GPU run's measuring stages (benchmarks/gpu_run.py runs each in a process of its own), at a fixed batch:

    python -m benchmarks.speed.gpu_stages STAGE --device cuda --out DIR [--kernels triton,torch] [--size tiny]

ceilings: a device-to-device copy (GB/s) and a warmed bf16 matmul (TFLOP/s). unit: the spatial gating unit alone at
gMLP-base's shape, forward and backward (PyTorch with recompute on and off, the Triton unit after a check of its values
and gradients), the cuBLAS products alone, the unit's kernels by the profiler. step: the MLM training step with each
unit, paired. long: long inputs against BERT and ModernBERT. profile: one step's kernels. bandwidth: inductor's
bandwidth profile of the unit and its generated code. Each writes DIR/STAGE.json as it goes; a failing measurement is
recorded under "errors" and the stage goes on. MFU is against the datasheet's dense bf16 peak (a fixed denominator),
with the matmul ceiling measured by `ceilings` beside it.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time
import traceback
from functools import partial
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity

from gmlp import GMLPConfig
from gmlp.modeling_gmlp import GMLPSpatialGatingUnit, TokenLayout

from ..common import interleaved
from . import gpu_parts
from .gpu import datasheet_peak
from .gpu_parts import KEPT, MODERN, REFERENCE, Bench, by_kernel, is_matmul

# Per size: the unit's shape (gMLP-base's: d_ffn 3072, a gate of 1536 channels, one SGU head), the long inputs' lengths
# and tokens per step, the ceilings' sizes, the seconds of timed calls per case and round, the models' changes to the
# preset (the step's batch: gpu_parts.BATCH).
SIZES = {
    "base": {
        "unit": {"batch": 64, "length": 512, "intermediate_size": 3072},
        "long_lengths": (8192, 16384),
        "long_tokens": 32768,
        "copy_bytes": 2**30,
        "matmul": 8192,
        "min_run_time": 1.0,
        "model": {},
    },
    "tiny": {
        "unit": {"batch": 2, "length": 32, "intermediate_size": 128},
        "long_lengths": (64, 128),
        "long_tokens": 256,
        "copy_bytes": 2**22,
        "matmul": 256,
        "min_run_time": 0.0,
        "model": {"num_hidden_layers": 2, "max_position_embeddings": 32},  # Triton's interpreter: seconds a block
    },
}
ROUNDS = 3
# The unit's least traffic per token outside the spatial products, in gate widths C of bf16 (see `row_bytes`).
ROW_TRAFFIC = {"forward": 5, "backward": 9}
BF16_TOLERANCE = 3e-2  # ||out - ref|| / ||ref|| against float64: tests/model/test_bf16.py's tolerance
STAGES = {}


def stage(function):
    STAGES[function.__name__] = function
    return function


class Stage:
    """One stage's record (DIR/NAME.json, rewritten by `save`) and what its measurements share."""

    def __init__(self, name: str, device: str, out: Path, size: str, kernels: list[str]):
        self.name, self.device, self.out, self.size, self.kernels = name, torch.device(device), out, size, kernels
        self.spec = SIZES[size]
        self.on_gpu = self.device.type == "cuda"
        self.device_name = torch.cuda.get_device_name(self.device) if self.on_gpu else self.device.type
        self.mode = "compiled" if self.on_gpu else "eager"  # compiling on two CPU cores takes minutes
        self.result = {"stage": name, "device": self.device_name, "size": size, "mode": self.mode, "errors": {}}
        self.path = out / f"{name}.json"
        self.start = time.monotonic()

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

    def denominators(self) -> tuple[float | None, float | None]:
        """MFU's fixed denominator, the datasheet's dense bf16 peak, and the matmul ceiling `ceilings` measured."""
        ceilings = self.out / "ceilings.json"
        measured = json.loads(ceilings.read_text()).get("matmul_tflops_bf16") if ceilings.is_file() else None
        return datasheet_peak(self.device_name), measured and measured * 1e12

    def compile(self, function):
        return torch.compile(function, dynamic=False) if self.mode == "compiled" else function


def seconds_per_call(function, min_run_time: float) -> float:
    """The median seconds of `function()` (the device synchronised), after three warm-up calls."""
    for _ in range(3):
        function()
    return interleaved({"call": function}, 1, min_run_time, warmup=0)["call"][0]


@stage
def ceilings(run: Stage) -> None:
    """A device-to-device copy (bytes read plus written per second) and a warmed square bf16 matmul."""
    spec = run.spec
    source = torch.randn(spec["copy_bytes"] // 2, device=run.device, dtype=torch.bfloat16)
    target = torch.empty_like(source)
    seconds = seconds_per_call(partial(target.copy_, source), spec["min_run_time"])
    run.result |= {"copy_bytes": 2 * source.nbytes, "copy_gbps": 2 * source.nbytes / seconds / 1e9}
    run.save()
    size = spec["matmul"]
    a, b = (torch.randn(size, size, device=run.device, dtype=torch.bfloat16) for _ in range(2))
    seconds = seconds_per_call(partial(torch.mm, a, b), spec["min_run_time"])
    datasheet, _ = run.denominators()
    run.result |= {"matmul_size": size, "matmul_tflops_bf16": 2 * size**3 / seconds / 1e12}
    run.result["datasheet_tflops_bf16"] = datasheet and datasheet / 1e12


def unit_cases(kernels: list[str]) -> dict[str, dict]:
    """The unit's cases: name -> (sgu_kernel, recompute)."""
    cases = {"torch (recompute)": {"kernel": "torch", "recompute": True}}
    cases["torch (kept)"] = {"kernel": "torch", "recompute": False}
    if "triton" in kernels:
        cases["triton"] = {"kernel": "triton", "recompute": True}
    return cases


class Unit:
    """gMLP's spatial gating unit alone (the model's own module, `sgu_kernel` chosen) on bf16 inputs under autocast,
    W and b drawn away from their near-zero init; forward, or forward and backward to every input."""

    def __init__(self, run: Stage, kernel: str, recompute: bool, seed: int = 0):
        shape = run.spec["unit"]
        config = GMLPConfig(
            hidden_size=64,  # unused by the unit
            intermediate_size=shape["intermediate_size"],
            max_position_embeddings=shape["length"],
            num_hidden_layers=1,
            sgu_kernel=kernel,
        )
        torch.manual_seed(seed)
        self.module = GMLPSpatialGatingUnit(config).to(run.device)
        with torch.no_grad():
            for parameter in self.module.parameters():
                parameter.uniform_(-1.0, 1.0).mul_(1.0 if parameter.ndim == 1 else shape["length"] ** -0.5)
        self.device, self.recompute = run.device, recompute
        self.layout = TokenLayout.sequential(shape["length"], run.device)
        generator = torch.Generator().manual_seed(seed + 1)
        batch, length, width = shape["batch"], shape["length"], shape["intermediate_size"]
        self.projected = torch.randn(batch, length, width, generator=generator).to(run.device, torch.bfloat16)
        self.grad = torch.randn(batch, length, width // 2, generator=generator).to(run.device, torch.bfloat16)
        self.projected.requires_grad_(True)
        self.inputs = [self.projected, *self.module.parameters()]
        self.function = run.compile(self.apply)

    def apply(self, projected):
        return self.module(projected, layout=self.layout, recompute=self.recompute)

    def forward(self):
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            return self.function(self.projected)

    def forward_backward(self):
        return torch.autograd.grad(self.forward(), self.inputs, self.grad)


def relative_errors(unit: Unit, reference: Unit) -> dict[str, float]:
    """||got - ref|| / ||ref|| of the output and of every gradient, `reference` (the PyTorch unit) in float64."""
    got = [unit.forward(), *unit.forward_backward()]
    reference.module.double()
    projected = reference.projected.detach().double().requires_grad_(True)
    with torch.autocast(reference.device.type, enabled=False):
        out = reference.module.gating(projected, reference.layout, None, None)
    expected = [out, *torch.autograd.grad(out, [projected, *reference.module.parameters()], reference.grad.double())]
    names = ["output", "grad projected"] + [f"grad {name}" for name, _ in reference.module.named_parameters()]
    return {
        name: float((a.detach().double() - b).norm() / b.norm())
        for name, a, b in zip(names, got, expected, strict=True)
    }


def kernel_times(function, device: torch.device, calls: int = 3) -> dict[str, dict]:
    """`function`'s kernels by torch.profiler (on the CPU its operators): ms and launches per call, largest first."""
    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    function()
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(calls):
            function()
        if on_gpu:
            torch.cuda.synchronize(device)
    return by_kernel(profiler, on_gpu, calls)


def row_bytes(tokens: int, gate: int) -> dict[str, int]:
    """The least bf16 traffic of the unit's passes around cuBLAS products (the products' own reads and writes not
    counted), per direction. Forward: z2 read, the normalised gate v written for the product, z1 and the product P
    read, the output written (5 C per token). Backward: z1, z2, dOut, P and v read, dZ1, dZ2 and dM = dOut * GELU(z1)
    written, the product W^T dM read (9 C), with P and v kept from the forward."""
    return {direction: 2 * tokens * gate * width for direction, width in ROW_TRAFFIC.items()}


@stage
def unit(run: Stage) -> None:
    """The unit alone: values and gradients of every case against float64 (the Triton unit is timed only if within
    the bf16 tolerance), forward and forward+backward paired over rounds, the cuBLAS products alone, and the kernels
    of each case by the profiler: the products' TFLOP/s, the other kernels' GB/s against `row_bytes`."""
    shape = run.spec["unit"]
    batch, length, gate = shape["batch"], shape["length"], shape["intermediate_size"] // 2
    tokens, flops = batch * length, 2 * batch * length * length * gate  # one spatial product
    run.result |= {"shape": shape | {"gate": gate, "sgu_heads": 1}, "product_flops": flops}
    run.result["row_bytes"] = row_bytes(tokens, gate)
    cases = {}
    for name, case in unit_cases(run.kernels).items():
        cases[name] = run.attempt(f"build {name}", partial(Unit, run, case["kernel"], case["recompute"]))
    if "triton" in cases:

        def check():
            errors = relative_errors(cases["triton"], Unit(run, "torch", recompute=False))
            run.result["triton_errors"] = errors
            run.result["triton_correct"] = all(error <= BF16_TOLERANCE for error in errors.values())
            if not run.result["triton_correct"]:
                cases.pop("triton")

        run.attempt("check triton", check)
        if "triton_correct" not in run.result:
            run.result["triton_correct"] = False
            cases.pop("triton", None)
    cases = {name: unit for name, unit in cases.items() if unit is not None}
    calls = {
        f"{name} {part}": getattr(unit, part)
        for name, unit in cases.items()
        for part in ("forward", "forward_backward")
    }

    def timing():
        measured = interleaved(calls, ROUNDS, run.spec["min_run_time"])
        medians = {key: sorted(times)[len(times) // 2] for key, times in measured.items()}
        run.result["times"] = measured
        run.result["cases"] = {
            name: {
                "forward_ms": 1e3 * medians[f"{name} forward"],
                "backward_ms": 1e3 * (medians[f"{name} forward_backward"] - medians[f"{name} forward"]),
                "forward_backward_ms": 1e3 * medians[f"{name} forward_backward"],
                "forward_backward_ns_per_token": 1e9 * medians[f"{name} forward_backward"] / tokens,
            }
            for name in cases
        }

    run.attempt("timing", timing)
    run.attempt("products", partial(products, run, batch, length, gate))
    for name, unit in cases.items():
        run.attempt(f"kernels {name}", partial(unit_kernels, run, name, unit))


def products(run: Stage, batch: int, length: int, gate: int) -> None:
    """The spatial products alone through cuBLAS (bf16): W @ v as the model's broadcast matmul (a bmm), W^T @ dM,
    and dW = dM v^T over the batch as one GEMM of depth batch x gate (operands laid out for it)."""
    device, flops = run.device, 2 * batch * length * length * gate
    weight = torch.randn(length, length, device=device, dtype=torch.bfloat16)
    gate_input, grad = (torch.randn(batch, length, gate, device=device, dtype=torch.bfloat16) for _ in range(2))
    flat_grad, flat_gate = (torch.randn(length, batch * gate, device=device, dtype=torch.bfloat16) for _ in range(2))
    cases = {
        "W @ v (bmm)": partial(torch.matmul, weight, gate_input),
        "W^T @ dM (bmm)": partial(torch.matmul, weight.t(), grad),
        "dW = dM v^T (mm)": partial(torch.matmul, flat_grad, flat_gate.t()),
    }
    measured = interleaved(cases, ROUNDS, run.spec["min_run_time"])
    run.result["products"] = {
        name: {"ms": 1e3 * min(times), "tflops": flops / min(times) / 1e12} for name, times in measured.items()
    }


def unit_kernels(run: Stage, name: str, unit: Unit) -> None:
    """`name`'s kernels forward and forward+backward (the backward's the difference), ms and launches per call; per
    direction the products' time and TFLOP/s (each launch one product of `product_flops`), the other kernels' time and
    GB/s against `row_bytes`."""
    forward = kernel_times(unit.forward, run.device)
    both = kernel_times(unit.forward_backward, run.device)
    zero = {"ms": 0.0, "launches": 0.0}
    backward = {key: {k: row[k] - forward.get(key, zero)[k] for k in zero} for key, row in both.items()}
    found = {"forward": forward, "forward_backward": both}
    for direction, kernels in (("forward", forward), ("backward", backward)):
        matmuls = [row for key, row in kernels.items() if is_matmul(key)]
        matmul_ms, launches = sum(row["ms"] for row in matmuls), sum(row["launches"] for row in matmuls)
        row_ms = sum(row["ms"] for key, row in kernels.items() if not is_matmul(key))
        found[direction + "_summary"] = {
            "matmul_ms": matmul_ms,
            "matmul_launches": launches,
            "matmul_tflops": launches * run.result["product_flops"] / matmul_ms / 1e9 if matmul_ms else None,
            "row_ms": row_ms,
            "row_gbps_of_least_bytes": run.result["row_bytes"][direction] / row_ms / 1e6 if row_ms else None,
        }
    run.result.setdefault("kernels", {})[name] = found


def gmlp_names(kernels: list[str]) -> list[str]:
    """The step's gMLP models: each unit, and PyTorch's with its activations kept."""
    names = [f"gmlp ({kernel})" for kernel in ("torch", "triton") if kernel in kernels]
    return names[:1] + [f"gmlp (torch){KEPT}"] + names[1:]


def bench(run: Stage, names: list[str], batch: int | None = None, **overrides) -> Bench:
    """The models `names` (gMLP's preset with `overrides`) at a fixed batch (default: gpu_parts.BATCH), their
    optimizers' states made, MFU's denominators set."""
    models = gpu_parts.build(run.size, run.device, names, **run.spec["model"] | overrides)
    length = next(iter(models.values())).config.max_position_embeddings
    datasheet, measured = run.denominators()
    batches = {"bf16": dict.fromkeys(models, batch or gpu_parts.BATCH[run.size])}
    found = Bench(run.device, models, length, measured, datasheet, ROUNDS, run.spec["min_run_time"], batches)
    found.optimizers = {name: gpu_parts.make_optimizer(model, run.device) for name, model in models.items()}
    run.result["mfu_denominator_tflops"] = datasheet and datasheet / 1e12
    run.result["matmul_ceiling_tflops"] = measured and measured / 1e12
    return found


@stage
def step(run: Stage) -> None:
    """The bf16 MLM training step of gMLP-base with each unit (compiled), paired over rounds, tokens/s and MFU."""
    names = gmlp_names(run.kernels)
    found = bench(run, names)
    run.result |= {"models": gpu_parts.describe(found.models), "length": found.length, "batch": found.batches["bf16"]}
    run.result["training"] = gpu_parts.time_group(found, "training", "bf16", dict.fromkeys(names, run.mode)).rows


@stage
def long(run: Stage) -> None:
    """Long inputs: gMLP (a Toeplitz W, the FFT product) against BERT and ModernBERT with SDPA at equal parameters,
    bf16 training and inference (eager), at a fixed number of tokens per step: tokens/s and peak memory."""
    lengths = run.spec["long_lengths"]
    toeplitz = {"spatial_weight_type": "toeplitz", "spatial_fft_min_length": min(lengths)}
    run.result |= {"tokens_per_step": run.spec["long_tokens"], "gmlp": toeplitz, "lengths": {}}
    for length in lengths:
        run.attempt(f"length {length}", partial(long_rows, run, length, toeplitz))
        gpu_parts.free_memory_of(run.device)


def long_rows(run: Stage, length: int, toeplitz: dict) -> None:
    """The long stage's rows at one length, training then inference, each saved as it is measured."""
    names, batch = ["gmlp (torch)", REFERENCE, MODERN], max(1, run.spec["long_tokens"] // length)
    found = bench(run, names, batch, max_position_embeddings=length, **toeplitz)
    rows = {"batch": batch, "models": gpu_parts.describe(found.models)}
    run.result["lengths"][str(length)] = rows
    for task in ("training", "inference"):
        rows[task] = run.attempt(
            f"{task} {length}",
            lambda task=task: gpu_parts.time_group(found, task, "bf16", dict.fromkeys(names, "eager")).rows,
        )


@stage
def profile(run: Stage) -> None:
    """One training step of each gMLP unit and of BERT at equal parameters (compiled) by the profiler's kernels."""
    names = [*gmlp_names(run.kernels), REFERENCE]
    found = bench(run, names)
    run.result |= {"models": gpu_parts.describe(found.models), "batch": found.batches["bf16"]}
    run.result |= gpu_parts.kernel_profile(found, names, steps=1, modes=(run.mode,), top=20).value


def has_setting(config, key: str) -> bool:
    """Whether the config module has `key` (dotted for its classes: "trace.enabled")."""
    head, _, rest = key.partition(".")
    return hasattr(config, head) and (not rest or has_setting(getattr(config, head), rest))


BANDWIDTH_LINE = re.compile(r"([\d.]+)ms\s+([\d.]+) GB\s+([\d.]+)GB/s\s+([\d.]+)%\s+(\S+)")


@stage
def bandwidth(run: Stage) -> None:
    """Inductor's bandwidth profile (`profile_bandwidth`: each generated Triton kernel timed once, with its bytes) and
    debug trace (`trace`: the FX graphs, the IR and the generated code) of the compiled unit, caches off so that it
    compiles; the profile parsed, and the trace's text files in the record. On the CPU inductor writes C++ kernels,
    which its bandwidth profile does not time: the code alone."""
    from torch._inductor import config

    work = Path(tempfile.mkdtemp(prefix="gmlp_bandwidth_"))
    output = work / "bandwidth.txt"
    settings = {"profile_bandwidth": True, "profile_bandwidth_output": str(output), "force_disable_caches": True}
    settings |= {"trace.enabled": True, "trace.debug_dir": str(work / "trace")}
    run.result["inductor_config"] = {key: has_setting(config, key) for key in settings}  # which this torch has
    with config.patch({key: value for key, value in settings.items() if run.result["inductor_config"][key]}):
        for name, case in unit_cases(run.kernels).items():
            if case["kernel"] == "triton" and not run.on_gpu:
                continue  # a Triton op compiles on a GPU only

            def compiled(case=case):
                unit = Unit(run, case["kernel"], case["recompute"])
                unit.function = torch.compile(unit.apply, dynamic=False)
                unit.forward_backward()

            run.attempt(name, compiled)
    text = output.read_text() if output.is_file() else ""
    run.result["profile_text"] = text
    run.result["kernels"] = [
        {"ms": float(ms), "gb": float(gb), "gbps": float(gbps), "percent": float(share), "kernel": kernel}
        for ms, gb, gbps, share, kernel in BANDWIDTH_LINE.findall(text)
    ]
    run.result["trace"] = {
        str(path.relative_to(work)): path.read_text(errors="replace")
        for path in sorted((work / "trace").rglob("*"))
        if path.is_file() and path.suffix in (".py", ".txt") and path.stat().st_size < 2**21
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed.gpu_stages", description=__doc__)
    parser.add_argument("stage", choices=list(STAGES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-run-out")))
    parser.add_argument("--size", choices=list(SIZES), help="default: base on a GPU, tiny on the CPU")
    parser.add_argument("--kernels", default="triton,torch", help="the sgu_kernel values to measure")
    args = parser.parse_args(argv)
    size = args.size or ("base" if args.device.startswith("cuda") else "tiny")
    if args.device.startswith("cuda"):
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # before CUDA starts
    else:
        torch.set_num_threads(1)  # tiny steps on two threads spend their time in OpenMP's waits
    torch._dynamo.config.recompile_limit = 128
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    run = Stage(args.stage, args.device, args.out, size, args.kernels.split(","))
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
