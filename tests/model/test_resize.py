"""Changing the spatial size n of a trained model keeps what it learned: `from_pretrained(..., max_position_embeddings=N)`
(and an Auto class given a config of another n) loads a checkpoint at its own n and resizes it with
`resize_position_embeddings(N)`, which keeps W and b at the positions both sizes have, starts a longer n's new
positions at the init and drops a shorter n's last. Outputs on inputs of at most the smaller n are those of the saved
model at every position, for dense and Toeplitz W, encoders and causal models, gMLP and aMLP, two SGU heads and the
Triton unit (under Triton's interpreter on the CPU). The saved model's W is drawn far from its near-zero init
(tests/helpers.py's spatial_init_eps) and its b away from one."""

import pytest
import torch
from helpers import assert_close, load_as_remote_code, seeded
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

from gmlp import GMLPForCausalLM, GMLPForImageClassification, GMLPForMaskedLM, modeling_gmlp
from gmlp.modeling_gmlp import GMLPSpatialProjection

OLD_N = 16  # tests/helpers.py's TINY_TEXT
MODELS = {
    "gmlp": {},
    "amlp": {"tiny_attention_size": 8},
    "two-sgu-heads": {"num_sgu_heads": 2},
    "triton-unit": {"sgu_kernel": "triton"},
}


def projections(model) -> list[GMLPSpatialProjection]:
    return [module for module in model.modules() if isinstance(module, GMLPSpatialProjection)]


def trained(config):
    """A model of `config` whose W is far from the init (the tiny configs' spatial_init_eps) and b far from one."""
    model = (GMLPForCausalLM if config.is_decoder else GMLPForMaskedLM)(config).eval()
    with torch.no_grad():
        for index, projection in enumerate(projections(model)):
            projection.bias.add_(seeded(torch.randn, projection.bias.shape, seed=index))
    return model


@pytest.fixture
def saved(tiny_config, tmp_path):
    """`saved(causal, weight_type, **overrides)`: a trained model at n = OLD_N, and the folder it is saved in."""

    def save(causal: bool, weight_type: str, **overrides):
        model = trained(tiny_config(is_decoder=causal, spatial_weight_type=weight_type, **overrides))
        assert model.config.max_position_embeddings == OLD_N
        model.save_pretrained(tmp_path / "saved")
        return model, tmp_path / "saved"

    return save


def logits(model, ids, mask=None) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits


def inputs(vocab_size: int, length: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of `length` tokens and a mask that pads the second row's last three (an encoder's right padding) or
    first three (a causal model's left padding, its row's positions starting at its first real token)."""
    ids = seeded(torch.randint, 1, vocab_size, (2, length), seed=0)
    mask = torch.ones_like(ids)
    mask[1, slice(0, 3) if causal else slice(-3, None)] = 0
    return ids, mask


@pytest.mark.parametrize("new_n", [32, 8])
@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "causal"])
@pytest.mark.parametrize("weight_type", ["toeplitz", "dense"])
@pytest.mark.parametrize("variant", list(MODELS))
def test_a_checkpoint_loaded_at_another_n_gives_the_same_outputs_within_both(
    saved, on_device, variant, weight_type, causal, new_n
):
    model, folder = saved(causal, weight_type, **MODELS[variant])
    loaded = type(model).from_pretrained(folder, max_position_embeddings=new_n).eval()
    assert loaded.config.max_position_embeddings == new_n
    assert all(projection.n == new_n for projection in projections(loaded))
    ids, mask = inputs(model.config.vocab_size, min(OLD_N, new_n), causal)
    assert_close(logits(loaded, ids), logits(model, ids))
    assert_close(logits(loaded, ids, mask), logits(model, ids, mask))
    if causal and new_n > OLD_N:
        # A causal model extended to a longer n reads past the old one; its first OLD_N positions are unchanged.
        longer = seeded(torch.randint, 1, model.config.vocab_size, (2, new_n - 4), seed=1)
        assert_close(logits(loaded, longer)[:, :OLD_N], logits(model, longer[:, :OLD_N]))


def split_weight(weight: torch.Tensor, toeplitz: bool, n: int, kept: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W's entries (spatial size `n`) at the positions i, j < `kept`, and the others, each flattened per head."""
    if toeplitz:
        inside = torch.zeros(2 * n - 1, dtype=torch.bool)
        inside[n - kept : n + kept - 1] = True  # the offsets -(kept - 1) .. kept - 1
    else:
        inside = torch.zeros(n, n, dtype=torch.bool)
        inside[:kept, :kept] = True
    return weight[:, inside], weight[:, ~inside]


@pytest.mark.parametrize("new_n", [32, 8])
@pytest.mark.parametrize("weight_type", ["toeplitz", "dense"])
def test_resizing_keeps_the_shared_positions_and_starts_new_ones_at_the_init(tiny_config, weight_type, new_n):
    model = trained(tiny_config(spatial_weight_type=weight_type, num_sgu_heads=2))
    before = [(unit.weight.detach().clone(), unit.bias.detach().clone()) for unit in projections(model)]
    model.resize_position_embeddings(new_n)
    assert model.config.max_position_embeddings == new_n
    toeplitz, kept, bound = weight_type == "toeplitz", min(OLD_N, new_n), model.config.spatial_init_eps / new_n
    for unit, (old_weight, old_bias) in zip(projections(model), before, strict=True):
        weight, bias = unit.weight.detach(), unit.bias.detach()
        assert weight.shape == ((2, 2 * new_n - 1) if toeplitz else (2, new_n, new_n)) and bias.shape == (2, new_n)
        assert unit.weight.requires_grad and unit.bias.requires_grad
        new_kept, added = split_weight(weight, toeplitz, new_n, kept)
        assert torch.equal(new_kept, split_weight(old_weight, toeplitz, OLD_N, kept)[0])
        assert torch.equal(bias[:, :kept], old_bias[:, :kept])
        if new_n > OLD_N:  # the new positions as the init makes them at the new n: W uniform in +-eps / n, b = 1
            assert torch.equal(bias[:, OLD_N:], torch.ones(2, new_n - OLD_N))
            assert added.abs().max() <= bound and added.std() > bound / 10
        else:
            assert added.numel() == 0


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "causal"])
def test_the_method_an_auto_class_and_from_pretrained_agree(saved, causal):
    model, folder = saved(causal, "dense")
    auto_class = AutoModelForCausalLM if causal else AutoModelForMaskedLM
    config = AutoConfig.from_pretrained(folder, max_position_embeddings=24)
    loaded = [
        type(model).from_pretrained(folder, max_position_embeddings=24),
        auto_class.from_pretrained(folder, config=config),
        auto_class.from_pretrained(folder, max_position_embeddings=24),
    ]
    model.resize_position_embeddings(24)
    ids, mask = inputs(model.config.vocab_size, OLD_N, causal)
    expected = model.state_dict()
    for other in loaded:
        assert other.config.max_position_embeddings == 24
        state = other.state_dict()
        assert state.keys() == expected.keys()
        for key, value in state.items():  # the new positions are drawn afresh; all else is the saved model's
            reference = expected[key]
            if key.endswith("spatial_proj.weight"):
                value, reference = (split_weight(weight, False, 24, OLD_N)[0] for weight in (value, reference))
            elif key.endswith("spatial_proj.bias"):
                value, reference = value[:, :OLD_N], reference[:, :OLD_N]
            assert torch.equal(value, reference), key
        assert_close(logits(other.eval(), ids, mask), logits(model, ids, mask))


def test_a_resized_model_saves_and_loads_at_its_new_n(saved, tmp_path):
    model, _ = saved(False, "toeplitz")
    model.resize_position_embeddings(24)
    model.save_pretrained(tmp_path / "resized")
    reloaded = GMLPForMaskedLM.from_pretrained(tmp_path / "resized").eval()
    assert reloaded.config.max_position_embeddings == 24
    for key, value in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key
    ids = seeded(torch.randint, 1, model.config.vocab_size, (2, 24), seed=0)
    assert_close(logits(reloaded, ids), logits(model, ids))


def test_a_bad_n_is_the_configs_error_and_changes_nothing(saved):
    model, _ = saved(False, "dense")
    weight = projections(model)[0].weight.detach().clone()
    with pytest.raises(
        StrictDataclassError, match=r"`max_position_embeddings` \(the spatial size n\) must be at least 2, got 1"
    ):
        model.resize_position_embeddings(1)
    assert model.config.max_position_embeddings == OLD_N
    assert torch.equal(projections(model)[0].weight, weight)


def test_an_image_models_n_is_not_resized(tiny_vision_config):
    model = GMLPForImageClassification(tiny_vision_config())
    with pytest.raises(NotImplementedError, match=r"number of patches .* = 16.*keep the checkpoint's image_size"):
        model.resize_position_embeddings(32)


def test_another_n_under_deepspeed_zero3_is_refused_with_the_way_round(saved, monkeypatch):
    _, folder = saved(False, "dense")
    monkeypatch.setattr(modeling_gmlp, "is_deepspeed_zero3_enabled", lambda: True)
    with pytest.raises(
        ValueError, match=r"n = max_position_embeddings = 16; loading it at n = 32 under DeepSpeed ZeRO-3"
    ):
        GMLPForMaskedLM.from_pretrained(folder, max_position_embeddings=32)


@pytest.mark.e2e
def test_remote_code_loads_a_checkpoint_at_another_n(saved, tmp_path):
    """`trust_remote_code` where this package is not installed (its config and model classes are the checkpoint's own
    copies): the same resizing, the same logits."""
    model, folder = saved(True, "dense")
    ids = seeded(torch.randint, 1, model.config.vocab_size, (2, OLD_N), seed=0)
    remote = load_as_remote_code(folder, "AutoModelForCausalLM", ids, tmp_path / "remote", max_position_embeddings=24)
    assert_close(remote["result"], logits(model, ids))
