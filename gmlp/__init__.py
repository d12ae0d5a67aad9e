"""gMLP and aMLP ("Pay Attention to MLPs") as Transformers models.

Importing this package registers the configuration and every model with the Auto classes.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_gmlp import PRESETS, VISION_PRESETS, GMLPConfig, GMLPVisionConfig
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

_AUTO_CLASSES = {
    AutoModel: GMLPModel,
    AutoModelForMaskedLM: GMLPForMaskedLM,
    AutoModelForCausalLM: GMLPForCausalLM,
    AutoModelForSequenceClassification: GMLPForSequenceClassification,
    AutoModelForMultipleChoice: GMLPForMultipleChoice,
    AutoModelForTokenClassification: GMLPForTokenClassification,
    AutoModelForQuestionAnswering: GMLPForQuestionAnswering,
}

AutoConfig.register(GMLPConfig.model_type, GMLPConfig, exist_ok=True)
GMLPConfig.register_for_auto_class()
for _auto_class, _model_class in _AUTO_CLASSES.items():
    _auto_class.register(GMLPConfig, _model_class, exist_ok=True)
    # Makes save_pretrained copy the code files next to the weights, for `trust_remote_code=True` loading.
    _model_class.register_for_auto_class(_auto_class.__name__)

_VISION_AUTO_CLASSES = {AutoModel: GMLPVisionModel, AutoModelForImageClassification: GMLPForImageClassification}

AutoConfig.register(GMLPVisionConfig.model_type, GMLPVisionConfig, exist_ok=True)
GMLPVisionConfig.register_for_auto_class()
for _auto_class, _model_class in _VISION_AUTO_CLASSES.items():
    _auto_class.register(GMLPVisionConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class.__name__)

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
