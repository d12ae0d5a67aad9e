#!/usr/bin/env python
"""Fine-tune gMLP/aMLP for extractive question answering on SQuAD v1.1 or v2.0.

The script is `gmlp/tasks/run_squad.py` (installed as the command `gmlp-run-squad`); this file runs it from a checkout:
`python run_squad.py --help` lists its options.
"""

from gmlp.tasks.run_squad import main

if __name__ == "__main__":
    main()
