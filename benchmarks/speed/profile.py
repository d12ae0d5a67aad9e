"""Where a step's time goes: torch.profiler over three steps of gMLP's MLM training step (sparse_prediction) and of
encoder inference, eager and compiled (after warming up): on the CPU self time by operator, on a GPU time by CUDA
kernel. The matmul share bounds what fusing the rest can win (Amdahl): 1 / matmul share."""

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from ..common import mlm_batch, percent, synchronize, table, times
from .models import BATCH_SIZE, SMALL, gmlp_config, sparse_loss, training_step_fn

# Matrix products: aten's operators on the CPU; on a GPU the kernels of cuBLAS (gemm, xmma, cutlass, nvjet) and of
# fused attention.
CPU_MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu")
GPU_MATMUL_WORDS = ("gemm", "xmma", "cutlass", "nvjet", "flash", "fmha", "attention")
CLOCKS = {"cpu": "self CPU time by operator", "cuda": "CUDA kernel time by kernel"}


def ms_by_operator(profiler, steps: int = 1, device="cpu") -> dict[str, float]:
    """torch.profiler's self CPU time by operator (on a GPU: kernel time by CUDA kernel), ms per step over `steps`
    profiled steps, largest first."""
    if torch.device(device).type == "cuda":
        events = [e for e in profiler.key_averages() if e.device_type == DeviceType.CUDA]
        by_key = {e.key: e.self_device_time_total / 1e3 / steps for e in events if e.self_device_time_total}
    else:
        by_key = {e.key: e.self_cpu_time_total / 1e3 / steps for e in profiler.key_averages() if e.self_cpu_time_total}
    return dict(sorted(by_key.items(), key=lambda item: -item[1]))


def is_matmul(key: str) -> bool:
    return key in CPU_MATMULS or any(word in key.lower() for word in GPU_MATMUL_WORDS)


def profile_cases(cases: dict, device="cpu", steps: int = 3) -> dict:
    """Each case (name -> step function; a name starting "inference" runs in inference mode) warmed up twice, then
    profiled over `steps` steps: the total over them, matmul share, share in inductor's fused kernels, the Amdahl bound and the
    largest operators or kernels."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.device(device).type == "cuda" else [])
    results = {}
    for name, step in cases.items():
        with torch.inference_mode(name.startswith("inference")):
            for _ in range(2):
                step()
            synchronize(device)
            with profile(activities=activities) as profiler:
                for _ in range(steps):
                    step()
                synchronize(device)
        by_key = ms_by_operator(profiler, device=device)
        total = sum(by_key.values())
        matmul = sum(ms for key, ms in by_key.items() if is_matmul(key))
        fused = sum(ms for key, ms in by_key.items() if "CompiledFxGraph" in key or key.startswith("triton_"))
        results[name] = {
            "ms_total": total,
            "matmul_share": matmul / total,
            "compiled_kernels_share": fused / total,
            "amdahl_bound": total / matmul,
            "top_ms": dict(list(by_key.items())[:12]),
        }
    return results


def measure(args) -> dict:
    device = torch.device(args.device)
    torch.manual_seed(0)
    input_ids, labels = mlm_batch(BATCH_SIZE, SMALL["max_position_embeddings"], SMALL["vocab_size"], device)
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_config(gmlp_config()).to(device)
    encoder = model.base_model
    compiled_encoder = torch.compile(encoder)
    cases = {
        "training, eager": training_step_fn(model, sparse_loss, input_ids, labels),
        "training, compiled": training_step_fn(model, sparse_loss, input_ids, labels, compile_model=True),
        "inference, eager": lambda: encoder.eval()(input_ids=input_ids),
        "inference, compiled": lambda: compiled_encoder.eval()(input_ids=input_ids),
    }
    return {"clock": CLOCKS[device.type], "steps": 3, "cases": profile_cases(cases, device)}


def render(result: dict) -> dict[str, list[str]]:
    body = [
        [
            name,
            f"{row['ms_total']:.0f}",
            percent(row["matmul_share"]),
            percent(row["compiled_kernels_share"]),
            times(row["amdahl_bound"]),
            ", ".join(f"{key.removeprefix('aten::')[:40]} {ms:.0f}" for key, ms in list(row["top_ms"].items())[:6]),
        ]
        for name, row in result["cases"].items()
    ]
    headers = ["case", "total (ms)", "matmuls", "inductor's fused kernels", "bound on any fusion (1 / matmul share)"]
    return {
        "rows": [
            f"### Where the time goes: {result['clock']}, {result['steps']} steps (torch.profiler)",
            "",
            *table([*headers, "largest (ms)"], body),
        ]
    }
