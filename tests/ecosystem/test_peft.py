"""LoRA through PEFT on gMLP: the adapter of a sentence classifier reloads to identical logits (the head owns all the
weights it adds, so PEFT's `modules_to_save=["classifier"]` saves the whole head), `merge_and_unload` keeps the
outputs, and the spatial weights take LoRA through `target_parameters`."""

import pytest
import torch

peft = pytest.importorskip("peft")
from peft import LoraConfig, PeftModel, TaskType, get_peft_model

from gmlp import GMLPForMaskedLM, GMLPForSequenceClassification

# The sizes of these tests, over the tiny defaults (conftest.py).
PEFT_SIZES = {
    "vocab_size": 50,
    "hidden_size": 16,
    "intermediate_size": 32,
    "max_position_embeddings": 12,
    "tiny_attention_size": 8,
    "spatial_init_eps": 1e-3,
    "attention_probs_dropout_prob": 0.1,
}
# Every test builds its models and inputs on the selected device (conftest.py's --device).
pytestmark = pytest.mark.usefixtures("on_device")


def example_inputs():
    return {
        "input_ids": torch.tensor([[2, 7, 9, 11, 3, 0], [2, 5, 6, 3, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]]),
    }


@pytest.fixture
def mlm_checkpoint(tmp_path, tiny_config):
    torch.manual_seed(0)
    GMLPForMaskedLM(tiny_config(PEFT_SIZES)).save_pretrained(tmp_path / "mlm")
    return tmp_path / "mlm"


def lora_classifier(checkpoint, **lora):
    torch.manual_seed(1)
    base = GMLPForSequenceClassification.from_pretrained(checkpoint, num_labels=3)
    model = get_peft_model(base, LoraConfig(task_type=TaskType.SEQ_CLS, r=4, **lora))
    with torch.no_grad():  # a trained-looking adapter: LoRA's B starts at zero, which would hide a lost adapter
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    return model.eval()


@pytest.mark.parametrize(
    "lora",
    [
        {"target_modules": "all-linear"},
        {"target_modules": ["channel_proj_in", "channel_proj_out", "qkv_proj"]},
        {"target_modules": ["channel_proj_in"], "target_parameters": ["sgu.spatial_proj.weight"]},
    ],
    ids=["all-linear", "named modules", "spatial weights"],
)
def test_adapter_reloads_to_identical_logits_and_merges(lora, mlm_checkpoint, tmp_path):
    model = lora_classifier(mlm_checkpoint, **lora)
    trainable = [name for name, param in model.named_parameters() if param.requires_grad]
    assert any("lora_" in name for name in trainable)
    assert any("classifier.modules_to_save" in name and "dense" in name for name in trainable)
    if "target_parameters" in lora:
        assert any("spatial_proj.lora_" in name for name in trainable)
    inputs = example_inputs()
    with torch.no_grad():
        expected = model(**inputs).logits
    model.save_pretrained(tmp_path / "adapter")

    base = GMLPForSequenceClassification.from_pretrained(mlm_checkpoint, num_labels=3)  # a freshly random head...
    reloaded = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, expected)  # ...replaced by the saved one
        merged = reloaded.merge_and_unload()
        assert not any("lora_" in name for name, _ in merged.named_parameters())
        torch.testing.assert_close(merged(**inputs).logits, expected, rtol=1e-5, atol=1e-5)
