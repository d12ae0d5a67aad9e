#!/usr/bin/env python
"""Train or fine-tune a gMLP image classifier.

The script is `gmlp/tasks/run_image_classification.py` (installed as the command `gmlp-run-image-classification`); this file runs it from a checkout:
`python run_image_classification.py --help` lists its options.
"""

from gmlp.tasks.run_image_classification import main

if __name__ == "__main__":
    main()
