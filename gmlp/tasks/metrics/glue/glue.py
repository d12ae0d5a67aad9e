"""GLUE's metric, offline: the configurations, inputs, outputs and numbers of the Hub's `glue` metric."""

import datasets
import evaluate

# The scores live in the package, which the scripts call directly: one implementation for both.
from gmlp.tasks.metrics import GLUE_METRICS, glue_scores


class Glue(evaluate.Metric):
    """The metric of the GLUE task named by `config_name`."""

    def _info(self):
        if self.config_name not in GLUE_METRICS:  # a KeyError, as the Hub's metric raises
            raise KeyError(
                f"Unknown GLUE configuration {self.config_name!r}: pass one of {list(GLUE_METRICS)} as the config name, e.g. evaluate.load(path, 'sst2')."
            )
        value = datasets.Value("float32" if self.config_name == "stsb" else "int64")
        return evaluate.MetricInfo(
            description="The metric of the GLUE task (https://gluebenchmark.com/) named by the configuration: matthews_correlation (cola), pearson and spearmanr (stsb), accuracy and f1 (mrpc, qqp), else accuracy.",
            citation="Wang et al., GLUE: A Multi-Task Benchmark and Analysis Platform for NLU, ICLR 2019.",
            inputs_description="predictions, references: labels (int), or similarity scores (float) for stsb.",
            features=datasets.Features({"predictions": value, "references": value}),
            format="numpy",
        )

    def _compute(self, predictions, references):
        return glue_scores(self.config_name, predictions, references)
