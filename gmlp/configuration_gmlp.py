"""gMLP / aMLP model configuration and the paper's named presets."""

from huggingface_hub.dataclasses import strict
from transformers.configuration_utils import PreTrainedConfig


SGU_VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")
SPATIAL_WEIGHT_TYPES = ("toeplitz", "dense")

# The paper's full BERT setup (Table 5: Toeplitz W, n = 512, a 32k vocabulary) and CPU-sized tiny models.
# aMLP's tiny attention is a single head of size 64 in the base model and 128 in the large one: these are
# the sizes that reproduce Table 5's 109M and 316M parameters.
# Written into every saved config.json, so that each Auto class finds its model in the code files saved next
# to the weights (`trust_remote_code=True`) where the gmlp package is not installed.
AUTO_MAP = {
    "AutoConfig": "configuration_gmlp.GMLPConfig",
    "AutoModel": "modeling_gmlp.GMLPModel",
    "AutoModelForMaskedLM": "modeling_gmlp.GMLPForMaskedLM",
    "AutoModelForCausalLM": "modeling_gmlp.GMLPForCausalLM",
    "AutoModelForSequenceClassification": "modeling_gmlp.GMLPForSequenceClassification",
    "AutoModelForMultipleChoice": "modeling_gmlp.GMLPForMultipleChoice",
    "AutoModelForTokenClassification": "modeling_gmlp.GMLPForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_gmlp.GMLPForQuestionAnswering",
}

PRESETS = {
    "gmlp-base": {"num_hidden_layers": 48, "hidden_size": 512, "intermediate_size": 3072},
    "gmlp-large": {"num_hidden_layers": 96, "hidden_size": 768, "intermediate_size": 3072},
    "gmlp-xlarge": {"num_hidden_layers": 144, "hidden_size": 1024, "intermediate_size": 4096},
    "amlp-base": {"num_hidden_layers": 36, "hidden_size": 512, "intermediate_size": 3072, "tiny_attention_size": 64},
    "amlp-large": {"num_hidden_layers": 72, "hidden_size": 768, "intermediate_size": 3072, "tiny_attention_size": 128},
    "gmlp-tiny": {
        "vocab_size": 8192,
        "num_hidden_layers": 8,
        "hidden_size": 128,
        "intermediate_size": 768,
        "max_position_embeddings": 128,
    },
    "amlp-tiny": {
        "vocab_size": 8192,
        "num_hidden_layers": 8,
        "hidden_size": 128,
        "intermediate_size": 768,
        "max_position_embeddings": 128,
        "tiny_attention_size": 32,
    },
}


@strict
class GMLPConfig(PreTrainedConfig):
    r"""
    Configuration of a gMLP or aMLP model ("Pay Attention to MLPs", Liu et al., 2021).

    The defaults are the paper's gMLP-base (Table 5). BERT's names are used where BERT has the concept.

    Args:
        vocab_size: Number of tokens in the vocabulary.
        hidden_size: Width of the residual stream (the paper's d_model).
        intermediate_size: Width of the channel expansion U (the paper's d_ffn); must be even, the SGU splits it.
        num_hidden_layers: Number of gMLP blocks (the paper's #L).
        max_position_embeddings: The spatial size n, i.e. the longest input; the spatial weights W are n x n.
        type_vocab_size: Number of token types (segments) for sentence pairs.
        hidden_act: Activation after the channel expansion.
        hidden_dropout_prob: Dropout on the embeddings and on each block's output.
        attention_probs_dropout_prob: Dropout on the tiny attention's weights (aMLP).
        classifier_dropout: Dropout before classification heads; `None` uses `hidden_dropout_prob`.
        initializer_range: Standard deviation of the normal init of embeddings and linear layers.
        layer_norm_eps: Epsilon of every LayerNorm.
        sgu_variant: The spatial gating function of Table 3: `"multiplicative_split"` (the paper's SGU,
            Z1 * f(Z2)), `"multiplicative"` (Z * f(Z)), `"additive"` (Z + f(Z)) or `"linear"` (f(Z)).
        spatial_weight_type: `"toeplitz"` (W[i, j] = w[i - j + n - 1], 2n - 1 parameters, the paper's choice for
            MLM) or `"dense"` (a full n x n matrix).
        spatial_init_eps: W starts uniform in +-spatial_init_eps / n and its bias at one, so that every block
            starts as a plain FFN (Section 2.1).
        spatial_fft_min_length: Sequences at least this long use an FFT for the Toeplitz product
            (O(n log n)); shorter ones multiply by the materialised matrix, which is faster there.
        tiny_attention_size: Size of aMLP's single-head tiny attention; 0 gives gMLP.
        num_sgu_heads: Number of groups of gate channels, each with its own spatial W.
        is_decoder: Causal mode: W is lower-triangular and the tiny attention causal (for `GMLPForCausalLM`).
        drop_path_rate: Probability of dropping a whole block per sample in training (stochastic depth).
        pad_token_id: Id of the padding token.
        tie_word_embeddings: Tie the language-model decoder to the input embeddings.

    Example:

    ```python
    >>> from gmlp import GMLPConfig, GMLPForMaskedLM
    >>> config = GMLPConfig.from_preset("gmlp-tiny")
    >>> model = GMLPForMaskedLM(config)
    ```
    """

    model_type = "gmlp"

    vocab_size: int = 32000
    hidden_size: int = 512
    intermediate_size: int = 3072
    num_hidden_layers: int = 48
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_act: str = "gelu"
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    classifier_dropout: float | int | None = None
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-5
    sgu_variant: str = "multiplicative_split"
    spatial_weight_type: str = "toeplitz"
    spatial_init_eps: float = 1e-3
    spatial_fft_min_length: int = 1024
    tiny_attention_size: int = 0
    num_sgu_heads: int = 1
    is_decoder: bool = False
    drop_path_rate: float | int = 0.0
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    tie_word_embeddings: bool = True
    # gMLP has no key/value cache: generation reruns the whole prefix at every step.
    use_cache: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.auto_map = {**AUTO_MAP, **(getattr(self, "auto_map", None) or {})}

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "GMLPConfig":
        """A named configuration (`gmlp-base`, `amlp-large`, `gmlp-tiny`, ...; see `PRESETS`) with overrides."""
        if name not in PRESETS:
            raise ValueError(f"Unknown gMLP preset {name!r}; choose one of {', '.join(PRESETS)}.")
        return cls(**{**PRESETS[name], **overrides})

    @property
    def gate_size(self) -> int:
        """Channels the spatial gating unit outputs: half of d_ffn for the split variant, all of it otherwise."""
        if self.sgu_variant == "multiplicative_split":
            return self.intermediate_size // 2
        return self.intermediate_size

    def validate_architecture(self):
        """Part of `@strict`-powered validation: reject sizes and options the model cannot be built with."""
        positive = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_sgu_heads")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be at least 1, got {getattr(self, name)}.")
        if self.max_position_embeddings < 1:
            raise ValueError(
                f"`max_position_embeddings` (the spatial size n) must be at least 1, got {self.max_position_embeddings}."
            )
        if self.sgu_variant not in SGU_VARIANTS:
            raise ValueError(f"Unknown `sgu_variant` {self.sgu_variant!r}; choose one of {', '.join(SGU_VARIANTS)}.")
        if self.spatial_weight_type not in SPATIAL_WEIGHT_TYPES:
            raise ValueError(
                f"Unknown `spatial_weight_type` {self.spatial_weight_type!r}; "
                f"choose one of {', '.join(SPATIAL_WEIGHT_TYPES)}."
            )
        if self.sgu_variant == "multiplicative_split" and self.intermediate_size % 2:
            raise ValueError(
                f"`intermediate_size` (d_ffn) must be even for the split SGU, which halves it; "
                f"got {self.intermediate_size}."
            )
        if self.gate_size % self.num_sgu_heads:
            raise ValueError(
                f"`num_sgu_heads` ({self.num_sgu_heads}) must divide the SGU's gate channels ({self.gate_size}: "
                f"intermediate_size {self.intermediate_size}, sgu_variant {self.sgu_variant!r})."
            )
        if self.tiny_attention_size < 0:
            raise ValueError(f"`tiny_attention_size` must be 0 (gMLP) or positive (aMLP), got {self.tiny_attention_size}.")
        if self.spatial_init_eps < 0:
            raise ValueError(f"`spatial_init_eps` must be non-negative, got {self.spatial_init_eps}.")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be in [0, 1), got {getattr(self, name)}.")


__all__ = ["AUTO_MAP", "GMLPConfig", "PRESETS"]
