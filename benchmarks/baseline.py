"""The gMLP model at another git revision, importable beside the working tree's, for before-and-after measurements
in one run.

`gmlp/modeling_gmlp.py` imports only torch, transformers and its sibling `configuration_gmlp.py` (so that saved
checkpoints load as remote code), so those two files from `git show REF:...` make a complete package of their own.
It is written to a temporary directory under another name and is not registered with the Auto classes: build its
models from its own classes.
"""

import contextlib
import importlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from transformers import cache_utils

import gmlp

from .common import ROOT

MODEL_FILES = ("configuration_gmlp.py", "modeling_gmlp.py")
_loaded: dict[str | None, ModuleType] = {}


def resolve(ref: str) -> str:
    """The short commit hash `ref` names in this repository (raises if git does not know it)."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def gmlp_at(ref: str | None = None) -> ModuleType:
    """The modeling module (`GMLPConfig`, `GMLPForMaskedLM`, `GMLPModel`, ...) of the working tree (`ref` None) or
    of the git revision `ref`, loaded once per run."""
    if ref is None:
        return gmlp.modeling_gmlp
    if ref not in _loaded:
        commit = resolve(ref)
        package = "gmlp_at_" + re.sub(r"\W", "_", commit)
        directory = Path(tempfile.mkdtemp(prefix="gmlp-baseline-"))
        (directory / package).mkdir()
        (directory / package / "__init__.py").write_text(f'"""gmlp/ at {ref} ({commit})."""\n')
        for name in MODEL_FILES:
            source = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{commit}:gmlp/{name}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            (directory / package / name).write_text(source)
        sys.path.insert(0, str(directory))
        with own_cache_layers_kept():
            _loaded[ref] = importlib.import_module(f"{package}.modeling_gmlp")
    return _loaded[ref]


@contextlib.contextmanager
def own_cache_layers_kept():
    """Caches made from a config keep the working tree's layer classes: importing another revision's model file
    registers its cache layers under the same layer type (Transformers' `CacheLayerMixin.__init_subclass__`)."""
    mappings = (cache_utils.DYNAMIC_LAYER_TYPE_MAPPING, cache_utils.STATIC_LAYER_TYPE_MAPPING)
    before = [dict(mapping) for mapping in mappings]
    try:
        yield
    finally:
        for mapping, kept in zip(mappings, before):
            mapping.clear()
            mapping.update(kept)


def label(name: str, ref: str | None) -> str:
    """A case's name, with the revision it was measured at when that is not the working tree."""
    return name if ref is None else f"{name} @{ref}"
