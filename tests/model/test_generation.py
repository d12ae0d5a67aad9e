"""Causal gMLP / aMLP generation: the decoding cache, left-padded batches, and what Transformers'
`GenerationTesterMixin` checks for a causal LM with a cache (that mixin's file, tests/generation/test_utils.py, is not
in the release's source distribution, so these tests cover its behaviours here).

The spatial weights are set far from their initial values (W near 0, b = 1), where a position or padding error would
be invisible: every test would pass at initialisation even with left padding handled wrongly.
"""

import re

import pytest
import torch
from transformers import DynamicCache, StaticCache, cache_utils
from transformers.cache_utils import Cache, DynamicLayer
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from gmlp import GMLPForCausalLM
from gmlp.configuration_gmlp import SPATIAL_GATING_LAYER_TYPE
from gmlp.modeling_gmlp import GMLPDynamicLayer, GMLPStaticLayer

VARIANTS = {
    "gmlp toeplitz": {},
    "gmlp dense": {"spatial_weight_type": "dense"},
    "amlp toeplitz": {"tiny_attention_size": 8},
    "amlp dense": {"spatial_weight_type": "dense", "tiny_attention_size": 8},
}
# Every test builds its models and inputs on the selected device (conftest.py's --device): the prompts are made
# where the test runs.
pytestmark = pytest.mark.usefixtures("on_device")


def prompt_ids():
    return torch.tensor([[5, 6, 7, 8, 9]])


def short_ids():
    return torch.tensor([[11, 12, 13]])


def batch_ids():
    return torch.tensor([[5, 6, 7, 8, 9], [0, 0, 11, 12, 13]])  # the short prompt left-padded with the pad id 0


def batch_mask():
    return torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])


# The sizes of these tests, over the tiny defaults (conftest.py): a causal model with n = 24.
GENERATION_SIZES = {
    "vocab_size": 40,
    "hidden_size": 16,
    "intermediate_size": 32,
    "max_position_embeddings": 24,
    "is_decoder": True,
    "pad_token_id": 0,
    "spatial_init_eps": 1e-3,
}


@pytest.fixture
def trained_looking(tiny_config):
    """A factory of causal LMs whose spatial weights are far from their initial values."""

    def make(**overrides) -> GMLPForCausalLM:
        torch.manual_seed(0)
        model = GMLPForCausalLM(tiny_config(GENERATION_SIZES, **overrides)).eval()
        with torch.no_grad():
            for layer in model.gmlp.encoder.layer:
                layer.sgu.spatial_proj.weight.normal_(0.0, 0.5)
                layer.sgu.spatial_proj.bias.normal_(1.0, 0.5)
        return model

    return make


@pytest.fixture(params=sorted(VARIANTS))
def model(request, trained_looking):
    return trained_looking(**VARIANTS[request.param])


def greedy(model, input_ids, **kwargs):
    """Greedy decoding of 6 new tokens, with the logits of every step (`output.sequences`, `output.logits`)."""
    return decode(model, input_ids, max_new_tokens=6, do_sample=False, **kwargs)


def decode(model, input_ids, **kwargs):
    """`model.generate` returning the sequences and every step's logits."""
    return model.generate(input_ids, return_dict_in_generate=True, output_logits=True, **kwargs)


def assert_same_decoding(actual, expected, rows=slice(None)) -> None:
    """Two decodings of the same prompts give the same tokens and, at every step, the same logits (fp32, tight):
    the logits show an error that the argmax would hide."""
    assert len(actual.logits) == len(expected.logits)
    new = -len(expected.logits)
    assert torch.equal(actual.sequences[rows, new:], expected.sequences[:, new:])
    for step, (got, want) in enumerate(zip(actual.logits, expected.logits)):
        torch.testing.assert_close(got[rows], want, rtol=1e-5, atol=1e-5, msg=f"step {step}")


def test_left_padded_rows_match_each_prompt_alone(model):
    with torch.no_grad():
        batch = model(batch_ids(), attention_mask=batch_mask()).logits
        torch.testing.assert_close(batch[0], model(prompt_ids()).logits[0])
        torch.testing.assert_close(batch[1, 2:], model(short_ids()).logits[0])
    generated = greedy(model, batch_ids(), attention_mask=batch_mask())
    assert_same_decoding(generated, greedy(model, prompt_ids()), rows=slice(0, 1))
    assert_same_decoding(generated, greedy(model, short_ids()), rows=slice(1, 2))


def test_right_padding_is_exact_and_positions_default_to_real_tokens(model):
    right = torch.tensor([[11, 12, 13, 0, 0]])
    with torch.no_grad():
        padded = model(right, attention_mask=torch.tensor([[1, 1, 1, 0, 0]])).logits
        explicit = model(
            batch_ids(), attention_mask=batch_mask(), position_ids=torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])
        ).logits
        default = model(batch_ids(), attention_mask=batch_mask()).logits
    torch.testing.assert_close(padded[0, :3], model(short_ids()).logits[0])
    real = batch_mask().bool()  # padding's own outputs are never read (and differ: its positions are its own)
    torch.testing.assert_close(explicit[real], default[real])


@pytest.mark.parametrize(
    "strategy",
    [
        {"do_sample": False},
        {"do_sample": True, "top_k": 5},
        {"num_beams": 3, "do_sample": False},
        {"num_beams": 3, "do_sample": True},
    ],
)
@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_cached_generation_equals_full_recompute(model, strategy, cache_implementation):
    """The default DynamicCache and Transformers' StaticCache (preallocated, written in place) both give the tokens
    of the full recompute, left padding included."""

    def run(use_cache, **cache):
        torch.manual_seed(1)
        return decode(
            model, batch_ids(), attention_mask=batch_mask(), max_new_tokens=6, use_cache=use_cache, **strategy, **cache
        )

    cached, recomputed = run(True, cache_implementation=cache_implementation), run(False)
    assert cached.sequences.shape == (2, 11)
    assert_same_decoding(cached, recomputed)


def test_one_step_with_the_cache_equals_the_full_forward(model):
    """The cache holds what the forward of the whole sequence computes: the last logits agree, and the cache's
    length and per-layer contents have the documented shapes."""
    with torch.no_grad():
        prefix = model(batch_ids(), attention_mask=batch_mask(), use_cache=True)
        cache = prefix.cache
        assert isinstance(cache, DynamicCache) and cache.get_seq_length() == 5
        layer, config = cache.layers[0], model.config
        # The tiny attention's keys and values, shaped as the config says (gMLP has none), and the gates.
        if config.tiny_attention_size:
            heads_shape = (2, config.num_attention_heads, 5, config.head_dim)
            assert layer.keys.shape == layer.values.shape == heads_shape
        else:
            assert layer.keys is None and config.num_attention_heads == 0
        assert layer.gates.shape == (2, 5, config.gate_size)
        assert layer.gates[1, :2].abs().max() == 0  # padding's gate is zero
        step = model(
            torch.tensor([[21], [22]]),
            attention_mask=torch.cat([batch_mask(), torch.ones(2, 1, dtype=torch.long)], 1),
            cache=cache,
            use_cache=True,
        )
        full = model(
            torch.cat([batch_ids(), torch.tensor([[21], [22]])], 1),
            attention_mask=torch.cat([batch_mask(), torch.ones(2, 1, dtype=torch.long)], 1),
        )
    torch.testing.assert_close(step.logits[:, -1], full.logits[:, -1])
    assert step.cache.get_seq_length() == 6


def test_a_static_cache_holds_the_same_gates_in_place(model):
    """Transformers' StaticCache, passed by hand: preallocated to n, filled in place, zeros beyond the cached tokens
    (which therefore add nothing to the spatial projection), and the step's logits equal the full forward's."""
    new_tokens = torch.tensor([[21], [22]])
    mask = torch.cat([batch_mask(), torch.ones(2, 1, dtype=torch.long)], 1)
    with torch.no_grad():
        cache = StaticCache(config=model.config, max_cache_len=model.config.max_position_embeddings)
        model(batch_ids(), attention_mask=batch_mask(), cache=cache, use_cache=True)
        step = model(new_tokens, attention_mask=mask, cache=cache, use_cache=True)
        full = model(torch.cat([batch_ids(), new_tokens], 1), attention_mask=mask)
        dynamic = model(batch_ids(), attention_mask=batch_mask(), use_cache=True).cache
    torch.testing.assert_close(step.logits[:, -1], full.logits[:, -1])
    assert int(cache.get_seq_length()) == 6
    assert all(type(layer) is GMLPStaticLayer for layer in cache.layers)
    gates = cache.layers[0].gates
    assert gates.shape == (2, model.config.max_position_embeddings, model.config.gate_size)
    torch.testing.assert_close(gates[:, :5], dynamic.layers[0].gates)
    assert gates[:, 6:].abs().max() == 0
    if model.config.tiny_attention_size:
        torch.testing.assert_close(cache.layers[0].keys[:, :, :5], dynamic.layers[0].keys)


def test_the_cache_layer_appends_gates_in_place_and_equals_concatenation():
    """GMLPDynamicLayer's gates are the concatenation of every step's, step after step, written into spare room (the
    storage does not move between steps); cropping keeps the storage and the next tokens overwrite the cropped ones;
    beam reordering and batch repetition move to new storage. Its keys and values are DynamicLayer's."""
    torch.manual_seed(0)
    ours, reference = GMLPDynamicLayer(), DynamicLayer()
    steps = [(torch.randn(2, 1, length, 3), torch.randn(2, length, 4)) for length in (5, 1, 1, 1)]
    gates, storage = [], []
    for key, gate in steps:
        keys, values = ours.update(key, -key)
        expected_keys, expected_values = reference.update(key, -key)
        assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
        gates.append(gate)
        assert torch.equal(ours.update_gates(gate), torch.cat(gates, 1))
        storage.append(ours.gates.data_ptr())
    assert ours.get_seq_length() == 8 and storage[1:] == [storage[0]] * 3  # 5 tokens -> room for 10: no copy
    ours.update_gates(torch.randn(2, 3, 4))  # 11 tokens: new storage
    assert ours.gate_storage.shape == (2, 22, 4) and ours.gates.data_ptr() != storage[0]
    kept = ours.gates[:, :9].clone()
    ours.crop(-2)
    replacement = torch.randn(2, 1, 4)
    assert torch.equal(ours.update_gates(replacement), torch.cat([kept, replacement], 1))
    assert ours.gates.data_ptr() == ours.gate_storage.data_ptr() and ours.get_seq_length() == 10
    assert ours.keys.shape[2] == 6  # 8 keys, 2 cropped
    ours.reorder_cache(torch.tensor([1, 1]))
    new = torch.randn(2, 1, 4)
    assert torch.equal(ours.update_gates(new), torch.cat([torch.cat([kept, replacement], 1)[[1, 1]], new], 1))
    ours.batch_repeat_interleave(2)
    assert ours.update_gates(torch.zeros(4, 1, 4)).shape == (4, 12, 4) and ours.keys.shape[0] == 4
    ours.reset()
    assert ours.get_seq_length() == 0 and ours.gate_storage is None


def test_generate_uses_gmlp_cache_layers_and_refuses_a_cache_that_cannot_hold_gates(model):
    """generate()'s default cache, `cache_implementation="dynamic"`, a `DynamicCache(config=model.config)` and a
    bare `DynamicCache()` passed in are all made of GMLPDynamicLayers (the config's `layer_types` selects them) and
    give the full recompute's tokens; a cache of Transformers' plain layers, which cannot hold the gates, is refused."""

    def run(**kwargs):
        return greedy(model, batch_ids(), attention_mask=batch_mask(), **kwargs)

    recomputed = run(use_cache=False)
    outputs = {
        "default": run(),
        "dynamic": run(cache_implementation="dynamic"),
        "config": run(cache=DynamicCache(config=model.config)),
        "bare": run(cache=DynamicCache()),
    }
    for name, output in outputs.items():
        assert output.cache.get_seq_length() == 10, name
        assert all(type(layer) is GMLPDynamicLayer for layer in output.cache.layers), name
        assert_same_decoding(output, recomputed)
    plain = Cache(layers=[DynamicLayer() for _ in range(model.config.num_hidden_layers)])
    with pytest.raises(ValueError, match=r"This cache's layers \(DynamicLayer\) cannot hold gMLP's gates.*config"):
        run(cache=plain)


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
def test_a_second_copy_of_the_model_file_does_not_stop_decoding(model, tmp_path, monkeypatch, cache_implementation):
    """Loading the model file again as another module (as a checkpoint's remote code, or the benchmarks' baseline,
    is loaded) registers that copy's cache layers under gMLP's layer type; the installed model decodes with them
    exactly as with its own."""
    for mapping in (cache_utils.DYNAMIC_LAYER_TYPE_MAPPING, cache_utils.STATIC_LAYER_TYPE_MAPPING):
        monkeypatch.setitem(mapping, SPATIAL_GATING_LAYER_TYPE, mapping[SPATIAL_GATING_LAYER_TYPE])
    model.save_pretrained(tmp_path)
    copy = get_class_from_dynamic_module("modeling_gmlp.GMLPForCausalLM", str(tmp_path))
    assert copy.__module__ != GMLPForCausalLM.__module__
    output = greedy(model, batch_ids(), attention_mask=batch_mask(), cache_implementation=cache_implementation)
    assert {type(layer).__module__ for layer in output.cache.layers} == {copy.__module__}
    assert_same_decoding(output, greedy(model, batch_ids(), attention_mask=batch_mask(), use_cache=False))


def test_static_cache_without_an_attention_mask(model):
    """No mask: positions are counted from the static cache's (tensor) length."""
    static = greedy(model, prompt_ids(), cache_implementation="static")
    assert_same_decoding(static, greedy(model, prompt_ids(), use_cache=False))


def test_generation_continues_from_the_returned_cache(model):
    first = decode(model, prompt_ids(), max_new_tokens=3, do_sample=False)
    continued = decode(model, first.sequences, cache=first.cache, max_new_tokens=3, do_sample=False)
    whole = greedy(model, prompt_ids())
    assert torch.equal(continued.sequences, whole.sequences)
    for step, (got, want) in enumerate(zip(first.logits + continued.logits, whole.logits)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"step {step}")


def test_the_cache_under_its_older_name_past_key_values(model):
    """Transformers 5.24 renamed `past_key_values` to `cache`; the old keyword still reaches the cache (with the
    library's deprecation warning), so code written for earlier versions decodes the same."""
    new_tokens = torch.tensor([[21], [22]])
    mask = torch.cat([batch_mask(), torch.ones(2, 1, dtype=torch.long)], 1)
    with torch.no_grad():
        cache = model(batch_ids(), attention_mask=batch_mask(), use_cache=True).cache
        step = model(new_tokens, attention_mask=mask, past_key_values=cache, use_cache=True)
        full = model(torch.cat([batch_ids(), new_tokens], 1), attention_mask=mask)
    assert step.cache is cache and cache.get_seq_length() == 6
    torch.testing.assert_close(step.logits[:, -1], full.logits[:, -1])


def test_assisted_decoding_crops_the_cache(trained_looking, model):
    assistant = trained_looking(**{**VARIANTS["gmlp toeplitz"], "num_hidden_layers": 1})
    expected = greedy(model, prompt_ids())
    assert_same_decoding(greedy(model, prompt_ids(), assistant_model=assistant), expected)
    assert_same_decoding(greedy(model, prompt_ids(), prompt_lookup_num_tokens=2), expected)


def test_generation_from_inputs_embeds_with_an_attention_mask(model):
    embeds = model.get_input_embeddings()(batch_ids())
    from_embeds = decode(model, None, inputs_embeds=embeds, attention_mask=batch_mask(), max_new_tokens=5)
    from_ids = decode(model, batch_ids(), attention_mask=batch_mask(), max_new_tokens=5)
    assert_same_decoding(from_embeds, from_ids)  # generate returns only the new tokens from embeds


def test_fft_path_without_cache_agrees_with_cached_decoding(trained_looking):
    """A model that takes the FFT (n >= spatial_fft_min_length) decodes a left-padded batch with the dynamic and the
    static cache, whose steps take the direct product, with the full recompute's logits."""
    model = trained_looking(spatial_fft_min_length=1)
    recomputed = greedy(model, batch_ids(), attention_mask=batch_mask(), use_cache=False)
    for cache_implementation in ("dynamic", "static"):
        cached = greedy(model, batch_ids(), attention_mask=batch_mask(), cache_implementation=cache_implementation)
        assert_same_decoding(cached, recomputed)


@pytest.mark.parametrize(
    ("prompt_length", "new", "fix"),
    [
        (5, 20, "ask for at most 19 new tokens (`max_new_tokens`) or shorten the prompt to at most 4 tokens"),
        (30, 4, "shorten the prompt to at most 20 tokens (n - max_new_tokens)."),
    ],
    ids=["too many new tokens", "prompt longer than n"],
)
def test_too_long_a_generation_is_refused_before_it_starts_with_the_fix(trained_looking, prompt_length, new, fix):
    model = trained_looking()
    total = prompt_length + new
    message = f"The prompt has {prompt_length} tokens and {new} new ones are asked for: {total} in all, more than this model's n = max_position_embeddings = 24. To fit, {fix}"
    with pytest.raises(ValueError, match=re.escape(message)):
        model.generate(torch.ones(1, prompt_length, dtype=torch.long), max_new_tokens=new, do_sample=False)


def test_a_cached_step_beyond_n_is_refused(trained_looking):
    model = trained_looking()
    with torch.no_grad():
        cache = model(torch.ones(1, 24, dtype=torch.long), use_cache=True).cache
        with pytest.raises(ValueError, match=r"length 25 \(24 cached \+ 1 new\) exceeds .* 24"):
            model(torch.ones(1, 1, dtype=torch.long), cache=cache)


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
def test_eager_and_sdpa_decode_alike_with_left_padding(trained_looking, cache_implementation):
    """aMLP's tiny attention written out (eager) and through SDPA's kernels: the same scores at every step (fp32,
    tight) and the same tokens, for a left-padded batch, with either cache."""
    outputs = {}
    for implementation in ("eager", "sdpa"):
        model = trained_looking(tiny_attention_size=8)
        model.set_attn_implementation(implementation)
        outputs[implementation] = model.generate(
            batch_ids(),
            attention_mask=batch_mask(),
            max_new_tokens=6,
            do_sample=False,
            cache_implementation=cache_implementation,
            return_dict_in_generate=True,
            output_scores=True,
        )
    assert torch.equal(outputs["eager"].sequences, outputs["sdpa"].sequences)
    for eager, sdpa in zip(outputs["eager"].scores, outputs["sdpa"].scores):
        torch.testing.assert_close(sdpa, eager, rtol=1e-5, atol=1e-5)
