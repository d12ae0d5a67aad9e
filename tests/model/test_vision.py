"""gMLP for images: config and Table 1 presets, the vision model, Auto classes and remote code, the image processor
and pipeline, timm weight conversion (logits equal to timm's), and a Trainer run on scikit-learn's digits."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from helpers import assert_close, seeded
from PIL import Image
from timm_without_torchvision import import_timm as _import_timm
from timm_without_torchvision import timm_folder
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForImageClassification,
    pipeline,
)

from gmlp import GMLPForImageClassification, GMLPVisionConfig, GMLPVisionModel
from gmlp.convert_timm import (
    config_from_timm_state_dict,
    convert_timm_model,
    convert_timm_state_dict,
    timm_image_processor,
)
from gmlp.convert_timm import main as convert_main
from gmlp.modeling_gmlp import TokenLayout
from gmlp.tasks import run_image_classification
from gmlp.tasks.image_classification import image_processor_for, load_digits_dataset

# The model's tests build their models and inputs on the selected device (conftest.py's --device); those marked
# cpu_only are about files, processors, pipelines and timm's reference, on the CPU.
pytestmark = pytest.mark.usefixtures("on_device")
TIMM_ON_THE_CPU = pytest.mark.cpu_only("timm's reference model and the checkpoint conversion run on the CPU")


def images(batch=2, size=16, seed=0, dtype=torch.float32):
    return seeded(torch.randn, batch, 3, size, size, seed=seed).to(dtype)


# Table 1 of the paper: #L, d_model, d_ffn, Params (M), survival probability. The counts include the 1000-class
# ImageNet head; gMLP-S/16's is exactly timm's gmlp_s16_224 (19,422,656).
TABLE_1 = [
    ("gmlp-ti16", 128, 768, 1.00, 5_867_328, 5.9),
    ("gmlp-s16", 256, 1536, 0.95, 19_422_656, 19.5),
    ("gmlp-b16", 512, 3072, 0.80, 73_075_392, 73.4),
]


@pytest.mark.parametrize("name, width, d_ffn, survival, parameters, paper_millions", TABLE_1)
def test_presets_reproduce_table_1(name, width, d_ffn, survival, parameters, paper_millions):
    config = GMLPVisionConfig.from_preset(name, num_labels=1000)
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (30, width, d_ffn)
    assert (config.image_size, config.patch_size, config.max_position_embeddings) == (224, 16, 196)
    assert 1 - config.drop_path_rate == pytest.approx(survival)
    with torch.device("meta"):
        model = GMLPForImageClassification(config)
    count = sum(parameter.numel() for parameter in model.parameters())
    assert count == parameters
    assert abs(count / 1e6 - paper_millions) < 0.5


def test_config_fields_the_shared_block_reads():
    config = GMLPVisionConfig(image_size=32, patch_size=4, intermediate_size=64)
    assert config.model_type == "gmlp_vision"
    assert config.max_position_embeddings == config.num_patches == 64
    assert (config.spatial_weight_type, config.is_decoder, config.tiny_attention_size) == ("dense", False, 0)
    assert config.gate_size == 32
    assert GMLPVisionConfig(intermediate_size=64, sgu_variant="additive").gate_size == 64
    assert config.auto_map["AutoModelForImageClassification"] == "modeling_gmlp.GMLPForImageClassification"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"image_size": 30, "patch_size": 4}, "`patch_size` (4) must divide `image_size` (30)"),
        ({"intermediate_size": 47}, "must be even for the split SGU"),
        ({"sgu_variant": "cubic"}, "Unknown `sgu_variant` 'cubic'"),
        ({"drop_path_rate": 1.0}, "`drop_path_rate` must be in [0, 1), got 1.0"),
        ({"num_channels": 0}, "`num_channels` must be at least 1, got 0"),
    ],
)
def test_config_rejects_impossible_models(overrides, message):
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        GMLPVisionConfig(**overrides)


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match="Unknown gMLP vision preset 'gmlp-h14'; choose one of gmlp-ti16, gmlp-s16"):
        GMLPVisionConfig.from_preset("gmlp-h14")


def test_patch_stem_is_a_linear_map_of_each_patch_in_row_major_order(tiny_vision_config, dtype):
    model = GMLPVisionModel(tiny_vision_config()).eval().to(dtype)
    pixels = images(1, dtype=dtype)
    tokens = model.embeddings(pixels)
    assert tokens.shape == (1, 16, 32)
    weight, bias = model.embeddings.projection.weight, model.embeddings.projection.bias
    for index in (0, 5, 15):
        row, column = divmod(index, 4)
        patch = pixels[0, :, 4 * row : 4 * row + 4, 4 * column : 4 * column + 4]
        expected = weight.flatten(1) @ patch.flatten() + bias
        assert_close(tokens[0, index], expected, atol=1e-5, rtol=1e-5)


def test_pooled_output_is_the_mean_of_the_final_normed_patches_and_logits_a_linear_head(tiny_vision_config, dtype):
    model = GMLPForImageClassification(tiny_vision_config()).eval().to(dtype)
    with torch.no_grad():
        outputs = model(images(dtype=dtype), output_hidden_states=True)
        base = model.gmlp(images(dtype=dtype))
    assert outputs.logits.shape == (2, 3)
    assert len(outputs.hidden_states) == 3
    assert_close(base.pooler_output, base.last_hidden_state.mean(dim=1))
    assert_close(outputs.logits, model.classifier(base.pooler_output))
    normed = base.last_hidden_state.float()
    torch.testing.assert_close(
        normed.mean(-1), torch.zeros(2, 16), atol=1e-5 if dtype == torch.float32 else 2e-2, rtol=0
    )


def test_patches_mix_only_through_the_spatial_weights(tiny_vision_config):
    config = tiny_vision_config(spatial_init_eps=0.0)  # W = 0, b = 1: every block is a per-patch FFN
    model = GMLPVisionModel(config).eval()
    changed = images(1).clone()
    changed[0, :, :4, :4] += 1.0  # patch 0 only
    with torch.no_grad():
        before, after = model(images(1)).last_hidden_state, model(changed).last_hidden_state
        assert not torch.allclose(before[0, 0], after[0, 0])
        torch.testing.assert_close(before[0, 1:], after[0, 1:])
        for layer in model.encoder.layer:
            layer.sgu.spatial_proj.weight.fill_(0.05)
        assert not torch.allclose(model(images(1)).last_hidden_state[0, 1:], model(changed).last_hidden_state[0, 1:])


def test_stochastic_depth_drops_whole_samples_and_rescales_the_kept_ones(tiny_vision_config):
    layer = GMLPVisionModel(tiny_vision_config(drop_path_rate=0.5)).encoder.layer[0]
    hidden = seeded(torch.randn, 64, 16, 32, seed=1)
    layout = TokenLayout.sequential(16, hidden.device)
    with torch.no_grad():
        update = layer.eval()(hidden, layout=layout) - hidden
        torch.manual_seed(0)
        train_update = layer.train()(hidden, layout=layout) - hidden
    kept = [bool(torch.allclose(train_update[i], update[i] / 0.5, atol=1e-5)) for i in range(64)]
    dropped = [bool(torch.equal(train_update[i], torch.zeros_like(update[i]))) for i in range(64)]
    assert all(k != d for k, d in zip(kept, dropped))
    assert 16 < sum(kept) < 48


def test_wrong_image_size_is_a_clear_error(tiny_vision_config):
    model = GMLPForImageClassification(tiny_vision_config())
    with pytest.raises(
        ValueError, match=r"Expected pixel_values of shape \(batch_size, 3, 16, 16\), got \(2, 3, 32, 32\)"
    ):
        model(images(size=32))
    with pytest.raises(ValueError, match="image processor"):
        model(torch.randn(2, 1, 16, 16))


def test_labels_give_the_cross_entropy_loss(tiny_vision_config):
    model = GMLPForImageClassification(tiny_vision_config()).eval()
    labels = torch.tensor([2, 0])
    outputs = model(images(), labels=labels)
    torch.testing.assert_close(outputs.loss, torch.nn.functional.cross_entropy(outputs.logits, labels))


@pytest.mark.cpu_only(
    "the model checks labels on the CPU only, by design; on every device the scripts' collator checks them: "
    "tests/model/test_devices.py"
)
def test_labels_out_of_range_are_a_clear_error(tiny_vision_config):
    model = GMLPForImageClassification(tiny_vision_config()).eval()
    with pytest.raises(ValueError, match=r"labels must be in \[0, 2\]"):
        model(images(), labels=torch.tensor([3, 0]))


def test_auto_classes_build_save_and_reload(tiny_vision_config, tmp_path):
    fields = {
        k: v for k, v in tiny_vision_config().to_dict().items() if k not in ("model_type", "transformers_version")
    }
    config = AutoConfig.for_model("gmlp_vision", **fields)
    assert type(config) is GMLPVisionConfig
    model = AutoModelForImageClassification.from_config(config).eval()
    assert type(model) is GMLPForImageClassification
    assert type(AutoModel.from_config(config)) is GMLPVisionModel
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert (
        saved["model_type"] == "gmlp_vision"
        and saved["auto_map"]["AutoConfig"] == "configuration_gmlp.GMLPVisionConfig"
    )
    assert (tmp_path / "modeling_gmlp.py").exists() and (tmp_path / "configuration_gmlp.py").exists()
    reloaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(images()).logits, model(images()).logits)


REMOTE_LOAD = textwrap.dedent(
    """
    import sys, torch
    from transformers import AutoModelForImageClassification
    directory, inputs_path, outputs_path = sys.argv[1:]
    model = AutoModelForImageClassification.from_pretrained(directory, trust_remote_code=True).eval()
    with torch.no_grad():
        logits = model(torch.load(inputs_path)).logits
    torch.save({"logits": logits, "module": type(model).__module__}, outputs_path)
    """
)


@pytest.mark.e2e
@pytest.mark.cpu_only("a fresh interpreter loads the checkpoint, on the CPU")
def test_remote_code_loads_without_the_package(tiny_vision_config, tmp_path):
    model = GMLPForImageClassification(tiny_vision_config()).eval()
    model.save_pretrained(tmp_path / "checkpoint")
    torch.save(images(), tmp_path / "inputs.pt")
    (tmp_path / "load.py").write_text(REMOTE_LOAD)
    run = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "load.py"),
            str(tmp_path / "checkpoint"),
            str(tmp_path / "inputs.pt"),
            str(tmp_path / "outputs.pt"),
        ],
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    result = torch.load(tmp_path / "outputs.pt")
    assert not result["module"].startswith("gmlp")
    with torch.no_grad():
        torch.testing.assert_close(result["logits"], model(images()).logits)


@pytest.mark.cpu_only("the image processor and the pipeline run on the CPU")
def test_image_processor_and_pipeline(tiny_vision_config, tmp_path):
    config = tiny_vision_config(id2label={0: "cat", 1: "dog", 2: "fox"}, label2id={"cat": 0, "dog": 1, "fox": 2})
    model = GMLPForImageClassification(config).eval()
    model.save_pretrained(tmp_path)
    image_processor_for(config).save_pretrained(tmp_path)
    processor = AutoImageProcessor.from_pretrained(tmp_path)
    picture = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 30, 3), dtype=np.uint8))
    pixels = processor(picture, return_tensors="pt")["pixel_values"]
    assert pixels.shape == (1, 3, 16, 16)
    assert -1.0 <= pixels.min() and pixels.max() <= 1.0  # rescaled to [0, 1], then normalised with mean = std = 0.5
    with torch.no_grad():
        probabilities = model(pixels).logits.softmax(-1)[0]
    predictions = pipeline("image-classification", model=str(tmp_path))(picture)
    assert [p["label"] for p in predictions] == [
        config.id2label[i] for i in probabilities.argsort(descending=True).tolist()
    ]
    assert [p["score"] for p in predictions] == pytest.approx(
        probabilities.sort(descending=True).values.tolist(), abs=1e-5
    )


def import_timm():
    """timm: the environment's, else installed on first use outside site-packages (tests/timm_without_torchvision.py);
    where it cannot be (no network), a skip saying why, and in CI a failure."""
    if importlib.util.find_spec("timm") is None:
        try:
            folder = str(timm_folder())
        except (OSError, subprocess.SubprocessError) as error:
            reason = f"timm could not be installed for the tests: {getattr(error, 'stderr', '') or error}"
            if os.environ.get("CI"):
                pytest.fail(reason)
            pytest.skip(reason)
        sys.path.append(folder)
        if importlib.util.find_spec("timm") is None:
            pytest.fail(f"GMLP_TIMM_PATH={folder} holds no timm: unset it, and the tests install timm themselves.")
    return _import_timm()


def randomize(model, seed=0):
    """timm initialises its head to zero and W to ~1e-6: perturb every weight so the comparison means something."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


@TIMM_ON_THE_CPU
def test_converted_timm_gmlp_s16_gives_timm_logits():
    timm = import_timm()
    reference = randomize(timm.create_model("gmlp_s16_224", pretrained=False))
    model = convert_timm_model(reference.state_dict())
    assert (model.config.hidden_size, model.config.intermediate_size, model.config.num_hidden_layers) == (
        256,
        1536,
        30,
    )
    assert (model.config.image_size, model.config.patch_size, model.config.num_labels) == (224, 16, 1000)
    pixels = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = reference(pixels)
        logits = model(pixels).logits
    assert expected.std() > 0.1  # not a trivial all-equal output
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


def tiny_timm_gmlp(timm):
    """timm's MlpMixer with gMLP blocks, as its `gmlp_*_224` functions build it, at a tiny size."""
    mixer = timm.models.mlp_mixer
    return randomize(
        mixer.MlpMixer(
            num_classes=5,
            img_size=32,
            patch_size=8,
            num_blocks=2,
            embed_dim=24,
            mlp_ratio=6,
            block_layer=mixer.SpatialGatingBlock,
            mlp_layer=timm.layers.GatedMlp,
        )
    )


@TIMM_ON_THE_CPU
def test_config_and_state_dict_from_a_small_timm_model():
    reference = tiny_timm_gmlp(import_timm())
    state_dict = reference.state_dict()
    config = config_from_timm_state_dict(state_dict)
    assert (config.image_size, config.patch_size, config.hidden_size) == (32, 8, 24)
    assert (config.intermediate_size, config.num_hidden_layers, config.num_labels) == (144, 2, 5)
    assert config.layer_norm_eps == 1e-6
    converted = convert_timm_state_dict(state_dict)
    torch.testing.assert_close(
        converted["gmlp.encoder.layer.1.sgu.spatial_proj.weight"][0],
        state_dict["blocks.1.mlp_channels.gate.proj.weight"],
    )
    assert converted["gmlp.encoder.layer.1.sgu.spatial_proj.bias"].shape == (1, 16)
    pixels = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(
            convert_timm_model(state_dict)(pixels).logits, reference(pixels), atol=1e-5, rtol=1e-5
        )


@TIMM_ON_THE_CPU
def test_converter_rejects_other_timm_models():
    with pytest.raises(ValueError, match="Not a timm gMLP classifier state dict: it has no stem.proj.weight"):
        config_from_timm_state_dict({"patch_embed.proj.weight": torch.zeros(1)})


@pytest.mark.e2e
@TIMM_ON_THE_CPU
def test_convert_command_line_writes_a_pipeline_ready_checkpoint(tmp_path):
    reference = tiny_timm_gmlp(import_timm())
    torch.save(reference.state_dict(), tmp_path / "timm.pth")
    convert_main(["--checkpoint", str(tmp_path / "timm.pth"), "--output", str(tmp_path / "converted")])
    processor_config = json.loads((tmp_path / "converted" / "preprocessor_config.json").read_text())
    assert processor_config["image_mean"] == pytest.approx([0.485, 0.456, 0.406])
    assert (processor_config["size"], processor_config["crop_pct"]) == ({"shortest_edge": 32}, 0.875)
    model = AutoModelForImageClassification.from_pretrained(tmp_path / "converted").eval()
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(model(pixels).logits, reference(pixels), atol=1e-5, rtol=1e-5)
    predictions = pipeline("image-classification", model=str(tmp_path / "converted"), top_k=5)(
        Image.new("RGB", (48, 48), (200, 30, 30))
    )
    assert len(predictions) == 5 and sum(p["score"] for p in predictions) == pytest.approx(1.0, abs=1e-5)


@TIMM_ON_THE_CPU
def test_timm_image_processor_resizes_to_size_over_crop_pct_then_centre_crops():
    # 32 / 0.875 = 36: an image already 36 pixels on its shorter side is only centre-cropped and normalised.
    image = np.random.default_rng(0).integers(0, 256, size=(36, 44, 3), dtype=np.uint8)
    pixels = timm_image_processor(32)(Image.fromarray(image), return_tensors="pt").pixel_values[0]
    crop = image[2:34, 6:38].astype(np.float32) / 255
    expected = (crop - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    torch.testing.assert_close(pixels, torch.from_numpy(expected.transpose(2, 0, 1)).float(), atol=1e-5, rtol=1e-5)
    larger = timm_image_processor(32)(Image.new("RGB", (120, 90)), return_tensors="pt").pixel_values
    assert larger.shape == (1, 3, 32, 32)


@pytest.mark.cpu_only("a data set, no model")
def test_digits_dataset_is_a_stratified_split_of_rgb_images():
    digits = load_digits_dataset()
    assert (len(digits["train"]), len(digits["validation"])) == (1437, 360)
    assert digits["train"].features["label"].names == [str(d) for d in range(10)]
    per_class = np.bincount(digits["train"]["label"]) + np.bincount(digits["validation"]["label"])
    assert per_class.tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert np.abs(np.bincount(digits["validation"]["label"]) - 0.2 * per_class).max() <= 1
    image = digits["train"][0]["image"]
    assert image.size == (8, 8) and image.mode == "RGB"
    pixels = np.asarray(image)
    assert set(np.unique(pixels)).issubset(set(np.round(np.arange(17) * 255 / 16)))  # 17 grey levels, 0..255
    assert (pixels[..., 0] == pixels[..., 2]).all()


@pytest.mark.e2e
@pytest.mark.cpu_only("a whole run of the script, on the CPU")
def test_run_image_classification_trains_a_tiny_model_on_digits(tmp_path):
    metrics = run_image_classification.run(
        [
            "--config_name",
            "gmlp-tiny",
            "--config_overrides",
            "hidden_size=32,intermediate_size=64,num_hidden_layers=2,image_size=16",
            "--output_dir",
            str(tmp_path / "out"),
            "--do_train",
            "--do_eval",
            "--num_train_epochs",
            "3",
            "--learning_rate",
            "4e-3",
            "--per_device_train_batch_size",
            "32",
            "--per_device_eval_batch_size",
            "120",
            "--warmup_steps",
            "10",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--disable_tqdm",
            "true",
            "--seed",
            "0",
        ]
    )
    assert metrics["eval_samples"] == 360
    assert metrics["eval_accuracy"] > 0.7  # chance is 0.1; this run gives 0.81
    classifier = pipeline("image-classification", model=str(tmp_path / "out"))
    digits = load_digits_dataset()["validation"]
    predictions = classifier([digits[i]["image"] for i in range(20)])
    correct = sum(p[0]["label"] == str(digits[i]["label"]) for i, p in enumerate(predictions))
    assert correct >= 12
