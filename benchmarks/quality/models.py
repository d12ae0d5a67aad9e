"""The benchmark's models at equal parameter count, and the SGU variants of the paper's Table 3.

Kept here until `benchmarks/common.py` (shared with the speed benchmark) holds the equal-parameter configs.
"""

import torch
from transformers import BertConfig, BertForMaskedLM

from gmlp import GMLPConfig, GMLPForMaskedLM

# gmlp-tiny: 8 blocks, d_model 128, d_ffn 768, n 128, an 8,192-token WordPiece vocabulary trained on the data.
GMLP_TINY = {
    "vocab_size": 8192,
    "hidden_size": 128,
    "intermediate_size": 768,
    "num_hidden_layers": 8,
    "max_position_embeddings": 128,
}
MODELS = ("bert", "gmlp", "amlp")  # slowest first: its runs take the first free slot
SGU_VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")


def masked_lm(config):
    """The masked-LM model of `config` (BERT's or gMLP's)."""
    return (BertForMaskedLM if isinstance(config, BertConfig) else GMLPForMaskedLM)(config)


def num_parameters(config) -> int:
    """The parameter count of `config`'s masked-LM model (tied weights once), built on the meta device."""
    with torch.device("meta"):
        return masked_lm(config).num_parameters()


def matching_width(build, target: int, low: int, high: int) -> int:
    """The FFN width whose model `build(width)` has the parameter count nearest `target` (the count is affine in
    the width, so two widths give the line)."""
    at_low, at_high = num_parameters(build(low)), num_parameters(build(high))
    return round(low + (target - at_low) * (high - low) / (at_high - at_low))


def bert_config(intermediate_size: int) -> BertConfig:
    """Transformers' BERT with gMLP-tiny's vocabulary, width, depth and length (2 heads of 64)."""
    return BertConfig(
        vocab_size=GMLP_TINY["vocab_size"],
        hidden_size=128,
        num_hidden_layers=8,
        num_attention_heads=2,
        intermediate_size=intermediate_size,
        max_position_embeddings=128,
    )


def model_configs() -> dict:
    """name -> config, at nearly equal parameter count. aMLP drops one block to pay for its tiny attention (as the
    paper's aMLP-base has 36 blocks against gMLP-base's 48); BERT has gMLP's width and depth and the FFN width that
    matches the count."""
    gmlp = GMLPConfig(**GMLP_TINY)
    amlp = GMLPConfig(**{**GMLP_TINY, "num_hidden_layers": 7, "tiny_attention_size": 32})
    width = matching_width(bert_config, num_parameters(gmlp), 128, 256)
    return {"bert": bert_config(width), "gmlp": gmlp, "amlp": amlp}


def sgu_configs() -> dict:
    """Table 3's variants at gMLP-tiny's shape, and the split SGU widened to the unsplit variants' count (their gate
    and V are twice as wide at the same d_ffn)."""
    configs = {variant: GMLPConfig(**GMLP_TINY, sgu_variant=variant) for variant in SGU_VARIANTS}
    target = num_parameters(configs["multiplicative"])

    def split(width):
        return GMLPConfig(**{**GMLP_TINY, "intermediate_size": 2 * (width // 2)})

    width = matching_width(split, target, GMLP_TINY["intermediate_size"], 2 * GMLP_TINY["intermediate_size"])
    configs["multiplicative_split, wider"] = split(width)
    return configs
