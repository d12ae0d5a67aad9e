"""The stock Transformers pipelines run gMLP models, with a small tokenizer made here, and agree with the model."""

import pytest
import torch
from transformers import BertTokenizer, pipeline

from gmlp import (
    GMLPForCausalLM,
    GMLPForMaskedLM,
    GMLPForSequenceClassification,
    GMLPForTokenClassification,
)

WORDS = [
    "the",
    "cat",
    "dog",
    "sat",
    "on",
    "a",
    "mat",
    "ran",
    "to",
    "park",
    "who",
    "where",
    "did",
    "go",
    "sun",
    "is",
    "hot",
    "cold",
    "day",
    "night",
]


@pytest.fixture(scope="module")
def tokenizer():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?"] + WORDS
    return BertTokenizer(vocab={token: i for i, token in enumerate(vocab)}, model_max_length=32)


# The sizes of these tests, over the tiny defaults (conftest.py).
PIPELINE_SIZES = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "max_position_embeddings": 32,
    "spatial_init_eps": 32.0,
    "tiny_attention_size": 8,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
}


def test_fill_mask_pipeline_ranks_tokens_by_the_models_logits(tiny_config, tokenizer):
    model = GMLPForMaskedLM(tiny_config(PIPELINE_SIZES, vocab_size=len(tokenizer))).eval()
    fill_mask = pipeline("fill-mask", model=model, tokenizer=tokenizer, device="cpu")
    text = "the cat sat on the [MASK] ."
    predictions = fill_mask(text, top_k=3)
    inputs = tokenizer(text, return_tensors="pt")
    position = (inputs.input_ids[0] == tokenizer.mask_token_id).nonzero().item()
    with torch.no_grad():
        probabilities = model(**inputs).logits[0, position].softmax(-1)
    top = probabilities.topk(3)
    assert [p["token"] for p in predictions] == top.indices.tolist()
    for prediction, score in zip(predictions, top.values.tolist()):
        assert prediction["score"] == pytest.approx(score, rel=1e-5)
        assert "[MASK]" not in prediction["sequence"]


def test_text_classification_pipeline_returns_the_softmax_of_the_logits(tiny_config, tokenizer):
    config = tiny_config(
        PIPELINE_SIZES,
        vocab_size=len(tokenizer),
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    model = GMLPForSequenceClassification(config).eval()
    classifier = pipeline("text-classification", model=model, tokenizer=tokenizer, device="cpu")
    scores = classifier(["the sun is hot", "the night is cold ."], top_k=None)
    for text, result in zip(["the sun is hot", "the night is cold ."], scores):
        with torch.no_grad():
            probabilities = model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)[0]
        by_label = {entry["label"]: entry["score"] for entry in result}
        assert by_label["negative"] == pytest.approx(probabilities[0].item(), rel=1e-5)
        assert by_label["positive"] == pytest.approx(probabilities[1].item(), rel=1e-5)


def test_a_model_given_multi_hot_labels_saves_a_pipeline_that_applies_a_sigmoid(tiny_config, tokenizer, tmp_path):
    """Float labels of shape (batch, num_labels) make a classifier multi-label, in its saved config too, so that the
    pipeline scores each label with a sigmoid; float labels that fit no problem type (one per example for 3 labels)
    are refused first, leaving the config as it was."""
    labels = {0: "hot", 1: "cold", 2: "animal"}
    config = tiny_config(
        PIPELINE_SIZES,
        vocab_size=len(tokenizer),
        num_labels=3,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    torch.manual_seed(0)
    model = GMLPForSequenceClassification(config)
    batch = tokenizer(["the sun is hot", "the cat is cold ."], padding=True, return_tensors="pt")
    with pytest.raises(ValueError, match=r"labels of shape \(2,\) and dtype float32 .* fit no problem type"):
        model(**batch, labels=torch.tensor([0.0, 1.0]))
    assert model.config.problem_type is None
    model(**batch, labels=torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]))  # a training step's forward
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    saved = GMLPForSequenceClassification.from_pretrained(tmp_path).eval()
    assert saved.config.problem_type == "multi_label_classification"
    classifier = pipeline("text-classification", model=str(tmp_path), device="cpu")
    text = "the cat is hot"
    scores = {entry["label"]: entry["score"] for entry in classifier(text, top_k=None)}
    with torch.no_grad():
        probabilities = saved(**tokenizer(text, return_tensors="pt")).logits.sigmoid()[0]
    assert probabilities.sum() > 1.05  # a softmax's would sum to 1: the scores tell the two apart
    for index, name in labels.items():
        assert scores[name] == pytest.approx(probabilities[index].item(), rel=1e-5)


def test_token_classification_pipeline_labels_every_word(tiny_config, tokenizer):
    config = tiny_config(
        PIPELINE_SIZES,
        vocab_size=len(tokenizer),
        num_labels=3,
        id2label={0: "O", 1: "ANIMAL", 2: "PLACE"},
        label2id={"O": 0, "ANIMAL": 1, "PLACE": 2},
    )
    model = GMLPForTokenClassification(config).eval()
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, device="cpu")
    entities = tagger("the dog ran to the park")
    inputs = tokenizer("the dog ran to the park", return_tensors="pt")
    with torch.no_grad():
        predicted = model(**inputs).logits[0, 1:-1].argmax(-1).tolist()
    expected = [
        (word, config.id2label[label]) for word, label in zip(["the", "dog", "ran", "to", "the", "park"], predicted)
    ]
    assert [(entity["word"], entity["entity"]) for entity in entities] == [
        (word, label) for word, label in expected if label != "O"
    ]


def test_text_generation_pipeline_continues_the_prompt_greedily(tiny_config, tokenizer):
    model = GMLPForCausalLM(tiny_config(PIPELINE_SIZES, vocab_size=len(tokenizer), is_decoder=True)).eval()
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer, device="cpu")
    token_ids = generator("the cat", max_new_tokens=5, do_sample=False, return_tensors=True)[0]["generated_token_ids"]
    text = generator("the cat", max_new_tokens=5, do_sample=False)[0]["generated_text"]
    prompt = tokenizer("the cat", return_tensors="pt").input_ids
    expected = model.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=0)[0]
    assert token_ids == expected.tolist() and len(token_ids) == prompt.shape[1] + 5
    assert text.startswith("the cat")
    assert text.endswith(tokenizer.decode(expected[prompt.shape[1] :], skip_special_tokens=True))
