"""The hybrid spatial gating unit (gmlp/kernels_gmlp.py: cuBLAS products, Triton row passes) against the model's
PyTorch math in fp32: the output and the gradient of every input (projected, the gate's LayerNorm weight and bias, W,
b, the tiny-attention output), for the four SGU variants, one or two SGU heads, with and without a token mask and a
tiny-attention output, a dense or a causal W, lengths that are not a multiple of the blocks and channels that are not
a power of two, in fp32, bf16 and fp16; the padding definition (mixed = 0 at padded positions); the 64-bit offsets;
what the autograd graph keeps for the backward; the op as torch.export sees it.

In the CPU pass (CI's) the kernels run under Triton's interpreter (conftest.py sets TRITON_INTERPRET=1 before
anything imports Triton); with `--device cuda` the same tests run the compiled kernels, and the CUDA-only ones (a
model-sized unit, TF32, torch.compile) run too. The spatial weights are drawn far from their near-zero init
(W ~ randn / sqrt(L), b ~ 1 + randn), where a token-mixing error would not hide.
"""

import contextlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import child_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("triton", reason="Triton is not installed: the kernels' tests need it (the dev extra has it)")
pytest.importorskip("numpy", reason="Triton's interpreter needs numpy (the dev extra has it)")

import triton
import triton.language as tl

from gmlp import kernels_gmlp

VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")
EPS = 1e-5
# The relative error of a whole tensor, ‖kernel − fp32 reference‖ / ‖reference‖ (assert_matches), both from the
# same (rounded) inputs. fp32: the summation order (measured up to 1.9e-7 over 32 random cases on the CPU). bf16 and
# fp16: the normalised gate, W, the GEMMs' operands and results, `mixed` and the stored results rounded to the dtype
# as in the PyTorch path (measured under the interpreter, whose casts to bf16 round toward zero: up to 1.0e-2 and
# 6.3e-4; the PyTorch path run in that dtype: up to 1.2e-2 and 1.7e-3).
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


def make_inputs(variant, *, batch, length, channels, heads, mask, tiny, dtype, device, seed=0, causal=False) -> dict:
    """The unit's inputs in `dtype` (the parameters in fp32, as the model keeps them), away from their init; a
    lower-triangular W where `causal`, as the causal model passes it."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=generator)

    width = 2 * channels if variant == "multiplicative_split" else channels
    inputs = {
        "projected": draw(batch, length, width).to(dtype),
        "norm_weight": 1 + 0.5 * draw(channels),
        "norm_bias": 0.5 * draw(channels),
        "weight": (draw(heads, length, length) / length**0.5).tril(0 if causal else length),  # all of W unless causal
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
    """The model's PyTorch path (GMLPLayer.gating without a cache), in fp32, with the padding definition: where
    `token_mask` is False the normalised gate is zeroed before mixing and the mixed gate (W gate + b + tiny) is 0."""
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
    if token_mask is not None:
        mixed = torch.where(token_mask[..., None], mixed, 0.0)
    return combine(variant, content, mixed)


def combine(variant, content, mixed):
    """The variant's output from the content GELU(Z1) and the mixed gate."""
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


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_with_one_head_and_a_causal_weight_matches_the_reference(kernel_device, variant):
    """fp16, one head of 20 channels, 19 tokens, a lower-triangular W, no token mask and no tiny-attention output."""
    check_against_reference(
        variant, batch=3, length=19, channels=20, heads=1, mask=False, tiny=False, causal=True, dtype=torch.float16,
        device=kernel_device,
    )  # fmt: skip


@pytest.mark.parametrize("variant", ["multiplicative_split", "multiplicative"])
def test_a_sequence_over_several_blocks_matches_the_reference(kernel_device, variant):
    """150 tokens in each of two rows: the row passes over 19 blocks of 16 tokens, a block astride the two rows; one
    head of 40 channels."""
    check_against_reference(
        variant, batch=2, length=150, channels=40, heads=1, mask=True, tiny=False, dtype=torch.float32,
        device=kernel_device,
    )  # fmt: skip


@pytest.mark.parametrize("programs", [1, 2])
def test_the_layer_norm_gradients_over_few_programs_match_the_reference(kernel_device, monkeypatch, programs):
    """The LayerNorm's backward in fewer programs than blocks of rows (as for long batches on a GPU): one program
    over all 39 tokens, or two over 32 and 7, whose partial sums of the weight's and bias's gradients add up."""
    monkeypatch.setattr(kernels_gmlp, "NORM_GRAD_PROGRAMS", programs)
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
    causal=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    seed=st.integers(0, 2**16),
)
def test_property_matches_the_reference(kernel_device, variant, heads, head_channels, dtype, **sizes):
    check_against_reference(
        variant, channels=heads * head_channels, heads=heads, dtype=dtype, device=kernel_device, **sizes
    )


# ---- padding ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_padded_position_outputs_the_content_combined_with_zero(kernel_device, variant, dtype):
    """Where the token mask is False, mixed is 0: the output is content (x|+) 0, exactly 0 for the multiplicative
    variants and "linear", GELU(Z) for "additive" (exactly the same for another W, b and tiny-attention output, and
    within Triton's erf of torch's GELU); and no gradient reaches W's row, b or the tiny-attention output there
    (position 2 is padding in every row)."""
    inputs = make_inputs(
        variant, batch=2, length=7, channels=6, heads=1, mask=True, tiny=True, dtype=dtype, device=kernel_device
    )
    inputs["token_mask"][:, 2] = False
    padded = ~inputs["token_mask"]
    upstream = torch.randn(2, 7, 6, generator=torch.Generator().manual_seed(5)).to(kernel_device)
    out, grads = run(kernels_gmlp.spatial_gating, inputs, upstream, variant=variant)
    activated = F.gelu(inputs["projected"].detach().float())
    content = activated[..., :6] if variant == "multiplicative_split" else activated
    expected = combine(variant, content, torch.zeros_like(content)).to(dtype)
    if variant == "additive":
        others = make_inputs(
            variant, batch=2, length=7, channels=6, heads=1, mask=False, tiny=True, dtype=dtype,
            device=kernel_device, seed=1,
        )  # fmt: skip
        other_mixing = {name: others[name] for name in ("weight", "bias", "tiny_attention_output")}
        other_out = kernels_gmlp.spatial_gating(**{**inputs, **other_mixing}, eps=EPS, variant=variant)
        assert torch.equal(other_out[padded], out[padded])
        # Triton's erf and torch's differ in fp32's last bits; in bf16 one ulp (2^-7 relative at most) apart, as the
        # interpreter (Triton 3.9) casts fp32 to bf16 toward zero where torch rounds to nearest
        rtol = 1e-6 if dtype == torch.float32 else 2**-7
        torch.testing.assert_close(out[padded], expected[padded], rtol=rtol, atol=0)
    else:
        assert torch.equal(out[padded], expected[padded])
    assert torch.equal(grads["weight"][:, 2], torch.zeros_like(grads["weight"][:, 2]))
    assert torch.equal(grads["bias"][:, 2], torch.zeros_like(grads["bias"][:, 2]))
    tiny_grad = grads["tiny_attention_output"]
    assert torch.equal(tiny_grad[padded], torch.zeros_like(tiny_grad[padded]))


# ---- 64-bit offsets -----------------------------------------------------------------------------------------------
@triton.jit
def offsets_probe(
    row_ptr, col_ptr, row_offsets_ptr, int32_offsets_ptr, head_offsets_ptr, stride, length, batch, head_channels,
    ROWS: tl.constexpr, COLS: tl.constexpr,
):  # fmt: skip
    """Stores the kernels' offset helpers' results for the given rows and columns, and row * stride in int32 beside
    them."""
    row = tl.load(row_ptr + tl.arange(0, ROWS))
    col = tl.load(col_ptr + tl.arange(0, COLS))
    tl.store(row_offsets_ptr + tl.arange(0, ROWS), kernels_gmlp._row_offsets(row, stride))
    tl.store(int32_offsets_ptr + tl.arange(0, ROWS), (row * stride).to(tl.int64))
    head_offsets = kernels_gmlp._head_major_offsets(row, col, length, batch, head_channels)
    tl.store(head_offsets_ptr + tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :], head_offsets)


def test_the_offsets_are_64_bit(kernel_device):
    """The two helpers that every row kernel computes its token rows' offsets with (`_row_offsets` for (batch, L, C)
    tensors, `_head_major_offsets` for the head-major gate and `mixed`) give exact offsets past 2^31 for int32 rows
    and columns, where the same product in int32 wraps (the interpreter's int32 wraps as the GPU's does). This checks
    the helpers' arithmetic, not each load and store: that the kernels take their row offsets from these helpers is
    read in the source, not tested."""
    if not kernels_gmlp.INTERPRETED:
        pytest.skip("a probe of the offsets under the interpreter (the helpers compile the same on a GPU)")
    length, batch, head_channels, stride = 4096, 600_000, 768, 10_000
    rows = torch.tensor([0, 1, 299_999, 2_000_000_000], dtype=torch.int32)
    cols = torch.tensor([0, 5, 767, 3 * 768 + 1], dtype=torch.int32)
    row_offsets, int32_offsets = torch.empty(4, dtype=torch.int64), torch.empty(4, dtype=torch.int64)
    head_offsets = torch.empty(4, 4, dtype=torch.int64)
    offsets_probe[(1,)](
        rows, cols, row_offsets, int32_offsets, head_offsets, stride, length, batch, head_channels, ROWS=4, COLS=4
    )
    assert row_offsets.tolist() == [row * stride for row in rows.tolist()]
    assert int32_offsets.tolist() != row_offsets.tolist()  # the probe can tell: int32 wraps past 2^31

    def head_major(row, col):
        sample, token = divmod(row, length)
        head, channel = divmod(col, head_channels)
        return ((head * length + token) * batch + sample) * head_channels + channel

    assert head_offsets.tolist() == [[head_major(row, col) for col in cols.tolist()] for row in rows.tolist()]
    assert head_offsets.max() > 2**40


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
def test_the_backward_keeps_projected_the_statistics_the_parameters_and_mixed(kernel_device, variant):
    """Saved for the backward: U's output, the parameters but b, the token mask (as fp32), each token's mean and
    1/std, and `mixed` (W gate + b + tiny, in bf16) where the variant multiplies by it, so that no GEMM runs again;
    not the bias or the tiny-attention output (in `mixed`), GELU's output or the normalised gate, which the plain path
    keeps."""
    batch, length, channels = 2, 12, 16
    inputs = make_inputs(
        variant, batch=batch, length=length, channels=channels, heads=2, mask=True, tiny=True,
        dtype=torch.bfloat16, device=kernel_device,
    )  # fmt: skip
    saved = saved_tensors(kernels_gmlp.spatial_gating, inputs, variant=variant)
    kept_inputs = ["projected", "norm_weight", "norm_bias", "weight"]
    assert {storage(inputs[name]) for name in kept_inputs} <= {storage(tensor) for tensor in saved}
    others = [tensor for tensor in saved if storage(tensor) not in {storage(inputs[name]) for name in kept_inputs}]
    tokens = batch * length
    # the mean, 1/std and the mask: one fp32 number per token each; `mixed`: head-major, C numbers per token
    expected = [((tokens,), torch.float32)] * 3
    if variant == "multiplicative_split":
        expected.insert(0, ((2, length, batch * channels // 2), torch.bfloat16))
    assert sorted((tuple(t.shape), t.dtype) for t in others) == sorted(expected, key=str)
    assert len(saved) == len(kept_inputs) + len(expected)

    def activation_bytes(tensors):  # what the step keeps beyond the parameters
        parameters = {storage(inputs[name]) for name in ("norm_weight", "norm_bias", "weight", "bias")}
        unique = {storage(t): t.untyped_storage().nbytes() for t in tensors if storage(t) not in parameters}
        return sum(unique.values())

    kernel_bytes = activation_bytes(saved)
    mixed_bytes = tokens * channels * 2 if variant == "multiplicative_split" else 0
    assert kernel_bytes == inputs["projected"].nbytes + 3 * 4 * tokens + mixed_bytes
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
    bf16 in the four variants, fp32 in the split one; the GEMMs run in torch on the CPU) to sm_90 machine code with
    Triton's bundled ptxas, in place of launching it, and prints one line per specialisation: the kernel's name and
    its shared memory in bytes. Needs a process where Triton compiles (TRITON_INTERPRET
    unset); no GPU."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    compiled = set()

    def compile_instead(kernel, grid, *args, **kwargs):
        options = {name: kwargs.pop(name) for name in ("num_warps", "num_stages") if name in kwargs}
        assert all(programs > 0 for programs in grid)
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
            print(kernel.__name__, binary.metadata.shared)

    kernels_gmlp._launch = compile_instead
    batch, length, channels = 2, 512, 1536
    for variant, dtype in [
        *((variant, torch.bfloat16) for variant in VARIANTS),
        ("multiplicative_split", torch.float32),
    ]:
        width = 2 * channels if variant == "multiplicative_split" else channels
        projected = torch.randn(batch, length, width).to(dtype)
        parameters = (torch.ones(channels), torch.zeros(channels), torch.randn(1, length, length))
        bias = torch.ones(1, length)
        token_mask, tiny = torch.ones(batch * length), torch.randn(batch, length, channels).to(dtype)
        _out, mean, rstd, mixed = kernels_gmlp.sgu_forward(
            projected, *parameters, bias, token_mask, tiny, EPS, variant
        )
        grad = torch.randn(batch, length, channels).to(dtype)
        mixed = mixed if mixed.numel() else None
        kernels_gmlp.sgu_backward(grad, projected, mean, rstd, *parameters, mixed, token_mask, True, variant)


@pytest.mark.e2e
@pytest.mark.cpu_only("compiles for the GPU without one; on a GPU, the tests above run the compiled kernels")
def test_every_kernel_compiles_for_hopper(device):
    """The interpreter does not check what the compiler does (dtypes, shapes, registers, shared memory): each row
    kernel of gMLP-base's unit compiles to sm_90 machine code here, within a block's shared memory."""
    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton has no bundled ptxas to compile for sm_90 with")
    # this checkout's gmlp and tests/helpers.py, compiled (no TRITON_INTERPRET)
    environment = {
        name: value for name, value in child_env(Path(__file__).parents[1]).items() if name != "TRITON_INTERPRET"
    }
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
    kernels = {"_gate_norm_kernel", "_combine_kernel", "_mixed_grad_kernel", "_gate_norm_backward_kernel"}
    assert {line[0] for line in lines} == kernels, result.stdout
    assert all(int(line[1]) <= HOPPER_SHARED_MEMORY for line in lines), result.stdout


# ---- on a GPU only ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["multiplicative_split", "multiplicative"])
def test_a_model_sized_unit_matches_the_reference_on_the_gpu(cuda_device, variant):
    """gMLP-base's unit: 1,536 gate channels, 512 tokens, bf16 (row blocks of two tokens); 300 tokens and two heads
    in fp32."""
    check_against_reference(
        variant, batch=2, length=512, channels=1536, heads=1, mask=True, tiny=True, dtype=torch.bfloat16,
        device=cuda_device,
    )  # fmt: skip
    check_against_reference(
        variant, batch=2, length=300, channels=768, heads=2, mask=True, tiny=True, dtype=torch.float32,
        device=cuda_device,
    )  # fmt: skip


def test_tf32_stays_within_its_tolerance_on_the_gpu(cuda_device):
    """fp32 inputs with TF32 allowed: cuBLAS's products in TF32, as the PyTorch path's."""
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
