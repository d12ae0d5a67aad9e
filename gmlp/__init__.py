"""gMLP and aMLP ("Pay Attention to MLPs") as Transformers models.

Importing this package registers the configuration and every model with the Auto classes.
"""

import transformers

from . import modeling_gmlp
from .configuration_gmlp import AUTO_MAP, PRESETS, VISION_AUTO_MAP, VISION_PRESETS, GMLPConfig, GMLPVisionConfig
from .modeling_gmlp import (
    GMLPForCausalLM,
    GMLPForImageClassification,
    GMLPForMaskedLM,
    GMLPForMultipleChoice,
    GMLPForQuestionAnswering,
    GMLPForSequenceClassification,
    GMLPForTokenClassification,
    GMLPModel,
    GMLPPreTrainedModel,
    GMLPVisionModel,
    GMLPVisionPreTrainedModel,
)

__version__ = "0.1.0"


def _register(config_class, auto_map: dict) -> None:
    """Register `config_class` and its models with the Auto classes, from the `auto_map` that saved configs carry
    (the one table of which head goes with which Auto class)."""
    transformers.AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    config_class.register_for_auto_class()
    for auto_name, reference in auto_map.items():
        if auto_name == "AutoConfig":
            continue
        model_class = getattr(modeling_gmlp, reference.split(".")[-1])
        getattr(transformers, auto_name).register(config_class, model_class, exist_ok=True)
        # Makes save_pretrained copy the code files next to the weights, for `trust_remote_code=True` loading.
        model_class.register_for_auto_class(auto_name)


_register(GMLPConfig, AUTO_MAP)
_register(GMLPVisionConfig, VISION_AUTO_MAP)

__all__ = [
    "PRESETS",
    "VISION_PRESETS",
    "GMLPConfig",
    "GMLPForCausalLM",
    "GMLPForImageClassification",
    "GMLPForMaskedLM",
    "GMLPForMultipleChoice",
    "GMLPForQuestionAnswering",
    "GMLPForSequenceClassification",
    "GMLPForTokenClassification",
    "GMLPModel",
    "GMLPPreTrainedModel",
    "GMLPVisionConfig",
    "GMLPVisionModel",
    "GMLPVisionPreTrainedModel",
]
