#!/usr/bin/env python
"""Pretrain or fine-tune a gMLP/aMLP masked language model (run with no arguments for the offline demo).

The script is `gmlp/tasks/run_mlm.py` (installed as the command `gmlp-run-mlm`); this file runs it from a checkout:
`python run_mlm.py --help` lists its options.
"""

from gmlp.tasks.run_mlm import main

if __name__ == "__main__":
    main()
