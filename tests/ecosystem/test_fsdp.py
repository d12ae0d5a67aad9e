"""FSDP2 on the CPU: GMLPForMaskedLM (gMLP and aMLP) under PyTorch's `fully_shard` on 2 processes (torchrun, gloo)
against the unsharded model, a sharded `torch.distributed.checkpoint` round trip, and the groups that Accelerate's
FSDP2 preparation (the Trainer's `--fsdp`) makes around the tied decoder, with BERT's masked LM as the control that
fails there. The processes run tests/ecosystem/fsdp_worker.py once for the module; the comparisons are here."""

import json
import re
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from fsdp_worker import STEPS, VARIANTS, WORLD_SIZE, adamw, build, global_batches, train
from helpers import load_as_remote_code, python
from transformers import HfArgumentParser, TrainingArguments

ROOT = Path(__file__).resolve().parents[2]
TIED = "gmlp.embeddings.word_embeddings.weight = lm_head.decoder.weight"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """The worker's results and output folder, from one torchrun of 2 processes."""
    output = tmp_path_factory.mktemp("fsdp")
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", WORLD_SIZE]
    # the worker imports tests/helpers.py beside the project
    worker = ROOT / "tests" / "ecosystem" / "fsdp_worker.py"
    result = python(ROOT, *launch, worker, output, timeout=600, paths=(ROOT / "tests",))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return output, json.loads((output / "results.json").read_text())


@pytest.fixture(scope="module")
def unsharded():
    """Per variant: the losses and final weights of the unsharded model trained on the same global batches."""
    reference = {}
    for variant in VARIANTS:
        model = build(variant)
        losses = train(model, adamw(model), range(WORLD_SIZE), global_batches())
        reference[variant] = (losses, {name: tensor.detach().clone() for name, tensor in model.state_dict().items()})
    return reference


@pytest.mark.e2e
@pytest.mark.parametrize("variant", VARIANTS)
def test_fully_shard_on_each_layer_trains_as_the_unsharded_model(variant, sharded, unsharded):
    output, results = sharded
    losses, weights = unsharded[variant]
    assert len(losses) == STEPS and losses[-1] < losses[0] - 0.1  # the steps do move the model
    assert results[f"layers/{variant}"]["losses"] == pytest.approx(losses, rel=1e-5, abs=1e-6)
    trained = torch.load(output / f"{variant}-weights.pt")["trained"]
    assert sorted(trained) == sorted(weights)
    for name, tensor in weights.items():
        torch.testing.assert_close(trained[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.e2e
@pytest.mark.parametrize("variant", VARIANTS)
def test_sharded_checkpoint_round_trips_the_weights(variant, sharded):
    output, results = sharded
    result = results[f"layers/{variant}"]
    saved = torch.load(output / f"{variant}-weights.pt")
    trained, before, loaded = saved["trained"], saved["before_load"], saved["loaded"]
    # The fresh model (another seed) differed; after the sharded load it holds the trained weights exactly.
    assert any(not torch.equal(before[name], trained[name]) for name in trained)
    assert sorted(loaded) == sorted(trained)
    for name, tensor in trained.items():
        assert torch.equal(loaded[name], tensor), name
    assert result["tied_after_load"], "the loaded model's decoder is no longer tied to its word embeddings"
    # The optimizer came back too: one more step from the loaded pair gives the original pair's loss.
    assert result["next_loss_loaded"] == result["next_loss_original"]

    # The same checkpoint, written by 2 processes, loads into an unsharded model in this single process.
    model = build(variant, seed=2)
    state = model.state_dict()
    dcp.load({"model": state}, checkpoint_id=output / f"{variant}-checkpoint")
    model.load_state_dict(state)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, trained[name]), name
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


@pytest.mark.e2e
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_sharded_model_saves_its_own_code_and_loads_as_remote_code(variant, sharded):
    """`fully_shard` makes the model an instance of a class torch defines (`FSDPGMLPForMaskedLM`); saved as the
    Trainer saves it, the folder holds this project's code and names its class, not torch's FSDP files (found on an
    H200, where such a checkpoint could not be loaded with `trust_remote_code`)."""
    output, results = sharded
    folder = output / f"{variant}-saved"
    assert sorted(path.name for path in folder.iterdir()) == [
        "config.json",
        "configuration_gmlp.py",
        "kernels_gmlp.py",
        "model.safetensors",
        "modeling_gmlp.py",
    ]
    auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForMaskedLM"] == "modeling_gmlp.GMLPForMaskedLM"
    assert results[f"layers/{variant}"]["class_after_save"] == "FSDPGMLPForMaskedLM"  # the sharded model is intact

    # Loaded from the folder's code alone (in a process without this package), it is the trained model.
    local = build(variant)
    local.load_state_dict(torch.load(output / f"{variant}-weights.pt")["trained"])
    input_ids = torch.randint(5, local.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    remote = load_as_remote_code(folder, "AutoModelForMaskedLM", input_ids, output / f"{variant}-remote")
    assert remote["name"] == "GMLPForMaskedLM"
    with torch.no_grad():
        torch.testing.assert_close(remote["result"], local.eval()(input_ids).logits, rtol=1e-6, atol=1e-6)


@pytest.mark.e2e
@pytest.mark.parametrize("variant", VARIANTS)
def test_accelerate_fsdp2_groups_keep_the_tied_decoder_with_the_embeddings(variant, sharded, unsharded):
    """Accelerate's `fsdp2_prepare_model` with docs/scripts.md's wrap class (GMLPLayer): each layer its own group, then a
    group for the final norm with the input and output embeddings (one tied parameter here), then the root."""
    result = sharded[1][f"accelerate/{variant}"]
    assert "error" not in result, result.get("traceback")
    tail = [group for group in result["groups"] if TIED in group]
    assert tail == [[TIED, "gmlp.final_norm.bias", "gmlp.final_norm.weight", "lm_head.decoder.bias"]]
    layers = [group for group in result["groups"] if any(".encoder.layer." in name for name in group)]
    assert len(layers) == 2 and all(len({name.split(".")[3] for name in group}) == 1 for group in layers)
    assert result["losses"] == pytest.approx(unsharded[variant][0], rel=1e-5, abs=1e-6)


@pytest.mark.e2e
def test_accelerate_fsdp2_groups_break_bert_whose_decoder_bias_is_another_modules(sharded):
    """The control: the same preparation fails for BertForMaskedLM, whose decoder bias is `cls.predictions.bias`
    (the decoder goes to the output-embedding group, the bias's other module to the root)."""
    result = sharded[1]["accelerate/bert"]
    assert "losses" not in result
    expected = (
        "Parameter 'cls.predictions.decoder.bias' is shared with a parameter already managed by another FSDP group"
    )
    assert expected in result["error"]


@pytest.mark.e2e
@pytest.mark.parametrize("variant", VARIANTS)
def test_accelerate_fsdp2_default_wrap_from_no_split_modules(variant, sharded, unsharded):
    """`--fsdp` without a wrap class: Accelerate wraps the classes of the model's `_no_split_modules`, the blocks only,
    so the word embeddings stay in one group with the tied decoder and training gives the unsharded losses."""
    result = sharded[1][f"accelerate_default/{variant}"]
    assert "error" not in result, result["error"]
    assert result["losses"] == pytest.approx(unsharded[variant][0], rel=1e-5, abs=1e-6)


def test_the_scripts_docs_fsdp_command_selects_fsdp2_wrapping_each_gmlp_layer(tmp_path):
    """docs/scripts.md's GPU command, as TrainingArguments reads it: FSDP version 2, transformer-based wrapping of the
    GMLPLayer class (which Accelerate looks up by name in the model)."""
    page = (ROOT / "docs" / "scripts.md").read_text()
    flags = re.search(r"--fsdp --fsdp_config '(\{.*\})'", page)
    assert flags, "docs/scripts.md's FSDP command is gone"
    parser = HfArgumentParser(TrainingArguments)
    (arguments,) = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--fsdp", "--fsdp_config", flags.group(1)]
    )
    plugin = arguments.fsdp_plugin_args
    assert plugin["fsdp_version"] == 2
    assert plugin["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert plugin["transformer_cls_names_to_wrap"] == "GMLPLayer"
    from accelerate.utils.dataclasses import get_module_class_from_name

    assert get_module_class_from_name(build("gmlp"), "GMLPLayer").__name__ == "GMLPLayer"
