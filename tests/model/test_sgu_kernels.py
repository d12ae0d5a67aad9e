"""The fused spatial gating unit (gmlp/kernels_gmlp.py) against the model's PyTorch math in fp32: the output and the
gradient of every input (projected, the gate's LayerNorm weight and bias, W, b, the tiny-attention output), for the
four SGU variants, one or two SGU heads, with and without a token mask and a tiny-attention output, lengths that are
not a multiple of the blocks and channels that are not a power of two; what the autograd graph keeps for the
backward; the op as torch.export sees it.

In the CPU pass (CI's) the kernels run under Triton's interpreter (conftest.py sets TRITON_INTERPRET=1 before
anything imports Triton); with `--device cuda` the same tests run the compiled kernels, and the CUDA-only ones (a
model-sized unit, TF32, torch.compile) run too. The spatial weights are drawn far from their near-zero init
(W ~ randn / sqrt(L), b ~ 1 + randn), where a token-mixing error would not hide.
"""

import contextlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("triton", reason="Triton is not installed: the kernels' tests need it (the dev extra has it)")
pytest.importorskip("numpy", reason="Triton's interpreter needs numpy (the dev extra has it)")

from gmlp import kernels_gmlp

VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")
EPS = 1e-5
# The relative error of a whole tensor, ‖kernel − fp32 reference‖ / ‖reference‖ (assert_matches), both from the
# same (rounded) inputs. fp32: the blocked summation order (measured up to 1.4e-6 over 8 random cases). bf16 and
# fp16: the normalised gate, the GEMM's operands and the stored results rounded to the dtype as in the PyTorch path
# (measured up to 8.1e-3 and 9.6e-4; the PyTorch path run in that dtype: up to 1.2e-2 and 1.7e-3).
TOLERANCES = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}
# fp32 on a GPU with TF32 allowed (torch.set_float32_matmul_precision("high")): TF32's 10-bit mantissa.
TF32_TOLERANCE = 5e-3
# A gate of one channel: the LayerNorm of a constant row is its bias in exact arithmetic, and GELU(Z2)'s rounding
# (half an ulp, where the compiled kernel fuses GELU's last product and the centring into one FMA, as on an H200) is
# multiplied by 1/sqrt(eps) ≈ 316 on the way: fp32's tolerance times that conditioning.
ONE_CHANNEL_TOLERANCE = TOLERANCES[torch.float32] * EPS**-0.5
GRADIENTS = ("projected", "norm_weight", "norm_bias", "weight", "bias", "tiny_attention_output")


@pytest.fixture
def kernel_device(device):
    """The selected device (--device), where the kernels can run on it."""
    if device.type == "cpu" and not kernels_gmlp.INTERPRETED:
        pytest.skip(
            "Triton was imported before TRITON_INTERPRET=1 was set, so the kernels are compiled for CUDA: run the CPU pass with TRITON_INTERPRET=1 in the environment (conftest.py sets it unless --device is cuda)"
        )
    if device.type not in ("cpu", "cuda"):
        pytest.skip(f"the kernels run on CUDA (and on the CPU under the interpreter), not on {device.type}")
    return device


@pytest.fixture
def cuda_device(device):
    if device.type != "cuda":
        pytest.skip("needs a GPU: run with --device cuda")
    return device


def make_inputs(variant, *, batch, length, channels, heads, mask, tiny, dtype, device, seed=0) -> dict:
    """The unit's inputs in `dtype` (the parameters in fp32, as the model keeps them), away from their init."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=generator)

    width = 2 * channels if variant == "multiplicative_split" else channels
    inputs = {
        "projected": draw(batch, length, width).to(dtype),
        "norm_weight": 1 + 0.5 * draw(channels),
        "norm_bias": 0.5 * draw(channels),
        "weight": draw(heads, length, length) / length**0.5,
        "bias": 1 + draw(heads, length),
        "tiny_attention_output": draw(batch, length, channels).to(dtype) if tiny else None,
    }
    inputs = {name: None if x is None else x.to(device).requires_grad_() for name, x in inputs.items()}
    token_mask = None
    if mask:  # every row keeps its first token, then real tokens and padding at random
        token_mask = torch.rand(batch, length, generator=generator) > 0.3
        token_mask[:, 0] = True
        token_mask = token_mask.to(device)
    return {**inputs, "token_mask": token_mask}


def reference(
    projected, norm_weight, norm_bias, weight, bias, *, eps, variant, token_mask=None, tiny_attention_output=None
):
    """The model's PyTorch path (GMLPLayer.gating without a cache), in fp32."""
    activated = F.gelu(projected.float())
    channels, heads = norm_weight.shape[0], weight.shape[0]
    content, gate = activated.chunk(2, -1) if variant == "multiplicative_split" else (activated, activated)
    gate = F.layer_norm(gate, (channels,), norm_weight.float(), norm_bias.float(), eps)
    if token_mask is not None:
        gate = gate * token_mask.float()[..., None]
    gate_heads = gate.unflatten(-1, (heads, channels // heads)).transpose(1, 2)  # (batch, heads, L, C / heads)
    mixed = (weight.float() @ gate_heads + bias.float()[..., None]).transpose(1, 2).flatten(2)
    if tiny_attention_output is not None:
        mixed = mixed + tiny_attention_output.float()
    if variant == "linear":
        return mixed
    if variant == "additive":
        return content + mixed
    return content * mixed


def run(function, inputs: dict, upstream: torch.Tensor, **options):
    """`function`'s output and the gradients of <output, upstream> with respect to the floating inputs."""
    leaves = {name: x for name, x in inputs.items() if name in GRADIENTS and x is not None}
    out = function(**inputs, eps=EPS, **options)
    grads = torch.autograd.grad(out, list(leaves.values()), upstream.to(out.dtype))
    return out, dict(zip(leaves, grads))


def assert_matches(actual, expected, *, tolerance: float, what: str) -> None:
    """‖actual − expected‖ within `tolerance` of ‖expected‖, or of a tensor of ones where `expected` is smaller (a
    gradient that is zero in exact arithmetic, as the LayerNorm weight's over one channel, is rounding noise)."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    actual, expected = actual.detach().float(), expected.detach().float()
    error = float((actual - expected).norm() / max(float(expected.norm()), expected.numel() ** 0.5))
    assert error <= tolerance, f"{what}: relative error {error:.2e} > {tolerance}"


@contextlib.contextmanager
def float32_matmul_precision(precision: str):
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def check_against_reference(variant, *, dtype, device, tolerance=None, **sizes) -> None:
    """The kernels' output and every gradient within the dtype's tolerance of the fp32 reference."""
    inputs = make_inputs(variant, dtype=dtype, device=device, **sizes)
    width = inputs["norm_weight"].shape[0]
    upstream = torch.randn(
        sizes["batch"], sizes["length"], width, generator=torch.Generator().manual_seed(sizes.get("seed", 0) + 1)
    ).to(device)
    out, grads = run(kernels_gmlp.spatial_gating, inputs, upstream, variant=variant)
    fp32_inputs = {
        name: x.detach().float().requires_grad_() if name in GRADIENTS and x is not None else x
        for name, x in inputs.items()
    }
    with float32_matmul_precision("highest"):  # the reference in IEEE fp32 also where a test allows TF32
        expected_out, expected_grads = run(reference, fp32_inputs, upstream, variant=variant)
    tolerance = tolerance or TOLERANCES[dtype]
    if width == 1:
        tolerance = max(tolerance, ONE_CHANNEL_TOLERANCE)
    assert out.dtype == dtype
    assert_matches(out, expected_out, tolerance=tolerance, what=f"{variant} output")
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        assert grad.dtype == inputs[name].dtype, name
        assert_matches(grad, expected_grads[name], tolerance=tolerance, what=f"{variant} gradient of {name}")


# ---- values and gradients ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_matches_the_reference(kernel_device, variant, dtype):
    """Two heads of 12 channels (C = 24, not a power of two), 21 tokens (not a multiple of 16), a token mask with
    padding inside the rows, and a tiny-attention output."""
    check_against_reference(
        variant, batch=2, length=21, channels=24, heads=2, mask=True, tiny=True, dtype=dtype, device=kernel_device
    )


@pytest.mark.parametrize("variant", ["multiplicative_split", "multiplicative"])
def test_a_sequence_over_several_blocks_matches_the_reference(kernel_device, variant):
    """150 tokens: two tiles of 128 queries (the second mostly masked) and several steps over the keys, in both
    GEMMs and in dW; one head of 40 channels."""
    check_against_reference(
        variant, batch=2, length=150, channels=40, heads=1, mask=True, tiny=False, dtype=torch.float32,
        device=kernel_device,
    )  # fmt: skip


@pytest.mark.parametrize("programs", [1, 2])
def test_the_weight_gradient_over_splits_of_the_batch_matches_the_reference(kernel_device, monkeypatch, programs):
    """dW's GEMM over the batch in one program per tile (as for long sequences on a GPU) and split unevenly (three
    samples in splits of two), whose partial sums add up."""
    monkeypatch.setattr(kernels_gmlp, "WEIGHT_GRAD_PROGRAMS", programs)
    check_against_reference(
        "multiplicative", batch=3, length=13, channels=10, heads=1, mask=True, tiny=True, dtype=torch.float32,
        device=kernel_device,
    )  # fmt: skip


@settings(
    max_examples=12,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    variant=st.sampled_from(VARIANTS),
    heads=st.sampled_from([1, 2]),
    head_channels=st.integers(1, 12),
    batch=st.integers(1, 2),
    length=st.integers(1, 40),
    mask=st.booleans(),
    tiny=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    seed=st.integers(0, 2**16),
)
def test_property_matches_the_reference(kernel_device, variant, heads, head_channels, dtype, **sizes):
    check_against_reference(
        variant, channels=heads * head_channels, heads=heads, dtype=dtype, device=kernel_device, **sizes
    )


# ---- what the backward keeps ------------------------------------------------------------------------------------
def saved_tensors(function, inputs: dict, **options) -> list[torch.Tensor]:
    """The tensors autograd keeps for the backward while `function` runs forward."""
    saved = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        function(**inputs, eps=EPS, **options)
    return saved


def storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


@pytest.mark.parametrize("variant", ["multiplicative_split", "additive"])
def test_the_backward_keeps_only_projected_the_statistics_and_the_parameters(kernel_device, variant):
    """Saved for the backward: U's output, the parameters, the token mask (as fp32), each token's mean and 1/std,
    and the tiny-attention output where the variant multiplies by the product; not GELU's output, the normalised
    gate or the product, which the plain path keeps."""
    batch, length, channels = 2, 12, 16
    inputs = make_inputs(
        variant, batch=batch, length=length, channels=channels, heads=2, mask=True, tiny=True,
        dtype=torch.bfloat16, device=kernel_device,
    )  # fmt: skip
    saved = saved_tensors(kernels_gmlp.spatial_gating, inputs, variant=variant)
    kept_inputs = ["projected", "norm_weight", "norm_bias", "weight", "bias"]
    if variant == "multiplicative_split":
        kept_inputs.append("tiny_attention_output")
    assert {storage(inputs[name]) for name in kept_inputs} <= {storage(tensor) for tensor in saved}
    others = [tensor for tensor in saved if storage(tensor) not in {storage(inputs[name]) for name in kept_inputs}]
    # the mean, 1/std and the mask: one fp32 number per token each
    assert sorted((tuple(t.shape), t.dtype) for t in others) == [((batch * length,), torch.float32)] * 3
    assert len(saved) == len(kept_inputs) + 3

    def activation_bytes(tensors):  # what the step keeps beyond the parameters
        parameters = {storage(inputs[name]) for name in ("norm_weight", "norm_bias", "weight", "bias")}
        unique = {storage(t): t.untyped_storage().nbytes() for t in tensors if storage(t) not in parameters}
        return sum(unique.values())

    kernel_bytes = activation_bytes(saved)
    tokens = batch * length
    assert kernel_bytes == inputs["projected"].nbytes + 3 * 4 * tokens + (
        inputs["tiny_attention_output"].nbytes if variant == "multiplicative_split" else 0
    )
    plain_bytes = activation_bytes(saved_tensors(plain_path, inputs, variant=variant))
    assert plain_bytes > 2 * kernel_bytes, (plain_bytes, kernel_bytes)


def plain_path(projected, norm_weight, norm_bias, weight, bias, *, eps, variant, token_mask, tiny_attention_output):
    """The model's PyTorch path in the inputs' dtype, as GMLPLayer.gating computes it without recomputation."""
    activated = F.gelu(projected)
    content, gate = activated.chunk(2, -1) if variant == "multiplicative_split" else (activated, activated)
    gate = F.layer_norm(gate, norm_weight.shape, norm_weight.to(gate.dtype), norm_bias.to(gate.dtype), eps)
    gate = gate * token_mask.to(gate.dtype)[..., None]
    heads = gate.unflatten(-1, (weight.shape[0], -1)).transpose(1, 2)
    mixed = (weight.to(heads.dtype) @ heads + bias.to(heads.dtype)[..., None]).transpose(1, 2).flatten(2)
    mixed = mixed + tiny_attention_output
    return content * mixed if variant == "multiplicative_split" else content + mixed


# ---- the op as PyTorch sees it ------------------------------------------------------------------------------------
class SpatialGating(torch.nn.Module):
    def __init__(self, channels: int, heads: int, length: int, variant: str):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.variant = variant
        self.norm_weight = torch.nn.Parameter(1 + 0.5 * torch.randn(channels, generator=generator))
        self.norm_bias = torch.nn.Parameter(0.5 * torch.randn(channels, generator=generator))
        self.weight = torch.nn.Parameter(torch.randn(heads, length, length, generator=generator) / length**0.5)
        self.bias = torch.nn.Parameter(1 + torch.randn(heads, length, generator=generator))

    def forward(self, projected, token_mask):
        return kernels_gmlp.spatial_gating(
            projected, self.norm_weight, self.norm_bias, self.weight, self.bias, eps=EPS, variant=self.variant,
            token_mask=token_mask,
        )  # fmt: skip


def test_export_sees_one_op(kernel_device):
    """torch.export keeps the unit as the one custom op `gmlp::sgu_forward` (beside the token mask's conversion to
    fp32), and the exported program computes what the eager call does."""
    module = SpatialGating(channels=24, heads=2, length=9, variant="multiplicative_split").to(kernel_device)
    projected = torch.randn(2, 9, 48, generator=torch.Generator().manual_seed(1)).to(kernel_device)
    token_mask = torch.ones(2, 9, dtype=torch.bool, device=kernel_device)
    program = torch.export.export(module, (projected, token_mask))
    targets = [node.target for node in program.graph.nodes if node.op == "call_function"]
    assert [target for target in targets if "gmlp" in str(target)] == [torch.ops.gmlp.sgu_forward.default]
    mask_conversion = {"aten.to.dtype", "aten.reshape.default", "aten._assert_tensor_metadata.default"}
    assert {str(target) for target in targets if "aten" in str(target)} <= mask_conversion, targets
    torch.testing.assert_close(program.module()(projected, token_mask), module(projected, token_mask))


def test_compiling_under_the_interpreter_fails_clearly(kernel_device):
    """torch.compile cannot trace Triton's interpreter; it says so rather than compute with empty buffers."""
    if not kernels_gmlp.INTERPRETED:
        pytest.skip("the kernels are compiled here: test_compiled_matches_eager_on_the_gpu covers torch.compile")
    module = SpatialGating(channels=8, heads=1, length=5, variant="additive")
    projected = torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(2))
    with pytest.raises(Exception, match=r"torch.compile cannot trace Triton's interpreter \(TRITON_INTERPRET=1\)"):
        torch.compile(module, fullgraph=True)(projected, None)


def test_a_second_copy_of_the_module_serves_the_same_op(kernel_device):
    """trust_remote_code imports a saved copy of this file beside the installed package's: it registers the ops
    again, over the first copy's, and both compute the same."""
    spec = importlib.util.spec_from_file_location("kernels_gmlp_remote_copy", kernels_gmlp.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    inputs = make_inputs(
        "multiplicative_split", batch=2, length=6, channels=8, heads=2, mask=True, tiny=False, dtype=torch.float32,
        device=kernel_device,
    )  # fmt: skip
    upstream = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(4)).to(kernel_device)
    out, grads = run(copy.spatial_gating, inputs, upstream, variant="multiplicative_split")
    first_out, first_grads = run(kernels_gmlp.spatial_gating, inputs, upstream, variant="multiplicative_split")
    torch.testing.assert_close(out, first_out, rtol=0, atol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, first_grads[name], rtol=0, atol=0)


# ---- bad inputs and a missing Triton ------------------------------------------------------------------------------
def test_a_bad_input_gets_a_clear_error(kernel_device):
    inputs = make_inputs(
        "multiplicative_split", batch=1, length=5, channels=8, heads=2, mask=False, tiny=False,
        dtype=torch.float32, device=kernel_device,
    )  # fmt: skip
    with pytest.raises(
        ValueError, match=r"^spatial_gating: variant 'gated' is not one of linear, additive, multiplicative, "
    ):
        kernels_gmlp.spatial_gating(**inputs, eps=EPS, variant="gated")
    with pytest.raises(ValueError) as error:
        kernels_gmlp.spatial_gating(**{**inputs, "weight": inputs["weight"][:, :4, :4]}, eps=EPS)
    assert str(error.value) == (
        "spatial_gating: weight has shape (2, 4, 4), expected (2, 5, 5) for projected of shape (1, 5, 16), variant "
        "'multiplicative_split' and 2 SGU heads."
    )
    three_heads = {**inputs, "weight": inputs["weight"][:1].expand(3, 5, 5), "bias": inputs["bias"][:1].expand(3, 5)}
    with pytest.raises(ValueError, match=r"^spatial_gating: the gate's 8 channels do not split into weight's 3 heads"):
        kernels_gmlp.spatial_gating(**three_heads, eps=EPS)


def test_the_module_imports_without_triton(monkeypatch):
    """Where Triton is missing the module still imports (the model imports it everywhere), says it is unavailable,
    and a call says why."""
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    path = Path(kernels_gmlp.__file__)
    spec = importlib.util.spec_from_file_location("kernels_gmlp_without_triton", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.triton is None
    assert not module.is_available()
    inputs = make_inputs(
        "additive", batch=1, length=3, channels=4, heads=1, mask=False, tiny=False, dtype=torch.float32,
        device="cpu",
    )  # fmt: skip
    with pytest.raises(RuntimeError, match=r"^spatial_gating needs Triton \(bundled with CUDA builds of PyTorch"):
        module.spatial_gating(**inputs, eps=EPS, variant="additive")


# ---- compiled for the GPU, without one ---------------------------------------------------------------------------
HOPPER_SHARED_MEMORY = 227 * 1024  # the most shared memory one block of an H100 or H200 may take


def compile_for_hopper() -> None:
    """Compiles every kernel specialisation the ops launch for gMLP-base's unit (2 x 512 tokens, 1,536 gate channels;
    bf16 in the four variants, fp32 in the split one), each of an autotuned kernel's tiles, to sm_90 machine code
    with Triton's bundled ptxas, in place of launching it, and prints one line per specialisation: the kernel's name,
    its shared memory in bytes and its tiles. Needs a process where Triton compiles (TRITON_INTERPRET unset); no
    GPU."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.autotuner import Autotuner

    compiled = set()

    def compile_instead(kernel, grid, *args, **kwargs):
        if isinstance(kernel, Autotuner):
            for config in kernel.configs:
                options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
                compile_instead(kernel.fn, grid, *args, **kwargs, **config.kwargs, **options)
            return
        options = {name: kwargs.pop(name) for name in ("num_warps", "num_stages") if name in kwargs}
        assert all(programs > 0 for programs in (grid(kwargs) if callable(grid) else grid))
        signature, attrs = {}, {}
        for index, (name, value) in enumerate(zip(kernel.arg_names, args)):
            if isinstance(value, torch.Tensor):
                signature[name] = "*" + {torch.float32: "fp32", torch.bfloat16: "bf16"}[value.dtype]
            else:
                signature[name] = "fp32" if isinstance(value, float) else "i32"
            if isinstance(value, int) and value % 16 == 0 or isinstance(value, torch.Tensor):
                attrs[(index,)] = [["tt.divisibility", 16]]  # as the launcher specialises aligned arguments
        signature.update(dict.fromkeys(kwargs, "constexpr"))
        key = (kernel.__name__, str(signature), str(kwargs), str(options))
        if key not in compiled:
            compiled.add(key)
            binary = triton.compile(
                ASTSource(kernel, signature, kwargs, attrs), target=GPUTarget("cuda", 90, 32), options=options
            )
            tiles = [kwargs.get(name) for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
            print(kernel.__name__, binary.metadata.shared, *tiles, options.get("num_warps"), options.get("num_stages"))

    kernels_gmlp._launch = compile_instead
    batch, length, channels = 2, 512, 1536
    for variant, dtype in [
        *((variant, torch.bfloat16) for variant in VARIANTS),
        ("multiplicative_split", torch.float32),
    ]:
        width = 2 * channels if variant == "multiplicative_split" else channels
        projected = torch.randn(batch, length, width).to(dtype)
        parameters = (
            torch.ones(channels),
            torch.zeros(channels),
            torch.randn(1, length, length),
            torch.ones(1, length),
        )
        token_mask, tiny = torch.ones(batch * length), torch.randn(batch, length, channels).to(dtype)
        kernels_gmlp.sgu_forward(projected, *parameters, token_mask, tiny, EPS, variant)
        mean = rstd = torch.ones(batch * length)
        grad = torch.randn(batch, length, channels).to(dtype)
        kernels_gmlp.sgu_backward(grad, projected, mean, rstd, *parameters, token_mask, tiny, variant)


@pytest.mark.e2e
@pytest.mark.cpu_only("compiles for the GPU without one; on a GPU, the tests above run the compiled kernels")
def test_every_kernel_compiles_for_hopper(device):
    """The interpreter does not check what the compiler does (dtypes, tl.dot's shapes, registers, shared memory): each
    kernel of gMLP-base's unit compiles to sm_90 machine code here, within a block's shared memory, the bf16 GEMMs
    with each of the tiles their autotuning times."""
    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton has no bundled ptxas to compile for sm_90 with")
    environment = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    script = "import test_sgu_kernels; test_sgu_kernels.compile_for_hopper()"
    result = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        cwd=Path(__file__).parent,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split() for line in result.stdout.splitlines()]
    kernels = {"_gate_norm_kernel", "_spatial_product_kernel", "_gate_rebuild_kernel", "_weight_grad_kernel"}
    assert {line[0] for line in lines} == kernels | {"_gate_norm_backward_kernel"}, result.stdout
    assert all(int(line[1]) <= HOPPER_SHARED_MEMORY for line in lines), result.stdout
    gemms = ("_spatial_product_kernel", "_weight_grad_kernel")
    compiled_tiles = {(line[0], *map(int, line[2:])) for line in lines if line[0] in gemms}
    for kernel in gemms:
        assert {(kernel, *tiles) for tiles in kernels_gmlp.TUNED_TILES} <= compiled_tiles, result.stdout


def test_the_gemms_time_their_tiles_only_for_long_16_bit_inputs_on_a_gpu(monkeypatch):
    """The GEMMs autotune for 16-bit inputs of at least TUNED_MIN_LENGTH tokens when compiled, starting from the
    fixed tiles at gMLP-base's sizes (so the timed choice is those or faster ones); fp32, short inputs and the
    interpreter launch the fixed tiles."""
    from triton.runtime.autotuner import Autotuner

    for rows, cols, depth in [(512, 1536, 512), (512, 512, 1536)]:  # W @ gate, and dW's dM @ gate^T
        config = kernels_gmlp._gemm_config(torch.bfloat16, rows=rows, cols=cols, depth=depth)
        tiles = tuple(config[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"))
        assert tiles == kernels_gmlp.TUNED_TILES[0]
    monkeypatch.setattr(kernels_gmlp, "INTERPRETED", False)
    for kernel in (kernels_gmlp._spatial_product_kernel, kernels_gmlp._weight_grad_kernel):
        tuned, options = kernels_gmlp._gemm_launch(kernel, torch.bfloat16, 512, config)
        assert isinstance(tuned, Autotuner) and tuned.fn is kernel and options == {}
        assert len(tuned.configs) == len(kernels_gmlp.TUNED_TILES)
        assert {"length", "head_channels"} <= set(tuned.keys) <= set(tuned.arg_names)
        assert kernels_gmlp._gemm_launch(kernel, torch.float16, kernels_gmlp.TUNED_MIN_LENGTH, config)[0] is tuned
        assert kernels_gmlp._gemm_launch(kernel, torch.float32, 512, config) == (kernel, config)
        assert kernels_gmlp._gemm_launch(kernel, torch.bfloat16, kernels_gmlp.TUNED_MIN_LENGTH - 1, config) == (
            kernel,
            config,
        )
    # The forward's gated output, the content's gradient and W^T @ dM are each timed for themselves.
    product_keys = set(kernels_gmlp._TUNED_KERNELS[kernels_gmlp._spatial_product_kernel].keys)
    assert {"EPILOGUE", "COMBINE", "HAS_TINY", "stride_weight_col"} <= product_keys
    monkeypatch.setattr(kernels_gmlp, "INTERPRETED", True)
    assert kernels_gmlp._gemm_launch(kernels_gmlp._weight_grad_kernel, torch.bfloat16, 512, config)[1] == config


# ---- on a GPU only ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["multiplicative_split", "multiplicative"])
def test_a_model_sized_unit_matches_the_reference_on_the_gpu(cuda_device, variant):
    """gMLP-base's unit: 1,536 gate channels, 512 tokens, bf16: the GEMMs' autotuned tiles (TUNED_TILES)."""
    check_against_reference(
        variant, batch=2, length=512, channels=1536, heads=1, mask=True, tiny=True, dtype=torch.bfloat16,
        device=cuda_device,
    )  # fmt: skip
    check_against_reference(
        variant, batch=2, length=300, channels=768, heads=2, mask=True, tiny=True, dtype=torch.float32,
        device=cuda_device,
    )  # fmt: skip


def test_tf32_stays_within_its_tolerance_on_the_gpu(cuda_device):
    """fp32 inputs with TF32 allowed, as torch's matmul would take them: the kernels' tl.dot in TF32."""
    with float32_matmul_precision("high"):
        check_against_reference(
            "multiplicative_split", batch=2, length=256, channels=512, heads=2, mask=True, tiny=True,
            dtype=torch.float32, device=cuda_device, tolerance=TF32_TOLERANCE,
        )  # fmt: skip


@pytest.mark.parametrize("variant", VARIANTS)
def test_compiled_matches_eager_on_the_gpu(cuda_device, variant):
    """torch.compile(fullgraph=True) over a function that calls the op: the same output and gradients as eager."""
    inputs = make_inputs(
        variant, batch=2, length=64, channels=96, heads=2, mask=True, tiny=True, dtype=torch.bfloat16,
        device=cuda_device,
    )  # fmt: skip
    upstream = torch.randn(2, 64, 96, generator=torch.Generator().manual_seed(3)).to(cuda_device)
    compiled = torch.compile(kernels_gmlp.spatial_gating, fullgraph=True)
    out, grads = run(compiled, inputs, upstream, variant=variant)
    eager_out, eager_grads = run(kernels_gmlp.spatial_gating, inputs, upstream, variant=variant)
    assert_matches(out, eager_out, tolerance=1e-3, what="compiled output")
    for name, grad in grads.items():
        assert_matches(grad, eager_grads[name], tolerance=1e-3, what=f"compiled gradient of {name}")
