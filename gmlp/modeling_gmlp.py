"""PyTorch gMLP and aMLP models ("Pay Attention to MLPs", Liu et al., NeurIPS 2021).

Reads top to bottom as embeddings -> spatial gating unit -> block -> encoder -> pretrained base -> heads.
Imports only torch, transformers and `configuration_gmlp`, so that a saved checkpoint loads with
`trust_remote_code=True` where this package is not installed.
"""

import torch
from torch import nn
from torch.nn import CrossEntropyLoss
from torch.utils.checkpoint import checkpoint
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, StaticLayer
from transformers.generation import GenerationMixin
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
from transformers.utils import TransformersKwargs, auto_docstring, is_torchdynamo_compiling
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import capture_outputs

from .configuration_gmlp import SPATIAL_GATING_LAYER_TYPE, GMLPConfig, GMLPVisionConfig


class GMLPEmbeddings(nn.Module):
    """Token and token-type embeddings. No position embeddings: the spatial weights learn position."""

    def __init__(self, config: GMLPConfig):
        super().__init__()
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
            inputs_embeds = self.word_embeddings(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)
        return self.dropout(inputs_embeds + self.token_type_embeddings(token_type_ids))


class TokenPositions:
    """Where the tokens of one forward pass sit: the position of each query (the new tokens) and of each key (the
    cached tokens, then the new ones), shapes (1 or batch, queries) and (1 or batch, keys); a first axis of 1 is shared
    by the whole batch.

    `segments` (keyword-only), for packed rows: which sequence of its row each token belongs to, (batch, length), the
    queries and keys being the same tokens; tokens of different sequences never mix. `in_order` (keyword-only; only
    `sequential` sets it): queries and keys are the same tokens, one sequence per row, at their index less a shift per
    row, so that the Toeplitz product is a convolution along the row (the FFT's case: W[i, j] depends on i - j only).
    """

    def __init__(
        self, query: torch.Tensor, key: torch.Tensor, *, segments: torch.Tensor | None = None, in_order: bool = False
    ):
        self.query, self.key, self.segments, self.in_order = query, key, segments, in_order

    def offsets(self) -> torch.Tensor:
        """Each query's offset from each key, (1 or batch, queries, keys): the Toeplitz entry W[i, j] = w[i - j].
        Computed where the direct product needs it and not kept: a cached copy would be a side effect inside the
        recomputed (checkpointed) gating unit, which torch.compile cannot trace."""
        return self.query[:, :, None] - self.key[:, None, :]

    @classmethod
    def sequential(cls, length: int, device: torch.device, shift: torch.Tensor | None = None) -> "TokenPositions":
        """Token i at position i - shift (of its row; 0 without `shift`), for rows of `length` tokens and no cache."""
        positions = torch.arange(length, device=device)[None]
        if shift is not None:
            positions = (positions - shift[:, None]).clamp(min=0)
        return cls(positions, positions, in_order=True)


def sequence_segments(position_ids: torch.Tensor) -> torch.Tensor:
    """Which packed sequence of its row each token belongs to, (batch, length): a new sequence starts wherever the
    position does not increase (DataCollatorWithFlattening restarts it at 0); increasing positions with gaps stay one
    sequence."""
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] <= position_ids[:, :-1]
    return starts.long().cumsum(-1) - 1


def segments_from_boundaries(cu_seq_lens: torch.Tensor, length: int) -> torch.Tensor:
    """The segments of one packed row, (1, length), from its cumulative sequence lengths (flash attention's
    `cu_seq_lens_*`: 0, len_1, len_1 + len_2, ...)."""
    tokens = torch.arange(length, device=cu_seq_lens.device)
    return torch.searchsorted(cu_seq_lens[1:].to(tokens.dtype), tokens, right=True)[None]


def sequence_layout(segments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For packed rows' segments (batch, length): each token's sequence, counted over the whole batch in order, and
    its index within that sequence, both flattened to (batch * length,)."""
    starts = torch.ones_like(segments, dtype=torch.bool)
    starts[:, 1:] = segments[:, 1:] != segments[:, :-1]
    starts = starts.flatten()
    sequence = starts.long().cumsum(0) - 1
    tokens = torch.arange(starts.numel(), device=segments.device)
    return sequence, tokens - starts.nonzero().flatten()[sequence]


class GMLPSpatialProjection(nn.Module):
    """The spatial projection f(Z) = W Z + b of Eq. (2): mixes tokens, one (n x n) W per group of channels.

    W is either dense or Toeplitz (W[i, j] = w[i - j + n - 1], 2n - 1 parameters). Each query row i mixes the keys j
    with W[position of i, position of j] and adds b[position of i], so that an input of length L <= n uses the leading
    L x L block of W and the first L entries of b, and cached decoding and left padding use the rows and columns of
    their real positions; tokens of different packed sequences do not mix (a block-diagonal W). In causal mode W is
    lower-triangular.

    A Toeplitz W runs its product for tokens in order (`TokenPositions.in_order`) as an FFT, from
    `spatial_fft_min_length` tokens on in eager mode (where it pays off); compiled or exported, from the model's n
    (every length by FFT if n >= `spatial_fft_min_length`), so that one graph serves every length (`takes_fft`).
    """

    def __init__(self, config: GMLPConfig):
        super().__init__()
        self.n = config.max_position_embeddings
        self.num_heads = config.num_sgu_heads
        self.is_toeplitz = config.spatial_weight_type == "toeplitz"
        self.is_causal = config.is_decoder
        self.fft_min_length = config.spatial_fft_min_length
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

    def weight_at(self, positions: TokenPositions) -> torch.Tensor:
        """W[query positions, key positions] for every head: (1 or batch, heads, queries, keys)."""
        weight = self.applied_weight()
        if not self.is_toeplitz and positions.in_order and positions.query.shape[0] == 1:
            # Tokens at 0..L-1: a dense W's leading block, sliced rather than gathered by index (whose backward pass
            # sorts L^2 indices). A Toeplitz W is gathered: unfolding its diagonals would fix the length of a
            # compiled or exported graph.
            length = positions.query.shape[1]
            return weight[:, :length, :length][None]
        if self.is_toeplitz:
            weight = weight[:, positions.offsets() + self.n - 1]
        else:
            weight = weight[:, positions.query[:, :, None], positions.key[:, None, :]]
        return weight.transpose(0, 1)

    def matrix(self, length: int) -> torch.Tensor:
        """The leading (length x length) block of W as applied, for every head: (heads, length, length)."""
        return self.weight_at(TokenPositions.sequential(length, self.weight.device))[0]

    def forward(self, gate: torch.Tensor, positions: TokenPositions | None = None) -> torch.Tensor:
        """gate: (batch, keys, channels) -> (batch, queries, channels), mixed along the tokens. Without `positions`,
        token i is at position i."""
        if positions is None:
            positions = TokenPositions.sequential(gate.shape[1], gate.device)
        if positions.segments is not None:
            return self.per_sequence(gate, positions)
        heads = gate.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)  # (batch, heads, keys, channels/heads)
        if self.takes_fft(positions, heads.shape[2]):
            mixed = self.fft_product(heads)
        else:
            mixed = torch.matmul(self.weight_at(positions).to(heads.dtype), heads)
        bias = self.bias[:, positions.query].transpose(0, 1)[..., None]  # (1 or batch, heads, queries, 1)
        return (mixed + bias.to(mixed.dtype)).transpose(1, 2).flatten(2)

    def per_sequence(self, gate: torch.Tensor, positions: TokenPositions) -> torch.Tensor:
        """Packed rows: each sequence's gates moved to a row of their own (zero-padded), mixed there at their
        positions, and put back. No weight reaches across a boundary, and the product costs what the padded
        sequences' would, not the whole row's."""
        sequence, index = sequence_layout(positions.segments)
        count, width = int(sequence[-1]) + 1, int(index.max()) + 1
        rows = gate.new_zeros(count, width, gate.shape[-1])
        rows[sequence, index] = gate.flatten(0, 1)
        row_positions = positions.query.new_zeros(count, width)
        row_positions[sequence, index] = positions.query.expand(gate.shape[0], -1).flatten()
        mixed = self(rows, TokenPositions(row_positions, row_positions))
        return mixed[sequence, index].view(*gate.shape[:2], -1)

    def takes_fft(self, positions: TokenPositions, length: int) -> bool:
        """The one choice between the FFT and the direct product. The FFT needs a Toeplitz W and tokens in order; in
        eager mode it runs from `spatial_fft_min_length` tokens on, where it is the faster; compiled or exported the
        choice cannot depend on the length without a graph per side of the threshold (and `torch.export` would bound
        the length below it), so there it follows the model's n."""
        if not (self.is_toeplitz and positions.in_order):
            return False
        return (self.n if is_torchdynamo_compiling() else length) >= self.fft_min_length

    def fft_product(self, heads: torch.Tensor) -> torch.Tensor:
        """The Toeplitz product W @ heads for tokens in order, as a linear convolution by FFT in O(L log L)."""
        length, n = heads.shape[2], self.n
        # Offsets -(L - 1) .. L - 1, with the channel axis added before the transform (ONNX export cannot add an
        # axis to a complex tensor).
        kernel = self.applied_weight()[:, None, n - length : n + length - 1]
        # Output i is entry i + L - 1 of the full convolution; a transform of size 2L keeps entries L-1..2L-2
        # free of wrap-around. The transforms run along the last (contiguous) axis: ~1.7x faster than along L.
        size = 2 * length
        kernel = torch.fft.rfft(kernel.float(), n=size)
        signal = torch.fft.rfft(heads.float().transpose(-1, -2), n=size)
        product = torch.fft.irfft(signal * kernel, n=size)
        return product[..., length - 1 : 2 * length - 1].transpose(-1, -2).to(heads.dtype)


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
    """The SGU s(Z) and the variants of Table 3. With the default split variant (Eq. 3): Z1 * f(norm(Z2))."""

    def __init__(self, config: GMLPConfig):
        super().__init__()
        self.variant = config.sgu_variant
        self.gate_norm = nn.LayerNorm(config.gate_size, eps=config.layer_norm_eps)
        self.spatial_proj = GMLPSpatialProjection(config)

    def split(self, hidden_states: torch.Tensor, token_mask: torch.Tensor | None = None):
        """The content Z1 and the normalised gate norm(Z2) (both Z for the unsplit variants)."""
        if self.variant == "multiplicative_split":
            content, gate = hidden_states.chunk(2, dim=-1)
        else:
            content = gate = hidden_states
        gate = self.gate_norm(gate)
        if token_mask is not None:
            # Zeroing padding before mixing makes real positions independent of how much padding there is.
            gate = gate * token_mask
        return content, gate

    def forward(
        self,
        content: torch.Tensor,
        gate: torch.Tensor,
        positions: TokenPositions | None = None,
        tiny_attention_output: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """s(Z) from `split`'s output: the spatial projection of the gate (which may also hold cached earlier
        tokens), plus the tiny attention, gating the content of the current tokens."""
        gate = self.spatial_proj(gate, positions)
        if tiny_attention_output is not None:
            gate = gate + tiny_attention_output
        if self.variant == "linear":
            return gate
        if self.variant == "additive":
            return content + gate
        return content * gate


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

    With `config.recompute_gating` (the default) a training step keeps only the block's input, its normalised input,
    U's output and the tiny attention's own states for the backward pass and recomputes `gating` there
    (`torch.utils.checkpoint`): GELU's output, the normalised gate, the spatial product and the FFT's spectra are most
    of what a gMLP block would otherwise keep, and they cost little to recompute.
    """

    def __init__(self, config: GMLPConfig, layer_idx: int = 0):
        super().__init__()
        self.layer_idx = layer_idx
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.channel_proj_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.activation = ACT2FN[config.hidden_act]
        self.tiny_attention = GMLPTinyAttention(config, layer_idx) if config.tiny_attention_size > 0 else None
        self.sgu = GMLPSpatialGatingUnit(config)
        self.channel_proj_out = nn.Linear(config.gate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.drop_path_rate = config.drop_path_rate
        self.recompute_gating = config.recompute_gating

    def forward(
        self,
        hidden_states: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        positions: TokenPositions | None = None,
        cache: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        """`padding_mask`: 1 for real tokens, 0 for padding, over the cached tokens and these, (batch, cached +
        length); `attention_mask`: the tiny attention's mask, in the form its attention implementation takes."""
        normed = self.norm(hidden_states)
        projected = self.channel_proj_in(normed)
        tiny_attention_output = None
        if self.tiny_attention is not None:
            tiny_attention_output, _ = self.tiny_attention(normed, attention_mask, cache, **kwargs)
        gating_inputs = {
            "projected": projected,
            "tiny_attention_output": tiny_attention_output,
            "padding_mask": padding_mask,
            "positions": positions,
            "cache": cache,
        }
        recompute = self.recompute_gating and self.training and torch.is_grad_enabled() and cache is None
        # Gradient checkpointing of the whole block (outside) already recomputes the gating unit.
        if recompute and not self.gradient_checkpointing:
            gated = checkpoint(self.gating, use_reentrant=False, preserve_rng_state=False, **gating_inputs)
        else:
            gated = self.gating(**gating_inputs)
        block_output = self.dropout(self.channel_proj_out(gated))
        return hidden_states + drop_path(block_output, self.drop_path_rate, self.training)

    def gating(
        self,
        projected: torch.Tensor,
        tiny_attention_output: torch.Tensor | None,
        padding_mask: torch.Tensor | None,
        positions: TokenPositions | None,
        cache: Cache | None,
    ) -> torch.Tensor:
        """s(GELU(Z)) of Eq. (3) from U's output Z, with the tiny attention's output added to the spatial projection:
        the block's token mixing, whose output V projects back to the residual stream."""
        length = projected.shape[1]
        token_mask = None if padding_mask is None else padding_mask[:, -length:, None].to(projected.dtype)
        content, gate = self.sgu.split(self.activation(projected), token_mask)
        if cache is not None:
            gate = self.cached_gates(cache, gate, positions)
        return self.sgu(content, gate, positions, tiny_attention_output)

    def cached_gates(self, cache: Cache, gate: torch.Tensor, positions: TokenPositions) -> torch.Tensor:
        """Write these tokens' gates into the block's layer of `cache`; return the gates of all the tokens so far (the
        cached ones, then these)."""
        gates = cache.layers[self.layer_idx].update_gates(gate)
        return gates[:, : positions.key.shape[1]]  # a static cache returns its whole buffer


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
        self._with_gates(super().batch_repeat_interleave, repeats, lambda gates: gates.repeat_interleave(repeats, 0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._with_gates(super().batch_select_indices, indices, lambda gates: gates[indices])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._with_gates(
            super().reorder_cache, beam_idx, lambda gates: gates.index_select(0, beam_idx.to(gates.device))
        )

    def offload(self) -> None:
        self._with_gates(super().offload, None, lambda gates: gates.to("cpu", non_blocking=True))

    def prefetch(self) -> None:
        self._with_gates(super().prefetch, None, lambda gates: gates.to(self.device, non_blocking=True))

    def reset(self) -> None:
        super().reset()
        self.gates = self.gate_storage = None

    def _with_gates(self, method, argument, change_gates) -> None:
        """DynamicLayer's `method` on the keys and values (gMLP has none), and the same change on the gates, which are
        new tensors now, no longer the storage's."""
        if self.is_initialized:
            method(*(() if argument is None else (argument,)))
        if self.gates is not None:
            self.gates = change_gates(self.gates)
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
        self,
        hidden_states: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, padding_mask, **kwargs)
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
        attention_mask: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(batch, length, hidden) -> (batch, outputs); for packed rows (`segments`, see `sequence_segments`) one
        output per sequence, in order: (sequences, outputs)."""
        if segments is not None:
            pooled = pool_sequences(hidden_states, segments, self.pooling)
        elif self.pooling == "mean":
            pooled = mean_over_tokens(hidden_states, attention_mask)
        else:
            pooled = hidden_states[:, 0]
        return self.out_proj(self.dropout(torch.tanh(self.dense(pooled))))


def pool_sequences(hidden_states: torch.Tensor, segments: torch.Tensor, pooling: str) -> torch.Tensor:
    """Each packed sequence's first token or mean, (sequences, hidden), the sequences of row 0 first."""
    sequence, index = sequence_layout(segments)
    flat = hidden_states.flatten(0, 1)
    if pooling != "mean":
        return flat[index == 0]
    count = int(sequence[-1]) + 1
    sums = flat.new_zeros(count, flat.shape[-1]).index_add_(0, sequence, flat)
    return sums / torch.bincount(sequence, minlength=count)[:, None].to(flat.dtype)


def mean_over_tokens(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of `hidden_states` over the sequence, counting only real tokens when a mask is given."""
    if attention_mask is None:
        return hidden_states.mean(dim=1)
    weights = attention_mask[..., None].to(hidden_states.dtype)
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
        """Transformers' sequence-classification loss (regression for one label, cross-entropy for class ids, BCE for
        multi-hot labels), after a clear error for class ids out of range."""
        regression = self.config.problem_type == "regression" or (
            self.config.problem_type is None and self.config.num_labels == 1
        )
        if regression:
            labels = labels.to(logits.dtype)  # regression targets given as integers
        elif labels.dtype in (torch.long, torch.int):
            check_labels(labels, self.config.num_labels)
        return self.loss_function(labels, logits, self.config)

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
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | BaseModelOutputWithPast:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`): token ids; sequence_length (plus
            the cached tokens) must not exceed `config.max_position_embeddings` (the spatial size n).
        attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*): 1 for real tokens,
            0 for padding (with a cache: `(batch_size, cached + sequence_length)`). Padding is zeroed before every
            spatial projection and masked in the tiny attention, so right-padded sequences give the same outputs at
            their real positions as unpadded ones; in causal mode positions start at each row's first real token,
            so left padding is exact too (padding belongs at the ends of a row).
        token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*): segment ids.
        position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*): the position of each
            token (which row of W and entry of b it uses); by default its index, less the row's leading padding in
            causal mode. Without a cache they may pack several sequences in a row (padding-free batching: each
            sequence restarts at 0 and must fit in n; the row may be longer): sequences never mix.
        inputs_embeds (`torch.Tensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*): token
            embeddings to use instead of `input_ids`.
        cache (`Cache`, *optional*): causal mode: the earlier tokens' gates (and tiny-attention keys and
            values), as returned with `use_cache=True`; updated in place.
        use_cache (`bool`, *optional*): causal mode: return the cache, to decode one token at a time. A training
            step (training mode, gradients on) makes none unless one is passed in: with `config.recompute_gating` it
            recomputes its gates rather than keep them.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds.")
        input_shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        if not self.config.is_decoder:
            use_cache, cache = False, None  # only causal blocks can be decoded token by token
        if self.training and torch.is_grad_enabled() and self.config.recompute_gating and cache is None:
            use_cache = False  # a training step recomputes its gates instead of keeping them (see GMLPLayer)
        # Explicit positions without a cache may pack several sequences in a row: no cache to continue from then.
        packed = cache is None and (position_ids is not None or kwargs.get("cu_seq_lens_q") is not None)
        if use_cache and cache is None and not packed:
            cache = DynamicCache(config=self.config)
        if cache is not None:
            check_cache_layers(cache, self.config.num_hidden_layers)
        cached_length = cache.get_seq_length() if cache is not None else 0
        self._check_input_shape(input_shape, attention_mask, token_type_ids, cached_length, packed)
        positions = self._positions(input_shape, attention_mask, position_ids, cache, kwargs)
        if position_ids is not None or packed:
            self._check_positions(positions.query)
        hidden_states = self.embeddings(input_ids, token_type_ids, inputs_embeds)
        tiny_attention_mask = self._tiny_attention_mask(hidden_states, attention_mask, cache, positions)
        hidden_states = self.encoder(
            hidden_states,
            attention_mask,
            positions=positions,
            cache=cache,
            attention_mask=tiny_attention_mask,
            **kwargs,
        )
        sequence_output = self.final_norm(hidden_states)
        return BaseModelOutputWithPast(last_hidden_state=sequence_output, cache=cache if use_cache else None)

    def _positions(self, input_shape, attention_mask, position_ids, cache: Cache | None, kwargs) -> TokenPositions:
        """The query and key positions (and packed sequences) for the spatial projection.

        Without a cache or `position_ids`, token i is at position i, less, in causal mode, the row's leading padding,
        so that a left-padded row uses W and b as the same tokens alone would. With a cache the keys are the cached
        tokens followed by the new ones, counted the same way. Explicit `position_ids` (or flash attention's
        `cu_seq_lens_q`) may pack several sequences in a row: a sequence starts wherever the position does not
        increase (or at each boundary), and tokens of different sequences do not mix."""
        batch, length = input_shape
        device = self.device
        boundaries = kwargs.get("cu_seq_lens_q")
        if cache is None and position_ids is None and boundaries is None:
            shift = None
            if self.config.is_decoder and attention_mask is not None:
                shift = (attention_mask.long().cumsum(-1) == 0).sum(-1)  # the leading padding of each row
            return TokenPositions.sequential(length, device, shift)
        if cache is not None:
            cached_length = cache.get_seq_length()
            if self.config.is_decoder and attention_mask is not None:
                leading_padding = (attention_mask.long().cumsum(-1) == 0).sum(-1, keepdim=True)
                key_positions = (torch.arange(cached_length + length, device=device)[None] - leading_padding).clamp(0)
            else:
                key_positions = torch.arange(cached_length + length, device=device)[None]
            query_positions = position_ids if position_ids is not None else key_positions[:, -length:]
            return TokenPositions(query_positions, key_positions)
        if position_ids is not None:
            segments = sequence_segments(position_ids)
        else:
            segments = segments_from_boundaries(boundaries, length).expand(batch, -1)
            starts = torch.searchsorted(segments[0], segments[0], right=False)  # each token's sequence start
            position_ids = (torch.arange(length, device=device) - starts)[None].expand(batch, -1)
        return TokenPositions(position_ids, position_ids, segments=segments)

    def _tiny_attention_mask(self, hidden_states, attention_mask, cache, positions: TokenPositions):
        """The tiny attention's padding (and, in causal mode, causal) mask in the form its attention implementation
        takes, built once for all blocks, with no attention across packed sequences; None for gMLP."""
        if not self.config.tiny_attention_size:
            return None
        same_sequence = None
        if positions.segments is not None:
            segments = positions.segments

            def same_sequence(batch_idx, head_idx, q_idx, kv_idx):
                return segments[batch_idx, q_idx] == segments[batch_idx, kv_idx]

        if self.config.is_decoder:
            return create_causal_mask(
                config=self.config,
                inputs_embeds=hidden_states,
                attention_mask=attention_mask,
                cache=cache,
                and_mask_function=same_sequence,
            )
        return create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            and_mask_function=same_sequence,
        )

    def _check_input_shape(
        self, input_shape, attention_mask, token_type_ids, cached_length: int = 0, packed: bool = False
    ):
        """Clear errors for inputs the spatial weights cannot take, before they fail deep inside torch. A packed row
        (explicit positions, no cache) may be longer than n: each of its sequences must fit (`_check_positions`)."""
        if len(input_shape) != 2:
            raise ValueError(f"Expected inputs of shape (batch_size, sequence_length), got {tuple(input_shape)}.")
        length, n = input_shape[1], self.config.max_position_embeddings
        if cached_length + length > n and not packed:
            cache_note = f" ({cached_length} cached + {length} new)" if cached_length else ""
            raise ValueError(
                f"Input sequence length {cached_length + length}{cache_note} exceeds this model's maximum sequence length "
                f"{n} (`max_position_embeddings`, the size n of the spatial weights). Truncate the inputs to "
                f"{n} tokens (e.g. `tokenizer(..., truncation=True, max_length={n})`) or use a model "
                f"configured with a larger `max_position_embeddings`."
            )
        if length < 1:
            raise ValueError("Input sequences must contain at least one token.")
        expected = {"attention_mask": (input_shape[0], cached_length + length), "token_type_ids": tuple(input_shape)}
        for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if tensor is not None and tuple(tensor.shape) != expected[name]:
                covers = " (the cached tokens and the new ones)" if cached_length and name == "attention_mask" else ""
                raise ValueError(
                    f"`{name}` has shape {tuple(tensor.shape)} but must have shape {expected[name]}{covers}: the "
                    f"inputs have shape {tuple(input_shape)}."
                )

    def _check_positions(self, positions: torch.Tensor) -> None:
        """Explicit (or packed) positions must lie in [0, n - 1]: each packed sequence must fit in n tokens. Reading
        the values syncs with an accelerator and would split a compiled graph, so the check runs in eager mode only."""
        if is_torchdynamo_compiling():
            return
        low, high, n = int(positions.min()), int(positions.max()), self.config.max_position_embeddings
        if low < 0 or high >= n:
            raise ValueError(
                f"position_ids must be in [0, {n - 1}] (the model's n = max_position_embeddings), got values from "
                f"{low} to {high}. A packed row (padding-free batch) restarts its positions at 0 for each sequence, "
                f"and each sequence must fit in {n} tokens: truncate longer ones."
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


def check_labels(labels: torch.Tensor, num_classes: int, name: str = "labels") -> None:
    """Raise a clear error for class labels outside [0, num_classes) (-100, the ignore index, is allowed).

    The check reads tensor values: on the CPU that is free, but on an accelerator it would force a device sync at every
    step, and under torch.compile it would split the graph; there the loss's own device-side check stands instead."""
    if is_torchdynamo_compiling() or labels.device.type != "cpu":
        return
    valid = (labels == -100) | ((labels >= 0) & (labels < num_classes))
    if not bool(valid.all()):
        bad = labels[~valid][0].item()
        raise ValueError(
            f"{name} must be in [0, {num_classes - 1}] (or -100 to ignore a position), got {bad}. Check that the "
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
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        sequence_output = outputs.last_hidden_state
        if labels is not None:
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
        n = self.config.max_position_embeddings
        if generation_config.max_length > n:
            raise ValueError(
                f"The prompt has {input_ids_length} tokens and {generation_config.max_length - input_ids_length} new "
                f"ones are asked for: {generation_config.max_length} in all, more than this model's n = "
                f"max_position_embeddings = {n}. Ask for at most {max(0, n - input_ids_length)} new tokens "
                "(`max_new_tokens`) or shorten the prompt."
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
            check_labels(labels, self.config.vocab_size)
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
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
        position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*): without an
            `attention_mask`, a padding-free batch: several sequences packed in a row, each restarting its positions
            at 0; the logits then hold one row per sequence, in order.
        labels (`torch.Tensor` of shape `(batch_size,)` or `(batch_size, num_labels)`, *optional*): class ids,
            regression targets (`num_labels == 1`) or multi-hot float targets; one per sequence when packed.
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
        packed = position_ids is not None and attention_mask is None
        segments = sequence_segments(position_ids) if packed else None
        logits = self.classifier(outputs.last_hidden_state, attention_mask, segments)
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
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | MultipleChoiceModelOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`): one sequence per choice.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*): index of the right choice.
        """
        num_choices = input_ids.shape[1] if input_ids is not None else inputs_embeds.shape[1]

        def flatten_choices(tensor):
            return None if tensor is None else tensor.flatten(0, 1)

        outputs = self.gmlp(
            flatten_choices(input_ids),
            attention_mask=flatten_choices(attention_mask),
            token_type_ids=flatten_choices(token_type_ids),
            inputs_embeds=flatten_choices(inputs_embeds),
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(outputs.last_hidden_state, flatten_choices(attention_mask)).view(-1, num_choices)
        loss = None
        if labels is not None:
            check_labels(labels, num_choices)
            loss = CrossEntropyLoss()(logits, labels)
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
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            check_labels(labels, self.config.num_labels)
            loss = self.loss_function(logits, labels, self.config, **kwargs)
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
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | QuestionAnsweringModelOutput:
        r"""
        start_positions, end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*): token index of
            the answer's first and last token; positions outside the sequence are clamped and ignored, as in BERT.
        """
        if (
            kwargs.get("position_ids") is not None
            and attention_mask is None
            and not is_torchdynamo_compiling()
            and bool((sequence_segments(kwargs["position_ids"])[:, -1] > 0).any())
        ):
            raise ValueError(
                "Question answering finds one answer span per row, but these position_ids pack several sequences "
                "in a row (padding-free batching). Pad the batch instead (e.g. DataCollatorWithPadding)."
            )
        outputs = self.gmlp(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).unbind(dim=-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
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
