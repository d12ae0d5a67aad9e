"""Behaviour of the gMLP / aMLP models: the paper's block, sequence handling, heads and the Hugging Face contract."""

import copy
import json
from pathlib import Path

import pytest
import torch
from helpers import assert_close, differ, seeded
from huggingface_hub.errors import StrictDataclassError
from torch import nn
from torch.nn import functional as F

from gmlp import (
    GMLPConfig,
    GMLPForCausalLM,
    GMLPForMaskedLM,
    GMLPForMultipleChoice,
    GMLPForQuestionAnswering,
    GMLPForSequenceClassification,
    GMLPForTokenClassification,
    GMLPModel,
    GMLPVisionConfig,
    modeling_gmlp,
)
from gmlp.modeling_gmlp import GMLPSpatialGatingUnit, GMLPSpatialProjection, TokenLayout, drop_path

# Every test builds its models and inputs on the selected device (conftest.py's --device); those that take `dtype`
# also run in bf16 in a --dtype bf16 pass, comparing with bf16's tolerance.
pytestmark = pytest.mark.usefixtures("on_device")


def random_ids(batch=2, length=10, vocab=64, seed=0):
    return seeded(torch.randint, 5, vocab, (batch, length), seed=seed)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --- Configuration and presets -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, overrides, millions",
    [
        # Table 5 (full BERT setup, n = 512, 32k vocabulary).
        ("gmlp-base", {}, 130),
        ("gmlp-large", {}, 365),
        ("gmlp-xlarge", {}, 941),
        ("amlp-base", {}, 109),
        ("amlp-large", {}, 316),
        # Table 4: gmlp-base at depths 18 / 36 / 72 / 144 with n = 128.
        ("gmlp-base", {"num_hidden_layers": 18, "max_position_embeddings": 128}, 59),
        ("gmlp-base", {"num_hidden_layers": 36, "max_position_embeddings": 128}, 102),
        ("gmlp-base", {"num_hidden_layers": 72, "max_position_embeddings": 128}, 187),
        ("gmlp-base", {"num_hidden_layers": 144, "max_position_embeddings": 128}, 357),
    ],
)
def test_preset_parameter_counts_reproduce_the_paper(name, overrides, millions):
    config = GMLPConfig.from_preset(name, **overrides)
    with torch.device("meta"):
        model = GMLPModel(config)
    assert round(model.num_parameters() / 1e6) == millions
    assert config.spatial_weight_type == "toeplitz"


def test_from_preset_applies_overrides_and_rejects_unknown_names():
    config = GMLPConfig.from_preset("gmlp-tiny", num_hidden_layers=3, sgu_variant="additive")
    assert (config.num_hidden_layers, config.sgu_variant, config.hidden_size) == (3, "additive", 128)
    with pytest.raises(ValueError, match="Unknown gMLP preset 'gmlp-huge'.*gmlp-base"):
        GMLPConfig.from_preset("gmlp-huge")


def test_from_preset_refuses_a_misspelled_override_naming_the_nearest_field():
    with pytest.raises(ValueError, match=r"Unknown override 'hiden_size' .* did you mean 'hidden_size'\?"):
        GMLPConfig.from_preset("gmlp-tiny", hiden_size=64, num_hiden_layers=2)
    with pytest.raises(ValueError, match=r"Unknown override 'patchsize' .* did you mean 'patch_size'\?"):
        GMLPVisionConfig.from_preset("gmlp-tiny", patchsize=4)
    # Transformers' own keywords and the attribute map's names are overrides like any field.
    config = GMLPConfig.from_preset("gmlp-tiny", num_labels=3, attn_implementation="eager", head_dim=8)
    assert (config.num_labels, config._attn_implementation, config.tiny_attention_size) == (3, "eager", 8)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"intermediate_size": 47}, "must be even"),
        ({"num_sgu_heads": 5}, "must divide"),
        ({"max_position_embeddings": 0}, "spatial size n"),
        ({"sgu_variant": "quadratic"}, "Unknown `sgu_variant`"),
        ({"spatial_weight_type": "circulant"}, "Unknown `spatial_weight_type`"),
        ({"tiny_attention_size": -1}, "tiny_attention_size"),
        ({"drop_path_rate": 1.0}, "drop_path_rate"),
    ],
)
def test_invalid_config_values_fail_at_construction(tiny_config, overrides, message):
    with pytest.raises((ValueError, StrictDataclassError), match=message):
        tiny_config(**overrides)


def test_config_round_trips_through_json(tiny_config, tmp_path):
    config = tiny_config(tiny_attention_size=8, sgu_variant="additive", num_sgu_heads=2, is_decoder=True)
    config.save_pretrained(tmp_path)
    loaded = GMLPConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == config.to_dict()
    assert loaded.auto_map["AutoModelForMaskedLM"] == "modeling_gmlp.GMLPForMaskedLM"


# --- The spatial projection -------------------------------------------------------------------------------------


@pytest.fixture
def spatial_projection(tiny_config):
    """A factory of spatial projections of tiny configs, with random (far from initial) W and b."""

    def make(**overrides) -> GMLPSpatialProjection:
        projection = GMLPSpatialProjection(tiny_config(**overrides))
        with torch.no_grad():
            projection.weight.normal_()
            projection.bias.normal_()
        return projection

    return make


def test_toeplitz_matrix_is_toeplitz_and_its_leading_block_is_shared(spatial_projection):
    projection = spatial_projection()
    n = projection.n
    full = projection.matrix(n)[0]
    w = projection.weight[0]
    for i in range(n):
        for j in range(n):
            assert full[i, j] == w[i - j + n - 1]
    assert torch.equal(projection.matrix(5)[0], full[:5, :5])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [1, 2])
def test_toeplitz_projection_equals_the_equivalent_dense_matrix(spatial_projection, causal, heads, dtype):
    toeplitz = spatial_projection(is_decoder=causal, num_sgu_heads=heads).to(dtype)
    dense = spatial_projection(is_decoder=causal, num_sgu_heads=heads, spatial_weight_type="dense").to(dtype)
    with torch.no_grad():
        dense.weight.copy_(toeplitz.matrix(toeplitz.n))
        dense.bias.copy_(toeplitz.bias)
    gate = torch.randn(3, 11, 24, dtype=dtype)
    assert_close(toeplitz(gate), dense(gate))


def test_shorter_inputs_use_the_leading_block_of_w_and_b(spatial_projection, dtype):
    projection = spatial_projection(spatial_weight_type="dense", num_sgu_heads=2).to(dtype)
    gate = torch.randn(2, 7, 24, dtype=dtype)
    expected = []
    for head, channels in enumerate(gate.split(12, dim=-1)):
        weight, bias = projection.weight[head, :7, :7], projection.bias[head, :7]
        expected.append(torch.einsum("ij,bjc->bic", weight, channels) + bias[:, None])
    assert_close(projection(gate), torch.cat(expected, dim=-1))


def test_causal_dense_projection_is_lower_triangular(spatial_projection):
    projection = spatial_projection(spatial_weight_type="dense", is_decoder=True)
    matrix = projection.matrix(9)[0]
    assert torch.equal(matrix, matrix.tril())
    assert torch.equal(matrix, projection.weight[0, :9, :9].tril())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("length", [1, 5, 16])
def test_fft_toeplitz_product_agrees_with_the_direct_one(spatial_projection, causal, length, dtype):
    projection = spatial_projection(is_decoder=causal, num_sgu_heads=2).to(dtype)
    gate = torch.randn(2, length, 24, dtype=dtype, requires_grad=True)
    direct = projection(gate)
    direct_grads = torch.autograd.grad(direct.square().sum(), [gate, projection.weight, projection.bias])
    projection.config_fft_min_length = 1  # every length now takes the FFT path
    via_fft = projection(gate)
    fft_grads = torch.autograd.grad(via_fft.square().sum(), [gate, projection.weight, projection.bias])
    assert_close(via_fft, direct, atol=1e-4, rtol=1e-4)
    for fft_grad, direct_grad in zip(fft_grads, direct_grads):
        assert_close(fft_grad, direct_grad, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_a_float64_projection_stays_in_float64_on_the_fft_path(spatial_projection, causal):
    projection = spatial_projection(is_decoder=causal).double()
    gate = torch.randn(2, 9, 24, dtype=torch.float64)
    direct = projection(gate)
    projection.config_fft_min_length = 1
    via_fft = projection(gate)
    assert via_fft.dtype == torch.float64
    assert_close(via_fft, direct, atol=1e-12, rtol=1e-12)  # float32's FFT would be ~1e-7 away


def backward_nodes(tensor: torch.Tensor) -> set[str]:
    """The names of the autograd nodes behind `tensor`."""
    seen, stack = set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(next_node for next_node, _ in node.next_functions)
    return {type(node).__name__ for node in seen}


def test_the_toeplitz_block_sums_its_gradient_in_a_fixed_order(spatial_projection):
    """The shared Toeplitz block's backward pass adds each diagonal with the same sum every time (a gather's
    index_put adds with atomics on a GPU), and equals the gather's gradient."""
    projection = spatial_projection(max_position_embeddings=32)
    upstream = torch.randn(1, 32, 32)

    def gradient(block):
        return torch.autograd.grad(block, projection.weight, upstream.expand_as(block))[0]

    layout = TokenLayout.sequential(32, upstream.device)
    block = projection.weight_at(layout)
    assert "IndexBackward0" not in backward_nodes(block)  # the gather whose backward is an index_put
    first, second = gradient(block), gradient(projection.weight_at(layout))
    assert torch.equal(first, second)
    positions = torch.arange(32)
    gathered = projection.weight[:, positions[:, None] - positions[None, :] + 31][None]
    assert_close(first, gradient(gathered), atol=1e-5, rtol=1e-5)


def test_fft_path_is_chosen_by_length_in_eager_mode_and_by_n_when_compiled(spatial_projection, monkeypatch):
    """Eager: a Toeplitz W takes the FFT for tokens in order from spatial_fft_min_length tokens on. Compiled (or
    exported): from the model's n, at every length, so that one graph serves every length. Positions out of order
    always take the direct product."""
    calls = []
    original = GMLPSpatialProjection.fft_product
    monkeypatch.setattr(
        GMLPSpatialProjection, "fft_product", lambda self, heads: calls.append(heads.shape[2]) or original(self, heads)
    )
    projection = spatial_projection(max_position_embeddings=64, spatial_fft_min_length=32)
    projection(torch.randn(1, 31, 24))
    projection(torch.randn(1, 32, 24))
    gapped = torch.arange(0, 40, 2)[None]
    projection(torch.randn(1, 20, 24), TokenLayout(query=gapped, key=gapped))
    assert calls == [32]
    monkeypatch.setattr("gmlp.modeling_gmlp.is_torchdynamo_compiling", lambda: True)
    projection(torch.randn(1, 3, 24))
    spatial_projection(max_position_embeddings=31, spatial_fft_min_length=32)(torch.randn(1, 3, 24))
    assert calls == [32, 3]


# --- The spatial gating unit, the block and its init ---------------------------------------------------------


def test_auto_takes_the_gating_path_that_its_record_measured_fastest():
    """`AUTO_SGU_KERNEL`, the one place that decides `sgu_kernel="auto"`: each entry's path is the faster of gMLP's
    two rows in the record it names, and an entry without a record takes the PyTorch path."""
    root = Path(__file__).resolve().parents[2]
    for key, (path, record) in modeling_gmlp.AUTO_SGU_KERNEL.items():
        if record is None:
            assert path == "torch", key
            continue
        file, section, mode = record
        rows = json.loads((root / file).read_text())["gpu"][section]
        speed = {row["model"]: row["tokens_per_second"] for row in rows if row["mode"] == mode}
        assert path == max(("torch", "triton"), key=lambda unit: speed[f"gmlp ({unit})"]), (key, speed)


def test_auto_follows_the_table_by_device_and_mode(tiny_config, monkeypatch):
    """The unit reads the table with its device type, training (and grad) and compilation: a table that picked the
    Triton unit for CPU training would run it there and nowhere else; the shipped table never picks it on a CPU."""
    sgu = GMLPSpatialGatingUnit(tiny_config(sgu_kernel="auto"))
    kernel = object()
    monkeypatch.setattr(modeling_gmlp, "load_sgu_kernel", lambda: kernel)
    projected, layout = torch.randn(1, 6, 48), TokenLayout.sequential(6, torch.device("cpu"))
    assert sgu.train().kernel_for(projected, layout, None) is None
    monkeypatch.setitem(modeling_gmlp.AUTO_SGU_KERNEL, ("cpu", True, False), ("triton", None))
    assert sgu.train().kernel_for(projected, layout, None) is kernel
    with torch.no_grad():
        assert sgu.kernel_for(projected, layout, None) is None
    assert sgu.eval().kernel_for(projected, layout, None) is None
    monkeypatch.setattr(modeling_gmlp, "is_torchdynamo_compiling", lambda: True)
    assert sgu.train().kernel_for(projected, layout, None) is None


@pytest.mark.parametrize("variant", ["multiplicative_split", "multiplicative", "additive", "linear"])
def test_sgu_variants_compute_table_3s_formulas(tiny_config, variant, dtype):
    config = tiny_config(sgu_variant=variant)
    sgu = GMLPSpatialGatingUnit(config)
    with torch.no_grad():
        sgu.spatial_proj.weight.normal_()
        sgu.spatial_proj.bias.normal_()
        sgu.gate_norm.weight.normal_()
    sgu.to(dtype)
    projected = torch.randn(2, 6, config.intermediate_size, dtype=dtype)
    z = F.gelu(projected)

    def f(gate):
        return sgu.spatial_proj(F.layer_norm(gate, gate.shape[-1:], sgu.gate_norm.weight, sgu.gate_norm.bias, 1e-5))

    expected = {
        "multiplicative_split": lambda: z[..., :24] * f(z[..., 24:]),
        "multiplicative": lambda: z * f(z),
        "additive": lambda: z + f(z),
        "linear": lambda: f(z),
    }[variant]()
    output = sgu(projected, layout=TokenLayout.sequential(6, projected.device))
    assert_close(output, expected)
    assert output.shape[-1] == config.gate_size


@pytest.mark.parametrize("model_class", [GMLPForMaskedLM, GMLPModel])
def test_init_makes_every_block_a_plain_ffn(model_class):
    config = GMLPConfig.from_preset("gmlp-tiny")
    model = model_class(config)
    bound = config.spatial_init_eps / config.max_position_embeddings
    projections = [module for module in model.modules() if isinstance(module, GMLPSpatialProjection)]
    assert len(projections) == config.num_hidden_layers
    for projection in projections:
        assert projection.weight.abs().max() <= bound
        assert projection.weight.std() > bound / 10  # uniform, not zero
        assert torch.equal(projection.bias, torch.ones_like(projection.bias))


def test_at_init_the_gate_is_nearly_one_so_tokens_do_not_mix():
    config = GMLPConfig.from_preset("gmlp-tiny", hidden_dropout_prob=0.0)
    model = GMLPModel(config).eval()
    ids = random_ids(1, 12, config.vocab_size)
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % config.vocab_size
    with torch.no_grad():
        first = model(ids).last_hidden_state[0, :-1]
        second = model(changed).last_hidden_state[0, :-1]
    # A token influences the others only through W, which starts at +-1e-3 / n.
    assert (first - second).abs().max() < 1e-3


def test_partial_checkpoint_and_meta_init_give_the_papers_spatial_init(tmp_path):
    config = GMLPConfig.from_preset("gmlp-tiny")
    GMLPModel(config).save_pretrained(tmp_path / "base")
    # Loading a base checkpoint into a head model initialises only the head; the spatial weights are loaded.
    model = GMLPForSequenceClassification.from_pretrained(tmp_path / "base", num_labels=3)
    reference = GMLPModel.from_pretrained(tmp_path / "base")
    torch.testing.assert_close(
        model.gmlp.encoder.layer[0].sgu.spatial_proj.weight, reference.encoder.layer[0].sgu.spatial_proj.weight
    )
    # A checkpoint without the spatial weights gets the paper's init for them.
    from safetensors.torch import load_file, save_file

    state = load_file(tmp_path / "base" / "model.safetensors")
    state = {key: value for key, value in state.items() if "spatial_proj" not in key}
    save_file(state, tmp_path / "base" / "model.safetensors", metadata={"format": "pt"})
    partial = GMLPModel.from_pretrained(tmp_path / "base")
    bound = config.spatial_init_eps / config.max_position_embeddings
    for layer in partial.encoder.layer:
        assert layer.sgu.spatial_proj.weight.abs().max() <= bound
        assert torch.equal(layer.sgu.spatial_proj.bias, torch.ones_like(layer.sgu.spatial_proj.bias))


def test_drop_path_drops_whole_samples_and_rescales():
    hidden = torch.ones(4000, 3, 2)
    dropped = drop_path(hidden, 0.25, training=True)
    per_sample = dropped[:, 0, 0]
    assert set(per_sample.unique().tolist()) == {0.0, torch.tensor(1 / 0.75).item()}
    assert torch.equal(dropped, per_sample[:, None, None].expand_as(dropped))
    assert abs(dropped.mean().item() - 1.0) < 0.05
    assert torch.equal(drop_path(hidden, 0.25, training=False), hidden)


# --- Sequence handling ---------------------------------------------------------------------------------------


def padded(rows: list[torch.Tensor], width: int, side: str, pad_token_id: int = 0):
    """Rows of ids padded on `side` to `width`: ids, attention mask and each row's real slice."""
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    slices = []
    for index, row in enumerate(rows):
        start = width - len(row) if side == "left" else 0
        ids[index, start : start + len(row)], mask[index, start : start + len(row)] = row, 1
        slices.append(slice(start, start + len(row)))
    return ids, mask, slices


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "causal"])
@pytest.mark.parametrize("tiny_attention_size", [0, 8])
@pytest.mark.parametrize("weight_type", ["toeplitz", "dense"])
def test_padding_on_either_side_does_not_change_real_positions(
    tiny_config, side, causal, tiny_attention_size, weight_type, dtype
):
    """Each row's positions start at its first real token: a padded row, in a batch or alone, gives the unpadded row's
    logits on either side, W and b drawn far from their init."""
    config = tiny_config(tiny_attention_size=tiny_attention_size, spatial_weight_type=weight_type, is_decoder=causal)
    model = (GMLPForCausalLM if causal else GMLPForMaskedLM)(config).eval().to(dtype)
    with torch.no_grad():
        for layer in model.gmlp.encoder.layer:
            layer.sgu.spatial_proj.weight.normal_()
            layer.sgu.spatial_proj.bias.normal_()
    ids = random_ids(2, 12, config.vocab_size)
    rows = [ids[0, :7], ids[1]]
    with torch.no_grad():
        for batch in (rows, rows[:1]):  # two rows, and one row padded on its own
            padded_ids, mask, slices = padded(batch, 14, side, config.pad_token_id)
            logits = model(padded_ids, attention_mask=mask).logits
            for row, part, got in zip(batch, slices, logits):
                assert_close(got[part], model(row[None]).logits[0], atol=1e-5, rtol=1e-5)
    if causal and side == "right":
        return  # later padding never reaches a causal row's tokens
    # Without the mask the padding does leak into real positions: the mask is what makes them equal.
    padded_ids, _, slices = padded(rows, 14, side, config.pad_token_id)
    with torch.no_grad():
        unmasked = model(padded_ids).logits[0, slices[0]]
        alone = model(rows[0][None]).logits[0]
    assert differ(unmasked, alone, atol=1e-5)


@pytest.mark.parametrize("tiny_attention_size", [0, 8])
@pytest.mark.parametrize("weight_type", ["toeplitz", "dense"])
def test_causal_outputs_do_not_depend_on_later_tokens(tiny_config, tiny_attention_size, weight_type, dtype):
    config = tiny_config(is_decoder=True, tiny_attention_size=tiny_attention_size, spatial_weight_type=weight_type)
    model = GMLPForCausalLM(config).eval().to(dtype)
    ids = random_ids(1, 12, config.vocab_size)
    changed = ids.clone()
    changed[0, 6:] = random_ids(1, 6, config.vocab_size, seed=1)
    with torch.no_grad():
        first, second = model(ids).logits, model(changed).logits
    assert_close(first[0, :6], second[0, :6])
    assert differ(first[0, 6:], second[0, 6:])


def test_bidirectional_outputs_do_depend_on_later_tokens(tiny_config):
    model = GMLPModel(tiny_config()).eval()
    ids = random_ids(1, 12)
    changed = ids.clone()
    changed[0, -1] = 5 if ids[0, -1] != 5 else 6
    with torch.no_grad():
        assert not torch.allclose(model(ids).last_hidden_state[0, 0], model(changed).last_hidden_state[0, 0])


def test_too_long_input_names_both_lengths(tiny_config):
    model = GMLPModel(tiny_config())
    with pytest.raises(ValueError, match=r"length 17 exceeds .* maximum sequence length 16"):
        model(random_ids(1, 17))


def test_mismatched_attention_mask_is_a_clear_error(tiny_config):
    model = GMLPModel(tiny_config())
    with pytest.raises(ValueError, match="attention_mask"):
        model(random_ids(2, 8), attention_mask=torch.ones(2, 9, dtype=torch.long))


def test_input_ids_and_inputs_embeds_together_are_refused(tiny_config):
    # That the two give the same outputs, and batched rows those of each row alone, Transformers' common tests check
    # (test_inputs_embeds_matches_input_ids, test_batching_equivalence).
    model = GMLPModel(tiny_config(tiny_attention_size=8)).eval()
    ids = random_ids(3, 9)
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        model(ids, inputs_embeds=model.get_input_embeddings()(ids))


def test_token_type_ids_change_the_output(tiny_config):
    model = GMLPModel(tiny_config()).eval()
    ids = random_ids(1, 8)
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        assert not torch.allclose(model(ids).last_hidden_state, model(ids, token_type_ids=types).last_hidden_state)


# --- Outputs, heads and losses -------------------------------------------------------------------------------


def test_hidden_states_attentions_and_tuple_outputs(tiny_config):
    # The attention weights come from the eager implementation (SDPA's fused kernels do not return them, as for BERT).
    config = tiny_config(tiny_attention_size=8, num_hidden_layers=3, attn_implementation="eager")
    model = GMLPModel(config).eval()
    ids = random_ids(2, 9)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    with torch.no_grad():
        outputs = model(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        as_tuple = model(ids, attention_mask=mask, return_dict=False)
    assert len(outputs.hidden_states) == config.num_hidden_layers + 1
    torch.testing.assert_close(outputs.hidden_states[0], model.embeddings(ids))
    assert len(outputs.attentions) == config.num_hidden_layers
    for weights in outputs.attentions:
        assert weights.shape == (2, 1, 9, 9)  # (batch, heads, queries, keys), as every Transformers model
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 1, 9))
        assert weights[1, :, :, 6:].abs().max() == 0  # padded keys get no weight
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], outputs.last_hidden_state)
    assert len(as_tuple) == 1  # only last_hidden_state: the base model has no pooler


def no_labels(ids: torch.Tensor) -> dict:
    return {"labels": torch.full_like(ids, -100)}


def no_classes(ids: torch.Tensor) -> dict:
    return {"labels": ids.new_full((len(ids),), -100)}


def no_spans(ids: torch.Tensor) -> dict:
    """Span positions past the row's end, which Transformers' span loss ignores."""
    return {
        "start_positions": ids.new_full((len(ids),), ids.shape[-1]),
        "end_positions": ids.new_full((len(ids),), 99),
    }


@pytest.mark.parametrize(
    "head, ignored, extra",
    [
        (GMLPForMaskedLM, no_labels, {}),
        (GMLPForMaskedLM, no_labels, {"sparse_prediction": True}),
        (GMLPForCausalLM, no_labels, {}),
        (GMLPForTokenClassification, no_labels, {}),
        (GMLPForSequenceClassification, no_classes, {}),
        (GMLPForMultipleChoice, no_classes, {}),
        (GMLPForQuestionAnswering, no_spans, {}),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_all_ignored_labels_give_a_zero_loss_with_zero_gradients(tiny_config, head, ignored, extra):
    """Every head: a batch whose labels are all ignored has loss 0 (not a mean over nothing, NaN) and backward
    gives every parameter a zero gradient; one label that counts gives the ordinary loss again."""
    model = head(tiny_config(is_decoder=head is GMLPForCausalLM, num_labels=3)).train()
    ids = random_ids(2, 6)[:, None].expand(2, 3, 6) if head is GMLPForMultipleChoice else random_ids(2, 6)
    labels = ignored(ids)
    loss = model(ids, **labels, **extra).loss
    loss.backward()
    assert loss.item() == 0.0
    gradients = [param.grad for param in model.parameters() if param.grad is not None]
    assert gradients and all(bool((gradient == 0).all()) for gradient in gradients)
    counted = {name: value.clone() for name, value in labels.items()}
    for value in counted.values():
        value.view(-1)[-1] = 1
    loss = model(ids, **counted, **extra).loss
    assert torch.isfinite(loss) and loss.item() > 0


def test_gmlp_without_tiny_attention_returns_no_attentions(tiny_config):
    outputs = GMLPModel(tiny_config())(random_ids(1, 5), output_attentions=True)
    assert not outputs.attentions


def test_masked_lm_head_is_tied_and_its_loss_is_cross_entropy(tiny_config):
    config = tiny_config()
    model = GMLPForMaskedLM(config).eval()
    assert model.lm_head.decoder.weight is model.gmlp.embeddings.word_embeddings.weight
    ids = random_ids(2, 8)
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    outputs = model(ids, labels=labels)
    assert outputs.logits.shape == (2, 8, config.vocab_size)
    torch.testing.assert_close(outputs.loss, F.cross_entropy(outputs.logits[:, 2], ids[:, 2]))


@pytest.mark.cpu_only(
    "the model checks labels on the CPU only, by design (no synchronisation per step); on every device the scripts' "
    "collator checks them: tests/model/test_devices.py"
)
def test_label_out_of_range_is_a_clear_error(tiny_config):
    model = GMLPForMaskedLM(tiny_config())
    with pytest.raises(ValueError, match=r"labels must be in \[0, 63\].*got 64"):
        model(random_ids(1, 4), labels=torch.tensor([[1, 2, 64, -100]]))
    classifier = GMLPForSequenceClassification(tiny_config(num_labels=3))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 2\].*got 3"):
        classifier(random_ids(2, 4), labels=torch.tensor([0, 3]))


def test_sequence_classification_losses_follow_bert(tiny_config):
    ids = random_ids(4, 6)
    regression = GMLPForSequenceClassification(tiny_config(num_labels=1)).eval()
    targets = torch.tensor([0.5, 1.0, 2.0, 3.5])
    out = regression(ids, labels=targets)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), targets))
    assert regression.config.problem_type == "regression"

    single = GMLPForSequenceClassification(tiny_config(num_labels=3)).eval()
    classes = torch.tensor([0, 2, 1, 2])
    out = single(ids, labels=classes)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, classes))

    multi = GMLPForSequenceClassification(tiny_config(num_labels=3)).eval()
    multi_hot = torch.tensor([[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]], dtype=torch.float)
    out = multi(ids, labels=multi_hot)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, multi_hot))
    assert multi.config.problem_type == "multi_label_classification"


def test_token_classification_question_answering_and_multiple_choice_heads(tiny_config):
    ids = random_ids(2, 8)
    tokens = GMLPForTokenClassification(tiny_config(num_labels=5)).eval()
    labels = torch.randint(0, 5, (2, 8))
    out = tokens(ids, labels=labels)
    assert out.logits.shape == (2, 8, 5)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits.reshape(-1, 5), labels.reshape(-1)))

    qa = GMLPForQuestionAnswering(tiny_config()).eval()
    start, end = torch.tensor([1, 3]), torch.tensor([2, 6])
    out = qa(ids, start_positions=start, end_positions=end)
    assert out.start_logits.shape == out.end_logits.shape == (2, 8)
    expected = (F.cross_entropy(out.start_logits, start) + F.cross_entropy(out.end_logits, end)) / 2
    torch.testing.assert_close(out.loss, expected)

    choice = GMLPForMultipleChoice(tiny_config()).eval()
    choices = random_ids(6, 8).view(2, 3, 8)
    out = choice(choices, labels=torch.tensor([0, 2]))
    assert out.logits.shape == (2, 3)
    with torch.no_grad():
        single = choice(choices[1:, 1:2]).logits
    torch.testing.assert_close(single[0, 0], out.logits[1, 1])


def test_every_parameter_of_every_head_receives_a_gradient(tiny_config):
    config = tiny_config(tiny_attention_size=8, num_labels=3)
    ids = random_ids(2, 8)
    cases = [
        (GMLPForMaskedLM, {"labels": ids}),
        (GMLPForSequenceClassification, {"labels": torch.tensor([0, 2])}),
        (GMLPForTokenClassification, {"labels": torch.randint(0, 3, (2, 8))}),
        (GMLPForQuestionAnswering, {"start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([3, 4])}),
    ]
    for model_class, labels in cases:
        model = model_class(config)
        model(ids, **labels).loss.backward()
        missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
        assert missing == [], (model_class, missing)


# --- Training features ---------------------------------------------------------------------------------------


def test_gradient_checkpointing_gives_the_same_gradients(tiny_config, dtype):
    config = tiny_config(tiny_attention_size=8)
    ids = random_ids(2, 10)
    model = GMLPForMaskedLM(config).train().to(dtype)
    model(ids, labels=ids).loss.backward()
    reference = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    model.gradient_checkpointing_enable()
    assert model.is_gradient_checkpointing
    model(ids, labels=ids).loss.backward()
    for name, p in model.named_parameters():
        assert_close(p.grad, reference[name], msg=name)


def test_resize_token_embeddings_keeps_the_decoder_tied(tiny_config):
    model = GMLPForMaskedLM(tiny_config())
    old = model.get_input_embeddings().weight[:64].clone()
    model.resize_token_embeddings(80)
    assert model.config.vocab_size == 80
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    torch.testing.assert_close(model.get_input_embeddings().weight[:64], old)
    ids = torch.tensor([[70, 75, 79]])
    assert model(ids, labels=ids).logits.shape == (1, 3, 80)


@pytest.mark.bf16
def test_bf16_autocast_is_close_to_fp32(tiny_config, device):
    model = GMLPForMaskedLM(tiny_config(tiny_attention_size=8)).eval()
    ids = random_ids(2, 10)
    with torch.no_grad():
        full = model(ids).logits
        with torch.autocast(device.type, dtype=torch.bfloat16):
            low = model(ids).logits
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), full, atol=0.1, rtol=0.05)


@pytest.mark.bf16
def test_bf16_autocast_fft_path_is_close_to_fp32(spatial_projection, device):
    projection = spatial_projection(spatial_fft_min_length=1)
    gate = torch.randn(2, 16, 24)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        low = projection(gate.bfloat16())
    torch.testing.assert_close(low.float(), projection(gate), atol=0.2, rtol=0.05)


def test_causal_lm_loss_is_shifted_and_needs_a_causal_config(tiny_config):
    model = GMLPForCausalLM(tiny_config(is_decoder=True)).eval()
    ids = random_ids(2, 7)
    out = model(ids, labels=ids)
    expected = F.cross_entropy(out.logits[:, :-1].reshape(-1, 64), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)
    with pytest.raises(ValueError, match="is_decoder=True"):
        GMLPForCausalLM(tiny_config())


def test_torch_compile_matches_eager(tiny_config, dtype):
    model = GMLPForMaskedLM(tiny_config(tiny_attention_size=8)).eval().to(dtype)
    ids = random_ids(2, 10)
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad():
        assert_close(compiled(ids).logits, model(ids).logits)


def test_torch_compile_sparse_prediction_training_matches_eager(tiny_config):
    """The compiled MLM training step (sparse_prediction) gives eager's loss and gradients; the only graph break is
    the data-dependent selection of the labelled positions (the labels check is skipped while compiling)."""
    torch.manual_seed(0)
    model = GMLPForMaskedLM(tiny_config()).train()
    ids = random_ids(2, 10)
    labels = torch.full_like(ids, -100)
    labels[:, ::3] = ids[:, ::3]
    explanation = torch._dynamo.explain(model)(input_ids=ids, labels=labels, sparse_prediction=True)
    assert explanation.graph_break_count == 2  # sequence_output[labelled] and labels[labelled]
    assert all("check_labels" not in str(reason.user_stack) for reason in explanation.break_reasons)
    eager_loss = model(input_ids=ids, labels=labels, sparse_prediction=True).loss
    eager_loss.backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    compiled_loss = torch.compile(model, backend="aot_eager")(
        input_ids=ids, labels=labels, sparse_prediction=True
    ).loss
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss)
    for eager_grad, param in zip(eager_grads, model.parameters()):
        torch.testing.assert_close(param.grad, eager_grad)


def test_stochastic_depth_is_active_only_in_training(tiny_config):
    model = GMLPModel(tiny_config(drop_path_rate=0.5, num_hidden_layers=6))
    ids = random_ids(4, 8)
    model.train()
    first, second = model(ids).last_hidden_state, model(ids).last_hidden_state
    assert not torch.allclose(first, second)
    model.eval()
    torch.testing.assert_close(model(ids).last_hidden_state, model(ids).last_hidden_state)


def test_modules_hold_no_unregistered_tensors(tiny_config):
    model = GMLPForMaskedLM(tiny_config(tiny_attention_size=8))
    registered = {id(t) for t in list(model.parameters()) + list(model.buffers())}
    for module in model.modules():
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                assert id(value) in registered, f"{type(module).__name__}.{name} is a tensor but not a buffer"


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_sentence_heads_pool_as_configured_and_ignore_padding(tiny_config, side, pooling, dtype):
    """`classifier_pooling`: the first real token, or the mean over real tokens; a sequence padded on either side is
    classified as the unpadded one, and multiple choice scores each choice with the same head."""
    torch.manual_seed(0)
    config = tiny_config(classifier_pooling=pooling, num_labels=3)
    model = GMLPForSequenceClassification(config).eval().to(dtype)
    ids = random_ids(2, 9)
    ids, mask, slices = padded([ids[0], ids[1, :5]], 9, side)
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        alone = model(ids[1:, slices[1]]).logits
        hidden = model.gmlp(ids, attention_mask=mask).last_hidden_state
    real = [hidden[row, part] for row, part in enumerate(slices)]
    pooled = torch.stack([tokens[0] if pooling == "first" else tokens.mean(0) for tokens in real])
    head = model.classifier
    assert_close(logits, head.out_proj(torch.tanh(head.dense(pooled))))
    assert_close(logits[1:], alone, rtol=1e-5, atol=1e-5)

    choices = GMLPForMultipleChoice(config).eval().to(dtype)
    with torch.no_grad():
        scores = choices(ids[None], attention_mask=mask[None]).logits
        each = [choices(ids[None, i, slices[i]][None]).logits for i in range(2)]
    assert scores.shape == (1, 2)
    assert_close(scores, torch.cat(each, dim=1), rtol=1e-5, atol=1e-5)


def test_unknown_classifier_pooling_is_refused(tiny_config):
    with pytest.raises(Exception, match="classifier_pooling.*first, mean"):
        tiny_config(classifier_pooling="max")


def test_sentence_heads_own_every_weight_they_add(tiny_config, tmp_path):
    """Loaded from an MLM checkpoint, a classification model's only new weights are its head's, all under
    `classifier.`: a checkpoint or an adapter that saves the head reproduces the model exactly."""
    GMLPForMaskedLM(tiny_config()).save_pretrained(tmp_path)
    for head_class in (GMLPForSequenceClassification, GMLPForMultipleChoice):
        _, info = head_class.from_pretrained(tmp_path, num_labels=2, output_loading_info=True)
        assert info["missing_keys"] and all(key.startswith("classifier.") for key in info["missing_keys"])
        assert {key.split(".")[1] for key in info["missing_keys"]} == {"dense", "out_proj"}


# --- aMLP's tiny attention through Transformers' attention implementations ----------------------------------------


def with_attention(config, implementation: str, model_class=GMLPForMaskedLM):
    torch.manual_seed(0)
    config = copy.deepcopy(config)
    config._attn_implementation = implementation
    return model_class(config).eval()


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "causal"])
def test_eager_and_sdpa_tiny_attention_agree_with_padding(tiny_config, causal, dtype):
    """The same weights give the same outputs (fp32, tight) with the written-out attention and with SDPA's kernels,
    with right padding (encoder) or left padding (causal), and SDPA's is the default."""
    model_class = GMLPForCausalLM if causal else GMLPForMaskedLM
    config = tiny_config(tiny_attention_size=8, is_decoder=causal)
    eager, sdpa = (with_attention(config, name, model_class).to(dtype) for name in ("eager", "sdpa"))
    assert GMLPForMaskedLM(tiny_config(tiny_attention_size=8)).config._attn_implementation == "sdpa"
    ids = random_ids(3, 9)
    mask = torch.ones_like(ids)
    if causal:
        mask[1, :3] = mask[2, :5] = 0
    else:
        mask[1, 6:] = mask[2, 4:] = 0
    with torch.no_grad():
        expected, actual = eager(ids, attention_mask=mask).logits, sdpa(ids, attention_mask=mask).logits
    real = mask.bool()
    assert_close(actual[real], expected[real], rtol=1e-5, atol=1e-5)


# --- Memory-lean training: the recomputed gating unit --------------------------------------------------------------

SPATIAL_PATHS = {
    "dense": {"spatial_weight_type": "dense"},
    "toeplitz direct": {},
    "toeplitz fft": {"spatial_fft_min_length": 1},
}


def gradients(model, **inputs) -> dict:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)  # the same dropout masks in both runs
    model(**inputs).loss.backward()
    return {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}


@pytest.mark.parametrize("path", sorted(SPATIAL_PATHS))
@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "causal"])
@pytest.mark.parametrize("tiny_attention_size", [0, 8], ids=["gmlp", "amlp"])
def test_recomputed_gating_gives_the_plain_gradients(tiny_config, path, causal, tiny_attention_size, dtype):
    """Every parameter's gradient is the same whether the gating unit is kept for the backward pass or recomputed
    there (fp32, tight), on each spatial path, with a padding mask, causal masks and dropout (attention dropout
    included, whose masks the recomputation must redraw identically)."""
    config = tiny_config(
        SPATIAL_PATHS[path],
        is_decoder=causal,
        tiny_attention_size=tiny_attention_size,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )
    model_class = GMLPForCausalLM if causal else GMLPForMaskedLM
    torch.manual_seed(0)
    model = model_class(config).train().to(dtype)
    ids = random_ids(3, 11)
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    recomputed = gradients(model, **inputs)
    for layer in model.gmlp.encoder.layer:
        layer.recompute_gating = False
    plain = gradients(model, **inputs)
    assert recomputed.keys() == plain.keys() == {name for name, _ in model.named_parameters()}
    for name in plain:
        assert_close(recomputed[name], plain[name], msg=name)


def saved_bytes(model, **inputs) -> int:
    """Bytes of the distinct activations autograd keeps for the backward pass of one step (parameters left out)."""
    parameters = {param.untyped_storage().data_ptr() for param in model.parameters()}
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(**inputs)
    return sum(storages.values())


@pytest.mark.parametrize("path", sorted(SPATIAL_PATHS))
def test_recomputed_gating_keeps_less_for_the_backward_pass(tiny_config, path):
    """The point of recomputing: the gating unit's intermediates (GELU's output, the normalised gate, the spatial
    product, the FFT's spectra) are not kept, which is most of what a block keeps."""
    config = tiny_config(SPATIAL_PATHS[path], hidden_size=16, intermediate_size=96, max_position_embeddings=64)
    model = GMLPForMaskedLM(config).train()
    ids = random_ids(4, 64)
    lean = saved_bytes(model, input_ids=ids, labels=ids)
    for layer in model.gmlp.encoder.layer:
        layer.recompute_gating = False
    assert lean < 0.6 * saved_bytes(model, input_ids=ids, labels=ids)


def test_gradient_checkpointing_on_top_of_the_recomputed_gating(tiny_config, dtype):
    config = tiny_config(tiny_attention_size=8, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    torch.manual_seed(0)
    model = GMLPForMaskedLM(config).train().to(dtype)
    ids = random_ids(2, 10)
    expected = gradients(model, input_ids=ids, labels=ids)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    checkpointed = gradients(model, input_ids=ids, labels=ids)
    for name in expected:
        assert_close(checkpointed[name], expected[name], msg=name)


def test_lora_adapters_inside_and_outside_the_recomputed_region_train(tiny_config):
    """The projections stay modules: a LoRA adapter on each channel projection and on the tiny attention's
    projections (these two run again when the gating unit is recomputed) changes the output and gets the same
    gradients as without the recomputation."""
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    base = GMLPForMaskedLM(tiny_config(tiny_attention_size=8))
    ids = random_ids(2, 10)
    with torch.no_grad():
        base_logits = base.eval()(ids).logits
    targets = ["channel_proj_in", "channel_proj_out", "qkv_proj", "output_proj"]
    model = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=targets))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    model.train()
    assert not torch.allclose(model(input_ids=ids).logits, base_logits)
    recomputed = gradients(model, input_ids=ids, labels=ids)
    assert sum("lora_" in name for name in recomputed) == 2 * len(targets) * 2  # A and B, 4 targets, 2 blocks
    for layer in model.base_model.model.gmlp.encoder.layer:
        layer.recompute_gating = False
    plain = gradients(model, input_ids=ids, labels=ids)
    for name in plain:
        torch.testing.assert_close(recomputed[name], plain[name], msg=name)
