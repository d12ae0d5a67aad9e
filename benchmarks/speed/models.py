"""The speed benchmark's models (gMLP, aMLP, BERT, ModernBERT and GPT-2 at equal parameter count), their FLOP counts
and the step functions the sections time."""

from typing import NamedTuple

import torch
from transformers import AutoModelForMaskedLM, BertForMaskedLM, BertModel, ModernBertConfig

from ..baseline import gmlp_at, label
from ..common import bert_config, fit_affine, parameters_of
from ..common import modernbert_config as common_modernbert_config

# The CPU tables' model: a 15M-parameter gMLP with the paper's Toeplitz W.
SMALL = {
    "vocab_size": 30522,
    "hidden_size": 256,
    "num_hidden_layers": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 128,
}
BATCH_SIZE = 8
TINY_ATTENTION_SIZE = 64  # aMLP-base's


def gmlp_config(ref: str | None = None, **overrides):
    """The benchmark's gMLP config (SMALL with `overrides`), from the model at git revision `ref` (None: the
    working tree)."""
    return gmlp_at(ref).GMLPConfig(**{**SMALL, **overrides})


def amlp_config(ref: str | None = None, **overrides):
    """aMLP with aMLP-base's tiny attention and the number of blocks that matches gMLP's parameter count (the
    paper's aMLP-base, too, has fewer blocks than gMLP-base)."""
    modeling = gmlp_at(ref)
    target = parameters_of(lambda: modeling.GMLPForMaskedLM(gmlp_config(ref, **overrides)))
    fields = {**SMALL, "tiny_attention_size": TINY_ATTENTION_SIZE, **overrides}

    def count(layers):
        return parameters_of(
            lambda: modeling.GMLPForMaskedLM(modeling.GMLPConfig(**fields | {"num_hidden_layers": layers}))
        )

    return modeling.GMLPConfig(**fields | {"num_hidden_layers": fit_affine(count, target, 1, 2)})


def matched_bert_config(shape: dict = SMALL, length: int | None = None, layers: int | None = None, **overrides):
    """BERT with the width and depth of gMLP of `shape` (heads of 64) and the FFN width that matches its count, with
    n = `length` and `layers` layers if given (the FFN width stays the one matched at `shape`)."""
    target = parameters_of(lambda: gmlp_at(None).GMLPForMaskedLM(gmlp_at(None).GMLPConfig(**shape)))
    config = bert_config(shape, target, **overrides)
    config.max_position_embeddings = length or config.max_position_embeddings
    config.num_hidden_layers = layers or config.num_hidden_layers
    return config


# The speed benchmarks' token ids (random inputs; ModernBERT's defaults name ids of its own 50k vocabulary).
MODERNBERT_TOKEN_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2}


def modernbert_config(like: dict, target_parameters: int, head_size: int = 64) -> ModernBertConfig:
    """`benchmarks.common.modernbert_config` with the speed benchmarks' token ids."""
    return common_modernbert_config(like, target_parameters, head_size, **MODERNBERT_TOKEN_IDS)


# ----------------------------------------------------------------------------------------------- losses


def hf_loss(model, input_ids, labels):
    return model(input_ids=input_ids, labels=labels).loss


def sparse_loss(model, input_ids, labels):
    """gMLP / aMLP with logits at the labelled positions only (`sparse_prediction=True`)."""
    return model(input_ids=input_ids, labels=labels, sparse_prediction=True).loss


def sparse_bert_loss(model: BertForMaskedLM, input_ids, labels):
    """BERT with the same labelled-positions-only vocabulary projection, to compare like with like."""
    hidden = model.bert(input_ids=input_ids).last_hidden_state
    labelled = labels != -100
    logits = model.cls(hidden[labelled])
    return torch.nn.functional.cross_entropy(logits, labels[labelled])


def labelled_positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat indices of the labelled positions of `labels` and their targets, found once per batch: indexing by
    them in the step needs no host sync, where a boolean mask waits for the GPU to count the positions."""
    flat = labels.flatten()
    index = flat.ne(-100).nonzero().squeeze(1)
    return index, flat[index]


def mlm_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The vocabulary logits of a masked-LM model's head (gMLP's, BERT's or ModernBERT's) for hidden states."""
    if hasattr(model, "lm_head"):
        return model.lm_head(hidden)
    if hasattr(model, "cls"):
        return model.cls(hidden)
    return model.decoder(model.head(hidden))


def labelled_loss(model, input_ids: torch.Tensor, index: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The MLM loss with logits at the labelled positions only (`labelled_positions`), the same for every model:
    the encoder, its hidden states at those positions, the model's head, cross-entropy in fp32 (Transformers'
    masked-LM loss)."""
    hidden = model.base_model(input_ids=input_ids).last_hidden_state
    logits = mlm_logits(model, hidden.flatten(0, 1).index_select(0, index))
    return torch.nn.functional.cross_entropy(logits.float(), targets)


class TrainingCase(NamedTuple):
    model: torch.nn.Module
    loss: object  # loss(model, input_ids, labels)
    description: str


def training_cases(refs: tuple[str | None, ...] = (None,), only: str | None = None) -> dict[str, TrainingCase]:
    """The MLM training table's cases by name, or just the case `only`: gMLP at each git revision in `refs` (None:
    the working tree) and BERT of equal parameter count. Both keep their default dropout (0.1)."""
    no_dropout = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    factories = {}
    for ref in refs:
        model = gmlp_at(ref).GMLPForMaskedLM
        factories[label("gmlp (full logits)", ref)] = (
            lambda model=model, ref=ref: model(gmlp_config(ref)),
            hf_loss,
            "GMLPForMaskedLM, default output",
        )
        factories[label("gmlp sparse_prediction", ref)] = (
            lambda model=model, ref=ref: model(gmlp_config(ref)),
            sparse_loss,
            "GMLPForMaskedLM, sparse_prediction=True",
        )

    def bert(**overrides):
        return AutoModelForMaskedLM.from_config(matched_bert_config(**overrides))

    factories |= {
        "BertForMaskedLM": (bert, hf_loss, "default dropout 0.1, full logits"),
        "BertForMaskedLM no dropout": (lambda: bert(**no_dropout), hf_loss, "dropout 0, full logits"),
        "BERT sparse logits": (bert, sparse_bert_loss, "BertModel + cls head at labelled positions only"),
    }
    if only is not None and only not in factories:
        raise ValueError(f"No training case {only!r}; the cases are {', '.join(factories)}.")
    cases = {}
    for name, (factory, loss, description) in factories.items():
        if only in (None, name):
            torch.manual_seed(0)
            cases[name] = TrainingCase(factory(), loss, description)
    return cases


def encoder(
    name: str, length: int, layers: int | None = None, ref: str | None = None, shape: dict = SMALL, **overrides
):
    """The encoder (no head) of `name` ("gmlp", "amlp", "BERT (sdpa)", or "amlp" / "BERT" with "(attention dropout
    0.1)") of `shape` at n = `length`, with `layers` blocks if given (aMLP: its matched count scaled alike);
    `overrides` go to gMLP's and aMLP's config. On the CPU, SDPA's fused kernel runs only with attention dropout
    off: with the default dropout (0.1) aMLP's tiny attention and BERT take the path that stores the attention
    probabilities, so each is measured both ways."""
    torch.manual_seed(0)
    dropout = 0.1 if name.endswith("(attention dropout 0.1)") else 0.0
    if name.startswith(("gmlp", "amlp")):
        fields = {**shape, "max_position_embeddings": length, "attention_probs_dropout_prob": dropout, **overrides}
        config = (gmlp_config if name == "gmlp" else amlp_config)(ref, **fields)
        if layers:
            config.num_hidden_layers = max(1, round(layers * config.num_hidden_layers / shape["num_hidden_layers"]))
        return gmlp_at(ref).GMLPModel(config)
    return BertModel(
        matched_bert_config(shape, length, layers, attention_probs_dropout_prob=dropout), add_pooling_layer=False
    )


# ------------------------------------------------------------------------------------------- FLOP counts

FLOP_FORMULAS = {
    "convention": "matmul FLOPs only (multiply-add = 2); training = 3 x forward (backward = 2 x forward); "
    "T = batch x length tokens, P = positions given to the vocabulary projection (T, or the labelled ones)",
    "gmlp layer": "2 T d f (U) + 2 T (f/2) d (V) + 2 T n (f/2) (spatial W, direct product)",
    "amlp tiny attention": "2 T d 3a (Q, K, V) + 4 T n a (scores, weighted sum) + 2 T a (f/2) (output)",
    "bert layer": "8 T d^2 (Q, K, V, O) + 4 T n d (scores, weighted sum) + 4 T d f_bert (FFN)",
    "modernbert layer": "8 T d^2 (Q, K, V, O) + 4 T n d (scores, weighted sum) + 6 T d f (GeGLU: 2f wide in, f out)",
    "mlm head": "2 P d^2 (transform) + 2 P d vocab",
}


def forward_flops(config, tokens: int, length: int, predicted: int | None = None) -> int:
    """Matmul FLOPs of a forward pass (FLOP_FORMULAS) of a gMLP / aMLP, BERT or ModernBERT config over `tokens` tokens
    of sequences of `length`: the encoder, and the MLM head over `predicted` positions unless that is None."""
    d = config.hidden_size
    if hasattr(config, "tiny_attention_size"):
        f, gate, a = config.intermediate_size, config.gate_size, config.tiny_attention_size
        layer = 2 * tokens * d * f + 2 * tokens * gate * d + 2 * tokens * length * gate
        layer += 6 * tokens * d * a + 4 * tokens * length * a + 2 * tokens * a * gate
    else:
        ffn = 6 if config.model_type == "modernbert" else 4
        layer = 8 * tokens * d * d + 4 * tokens * length * d + ffn * tokens * d * config.intermediate_size
    flops = config.num_hidden_layers * layer
    if predicted is not None:
        flops += 2 * predicted * d * d + 2 * predicted * d * config.vocab_size
    return flops


# ------------------------------------------------------------------------------------------- steps


def training_step_fn(model, loss_fn, input_ids, labels, compile_model: bool = False):
    """One optimizer step (forward, backward, fused AdamW) of `model` in training mode, as a function."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    forward = torch.compile(model) if compile_model else model

    def step():
        loss_fn(forward, input_ids, labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def encoder_step_fn(model, input_ids, training: bool):
    """A forward pass of an encoder: with a backward pass of its mean output in training, without autograd
    otherwise."""

    def step():
        if training:
            model.train()
            model(input_ids=input_ids).last_hidden_state.mean().backward()
            model.zero_grad(set_to_none=True)
        else:
            model.eval()
            with torch.no_grad():
                model(input_ids=input_ids)

    return step


PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def in_precision(step, precision: str, device="cpu"):
    """`step` run in fp32 or under bf16 autocast (what the Trainer's --bf16 does) on `device`."""
    device_type = torch.device(device).type

    def run():
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            return step()

    return run


def training_case_step(name: str, input_ids, labels):
    """The training step of the case `name` of `training_cases` (a name ending in " @REF": gMLP at that revision)."""
    ref = name.rsplit(" @", 1)[1] if " @" in name else None
    case = training_cases((ref,), only=name)[name]
    return training_step_fn(case.model.to(input_ids.device), case.loss, input_ids, labels)
