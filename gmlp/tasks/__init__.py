"""The example scripts and what they share; needs the `train` extra (`pip install "gmlp-transformers[train]"`). One job
per module:

- `run_mlm`, `run_glue`, `run_squad`, `run_image_classification`: the scripts. Each `run(argv)` calls `setup.start`
  (environment, parsing, logging), `checks.check_arguments` (and its own checks), `setup.prepare_run`; then loads,
  trains (`training`) and evaluates. Its `main` is the command line's entry.
- `errors`: `ScriptError`, a user's mistake, which `main` prints as one `error: ...` line (exit code 2).
- `arguments`: parsing only. `checks`: what must hold before a run starts. `setup`: the side effects of starting.
- `loading`: config, tokenizer, model, sequence length. `data`: files, Hub datasets, columns, splits.
- `labels`: a checkpoint's label map, what custom labels imply, labels encoded. `collators`: batches checked on the CPU,
  padding-free sentence batches. `evaluation`: the loss over every labelled item.
- `training`: train, save, write metrics and predictions. `checkpoints`: which checkpoint a resume takes.
  `run_settings`: the settings each checkpoint records. `disk_full`: a full disk while saving, explained.
- `mlm`, `glue`, `squad`, `image_classification`: each task's data and metrics; `metrics`: GLUE's and SQuAD's scores
  (also as offline `evaluate` metrics). `model_card`: the README.md written beside a trained model.
"""
