"""The benchmark's models at equal parameter count, and the SGU variants of the paper's Table 3."""

from transformers import (
    BertConfig,
    BertForMaskedLM,
    DebertaV2Config,
    DebertaV2ForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
)

from gmlp import GMLPConfig, GMLPForMaskedLM

from ..common import (
    bert_config,
    fit_affine,
    modernbert_config,
    parameters_of,
    transformer_shape,
    with_matched_width,
)

# gmlp-tiny: 8 blocks, d_model 128, d_ffn 768, n 128, an 8,192-token WordPiece vocabulary trained on the data.
GMLP_TINY = {
    "vocab_size": 8192,
    "hidden_size": 128,
    "intermediate_size": 768,
    "num_hidden_layers": 8,
    "max_position_embeddings": 128,
}
MODELS = ("bert", "modernbert", "gmlp", "amlp")  # slowest first: its runs take the first free slot
# Pretraining-only rows that make the dropout equal: each model's chosen recipe at the other models' dropout.
DROPOUT = 0.1  # gMLP's and BERT's default (embeddings, attention, block outputs); ModernBERT's is 0
DROPOUT_VARIANTS = {"modernbert-dropout0.1": ("modernbert", DROPOUT), "gmlp-dropout0": ("gmlp", 0.0)}
# The tokenizer's special tokens (gmlp.tokenization_gmlp): ModernBERT's config must name them.
SPECIAL_TOKEN_IDS = {"pad_token_id": 0, "cls_token_id": 2, "bos_token_id": 2, "sep_token_id": 3, "eos_token_id": 3}
SGU_VARIANTS = ("multiplicative_split", "multiplicative", "additive", "linear")
# Table 3's Transformer rows this benchmark can run: name -> the model whose chosen recipe it trains with. ModernBERT
# (rotary positions) stands in for the paper's BERT with relative position biases; DeBERTa-v2 (relative attention,
# the closest stock relative-position BERT) has no search of its own and takes BERT's recipe.
TABLE3_TRANSFORMERS = {"bert": "bert", "modernbert": "modernbert", "deberta-v2": "bert"}


def masked_lm(config):
    """The masked-LM model of `config` (BERT's, ModernBERT's or gMLP's)."""
    classes = {
        BertConfig: BertForMaskedLM,
        ModernBertConfig: ModernBertForMaskedLM,
        DebertaV2Config: DebertaV2ForMaskedLM,
        GMLPConfig: GMLPForMaskedLM,
    }
    return classes[type(config)](config)


def config_parameters(config) -> int:
    """The parameter count of `config`'s masked-LM model (tied weights once)."""
    return parameters_of(lambda: masked_lm(config))


def deberta_config(like: dict, target_parameters: int, head_size: int = 64) -> DebertaV2Config:
    """Stock `DebertaV2ForMaskedLM`'s config with the shape of the model `like` (heads of `head_size`), relative
    attention (content-to-position and position-to-content, 64 log buckets) and no absolute positions, as DeBERTa-v2
    has them, and the FFN width that matches `target_parameters`. Its attention is eager only."""
    fields = {
        **transformer_shape(like, head_size),
        "relative_attention": True,
        "position_buckets": 64,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False,
        **SPECIAL_TOKEN_IDS,
    }
    return with_matched_width(DebertaV2ForMaskedLM, DebertaV2Config, fields, "intermediate_size", target_parameters)


def table3_transformer_configs() -> dict:
    """Table 3's Transformer rows (TABLE3_TRANSFORMERS) at gMLP-tiny's parameter count."""
    configs = model_configs()
    target = config_parameters(configs["gmlp"])
    return {
        "bert": configs["bert"],
        "modernbert": configs["modernbert"],
        "deberta-v2": deberta_config(GMLP_TINY, target),
    }


def with_dropout(config, dropout: float):
    """A copy of `config` with every dropout of the pretraining model (embeddings, attention, block or MLP outputs)
    at `dropout`; the heads' own dropout is left alone."""
    fields = {
        ModernBertConfig: ("embedding_dropout", "attention_dropout", "mlp_dropout"),
        GMLPConfig: ("hidden_dropout_prob", "attention_probs_dropout_prob"),
        BertConfig: ("hidden_dropout_prob", "attention_probs_dropout_prob"),
        DebertaV2Config: ("hidden_dropout_prob", "attention_probs_dropout_prob"),
    }[type(config)]
    return type(config).from_dict({**config.to_dict(), **dict.fromkeys(fields, dropout)})


def dropout_of(config) -> float:
    """The dropout the pretraining model trains with (they are equal where a model has several)."""
    name = "embedding_dropout" if isinstance(config, ModernBertConfig) else "hidden_dropout_prob"
    return getattr(config, name)


def model_configs() -> dict:
    """name -> config, at nearly equal parameter count. aMLP drops one block to pay for its tiny attention (as the
    paper's aMLP-base has 36 blocks against gMLP-base's 48); BERT and ModernBERT have gMLP's width and depth, heads of
    64 and the FFN width that matches the count; the dropout variants are their model at another dropout."""
    gmlp = GMLPConfig(**GMLP_TINY)
    amlp = GMLPConfig(**{**GMLP_TINY, "num_hidden_layers": 7, "tiny_attention_size": 32})
    target = config_parameters(gmlp)
    configs = {
        "bert": bert_config(GMLP_TINY, target),
        "modernbert": modernbert_config(GMLP_TINY, target, **SPECIAL_TOKEN_IDS),
        "gmlp": gmlp,
        "amlp": amlp,
    }
    for variant, (name, dropout) in DROPOUT_VARIANTS.items():
        configs[variant] = with_dropout(configs[name], dropout)
    return configs


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
