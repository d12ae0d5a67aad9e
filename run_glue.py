#!/usr/bin/env python
"""Fine-tune gMLP/aMLP for sequence classification on a GLUE task or your own csv/json files.

The script is `gmlp/tasks/run_glue.py` (installed as the command `gmlp-run-glue`); this file runs it from a checkout:
`python run_glue.py --help` lists its options.
"""

from gmlp.tasks.run_glue import main

if __name__ == "__main__":
    main()
