"""The benchmark's models at equal parameter count, and the SGU variants of the paper's Table 3."""

from transformers import BertConfig, BertForMaskedLM

from gmlp import GMLPConfig, GMLPForMaskedLM

from ..common import bert_config, fit_affine, parameters_of

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


def config_parameters(config) -> int:
    """The parameter count of `config`'s masked-LM model (tied weights once)."""
    return parameters_of(lambda: masked_lm(config))


def model_configs() -> dict:
    """name -> config, at nearly equal parameter count. aMLP drops one block to pay for its tiny attention (as the
    paper's aMLP-base has 36 blocks against gMLP-base's 48); BERT has gMLP's width and depth, heads of 64 and the FFN
    width that matches the count."""
    gmlp = GMLPConfig(**GMLP_TINY)
    amlp = GMLPConfig(**{**GMLP_TINY, "num_hidden_layers": 7, "tiny_attention_size": 32})
    return {"bert": bert_config(GMLP_TINY, config_parameters(gmlp)), "gmlp": gmlp, "amlp": amlp}


def sgu_configs() -> dict:
    """Table 3's variants at gMLP-tiny's shape, and the split SGU widened to the unsplit variants' count (their gate
    and V are twice as wide at the same d_ffn)."""
    configs = {variant: GMLPConfig(**GMLP_TINY, sgu_variant=variant) for variant in SGU_VARIANTS}
    target = config_parameters(configs["multiplicative"])

    def split(width):
        return GMLPConfig(**{**GMLP_TINY, "intermediate_size": 2 * (width // 2)})

    width = fit_affine(
        lambda width: config_parameters(split(width)),
        target,
        GMLP_TINY["intermediate_size"],
        2 * GMLP_TINY["intermediate_size"],
    )
    configs["multiplicative_split, wider"] = split(width)
    return configs
