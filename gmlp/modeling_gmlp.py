"""PyTorch gMLP and aMLP models ("Pay Attention to MLPs", Liu et al., NeurIPS 2021).

Reads top to bottom as embeddings -> spatial gating unit -> block -> encoder -> pretrained base -> heads.
Imports only torch, transformers and `configuration_gmlp`, so that a saved checkpoint loads with
`trust_remote_code=True` where this package is not installed.
"""

import copy
from dataclasses import dataclass
from functools import cache

import torch
from torch import nn
from torch.nn import CrossEntropyLoss
from torch.utils.checkpoint import checkpoint
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, StaticLayer
from transformers.configuration_utils import PreTrainedConfig
from transformers.generation import GenerationMixin
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    BaseModelOutputWithPooling,
    CausalLMOutputWithPast,
    ImageClassifierOutput,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, auto_docstring, is_torchdynamo_compiling, is_tracing, logging
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_gmlp import SPATIAL_GATING_LAYER_TYPE, GMLPConfig, GMLPVisionConfig

logger = logging.get_logger(__name__)

# The length from which a Toeplitz product of tokens in order runs as an FFT, by device type, where the config leaves
# it open (`spatial_fft_min_length=None`): measured forward and backward, the FFT is 1.4x the dense product at 1,024
# tokens on a CPU (docs/benchmarks.md, "Sequence length"); on an H200 it is 0.82x the direct Toeplitz product at 2,048
# tokens and 1.99x at 4,096 (in a 4-block encoder 0.78x and 1.62x; benchmarks/results/speed_gpu_2026-11-28.json).
FFT_MIN_LENGTH = {"cpu": 1024, "cuda": 4096}

# What `sgu_kernel="auto"` runs, by (device type, training, compiled): the gating unit's path that the project's GPU
# record measured fastest there, with that record (file, the section and mode of its rows of gMLP with each path);
# None where no record has measured both paths, and then the PyTorch path ("torch") runs until one shows another
# faster. tests/model/test_modeling.py reads each named record back. Compiled bf16 inference on an H200: the Triton
# unit 795k tokens/s, the PyTorch unit 875k (0.91x).
AUTO_SGU_KERNEL = {
    ("cuda", False, True): (
        "torch",
        ("benchmarks/results/speed_gpu_2026-11-28_kernels.json", "inference", "compiled"),
    ),
    ("cuda", False, False): ("torch", None),
    ("cuda", True, False): ("torch", None),
    ("cuda", True, True): ("torch", None),
}


@cache
def load_sgu_kernel():
    """The Triton spatial gating unit of `kernels_gmlp.py` where Triton can run it (CUDA, or Triton's interpreter);
    None elsewhere. Imported relatively, so that `save_pretrained` copies the file for `trust_remote_code` users."""
    try:
        from .kernels_gmlp import is_available, spatial_gating
    except ImportError:
        return None
    return spatial_gating if is_available() else None


def first_out_of_range(values: torch.Tensor, size: int, ignore_index: int | None = None) -> int | None:
    """The first of `values` outside [0, size) (`ignore_index` aside), or None: the one way the model checks values.

    Values are read only where that is free, on the CPU in eager mode. On an accelerator reading them would force a
    device sync at every step, and while compiling, exporting or tracing it would break the graph: there this returns
    None and the lookup's own device-side check stands (the scripts' collator checks every batch on the CPU first)."""
    if is_tracing(values) or values.device.type != "cpu":
        return None
    valid = (values >= 0) & (values < size)
    if ignore_index is not None:
        valid |= values == ignore_index
    if bool(valid.all()):
        return None
    return values[~valid][0].item()


# For `check_token_ids`: the config field sizing each embedding, what its ids are, the likely cause of one past them.
TOKEN_ID_KINDS = {
    "input_ids": (
        "vocab_size",
        "token ids",
        (
            "the tokenizer is probably larger than the model; use the tokenizer the model was trained with, or resize "
            "the embeddings (`model.resize_token_embeddings(len(tokenizer))`)"
        ),
    ),
    "token_type_ids": (
        "type_vocab_size",
        "token types",
        (
            "the tokenizer gives token types the model was not trained with (e.g. a second segment for sentence "
            "pairs); leave token_type_ids out (`tokenizer(..., return_token_type_ids=False)`) or use the model's own "
            "tokenizer"
        ),
    ),
}
NEGATIVE_ID_CAUSE = (
    "ids are never negative, so this is probably a padding or ignore value (-100 belongs in labels only); pad the "
    "inputs with the tokenizer (`tokenizer.pad`, or DataCollatorWithPadding)"
)


def check_token_ids(config: GMLPConfig, name: str, ids: torch.Tensor) -> None:
    """Refuse ids (`name`: input_ids or token_type_ids) that the embeddings have no row for, naming the value, the
    size and the likely cause; on the CPU in eager mode only (`first_out_of_range`)."""
    field, counted, cause = TOKEN_ID_KINDS[name]
    size = getattr(config, field)
    bad = first_out_of_range(ids, size)
    if bad is not None:
        raise ValueError(
            f"{name} holds {bad}, outside the model's {counted} 0..{size - 1} (config.{field} = {size}): "
            f"{cause if bad >= 0 else NEGATIVE_ID_CAUSE}."
        )


class GMLPEmbeddings(nn.Module):
    """Token and token-type embeddings. No position embeddings: the spatial weights learn position. Ids out of range
    are a clear error on the CPU in eager mode (`check_token_ids`)."""

    def __init__(self, config: GMLPConfig):
        super().__init__()
        self.config = config  # the model's own: `resize_token_embeddings` updates its vocab_size
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            check_token_ids(self.config, "input_ids", input_ids)
            inputs_embeds = self.word_embeddings(input_ids)
        if token_type_ids is not None and token_type_ids.shape != inputs_embeds.shape[:2]:
            raise ValueError(
                f"`token_type_ids` has shape {tuple(token_type_ids.shape)} but must have the inputs' shape {tuple(inputs_embeds.shape[:2])}."
            )
        if token_type_ids is not None:
            check_token_ids(self.config, "token_type_ids", token_type_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)
        return self.dropout(inputs_embeds + self.token_type_embeddings(token_type_ids))


def sequence_starts(position_ids: torch.Tensor, token_mask: torch.Tensor | None) -> torch.Tensor:
    """Where a packed row starts a new sequence, (batch, length): at a real token whose position does not increase on
    the real token before it (`DataCollatorWithFlattening` restarts each sequence at 0). Unlike Transformers'
    `find_packed_sequence_indices`, which starts one wherever the position does not grow by exactly 1, increasing
    positions with gaps stay one sequence: W takes any positions in [0, n)."""
    starts = torch.zeros_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] <= position_ids[:, :-1]
    if token_mask is not None:
        starts[:, 1:] &= token_mask[:, 1:] & token_mask[:, :-1]
    return starts


@dataclass(frozen=True)
class TokenRows:
    """The tokens moved to rows that start at slot 0, where the gating unit runs on them (then they move back): the
    sequences of packed rows, one row each, zero-padded to the longest (`from_segments`), or left-padded rows rolled
    so that each row's first real token is at slot 0 (`from_leading_padding`). Token t of the batch (flattened) goes
    to slot `slot[t]` of row `row[t]`, so that no weight reaches across a sequence boundary and every row uses W's
    leading block, as the same tokens alone would."""

    row: torch.Tensor
    slot: torch.Tensor
    layout: "TokenLayout"  # the rows': (rows, longest)

    @classmethod
    def from_segments(cls, segments: torch.Tensor, positions: torch.Tensor, token_mask: torch.Tensor | None):
        new = torch.ones_like(segments, dtype=torch.bool)
        new[:, 1:] = segments[:, 1:] != segments[:, :-1]
        new = new.flatten()
        row = new.long().cumsum(0) - 1
        slot = torch.arange(new.numel(), device=new.device) - new.nonzero().flatten()[row]
        count, width = int(row[-1]) + 1, int(slot.max()) + 1
        row_positions = positions.new_zeros(count, width)
        row_positions[row, slot] = positions.expand_as(segments).flatten()
        row_mask = torch.zeros(count, width, dtype=torch.bool, device=new.device)
        row_mask[row, slot] = True if token_mask is None else token_mask.flatten()
        # Sequences at 0, 1, ... (as DataCollatorWithFlattening numbers them) take the in-order paths (a dense W's
        # leading block, the FFT, the Triton unit). Compiled, the check would guard on data: positions stay explicit.
        in_order = (row_positions == torch.arange(width, device=new.device)) | ~row_mask
        if not is_torchdynamo_compiling() and bool(in_order.all()):
            layout = TokenLayout.sequential(width, new.device, token_mask=row_mask)
        else:
            layout = TokenLayout(query=row_positions, key=row_positions, token_mask=row_mask)
        return cls(row=row, slot=slot, layout=layout)

    @classmethod
    def from_leading_padding(cls, leading_padding: torch.Tensor, token_mask: torch.Tensor) -> "TokenRows":
        """Each row rolled left by its leading padding (batch, 1): its real tokens at 0, 1, ..., its padding after."""
        (batch, length), device = token_mask.shape, token_mask.device
        tokens = torch.arange(length, device=device)
        row = torch.arange(batch, device=device)[:, None].expand(batch, length)
        # Modulo length, written without `%` (ONNX's exporter cannot take a remainder by a dynamic length).
        slot = tokens - leading_padding
        slot = torch.where(slot < 0, slot + length, slot)
        source = tokens + leading_padding  # the token at each slot
        rolled_mask = token_mask.gather(1, torch.where(source >= length, source - length, source))
        layout = TokenLayout.sequential(length, device, token_mask=rolled_mask)
        return cls(row=row.flatten(), slot=slot.flatten(), layout=layout)

    def unpack(self, tensor: torch.Tensor | None) -> torch.Tensor | None:
        """(batch, length, channels) -> (rows, longest, channels), zero past each row's end."""
        if tensor is None:
            return None
        rows = tensor.new_zeros(*self.layout.token_mask.shape, tensor.shape[-1])
        rows[self.row, self.slot] = tensor.flatten(0, 1)
        return rows

    def pack(self, rows: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """The inverse of `unpack`: (rows, longest, channels) -> (batch, length, channels)."""
        return rows[self.row, self.slot].view(*shape[:2], -1)


@dataclass(frozen=True)
class TokenLayout:
    """Where the tokens of one forward pass sit, decided once per forward (`make_token_layout`) and read by every
    block and head.

    `query` and `key`: the position (row and column of W, entry of b) of each new token and of each key (the cached
    tokens, then the new ones), (1 or batch, tokens); a first axis of 1 is shared by the whole batch. `token_mask`:
    the new tokens that are real (not padding), (batch, length), or None when all are. `in_order`: every row's tokens
    are at positions 0..L-1, queries and keys the same tokens, so that W's leading block serves the whole batch and a
    Toeplitz product is a convolution along the row (the FFT's case). `segments`: for rows that pack several
    sequences, which sequence of its row each token belongs to (batch, length). `rows`: the tokens moved to rows that
    start at slot 0 (packed sequences, or left-padded rows), where the gating unit runs on them; None where the
    batch's rows already do.
    """

    query: torch.Tensor
    key: torch.Tensor
    token_mask: torch.Tensor | None = None
    in_order: bool = False
    segments: torch.Tensor | None = None
    rows: TokenRows | None = None

    @property
    def same_sequence(self):
        """For packed rows, the mask function (Transformers' `and_mask_function`) that keeps the tiny attention within
        each sequence; None otherwise."""
        if self.segments is None:
            return None
        segments = self.segments

        def same_sequence(batch_idx, head_idx, q_idx, kv_idx):
            return segments[batch_idx, q_idx] == segments[batch_idx, kv_idx]

        return same_sequence

    @classmethod
    def sequential(cls, length: int, device: torch.device, *, token_mask=None) -> "TokenLayout":
        """Token i at position i in every row of `length` tokens, no cache."""
        positions = torch.arange(length, device=device)[None]
        return cls(query=positions, key=positions, token_mask=token_mask, in_order=True)

    @classmethod
    def from_first_real_token(cls, length: int, device: torch.device, token_mask: torch.Tensor | None):
        """Each row's tokens at positions counted from its first real token, no cache: a row's leading padding (left
        padding) moves its tokens to rows that start at 0 (`TokenRows.from_leading_padding`). In eager mode rows
        without leading padding (every row of a right-padded batch) keep the shared layout: finding that out reads the
        mask on the host, as Transformers' SDPA mask does; compiled, rows with a mask are always moved."""
        layout = cls.sequential(length, device, token_mask=token_mask)
        if token_mask is None:
            return layout
        leading_padding = leading_padding_of(token_mask)
        if not is_torchdynamo_compiling() and not bool(leading_padding.any()):
            return layout
        positions = (torch.arange(length, device=device) - leading_padding).clamp(min=0)
        rows = TokenRows.from_leading_padding(leading_padding, token_mask)
        return cls(query=positions, key=positions, token_mask=token_mask, rows=rows)


def leading_padding_of(attention_mask: torch.Tensor) -> torch.Tensor:
    """The padding before each row's first real token, (batch, 1)."""
    return (attention_mask.long().cumsum(-1) == 0).sum(-1, keepdim=True)


def make_token_layout(
    config: GMLPConfig,
    input_ids: torch.Tensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    *,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    cache: Cache | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
) -> TokenLayout:
    """The one place that checks the inputs' shapes and decides positions, padding and packing from them.

    Without `position_ids`, token i is at position i less the row's leading padding (so that a left-padded row uses W
    and b as the same tokens alone would); with a cache, the keys are the cached tokens then the new ones, counted the
    same way. Explicit `position_ids` without a cache (or flash attention's `cu_seq_lens_q`) may pack several
    sequences in a row (`sequence_starts`); the row may then be longer than n, each sequence not.
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds.")
    inputs = input_ids if input_ids is not None else inputs_embeds[..., 0]
    if inputs.ndim != 2 or inputs.shape[1] < 1:
        raise ValueError(
            f"Expected inputs of shape (batch_size, sequence_length) with at least one token, got {tuple(inputs.shape)}."
        )
    (batch, length), device = inputs.shape, inputs.device
    if cache is not None:
        check_cache_layers(cache, config.num_hidden_layers)
    cached_length = 0 if cache is None else cache.get_seq_length()
    if attention_mask is not None and tuple(attention_mask.shape) != (batch, cached_length + length):
        raise ValueError(
            f"`attention_mask` has shape {tuple(attention_mask.shape)} but must have shape {(batch, cached_length + length)} (the cached tokens and the new ones): the inputs have shape {(batch, length)}."
        )
    token_mask = None if attention_mask is None else attention_mask[:, -length:].bool()
    if cu_seq_lens_q is not None and position_ids is None:
        tokens = torch.arange(length, device=device)
        starts = cu_seq_lens_q[torch.searchsorted(cu_seq_lens_q[1:].to(tokens.dtype), tokens, right=True)]
        position_ids = (tokens - starts)[None].expand(batch, -1)
    if cache is not None or position_ids is None:
        check_length(config, length, cached_length)
    if cache is not None:
        keys = torch.arange(cached_length + length, device=device)[None]
        if attention_mask is not None:
            keys = (keys - leading_padding_of(attention_mask)).clamp(min=0)
        queries = keys[:, -length:] if position_ids is None else position_ids
        return TokenLayout(query=queries, key=keys, token_mask=token_mask)
    if position_ids is None:
        return TokenLayout.from_first_real_token(length, device, token_mask)
    check_positions(config, position_ids)
    starts = sequence_starts(position_ids, token_mask)
    if not is_torchdynamo_compiling() and not bool(starts.any()):
        return TokenLayout(query=position_ids, key=position_ids, token_mask=token_mask)
    segments = starts.long().cumsum(-1)
    return TokenLayout(
        query=position_ids,
        key=position_ids,
        token_mask=token_mask,
        segments=segments,
        rows=TokenRows.from_segments(segments, position_ids, token_mask),
    )


def check_length(config: GMLPConfig, length: int, cached_length: int) -> None:
    """Refuse more tokens than the spatial weights are sized for, naming both numbers."""
    n = config.max_position_embeddings
    if cached_length + length > n:
        cache_note = f" ({cached_length} cached + {length} new)" if cached_length else ""
        raise ValueError(
            f"Input sequence length {cached_length + length}{cache_note} exceeds this model's maximum sequence length {n} (`max_position_embeddings`, the size n of the spatial weights). Truncate the inputs to {n} tokens (e.g. `tokenizer(..., truncation=True, max_length={n})`) or use a model configured with a larger `max_position_embeddings`."
        )


def check_positions(config: GMLPConfig, positions: torch.Tensor) -> None:
    """Explicit (or packed) positions must lie in [0, n - 1]: each packed sequence must fit in n tokens. Reading the
    values syncs with an accelerator and would split a compiled graph, so the check runs in eager mode only."""
    if is_torchdynamo_compiling():
        return
    low, high, n = int(positions.min()), int(positions.max()), config.max_position_embeddings
    if low < 0 or high >= n:
        raise ValueError(
            f"position_ids must be in [0, {n - 1}] (the model's n = max_position_embeddings), got values from {low} to {high}. A packed row (padding-free batch) restarts its positions at 0 for each sequence, and each sequence must fit in {n} tokens: truncate longer ones."
        )


def toeplitz_block(diagonals: torch.Tensor, length: int) -> torch.Tensor:
    """The leading (length x length) block of Toeplitz matrices, (heads, 2n - 1) -> (heads, L, L), with
    T[i, j] = diagonals[i - j + n - 1], built by reshapes whose backward pass sums each diagonal in a fixed order (a
    gather's backward adds into W with atomics on a GPU, in an order that changes between runs)."""
    heads, n = diagonals.shape[0], (diagonals.shape[1] + 1) // 2
    offsets = diagonals[:, n - length : n + length - 1]  # offsets -(L - 1) .. L - 1
    # L copies of the offsets, read with rows of 2L: row i starts i entries further along, so R[i, j] = offsets[i + j]
    # and T[i, j] = R[i, L - 1 - j].
    rows = offsets[:, None].expand(heads, length, 2 * length - 1).reshape(heads, -1)
    rows = nn.functional.pad(rows, (0, length)).view(heads, length, 2 * length)
    return rows[..., :length].flip(-1)


class GMLPSpatialProjection(nn.Module):
    """The spatial projection f(Z) = W Z + b of Eq. (2): mixes tokens, one (n x n) W per group of channels.

    W is either dense or Toeplitz (W[i, j] = w[i - j + n - 1], 2n - 1 parameters). Each query row i mixes the keys j
    with W[position of i, position of j] and adds b[position of i], so that an input of length L <= n uses the leading
    L x L block of W and the first L entries of b, and cached decoding and left padding use the rows and columns of
    their real positions. In causal mode W is lower-triangular.

    A Toeplitz W runs its product for tokens in order as an FFT from the FFT's cross-over length on (`takes_fft`).
    """

    def __init__(self, config: GMLPConfig):
        super().__init__()
        self.n = config.max_position_embeddings
        self.num_heads = config.num_sgu_heads
        self.is_toeplitz = config.spatial_weight_type == "toeplitz"
        self.is_causal = config.is_decoder
        self.config_fft_min_length = config.spatial_fft_min_length
        weight_shape = (self.num_heads, 2 * self.n - 1) if self.is_toeplitz else (self.num_heads, self.n, self.n)
        # W = 0 and b = 1 (Section 2.1) already here, so that a unit built on its own is defined; the model's
        # `_init_weights` then draws W uniformly in +-spatial_init_eps / n.
        self.weight = nn.Parameter(torch.zeros(weight_shape))
        self.bias = nn.Parameter(torch.ones(self.num_heads, self.n))

    def applied_weight(self) -> torch.Tensor:
        """W as the model applies it: in causal mode no token sees a later one (W[i, j] = 0 for j > i: the Toeplitz
        entries of negative offset, the upper triangle of a dense W). The model's one causal mask for W."""
        if not self.is_causal:
            return self.weight
        if self.is_toeplitz:
            later = torch.arange(2 * self.n - 1, device=self.weight.device) < self.n - 1
            return self.weight.masked_fill(later, 0.0)
        return self.weight.tril()

    def weight_at(self, layout: TokenLayout) -> torch.Tensor:
        """W[query positions, key positions] for every head: (1 or batch, heads, queries, keys)."""
        weight = self.applied_weight()
        length = layout.query.shape[1]
        if layout.in_order:
            # W's leading block, built or sliced rather than gathered by index (whose backward pass sorts L^2 indices).
            return (toeplitz_block(weight, length) if self.is_toeplitz else weight[:, :length, :length])[None]
        if self.is_toeplitz:
            weight = weight[:, layout.query[:, :, None] - layout.key[:, None, :] + self.n - 1]
        else:
            weight = weight[:, layout.query[:, :, None], layout.key[:, None, :]]
        return weight.transpose(0, 1)

    def bias_at(self, layout: TokenLayout) -> torch.Tensor:
        """b at the query positions for every head: (1 or batch, heads, queries)."""
        return self.bias[:, layout.query].transpose(0, 1)

    def matrix(self, length: int) -> torch.Tensor:
        """The leading (length x length) block of W as applied, for every head: (heads, length, length)."""
        return self.weight_at(TokenLayout.sequential(length, self.weight.device))[0]

    def forward(self, gate: torch.Tensor, layout: TokenLayout | None = None) -> torch.Tensor:
        """gate: (batch, keys, channels) -> (batch, queries, channels), mixed along the tokens. Without a `layout`,
        token i is at position i."""
        if layout is None:
            layout = TokenLayout.sequential(gate.shape[1], gate.device)
        heads = gate.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)  # (batch, heads, keys, channels/heads)
        if self.takes_fft(layout, heads.shape[2]):
            mixed = self.fft_product(heads)
        else:
            mixed = torch.matmul(self.weight_at(layout).to(heads.dtype), heads)
        mixed = mixed + self.bias_at(layout)[..., None].to(mixed.dtype)
        return mixed.transpose(1, 2).flatten(2)

    def takes_fft(self, layout: TokenLayout, length: int) -> bool:
        """The one choice between the FFT and the direct product. The FFT needs a Toeplitz W and tokens in order, and
        pays off from a cross-over length that depends on the device (`fft_min_length`); compiled or exported, the
        choice cannot depend on the length without a graph per side of it (and `torch.export` would bound the length
        below it), so there it follows the model's n."""
        if not (self.is_toeplitz and layout.in_order):
            return False
        return (self.n if is_torchdynamo_compiling() else length) >= self.fft_min_length

    @property
    def fft_min_length(self) -> int:
        """The length from which tokens in order take the FFT: the config's `spatial_fft_min_length`, or the
        cross-over of the device the weights are on (`FFT_MIN_LENGTH`)."""
        return self.config_fft_min_length or FFT_MIN_LENGTH.get(self.weight.device.type, FFT_MIN_LENGTH["cpu"])

    def fft_product(self, heads: torch.Tensor) -> torch.Tensor:
        """The Toeplitz product W @ heads for tokens in order, as a linear convolution by FFT in O(L log L)."""
        length, n = heads.shape[2], self.n
        # Offsets -(L - 1) .. L - 1, with the channel axis added before the transform (ONNX export cannot add an
        # axis to a complex tensor).
        kernel = self.applied_weight()[:, None, n - length : n + length - 1]
        # Output i is entry i + L - 1 of the full convolution; a transform of size 2L keeps entries L-1..2L-2
        # free of wrap-around. The transforms run along the last (contiguous) axis: ~1.7x faster than along L.
        size = 2 * length
        precision = torch.promote_types(heads.dtype, torch.float32)  # the half precisions in fp32, float64 kept
        kernel = torch.fft.rfft(kernel.to(precision), n=size)
        signal = torch.fft.rfft(heads.to(precision).transpose(-1, -2), n=size)
        product = torch.fft.irfft(signal * kernel, n=size)
        return product[..., length - 1 : 2 * length - 1].transpose(-1, -2).to(heads.dtype)

    @torch.no_grad()
    def resize(self, n: int, initialise) -> None:
        """Make W and b those of the spatial size `n`: `initialise(self)` draws them as the model's init does at `n`,
        then the positions both sizes have take back their values (W[i, j] and b[i] for i, j < m, the smaller n: a
        dense W's leading m x m block, a Toeplitz W's diagonals of offsets -(m - 1) .. m - 1), so that a longer n adds
        positions at their initial values and a shorter one drops the last."""
        old_n, kept = self.n, min(self.n, n)
        old_weight, old_bias = self.weight, self.bias
        weight_shape = (self.num_heads, 2 * n - 1) if self.is_toeplitz else (self.num_heads, n, n)
        self.n = n
        self.weight = nn.Parameter(old_weight.new_zeros(weight_shape), requires_grad=old_weight.requires_grad)
        self.bias = nn.Parameter(old_bias.new_ones(self.num_heads, n), requires_grad=old_bias.requires_grad)
        initialise(self)
        if self.is_toeplitz:
            self.weight[:, n - kept : n + kept - 1] = old_weight[:, old_n - kept : old_n + kept - 1]
        else:
            self.weight[:, :kept, :kept] = old_weight[:, :kept, :kept]
        self.bias[:, :kept] = old_bias[:, :kept]


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention written out: the softmax of the scaled scores plus the additive mask, applied to the values. The
    reference the fused kernels are held to, and the implementation that returns the attention weights."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    attended = torch.matmul(nn.functional.dropout(weights, p=dropout, training=module.training), value)
    return attended.transpose(1, 2).contiguous(), weights


class GMLPTinyAttention(nn.Module):
    """aMLP's tiny attention (Figure 6): one head of size `tiny_attention_size` on the block's normalised input,
    projected to the gate's width and added to the spatial projection's output. It runs through Transformers'
    attention interface (`config._attn_implementation`: "sdpa", "eager", "flash_attention_2", "flex_attention") and
    keeps its keys and values in the block's layer of the cache, as any Transformers attention."""

    def __init__(self, config: GMLPConfig, layer_idx: int = 0):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.is_causal = config.is_decoder
        self.attention_dropout = config.attention_probs_dropout_prob
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * self.head_dim)
        self.output_proj = nn.Linear(self.head_dim, config.gate_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from these tokens to the cached ones and these, under `attention_mask` as the attention
        implementation takes it; returns the output at the gate's width and the weights (eager only)."""
        query, key, value = self.qkv_proj(hidden_states).unsqueeze(1).chunk(3, dim=-1)  # (batch, 1 head, length, d)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        attended, weights = attention(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        return self.output_proj(attended.flatten(2)), weights


class GMLPSpatialGatingUnit(nn.Module):
    """The SGU s(Z) of Eq. (3) and the variants of Table 3, from the channel expansion's output Z (before GELU): with
    the default split variant, Z1 * f(norm(Z2)), the spatial projection f's output plus aMLP's tiny attention.

    With `sgu_kernel="triton"` (or where `AUTO_SGU_KERNEL` picks it for `"auto"`) the unit runs as Triton custom ops
    with cuBLAS products (`kernels_gmlp.py`) where it applies (`kernel_for`): no cache, tokens in order, the direct
    product, exact GELU. It keeps Z, its statistics and the mixed product for its backward pass and rebuilds the rest.
    """

    def __init__(self, config: GMLPConfig, layer_idx: int = 0):
        super().__init__()
        self.layer_idx = layer_idx
        self.variant = config.sgu_variant
        self.activation = ACT2FN[config.hidden_act]
        self.exact_gelu = config.hidden_act == "gelu"
        self.kernel_choice = config.sgu_kernel
        self.gate_norm = nn.LayerNorm(config.gate_size, eps=config.layer_norm_eps)
        self.spatial_proj = GMLPSpatialProjection(config)

    def forward(
        self,
        projected: torch.Tensor,
        *,
        layout: TokenLayout,
        tiny_attention_output: torch.Tensor | None = None,
        cache: Cache | None = None,
        recompute: bool = False,
    ) -> torch.Tensor:
        """s(GELU(Z)) for the new tokens. `cache`: write their gates into the block's layer of it and mix all the
        gates so far. `recompute`: keep only Z and the tiny attention's output for the backward pass
        (`torch.utils.checkpoint`) and recompute the rest there."""
        if layout.rows is not None:
            rows = layout.rows
            gated = self(
                rows.unpack(projected),
                layout=rows.layout,
                tiny_attention_output=rows.unpack(tiny_attention_output),
                recompute=recompute,
            )
            return rows.pack(gated, projected.shape)
        kernel = self.kernel_for(projected, layout, cache)
        if kernel is not None:
            spatial = self.spatial_proj
            return kernel(
                projected,
                self.gate_norm.weight,
                self.gate_norm.bias,
                spatial.weight_at(layout)[0],
                spatial.bias_at(layout)[0],
                eps=self.gate_norm.eps,
                variant=self.variant,
                token_mask=layout.token_mask,
                tiny_attention_output=tiny_attention_output,
            )
        if recompute and cache is None:
            return checkpoint(
                self.gating,
                projected,
                layout,
                tiny_attention_output,
                None,
                use_reentrant=False,
                preserve_rng_state=False,
            )
        return self.gating(projected, layout, tiny_attention_output, cache)

    def gating(self, projected, layout: TokenLayout, tiny_attention_output, cache) -> torch.Tensor:
        """The unit in PyTorch: GELU, the split, the gate's LayerNorm (zeroed at padding), the spatial projection
        (over the cached gates too), the tiny attention and the variant's gating."""
        activated = self.activation(projected)
        if self.variant == "multiplicative_split":
            content, gate = activated.chunk(2, dim=-1)
        else:
            content = gate = activated
        gate = self.gate_norm(gate)
        if layout.token_mask is not None:
            # Zeroing padding before mixing makes real positions independent of how much padding there is.
            gate = gate * layout.token_mask[..., None]
        if cache is not None:
            gate = cache.layers[self.layer_idx].update_gates(gate)[:, : layout.key.shape[1]]  # static: the buffer
        gate = self.spatial_proj(gate, layout)
        if tiny_attention_output is not None:
            gate = gate + tiny_attention_output
        if layout.token_mask is not None:
            # A padding position mixes nothing (docs/design.md, "Padding"): what W, b and the tiny attention would
            # give there depends on the path (the FFT's convolution, W's clamped rows, a fully masked attention row).
            gate = torch.where(layout.token_mask[..., None], gate, 0.0)
        if self.variant == "linear":
            return gate
        if self.variant == "additive":
            return content + gate
        return content * gate

    def kernel_for(self, projected: torch.Tensor, layout: TokenLayout, cache: Cache | None):
        """The one choice of the Triton unit (returned) over the PyTorch path (None). `sgu_kernel="triton"` takes it
        wherever Triton runs (also under its CPU interpreter), `"torch"` never, `"auto"` where `AUTO_SGU_KERNEL`
        says the record measured it fastest. Where it does not cover the case, the PyTorch path runs and the reason
        is logged once."""
        choice = self.kernel_choice
        if choice == "auto":
            training = self.training and torch.is_grad_enabled()
            key = (projected.device.type, training, is_torchdynamo_compiling())
            choice = AUTO_SGU_KERNEL.get(key, ("torch", None))[0]
        if choice == "torch" or cache is not None:
            return None
        kernel = load_sgu_kernel()
        if kernel is None:
            reason = "Triton is not installed or cannot run here"
        elif not layout.in_order:
            reason = "the tokens are not at positions 0..L-1 in every row (explicit position_ids)"
        elif self.spatial_proj.takes_fft(layout, projected.shape[1]):
            reason = "this length takes the FFT product"
        elif not self.exact_gelu:
            reason = f"hidden_act is {self.activation.__class__.__name__}, the kernel computes exact GELU only"
        else:
            return kernel
        logger.warning_once(
            f"gMLP's Triton spatial gating unit does not apply here ({reason}): the PyTorch path runs."
        )
        return None


def drop_path(hidden_states: torch.Tensor, drop_prob: float, training: bool) -> torch.Tensor:
    """Stochastic depth: drop a block's output for whole samples, rescaling the kept ones by 1 / survival."""
    if drop_prob == 0.0 or not training:
        return hidden_states
    keep_prob = 1.0 - drop_prob
    shape = (hidden_states.shape[0],) + (1,) * (hidden_states.ndim - 1)
    keep = hidden_states.new_empty(shape).bernoulli_(keep_prob)
    return hidden_states * keep / keep_prob


class GMLPLayer(GradientCheckpointingLayer):
    """One gMLP block (Figure 1): x + V s(GELU(U norm(x))), with aMLP's tiny attention inside the gate.

    In cached decoding the block keeps, in its layer of the cache, the normalised and padding-masked gates of the
    earlier tokens (position t's gate is sum_{j<=t} W[t, j] norm(Z2)_j + b_t, so a new token costs one token's channel
    projections and one row of W) and the tiny attention's keys and values.
    """

    def __init__(self, config: GMLPConfig, layer_idx: int = 0):
        super().__init__()
        self.layer_idx = layer_idx
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.channel_proj_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.tiny_attention = GMLPTinyAttention(config, layer_idx) if config.tiny_attention_size > 0 else None
        self.sgu = GMLPSpatialGatingUnit(config, layer_idx)
        self.channel_proj_out = nn.Linear(config.gate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.drop_path_rate = config.drop_path_rate
        self.recompute_gating = config.recompute_gating

    @property
    def recomputes_gating(self) -> bool:
        """Whether this training step recomputes the gating unit in its backward pass (`config.recompute_gating`):
        GELU's output, the normalised gate, the spatial product and the FFT's spectra are most of what a gMLP block
        would otherwise keep, and they cost little to recompute. Gradient checkpointing of the whole block (outside)
        already recomputes it."""
        return self.recompute_gating and self.training and torch.is_grad_enabled() and not self.gradient_checkpointing

    def forward(
        self,
        hidden_states: torch.Tensor,
        *,
        layout: TokenLayout,
        tiny_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        """`layout`: the tokens' positions, padding and packing (`make_token_layout`); `tiny_attention_mask`: the tiny
        attention's mask, in the form its attention implementation takes."""
        normed = self.norm(hidden_states)
        tiny_attention_output = None
        if self.tiny_attention is not None:
            tiny_attention_output, _ = self.tiny_attention(
                normed, attention_mask=tiny_attention_mask, cache=cache, **kwargs
            )
        gated = self.sgu(
            self.channel_proj_in(normed),
            layout=layout,
            tiny_attention_output=tiny_attention_output,
            cache=cache,
            recompute=self.recomputes_gating,
        )
        block_output = self.dropout(self.channel_proj_out(gated))
        return hidden_states + drop_path(block_output, self.drop_path_rate, self.training)


class GMLPDynamicLayer(DynamicLayer):
    """A gMLP block's layer of a `DynamicCache` (generate()'s default): the tiny attention's keys and values, as any
    attention layer keeps them, (batch, `num_attention_heads`, tokens, `head_dim`) (none for gMLP), and `gates`, the
    normalised, padding-masked gates of the tokens so far (batch, tokens, gate channels), which the spatial projection
    mixes and which set the cache's length.

    The gates are appended in place, as the leading tokens of storage with spare room (doubled when full), so that a
    decoding step copies only its new token where concatenation would copy every cached gate again.
    """

    _layer_type = SPATIAL_GATING_LAYER_TYPE

    def __init__(self, **kwargs):
        super().__init__()
        self.gates = self.gate_storage = None

    def update_gates(self, gates: torch.Tensor) -> torch.Tensor:
        """Append these tokens' gates; return the gates of all the tokens so far."""
        cached_length = self.get_seq_length()
        total = cached_length + gates.shape[1]
        if self.gate_storage is None or total > self.gate_storage.shape[1]:
            storage = gates.new_empty(gates.shape[0], 2 * total, gates.shape[2])
            if cached_length:
                storage[:, :cached_length] = self.gates
            self.gate_storage = storage
        self.gate_storage[:, cached_length:total] = gates
        self.gates = self.gate_storage[:, :total]
        return self.gates

    def get_seq_length(self) -> int:
        return 0 if self.gates is None else self.gates.shape[1]

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        if tokens_to_remove and self.gates is not None:  # still the storage's leading tokens: the next ones overwrite
            self.gates = self.gates[:, : -abs(tokens_to_remove)]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            super().batch_repeat_interleave(repeats)
        self._change_gates(lambda gates: gates.repeat_interleave(repeats, 0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            super().batch_select_indices(indices)
        self._change_gates(lambda gates: gates[indices])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.is_initialized:
            super().reorder_cache(beam_idx)
        self._change_gates(lambda gates: gates.index_select(0, beam_idx.to(gates.device)))

    def offload(self) -> None:
        if self.is_initialized:
            super().offload()
        self._change_gates(lambda gates: gates.to("cpu", non_blocking=True))

    def prefetch(self) -> None:
        if self.is_initialized:
            super().prefetch()
        self._change_gates(lambda gates: gates.to(self.device, non_blocking=True))

    def reset(self) -> None:
        super().reset()
        self.gates = self.gate_storage = None

    def _change_gates(self, change) -> None:
        """The same change on the gates as DynamicLayer made on the keys and values (gMLP has none); the gates are a
        new tensor then, no longer the storage's."""
        if self.gates is not None:
            self.gates = change(self.gates)
        self.gate_storage = None


class GMLPStaticLayer(StaticLayer):
    """A gMLP block's layer of a `StaticCache` (`cache_implementation="static"`): what `GMLPDynamicLayer` holds, in
    buffers of `max_cache_len` tokens made at the first update and written in place (for `torch.compile`)."""

    _layer_type = SPATIAL_GATING_LAYER_TYPE

    def __init__(self, max_cache_len: int, **kwargs):
        super().__init__(max_cache_len=max_cache_len)
        self.gates = None
        self.gates_length = torch.tensor(0, dtype=torch.long)  # a tensor, as `cumulative_length`: no recompilation

    def update_gates(self, gates: torch.Tensor) -> torch.Tensor:
        """Write these tokens' gates after the cached ones; return the whole buffer."""
        if self.gates is None:
            self.gates = gates.new_zeros(gates.shape[0], self.max_cache_len, gates.shape[2])
            self.gates_length = self.gates_length.to(gates.device)
            if not is_torchdynamo_compiling():
                torch._dynamo.mark_static_address(self.gates)
                torch._dynamo.mark_static_address(self.gates_length)
        written = torch.arange(gates.shape[1], device=gates.device) + self.gates_length
        self.gates_length.add_(gates.shape[1])
        self.gates.index_copy_(1, written, gates)
        return self.gates

    def get_seq_length(self):
        return self.gates_length

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        self.gates_length.sub_(abs(tokens_to_remove))

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.is_initialized:
            super().reorder_cache(beam_idx)
        if self.gates is not None:
            self.gates = self.gates.index_select(0, beam_idx.to(self.gates.device))

    def offload(self) -> None:
        super().offload()
        if self.gates is not None:
            self.gates = self.gates.to("cpu", non_blocking=True)

    def prefetch(self) -> None:
        super().prefetch()
        if self.gates is not None and self.gates.device != self.gates_length.device:
            self.gates = self.gates.to(self.gates_length.device, non_blocking=True)

    def reset(self) -> None:
        super().reset()
        self.gates_length.zero_()
        if self.gates is not None:
            self.gates.zero_()


class GMLPEncoder(nn.Module):
    def __init__(self, config: GMLPConfig):
        super().__init__()
        self.layer = nn.ModuleList([GMLPLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)])

    def forward(
        self, hidden_states: torch.Tensor, *, layout: TokenLayout | None = None, **kwargs: Unpack[TransformersKwargs]
    ) -> torch.Tensor:
        """The blocks in turn; without a `layout`, token i is at position i and all tokens are real."""
        if layout is None:
            layout = TokenLayout.sequential(hidden_states.shape[1], hidden_states.device)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, layout=layout, **kwargs)
        return hidden_states


def classifier_dropout(config: GMLPConfig) -> float:
    """The heads' dropout: `classifier_dropout`, or `hidden_dropout_prob` when it is None."""
    return config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob


class GMLPClassificationHead(nn.Module):
    """The sentence-level head: pool the sequence, then dense + tanh, dropout and a projection to the outputs.

    `config.classifier_pooling` chooses the sentence representation: `"first"` (the first token, as BERT's pooler)
    or `"mean"` (the mean over real tokens). The head owns every weight it adds, so that a checkpoint or an adapter
    that saves the head (PEFT's `modules_to_save=["classifier"]`) holds all of it.
    """

    def __init__(self, config: GMLPConfig, num_outputs: int):
        super().__init__()
        self.pooling = config.classifier_pooling
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.out_proj = nn.Linear(config.hidden_size, num_outputs)

    def forward(
        self,
        hidden_states: torch.Tensor,
        *,
        token_mask: torch.Tensor | None = None,
        rows: TokenRows | None = None,
    ) -> torch.Tensor:
        """(batch, length, hidden) -> (batch, outputs), pooled over the real tokens (`token_mask`); with `rows` (the
        layout's), over the tokens moved to rows that start at the first real token: for packed rows, one output per
        sequence, those of row 0 first: (sequences, outputs)."""
        if rows is not None:
            hidden_states, token_mask = rows.unpack(hidden_states), rows.layout.token_mask
        if self.pooling == "mean":
            pooled = mean_over_tokens(hidden_states, token_mask)
        else:
            pooled = hidden_states[:, 0]
        return self.out_proj(self.dropout(torch.tanh(self.dense(pooled))))


def mean_over_tokens(hidden_states: torch.Tensor, token_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of `hidden_states` over the sequence, counting only real tokens when a mask is given."""
    if token_mask is None:
        return hidden_states.mean(dim=1)
    weights = token_mask[..., None].to(hidden_states.dtype)
    return (hidden_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


class GMLPLMHead(nn.Module):
    """BERT's language-model head: dense, activation and LayerNorm, then the vocabulary projection, whose weight is
    tied to the input embeddings."""

    def __init__(self, config: GMLPConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT2FN[config.hidden_act]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(self.activation(self.dense(hidden_states))))


def _is_fsdp_class(cls: type) -> bool:
    """Whether `cls` is FSDP2's `FSDPModule` or a class its `fully_shard` made (torch without distributed has none)."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule

    return issubclass(cls, FSDPModule)


class GMLPPreTrainedModel(PreTrainedModel):
    config_class = GMLPConfig
    config: GMLPConfig
    base_model_prefix = "gmlp"
    supports_gradient_checkpointing = True
    # The blocks only: the embeddings share their weight with the tied LM head, so FSDP must not wrap them apart.
    _no_split_modules = ["GMLPLayer"]
    _can_record_outputs = {"hidden_states": GMLPLayer, "attentions": GMLPTinyAttention}
    # aMLP's tiny attention runs through Transformers' attention interface (gMLP has no attention to dispatch).
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    # Whether the loss honours the Trainer's `num_items_in_batch` (dividing a sum by it). False for the per-example
    # heads, whose loss is a mean over examples: the Trainer then divides by the gradient-accumulation steps itself.
    # The token-level heads (masked LM, causal LM, token classification) use Transformers' loss and set it True.
    accepts_loss_kwargs = False

    def classification_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Transformers' sequence-classification loss (MSE for regression, cross-entropy for class ids, BCE for
        multi-hot labels) for the problem type the labels fit (`problem_type_of`). The config takes that problem type
        where it names none, as Transformers' loss does, but only once the labels fit it: a saved multi-label model's
        pipeline then applies a sigmoid per label. Class ids out of range are a clear error first."""
        problem_type = problem_type_of(self.config, logits, labels)
        if self.config.problem_type is None:
            self.config.problem_type = problem_type
        if problem_type != "single_label_classification":
            return self.loss_function(labels.to(logits.dtype), logits, self.config)  # also targets given as integers
        check_labels(labels, self.config.num_labels)
        return unless_all_ignored(self.loss_function(labels, logits, self.config), labels != -100)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`, saved as the model's own class also under FSDP2: `fully_shard` makes the
        model an instance of a class that torch defines (`FSDPGMLPForMaskedLM`), whose module Transformers would
        otherwise copy in place of this file and name in the config's `auto_map`, breaking remote-code loading."""
        wrapper = type(self)
        own = next(cls for cls in wrapper.__mro__ if not _is_fsdp_class(cls))
        if own is wrapper:
            return super().save_pretrained(save_directory, *args, **kwargs)
        self.__class__ = own  # same instance layout: FSDP2's class only adds FSDPModule's methods
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:
            self.__class__ = wrapper

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, GMLPSpatialProjection):
            # Section 2.1: W near zero and b = 1, so each block starts as a plain FFN.
            bound = self.config.spatial_init_eps / self.config.max_position_embeddings
            init.uniform_(module.weight, -bound, bound)
            init.ones_(module.bias)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, **kwargs):
        """`PreTrainedModel.from_pretrained`, also at another spatial size n than the checkpoint's (text models): with
        `max_position_embeddings=N`, or a `config` whose n is N, the checkpoint loads at its own n and
        `resize_position_embeddings(N)` then keeps what its W and b learned (Transformers would refuse their shapes
        or, with `ignore_mismatched_sizes=True`, start them afresh)."""
        given = config if isinstance(config, PreTrainedConfig) else None
        n = given.max_position_embeddings if given is not None else kwargs.get("max_position_embeddings")
        saved = cls._saved_spatial_size(pretrained_model_name_or_path, kwargs) if n is not None else None
        if saved in (None, n):
            return super().from_pretrained(pretrained_model_name_or_path, *model_args, config=config, **kwargs)
        if is_deepspeed_zero3_enabled():
            raise ValueError(
                f"{pretrained_model_name_or_path} has n = max_position_embeddings = {saved}; loading it at n = {n} under DeepSpeed ZeRO-3, whose parameters are partitioned as they are made, is not supported. Resize it first without DeepSpeed (`from_pretrained(path, max_position_embeddings={n}).save_pretrained(new_path)`) and load that."
            )
        if given is not None:
            config = copy.deepcopy(given)
            config.max_position_embeddings = saved
        else:
            kwargs["max_position_embeddings"] = saved
        model = super().from_pretrained(pretrained_model_name_or_path, *model_args, config=config, **kwargs)
        model.resize_position_embeddings(n)
        return model

    @classmethod
    def _saved_spatial_size(cls, name, kwargs: dict) -> int | None:
        """The n of a text checkpoint `name` as its config says; None for an image model (whose n follows its image
        and patch sizes) and where there is no config to read (loading a `state_dict=`, a folder of weights alone)."""
        if name is None or not issubclass(cls.config_class, GMLPConfig):
            return None
        hub = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")
        try:
            saved = cls.config_class.from_pretrained(name, **{key: kwargs[key] for key in hub if key in kwargs})
        except OSError:
            return None
        return saved.max_position_embeddings

    def resize_position_embeddings(self, new_num_position_embeddings: int) -> None:
        """Change the spatial size n (`config.max_position_embeddings`) of every block's W and b, keeping what they
        learned: the positions both sizes have keep their values, so that outputs on inputs of at most the smaller n
        are unchanged; a longer n's new positions start as the init makes them (W uniform in +-spatial_init_eps / n at
        the new n, b = 1), a shorter n drops the last. Transformers' API for models with position embeddings, which W
        stands in for; `from_pretrained(..., max_position_embeddings=N)` resizes with it. Text models only."""
        old_n, n = self.config.max_position_embeddings, new_num_position_embeddings
        if n == old_n:
            return
        checked = copy.deepcopy(self.config)
        checked.max_position_embeddings = n
        checked.validate()  # the config's own errors for a bad n, before anything changes
        self.config.max_position_embeddings = n
        projections = [module for module in self.modules() if isinstance(module, GMLPSpatialProjection)]
        for projection in projections:
            projection.resize(n, self._init_weights)
        if n > old_n:
            change = f"positions {old_n}..{n - 1} start at the init (W uniform in +-{self.config.spatial_init_eps / n:.3g}, b = 1)"
        else:
            change = f"positions {n}..{old_n - 1} are dropped"
        logger.warning(
            f"Spatial size n = max_position_embeddings changed from {old_n} to {n} in {len(projections)} blocks: W and b keep positions 0..{min(old_n, n) - 1}; {change}."
        )


class GMLPModel(GMLPPreTrainedModel):
    """The bare gMLP / aMLP encoder: embeddings, L gMLP blocks and a final LayerNorm. (No pooler: the sentence-level
    heads own theirs, see `GMLPClassificationHead`.)"""

    def __init__(self, config: GMLPConfig):
        super().__init__(config)
        self.embeddings = GMLPEmbeddings(config)
        self.encoder = GMLPEncoder(config)
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    @merge_with_config_defaults
    @capture_outputs
    @auto_docstring
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        token_layout: TokenLayout | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | BaseModelOutputWithPast:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`): token ids, in [0, vocab_size);
            sequence_length (plus the cached tokens) must not exceed `config.max_position_embeddings` (the spatial
            size n).
        attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*): 1 for real tokens,
            0 for padding (with a cache: `(batch_size, cached + sequence_length)`). Padding is zeroed before every
            spatial projection and masked in the tiny attention, and positions start at each row's first real token,
            so right- and left-padded sequences give the same outputs at their real positions as unpadded ones
            (padding belongs at the ends of a row).
        token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*): BERT's token types
            (which sentence of a pair each token belongs to), in [0, type_vocab_size).
        position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*): the position of each
            token (which row of W and entry of b it uses); by default its index, less the row's leading padding.
            Without a cache they may pack several sequences in a row (padding-free batching: each sequence restarts
            at 0 and must fit in n; the row may be longer): sequences never mix.
        inputs_embeds (`torch.Tensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*): token
            embeddings to use instead of `input_ids`.
        cache (`Cache`, *optional*): causal mode: the earlier tokens' gates (and tiny-attention keys and
            values), as returned with `use_cache=True`; updated in place.
        use_cache (`bool`, *optional*): causal mode: return the cache, to decode one token at a time. A training
            step (training mode, gradients on) makes none unless one is passed in.
        token_layout (`TokenLayout`, *optional*): the layout `make_token_layout` made of these inputs, for a head that
            reads it too; made here otherwise.
        """
        if not self.config.is_decoder:
            use_cache, cache = False, None  # only causal blocks can be decoded token by token
        elif cache is None and self.training and torch.is_grad_enabled():
            use_cache = False  # a training step keeps no cache (and may recompute its gates: GMLPLayer)
        if use_cache and cache is None and position_ids is None and kwargs.get("cu_seq_lens_q") is None:
            cache = DynamicCache(config=self.config)  # explicit positions make none: no cache can continue from them
        if token_layout is None:
            token_layout = make_token_layout(
                self.config,
                input_ids,
                inputs_embeds,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                cu_seq_lens_q=kwargs.get("cu_seq_lens_q"),
            )
        hidden_states = self.embeddings(input_ids, token_type_ids, inputs_embeds)
        hidden_states = self.encoder(
            hidden_states,
            layout=token_layout,
            tiny_attention_mask=self._tiny_attention_mask(hidden_states, attention_mask, cache, token_layout),
            cache=cache,
            **kwargs,
        )
        sequence_output = self.final_norm(hidden_states)
        return BaseModelOutputWithPast(last_hidden_state=sequence_output, cache=cache if use_cache else None)

    def _tiny_attention_mask(self, hidden_states, attention_mask, cache, layout: TokenLayout):
        """The tiny attention's padding (and, in causal mode, causal) mask in the form its attention implementation
        takes, built once for all blocks, with no attention across packed sequences; None for gMLP."""
        if not self.config.tiny_attention_size:
            return None
        if self.config.is_decoder:
            return create_causal_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=attention_mask,
                cache=cache,
                and_mask_function=layout.same_sequence,
            )
        return create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            and_mask_function=layout.same_sequence,
        )


def check_cache_layers(cache: Cache, num_layers: int) -> None:
    """A cache made empty without this model's config (e.g. `DynamicCache()`) gets gMLP's layers, which hold the
    gates; one whose layers cannot hold them is refused with a clear error rather than decoding wrongly."""
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer and not cache.layers:
        cache.layers.extend(GMLPDynamicLayer() for _ in range(num_layers))
    wrong = {
        # By layer type, not class: a second copy of this file (a checkpoint's remote code) registers its own classes.
        type(layer).__name__
        for layer in cache.layers
        if getattr(layer, "_layer_type", None) != SPATIAL_GATING_LAYER_TYPE
    }
    if wrong:
        raise ValueError(
            f"This cache's layers ({', '.join(sorted(wrong))}) cannot hold gMLP's gates. Make the cache from the "
            "model's config, e.g. `DynamicCache(config=model.config)` or `StaticCache(config=model.config, "
            "max_cache_len=...)`, or let `generate()` make it."
        )


def unless_all_ignored(loss: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """`loss`, or 0 where no label counts (every one -100, the ignore index), where a mean over no label is NaN: the
    zero stays in the graph, so its backward pass gives every parameter a zero gradient, as a Trainer step over such
    a batch does. Every head's loss goes through here (docs/design.md, "Labels"); no branch on the values, so no
    device sync and no graph break."""
    return torch.where(counted.any(), loss, torch.zeros_like(loss))


def labels_fit(problem_type: str, labels: torch.Tensor, logits: torch.Tensor) -> bool:
    """Whether a classifier's `labels` have the shape and dtype that `problem_type` takes (`label_form`)."""
    per_example = labels.shape == logits.shape[:1]
    if problem_type == "single_label_classification":
        return per_example and not labels.is_floating_point()
    return labels.shape == logits.shape or (problem_type == "regression" and logits.shape[1] == 1 and per_example)


def label_form(problem_type: str, logits: torch.Tensor) -> str:
    """What `problem_type` takes as labels, in words, for logits of this shape."""
    batch, num_labels = logits.shape
    if problem_type == "single_label_classification":
        return f"integer class ids of shape {(batch,)}"
    if problem_type == "multi_label_classification":
        return f"multi-hot float targets of shape {(batch, num_labels)}"
    return f"targets of shape {(batch, num_labels)}" + (f" or {(batch,)}" if num_labels == 1 else "")


def problem_type_of(config: GMLPConfig, logits: torch.Tensor, labels: torch.Tensor) -> str:
    """The problem type of a classifier's `labels`: `config.problem_type` where it is set, else as Transformers decides
    it (one label: regression; integer class ids: single-label; float labels, one per class: multi-label). Labels that
    do not fit it are a clear error naming their shape and dtype (shapes are static: this runs on every device)."""
    if config.problem_type is not None:
        problem_type = config.problem_type
    elif logits.shape[1] == 1:
        problem_type = "regression"
    elif labels.is_floating_point():
        problem_type = "multi_label_classification"
    else:
        problem_type = "single_label_classification"
    if labels_fit(problem_type, labels, logits):
        return problem_type
    given = (
        f"labels of shape {tuple(labels.shape)} and dtype {str(labels.dtype).removeprefix('torch.')} (logits of "
        f"shape {tuple(logits.shape)})"
    )
    if config.problem_type is not None:
        raise ValueError(
            f"config.problem_type is {problem_type!r}, which takes {label_form(problem_type, logits)}, but got "
            f"{given}: give labels of that form, or use a model whose problem_type is the one these labels pose."
        )
    if problem_type == "regression":
        raise ValueError(
            f"A model with num_labels=1 is a regressor, which takes {label_form(problem_type, logits)}, but got "
            f"{given}: give one target per example, or a model whose num_labels is the number of classes."
        )
    raise ValueError(
        f"The {given} fit no problem type of this {logits.shape[1]}-label classifier: single-label classification "
        f"takes {label_form('single_label_classification', logits)} (`labels.long()` if these are class ids), "
        f"multi-label classification {label_form('multi_label_classification', logits)}, and regression a model "
        f"with num_labels=1."
    )


# What each token of the inputs takes as label, for `check_label_shape`.
TOKEN_LABELS = "one label per input token, -100 where no loss is wanted"


def check_label_shape(name: str, labels: torch.Tensor, expected: tuple, inputs: tuple, rule: str) -> None:
    """Refuse labels whose shape is not `expected`, naming it, the inputs' shape and what the labels hold (`rule`).
    Shapes are static: no device sync and no graph break, so this runs on every device and while compiling."""
    if tuple(labels.shape) != tuple(expected):
        raise ValueError(f"{name} have shape {tuple(labels.shape)} but the inputs {tuple(inputs)}: {rule}.")


def check_labels(labels: torch.Tensor, num_classes: int) -> None:
    """Raise a clear error for class labels outside [0, num_classes) (-100, the ignore index, is allowed); on the CPU
    in eager mode only (`first_out_of_range`)."""
    bad = first_out_of_range(labels, num_classes, ignore_index=-100)
    if bad is not None:
        raise ValueError(
            f"labels must be in [0, {num_classes - 1}] (or -100 to ignore a position), got {bad}. Check that the "
            f"labels are mapped to ids and that the model has the right `num_labels`/`vocab_size`."
        )


class GMLPForMaskedLM(GMLPPreTrainedModel):
    """gMLP with BERT's masked-language-model head (the decoder tied to the input embeddings).

    Opt-in speed-up for MLM training, a forward argument (the training loop's choice, never saved with the
    model): with `sparse_prediction=True`, in training mode and with `labels` given, the vocabulary projection runs
    only at labelled positions. The loss is unchanged, but `logits` then has shape
    `(number of labelled positions, vocab_size)` instead of `(batch_size, sequence_length, vocab_size)`. With 15% of
    positions labelled this skips most of the step's largest matmul. Evaluation (`model.eval()`) always returns the
    full logits, so metrics that read them keep working. `run_mlm.py` turns it on through its data collator.
    """

    accepts_loss_kwargs = True

    _tied_weights_keys = {"lm_head.decoder.weight": "gmlp.embeddings.word_embeddings.weight"}

    def __init__(self, config: GMLPConfig):
        super().__init__(config)
        self.gmlp = GMLPModel(config)
        self.lm_head = GMLPLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        sparse_prediction: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | MaskedLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*): target token ids for the
            masked positions, -100 elsewhere.
        sparse_prediction (`bool`, *optional*, defaults to `False`): in training mode with `labels`, compute logits
            only at the labelled positions (see the class docstring).
        """
        outputs = self.gmlp(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        sequence_output = outputs.last_hidden_state
        if labels is not None:
            inputs = sequence_output.shape[:2]
            check_label_shape("labels", labels, inputs, inputs, TOKEN_LABELS)
            check_labels(labels, self.config.vocab_size)
            if self.training and sparse_prediction:
                labelled = labels != -100
                sequence_output, labels = sequence_output[labelled], labels[labelled]
        prediction_scores = self.lm_head(sequence_output)
        loss = None
        if labels is not None:
            # Transformers' MLM loss: divided by the Trainer's `num_items_in_batch` when given (so gradient
            # accumulation and several processes average over all labelled tokens), else the mean.
            loss = self.loss_function(prediction_scores, labels, vocab_size=self.config.vocab_size, **kwargs)
            loss = unless_all_ignored(loss, labels != -100)
        return MaskedLMOutput(
            loss=loss, logits=prediction_scores, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class GMLPForCausalLM(GMLPPreTrainedModel, GenerationMixin):
    """gMLP with causal spatial weights (and causal tiny attention) for left-to-right language modelling.

    `generate()` decodes with a cache (a `DynamicCache` of `GMLPDynamicLayer`s; see `GMLPLayer` for what it keeps),
    so each new token costs one token's work; positions start at each row's first real token, so a left-padded batch
    generates what each prompt generates alone. A prompt and its new tokens must fit in n (`max_position_embeddings`) tokens.
    """

    accepts_loss_kwargs = True

    _tied_weights_keys = {"lm_head.decoder.weight": "gmlp.embeddings.word_embeddings.weight"}

    def __init__(self, config: GMLPConfig):
        super().__init__(config)
        if not config.is_decoder:
            raise ValueError(
                "GMLPForCausalLM needs causal spatial weights: build its config with `is_decoder=True`, e.g. "
                "`GMLPConfig.from_preset('gmlp-tiny', is_decoder=True)`."
            )
        self.gmlp = GMLPModel(config)
        self.lm_head = GMLPLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def _validate_generated_length(self, generation_config, input_ids_length, has_default_max_length):
        """Refuse, before the first step, a generation longer than the spatial weights (rather than fail mid-way)."""
        super()._validate_generated_length(generation_config, input_ids_length, has_default_max_length)
        n, prompt = self.config.max_position_embeddings, input_ids_length
        new = generation_config.max_length - prompt
        if prompt + new > n:
            fixes = []
            if prompt < n:
                fixes.append(f"ask for at most {n - prompt} new tokens (`max_new_tokens`)")
            if new < n:
                fixes.append(f"shorten the prompt to at most {n - new} tokens (n - max_new_tokens)")
            fix = " or ".join(fixes) or f"shorten the prompt and ask for fewer new tokens, {n} in all"
            raise ValueError(
                f"The prompt has {prompt} tokens and {new} new ones are asked for: {prompt + new} in all, more than this model's n = max_position_embeddings = {n}. To fit, {fix}."
            )

    def _get_static_cache_init_shape(self):
        """The tiny attention's heads and head size, for a static cache made before the first step (Transformers'
        default, `hidden_size // num_attention_heads`, would divide by gMLP's 0 heads); the gates' buffers are made
        at the first update."""
        return self.config.num_attention_heads, self.config.head_dim

    def create_masks_for_generate(self, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor | None:
        """The mask `generate()` passes with a static cache: the 2D padding mask as it is (the blocks derive positions
        from it; they need no 4D attention mask)."""
        return attention_mask

    @can_return_tuple
    @auto_docstring
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        labels: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | CausalLMOutputWithPast:
        r"""
        cache (`Cache`, *optional*): the earlier tokens' gates (and tiny-attention keys and values), as
            returned with `use_cache=True`; updated in place.
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*): the input ids (shifted
            inside the loss), -100 where no loss is wanted.
        logits_to_keep (`int` or `torch.Tensor`, *optional*): compute logits only for the last `logits_to_keep`
            positions (0 keeps all), or for the given position indices.
        """
        outputs = self.gmlp(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            cache=cache,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        logit_positions = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, logit_positions])
        loss = None
        if labels is not None:
            inputs = hidden_states.shape[:2]
            check_label_shape("labels", labels, inputs, inputs, TOKEN_LABELS)
            check_labels(labels, self.config.vocab_size)
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
            targets = kwargs.get("shift_labels", labels[..., 1:])  # the loss predicts token t + 1 from t
            loss = unless_all_ignored(loss, targets != -100)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class GMLPForSequenceClassification(GMLPPreTrainedModel):
    """A classifier (or regressor) on the pooled sequence (`config.classifier_pooling`), e.g. for GLUE."""

    def __init__(self, config: GMLPConfig):
        super().__init__(config)
        self.gmlp = GMLPModel(config)
        self.classifier = GMLPClassificationHead(config, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | SequenceClassifierOutput:
        r"""
        position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*): may pack several
            sequences in a row (a padding-free batch, each restarting its positions at 0); the logits then hold one
            row per sequence, in order.
        labels (`torch.Tensor` of shape `(batch_size,)` or `(batch_size, num_labels)`, *optional*): class ids,
            regression targets (`num_labels == 1`) or multi-hot float targets; one per sequence when packed.
        """
        layout = make_token_layout(
            self.config,
            input_ids,
            inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cu_seq_lens_q=kwargs.get("cu_seq_lens_q"),
        )
        outputs = self.gmlp(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            token_layout=layout,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(outputs.last_hidden_state, token_mask=layout.token_mask, rows=layout.rows)
        loss = self.classification_loss(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class GMLPForMultipleChoice(GMLPPreTrainedModel):
    """Scores each of several choices with the sentence-level head (`config.classifier_pooling`), shared by all."""

    def __init__(self, config: GMLPConfig):
        super().__init__(config)
        self.gmlp = GMLPModel(config)
        self.classifier = GMLPClassificationHead(config, 1)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | MultipleChoiceModelOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`): one sequence per choice.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*): index of the right choice.
        """
        inputs = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        num_choices = inputs[1]

        def flatten_choices(tensor):
            return None if tensor is None else tensor.flatten(0, 1)

        input_ids, inputs_embeds = flatten_choices(input_ids), flatten_choices(inputs_embeds)
        attention_mask = flatten_choices(attention_mask)
        layout = make_token_layout(
            self.config,
            input_ids,
            inputs_embeds,
            attention_mask=attention_mask,
            position_ids=flatten_choices(position_ids),
            cu_seq_lens_q=kwargs.get("cu_seq_lens_q"),
        )
        if layout.segments is not None:
            raise ValueError(
                "Multiple choice scores one sequence per choice, but these position_ids pack several sequences in a row (padding-free batching). Pad the batch instead (e.g. DataCollatorWithPadding)."
            )
        outputs = self.gmlp(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=flatten_choices(token_type_ids),
            inputs_embeds=inputs_embeds,
            token_layout=layout,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(outputs.last_hidden_state, token_mask=layout.token_mask, rows=layout.rows)
        logits = logits.view(-1, num_choices)
        loss = None
        if labels is not None:
            check_label_shape("labels", labels, inputs[:1], inputs, "one choice index per row")
            check_labels(labels, num_choices)
            loss = unless_all_ignored(CrossEntropyLoss()(logits, labels), labels != -100)
        return MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class GMLPForTokenClassification(GMLPPreTrainedModel):
    """A linear classifier on every token, e.g. for named-entity recognition."""

    accepts_loss_kwargs = True

    def __init__(self, config: GMLPConfig):
        super().__init__(config)
        self.gmlp = GMLPModel(config)
        self.dropout = nn.Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | TokenClassifierOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*): class id per token, -100
            where no loss is wanted.
        """
        outputs = self.gmlp(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            inputs = logits.shape[:2]
            check_label_shape("labels", labels, inputs, inputs, TOKEN_LABELS)
            check_labels(labels, self.config.num_labels)
            loss = unless_all_ignored(self.loss_function(logits, labels, self.config, **kwargs), labels != -100)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class GMLPForQuestionAnswering(GMLPPreTrainedModel):
    """Extractive question answering (SQuAD): start and end logits for every token."""

    def __init__(self, config: GMLPConfig):
        super().__init__(config)
        self.gmlp = GMLPModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | QuestionAnsweringModelOutput:
        r"""
        start_positions, end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*): token index of
            the answer's first and last token; positions outside the sequence are clamped and ignored, as in BERT.
        """
        layout = make_token_layout(
            self.config,
            input_ids,
            inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cu_seq_lens_q=kwargs.get("cu_seq_lens_q"),
        )
        if layout.segments is not None:
            raise ValueError(
                "Question answering finds one answer span per row, but these position_ids pack several sequences in a row (padding-free batching). Pad the batch instead (e.g. DataCollatorWithPadding)."
            )
        outputs = self.gmlp(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            token_layout=layout,
            return_dict=True,
            **kwargs,
        )
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).unbind(dim=-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            for name, positions in (("start_positions", start_positions), ("end_positions", end_positions)):
                # (batch, 1) as well, which Transformers' loss squeezes
                positions = positions.squeeze(-1) if positions.ndim == 2 else positions
                check_label_shape(
                    name, positions, start_logits.shape[:1], start_logits.shape, "one token index per row"
                )
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
            # Transformers' loss ignores positions at or past the row's end (and counts negative ones as 0).
            length = start_logits.shape[1]
            loss = unless_all_ignored(loss, (start_positions < length).any() & (end_positions < length).any())
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits.contiguous(),
            end_logits=end_logits.contiguous(),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class GMLPPatchEmbeddings(nn.Module):
    """ViT's stem (Section 3): a stride-`patch_size` convolution turns each patch into one token, row by row.
    No position embeddings: the spatial weights learn where each patch is."""

    def __init__(self, config: GMLPVisionConfig):
        super().__init__()
        self.image_size = config.image_size
        self.num_channels = config.num_channels
        self.projection = nn.Conv2d(
            config.num_channels, config.hidden_size, kernel_size=config.patch_size, stride=config.patch_size
        )

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """pixel_values: (batch, channels, height, width) -> patch tokens (batch, num_patches, hidden_size)."""
        expected = (self.num_channels, self.image_size, self.image_size)
        if pixel_values.ndim != 4 or tuple(pixel_values.shape[1:]) != expected:
            raise ValueError(
                f"Expected pixel_values of shape (batch_size, {', '.join(map(str, expected))}), got "
                f"{tuple(pixel_values.shape)}. The spatial weights are sized for {self.image_size}x{self.image_size} "
                f"images: prepare images with the model's image processor (`AutoImageProcessor.from_pretrained(...)`), "
                f"which resizes them."
            )
        embeddings = self.projection(pixel_values.to(self.projection.weight.dtype))
        return embeddings.flatten(2).transpose(1, 2)


class GMLPVisionPreTrainedModel(GMLPPreTrainedModel):
    config_class = GMLPVisionConfig
    config: GMLPVisionConfig
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    _no_split_modules = ["GMLPPatchEmbeddings", "GMLPLayer"]

    def resize_position_embeddings(self, new_num_position_embeddings: int):
        """Refused: an image model's n is its number of patches, which its image and patch sizes set."""
        raise NotImplementedError(
            f"An image model's spatial size n is its number of patches ((image_size / patch_size)^2 = {self.config.max_position_embeddings}), and W mixes patches by their place in the grid, which another grid changes: keep the checkpoint's image_size and patch_size and resize the images instead."
        )


class GMLPVisionModel(GMLPVisionPreTrainedModel):
    """The bare gMLP image encoder: patch stem, L gMLP blocks over the patches, a final LayerNorm; the pooled
    output is the mean over patches."""

    def __init__(self, config: GMLPVisionConfig):
        super().__init__(config)
        self.embeddings = GMLPPatchEmbeddings(config)
        self.encoder = GMLPEncoder(config)
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.projection

    @merge_with_config_defaults
    @capture_outputs
    @auto_docstring
    def forward(self, pixel_values: torch.Tensor | None = None, **kwargs) -> tuple | BaseModelOutputWithPooling:
        r"""
        pixel_values (`torch.FloatTensor` of shape `(batch_size, num_channels, image_size, image_size)`): images as
            prepared by the model's image processor.
        """
        if pixel_values is None:
            raise ValueError("You have to specify pixel_values (use the model's image processor to make them).")
        hidden_states = self.encoder(self.embeddings(pixel_values), **kwargs)
        sequence_output = self.final_norm(hidden_states)
        return BaseModelOutputWithPooling(last_hidden_state=sequence_output, pooler_output=sequence_output.mean(dim=1))


class GMLPForImageClassification(GMLPVisionPreTrainedModel):
    """A linear classifier on the mean of the final patch representations (ImageNet, Table 2)."""

    def __init__(self, config: GMLPVisionConfig):
        super().__init__(config)
        self.gmlp = GMLPVisionModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self, pixel_values: torch.Tensor | None = None, labels: torch.Tensor | None = None, **kwargs
    ) -> tuple[torch.Tensor] | ImageClassifierOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*): class ids (or regression targets when
            `num_labels == 1`, multi-hot float targets for multi-label problems).
        """
        outputs = self.gmlp(pixel_values, return_dict=True, **kwargs)
        logits = self.classifier(self.dropout(outputs.pooler_output))
        loss = self.classification_loss(logits, labels) if labels is not None else None
        return ImageClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


__all__ = [
    "GMLPForCausalLM",
    "GMLPForImageClassification",
    "GMLPForMaskedLM",
    "GMLPForMultipleChoice",
    "GMLPForQuestionAnswering",
    "GMLPForSequenceClassification",
    "GMLPForTokenClassification",
    "GMLPModel",
    "GMLPPreTrainedModel",
    "GMLPVisionModel",
    "GMLPVisionPreTrainedModel",
]
