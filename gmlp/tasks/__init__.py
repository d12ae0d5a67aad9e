"""The example scripts (`run_mlm.py`, `run_glue.py`, `run_squad.py`, `run_image_classification.py`) and what they
share. Needs the `train` extra (`pip install "gmlp-transformers[train]"`); the model (`import gmlp`) does not.
Importing it imports `gmlp`, which registers gMLP with the Auto classes."""
