"""`sparse_prediction=True` (a forward argument): in training, the vocabulary projection only at labelled positions gives the same loss,
gradients and (labelled) logits as the full path; evaluation and the default keep the full logits."""

import torch

from gmlp import GMLPConfig, GMLPForMaskedLM


def tiny_model_and_batch():
    torch.manual_seed(0)
    config = GMLPConfig.from_preset(
        "gmlp-tiny",
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = GMLPForMaskedLM(config).train()  # dropout is 0: training mode is deterministic
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


def test_sparse_prediction_matches_full_loss_logits_and_gradients():
    model, input_ids, labels, labelled = tiny_model_and_batch()
    full_loss, full_logits, full_grads = loss_logits_and_grads(model, input_ids, labels)
    sparse_loss, sparse_logits, sparse_grads = loss_logits_and_grads(model, input_ids, labels, sparse_prediction=True)

    assert full_logits.shape == (3, 16, 97)
    assert sparse_logits.shape == (int(labelled.sum()), 97)
    torch.testing.assert_close(sparse_logits, full_logits[labelled], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sparse_loss, full_loss, rtol=1e-6, atol=1e-6)
    assert full_grads.keys() == sparse_grads.keys()
    for name, grad in full_grads.items():
        torch.testing.assert_close(sparse_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_sparse_prediction_keeps_full_logits_without_labels_and_in_evaluation():
    model, input_ids, labels, _ = tiny_model_and_batch()
    expected = model(input_ids=input_ids, labels=labels)
    torch.testing.assert_close(model(input_ids=input_ids, sparse_prediction=True).logits, expected.logits)
    evaluated = model.eval()(input_ids=input_ids, labels=labels, sparse_prediction=True)
    assert evaluated.logits.shape == (3, 16, 97)
    torch.testing.assert_close(evaluated.logits, expected.logits)
    torch.testing.assert_close(evaluated.loss, expected.loss)


def test_sparse_prediction_is_off_by_default_and_never_saved(tmp_path):
    model, input_ids, labels, _ = tiny_model_and_batch()
    model.save_pretrained(tmp_path)
    assert "sparse_prediction" not in (tmp_path / "config.json").read_text()
    assert model(input_ids=input_ids, labels=labels).logits.shape == (3, 16, 97)
