"""What the example scripts (`run_mlm.py`, `run_glue.py`, `run_squad.py`, `run_image_classification.py`) share: data
loading and checks, the Trainer bookkeeping, metrics, SQuAD post-processing and the model card. Needs the `train`
extra (`pip install "gmlp-transformers[train]"`: datasets, evaluate, accelerate, scikit-learn, scipy); the model
library (`import gmlp`) does not."""
