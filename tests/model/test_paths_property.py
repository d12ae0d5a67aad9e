"""Every way of computing a block gives the same function: a property test over the configuration space (dense or
Toeplitz W, the FFT threshold below or above n, encoder or causal, gMLP or aMLP with eager or SDPA attention, the
four SGU variants, one or two SGU heads, recomputed or kept gating) and the inputs (batches of one row and more, right
or left padding, also beyond the longest row; sequential, shifted, gapped or packed position ids; no cache, a dynamic
or a static cache, step by step or through `generate()`).

Every drawn case compares logits against the plain path: dense W holding the same matrix, the direct product, eager
attention, no cache, each row's real tokens run alone; and the whole batch, padding positions included, against the
plain path on the same batch: every position's logits, and without a cache the loss with padded labels (-100 at
padding: a causal loss still reads the last padding position's logits for a row's first token) and every
parameter's gradient. The spatial weights and biases are drawn far from their near-zero init, where a token-mixing
error would barely show.
"""

import copy
from contextlib import contextmanager
from dataclasses import dataclass
from unittest import mock

import pytest
import torch
from helpers import tiny_text_config
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from transformers import DynamicCache, StaticCache

from gmlp import GMLPForCausalLM, GMLPForMaskedLM, modeling_gmlp

N = 24  # the tiny models' n: a packed row of several sequences may be longer
DIRECT_ONLY = 10**6  # a spatial_fft_min_length above n: the direct product
FFT = 4  # below n: the FFT for tokens in order
TOLERANCE = {"atol": 2e-4, "rtol": 2e-4}  # fp32: the FFT's rounding against the direct product
GRADIENT_TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}  # fp32: the kernel's blocked sums against PyTorch's
KERNEL = modeling_gmlp.load_sgu_kernel() is not None  # Triton can run the kernels here (CUDA, or its interpreter)
SGU_VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")


@dataclass(frozen=True)
class Case:
    """One drawn configuration and input."""

    toeplitz: bool = True
    fft: bool = True
    causal: bool = False
    tiny_attention: str | None = None  # None (gMLP), "eager" or "sdpa"
    sgu_variant: str = "multiplicative_split"
    sgu_heads: int = 1
    recompute_gating: bool = True
    lengths: tuple = (7, 5)  # the real tokens of each row (or each packed sequence)
    padding: str = "right"  # "right" or "left"
    extra_padding: int = 0  # padding beyond the longest row: a single row, or rows of one length, padded too
    positions: str = "none"  # "none", "sequential", "shifted", "gapped" or "packed"
    cache: str = "none"  # "none", "dynamic", "static" or "generate" (causal only)
    kernel: bool = False  # sgu_kernel="triton": the Triton gating unit wherever it applies
    seed: int = 0

    @property
    def kernel_applies(self) -> bool:
        """The Triton unit runs: no cache, tokens at 0..L-1 in every row once moved to rows of their own (each packed
        sequence, each left-padded row from its first real token), and no FFT (a Toeplitz W with the low threshold may
        take it, depending on the length)."""
        in_order = self.positions in ("none", "packed")
        return self.kernel and self.cache == "none" and in_order and not (self.toeplitz and self.fft)


def padding(draw, positions: str, cache: str) -> str:
    """Right or left padding; packed rows have none of their own (right), decoding appends after the last column
    (left)."""
    if cache != "none":
        return "left"
    return draw(st.sampled_from(["right", "left"])) if positions != "packed" else "right"


@st.composite
def cases(draw) -> Case:
    causal = draw(st.booleans())
    cache = draw(st.sampled_from(["none", "dynamic", "static", "generate"])) if causal else "none"
    positions = (
        "none" if cache != "none" else draw(st.sampled_from(["none", "sequential", "shifted", "gapped", "packed"]))
    )
    # Room for up to 3 padding positions beyond the longest row, and for 3 decoded tokens after a cached prompt.
    longest = N // 2 if positions == "gapped" else (N - 7 if cache != "none" else N - 3)
    return Case(
        toeplitz=draw(st.booleans()),
        fft=draw(st.booleans()),
        causal=causal,
        tiny_attention=draw(st.sampled_from([None, "eager", "sdpa"])),
        sgu_variant=draw(st.sampled_from(SGU_VARIANTS)),
        sgu_heads=draw(st.sampled_from([1, 2])),
        recompute_gating=draw(st.booleans()),
        lengths=tuple(draw(st.lists(st.integers(1, longest), min_size=1, max_size=3))),
        padding=padding(draw, positions, cache),
        extra_padding=0 if positions == "packed" else draw(st.integers(0, 3)),
        positions=positions,
        cache=cache,
        kernel=KERNEL and draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


def models(case: Case):
    """The model of `case` and its plain twin (dense W with the same matrix, the direct product, eager attention,
    gating kept), with spatial weights and biases drawn far from their init."""
    config = tiny_text_config(
        max_position_embeddings=N,
        is_decoder=case.causal,
        spatial_weight_type="toeplitz" if case.toeplitz else "dense",
        spatial_fft_min_length=FFT if case.fft else DIRECT_ONLY,
        tiny_attention_size=8 if case.tiny_attention else 0,
        sgu_variant=case.sgu_variant,
        num_sgu_heads=case.sgu_heads,
        recompute_gating=case.recompute_gating,
        sgu_kernel="triton" if case.kernel else "torch",
    )
    config._attn_implementation = case.tiny_attention or "eager"
    model_class = GMLPForCausalLM if case.causal else GMLPForMaskedLM
    torch.manual_seed(case.seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for layer in model.gmlp.encoder.layer:
            layer.sgu.spatial_proj.weight.normal_()
            layer.sgu.spatial_proj.bias.normal_()
    plain_config = copy.deepcopy(config)
    plain_config.spatial_weight_type, plain_config.spatial_fft_min_length = "dense", DIRECT_ONLY
    plain_config.recompute_gating, plain_config.sgu_kernel = False, "torch"
    plain_config._attn_implementation = "eager"
    plain = model_class(plain_config).eval()
    state = model.state_dict()
    for index, layer in enumerate(model.gmlp.encoder.layer):
        state[f"gmlp.encoder.layer.{index}.sgu.spatial_proj.weight"] = layer.sgu.spatial_proj.matrix(N).detach()
    plain.load_state_dict(state)
    return model, plain


def row_positions(case: Case, length: int, row: int) -> torch.Tensor | None:
    """The explicit positions of a row's real tokens alone (None where the model numbers them)."""
    if case.positions in ("none", "packed"):
        return None
    if case.positions == "sequential":
        return torch.arange(length)
    if case.positions == "shifted":
        return torch.arange(length) + min(row + 1, N - length)
    return torch.arange(length) * 2  # gapped


def alone(plain, ids: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    """The plain model's logits for one row's real tokens run alone."""
    kwargs = {} if positions is None else {"position_ids": positions[None]}
    with torch.no_grad():
        return plain(ids[None], **kwargs).logits[0]


def padded_batch(case: Case, rows: list[torch.Tensor]):
    """The rows padded (right or left) into one batch: ids, mask, explicit positions (or None) and each row's real
    slice."""
    width = max(len(row) for row in rows) + case.extra_padding
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    positions = torch.zeros_like(ids)
    slices = []
    for index, row in enumerate(rows):
        start = width - len(row) if case.padding == "left" else 0
        ids[index, start : start + len(row)] = row
        mask[index, start : start + len(row)] = 1
        explicit = row_positions(case, len(row), index)
        if explicit is not None:
            positions[index, start : start + len(row)] = explicit
        slices.append(slice(start, start + len(row)))
    return ids, mask, None if case.positions == "none" else positions, slices


def batch_inputs(case: Case, rows: list[torch.Tensor]) -> tuple[torch.Tensor, dict]:
    """The rows as the model takes them in one batch (padded, or packed in one row): ids and keyword arguments."""
    if case.positions == "packed":
        return torch.cat(rows)[None], {"position_ids": packed_positions(rows)}
    ids, mask, positions, _ = padded_batch(case, rows)
    return ids, {"attention_mask": mask} | ({} if positions is None else {"position_ids": positions})


def toeplitz_gradient(dense: torch.Tensor) -> torch.Tensor:
    """A dense W's gradient as the gradient of the Toeplitz W holding the same matrix: each diagonal's sum."""
    n = dense.shape[-1]
    positions = torch.arange(n, device=dense.device)
    offsets = (positions[:, None] - positions[None, :] + n - 1).flatten()
    return dense.new_zeros(dense.shape[0], 2 * n - 1).index_add_(1, offsets, dense.flatten(1))


def check_whole_batch(case: Case, model, plain, rows: list[torch.Tensor]) -> None:
    """Every position of the batch, padding included, as the plain path gives it on the same batch; then the loss
    with padded labels and every parameter's gradient (training mode, dropout 0)."""
    ids, kwargs = batch_inputs(case, rows)
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids, **kwargs).logits, plain(ids, **kwargs).logits, **TOLERANCE, msg=str(case)
        )
    mask = kwargs.get("attention_mask")
    labels = ids if mask is None else ids.masked_fill(mask == 0, -100)
    losses, grads = [], []
    for each in (model, plain):
        each.train().zero_grad(set_to_none=True)
        loss = each(ids, labels=labels, **kwargs).loss
        loss.backward()
        losses.append(loss.detach())
        grads.append({name: param.grad for name, param in each.named_parameters() if param.grad is not None})
        each.eval()
    torch.testing.assert_close(losses[0], losses[1], **TOLERANCE, msg=f"loss of {case}")
    assert grads[0].keys() == grads[1].keys(), case
    for name, grad in grads[0].items():
        expected = grads[1][name]
        if name.endswith("spatial_proj.weight") and case.toeplitz:
            expected = toeplitz_gradient(expected)
        torch.testing.assert_close(grad, expected, **GRADIENT_TOLERANCE, msg=f"{name} of {case}")


def check_forward(case: Case, model, plain, rows: list[torch.Tensor]) -> None:
    expected = [alone(plain, row, row_positions(case, len(row), index)) for index, row in enumerate(rows)]
    if case.positions == "packed":
        ids, positions = torch.cat(rows)[None], packed_positions(rows)
        with torch.no_grad():
            logits = model(ids, position_ids=positions).logits[0]
        actual = list(logits.split([len(row) for row in rows]))
    else:
        ids, mask, positions, slices = padded_batch(case, rows)
        kwargs = {} if positions is None else {"position_ids": positions}
        with torch.no_grad():
            logits = model(ids, attention_mask=mask, **kwargs).logits
        actual = [logits[index, part] for index, part in enumerate(slices)]
    for index, (got, want) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(got, want, **TOLERANCE, msg=f"row {index} of {case}")


def check_cached_steps(case: Case, model, plain, rows: list[torch.Tensor]) -> None:
    """Prefill all but the last 3 tokens of each row, then feed one token at a time: each step's logits are the
    full recompute's at that position."""
    ids, mask, _, slices = padded_batch(case, rows)
    steps = min(3, ids.shape[1] - 1)
    prompt = ids.shape[1] - steps
    cache = (
        DynamicCache(config=model.config)
        if case.cache == "dynamic"
        else StaticCache(config=model.config, max_cache_len=N)
    )
    outputs = []
    with torch.no_grad():
        out = model(ids[:, :prompt], attention_mask=mask[:, :prompt], cache=cache, use_cache=True)
        outputs.append(out.logits)
        for step in range(prompt, ids.shape[1]):
            out = model(ids[:, step : step + 1], attention_mask=mask[:, : step + 1], cache=cache, use_cache=True)
            outputs.append(out.logits)
    logits = torch.cat(outputs, dim=1)
    with torch.no_grad():  # every position, padding included, as the whole padded batch gives it without a cache
        torch.testing.assert_close(logits, plain(ids, attention_mask=mask).logits, **TOLERANCE, msg=str(case))
    for index, (row, part) in enumerate(zip(rows, slices)):
        want = alone(plain, row, None)
        torch.testing.assert_close(logits[index, part], want, **TOLERANCE, msg=f"row {index} of {case}")


def check_generate(case: Case, model, plain, rows: list[torch.Tensor]) -> None:
    """Greedy `generate()` with the cache: every step's logits are the full recompute's of that row alone."""
    ids, mask, _, _ = padded_batch(case, rows)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, None
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=3,
            do_sample=False,
            return_dict_in_generate=True,
            output_logits=True,
            disable_compile=True,  # on a GPU, generate() would compile a static cache's step: minutes, not values
        )
    new = out.sequences[:, ids.shape[1] :]
    for index, row in enumerate(rows):
        for step, step_logits in enumerate(out.logits):
            context = torch.cat([row, new[index, :step]])
            want = alone(plain, context, None)[-1]
            torch.testing.assert_close(step_logits[index], want, **TOLERANCE, msg=f"row {index} step {step} of {case}")


def check_gating_gradients(case: Case, model, rows: list[torch.Tensor], switch: str) -> None:
    """The gating unit computed both ways of `switch` gives every parameter the same gradient (training mode,
    dropout 0): "recompute_gating" (recomputed or kept) or "kernel" (the Triton unit or PyTorch's)."""
    ids, mask, positions, _ = padded_batch(case, rows)
    kwargs = {} if positions is None else {"position_ids": positions}
    if case.positions == "packed":
        ids, kwargs, mask = torch.cat(rows)[None], {"position_ids": packed_positions(rows)}, None
    labels = ids if mask is None else ids.masked_fill(mask == 0, -100)
    model.train()
    grads = []
    for on in (True, False):
        for layer in model.gmlp.encoder.layer:
            if switch == "kernel":
                layer.sgu.kernel_choice = "triton" if on else "torch"
            else:
                layer.recompute_gating = on
        model.zero_grad(set_to_none=True)
        model(ids, attention_mask=mask, labels=labels, **kwargs).loss.backward()
        grads.append({name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None})
    model.eval()
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], **GRADIENT_TOLERANCE, msg=f"{name} of {case}")


def packed_positions(rows: list[torch.Tensor]) -> torch.Tensor:
    """The rows packed in one row (DataCollatorWithFlattening's layout): positions restarting at 0 for each."""
    return torch.cat([torch.arange(len(row)) for row in rows])[None]


@contextmanager
def counting_kernel_calls():
    """Counts the model's calls of the Triton gating unit (a list that grows by one per call)."""
    kernel, calls = modeling_gmlp.load_sgu_kernel(), []

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    with mock.patch.object(modeling_gmlp, "load_sgu_kernel", lambda: counted if kernel is not None else None):
        yield calls


def check(case: Case) -> None:
    model, plain = models(case)
    generator = torch.Generator().manual_seed(case.seed)
    rows = [torch.randint(5, 64, (length,), generator=generator, device="cpu") for length in case.lengths]
    rows = [row.to(torch.get_default_device()) for row in rows]  # drawn on the CPU, run on --device
    with counting_kernel_calls() as calls:
        if case.cache in ("dynamic", "static"):
            check_cached_steps(case, model, plain, rows)
        elif case.cache == "generate":
            check_generate(case, model, plain, rows)
        else:
            check_forward(case, model, plain, rows)
            check_whole_batch(case, model, plain, rows)
    if case.kernel_applies:
        assert calls, f"the Triton gating unit never ran in {case}"
    elif not case.kernel:
        assert not calls, f"the Triton gating unit ran in {case}, which asked for PyTorch's"
    if case.cache == "none" and case.kernel:
        check_gating_gradients(case, model, rows, "kernel")
    elif case.cache == "none" and case.positions != "packed" and case.seed % 4 == 0:  # one in four: they cost most
        check_gating_gradients(case, model, rows, "recompute_gating")


# The cases that were silently wrong before: the FFT path with a cache or out-of-order positions, and packed rows
# longer than n whose sequences mixed.
@example(Case(causal=True, cache="dynamic", lengths=(9, 6), padding="left"))
@example(Case(causal=True, cache="static", lengths=(9, 6), padding="left"))
@example(Case(causal=True, cache="generate", lengths=(9, 6), padding="left"))
@example(Case(causal=True, tiny_attention="sdpa", cache="dynamic", lengths=(9, 6), padding="left"))
@example(Case(causal=True, tiny_attention="sdpa", cache="generate", lengths=(9, 6), padding="left"))
# A left-padded causal batch: the FFT and the direct product once gave different logits at padding, which the shifted
# loss reads for each row's first token.
@example(Case(causal=True, padding="left", lengths=(12, 5)))
@example(Case(causal=True, fft=False, padding="left", tiny_attention="sdpa", lengths=(12, 5)))
# One left-padded row (e.g. generate() on a single padded prompt) once took W's leading block, ignoring its shift; and
# encoders counted a left-padded row's positions from its padding.
@example(Case(causal=True, toeplitz=False, lengths=(7,), padding="left", extra_padding=3))
@example(Case(causal=True, toeplitz=False, cache="generate", lengths=(7,), padding="left", extra_padding=2))
@example(Case(toeplitz=False, lengths=(7,), padding="left", extra_padding=2))
@example(Case(fft=False, tiny_attention="sdpa", lengths=(6, 6), padding="left", extra_padding=2))
@example(Case(lengths=(9, 5), padding="left"))
@example(Case(kernel=KERNEL, toeplitz=False, causal=True, lengths=(7,), padding="left", extra_padding=2))
@example(Case(kernel=KERNEL, fft=False, sgu_heads=2, lengths=(8, 3), padding="left", extra_padding=1))
@example(Case(positions="gapped", lengths=(10,)))
@example(Case(causal=True, positions="gapped", lengths=(10,)))
@example(Case(positions="packed", lengths=(11, 9, 8)))
@example(Case(causal=True, tiny_attention="sdpa", positions="packed", lengths=(11, 9, 8)))
@example(Case(tiny_attention="eager", positions="packed", lengths=(11, 9, 8)))
@example(Case(kernel=KERNEL, toeplitz=False, tiny_attention="sdpa", sgu_heads=2, lengths=(9, 6)))
@example(Case(kernel=KERNEL, fft=False, causal=True, sgu_variant="additive", positions="packed", lengths=(11, 9, 8)))
@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(cases())
def test_every_path_gives_the_plain_paths_logits(on_device, case):
    check(case)


def test_a_packed_sequence_longer_than_n_is_refused_by_name():
    model, _ = models(Case(positions="packed"))
    positions = torch.cat([torch.arange(5), torch.arange(N + 1)])[None]
    with pytest.raises(ValueError, match=rf"each sequence must fit in {N} tokens"):
        model(torch.randint(5, 64, positions.shape), position_ids=positions)
