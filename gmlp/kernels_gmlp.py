"""The spatial gating unit fused in Triton, forward and backward, for CUDA (and on the CPU under Triton's interpreter).

`spatial_gating` computes what `GMLPLayer.gating` computes from U's output Z (before GELU), in five kernels (the
GEMM is used three ways):

forward
  1. `_gate_norm_kernel`, one pass over the gate's half of Z: GELU, the gate's LayerNorm and the token mask; writes
     the normalised gate and each token's mean and 1/std.
  2. `_spatial_product_kernel`, the product W @ gate per (batch, SGU head) as a GEMM whose epilogue adds the bias
     (and aMLP's tiny-attention output) and applies the variant with the content, GELU(Z1) recomputed from Z there:
     the gated result is written once.
backward (from Z, the statistics, the parameters and the tiny-attention output alone: GELU's output, the normalised
gate and the product are rebuilt, never kept between the passes)
  3. `_gate_rebuild_kernel`: the normalised gate again, and the product's gradient dM = dOut * GELU(Z1) where the
     variant multiplies.
  4. `_spatial_product_kernel` again: for a multiplicative variant W @ gate once more, whose epilogue writes the
     content's gradient dOut * (W gate + b + tiny) * GELU'(Z1) straight into dZ; then W^T @ dM, the gate's gradient.
  5. `_weight_grad_kernel`: dW = sum over the batch of dM @ gate^T per head, and the bias's gradient beside it (the
     batch split across programs where L is short, the splits' fp32 partial sums added after).
  6. `_gate_norm_backward_kernel`: the LayerNorm's and GELU's backward per token, into dZ, with per-program partial
     sums of the LayerNorm's weight and bias gradients.

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
# About four programs per SM of an H100 (132 SMs): dW's GEMM splits the batch until it has as many.
WEIGHT_GRAD_PROGRAMS = 512
# The tiles (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) that the GEMMs choose among on a GPU by timing them
# (`triton.autotune`, once per use, length, head width and dtype) for 16-bit inputs of at least TUNED_MIN_LENGTH tokens,
# where the GEMMs are most of the unit's time. The first is `_gemm_config`'s at those sizes, so the timed choice is
# never one that runs slower than it; each compiles for sm_90 within a block's shared memory
# (tests/model/test_sgu_kernels.py), the 128 x 128 tiles spilling up to 112 bytes in the epilogues (ptxas -v, Triton
# 3.9). Shorter or fp32 inputs, and the interpreter, take `_gemm_config`'s alone.
TUNED_TILES = ((128, 64, 64, 8, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4))
TUNED_MIN_LENGTH = 128


def is_available() -> bool:
    """Whether `spatial_gating` can run here: Triton imports and torch has `triton_op`, and either CUDA is present or
    TRITON_INTERPRET=1 was set before this module was imported (then it runs on CPU tensors, slowly: for tests)."""
    return triton is not None and hasattr(torch.library, "triton_op") and (INTERPRETED or torch.cuda.is_available())


def _jit(fn):
    return triton.jit(fn) if triton is not None else fn


# ---- the kernels -------------------------------------------------------------------------------------------------
@_jit
def _gelu(x):
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@_jit
def _gelu_grad(x):
    """d GELU(x) / dx = Phi(x) + x phi(x), exact (erf) GELU."""
    return 0.5 * (1.0 + tl.erf(x * 0.7071067811865476)) + x * tl.exp(-0.5 * x * x) * 0.3989422804014327


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
    channels,
    gate_offset,
    stride_projected,
    eps,
    HAS_MASK: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """Rows of tokens: gate = LayerNorm(GELU(Z2)) * mask, stored in the gate buffer's dtype; mean and 1/std in fp32."""
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = tl.arange(0, BLOCK_C)
    row_in, col_in = row < rows, col < channels
    inside = row_in[:, None] & col_in[None, :]
    z_offsets = row.to(tl.int64)[:, None] * stride_projected + gate_offset + col[None, :]
    activated = _gelu(tl.load(projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32))
    mean = tl.sum(activated, axis=1) / channels
    centred = tl.where(inside, activated - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / channels + eps)
    norm_weight = tl.load(norm_weight_ptr + col, mask=col_in, other=0.0).to(tl.float32)
    norm_bias = tl.load(norm_bias_ptr + col, mask=col_in, other=0.0).to(tl.float32)
    gate = centred * rstd[:, None] * norm_weight[None, :] + norm_bias[None, :]
    if HAS_MASK:
        gate = gate * tl.load(token_mask_ptr + row, mask=row_in, other=0.0)[:, None]
    gate_offsets = row.to(tl.int64)[:, None] * channels + col[None, :]
    tl.store(gate_ptr + gate_offsets, gate.to(gate_ptr.dtype.element_ty), mask=inside)
    tl.store(mean_ptr + row, mean, mask=row_in)
    tl.store(rstd_ptr + row, rstd, mask=row_in)


@_jit
def _gate_rebuild_kernel(
    projected_ptr,
    norm_weight_ptr,
    norm_bias_ptr,
    token_mask_ptr,
    mean_ptr,
    rstd_ptr,
    grad_ptr,
    gate_ptr,
    grad_mixed_ptr,
    rows,
    channels,
    gate_offset,
    stride_projected,
    HAS_MASK: tl.constexpr,
    MULTIPLICATIVE_VARIANT: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """The backward's first pass over rows of tokens: the normalised gate from Z and the saved statistics, and, where
    the variant multiplies, the product's gradient dM = dOut * GELU(Z1)."""
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    col = tl.arange(0, BLOCK_C)
    row_in, col_in = row < rows, col < channels
    inside = row_in[:, None] & col_in[None, :]
    z_rows = row.to(tl.int64)[:, None] * stride_projected
    z = tl.load(projected_ptr + z_rows + gate_offset + col[None, :], mask=inside, other=0.0)
    activated = _gelu(z.to(tl.float32))
    mean = tl.load(mean_ptr + row, mask=row_in, other=0.0)
    rstd = tl.load(rstd_ptr + row, mask=row_in, other=0.0)
    norm_weight = tl.load(norm_weight_ptr + col, mask=col_in, other=0.0).to(tl.float32)
    norm_bias = tl.load(norm_bias_ptr + col, mask=col_in, other=0.0).to(tl.float32)
    gate = (activated - mean[:, None]) * rstd[:, None] * norm_weight[None, :] + norm_bias[None, :]
    if HAS_MASK:
        gate = gate * tl.load(token_mask_ptr + row, mask=row_in, other=0.0)[:, None]
    channel_offsets = row.to(tl.int64)[:, None] * channels + col[None, :]
    tl.store(gate_ptr + channel_offsets, gate.to(gate_ptr.dtype.element_ty), mask=inside)
    if MULTIPLICATIVE_VARIANT:
        content = _gelu(tl.load(projected_ptr + z_rows + col[None, :], mask=inside, other=0.0).to(tl.float32))
        grad = tl.load(grad_ptr + channel_offsets, mask=inside, other=0.0).to(tl.float32)
        tl.store(grad_mixed_ptr + channel_offsets, (grad * content).to(grad_mixed_ptr.dtype.element_ty), mask=inside)


@_jit
def _spatial_product_kernel(
    weight_ptr,
    operand_ptr,
    bias_ptr,
    tiny_ptr,
    projected_ptr,
    grad_ptr,
    out_ptr,
    length,
    channels,
    head_channels,
    heads,
    stride_weight_head,
    stride_weight_row,
    stride_weight_col,
    stride_bias_head,
    stride_bias_token,
    stride_projected,
    stride_out,
    EPILOGUE: tl.constexpr,
    COMBINE: tl.constexpr,
    HAS_TINY: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """One (BLOCK_M tokens x BLOCK_N channels) tile of W[head] @ operand[batch, :, head's channels] per program
    (grid: tiles, batch * heads), accumulated in fp32; W's strides may be swapped for W^T. The epilogue:
    "product" stores the product; "gated_output" adds the bias (and tiny) and combines it with GELU(Z1) as the
    variant does; "content_gradient" stores dOut * (product + bias + tiny) * GELU'(Z1), the content's gradient of a
    multiplicative variant."""
    tiles_n = tl.cdiv(head_channels, BLOCK_N)
    tile_m, tile_n = tl.program_id(0) // tiles_n, tl.program_id(0) % tiles_n
    batch, head = tl.program_id(1) // heads, tl.program_id(1) % heads
    token = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    head_col = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col = head * head_channels + head_col
    token_in, col_in = token < length, head_col < head_channels
    weight_rows = weight_ptr + head.to(tl.int64) * stride_weight_head + token[:, None] * stride_weight_row
    batch_row = batch.to(tl.int64) * length
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, length, BLOCK_K):
        key = start + tl.arange(0, BLOCK_K)
        key_in = key < length
        operand = tl.load(
            operand_ptr + (batch_row + key)[:, None] * channels + col[None, :],
            mask=key_in[:, None] & col_in[None, :],
            other=0.0,
        )
        weight = tl.load(
            weight_rows + key[None, :] * stride_weight_col, mask=token_in[:, None] & key_in[None, :], other=0.0
        )
        weight = weight.to(operand.dtype)
        if DOT_IN_FP32:
            weight, operand = weight.to(tl.float32), operand.to(tl.float32)
        acc = tl.dot(weight, operand, acc, input_precision=DOT_PRECISION)

    inside = token_in[:, None] & col_in[None, :]
    rows = (batch_row + token)[:, None]
    if EPILOGUE == "product":
        result = acc
    else:
        bias = tl.load(bias_ptr + head * stride_bias_head + token * stride_bias_token, mask=token_in, other=0.0)
        mixed = acc + bias.to(tl.float32)[:, None]
        if HAS_TINY:
            mixed += tl.load(tiny_ptr + rows * channels + col[None, :], mask=inside, other=0.0).to(tl.float32)
        z_offsets = rows * stride_projected + col[None, :]
        if EPILOGUE == "gated_output":
            if COMBINE == "linear":
                result = mixed
            elif COMBINE == "additive":
                result = _gelu(tl.load(projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32)) + mixed
            else:
                result = _gelu(tl.load(projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32)) * mixed
        else:
            z_content = tl.load(projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32)
            grad = tl.load(grad_ptr + rows * channels + col[None, :], mask=inside, other=0.0).to(tl.float32)
            result = grad * mixed * _gelu_grad(z_content)
    tl.store(out_ptr + rows * stride_out + col[None, :], result.to(out_ptr.dtype.element_ty), mask=inside)


@_jit
def _weight_grad_kernel(
    grad_mixed_ptr,
    gate_ptr,
    weight_grad_ptr,
    bias_grad_ptr,
    batch,
    samples_per_split,
    length,
    heads,
    channels,
    head_channels,
    DOT_IN_FP32: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """The share of one split of the batch (`samples_per_split` samples) in dW[head] = sum over the batch of
    dM[b, :, head] @ gate[b, :, head]^T: one (BLOCK_M x BLOCK_N) tile per program (grid: tiles, heads, splits),
    accumulated in fp32 over the split's samples and the head's channels, stored as the split's partial sum (fp32,
    (splits, heads, L, L)); the programs of the first column of tiles also store the split's share of the bias's
    gradient, dM's sum over the samples and the head's channels ((splits, heads, L)). Splitting the batch keeps the
    GPU busy where L is short: (512 / 128)^2 tiles per head are 16 programs."""
    head, split = tl.program_id(1), tl.program_id(2)
    tiles_n = tl.cdiv(length, BLOCK_N)
    tile_m, tile_n = tl.program_id(0) // tiles_n, tl.program_id(0) % tiles_n
    query = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    key = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    query_in, key_in = query < length, key < length
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    bias_acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    first_sample = split * samples_per_split
    for sample in range(first_sample, tl.minimum(first_sample + samples_per_split, batch)):
        query_rows = (sample * length + query).to(tl.int64)
        key_rows = (sample * length + key).to(tl.int64)
        for start in range(0, head_channels, BLOCK_K):
            head_col = start + tl.arange(0, BLOCK_K)
            col, col_in = head * head_channels + head_col, head_col < head_channels
            grad_mixed = tl.load(
                grad_mixed_ptr + query_rows[:, None] * channels + col[None, :],
                mask=query_in[:, None] & col_in[None, :],
                other=0.0,
            )
            gate = tl.load(
                gate_ptr + key_rows[:, None] * channels + col[None, :],
                mask=key_in[:, None] & col_in[None, :],
                other=0.0,
            )
            if DOT_IN_FP32:
                grad_mixed, gate = grad_mixed.to(tl.float32), gate.to(tl.float32)
            acc = tl.dot(grad_mixed, tl.trans(gate), acc, input_precision=DOT_PRECISION)
            bias_acc += tl.sum(grad_mixed.to(tl.float32), axis=1)
    head_rows = (split * heads + head).to(tl.int64) * length
    tl.store(
        weight_grad_ptr + (head_rows + query)[:, None] * length + key[None, :],
        acc.to(weight_grad_ptr.dtype.element_ty),
        mask=query_in[:, None] & key_in[None, :],
    )
    if tile_n == 0:
        tl.store(bias_grad_ptr + head_rows + query, bias_acc.to(bias_grad_ptr.dtype.element_ty), mask=query_in)


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
    channels,
    gate_offset,
    rows_per_program,
    stride_projected,
    HAS_MASK: tl.constexpr,
    COMBINE: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """The gate's backward over `rows_per_program` tokens per program: through the mask, the LayerNorm (from the saved
    statistics) and GELU into dZ's gate channels, adding the content's gradient where content and gate are the same
    GELU(Z) (the unsplit variants: dOut for "additive", the GEMM's "content_gradient" already in dZ for
    "multiplicative"); the LayerNorm's weight and bias gradients as one partial sum per program."""
    col = tl.arange(0, BLOCK_C)
    col_in = col < channels
    norm_weight = tl.load(norm_weight_ptr + col, mask=col_in, other=0.0).to(tl.float32)
    weight_acc = tl.zeros((BLOCK_ROWS, BLOCK_C), dtype=tl.float32)
    bias_acc = tl.zeros((BLOCK_ROWS, BLOCK_C), dtype=tl.float32)
    for start in range(0, rows_per_program, BLOCK_ROWS):
        row = tl.program_id(0) * rows_per_program + start + tl.arange(0, BLOCK_ROWS)
        row_in = row < rows
        inside = row_in[:, None] & col_in[None, :]
        z_offsets = row.to(tl.int64)[:, None] * stride_projected + gate_offset + col[None, :]
        channel_offsets = row.to(tl.int64)[:, None] * channels + col[None, :]
        z = tl.load(projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row, mask=row_in, other=0.0)
        rstd = tl.load(rstd_ptr + row, mask=row_in, other=0.0)
        normalised = tl.where(inside, (_gelu(z) - mean[:, None]) * rstd[:, None], 0.0)
        grad_normed = tl.load(grad_gate_ptr + channel_offsets, mask=inside, other=0.0).to(tl.float32)
        if HAS_MASK:
            grad_normed = grad_normed * tl.load(token_mask_ptr + row, mask=row_in, other=0.0)[:, None]
        weight_acc += grad_normed * normalised
        bias_acc += grad_normed
        grad_scaled = grad_normed * norm_weight[None, :]
        projection = tl.sum(grad_scaled * normalised, axis=1) / channels
        centre = tl.sum(grad_scaled, axis=1) / channels
        grad_activated = (grad_scaled - normalised * projection[:, None] - centre[:, None]) * rstd[:, None]
        if COMBINE == "additive":
            grad_activated += tl.load(grad_ptr + channel_offsets, mask=inside, other=0.0).to(tl.float32)
        grad_z = grad_activated * _gelu_grad(z)
        if COMBINE == "multiplicative" and not SPLIT:
            grad_z += tl.load(grad_projected_ptr + z_offsets, mask=inside, other=0.0).to(tl.float32)
        tl.store(grad_projected_ptr + z_offsets, grad_z.to(grad_projected_ptr.dtype.element_ty), mask=inside)
    tl.store(partial_weight_ptr + tl.program_id(0) * channels + col, tl.sum(weight_acc, axis=0), mask=col_in)
    tl.store(partial_bias_ptr + tl.program_id(0) * channels + col, tl.sum(bias_acc, axis=0), mask=col_in)


# ---- launch configuration ----------------------------------------------------------------------------------------
def _block(size: int, largest: int) -> int:
    """A power-of-two block of at least 16 (tl.dot's least) and at most `largest`, masked beyond `size`."""
    return min(largest, max(16, triton.next_power_of_2(size)))


def _gemm_config(dtype: torch.dtype, *, rows: int, cols: int, depth: int) -> dict:
    """Tiles for a (rows x depth) @ (depth x cols) product: 128 x 64 x 64 for 16-bit inputs, 64 x 64 x 32 for fp32,
    smaller for small shapes; eight warps. Compiled for sm_90 (Triton 3.9, without a GPU), each kernel at gMLP-base's
    sizes takes at most 172 registers and 90 KiB of shared memory with these, where 128 x 128 tiles and four warps
    in fp32 ran out of registers (spills) in the epilogues."""
    wide = dtype.itemsize == 2
    config = {
        "BLOCK_M": _block(rows, 128 if wide else 64),
        "BLOCK_N": _block(cols, 64),
        "BLOCK_K": _block(depth, 64 if wide else 32),
    }
    config["num_warps"] = 8 if config["BLOCK_M"] * config["BLOCK_N"] >= 64 * 64 else 4
    config["num_stages"] = 3
    return config


def _tuned(kernel, *uses: str):
    """`kernel` under `triton.autotune` over TUNED_TILES, timed apart for each length, head width and value of the
    arguments named in `uses` (Triton adds the tensors' dtypes); the kernel itself where Triton is missing."""
    if triton is None:
        return kernel
    configs = [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=warps, num_stages=stages)
        for m, n, k, warps, stages in TUNED_TILES
    ]
    return triton.autotune(configs, key=["length", "head_channels", *uses])(kernel)


# The spatial product's uses differ in their epilogue's loads and in W's layout (W^T is read across its rows): each
# takes the tiles timed for it.
_PRODUCT_USES = ("EPILOGUE", "COMBINE", "HAS_TINY", "stride_weight_col")
_TUNED_KERNELS = {
    _spatial_product_kernel: _tuned(_spatial_product_kernel, *_PRODUCT_USES),
    _weight_grad_kernel: _tuned(_weight_grad_kernel),
}


def _gemm_launch(kernel, dtype: torch.dtype, length: int, config: dict) -> tuple:
    """The GEMM kernel to launch and the tiles to pass it: the autotuned kernel, which times its own, for 16-bit
    inputs of at least TUNED_MIN_LENGTH tokens on a GPU; else `kernel` with `config` (`_gemm_config`'s)."""
    if dtype.itemsize == 2 and length >= TUNED_MIN_LENGTH and not INTERPRETED:
        return _TUNED_KERNELS[kernel], {}
    return kernel, config


def _row_config(channels: int) -> dict:
    """Row kernels: a whole row of channels per block, several rows where the channels are few."""
    block_c = triton.next_power_of_2(channels)
    block_rows = max(1, min(16, 4096 // block_c))
    return {"BLOCK_ROWS": block_rows, "BLOCK_C": block_c, "num_warps": 8 if block_rows * block_c >= 4096 else 4}


def _dot_precision(dtype: torch.dtype) -> str:
    """fp32 products as torch's matmul makes them: IEEE fp32 unless TF32 is allowed
    (`torch.set_float32_matmul_precision("high")`), which gives TF32's 10-bit mantissa. 16-bit inputs take Triton's
    default, which only fp32 inputs read."""
    return "ieee" if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest" else "tf32"


def _dot_in_fp32(dtype: torch.dtype) -> bool:
    """Whether tl.dot takes its blocks (in the inputs' dtype, W cast to it as the PyTorch path casts W to the gate's
    dtype) widened to fp32: only bf16 under the interpreter, whose tl.dot (Triton 3.9) multiplies bf16 blocks as
    their raw 16-bit integers; fp32 holds bf16 values exactly, so the products are the same."""
    return INTERPRETED and dtype == torch.bfloat16


def _row_grid(rows: int, config: dict) -> tuple:
    return (triton.cdiv(rows, config["BLOCK_ROWS"]),)


def _tiles(rows: int, cols: int, config: dict) -> int:
    """How many (BLOCK_M x BLOCK_N) tiles cover a (rows x cols) product."""
    return triton.cdiv(rows, config["BLOCK_M"]) * triton.cdiv(cols, config["BLOCK_N"])


def _gate_offset(variant: str, channels: int) -> int:
    """Where the gate's channels start in Z: Z2 for the split variant, else Z itself."""
    return channels if variant == "multiplicative_split" else 0


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
    kernels only fill the buffers the op allocates), and one under torch.compile's functionalisation fails clearly."""
    if INTERPRETED:
        tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
        if any(isinstance(tensor, FunctionalTensor) for tensor in tensors):
            raise RuntimeError(
                "torch.compile cannot trace Triton's interpreter (TRITON_INTERPRET=1): compile the kernels on a CUDA device, or call them eagerly here."
            )
        if any(is_fake(tensor) for tensor in tensors):
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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gated output (batch, length, C) and the gate's per-token mean and 1/std (batch * length,), fp32. Expects
    what `spatial_gating` passes: contiguous `projected`, `tiny_attention_output` and fp32 `token_mask` (batch *
    length,)."""
    batch, length, _ = projected.shape
    channels = norm_weight.shape[0]
    rows = batch * length
    gate = projected.new_empty(batch, length, channels)
    mean = projected.new_empty(rows, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    row_config = _row_config(channels)
    _launch(
        _gate_norm_kernel,
        _row_grid(rows, row_config),
        projected,
        norm_weight,
        norm_bias,
        token_mask if token_mask is not None else mean,
        gate,
        mean,
        rstd,
        rows,
        channels,
        _gate_offset(variant, channels),
        projected.stride(1),
        eps,
        HAS_MASK=token_mask is not None,
        **row_config,
    )
    out = torch.empty_like(gate)
    _spatial_product(
        weight, gate, bias, tiny_attention_output, projected, None, out, epilogue="gated_output", variant=variant
    )
    return out, mean, rstd


def _spatial_product(
    weight, operand, bias, tiny, projected, grad, out, *, epilogue: str, variant: str, transpose=False
):
    """Launches `_spatial_product_kernel`: W (or W^T) @ operand per (batch, head), with the given epilogue."""
    batch, length, channels = operand.shape
    heads = weight.shape[0]
    head_channels = channels // heads
    config = _gemm_config(operand.dtype, rows=length, cols=head_channels, depth=length)
    kernel, config = _gemm_launch(_spatial_product_kernel, operand.dtype, length, config)
    stride_row, stride_col = weight.stride(1), weight.stride(2)
    _launch(
        kernel,
        lambda meta: (_tiles(length, head_channels, meta), batch * heads),
        weight,
        operand,
        bias,
        tiny if tiny is not None else operand,
        projected,
        grad if grad is not None else operand,
        out,
        length,
        channels,
        head_channels,
        heads,
        weight.stride(0),
        stride_col if transpose else stride_row,
        stride_row if transpose else stride_col,
        bias.stride(0),
        bias.stride(1),
        projected.stride(1),
        out.stride(1),
        EPILOGUE=epilogue,
        COMBINE=COMBINES[variant],
        HAS_TINY=tiny is not None,
        DOT_IN_FP32=_dot_in_fp32(operand.dtype),
        DOT_PRECISION=_dot_precision(operand.dtype),
        **config,
    )


@_custom_op("sgu_backward")
def sgu_backward(
    grad: torch.Tensor,
    projected: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    token_mask: torch.Tensor | None,
    tiny_attention_output: torch.Tensor | None,
    variant: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of `sgu_forward`'s output with respect to projected, norm_weight, norm_bias, weight and bias, and
    the gradient of the spatial product dM (that of the tiny-attention output) for a multiplicative variant (for the
    others dM is `grad` itself, and an empty tensor comes back). `grad` is contiguous, in projected's dtype."""
    batch, length, _ = projected.shape
    heads, channels = weight.shape[0], norm_weight.shape[0]
    rows = batch * length
    multiplicative = COMBINES[variant] == "multiplicative"
    gate_offset = _gate_offset(variant, channels)
    row_config = _row_config(channels)
    gate = projected.new_empty(batch, length, channels)
    grad_mixed = torch.empty_like(gate) if multiplicative else grad
    _launch(
        _gate_rebuild_kernel,
        _row_grid(rows, row_config),
        projected,
        norm_weight,
        norm_bias,
        token_mask if token_mask is not None else mean,
        mean,
        rstd,
        grad,
        gate,
        grad_mixed,
        rows,
        channels,
        gate_offset,
        projected.stride(1),
        HAS_MASK=token_mask is not None,
        MULTIPLICATIVE_VARIANT=multiplicative,
        **row_config,
    )
    grad_projected = torch.empty_like(projected)
    if multiplicative:
        _spatial_product(
            weight,
            gate,
            bias,
            tiny_attention_output,
            projected,
            grad,
            grad_projected,
            epilogue="content_gradient",
            variant=variant,
        )
    config = _gemm_config(projected.dtype, rows=length, cols=length, depth=channels // heads)
    # The splits are counted with these tiles whichever tiles run: the partial sums' buffers come before the launch.
    tiles = _tiles(length, length, config)
    samples_per_split = triton.cdiv(batch, min(batch, triton.cdiv(WEIGHT_GRAD_PROGRAMS, tiles * heads)))
    splits = triton.cdiv(batch, samples_per_split)
    partial_weight = projected.new_empty(splits, heads, length, length, dtype=torch.float32)
    partial_bias = projected.new_empty(splits, heads, length, dtype=torch.float32)
    kernel, config = _gemm_launch(_weight_grad_kernel, projected.dtype, length, config)
    _launch(
        kernel,
        lambda meta: (_tiles(length, length, meta), heads, splits),
        grad_mixed,
        gate,
        partial_weight,
        partial_bias,
        batch,
        samples_per_split,
        length,
        heads,
        channels,
        channels // heads,
        DOT_IN_FP32=_dot_in_fp32(projected.dtype),
        DOT_PRECISION=_dot_precision(projected.dtype),
        **config,
    )
    grad_weight = partial_weight.sum(0).to(weight.dtype)
    grad_bias = partial_bias.sum(0).to(bias.dtype)
    # The gate is no longer read: its buffer takes the gate's gradient W^T @ dM.
    grad_gate = gate
    _spatial_product(
        weight, grad_mixed, bias, None, projected, None, grad_gate, epilogue="product", variant=variant, transpose=True
    )
    programs = min(triton.cdiv(rows, row_config["BLOCK_ROWS"]), 1024)
    rows_per_program = triton.cdiv(triton.cdiv(rows, row_config["BLOCK_ROWS"]), programs) * row_config["BLOCK_ROWS"]
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
        rows,
        channels,
        gate_offset,
        rows_per_program,
        projected.stride(1),
        HAS_MASK=token_mask is not None,
        COMBINE=COMBINES[variant],
        SPLIT=variant == "multiplicative_split",
        **row_config,
    )
    grad_norm_weight = partial_weight.sum(0).to(norm_weight.dtype)
    grad_norm_bias = partial_bias.sum(0).to(norm_bias.dtype)
    grad_mixed_out = grad_mixed if multiplicative else grad.new_empty(0)
    return grad_projected, grad_norm_weight, grad_norm_bias, grad_weight, grad_bias, grad_mixed_out


def _setup_context(ctx, inputs, output):
    projected, norm_weight, norm_bias, weight, bias, token_mask, tiny, _eps, variant = inputs
    _out, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)
    ctx.variant = variant
    ctx.tiny_dtype = None if tiny is None else tiny.dtype
    # What the backward rebuilds the rest from. The tiny-attention output enters only the content's gradient of a
    # multiplicative variant, dOut * (W gate + b + tiny).
    multiplicative = COMBINES[variant] == "multiplicative"
    ctx.save_for_backward(
        projected, mean, rstd, norm_weight, norm_bias, weight, bias, token_mask, tiny if multiplicative else None
    )


def _backward(ctx, grad, _grad_mean, _grad_rstd):
    projected, mean, rstd, norm_weight, norm_bias, weight, bias, token_mask, tiny = ctx.saved_tensors
    grads = torch.ops.gmlp.sgu_backward(
        grad.to(projected.dtype).contiguous(),
        projected,
        mean,
        rstd,
        norm_weight,
        norm_bias,
        weight,
        bias,
        token_mask,
        tiny,
        ctx.variant,
    )
    grad_projected, grad_norm_weight, grad_norm_bias, grad_weight, grad_bias, grad_mixed = grads
    grad_tiny = None
    if ctx.tiny_dtype is not None:
        grad_tiny = (grad_mixed if COMBINES[ctx.variant] == "multiplicative" else grad).to(ctx.tiny_dtype)
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
    """The spatial gating unit s(GELU(Z)) from U's output Z, fused; the same function as the model's PyTorch path.

    projected: Z, (batch, L, 2C) for "multiplicative_split", else (batch, L, C), fp32 / bf16 / fp16.
    norm_weight, norm_bias: the gate's LayerNorm, (C,), with `eps`.
    weight: W as applied (causal mask applied, sliced to L), (H, L, L) for H SGU heads (C divisible by H); bias (H, L).
    token_mask: (batch, L), bool or float, or None: multiplies the normalised gate (0 at padding).
    tiny_attention_output: (batch, L, C) or None (aMLP): added to the spatial product.
    Returns (batch, L, C) in projected's dtype. Differentiable in every tensor but `token_mask`.
    """
    _check_inputs(projected, norm_weight, norm_bias, weight, bias, variant, token_mask, tiny_attention_output)
    batch, length, _ = projected.shape
    if token_mask is not None:
        token_mask = token_mask.to(torch.float32).reshape(batch * length)
    if tiny_attention_output is not None:
        tiny_attention_output = tiny_attention_output.contiguous()
    out, _mean, _rstd = torch.ops.gmlp.sgu_forward(
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
