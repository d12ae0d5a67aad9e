"""bf16 against fp32, path by path: the direct, dense and FFT spatial products, the tiny attention's masking, the
LayerNorms, gradients, and cached decoding, each in bf16 weights and under autocast.

The tolerance is stated once: bf16 keeps 8 bits of mantissa (a relative rounding of 2^-9 per value), and after a
few layers of products and sums a relative error of a few 1e-3 is expected; `RELATIVE_TOLERANCE` allows 3e-2 of the
fp32 output's norm, far below what a wrong path gives (a dropped mask, a position shift or an overflow change the
output by tens of percent or more, as the padding test's control shows). The other tests compare with the same
tolerance in a --dtype bf16 pass (tests/helpers.py).

Every test runs on the selected device (conftest.py's --device), and in every --dtype pass (each compares bf16 with
fp32 itself).
"""

import pytest
import torch
from helpers import BF16_RELATIVE_TOLERANCE as RELATIVE_TOLERANCE
from helpers import relative_error, seeded

from gmlp import GMLPForCausalLM, GMLPForMaskedLM, GMLPForSequenceClassification

pytestmark = [pytest.mark.usefixtures("on_device"), pytest.mark.bf16]
# Every spatial path and the tiny attention; n = 32 so that the FFT variant (from 1 token on) and the direct ones see
# the same lengths.
PATHS = {
    "toeplitz direct": {},
    "toeplitz fft": {"spatial_fft_min_length": 1},
    "dense": {"spatial_weight_type": "dense"},
    "amlp": {"tiny_attention_size": 8},
    "amlp fft": {"tiny_attention_size": 8, "spatial_fft_min_length": 1},
}
SIZES = {"max_position_embeddings": 32, "pad_token_id": 0}


def ids_and_mask(batch=3, length=20, padding=(0, 5, 12), seed=0):
    """Random ids, right-padded by `padding[i]` positions in row i (pad id 0), and the matching mask."""
    input_ids = seeded(torch.randint, 5, 64, (batch, length), seed=seed)
    mask = torch.ones_like(input_ids)
    for row, pad in enumerate(padding):
        if pad:
            input_ids[row, -pad:] = 0
            mask[row, -pad:] = 0
    return input_ids, mask


@pytest.fixture(params=sorted(PATHS))
def config(request, tiny_config):
    return tiny_config(SIZES, **PATHS[request.param])


def test_bf16_weights_match_fp32_on_every_path(config):
    torch.manual_seed(0)
    model = GMLPForMaskedLM(config).eval()
    low_model = GMLPForMaskedLM(config).eval()
    low_model.load_state_dict(model.state_dict())
    low_model.to(torch.bfloat16)
    input_ids, mask = ids_and_mask()
    with torch.no_grad():
        full = model(input_ids, attention_mask=mask).logits
        low = low_model(input_ids, attention_mask=mask).logits
    assert low.dtype == torch.bfloat16
    assert torch.isfinite(low).all()
    real = mask.bool()
    assert relative_error(low[real], full[real]) < RELATIVE_TOLERANCE


def test_autocast_matches_fp32_on_every_path_with_gradients(config, device):
    """Autocast (what the Trainer's --bf16 runs): the loss and the gradients of every parameter stay close."""
    torch.manual_seed(0)
    model = GMLPForMaskedLM(config).train()
    input_ids, mask = ids_and_mask()
    labels = torch.where(mask.bool(), input_ids, -100)

    def loss_and_gradients(autocast: bool):
        model.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        return loss.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    full_loss, full_grads = loss_and_gradients(False)
    low_loss, low_grads = loss_and_gradients(True)
    assert abs(float(low_loss - full_loss)) / float(full_loss) < RELATIVE_TOLERANCE
    assert full_grads.keys() == low_grads.keys()
    for name, gradient in full_grads.items():
        if gradient.norm() > 1e-6:
            assert relative_error(low_grads[name], gradient) < 0.1, name


def test_right_padding_stays_exact_in_bf16(config):
    """Padding is zeroed before each spatial projection and masked in the tiny attention also in bf16: the real
    positions of a right-padded row equal the same tokens alone (up to bf16 rounding of the different shapes), while
    treating the padding as tokens changes them by several times that tolerance."""
    torch.manual_seed(0)
    model = GMLPForMaskedLM(config).eval().to(torch.bfloat16)
    input_ids, mask = ids_and_mask(batch=1, padding=(8,))
    with torch.no_grad():
        padded = model(input_ids, attention_mask=mask).logits[0, :12]
        alone = model(input_ids[:, :12]).logits[0]
        unmasked = model(input_ids).logits[0, :12]
    assert relative_error(padded, alone.float()) < RELATIVE_TOLERANCE
    assert relative_error(unmasked, alone.float()) > 3 * RELATIVE_TOLERANCE


def test_tiny_attention_gives_padding_exactly_zero_weight_in_bf16(tiny_config):
    torch.manual_seed(0)
    model = GMLPForMaskedLM(tiny_config(SIZES, tiny_attention_size=8)).eval().to(torch.bfloat16)
    input_ids, mask = ids_and_mask()
    with torch.no_grad():
        attentions = model(input_ids, attention_mask=mask, output_attentions=True).attentions
    for weights in attentions:
        assert weights.dtype == torch.bfloat16
        assert (weights * (1 - mask[:, None, None, :])).abs().max() == 0
        real_rows = weights[:, 0][mask.bool()]
        torch.testing.assert_close(real_rows.float().sum(-1), torch.ones(int(mask.sum())), atol=2e-2, rtol=0)


def test_layer_norms_keep_their_statistics_in_bf16(tiny_config):
    """The final LayerNorm's output has mean 0 and variance 1 per token in bf16 too (no loss of precision from
    reducing in bf16), and equals fp32's to the stated tolerance."""
    torch.manual_seed(0)
    model = GMLPForSequenceClassification(tiny_config(SIZES, num_labels=3)).gmlp.eval()
    with torch.no_grad():
        for norm in [model.final_norm, *(layer.norm for layer in model.encoder.layer)]:
            norm.weight.fill_(1.0)
            norm.bias.zero_()
    input_ids, _ = ids_and_mask(padding=(0, 0, 0))
    with torch.no_grad():
        full = model(input_ids).last_hidden_state
        low = model.to(torch.bfloat16)(input_ids).last_hidden_state
    torch.testing.assert_close(low.float().mean(-1), torch.zeros(full.shape[:2]), atol=2e-2, rtol=0)
    torch.testing.assert_close(low.float().var(-1, unbiased=False), torch.ones(full.shape[:2]), atol=3e-2, rtol=0)
    assert relative_error(low, full) < RELATIVE_TOLERANCE


def test_cached_left_padded_generation_in_bf16(tiny_config):
    """bf16 decoding with the cache: at every step the logits stay within the tolerance of fp32's for the same
    tokens (fp32 recomputed on the bf16 run's own sequences, so that a step is checked even after the two runs picked
    different tokens), and a left-padded row's logits match the prompt alone."""
    torch.manual_seed(0)
    config = tiny_config(SIZES, is_decoder=True, tiny_attention_size=8)
    model = GMLPForCausalLM(config).eval()
    low_model = GMLPForCausalLM(config).eval()
    low_model.load_state_dict(model.state_dict())
    low_model.to(torch.bfloat16)
    batch = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 11, 12, 13]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    settings = {"max_new_tokens": 6, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
    low = low_model.generate(batch, attention_mask=mask, **settings)
    assert len(low.logits) == settings["max_new_tokens"]
    for step, low_logits in enumerate(low.logits):
        prefix = low.sequences[:, : 5 + step]
        with torch.no_grad():
            full_logits = model(prefix, attention_mask=torch.cat([mask, mask.new_ones(2, step)], dim=1)).logits[:, -1]
        assert relative_error(low_logits, full_logits) < RELATIVE_TOLERANCE, step
    with torch.no_grad():
        alone = low_model(batch[1:, 2:]).logits[0]
        padded = low_model(batch[1:], attention_mask=mask[1:]).logits[0, 2:]
    assert relative_error(padded, alone.float()) < RELATIVE_TOLERANCE
