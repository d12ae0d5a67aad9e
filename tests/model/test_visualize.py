"""gmlp.visualize: the plotted values are exactly the learned spatial weights, and the pictures are written."""

import numpy as np
import pytest
import torch
from PIL import Image

from gmlp import GMLPForImageClassification, GMLPForMaskedLM, GMLPVisionConfig
from gmlp.visualize import default_patches, main, visualize

pytest.importorskip("matplotlib")


def assert_is_a_drawing(path, min_width):
    picture = np.asarray(Image.open(path).convert("L"))
    assert picture.shape[1] >= min_width
    assert picture.min() < 100 and picture.max() > 200  # ink on white, not a blank page


# The sizes of these tests' text models, over the tiny defaults (conftest.py): n = 9.
TEXT_SIZES = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 32, "max_position_embeddings": 9}


@pytest.fixture
def text_checkpoint(tmp_path, tiny_config):
    """A Toeplitz MLM whose layer l has w[k] = (l + 1) * k: W[i, j] = (l + 1) * (i - j + n - 1)."""
    model = GMLPForMaskedLM(tiny_config(TEXT_SIZES, num_hidden_layers=3, spatial_weight_type="toeplitz"))
    with torch.no_grad():
        for index, layer in enumerate(model.gmlp.encoder.layer):
            layer.sgu.spatial_proj.weight.copy_((index + 1) * torch.arange(17.0)[None])
    model.save_pretrained(tmp_path / "mlm")
    return tmp_path / "mlm"


def test_text_filters_are_the_middle_rows_of_w(text_checkpoint, tmp_path):
    filters = visualize(str(text_checkpoint), str(tmp_path / "text.png"))
    n, middle = 9, 4
    expected = np.stack([(layer + 1) * (middle - np.arange(n) + n - 1) for layer in range(3)]).astype(np.float32)
    np.testing.assert_allclose(filters, expected)
    assert_is_a_drawing(tmp_path / "text.png", min_width=300)


def test_causal_text_filters_see_only_the_past(tmp_path, tiny_config):
    model = GMLPForMaskedLM(tiny_config(TEXT_SIZES, num_hidden_layers=1, is_decoder=True, spatial_weight_type="dense"))
    with torch.no_grad():
        model.gmlp.encoder.layer[0].sgu.spatial_proj.weight.fill_(1.0)
    model.save_pretrained(tmp_path / "causal")
    filters = visualize(str(tmp_path / "causal"), str(tmp_path / "causal.png"))
    np.testing.assert_array_equal(filters[0], [1, 1, 1, 1, 1, 0, 0, 0, 0])


def test_vision_filters_are_rows_of_w_on_the_patch_grid(tmp_path):
    config = GMLPVisionConfig(image_size=16, patch_size=2, hidden_size=16, intermediate_size=32, num_hidden_layers=2)
    model = GMLPForImageClassification(config)
    weights = []
    with torch.no_grad():
        for layer in model.gmlp.encoder.layer:
            layer.sgu.spatial_proj.weight.normal_()
            weights.append(layer.sgu.spatial_proj.weight[0].clone().numpy())
    model.save_pretrained(tmp_path / "vision")
    assert default_patches(8) == [36, 18, 22, 50, 54]  # the centre and one patch per quadrant of the 8 x 8 grid
    filters = visualize(str(tmp_path / "vision"), str(tmp_path / "vision.png"), layers=[1], patches=[0, 9, 63])
    assert filters.shape == (1, 3, 8, 8)
    for column, patch in enumerate([0, 9, 63]):
        np.testing.assert_allclose(filters[0, column], weights[1][patch].reshape(8, 8))
    assert filters[0, 1, 0, 3] == pytest.approx(weights[1][9, 3])  # row 0, column 3 of the grid is patch 3
    assert_is_a_drawing(tmp_path / "vision.png", min_width=200)


def test_command_line_writes_the_png(text_checkpoint, tmp_path, capsys):
    main([str(text_checkpoint), "--output", str(tmp_path / "cli.png"), "--layers", "0,2"])
    assert "Wrote" in capsys.readouterr().out and (tmp_path / "cli.png").exists()
    assert_is_a_drawing(tmp_path / "cli.png", min_width=300)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"layers": [3]}, r"Layers \[3\] do not exist: the model has layers 0 to 2"),
        ({"head": 1}, r"Head 1 does not exist: the model has 1 SGU head"),
    ],
)
def test_bad_choices_are_clear_errors(text_checkpoint, tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        visualize(str(text_checkpoint), str(tmp_path / "x.png"), **options)
