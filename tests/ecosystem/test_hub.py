"""Saving, loading and sharing: safetensors, Auto classes, and remote code where the gmlp package is absent."""

import json

import pytest
import torch
from datasets import Dataset
from helpers import load_as_remote_code
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
)

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

HUB_SIZES = {
    "tiny_attention_size": 8,
    "num_labels": 3,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
}


AUTO_CLASSES = [
    (AutoModel, GMLPModel, {}),
    (AutoModelForMaskedLM, GMLPForMaskedLM, {}),
    (AutoModelForCausalLM, GMLPForCausalLM, {"is_decoder": True}),
    (AutoModelForSequenceClassification, GMLPForSequenceClassification, {}),
    (AutoModelForMultipleChoice, GMLPForMultipleChoice, {}),
    (AutoModelForTokenClassification, GMLPForTokenClassification, {}),
    (AutoModelForQuestionAnswering, GMLPForQuestionAnswering, {}),
]


def first_output(outputs):
    return (
        outputs.logits
        if hasattr(outputs, "logits")
        else outputs.start_logits
        if hasattr(outputs, "start_logits")
        else outputs.last_hidden_state
    )


def example_inputs(model_class):
    ids = torch.randint(5, 64, (2, 10), generator=torch.Generator().manual_seed(0))
    return ids.view(2, 1, 10).expand(2, 3, 10) if model_class is GMLPForMultipleChoice else ids


@pytest.mark.parametrize("auto_class, model_class, overrides", AUTO_CLASSES)
def test_auto_classes_build_and_reload_every_head(tiny_config, tmp_path, auto_class, model_class, overrides):
    model = auto_class.from_config(tiny_config(HUB_SIZES, **overrides)).eval()
    assert type(model) is model_class
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert not list(tmp_path.glob("*.bin"))
    reloaded = auto_class.from_pretrained(tmp_path).eval()
    assert type(reloaded) is model_class
    inputs = example_inputs(model_class)
    with torch.no_grad():
        torch.testing.assert_close(first_output(reloaded(inputs)), first_output(model(inputs)), rtol=1e-6, atol=1e-6)


def test_saved_directory_carries_auto_map_and_code_files(tiny_config, tmp_path):
    GMLPForMaskedLM(tiny_config(HUB_SIZES)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "gmlp"
    assert config["auto_map"]["AutoConfig"] == "configuration_gmlp.GMLPConfig"
    for auto_class, model_class, _ in AUTO_CLASSES:
        assert config["auto_map"][auto_class.__name__] == f"modeling_gmlp.{model_class.__name__}"
    # the model's code, its config's and the CUDA kernels it imports relatively, for trust_remote_code users
    assert {path.name for path in tmp_path.glob("*.py")} == {
        "modeling_gmlp.py",
        "configuration_gmlp.py",
        "kernels_gmlp.py",
    }
    assert isinstance(AutoConfig.from_pretrained(tmp_path), GMLPConfig)


@pytest.mark.parametrize(
    "auto_class, model_class",
    [(AutoModelForMaskedLM, GMLPForMaskedLM), (AutoModel, GMLPModel), (AutoModelForSequenceClassification, None)],
)
@pytest.mark.e2e
def test_remote_code_loads_without_the_package_and_gives_identical_outputs(
    tiny_config, tmp_path, auto_class, model_class
):
    masked_lm = GMLPForMaskedLM(tiny_config(HUB_SIZES)).eval()
    masked_lm.save_pretrained(tmp_path / "checkpoint")
    inputs = example_inputs(GMLPForMaskedLM)
    remote = load_as_remote_code(tmp_path / "checkpoint", auto_class.__name__, inputs, tmp_path / "remote")
    if model_class is None:  # a new head on the saved encoder: only the class is checked
        assert remote["name"] == "GMLPForSequenceClassification"
        return
    local = model_class.from_pretrained(tmp_path / "checkpoint").eval()
    with torch.no_grad():
        torch.testing.assert_close(remote["result"], first_output(local(inputs)), rtol=1e-6, atol=1e-6)


@pytest.mark.e2e
def test_trainer_trains_a_preset_model_that_then_loads_elsewhere(tmp_path):
    """The new user's path: from_config on a preset, a Trainer step, save, load with trust_remote_code."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]
    tokenizer = BertTokenizer(vocab={word: i for i, word in enumerate(words)})
    config = GMLPConfig.from_preset(
        "gmlp-tiny", vocab_size=len(words), num_hidden_layers=2, hidden_size=32, intermediate_size=64
    )
    model = AutoModelForMaskedLM.from_config(config)
    texts = [" ".join(f"w{(i * 7 + j) % 59}" for j in range(12)) for i in range(32)]
    dataset = Dataset.from_dict({"text": texts}).map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=16), batched=True, remove_columns=["text"]
    )
    before = model.gmlp.encoder.layer[0].channel_proj_in.weight.detach().clone()
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        learning_rate=1e-3,
    )
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    result = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator).train()
    assert result.global_step == 2 and torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(before, model.gmlp.encoder.layer[0].channel_proj_in.weight)
    model.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "saved", trust_remote_code=True)
    torch.testing.assert_close(
        reloaded.gmlp.encoder.layer[0].channel_proj_in.weight, model.gmlp.encoder.layer[0].channel_proj_in.weight
    )
