"""The models' own checks of their inputs and labels: ids outside the embeddings, labels that fit no problem type, and
labels whose shape does not match the inputs, each one clear error naming the value or the shapes; valid inputs pass.

Values are read on the CPU in eager mode only (`first_out_of_range`: on an accelerator a read would synchronise every
step, and while compiling it would break the graph), so those tests run in the CPU pass; the shape checks cost
nothing and run on every device."""

import re

import pytest
import torch
from helpers import assert_close, seeded
from torch.nn import functional as F

from gmlp import (
    GMLPForCausalLM,
    GMLPForImageClassification,
    GMLPForMaskedLM,
    GMLPForMultipleChoice,
    GMLPForQuestionAnswering,
    GMLPForSequenceClassification,
    GMLPForTokenClassification,
    GMLPModel,
)

# Every test builds its models and inputs on the selected device (conftest.py's --device).
pytestmark = pytest.mark.usefixtures("on_device")

VALUES_ON_THE_CPU = (
    "the model reads ids on the CPU only, by design (no synchronisation per step); on every device the scripts' "
    "collator checks them: tests/model/test_devices.py"
)


def random_ids(batch=2, length=10, vocab=64, seed=0):
    return seeded(torch.randint, 5, vocab, (batch, length), seed=seed)


# ---- ids outside the embeddings ---------------------------------------------------------------------------------
TEXT_HEADS = {
    "bare": (GMLPModel, {}),
    "masked lm": (GMLPForMaskedLM, {}),
    "causal lm": (GMLPForCausalLM, {"is_decoder": True}),
    "sequence classification": (GMLPForSequenceClassification, {}),
    "token classification": (GMLPForTokenClassification, {}),
    "question answering": (GMLPForQuestionAnswering, {}),
    "multiple choice": (GMLPForMultipleChoice, {}),
}


def as_inputs(head: str, tensor: torch.Tensor) -> torch.Tensor:
    """(batch, length) inputs in the head's form: multiple choice takes (batch, choices, length)."""
    return tensor[:, None] if head == "multiple choice" else tensor


@pytest.mark.cpu_only(VALUES_ON_THE_CPU)
@pytest.mark.parametrize("head", sorted(TEXT_HEADS))
def test_an_input_id_outside_the_vocabulary_is_named_with_its_likely_cause(head, tiny_config):
    model_class, settings = TEXT_HEADS[head]
    model = model_class(tiny_config(**settings))
    ids = random_ids(2, 6)
    ids[1, 3] = 3012
    with pytest.raises(ValueError) as error:
        model(as_inputs(head, ids))
    assert str(error.value) == (
        "input_ids holds 3012, outside the model's token ids 0..63 (config.vocab_size = 64): the tokenizer is "
        "probably larger than the model; use the tokenizer the model was trained with, or resize the embeddings "
        "(`model.resize_token_embeddings(len(tokenizer))`)."
    )
    ids[1, 3] = -100
    with pytest.raises(ValueError, match=r"input_ids holds -100, outside the model's token ids 0\.\.63 .*: ids are "):
        model(as_inputs(head, ids))


@pytest.mark.cpu_only(VALUES_ON_THE_CPU)
def test_a_token_type_the_model_has_not_is_named_with_its_likely_cause(tiny_config):
    ids = random_ids(2, 6)
    pair = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
    single_type = GMLPModel(tiny_config(type_vocab_size=1))
    with pytest.raises(ValueError) as error:
        single_type(ids, token_type_ids=pair)
    assert str(error.value) == (
        "token_type_ids holds 1, outside the model's token types 0..0 (config.type_vocab_size = 1): the tokenizer "
        "gives token types the model was not trained with (e.g. a second segment for sentence pairs); leave "
        "token_type_ids out (`tokenizer(..., return_token_type_ids=False)`) or use the model's own tokenizer."
    )
    model = GMLPModel(tiny_config())
    assert model.config.type_vocab_size == 2  # the default: BERT's two segments
    with pytest.raises(ValueError, match=r"token_type_ids holds 2, outside the model's token types 0\.\.1 "):
        model(ids, token_type_ids=pair * 2)
    with pytest.raises(ValueError, match=r"token_type_ids holds -1, .*ids are never negative"):
        model(ids, token_type_ids=pair - 1)


def test_ids_and_labels_at_the_ends_of_their_ranges_pass(tiny_config):
    """The last id of each embedding, the first, and -100 labels: no error, and the model's usual loss."""
    model = GMLPForMaskedLM(tiny_config()).eval()
    ids = torch.tensor([[0, 63, 5, 62], [63, 1, 0, 7]])
    types = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    labels = torch.full_like(ids, -100)
    labels[:, 1] = torch.tensor([63, 0])
    out = model(ids, token_type_ids=types, labels=labels)
    assert_close(out.loss, F.cross_entropy(out.logits[:, 1], labels[:, 1]))


@pytest.mark.cpu_only(VALUES_ON_THE_CPU)
def test_resized_embeddings_take_the_new_ids_and_refuse_past_them(tiny_config):
    model = GMLPForMaskedLM(tiny_config())
    model.resize_token_embeddings(80)
    assert model(torch.tensor([[70, 79]])).logits.shape == (1, 2, 80)
    with pytest.raises(ValueError, match=r"input_ids holds 80, outside the model's token ids 0\.\.79 "):
        model(torch.tensor([[70, 80]]))


@pytest.mark.cpu_only("builds its own model on the meta device")
def test_ids_are_not_read_off_the_cpu(tiny_config):
    """Off the CPU (here the meta device, whose tensors hold no values: any read fails) nothing is read, as on an
    accelerator, where a read would synchronise every step. (Compiled, nothing is read either:
    tests/ecosystem/test_deploy.py compiles with fullgraph=True, which fails at any graph break.)"""
    with torch.device("meta"):
        model = GMLPForMaskedLM(tiny_config())
        ids = torch.full((2, 6), 3012)
        assert model(ids, token_type_ids=ids, labels=ids).logits.device.type == "meta"


# ---- labels and problem types -----------------------------------------------------------------------------------
def classifier(kind: str, tiny_config, tiny_vision_config, **settings):
    """A 3-class classifier of `kind` (text or image, the same loss code) and inputs for a batch of four."""
    if kind == "image":
        model = GMLPForImageClassification(tiny_vision_config(**settings))
        return model.eval(), {"pixel_values": seeded(torch.randn, 4, 3, 16, 16, seed=0)}
    return GMLPForSequenceClassification(tiny_config(num_labels=3, **settings)).eval(), {"input_ids": random_ids(4, 6)}


@pytest.mark.parametrize("kind", ["text", "image"])
def test_labels_that_fit_no_problem_type_are_refused_and_leave_the_config_as_it_was(
    kind, tiny_config, tiny_vision_config
):
    model, inputs = classifier(kind, tiny_config, tiny_vision_config)
    before = model.config.to_dict()
    float_ids = torch.tensor([0.0, 2.0, 1.0, 2.0])
    message = (
        "The labels of shape (4,) and dtype float32 (logits of shape (4, 3)) fit no problem type of this 3-label "
        "classifier: single-label classification takes integer class ids of shape (4,) (`labels.long()` if these are "
        "class ids), multi-label classification multi-hot float targets of shape (4, 3), and regression a model with "
        "num_labels=1."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        model(**inputs, labels=float_ids)
    assert model.config.problem_type is None and model.config.to_dict() == before
    with pytest.raises(ValueError, match=re.escape("The labels of shape (4, 3) and dtype int64")):
        model(**inputs, labels=torch.ones(4, 3, dtype=torch.long))  # multi-hot, but integers
    assert model.config.to_dict() == before
    out = model(**inputs, labels=float_ids.long())
    assert_close(out.loss, F.cross_entropy(out.logits, float_ids.long()))
    assert model.config.problem_type == "single_label_classification"


def test_labels_that_do_not_fit_the_configured_problem_type_name_both(tiny_config):
    model, inputs = GMLPForSequenceClassification(tiny_config(num_labels=3)).eval(), {"input_ids": random_ids(4, 6)}
    multi_hot = torch.tensor([[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]], dtype=torch.float)
    model(**inputs, labels=multi_hot)
    assert model.config.problem_type == "multi_label_classification"
    with pytest.raises(ValueError) as error:
        model(**inputs, labels=torch.tensor([0, 2, 1, 2]))
    assert str(error.value) == (
        "config.problem_type is 'multi_label_classification', which takes multi-hot float targets of shape (4, 3), "
        "but got labels of shape (4,) and dtype int64 (logits of shape (4, 3)): give labels of that form, or use a "
        "model whose problem_type is the one these labels pose."
    )
    # Integer multi-hot targets fit a model configured as multi-label: converted to floats.
    out = model(**inputs, labels=multi_hot.long())
    assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, multi_hot))

    single = GMLPForSequenceClassification(tiny_config(num_labels=3, problem_type="single_label_classification"))
    with pytest.raises(ValueError, match=re.escape("'single_label_classification', which takes integer class ids of")):
        single(**inputs, labels=multi_hot)
    regression = GMLPForSequenceClassification(tiny_config(num_labels=1))
    with pytest.raises(ValueError, match=re.escape("regressor, which takes targets of shape (4, 1) or (4,), but got")):
        regression(**inputs, labels=torch.zeros(4, 2))
    assert regression.config.problem_type is None


# ---- label shapes -----------------------------------------------------------------------------------------------
def test_labels_of_another_shape_than_the_inputs_are_named_as_shapes(tiny_config):
    ids = random_ids(2, 10)
    token_labels = random_ids(2, 11)
    for model in (
        GMLPForMaskedLM(tiny_config()),
        GMLPForCausalLM(tiny_config(is_decoder=True)),
        GMLPForTokenClassification(tiny_config(num_labels=5, vocab_size=64)),
    ):
        with pytest.raises(ValueError) as error:
            model(ids, labels=token_labels % 5)
        assert str(error.value) == (
            "labels have shape (2, 11) but the inputs (2, 10): one label per input token, -100 where no loss is wanted."
        ), type(model).__name__
    with pytest.raises(ValueError, match=re.escape("labels have shape (2, 3) but the inputs (2, 3, 10): one choice ")):
        GMLPForMultipleChoice(tiny_config())(ids[:, None].expand(2, 3, 10), labels=torch.zeros(2, 3, dtype=torch.long))
    qa = GMLPForQuestionAnswering(tiny_config())
    one, two = torch.tensor([1, 2]), torch.tensor([[1, 2], [2, 3]])
    with pytest.raises(ValueError, match=re.escape("end_positions have shape (2, 2) but the inputs (2, 10): one ")):
        qa(ids, start_positions=one, end_positions=two)
    with torch.no_grad():  # (batch, 1), as Transformers' loss takes them too
        assert_close(
            qa(ids, start_positions=one, end_positions=one[:, None]).loss,
            qa(ids, start_positions=one, end_positions=one).loss,
        )
    with pytest.raises(ValueError, match=re.escape("start_positions have shape (3,) but the inputs (2, 10): one ")):
        qa(ids, start_positions=torch.tensor([1, 2, 3]), end_positions=one)
