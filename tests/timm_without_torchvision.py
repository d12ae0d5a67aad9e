"""Import timm where torchvision cannot be imported (for the timm-equivalence tests).

PyPI's torchvision does not load beside the CPU build of torch that CI installs ("operator torchvision::nms does not
exist"), and timm imports torchvision at module level for its data transforms and `FrozenBatchNorm2d`, none of which
its gMLP models use. So timm is installed with `pip install --no-deps timm`, and while it is imported a stand-in
answers every `torchvision` import with placeholders. The stand-in is removed right after, so nothing else (e.g.
transformers' `is_torchvision_available`) ever sees it.
"""

import importlib.abc
import importlib.machinery
import sys
import types


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
