"""The spatial gating unit as a hybrid of cuBLAS and Triton, forward and backward, for CUDA (and on the CPU under
Triton's interpreter).

`spatial_gating` computes what `GMLPLayer.gating` computes from U's output Z (before GELU). The spatial products
(token mixing by W) are GEMMs that cuBLAS runs (`torch.bmm`), with W cast to the compute dtype once per call; Triton
runs only the passes over rows of tokens, where the unit's time goes in elementwise traffic.

The gate and the product live head-major, (heads, L, batch, C / heads): then each head's product over the whole
batch is one GEMM, W[h] (L x L) @ (L x batch * C / heads), with no copy of W per sample and no transpose; the row
kernels read and write that layout directly.

forward
  1. `_gate_norm_kernel`, one pass over Z: GELU, the split, the gate's LayerNorm, zero at padding; writes the
     normalised gate (head-major, compute dtype) and each token's mean and 1/std (fp32).
  2. cuBLAS: the product P = W @ gate, one batched GEMM over the heads.
  3. `_combine_kernel`, a second, light row pass: mixed = P + b (+ aMLP's tiny-attention output), zero at padding;
     the output content (x|+) mixed with the content GELU(Z1) recomputed from Z. A Triton pass rather than torch
     pointwise ops: eager mode would run five or more kernels for it, each a round trip through memory, and it
     also turns the head-major `mixed` back into (batch, L, C) rows on the way; it writes `mixed` back over P (in the
     compute dtype) for the backward of a multiplicative variant, which is the only one that reads it.
backward (from Z, the statistics, the parameters, the token mask and, for a multiplicative variant, `mixed`: no
GEMM is recomputed)
  4. `_mixed_grad_kernel`, one pass over Z, dOut and `mixed`: the normalised gate rebuilt; dM, the gradient of
     `mixed` (dOut * GELU(Z1) for a multiplicative variant, dOut otherwise; zero at padding), which is also the
     tiny-attention output's gradient; and the content's share of dZ (dOut * mixed * GELU'(Z1) where it multiplies).
  5. cuBLAS: dW = dM @ gate^T per head (the sum over the batch and the head's channels is the GEMM's inner
     dimension) and dgate = W^T @ dM; db = dM's sum over the batch and the channels (torch, deterministic).
  6. `_gate_norm_backward_kernel`: the LayerNorm's and GELU's backward per token into dZ's gate channels, with the
     LayerNorm's weight and bias gradients as per-program partial sums added in a fixed order (no atomics).

Kept for the backward: Z, the per-token mean and 1/std, the token mask (fp32), the parameters (not b: its gradient
needs only dM), and `mixed` for the multiplicative variants (the compute dtype, C numbers per token).

Padding (`token_mask` False): the normalised gate is zeroed before mixing, and `mixed` (W gate + b + tiny) is zero at
the padded query positions, so the unit outputs content (x|+) 0 there: 0 for the multiplicative variants and
"linear", GELU(Z) for "additive". No gradient flows from a padded query position into W, b or the tiny-attention
output.

Every offset of a token row is computed in int64 (`_row_offsets`, `_head_major_offsets`): batch x L x C may pass
2^31 elements.

The kernels are registered as custom ops (`gmlp::sgu_forward`, `gmlp::sgu_backward`, through
`torch.library.triton_op`) with autograd, so that torch.compile and torch.export see them. Imports only torch, Triton
and the standard library, and imports where Triton is missing (`is_available()` is then False).
"""

import os
import types

import torch
from torch._subclasses.fake_tensor import is_fake
from torch._subclasses.functional_tensor import FunctionalTensor

try:
    import triton
    import triton.language as tl
except ImportError:  # the module still imports; is_available() says False and the model keeps its PyTorch path
    triton = None
    tl = types.SimpleNamespace(constexpr=None)  # the kernels' annotations only: they are never launched

# Triton decides between compiling and interpreting when it decorates a kernel, that is when this module is imported.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# How each variant combines content and mixed gate, as the kernels take it (a constexpr string): "multiplicative"
# and "multiplicative_split" differ only in where the gate's channels start.
COMBINES = {
    "linear": "linear",
    "additive": "additive",
    "multiplicative": "multiplicative",
    "multiplicative_split": "multiplicative",
}
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# The most programs of the LayerNorm's backward, each keeping one partial sum of the weight's and bias's gradients:
# a few per SM of an H100 (132 SMs), and few partial sums to add.
NORM_GRAD_PROGRAMS = 1024


def is_available() -> bool:
    """Whether `spatial_gating` can run here: Triton imports and torch has `triton_op`, and either CUDA is present or
    TRITON_INTERPRET=1 was set before this module was imported (then it runs on CPU tensors, slowly: for tests)."""
    return triton is not None and hasattr(torch.library, "triton_op") and (INTERPRETED or torch.cuda.is_available())


def _jit(fn):
    return triton.jit(fn) if triton is not None else fn


# ---- the kernels' pieces -----------------------------------------------------------------------------------------
@_jit
def _gelu(x):
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@_jit
def _gelu_grad(x):
    """d GELU(x) / dx = Phi(x) + x phi(x), exact (erf) GELU."""
    return 0.5 * (1.0 + tl.erf(x * 0.7071067811865476)) + x * tl.exp(-0.5 * x * x) * 0.3989422804014327


@_jit
def _row_offsets(row, stride):
    """row * stride for a block of token rows (row = sample * L + token), in int64."""
    return row.to(tl.int64) * stride


@_jit
def _head_major_offsets(row, col, length, batch, head_channels):
    """Where channel `col` of token row `row` (sample * L + token) lies in a head-major (heads, L, batch, C / heads)
    buffer, (rows, cols) offsets in int64: ((head * L + token) * batch + sample) * head_channels + channel."""
    sample, token = row // length, row % length
    head, within = col // head_channels, col % head_channels
    token_offsets = (token.to(tl.int64) * batch + sample) * head_channels
    head_offsets = head.to(tl.int64) * length * batch * head_channels + within
    return token_offsets[:, None] + head_offsets[None, :]


@_jit
def _kept(token_mask_ptr, row, row_in):
    """Whether each token row is a real token (the fp32 token mask is not 0)."""
    return tl.load(token_mask_ptr + row, mask=row_in, other=0.0) != 0.0


@_jit
def _layer_norm(activated, mean, rstd, norm_weight_ptr, norm_bias_ptr, col, col_in):
    """The gate's LayerNorm of GELU's output from each token's mean and 1/std, in fp32."""
    norm_weight = tl.load(norm_weight_ptr + col, mask=col_in, other=0.0).to(tl.float32)
    norm_bias = tl.load(norm_bias_ptr + col, mask=col_in, other=0.0).to(tl.float32)
    return (activated - mean[:, None]) * rstd[:, None] * norm_weight[None, :] + norm_bias[None, :]


# ---- the kernels -------------------------------------------------------------------------------------------------
@_jit
def _gate_norm_kernel(
    projected_ptr,
    norm_weight_ptr,
    norm_bias_ptr,
    token_mask_ptr,
    gate_ptr,
    mean_ptr,
    rstd_ptr,
    rows,
    length,
    batch,
    channels,
    head_channels,
    gate_offset,
    stride_projected,
    eps,
    HAS_MASK: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """Rows of tokens: gate = LayerNorm(GELU(Z2)), 0 at padding, stored head-major in the gate buffer's dtype; each
    token's mean and 1/std in fp32."""
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = tl.arange(0, BLOCK_C)
    row_in, col_in = row < rows, col < channels
    inside = row_in[:, None] & col_in[None, :]
    z_offsets = _row_offsets(row, stride_projected)[:, None] + gate_offset + col[None, :]
    z = tl.load(projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32)
    activated = _gelu(z)
    mean = tl.sum(activated, axis=1) / channels
    centred = tl.where(inside, activated - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / channels + eps)
    gate = _layer_norm(activated, mean, rstd, norm_weight_ptr, norm_bias_ptr, col, col_in)
    if HAS_MASK:
        gate = tl.where(_kept(token_mask_ptr, row, row_in)[:, None], gate, 0.0)
    gate_offsets = _head_major_offsets(row, col, length, batch, head_channels)
    tl.store(gate_ptr + gate_offsets, gate.to(gate_ptr.dtype.element_ty), mask=inside)
    tl.store(mean_ptr + row, mean, mask=row_in)
    tl.store(rstd_ptr + row, rstd, mask=row_in)


@_jit
def _combine_kernel(
    projected_ptr,
    mixed_ptr,
    bias_ptr,
    tiny_ptr,
    token_mask_ptr,
    out_ptr,
    rows,
    length,
    batch,
    channels,
    head_channels,
    stride_projected,
    stride_bias_head,
    stride_bias_token,
    HAS_MASK: tl.constexpr,
    HAS_TINY: tl.constexpr,
    COMBINE: tl.constexpr,
    STORE_MIXED: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """Rows of tokens: mixed = P + b (+ tiny), 0 at padding, from the product P in the head-major `mixed` buffer
    (written back over P where STORE_MIXED); out = GELU(Z1) (x|+) mixed as the variant combines, in (batch, L, C)."""
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = tl.arange(0, BLOCK_C)
    row_in, col_in = row < rows, col < channels
    inside = row_in[:, None] & col_in[None, :]
    mixed_offsets = _head_major_offsets(row, col, length, batch, head_channels)
    mixed = tl.load(mixed_ptr + mixed_offsets, mask=inside, other=0.0).to(tl.float32)
    bias_offsets = (col // head_channels)[None, :] * stride_bias_head + (row % length)[:, None] * stride_bias_token
    mixed += tl.load(bias_ptr + bias_offsets, mask=inside, other=0.0).to(tl.float32)
    channel_offsets = _row_offsets(row, channels)[:, None] + col[None, :]
    if HAS_TINY:
        mixed += tl.load(tiny_ptr + channel_offsets, mask=inside, other=0.0).to(tl.float32)
    if HAS_MASK:
        mixed = tl.where(_kept(token_mask_ptr, row, row_in)[:, None], mixed, 0.0)
    if STORE_MIXED:
        tl.store(mixed_ptr + mixed_offsets, mixed.to(mixed_ptr.dtype.element_ty), mask=inside)
    if COMBINE == "linear":
        out = mixed
    else:
        z_offsets = _row_offsets(row, stride_projected)[:, None] + col[None, :]
        content = _gelu(tl.load(projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32))
        out = content + mixed if COMBINE == "additive" else content * mixed
    tl.store(out_ptr + channel_offsets, out.to(out_ptr.dtype.element_ty), mask=inside)


@_jit
def _mixed_grad_kernel(
    projected_ptr,
    norm_weight_ptr,
    norm_bias_ptr,
    token_mask_ptr,
    mean_ptr,
    rstd_ptr,
    grad_ptr,
    mixed_ptr,
    gate_ptr,
    grad_mixed_ptr,
    grad_tiny_ptr,
    grad_projected_ptr,
    rows,
    length,
    batch,
    channels,
    head_channels,
    gate_offset,
    stride_projected,
    HAS_MASK: tl.constexpr,
    HAS_TINY: tl.constexpr,
    COMBINE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """The backward's first pass over rows of tokens: the normalised gate rebuilt from Z and the statistics
    (head-major); dM = dOut * GELU(Z1) for a multiplicative variant, else dOut, 0 at padding (head-major, and in
    (batch, L, C) as the tiny-attention output's gradient where HAS_TINY); for a multiplicative variant, the
    content's gradient dOut * mixed * GELU'(Z1) into dZ's content channels."""
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = tl.arange(0, BLOCK_C)
    row_in, col_in = row < rows, col < channels
    inside = row_in[:, None] & col_in[None, :]
    z_rows = _row_offsets(row, stride_projected)[:, None]
    z = tl.load(projected_ptr + z_rows + gate_offset + col[None, :], mask=inside, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + row, mask=row_in, other=0.0)
    rstd = tl.load(rstd_ptr + row, mask=row_in, other=0.0)
    gate = _layer_norm(_gelu(z), mean, rstd, norm_weight_ptr, norm_bias_ptr, col, col_in)
    if HAS_MASK:
        kept = _kept(token_mask_ptr, row, row_in)[:, None]
        gate = tl.where(kept, gate, 0.0)
    head_offsets = _head_major_offsets(row, col, length, batch, head_channels)
    tl.store(gate_ptr + head_offsets, gate.to(gate_ptr.dtype.element_ty), mask=inside)
    channel_offsets = _row_offsets(row, channels)[:, None] + col[None, :]
    grad = tl.load(grad_ptr + channel_offsets, mask=inside, other=0.0).to(tl.float32)
    if COMBINE == "multiplicative":
        z_content = tl.load(projected_ptr + z_rows + col[None, :], mask=inside, other=0.0).to(tl.float32)
        mixed = tl.load(mixed_ptr + head_offsets, mask=inside, other=0.0).to(tl.float32)
        grad_content = grad * mixed * _gelu_grad(z_content)
        tl.store(
            grad_projected_ptr + z_rows + col[None, :],
            grad_content.to(grad_projected_ptr.dtype.element_ty),
            mask=inside,
        )
        grad_mixed = grad * _gelu(z_content)
    else:
        grad_mixed = grad
    if HAS_MASK:
        grad_mixed = tl.where(kept, grad_mixed, 0.0)
    tl.store(grad_mixed_ptr + head_offsets, grad_mixed.to(grad_mixed_ptr.dtype.element_ty), mask=inside)
    if HAS_TINY:
        tl.store(grad_tiny_ptr + channel_offsets, grad_mixed.to(grad_tiny_ptr.dtype.element_ty), mask=inside)


@_jit
def _gate_norm_backward_kernel(
    projected_ptr,
    norm_weight_ptr,
    token_mask_ptr,
    mean_ptr,
    rstd_ptr,
    grad_gate_ptr,
    grad_ptr,
    grad_projected_ptr,
    partial_weight_ptr,
    partial_bias_ptr,
    rows,
    length,
    batch,
    channels,
    head_channels,
    gate_offset,
    rows_per_program,
    stride_projected,
    HAS_MASK: tl.constexpr,
    COMBINE: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """The gate's backward over `rows_per_program` tokens per program, from dgate (head-major): through the mask,
    the LayerNorm (from the saved statistics) and GELU into dZ's gate channels, adding the content's gradient where
    content and gate are the same GELU(Z) (the unsplit variants: dOut for "additive", `_mixed_grad_kernel`'s, already
    in dZ, for "multiplicative"); the LayerNorm's weight and bias gradients as one partial sum per program."""
    col = tl.arange(0, BLOCK_C)
    col_in = col < channels
    norm_weight = tl.load(norm_weight_ptr + col, mask=col_in, other=0.0).to(tl.float32)
    weight_acc = tl.zeros((BLOCK_ROWS, BLOCK_C), dtype=tl.float32)
    bias_acc = tl.zeros((BLOCK_ROWS, BLOCK_C), dtype=tl.float32)
    for start in range(0, rows_per_program, BLOCK_ROWS):
        row = tl.program_id(0) * rows_per_program + start + tl.arange(0, BLOCK_ROWS)
        row_in = row < rows
        inside = row_in[:, None] & col_in[None, :]
        z_offsets = _row_offsets(row, stride_projected)[:, None] + gate_offset + col[None, :]
        z = tl.load(projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row, mask=row_in, other=0.0)
        rstd = tl.load(rstd_ptr + row, mask=row_in, other=0.0)
        normalised = tl.where(inside, (_gelu(z) - mean[:, None]) * rstd[:, None], 0.0)
        head_offsets = _head_major_offsets(row, col, length, batch, head_channels)
        grad_normed = tl.load(grad_gate_ptr + head_offsets, mask=inside, other=0.0).to(tl.float32)
        if HAS_MASK:
            grad_normed = tl.where(_kept(token_mask_ptr, row, row_in)[:, None], grad_normed, 0.0)
        weight_acc += grad_normed * normalised
        bias_acc += grad_normed
        grad_scaled = grad_normed * norm_weight[None, :]
        projection = tl.sum(grad_scaled * normalised, axis=1) / channels
        centre = tl.sum(grad_scaled, axis=1) / channels
        grad_activated = (grad_scaled - normalised * projection[:, None] - centre[:, None]) * rstd[:, None]
        if COMBINE == "additive":
            channel_offsets = _row_offsets(row, channels)[:, None] + col[None, :]
            grad_activated += tl.load(grad_ptr + channel_offsets, mask=inside, other=0.0).to(tl.float32)
        grad_z = grad_activated * _gelu_grad(z)
        if COMBINE == "multiplicative" and not SPLIT:
            grad_z += tl.load(grad_projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32)
        tl.store(grad_projected_ptr + z_offsets, grad_z.to(grad_projected_ptr.dtype.element_ty), mask=inside)
    tl.store(partial_weight_ptr + tl.program_id(0) * channels + col, tl.sum(weight_acc, axis=0), mask=col_in)
    tl.store(partial_bias_ptr + tl.program_id(0) * channels + col, tl.sum(bias_acc, axis=0), mask=col_in)


# ---- launch configuration ----------------------------------------------------------------------------------------
def _row_config(channels: int) -> dict:
    """Row kernels: a whole row of channels per block, several rows where the channels are few."""
    block_c = triton.next_power_of_2(channels)
    block_rows = max(1, min(16, 4096 // block_c))
    return {"BLOCK_ROWS": block_rows, "BLOCK_C": block_c, "num_warps": 8 if block_rows * block_c >= 4096 else 4}


def _row_grid(rows: int, config: dict) -> tuple:
    return (triton.cdiv(rows, config["BLOCK_ROWS"]),)


def _gate_offset(variant: str, channels: int) -> int:
    """Where the gate's channels start in Z: Z2 for the split variant, else Z itself."""
    return channels if variant == "multiplicative_split" else 0


def _layout(projected: torch.Tensor, heads: int, channels: int) -> tuple:
    """The row kernels' shape arguments: rows (batch * L tokens), length, batch, channels, head_channels."""
    batch, length, _ = projected.shape
    return batch * length, length, batch, channels, channels // heads


def _head_major(projected: torch.Tensor, heads: int, channels: int) -> torch.Tensor:
    """An empty head-major buffer (heads, L, batch * C / heads) in projected's dtype, for the gate, `mixed` and
    their gradients: each head's (L x batch * C / heads) matrix is one GEMM's operand."""
    batch, length, _ = projected.shape
    return projected.new_empty(heads, length, batch * (channels // heads))


# ---- the custom ops ----------------------------------------------------------------------------------------------
def _custom_op(name: str):
    """Registers `gmlp::name` as a Triton op where Triton is present (a function of the same name otherwise, which
    `spatial_gating` never calls)."""
    if triton is None or not hasattr(torch.library, "triton_op"):
        return lambda fn: fn
    return torch.library.triton_op(f"gmlp::{name}", mutates_args=())


def _launch(kernel, grid: tuple, *args, **kwargs) -> None:
    """Launches the kernel, traceably by torch.compile and torch.export on a GPU (`wrap_triton`). The interpreter
    cannot be traced: there, a launch on the fake tensors that torch.export propagates shapes with does nothing (the
    kernels only fill the buffers the op allocates), one under torch.compile's functionalisation fails clearly, and
    one on real tensors runs the interpreted kernel itself (PyTorch before 2.13, the GPU machines' 2.11 among them,
    refuses to wrap an interpreted kernel)."""
    if INTERPRETED:
        tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
        if any(isinstance(tensor, FunctionalTensor) for tensor in tensors):
            raise RuntimeError(
                "torch.compile cannot trace Triton's interpreter (TRITON_INTERPRET=1): compile the kernels on a CUDA device, or call them eagerly here."
            )
        if not any(is_fake(tensor) for tensor in tensors):
            kernel[grid](*args, **kwargs)
        return
    torch.library.wrap_triton(kernel)[grid](*args, **kwargs)


@_custom_op("sgu_forward")
def sgu_forward(
    projected: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    token_mask: torch.Tensor | None,
    tiny_attention_output: torch.Tensor | None,
    eps: float,
    variant: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gated output (batch, length, C); the gate's per-token mean and 1/std (batch * length,), fp32; and, for a
    multiplicative variant, `mixed` = W gate + b + tiny (0 at padding), head-major (heads, L, batch * C / heads) in
    projected's dtype (an empty tensor for the others). Expects what `spatial_gating` passes: contiguous
    `projected`, `tiny_attention_output` and fp32 `token_mask` (batch * length,)."""
    heads, channels = weight.shape[0], norm_weight.shape[0]
    layout = _layout(projected, heads, channels)
    rows = layout[0]
    gate = _head_major(projected, heads, channels)
    mean = projected.new_empty(rows, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    row_config = _row_config(channels)
    has_mask = token_mask is not None
    _launch(
        _gate_norm_kernel,
        _row_grid(rows, row_config),
        projected,
        norm_weight,
        norm_bias,
        token_mask if has_mask else mean,
        gate,
        mean,
        rstd,
        *layout,
        _gate_offset(variant, channels),
        projected.stride(1),
        eps,
        HAS_MASK=has_mask,
        **row_config,
    )
    mixed = torch.bmm(weight.to(projected.dtype), gate)
    out = projected.new_empty(projected.shape[0], projected.shape[1], channels)
    multiplicative = COMBINES[variant] == "multiplicative"
    _launch(
        _combine_kernel,
        _row_grid(rows, row_config),
        projected,
        mixed,
        bias,
        tiny_attention_output if tiny_attention_output is not None else out,
        token_mask if has_mask else mean,
        out,
        *layout,
        projected.stride(1),
        bias.stride(0),
        bias.stride(1),
        HAS_MASK=has_mask,
        HAS_TINY=tiny_attention_output is not None,
        COMBINE=COMBINES[variant],
        STORE_MIXED=multiplicative,
        **row_config,
    )
    return out, mean, rstd, mixed if multiplicative else mixed.new_empty(0)


@_custom_op("sgu_backward")
def sgu_backward(
    grad: torch.Tensor,
    projected: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    weight: torch.Tensor,
    mixed: torch.Tensor | None,
    token_mask: torch.Tensor | None,
    has_tiny: bool,
    variant: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of `sgu_forward`'s output with respect to projected, norm_weight, norm_bias, weight, the bias
    (fp32) and, where `has_tiny`, the tiny-attention output (in projected's dtype; an empty tensor otherwise).
    `grad` is contiguous, in projected's dtype; `mixed` is `sgu_forward`'s, for a multiplicative variant."""
    heads, channels = weight.shape[0], norm_weight.shape[0]
    layout = _layout(projected, heads, channels)
    rows = layout[0]
    gate_offset = _gate_offset(variant, channels)
    row_config = _row_config(channels)
    has_mask = token_mask is not None
    gate = _head_major(projected, heads, channels)
    grad_mixed = torch.empty_like(gate)
    grad_tiny = torch.empty_like(grad) if has_tiny else grad.new_empty(0)
    grad_projected = torch.empty_like(projected)
    _launch(
        _mixed_grad_kernel,
        _row_grid(rows, row_config),
        projected,
        norm_weight,
        norm_bias,
        token_mask if has_mask else mean,
        mean,
        rstd,
        grad,
        mixed if mixed is not None else grad,
        gate,
        grad_mixed,
        grad_tiny if has_tiny else grad,
        grad_projected,
        *layout,
        gate_offset,
        projected.stride(1),
        HAS_MASK=has_mask,
        HAS_TINY=has_tiny,
        COMBINE=COMBINES[variant],
        **row_config,
    )
    compute_weight = weight.to(projected.dtype)
    grad_weight = torch.bmm(grad_mixed, gate.transpose(1, 2)).to(weight.dtype)
    grad_bias = grad_mixed.sum(-1, dtype=torch.float32)
    grad_gate = torch.bmm(compute_weight.transpose(1, 2), grad_mixed)
    grad_norm_weight, grad_norm_bias = _gate_norm_backward(
        projected, norm_weight, token_mask, mean, rstd, grad_gate, grad, grad_projected, layout, variant, row_config
    )
    grad_norm_weight, grad_norm_bias = grad_norm_weight.to(norm_weight.dtype), grad_norm_bias.to(norm_bias.dtype)
    return grad_projected, grad_norm_weight, grad_norm_bias, grad_weight, grad_bias, grad_tiny


def _gate_norm_backward(
    projected, norm_weight, token_mask, mean, rstd, grad_gate, grad, grad_projected, layout, variant, row_config
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launches `_gate_norm_backward_kernel` (dZ's gate channels, in place in `grad_projected`) over at most
    NORM_GRAD_PROGRAMS programs and returns the LayerNorm's weight and bias gradients (fp32), the programs' partial
    sums added in their order."""
    rows, channels = layout[0], layout[3]
    blocks = triton.cdiv(rows, row_config["BLOCK_ROWS"])
    rows_per_program = triton.cdiv(blocks, min(blocks, NORM_GRAD_PROGRAMS)) * row_config["BLOCK_ROWS"]
    programs = triton.cdiv(rows, rows_per_program)
    partial_weight = projected.new_empty(programs, channels, dtype=torch.float32)
    partial_bias = torch.empty_like(partial_weight)
    _launch(
        _gate_norm_backward_kernel,
        (programs,),
        projected,
        norm_weight,
        token_mask if token_mask is not None else mean,
        mean,
        rstd,
        grad_gate,
        grad,
        grad_projected,
        partial_weight,
        partial_bias,
        *layout,
        _gate_offset(variant, channels),
        rows_per_program,
        projected.stride(1),
        HAS_MASK=token_mask is not None,
        COMBINE=COMBINES[variant],
        SPLIT=variant == "multiplicative_split",
        **row_config,
    )
    return partial_weight.sum(0), partial_bias.sum(0)


def _setup_context(ctx, inputs, output):
    projected, norm_weight, norm_bias, weight, bias, token_mask, tiny, _eps, variant = inputs
    _out, mean, rstd, mixed = output
    ctx.mark_non_differentiable(mean, rstd, mixed)
    ctx.variant = variant
    ctx.bias_dtype = bias.dtype
    ctx.tiny_dtype = None if tiny is None else tiny.dtype
    # The bias and the tiny-attention output are in `mixed` already, which only a multiplicative variant reads.
    multiplicative = COMBINES[variant] == "multiplicative"
    ctx.save_for_backward(
        projected, mean, rstd, norm_weight, norm_bias, weight, token_mask, mixed if multiplicative else None
    )


def _backward(ctx, grad, _grad_mean, _grad_rstd, _grad_mixed):
    projected, mean, rstd, norm_weight, norm_bias, weight, token_mask, mixed = ctx.saved_tensors
    grads = torch.ops.gmlp.sgu_backward(
        grad.to(projected.dtype).contiguous(),
        projected,
        mean,
        rstd,
        norm_weight,
        norm_bias,
        weight,
        mixed,
        token_mask,
        ctx.tiny_dtype is not None,
        ctx.variant,
    )
    grad_projected, grad_norm_weight, grad_norm_bias, grad_weight, grad_bias, grad_tiny = grads
    grad_bias = grad_bias.to(ctx.bias_dtype)
    grad_tiny = None if ctx.tiny_dtype is None else grad_tiny.to(ctx.tiny_dtype)
    return grad_projected, grad_norm_weight, grad_norm_bias, grad_weight, grad_bias, None, grad_tiny, None, None


if is_available():
    torch.library.register_autograd("gmlp::sgu_forward", _backward, setup_context=_setup_context)


# ---- the function the model calls --------------------------------------------------------------------------------
def spatial_gating(
    projected: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    *,
    eps: float,
    variant: str = "multiplicative_split",
    token_mask: torch.Tensor | None = None,
    tiny_attention_output: torch.Tensor | None = None,
) -> torch.Tensor:
    """The spatial gating unit s(GELU(Z)) from U's output Z (cuBLAS products, Triton row passes); the same function
    as the model's PyTorch path.

    projected: Z, (batch, L, 2C) for "multiplicative_split", else (batch, L, C), fp32 / bf16 / fp16.
    norm_weight, norm_bias: the gate's LayerNorm, (C,), with `eps`.
    weight: W as applied (causal mask applied, sliced to L), (H, L, L) for H SGU heads (C divisible by H); bias (H, L).
    token_mask: (batch, L), bool or float, or None: where 0 (padding), the normalised gate is zeroed before mixing
        and the mixed gate W gate + b + tiny is 0, so the output there is the variant's combine of the content with 0.
    tiny_attention_output: (batch, L, C) or None (aMLP): added to the spatial product.
    Returns (batch, L, C) in projected's dtype. Differentiable in every tensor but `token_mask`.
    """
    _check_inputs(projected, norm_weight, norm_bias, weight, bias, variant, token_mask, tiny_attention_output)
    batch, length, _ = projected.shape
    if token_mask is not None:
        token_mask = token_mask.to(torch.float32).reshape(batch * length)
    if tiny_attention_output is not None:
        tiny_attention_output = tiny_attention_output.contiguous()
    out, _mean, _rstd, _mixed = torch.ops.gmlp.sgu_forward(
        projected.contiguous(), norm_weight, norm_bias, weight, bias, token_mask, tiny_attention_output, eps, variant
    )
    return out


def _check_inputs(projected, norm_weight, norm_bias, weight, bias, variant, token_mask, tiny) -> None:
    """A clear error for what the kernels cannot take, the same on every device."""
    if not is_available():
        raise RuntimeError(
            "spatial_gating needs Triton (bundled with CUDA builds of PyTorch >= 2.6) and a CUDA device, or "
            "TRITON_INTERPRET=1 set before gmlp.kernels_gmlp is imported to run it on the CPU; use the PyTorch path "
            "(config.sgu_kernel='torch') here."
        )
    if variant not in COMBINES:
        raise ValueError(f"spatial_gating: variant {variant!r} is not one of {', '.join(COMBINES)}.")
    if projected.dim() != 3 or weight.dim() != 3:
        raise ValueError(
            f"spatial_gating: projected must be (batch, L, channels) and weight (heads, L, L); got shapes "
            f"{tuple(projected.shape)} and {tuple(weight.shape)}."
        )
    if projected.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"spatial_gating: projected's dtype {projected.dtype} is not float32, bfloat16 or float16.")
    if projected.device.type != "cuda" and not INTERPRETED:
        raise ValueError(
            f"spatial_gating: the kernels run on CUDA tensors, not on {projected.device.type} ones (on the CPU only "
            "under TRITON_INTERPRET=1, set before gmlp.kernels_gmlp is imported)."
        )
    batch, length, width = projected.shape
    heads = weight.shape[0]
    channels = width // 2 if variant == "multiplicative_split" else width
    if variant == "multiplicative_split" and width % 2:
        raise ValueError(
            f"spatial_gating: variant 'multiplicative_split' splits projected's {width} channels in two; pass an even number."
        )
    if channels % heads:
        raise ValueError(f"spatial_gating: the gate's {channels} channels do not split into weight's {heads} heads.")
    expected = {
        "norm_weight": (norm_weight, (channels,)),
        "norm_bias": (norm_bias, (channels,)),
        "weight": (weight, (heads, length, length)),
        "bias": (bias, (heads, length)),
        "token_mask": (token_mask, (batch, length)),
        "tiny_attention_output": (tiny, (batch, length, channels)),
    }
    for name, (tensor, shape) in expected.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(
                f"spatial_gating: {name} has shape {tuple(tensor.shape)}, expected {shape} for projected of shape "
                f"{tuple(projected.shape)}, variant {variant!r} and {heads} SGU heads."
            )
        if tensor is not None and tensor.device != projected.device:
            raise ValueError(
                f"spatial_gating: {name} is on {tensor.device}, projected on {projected.device}; pass all on one device."
            )
