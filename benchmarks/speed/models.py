"""The speed benchmark's models (gMLP, aMLP and BERT at equal parameter count), their losses, FLOP counts and the
step functions the sections time."""

from functools import partial
from typing import NamedTuple

import torch
from transformers import AutoModelForMaskedLM, BertForMaskedLM, BertModel

from gmlp import GMLPConfig, GMLPForMaskedLM, GMLPModel

from ..common import bert_config, fit_affine, parameters_of

# The CPU tables' model: a 15M-parameter gMLP with the paper's Toeplitz W.
SMALL = {
    "vocab_size": 30522,
    "hidden_size": 256,
    "num_hidden_layers": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 128,
}
BATCH_SIZE = 8
PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def gmlp_config(**overrides) -> GMLPConfig:
    return GMLPConfig(**{**SMALL, **overrides})


def amlp_config(**overrides) -> GMLPConfig:
    """aMLP with aMLP-base's tiny attention (64) and the number of blocks that matches gMLP's parameter count."""
    target = parameters_of(lambda: GMLPForMaskedLM(gmlp_config(**overrides)))
    fields = {**SMALL, "tiny_attention_size": 64, **overrides}

    def count(layers):
        return parameters_of(lambda: GMLPForMaskedLM(GMLPConfig(**fields | {"num_hidden_layers": layers})))

    return GMLPConfig(**fields | {"num_hidden_layers": fit_affine(count, target, 1, 2)})


def matched_bert_config(shape: dict = SMALL, length: int | None = None, layers: int | None = None, **overrides):
    """BERT of gMLP's `shape` and parameter count, at n = `length` and with `layers` layers if given."""
    config = bert_config(shape, parameters_of(lambda: GMLPForMaskedLM(GMLPConfig(**shape))), **overrides)
    config.max_position_embeddings = length or config.max_position_embeddings
    config.num_hidden_layers = layers or config.num_hidden_layers
    return config


def hf_loss(model, input_ids, labels, **options):
    """The model's own MLM loss (`options`: gMLP's `sparse_prediction=True`, logits at the labelled positions only)."""
    return model(input_ids=input_ids, labels=labels, **options).loss


def labelled_positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat indices of the labelled positions and their targets (in a step, a boolean mask would sync the GPU)."""
    flat = labels.flatten()
    index = flat.ne(-100).nonzero().squeeze(1)
    return index, flat[index]


def labelled_loss(model, input_ids: torch.Tensor, index: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The MLM loss with logits at the labelled positions only, through each model's own head, in fp32."""
    hidden = model.base_model(input_ids=input_ids).last_hidden_state.flatten(0, 1).index_select(0, index)
    if hasattr(model, "lm_head"):
        logits = model.lm_head(hidden)
    elif hasattr(model, "cls"):
        logits = model.cls(hidden)
    else:
        logits = model.decoder(model.head(hidden))
    return torch.nn.functional.cross_entropy(logits.float(), targets)


def sparse_bert_loss(model: BertForMaskedLM, input_ids, labels):
    """BERT with the same labelled-positions-only vocabulary projection as gMLP's `sparse_prediction`."""
    return labelled_loss(model, input_ids, *labelled_positions(labels))


class TrainingCase(NamedTuple):
    model: torch.nn.Module
    loss: object  # loss(model, input_ids, labels)
    description: str


def training_cases(only: str | None = None) -> dict[str, TrainingCase]:
    """The MLM training table's cases by name (or just the case `only`)."""

    def bert(**overrides):
        return AutoModelForMaskedLM.from_config(matched_bert_config(**overrides))

    def gmlp():
        return GMLPForMaskedLM(gmlp_config())

    no_dropout_bert = partial(bert, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    sparse_loss = partial(hf_loss, sparse_prediction=True)
    factories = {
        "gmlp (full logits)": (gmlp, hf_loss, "GMLPForMaskedLM, default output"),
        "gmlp sparse_prediction": (gmlp, sparse_loss, "GMLPForMaskedLM, sparse_prediction=True"),
        "BertForMaskedLM": (bert, hf_loss, "default dropout 0.1, full logits"),
        "BertForMaskedLM no dropout": (no_dropout_bert, hf_loss, "dropout 0, full logits"),
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


def encoder(name: str, length: int, layers: int | None = None, shape: dict = SMALL, **overrides):
    """The encoder of "gmlp", "amlp" or "BERT (sdpa)" (aMLP and BERT also "(attention dropout 0.1)": then SDPA on the
    CPU stores the probabilities) of `shape` at n = `length`, with `layers` blocks if given (aMLP's scaled alike)."""
    torch.manual_seed(0)
    dropout = 0.1 if name.endswith("(attention dropout 0.1)") else 0.0
    if name.startswith("BERT"):
        config = matched_bert_config(shape, length, layers, attention_probs_dropout_prob=dropout)
        return BertModel(config, add_pooling_layer=False)
    fields = {**shape, "max_position_embeddings": length, "attention_probs_dropout_prob": dropout, **overrides}
    config = (gmlp_config if name == "gmlp" else amlp_config)(**fields)
    if layers:
        config.num_hidden_layers = max(1, round(layers * config.num_hidden_layers / shape["num_hidden_layers"]))
    return GMLPModel(config)


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
    """Matmul FLOPs (FLOP_FORMULAS) of a forward pass: the encoder, and the MLM head at `predicted` positions."""
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


def training_step_fn(model, loss_fn, input_ids, labels, *, optimizer=None, compile_model: bool = False):
    """One optimizer step (forward, backward, fused AdamW unless `optimizer` is given) of `model`, as a function."""
    model.train()
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    forward = torch.compile(model) if compile_model else model

    def step():
        loss_fn(forward, input_ids, labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def encoder_step_fn(model, input_ids, *, training: bool):
    """An encoder's forward pass: in training with the backward pass of its mean output, otherwise without autograd."""

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


def in_precision(step, precision: str, device="cpu"):
    """`step` run in fp32 or under bf16 autocast (what the Trainer's --bf16 does) on `device`."""

    def run():
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            return step()

    return run
