"""`GenerationTesterMixin`: the `generate` checks gMLP's causal LM must pass (see also tests/model/test_generation.py).

Written for this project, not vendored: Transformers' own mixin lives in `tests/generation/test_utils.py`, which
the v5.23.0 source distribution does not ship. `ModelTesterMixin.test_generation_tester_mixin_inheritance` requires
a test class whose models can generate to inherit a class of this name. The checks follow the upstream mixin's
contract (greedy / sampling / beam search, dict outputs, `inputs_embeds`) with exact values instead of smoke runs:
greedy decoding must equal an argmax loop over `forward`, `generate` from `inputs_embeds` must equal
`generate` from the matching `input_ids`, and a padding-free batch (`DataCollatorWithFlattening`: the rows' real
tokens in one row, positions restarting at 0) must give the padded batch's logits, with eager and SDPA attention.
"""

import copy

import torch
from transformers import DataCollatorWithFlattening, GenerationConfig
from transformers.generation import GenerateBeamDecoderOnlyOutput, GenerateDecoderOnlyOutput
from transformers.testing_utils import torch_device


class GenerationTesterMixin:
    model_tester = None
    max_new_tokens = 3
    # Keys of the common inputs that `generate` must not receive (labels belong to `forward` only).
    input_keys_to_ignore = ("labels", "token_labels", "sequence_labels", "choice_labels", "token_type_ids")

    def prepare_config_and_inputs_for_generate(self, batch_size=2):
        config, inputs_dict = self.model_tester.prepare_config_and_inputs_for_common()
        # Copies, not views: TorchDynamo guards on a view's base, which the later steps' inputs do not have.
        inputs = {
            key: value[:batch_size].clone()
            for key, value in inputs_dict.items()
            if key not in self.input_keys_to_ignore
        }
        # No early stopping: every length check below relies on exactly `max_new_tokens` new tokens.
        config.eos_token_id = None
        return config, inputs

    def _generative_models(self):
        for model_class in self.all_generative_model_classes:
            config, inputs = self.prepare_config_and_inputs_for_generate()
            model = model_class(config).to(torch_device).eval()
            # A tiny model's generation config must not carry a checkpoint's stopping rules.
            model.generation_config = GenerationConfig(pad_token_id=config.pad_token_id, eos_token_id=None)
            yield model, inputs

    def _argmax_continuation(self, model, input_ids, attention_mask):
        """Greedy decoding written out: append the argmax of the last position's logits, `max_new_tokens` times."""
        for _ in range(self.max_new_tokens):
            with torch.no_grad():
                logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
            next_tokens = logits[:, -1].argmax(-1, keepdim=True)
            input_ids = torch.cat([input_ids, next_tokens], dim=-1)
            attention_mask = torch.cat([attention_mask, torch.ones_like(next_tokens)], dim=-1)
        return input_ids

    def test_greedy_generate_matches_forward_argmax(self):
        for model, inputs in self._generative_models():
            generated = model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=self.max_new_tokens)
            expected = self._argmax_continuation(model, inputs["input_ids"], inputs["attention_mask"])
            self.assertTrue(torch.equal(generated, expected), msg=f"{generated} != {expected}")

    def test_greedy_generate_dict_outputs(self):
        for model, inputs in self._generative_models():
            if self.has_attentions:
                model.set_attn_implementation("eager")  # the fused kernels return no attention weights
            batch_size, prompt_length = inputs["input_ids"].shape
            output = model.generate(
                **inputs,
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                return_dict_in_generate=True,
                output_scores=True,
                output_logits=True,
                output_hidden_states=True,
                output_attentions=self.has_attentions,
            )
            self.assertIsInstance(output, GenerateDecoderOnlyOutput)
            self.assertEqual(output.sequences.shape, (batch_size, prompt_length + self.max_new_tokens))
            vocab_size = model.config.vocab_size
            self.assertEqual([tuple(s.shape) for s in output.scores], [(batch_size, vocab_size)] * self.max_new_tokens)
            self.assertEqual([tuple(s.shape) for s in output.logits], [(batch_size, vocab_size)] * self.max_new_tokens)
            # The chosen tokens are the argmax of the (processed) scores.
            chosen = torch.stack([s.argmax(-1) for s in output.scores], dim=1)
            self.assertTrue(torch.equal(chosen, output.sequences[:, prompt_length:]))
            # With the cache, the first step runs the prompt and each later step one new token, whose attention
            # covers the prompt and the tokens generated so far.
            for step, step_states in enumerate(output.hidden_states):
                self.assertEqual(len(step_states), model.config.num_hidden_layers + 1)
                queries = prompt_length if step == 0 else 1
                for states in step_states:
                    self.assertEqual(states.shape, (batch_size, queries, model.config.hidden_size))
            if self.has_attentions:
                for step, step_attentions in enumerate(output.attentions):
                    self.assertEqual(len(step_attentions), model.config.num_hidden_layers)
                    queries = prompt_length if step == 0 else 1
                    for attentions in step_attentions:
                        self.assertEqual(attentions.shape, (batch_size, 1, queries, prompt_length + step))

    def test_cache_layers_have_the_config_s_attention_shape(self):
        """Upstream's cache check: every layer's keys and values are (batch, num_attention_heads, tokens, head_dim)
        as the config says (the tiny attention's), so tools that size caches from the config agree with the model;
        gMLP, which has no attention (0 heads), keeps none. Every layer also holds the gates (batch, tokens, gate
        channels)."""
        for model, inputs in self._generative_models():
            batch_size, prompt_length = inputs["input_ids"].shape
            output = model.generate(
                **inputs, do_sample=False, max_new_tokens=self.max_new_tokens, return_dict_in_generate=True
            )
            config, tokens = model.config, prompt_length + self.max_new_tokens - 1  # the last token is not run
            expected = (batch_size, config.num_attention_heads, tokens, config.head_dim)
            self.assertEqual(len(output.cache.layers), config.num_hidden_layers)
            for layer in output.cache.layers:
                if config.num_attention_heads:
                    self.assertEqual((tuple(layer.keys.shape), tuple(layer.values.shape)), (expected, expected))
                else:
                    self.assertTrue(layer.keys is None and layer.values is None)
                self.assertEqual(tuple(layer.gates.shape), (batch_size, tokens, config.gate_size))

    def test_sample_generate_is_seeded(self):
        for model, inputs in self._generative_models():
            outputs = []
            for _ in range(2):
                torch.manual_seed(0)
                outputs.append(
                    model.generate(
                        **inputs, do_sample=True, top_k=10, max_new_tokens=self.max_new_tokens, num_return_sequences=2
                    )
                )
            batch_size, prompt_length = inputs["input_ids"].shape
            self.assertEqual(outputs[0].shape, (2 * batch_size, prompt_length + self.max_new_tokens))
            self.assertTrue(torch.equal(outputs[0], outputs[1]))
            self.assertTrue(torch.equal(outputs[0][::2, :prompt_length], inputs["input_ids"]))

    def test_beam_search_generate(self):
        for model, inputs in self._generative_models():
            output = model.generate(
                **inputs,
                do_sample=False,
                num_beams=2,
                num_return_sequences=2,
                max_new_tokens=self.max_new_tokens,
                return_dict_in_generate=True,
                output_scores=True,
            )
            self.assertIsInstance(output, GenerateBeamDecoderOnlyOutput)
            batch_size, prompt_length = inputs["input_ids"].shape
            self.assertEqual(output.sequences.shape, (2 * batch_size, prompt_length + self.max_new_tokens))
            self.assertEqual(output.sequences_scores.shape, (2 * batch_size,))
            # Beams come back best first.
            scores = output.sequences_scores.view(batch_size, 2)
            self.assertTrue(bool((scores[:, 0] >= scores[:, 1]).all()))

    def test_generate_from_inputs_embeds(self):
        for model, inputs in self._generative_models():
            inputs_embeds = model.get_input_embeddings()(inputs["input_ids"])
            from_ids = model.generate(**inputs, do_sample=False, max_new_tokens=self.max_new_tokens)
            from_embeds = model.generate(
                inputs_embeds=inputs_embeds,
                attention_mask=inputs["attention_mask"],
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
            )
            # From embeddings alone `generate` returns only the new tokens.
            self.assertTrue(torch.equal(from_embeds, from_ids[:, inputs["input_ids"].shape[1] :]))

    def test_generate_with_compiled_forward(self):
        """`forward` compiles without graph breaks (`fullgraph=True`) and gives eager's tokens, with and without the
        cache.

        Without the cache each step is one token longer, so the sequence axis must stay symbolic: a recompilation per
        generated token is an error there. With the (dynamic) cache the prefill and the one-token steps are two
        graphs. The `eager` backend runs TorchDynamo's capture, which is where graph breaks and shape
        specialisations arise, without the minutes of Inductor code generation on CPU.
        """
        for model, inputs in self._generative_models():
            for use_cache in (False, True):
                torch._dynamo.reset()
                kwargs = {"do_sample": False, "max_new_tokens": self.max_new_tokens, "use_cache": use_cache}
                eager = model.generate(**inputs, **kwargs)
                compiled_model = copy.deepcopy(model)
                compiled_model.forward = torch.compile(
                    compiled_model.forward, fullgraph=True, dynamic=True, backend="eager"
                )
                with torch._dynamo.config.patch(error_on_recompile=not use_cache):
                    compiled = compiled_model.generate(**inputs, **kwargs)
                self.assertTrue(torch.equal(eager, compiled))

    def _check_padding_matches_padding_free(self, attn_implementation: str):
        """The padded (left-padded) batch and the same rows packed by `DataCollatorWithFlattening` into one row longer
        than n, each sequence's positions restarting at 0: the same logits at every real token, at fp32 tolerance,
        with spatial weights far from their near-zero init."""
        for model_class in self.all_generative_model_classes:
            config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
            mask = inputs["attention_mask"]
            if not bool(mask[:, -1].all()):
                mask = mask.flip(1)  # left padding, as a causal LM's prompts have it
            real = mask.bool()
            config.max_position_embeddings = mask.shape[1]  # the padded width: the packed row is longer
            torch.manual_seed(0)
            model = model_class(config).to(torch_device).eval()
            model.set_attn_implementation(attn_implementation)
            with torch.no_grad():
                for layer in model.gmlp.encoder.layer:
                    layer.sgu.spatial_proj.weight.normal_()
            features = [{"input_ids": ids[keep].tolist()} for ids, keep in zip(inputs["input_ids"], real)]
            packed = DataCollatorWithFlattening(return_tensors="pt")(features)
            self.assertGreater(packed["input_ids"].shape[1], config.max_position_embeddings)
            with torch.no_grad():
                padded = model(input_ids=inputs["input_ids"], attention_mask=mask, use_cache=False).logits
                padding_free = model(
                    input_ids=packed["input_ids"].to(torch_device),
                    position_ids=packed["position_ids"].to(torch_device),
                    use_cache=False,
                ).logits
            torch.testing.assert_close(padding_free[0], padded[real], rtol=1e-5, atol=1e-5)

    def test_eager_padding_matches_padding_free_with_position_ids(self):
        self._check_padding_matches_padding_free("eager")

    def test_sdpa_padding_matches_padding_free_with_position_ids(self):
        self._check_padding_matches_padding_free("sdpa")
