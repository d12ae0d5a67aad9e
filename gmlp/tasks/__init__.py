"""The example scripts and what they share; needs the `train` extra (`pip install "gmlp-transformers[train]"`), the
model (`import gmlp`, which this imports, registering gMLP with the Auto classes) does not. One job per module:

- `run_mlm`, `run_glue`, `run_squad`, `run_image_classification`: the scripts. Each `run(argv)` calls, in order,
  `setup.set_environment`, `arguments.parse_arguments`, `setup.start_logging`, `checks.check_arguments` (and its own
  checks), `setup.prepare_run`; then loads, trains (`training`) and evaluates. Its `main` is the command line's entry.
- `errors`: `ScriptError`, every user mistake, which `main` prints as one `error: ...` line (exit code 2).
- `arguments`: parsing only: the shared dataclasses, flags and `.json` files read into them.
- `checks`: what must hold before a run starts (something to do, trackers, the Hub, processes, evaluation settings,
  an output directory of no other run).
- `setup`: the side effects of starting: environment, logging, seed, compiling, the output directory emptied.
- `loading`: config, tokenizer, model, sequence length. `data`: files, Hub datasets, columns, splits.
- `labels`: every label question: a checkpoint's label map, the task custom labels imply, labels checked and encoded.
- `collators`: batches checked on the CPU; padding-free sentence batches. `evaluation`: the loss over every item.
- `training`: train and save, metrics and predictions written. `checkpoints`: which checkpoint a resume takes.
  `run_settings`: the settings each checkpoint records. `disk_full`: a full disk while saving, explained.
- `mlm`, `glue`, `squad`, `image_classification`: each task's data and metrics; `metrics`: GLUE's and SQuAD's scores
  (also as offline `evaluate` metrics). `model_card`: the README.md written beside a trained model.
"""
