"""gMLP and aMLP held to Transformers' own standard: the library's common model tests (`ModelTesterMixin` of the installed version, fetched at test time).

Laid out like Transformers' `tests/models/bert/test_modeling_bert.py`: a `GMLPModelTester` builds tiny configs and
inputs, and each test class runs every common test over its `all_model_classes`. `GMLPForCausalLM` needs a causal
config (`is_decoder=True`), so the encoder heads and the causal LM have separate classes, for gMLP and for aMLP
(`tiny_attention_size > 0`, whose tiny attention gives `output_attentions` something to return).

The common tests that do not apply (attention backends such as sdpa/flash/flex, position embeddings, RoPE, key/value
caches, experts, tensor parallelism, accelerators) skip themselves, each with its reason, from what the model declares
(`has_attentions`, `_supports_sdpa`, no position embeddings, ...); `pytest -rs` lists them. One is skipped here by hand
for gMLP without attention: `test_flex_attention_with_grads` (a GPU test) resizes the attention heads to 16 channels,
which for gMLP's 0 heads sets `head_dim` (the tiny attention's size) and so turns the gMLP under test into an aMLP, then
divides by its 0 heads (ZeroDivisionError on an H200); the aMLP classes run it.

The tester only builds configs and inputs: each head's outputs are checked by value in tests/model/test_modeling.py, and
the common tests run every class. They run on the selected device (conftest.py's --device), which Transformers'
`torch_device` follows.
"""

import unittest
from unittest import mock

import pytest
import torch
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES,
    MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES,
    MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES,
    MODEL_MAPPING_NAMES,
)
from transformers.testing_utils import require_torch
from transformers_common import upstream
from transformers_common.generation_tester import GenerationTesterMixin

from gmlp import (
    GMLPConfig,
    GMLPForCausalLM,
    GMLPForMaskedLM,
    GMLPForMultipleChoice,
    GMLPForQuestionAnswering,
    GMLPForSequenceClassification,
    GMLPForTokenClassification,
    GMLPModel,
)

# Transformers' own common tests, from the installed version's source distribution (fetched once, then cached).
ConfigTester = upstream.load("test_configuration_common").ConfigTester
modeling_common = upstream.load("test_modeling_common")
ModelTesterMixin, ids_tensor, random_attention_mask = (
    modeling_common.ModelTesterMixin,
    modeling_common.ids_tensor,
    modeling_common.random_attention_mask,
)

# The common tests tell a model's task (which inputs to expand per choice, which labels `return_labels=True` builds,
# which class is the bare base model) by its class name in the Auto `*_MAPPING_NAMES` tables of the library's own
# models. gMLP registers through `Auto*.register` instead (gmlp/__init__.py), so this module adds it to those tables.
TASK_TABLES = {
    "MODEL_MAPPING_NAMES": (MODEL_MAPPING_NAMES, GMLPModel),
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": (MODEL_FOR_MASKED_LM_MAPPING_NAMES, GMLPForMaskedLM),
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, GMLPForCausalLM),
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": (
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
        GMLPForSequenceClassification,
    ),
    "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES": (MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES, GMLPForMultipleChoice),
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": (
        MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES,
        GMLPForTokenClassification,
    ),
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES": (
        MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES,
        GMLPForQuestionAnswering,
    ),
}
_task_table_patches = [
    mock.patch.dict(table, {"gmlp": model_class.__name__}) for table, model_class in TASK_TABLES.values()
]
# Device-aware: the tests run on the selected device (conftest.py's --device), which `torch_device` follows.
pytestmark = pytest.mark.usefixtures("device")


def setUpModule():
    for patch in _task_table_patches:
        patch.start()


def tearDownModule():
    for patch in _task_table_patches:
        patch.stop()


class GMLPModelTester:
    def __init__(
        self,
        parent,
        batch_size=3,
        seq_length=7,
        is_training=True,
        vocab_size=99,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        max_position_embeddings=16,
        type_vocab_size=2,
        tiny_attention_size=0,
        is_decoder=False,
        num_labels=3,
        num_choices=4,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.tiny_attention_size = tiny_attention_size
        self.is_decoder = is_decoder
        self.num_labels = num_labels
        self.num_choices = num_choices
        # aMLP's tiny attention is a single head (paper, Figure 6).
        self.num_attention_heads = 1

    def get_config(self):
        return GMLPConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            tiny_attention_size=self.tiny_attention_size,
            is_decoder=self.is_decoder,
            num_labels=self.num_labels,
        )

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        if self.is_decoder:
            # Causal rows are padded at their end (as a causal LM's batches are): a gap between real tokens would
            # still count as a position.
            lengths = ids_tensor([self.batch_size], self.seq_length // 2) + (self.seq_length + 1) // 2
            attention_mask = (torch.arange(self.seq_length, device=lengths.device) < lengths[:, None]).long()
        else:
            attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        token_type_ids = ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size)
        inputs_dict = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}
        return self.get_config(), inputs_dict


@require_torch
class GMLPModelTest(ModelTesterMixin, unittest.TestCase):
    """The encoder heads of gMLP (no tiny attention)."""

    all_model_classes = (
        GMLPModel,
        GMLPForMaskedLM,
        GMLPForMultipleChoice,
        GMLPForQuestionAnswering,
        GMLPForSequenceClassification,
        GMLPForTokenClassification,
    )
    tiny_attention_size = 0
    is_decoder = False
    # The common test infers a model's age from a copyright year in its config file and only checks models from
    # 2023 on unless this is set; gMLP's `_init_weights` must initialise every weight (meta device, partial loads).
    test_can_init_all_missing_weights_before_2023 = True

    @property
    def has_attentions(self):
        return self.tiny_attention_size > 0

    def setUp(self):
        self.model_tester = GMLPModelTester(
            self, tiny_attention_size=self.tiny_attention_size, is_decoder=self.is_decoder
        )
        self.config_tester = ConfigTester(
            self,
            config_class=GMLPConfig,
            hidden_size=37,
            intermediate_size=64,
            common_properties=["hidden_size", "num_hidden_layers"],
        )

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_flex_attention_with_grads(self):
        if not self.has_attentions:
            self.skipTest(reason="gMLP without tiny attention has no attention heads to run flex attention in")
        ModelTesterMixin.test_flex_attention_with_grads(self)


class AMLPModelTest(GMLPModelTest):
    """aMLP: gMLP with a single-head tiny attention in every gate.

    The tiny attention lives in the base model's blocks; the heads on top are the same modules as gMLP's (tested
    above), so the base, a token-level head and the multiple-choice head (which folds choices into the batch of the
    returned attentions) cover it.
    """

    all_model_classes = (GMLPModel, GMLPForMaskedLM, GMLPForMultipleChoice)
    tiny_attention_size = 8


@require_torch
class GMLPForCausalLMModelTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    """The causal model (`is_decoder=True`: lower-triangular W) and its base, with `generate`."""

    # The causal base model is checked as the causal LM's `gmlp`.
    all_model_classes = (GMLPForCausalLM,)
    tiny_attention_size = 0
    is_decoder = True

    test_can_init_all_missing_weights_before_2023 = True
    has_attentions = GMLPModelTest.has_attentions
    setUp = GMLPModelTest.setUp
    test_config = GMLPModelTest.test_config
    test_flex_attention_with_grads = GMLPModelTest.test_flex_attention_with_grads


class AMLPForCausalLMModelTest(GMLPForCausalLMModelTest):
    """aMLP's causal model: causal W and causal tiny attention."""

    tiny_attention_size = 8
