"""Padding-free (packed) batches: several sequences in one row, positions restarting at 0 for each, as
`DataCollatorWithFlattening` makes them. Each sequence gets what it gets alone: the spatial weights and the tiny
attention never reach across a boundary, a sentence classifier pools each sequence apart, and heads that cannot
honour packing refuse it. (Every head's token mixing against its padded twin: tests/model/test_paths_property.py.)"""

import pytest
import torch
from helpers import seeded

from gmlp import GMLPForQuestionAnswering, GMLPForSequenceClassification, GMLPForTokenClassification
from gmlp.tasks.collators import SentenceFlattening

LENGTHS = (9, 4, 12)  # packed: 25 tokens in a row of models with n = 16


def pack(rows):
    """The rows' tokens in one row, with positions restarting at 0 for each."""
    positions = torch.cat([torch.arange(len(row)) for row in rows])[None]
    return torch.cat(rows)[None], positions


def drawn_away(model):
    """`model` with its spatial weights and biases far from their near-zero init, in evaluation mode."""
    with torch.no_grad():
        for layer in model.gmlp.encoder.layer:
            layer.sgu.spatial_proj.weight.normal_()
            layer.sgu.spatial_proj.bias.normal_()
    return model.eval()


@pytest.fixture
def rows():
    return [seeded(torch.randint, 5, 64, (length,), seed=index) for index, length in enumerate(LENGTHS)]


@pytest.mark.parametrize("pooling", ["first", "mean"])
@pytest.mark.parametrize("tiny_attention_size", [0, 8], ids=["gmlp", "amlp"])
def test_a_packed_classifier_batch_gives_each_sequence_its_own_logits(tiny_config, rows, pooling, tiny_attention_size):
    torch.manual_seed(0)
    config = tiny_config(num_labels=3, classifier_pooling=pooling, tiny_attention_size=tiny_attention_size)
    model = drawn_away(GMLPForSequenceClassification(config))
    segments = [seeded(torch.randint, 0, 2, (length,), seed=10 + index) for index, length in enumerate(LENGTHS)]
    ids, positions = pack(rows)
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        packed = model(ids, token_type_ids=torch.cat(segments)[None], position_ids=positions, labels=labels)
        alone = [model(row[None], token_type_ids=segment[None]).logits[0] for row, segment in zip(rows, segments)]
    expected = torch.stack(alone)
    torch.testing.assert_close(packed.logits, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed.loss, torch.nn.functional.cross_entropy(expected, labels))


def test_a_packed_token_classifier_batch_equals_each_sequence_alone(tiny_config, rows):
    torch.manual_seed(0)
    model = drawn_away(GMLPForTokenClassification(tiny_config(num_labels=4, tiny_attention_size=8)))
    ids, positions = pack(rows)
    with torch.no_grad():
        packed = model(ids, position_ids=positions).logits[0]
        alone = torch.cat([model(row[None]).logits[0] for row in rows])
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)


def test_question_answering_refuses_a_packed_row_by_name(tiny_config, rows):
    model = drawn_away(GMLPForQuestionAnswering(tiny_config()))
    ids, positions = pack(rows)
    with pytest.raises(ValueError, match="one answer span per row.*Pad the batch instead"):
        model(ids, position_ids=positions)
    # explicit positions of one sequence per row are not packing: the same logits as the default positions
    with torch.no_grad():
        explicit = model(rows[0][None], position_ids=torch.arange(LENGTHS[0])[None])
        default = model(rows[0][None])
    torch.testing.assert_close(explicit.start_logits, default.start_logits)
    torch.testing.assert_close(explicit.end_logits, default.end_logits)


def test_the_sentence_flattening_collator_keeps_token_types_and_one_label_per_example():
    features = [
        {"input_ids": [2, 7, 3], "token_type_ids": [0, 0, 0], "label": 1},
        {"input_ids": [2, 8, 9, 3, 5, 3], "token_type_ids": [0, 0, 0, 0, 1, 1], "label": 0},
    ]
    batch = SentenceFlattening()(features)
    assert batch["input_ids"].tolist() == [[2, 7, 3, 2, 8, 9, 3, 5, 3]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4, 5]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 0, 0, 0, 1, 1]]
    assert batch["labels"].tolist() == [1, 0] and "attention_mask" not in batch
    regression = SentenceFlattening()([{"input_ids": [2, 3], "label": 0.5}, {"input_ids": [2, 3], "label": 2.0}])
    assert regression["labels"].dtype == torch.float and regression["labels"].tolist() == [0.5, 2.0]
