"""timm for the timm-equivalence tests: installed on first use, and imported where torchvision cannot be.

Installed on first use (where the environment has no timm): `timm_folder` installs TIMM (`pip install --no-deps
--target`) into a cache folder, `~/.cache/gmlp/timm/<version>`, once, so that the README's test command runs these
tests as CI does; GMLP_TIMM_PATH names a folder where timm is installed already instead. The folder is outside
site-packages, and only the test process puts it on `sys.path`: a timm without torchvision in site-packages would
break `accelerate launch`, which imports timm wherever it finds it.

Imported where torchvision cannot be: PyPI's torchvision does not load beside the CPU build of torch that CI installs
("operator torchvision::nms does not exist"), and timm imports torchvision at module level for its data transforms and
`FrozenBatchNorm2d`, none of which its gMLP models use. So timm is installed without its dependencies, and while it is
imported a stand-in answers every `torchvision` import with placeholders. The stand-in is removed right after, so
nothing else (e.g. transformers' `is_torchvision_available`) ever sees it.
"""

import importlib.abc
import importlib.machinery
import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

TIMM = "timm==1.0.31"


def timm_folder() -> Path:
    """The folder timm is installed in: GMLP_TIMM_PATH, else the cache folder, where TIMM is installed if it is not
    yet (a `subprocess.CalledProcessError` or `OSError` where it cannot be, e.g. without network)."""
    if given := os.environ.get("GMLP_TIMM_PATH"):
        return Path(given)
    folder = Path.home() / ".cache" / "gmlp" / "timm" / TIMM.split("==")[1]
    if not (folder / "timm" / "__init__.py").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=folder.parent))
        install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging), TIMM]
        try:
            subprocess.run(install, check=True, capture_output=True, text=True, timeout=600)
            staging.rename(folder)  # atomic: an install cut short never leaves a half-filled folder
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


class _Placeholder(type):
    """A class whose every attribute is another placeholder class (`InterpolationMode.BILINEAR`, base classes...)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (), {})


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (), {})


class _TorchvisionStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _PlaceholderModule(spec.name)

    def exec_module(self, module):
        pass


def _forget_torchvision():
    for name in [name for name in sys.modules if name == "torchvision" or name.startswith("torchvision.")]:
        del sys.modules[name]


def import_timm():
    """Import and return timm, standing in for torchvision during the import if the real one does not load."""
    if "timm" in sys.modules:
        return sys.modules["timm"]
    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError):  # missing, or PyPI's build failing to load its operators
        _forget_torchvision()
    else:
        import timm

        return timm
    stand_in = _TorchvisionStandIn()
    sys.meta_path.insert(0, stand_in)
    try:
        import timm
        import timm.models.mlp_mixer
    finally:
        sys.meta_path.remove(stand_in)
        _forget_torchvision()
    return timm
