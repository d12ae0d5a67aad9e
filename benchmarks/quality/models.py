"""The benchmark's models at equal parameter count, and the rows of the paper's Table 3."""

from transformers import AutoModelForMaskedLM, BertConfig, DebertaV2Config, DebertaV2ForMaskedLM, ModernBertConfig

from gmlp import GMLPConfig

from ..common import bert_config, fit_affine, modernbert_config, parameters_of, transformer_shape, with_matched_width

# gmlp-tiny: 8 blocks, d_model 128, d_ffn 768, n 128, an 8,192-token WordPiece vocabulary trained on the data.
GMLP_TINY = {
    "vocab_size": 8192,
    "hidden_size": 128,
    "intermediate_size": 768,
    "num_hidden_layers": 8,
    "max_position_embeddings": 128,
    "spatial_fft_min_length": 1024,  # the CPU's cross-over, which the records' keys name (n = 128: never the FFT)
}
MODELS = ("bert", "modernbert", "gmlp", "amlp")  # slowest first: its runs take the first free slot
# Pretraining-only rows that make the dropout equal: each model's chosen recipe at the other models' dropout (0.1 is
# gMLP's and BERT's default on embeddings, attention and block outputs; ModernBERT's is 0).
DROPOUT_VARIANTS = {"modernbert-dropout0.1": ("modernbert", 0.1), "gmlp-dropout0": ("gmlp", 0.0)}
DROPOUT_FIELDS = {
    ModernBertConfig: ("embedding_dropout", "attention_dropout", "mlp_dropout"),
    GMLPConfig: ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    BertConfig: ("hidden_dropout_prob", "attention_probs_dropout_prob"),
}
# The tokenizer's special tokens (gmlp.tokenization_gmlp): ModernBERT's and DeBERTa-v2's configs must name them.
SPECIAL_TOKEN_IDS = {"pad_token_id": 0, "cls_token_id": 2, "bos_token_id": 2, "sep_token_id": 3, "eos_token_id": 3}
SGU_VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")
# Table 3's Transformer rows this benchmark can run: name -> the model whose chosen recipe it trains with. ModernBERT
# (rotary positions) stands in for the paper's BERT with relative position biases; DeBERTa-v2 (relative attention,
# the closest stock relative-position BERT) has no search of its own and takes BERT's recipe.
TABLE3_TRANSFORMERS = {"bert": "bert", "modernbert": "modernbert", "deberta-v2": "bert"}


def config_parameters(config) -> int:
    """The parameter count of `config`'s masked-LM model (tied weights once)."""
    return parameters_of(lambda: AutoModelForMaskedLM.from_config(config))


def dropout_of(config) -> float:
    """The dropout the pretraining model trains with (they are equal where a model has several)."""
    return getattr(config, DROPOUT_FIELDS[type(config)][0])


def model_configs() -> dict:
    """name -> config, at nearly equal parameter count. aMLP drops one block to pay for its tiny attention (as the
    paper's aMLP-base has 36 blocks against gMLP-base's 48); BERT and ModernBERT have gMLP's width and depth, heads of
    64 and the FFN width that matches the count; a dropout variant is its model with every pretraining dropout at
    another value (the heads' own left alone)."""
    gmlp = GMLPConfig(**GMLP_TINY)
    target = config_parameters(gmlp)
    configs = {
        "bert": bert_config(GMLP_TINY, target),
        "modernbert": modernbert_config(GMLP_TINY, target, **SPECIAL_TOKEN_IDS),
        "gmlp": gmlp,
        "amlp": GMLPConfig(**{**GMLP_TINY, "num_hidden_layers": 7, "tiny_attention_size": 32}),
    }
    for variant, (name, dropout) in DROPOUT_VARIANTS.items():
        config = configs[name]
        configs[variant] = type(config).from_dict(
            config.to_dict() | dict.fromkeys(DROPOUT_FIELDS[type(config)], dropout)
        )
    return configs


def table3_transformer_configs() -> dict:
    """Table 3's Transformer rows at gMLP-tiny's parameter count: BERT and ModernBERT as in the other parts, and
    stock DeBERTa-v2 with relative attention (content-to-position and position-to-content, 64 log buckets) and no
    absolute positions, as DeBERTa-v2 has them (its attention is eager only)."""
    configs = model_configs()
    fields = {
        **transformer_shape(GMLP_TINY),
        "relative_attention": True,
        "position_buckets": 64,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False,
        **SPECIAL_TOKEN_IDS,
    }
    target = config_parameters(configs["gmlp"])
    deberta = with_matched_width(DebertaV2ForMaskedLM, DebertaV2Config, fields, "intermediate_size", target)
    return {"bert": configs["bert"], "modernbert": configs["modernbert"], "deberta-v2": deberta}


def sgu_configs() -> dict:
    """Table 3's SGU variants at gMLP-tiny's shape, and the split SGU widened to the unsplit variants' count (their
    gate and V are twice as wide at the same d_ffn)."""
    configs = {variant: GMLPConfig(**GMLP_TINY, sgu_variant=variant) for variant in SGU_VARIANTS}

    def split(width):
        return GMLPConfig(**{**GMLP_TINY, "intermediate_size": 2 * (width // 2)})

    target = config_parameters(configs["multiplicative"])
    low = GMLP_TINY["intermediate_size"]
    configs["multiplicative_split, wider"] = split(
        fit_affine(lambda w: config_parameters(split(w)), target, low, 2 * low)
    )
    return configs
