"""`config_common_kwargs` for `ConfigTester.check_config_arguments_init`.

Written for this project: Transformers keeps this dict in `tests/utils/test_configuration_utils.py`, which the
v5.23.0 source distribution does not ship. It sets every common `PreTrainedConfig` field to a value other than
its default, so the check proves that a model's config passes each one through to `PreTrainedConfig`.
"""

config_common_kwargs = {
    "output_hidden_states": True,
    "output_attentions": True,
    "return_dict": False,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}
