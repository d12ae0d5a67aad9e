"""`sparse_prediction=True` (a forward argument): in training, the vocabulary projection only at labelled positions gives the same loss,
gradients and (labelled) logits as the full path; evaluation and the default keep the full logits.

Every test builds its model and batch on the selected device and in the selected dtype (conftest.py's --device and
--dtype)."""

import pytest
import torch
from helpers import assert_close

from gmlp import GMLPForMaskedLM

pytestmark = pytest.mark.usefixtures("on_device")


@pytest.fixture
def model_and_batch(tiny_config, dtype):
    torch.manual_seed(0)
    model = GMLPForMaskedLM(tiny_config(vocab_size=97, intermediate_size=64)).train().to(dtype)  # dropout is 0
    input_ids = torch.randint(1, 97, (3, 16))
    labels = torch.full_like(input_ids, -100)
    labelled = torch.rand(3, 16) < 0.3
    labelled[0, 0] = True
    labels[labelled] = torch.randint(0, 97, (int(labelled.sum()),))
    return model, input_ids, labels, labelled


def loss_logits_and_grads(model, input_ids, labels, **kwargs):
    model.zero_grad()
    output = model(input_ids=input_ids, labels=labels, **kwargs)
    output.loss.backward()
    grads = {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}
    return output.loss.detach(), output.logits.detach(), grads


def test_sparse_prediction_matches_full_loss_logits_and_gradients(model_and_batch):
    model, input_ids, labels, labelled = model_and_batch
    full_loss, full_logits, full_grads = loss_logits_and_grads(model, input_ids, labels)
    sparse_loss, sparse_logits, sparse_grads = loss_logits_and_grads(model, input_ids, labels, sparse_prediction=True)

    assert full_logits.shape == (3, 16, 97)
    assert sparse_logits.shape == (int(labelled.sum()), 97)
    assert_close(sparse_logits, full_logits[labelled], rtol=1e-5, atol=1e-5)
    assert_close(sparse_loss, full_loss, rtol=1e-6, atol=1e-6)
    assert full_grads.keys() == sparse_grads.keys()
    for name, grad in full_grads.items():
        assert_close(sparse_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_sparse_prediction_keeps_full_logits_without_labels_and_in_evaluation(model_and_batch):
    model, input_ids, labels, _ = model_and_batch
    expected = model(input_ids=input_ids, labels=labels)
    assert_close(model(input_ids=input_ids, sparse_prediction=True).logits, expected.logits)
    evaluated = model.eval()(input_ids=input_ids, labels=labels, sparse_prediction=True)
    assert evaluated.logits.shape == (3, 16, 97)
    assert_close(evaluated.logits, expected.logits)
    assert_close(evaluated.loss, expected.loss)


def test_sparse_prediction_is_off_by_default_and_never_saved(model_and_batch, tmp_path):
    model, input_ids, labels, _ = model_and_batch
    model.save_pretrained(tmp_path)
    assert "sparse_prediction" not in (tmp_path / "config.json").read_text()
    assert model(input_ids=input_ids, labels=labels).logits.shape == (3, 16, 97)
