"""gMLP / aMLP model configuration and the paper's named presets."""

import dataclasses
import difflib

from huggingface_hub.dataclasses import strict
from transformers.configuration_utils import PreTrainedConfig

SGU_VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")
SPATIAL_WEIGHT_TYPES = ("toeplitz", "dense")
SGU_KERNELS = ("auto", "triton", "torch")
CLASSIFIER_POOLINGS = ("first", "mean")
# The cache layer type of a gMLP block (`GMLPConfig.layer_types`; its classes are in modeling_gmlp.py).
SPATIAL_GATING_LAYER_TYPE = "spatial_gating"

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
class GMLPBlockConfig(PreTrainedConfig):
    r"""
    The fields of the gMLP block that the text and vision configurations share (one home for them: `GMLPLayer` and
    its parts read these), and their checks. Not a model type of its own; see `GMLPConfig` for their meaning.
    """

    hidden_size: int = 512
    intermediate_size: int = 3072
    num_hidden_layers: int = 48
    hidden_act: str = "gelu"
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-5
    sgu_variant: str = "multiplicative_split"
    spatial_weight_type: str = "toeplitz"
    spatial_init_eps: float = 1e-3
    spatial_fft_min_length: int | None = None
    sgu_kernel: str = "auto"
    tiny_attention_size: int = 0
    num_sgu_heads: int = 1
    is_decoder: bool = False
    drop_path_rate: float | int = 0.0
    recompute_gating: bool = True

    # The tiny attention's head size under the name tools read and set (0 for gMLP, which has no attention).
    attribute_map = {"head_dim": "tiny_attention_size"}

    @property
    def gate_size(self) -> int:
        """Channels the spatial gating unit outputs: half of d_ffn for the split variant, all of it otherwise."""
        if self.sgu_variant == "multiplicative_split":
            return self.intermediate_size // 2
        return self.intermediate_size

    @property
    def num_attention_heads(self) -> int:
        """Heads of the tiny attention, the only attention in the model: 1 for aMLP (Figure 6's single head), 0 for
        gMLP. Tools that size attention or caches from the config read it (with `head_dim`)."""
        return 1 if self.tiny_attention_size else 0

    def _validate_block(self, positive: tuple[str, ...] = ()):
        """The block's checks (and that the fields in `positive` are at least 1): called by each config's
        `validate_architecture`."""
        for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_sgu_heads", *positive):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be at least 1, got {getattr(self, name)}.")
        if self.sgu_variant not in SGU_VARIANTS:
            raise ValueError(f"Unknown `sgu_variant` {self.sgu_variant!r}; choose one of {', '.join(SGU_VARIANTS)}.")
        if self.spatial_weight_type not in SPATIAL_WEIGHT_TYPES:
            raise ValueError(
                f"Unknown `spatial_weight_type` {self.spatial_weight_type!r}; "
                f"choose one of {', '.join(SPATIAL_WEIGHT_TYPES)}."
            )
        if self.sgu_kernel not in SGU_KERNELS:
            raise ValueError(f"Unknown `sgu_kernel` {self.sgu_kernel!r}; choose one of {', '.join(SGU_KERNELS)}.")
        if self.spatial_fft_min_length is not None and self.spatial_fft_min_length < 1:
            raise ValueError(
                f"`spatial_fft_min_length` must be at least 1 (or None for the device's cross-over), got {self.spatial_fft_min_length}."
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
            raise ValueError(
                f"`tiny_attention_size` must be 0 (gMLP) or positive (aMLP), got {self.tiny_attention_size}."
            )
        if self.spatial_init_eps < 0:
            raise ValueError(f"`spatial_init_eps` must be non-negative, got {self.spatial_init_eps}.")
        if not self.layer_norm_eps > 0:
            raise ValueError(
                f"`layer_norm_eps` must be positive (it keeps LayerNorm finite), got {self.layer_norm_eps}."
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be in [0, 1), got {getattr(self, name)}.")


@strict
class GMLPConfig(GMLPBlockConfig):
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
        classifier_dropout: Dropout in the sentence- and token-level heads; `None` uses `hidden_dropout_prob`.
        classifier_pooling: The sentence representation of the sequence-classification and multiple-choice heads:
            `"first"` (the first real token, as BERT's pooler) or `"mean"` (the mean over real tokens).
        initializer_range: Standard deviation of the normal init of embeddings and linear layers.
        layer_norm_eps: Epsilon of every LayerNorm.
        sgu_variant: The spatial gating function of Table 3: `"multiplicative_split"` (the paper's SGU,
            Z1 * f(Z2)), `"multiplicative"` (Z * f(Z)), `"additive"` (Z + f(Z)) or `"linear"` (f(Z)).
        spatial_weight_type: `"toeplitz"` (W[i, j] = w[i - j + n - 1], 2n - 1 parameters, the paper's choice for
            MLM) or `"dense"` (a full n x n matrix).
        spatial_init_eps: W starts uniform in +-spatial_init_eps / n and its bias at one, so that every block
            starts as a plain FFN (Section 2.1).
        spatial_fft_min_length: In eager mode, tokens in order at least this many use an FFT for the Toeplitz
            product (O(n log n)); fewer multiply by the materialised matrix, which is faster there. Compiled or
            exported, a model whose n (max_position_embeddings) is at least this uses the FFT at every length, so
            that one graph serves every length. None (the default): the cross-over measured on the device the
            weights are on (`modeling_gmlp.FFT_MIN_LENGTH`: 1,024 tokens on a CPU, 4,096 on a CUDA GPU).
        sgu_kernel: How the spatial gating unit runs: `"auto"` (the default: the path the project's GPU record
            measured fastest for the device and mode, `modeling_gmlp.AUTO_SGU_KERNEL`; today PyTorch's everywhere),
            `"triton"` (the Triton unit of `kernels_gmlp.py` wherever Triton runs, its CPU interpreter included) or
            `"torch"` (always PyTorch).
        tiny_attention_size: Size of aMLP's single-head tiny attention; 0 gives gMLP.
        num_sgu_heads: Number of groups of gate channels, each with its own spatial W.
        is_decoder: Causal mode: W is lower-triangular and the tiny attention causal (for `GMLPForCausalLM`).
        drop_path_rate: Probability of dropping a whole block per sample in training (stochastic depth).
        recompute_gating: Memory-lean training: each block keeps only its input, its normalised input and the channel
            expansion's output for the backward pass and recomputes the rest of the gating unit there (GELU, the
            gate's LayerNorm, the spatial projection and aMLP's tiny attention). Gradients are the same either way.
        pad_token_id: Id of the padding token.
        tie_word_embeddings: Tie the language-model decoder to the input embeddings.

    Fields that tools read: `num_attention_heads` (read-only) and `head_dim` (another name for
    `tiny_attention_size`) describe the tiny attention, the model's only attention (1 head of `tiny_attention_size` for
    aMLP; 0 heads of size 0 for gMLP, which has none), and so the shape `(batch, num_attention_heads, tokens, head_dim)`
    of the keys and values in each block's layer of a cache.
    Each such layer also holds the block's gates (see `GMLPLayer`); `layer_types` names that layer type
    (`"spatial_gating"`) for Transformers' `DynamicCache` / `StaticCache`. The tiny attention runs through
    Transformers' attention interface: choose it with `attn_implementation` ("sdpa", the default, "eager",
    "flash_attention_2", "flex_attention") at `from_pretrained` / `from_config`.

    Example:

    ```python
    >>> from gmlp import GMLPConfig, GMLPForMaskedLM
    >>> config = GMLPConfig.from_preset("gmlp-tiny")
    >>> model = GMLPForMaskedLM(config)
    ```
    """

    model_type = "gmlp"

    vocab_size: int = 32000
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    classifier_dropout: float | int | None = None
    classifier_pooling: str = "first"
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    tie_word_embeddings: bool = True
    # Causal models decode with a cache of the earlier tokens' gates (see GMLPLayer); encoders ignore it.
    use_cache: bool = True

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.auto_map = {**AUTO_MAP, **(getattr(self, "auto_map", None) or {})}

    @property
    def layer_types(self) -> list[str]:
        """The cache layer of each block: `"spatial_gating"`, registered with Transformers' caches by
        `modeling_gmlp` (its `GMLPDynamicLayer` and `GMLPStaticLayer`)."""
        return [SPATIAL_GATING_LAYER_TYPE] * self.num_hidden_layers

    def validate_layer_type(self):
        """Every block is a spatial gating block (Transformers' own check allows only its attention layer types)."""

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "GMLPConfig":
        """A named configuration (`gmlp-base`, `amlp-large`, `gmlp-tiny`, ...; see `PRESETS`) with overrides."""
        return preset_config(cls, PRESETS, "gMLP preset", name, overrides)

    def validate_architecture(self):
        """Part of `@strict`-powered validation: reject sizes and options the model cannot be built with."""
        self._validate_block(positive=("vocab_size",))
        if self.max_position_embeddings < 2:
            raise ValueError(
                f"`max_position_embeddings` (the spatial size n) must be at least 2, got {self.max_position_embeddings}: "
                "with one token, the spatial gating unit has no other token to mix."
            )
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ValueError(
                f"Unknown `classifier_pooling` {self.classifier_pooling!r}; choose one of {', '.join(CLASSIFIER_POOLINGS)}."
            )


def preset_config(cls, presets: dict, kind: str, name: str, overrides: dict):
    """`cls` from the preset `name` with `overrides`, refusing an unknown preset name or an override that is no field
    of the config (a misspelling would otherwise be kept as a stray attribute and saved into config.json)."""
    if name not in presets:
        raise ValueError(f"Unknown {kind} {name!r}; choose one of {', '.join(presets)}.")
    config = cls(**{**presets[name], **overrides})
    fields = {field.name for field in dataclasses.fields(cls)} | set(cls.attribute_map)
    # Transformers' own keywords (num_labels, attn_implementation, ...) are consumed, not kept as attributes.
    stray = [key for key in overrides if key not in fields and key in vars(config)]
    if stray:
        nearest = difflib.get_close_matches(stray[0], sorted(fields), n=1)
        hint = f"did you mean {nearest[0]!r}? " if nearest else ""
        raise ValueError(
            f"Unknown override {stray[0]!r} for the {kind} {name!r}: {cls.__name__} has no such field; {hint}"
            f"The fields are: {', '.join(sorted(fields))}."
        )
    return config


# The vision models, like AUTO_MAP for the text ones: written into every saved vision config.json.
VISION_AUTO_MAP = {
    "AutoConfig": "configuration_gmlp.GMLPVisionConfig",
    "AutoModel": "modeling_gmlp.GMLPVisionModel",
    "AutoModelForImageClassification": "modeling_gmlp.GMLPForImageClassification",
}

# Table 1: ImageNet models on 224 x 224 images cut into 16 x 16 patches (n = 196), 30 layers. The survival
# probability of stochastic depth is 1 - drop_path_rate (1.00 / 0.95 / 0.80).
VISION_PRESETS = {
    "gmlp-ti16": {"hidden_size": 128, "intermediate_size": 768, "drop_path_rate": 0.0},
    "gmlp-s16": {"hidden_size": 256, "intermediate_size": 1536, "drop_path_rate": 0.05},
    "gmlp-b16": {"hidden_size": 512, "intermediate_size": 3072, "drop_path_rate": 0.2},
    # CPU-sized, for small images such as scikit-learn's 8x8 digits upsampled to 32x32 (n = 64 patches).
    "gmlp-tiny": {
        "image_size": 32,
        "patch_size": 4,
        "hidden_size": 64,
        "intermediate_size": 256,
        "num_hidden_layers": 6,
        "drop_path_rate": 0.0,
    },
}


@strict
class GMLPVisionConfig(GMLPBlockConfig):
    r"""
    Configuration of a gMLP image classifier ("Pay Attention to MLPs", Section 3): a ViT-style patch stem, L gMLP
    blocks whose dense spatial weights mix the patches, a final LayerNorm, mean pooling and a linear classifier.

    The defaults are gMLP-S/16 (Table 1) as built by timm (`gmlp_s16_224`), whose weights `gmlp.convert_timm`
    converts. Fields shared with `GMLPConfig` have the same names and meaning.

    Args:
        hidden_size: Width of the residual stream (the paper's d_model).
        intermediate_size: Width of the channel expansion U (the paper's d_ffn); must be even, the SGU splits it.
        num_hidden_layers: Number of gMLP blocks (the paper's #L).
        image_size: Height and width of the (square) input images, in pixels.
        patch_size: Height and width of the square patches the stem cuts the image into; must divide `image_size`.
        num_channels: Number of input image channels.
        hidden_act: Activation after the channel expansion (`"gelu"` is the exact erf GELU, as in timm).
        hidden_dropout_prob: Dropout on each block's output.
        classifier_dropout: Dropout before the classifier.
        initializer_range: Standard deviation of the normal init of the stem and the linear layers.
        layer_norm_eps: Epsilon of every LayerNorm (timm uses 1e-6).
        sgu_variant: The spatial gating function of Table 3 (see `GMLPConfig`).
        spatial_init_eps: W starts uniform in +-spatial_init_eps / n and its bias at one (Section 2.1).
        num_sgu_heads: Number of groups of gate channels, each with its own spatial W.
        drop_path_rate: Probability of dropping a whole block per sample in training (stochastic depth; one
            minus Table 1's survival probability, the same for every block).

    Example:

    ```python
    >>> from gmlp import GMLPVisionConfig, GMLPForImageClassification
    >>> config = GMLPVisionConfig.from_preset("gmlp-ti16", num_labels=10)
    >>> model = GMLPForImageClassification(config)
    ```
    """

    model_type = "gmlp_vision"

    # The block's fields (GMLPBlockConfig) with gMLP-S/16's values; Table 1's W is a full matrix over the patches.
    hidden_size: int = 256
    intermediate_size: int = 1536
    num_hidden_layers: int = 30
    hidden_dropout_prob: float | int = 0.0
    attention_probs_dropout_prob: float | int = 0.0
    layer_norm_eps: float = 1e-6
    spatial_weight_type: str = "dense"
    drop_path_rate: float | int = 0.05
    image_size: int = 224
    patch_size: int = 16
    num_channels: int = 3
    classifier_dropout: float | int = 0.0

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.auto_map = {**VISION_AUTO_MAP, **(getattr(self, "auto_map", None) or {})}

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "GMLPVisionConfig":
        """A named configuration (Table 1's `gmlp-ti16`, `gmlp-s16`, `gmlp-b16`, or `gmlp-tiny`) with overrides."""
        return preset_config(cls, VISION_PRESETS, "gMLP vision preset", name, overrides)

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def max_position_embeddings(self) -> int:
        """The block's spatial size n: the patches are the tokens."""
        return self.num_patches

    def validate_architecture(self):
        """Part of `@strict`-powered validation: reject sizes and options the model cannot be built with."""
        self._validate_block(positive=("image_size", "patch_size", "num_channels"))
        if self.image_size % self.patch_size:
            raise ValueError(
                f"`patch_size` ({self.patch_size}) must divide `image_size` ({self.image_size}) so that the image "
                f"is cut into whole patches; e.g. use image_size={self.image_size // self.patch_size * self.patch_size}."
            )
        if self.is_decoder:
            raise ValueError("`is_decoder` (causal mode) is for language models; an image's patches have no order.")
        if not 0 <= self.classifier_dropout < 1:
            raise ValueError(f"`classifier_dropout` must be in [0, 1), got {self.classifier_dropout}.")


__all__ = [
    "AUTO_MAP",
    "PRESETS",
    "SPATIAL_GATING_LAYER_TYPE",
    "VISION_AUTO_MAP",
    "VISION_PRESETS",
    "GMLPBlockConfig",
    "GMLPConfig",
    "GMLPVisionConfig",
]
