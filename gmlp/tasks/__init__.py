"""The example scripts (`run_mlm`, `run_glue`, `run_squad`, `run_image_classification`) and what they share; needs the
`train` extra (`pip install "gmlp-transformers[train]"`). Each script's `run(argv)` sets up, parses, checks, loads,
trains and evaluates; a `ScriptError` (`errors`) is a user's mistake, printed as one `error: ...` line."""
