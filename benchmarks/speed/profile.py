"""Where a step's time goes: torch.profiler over three steps of gMLP's MLM training step (sparse_prediction) and of
encoder inference, eager and compiled (after warming up): on the CPU self time by operator, on a GPU time by CUDA
kernel. The matmul share bounds what fusing the rest can win (Amdahl): 1 / matmul share. The gpu section profiles
its training steps with the same functions."""

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForMaskedLM

from ..common import mlm_batch, percent, table, times
from .models import BATCH_SIZE, SMALL, gmlp_config, sparse_loss, training_step_fn

# Matrix products: aten's operators on the CPU; on a GPU the kernels of cuBLAS (gemm, xmma, cutlass, nvjet) and of
# fused attention.
CPU_MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu")
GPU_MATMUL_WORDS = ("gemm", "xmma", "cutlass", "nvjet", "flash", "fmha", "attention")
CLOCKS = {"cpu": "self CPU time by operator", "cuda": "CUDA kernel time by kernel"}


def ms_by_operator(profiler, steps: int = 1, device="cpu") -> dict[str, float]:
    """torch.profiler's self CPU time by operator (on a GPU: kernel time by CUDA kernel), ms per step over `steps`
    profiled steps, largest first."""
    on_gpu = torch.device(device).type == "cuda"
    events = [e for e in profiler.key_averages() if not on_gpu or e.device_type == DeviceType.CUDA]
    by_key = {e.key: (e.self_device_time_total if on_gpu else e.self_cpu_time_total) / 1e3 / steps for e in events}
    return dict(sorted(((key, ms) for key, ms in by_key.items() if ms), key=lambda item: -item[1]))


def is_matmul(key: str) -> bool:
    return key in CPU_MATMULS or any(word in key.lower() for word in GPU_MATMUL_WORDS)


def profile_cases(cases: dict, device="cpu", steps: int = 3) -> dict:
    """Each case (name -> step function; a name starting "inference" runs in inference mode) warmed up twice, then
    profiled over `steps` steps: the total over them, the matmul share, the share in inductor's kernels, the
    Amdahl bound, the largest operators or kernels and the profiler's own table of them (`key_averages().table`)."""
    on_gpu = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    results = {}
    for name, step in cases.items():
        with torch.inference_mode(name.startswith("inference")):
            for _ in range(2):
                step()
            with profile(activities=activities) as profiler:
                for _ in range(steps):
                    step()
                if on_gpu:
                    torch.cuda.synchronize(device)
        by_key = ms_by_operator(profiler, device=device)
        total = sum(by_key.values())
        matmul = sum(ms for key, ms in by_key.items() if is_matmul(key))
        fused = sum(ms for key, ms in by_key.items() if "CompiledFxGraph" in key or key.startswith("triton_"))
        sort_by = "self_device_time_total" if on_gpu else "self_cpu_time_total"
        results[name] = {
            "ms_total": total,
            "matmul_share": matmul / total,
            "compiled_kernels_share": fused / total,
            "amdahl_bound": total / matmul,
            "top_ms": dict(list(by_key.items())[:12]),
            "table": profiler.key_averages().table(sort_by=sort_by, row_limit=12, max_name_column_width=70),
        }
    return {"clock": CLOCKS["cuda" if on_gpu else "cpu"], "steps": steps, "cases": results}


def measure(args) -> dict:
    device = torch.device(args.device)
    torch.manual_seed(0)
    input_ids, labels = mlm_batch(BATCH_SIZE, SMALL["max_position_embeddings"], SMALL["vocab_size"], device)
    model = AutoModelForMaskedLM.from_config(gmlp_config()).to(device)
    encoder = model.base_model
    compiled_encoder = torch.compile(encoder)
    cases = {
        "training, eager": training_step_fn(model, sparse_loss, input_ids, labels),
        "training, compiled": training_step_fn(model, sparse_loss, input_ids, labels, compile_model=True),
        "inference, eager": lambda: encoder.eval()(input_ids=input_ids),
        "inference, compiled": lambda: compiled_encoder.eval()(input_ids=input_ids),
    }
    return profile_cases(cases, device)


def render(result: dict) -> dict[str, list[str]]:
    """The share of matmuls and of inductor's kernels per case, its largest operators or kernels, and the
    profiler's own tables where the results hold them."""
    body = [
        [
            name,
            f"{row['ms_total']:.0f}",
            percent(row["matmul_share"]),
            percent(row["compiled_kernels_share"]),
            times(row["amdahl_bound"]),
            "; ".join(f"{key.removeprefix('aten::')[:60]} {ms:.1f}" for key, ms in list(row["top_ms"].items())[:5]),
        ]
        for name, row in result["cases"].items()
    ]
    headers = ["case", "total (ms)", "matmuls", "inductor's kernels", "bound on any fusion (1 / matmul share)"]
    parts = {
        "rows": [
            f"### Where the time goes: {result['clock']}, {result['steps']} steps (torch.profiler)",
            "",
            *table([*headers, "largest (ms)"], body),
        ]
    }
    tables = [
        line
        for name, row in result["cases"].items()
        if "table" in row
        for line in (f"{name}:", "", "```", row["table"].rstrip(), "```", "")
    ]
    return parts | ({"tables": tables} if tables else {})
