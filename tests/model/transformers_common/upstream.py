"""Transformers' own common tests, fetched at test time from the source distribution of the installed version.

The repository holds no copy of them: `pip download --no-binary :all: transformers==<installed version>` fetches the
release's sdist once, and its `tests/test_modeling_common.py` and `tests/test_configuration_common.py` are unpacked,
unchanged, into a package in a cache directory (`$GMLP_TRANSFORMERS_TESTS_CACHE`, default
`~/.cache/gmlp/transformers-tests/<version>`). The sdist does not ship three modules those files import
(`exporters/test_export.py`, `generation/test_utils.py`, `utils/test_configuration_utils.py`); small modules written
here stand in for them. The tests then always match the installed Transformers.

When the sdist cannot be fetched (no network), the tests that need it skip with the reason; with `CI` set they fail.
"""

import importlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
import transformers

PACKAGE = "transformers_upstream_tests"
UPSTREAM_FILES = ("test_modeling_common.py", "test_configuration_common.py")
# The modules the upstream files import that the sdist does not ship: path in the package -> its text.
STAND_INS = {
    "__init__.py": '"""Transformers\' common tests of the installed version, fetched by tests/model/transformers_common."""\n',
    "exporters/__init__.py": "",
    "exporters/test_export.py": (
        '"""Stand-in: the export tests (ONNX, ExecuTorch) are not in the source distribution; none run here."""\n\n\n'
        "class ExportTesterMixin:\n    pass\n"
    ),
    "generation/__init__.py": "",
    "generation/test_utils.py": "from transformers_common.generation_tester import GenerationTesterMixin  # noqa: F401\n",
    "utils/__init__.py": "",
    "utils/test_configuration_utils.py": (
        "from transformers_common.utils.test_configuration_utils import config_common_kwargs  # noqa: F401\n"
    ),
}


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "gmlp" / "transformers-tests" / transformers.__version__
    return Path(os.environ.get("GMLP_TRANSFORMERS_TESTS_CACHE", default))


def fetch(target: Path) -> None:
    """Download the installed version's sdist and unpack the upstream test files plus the stand-ins into `target`."""
    version = transformers.__version__
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"transformers=={version}",
                "--dest",
                download,
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
        archive = next(Path(download).glob("transformers-*.tar.gz"))
        staging = Path(tempfile.mkdtemp(dir=target.parent))
        package = staging / PACKAGE
        with tarfile.open(archive) as sdist:
            for name in UPSTREAM_FILES:
                member = sdist.extractfile(f"transformers-{version}/tests/{name}")
                (package / name).parent.mkdir(parents=True, exist_ok=True)
                (package / name).write_bytes(member.read())
        for name, text in STAND_INS.items():
            (package / name).parent.mkdir(parents=True, exist_ok=True)
            (package / name).write_text(text)
        staging.rename(target)  # atomic: a fetch cut short never leaves a half-filled cache


def load(module: str):
    """`transformers_upstream_tests.<module>` (e.g. "test_modeling_common"), fetched first if needed; skips the calling
    test module (fails under CI) when the sdist cannot be had."""
    target = cache_dir()
    if not (target / PACKAGE / UPSTREAM_FILES[0]).is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fetch(target)
        except (OSError, subprocess.SubprocessError, StopIteration, KeyError, tarfile.TarError) as error:
            detail = getattr(error, "stderr", "") or error
            reason = f"Transformers {transformers.__version__}'s source distribution could not be fetched: {detail}"
            if os.environ.get("CI"):
                raise RuntimeError(reason) from error
            pytest.skip(reason, allow_module_level=True)
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    return importlib.import_module(f"{PACKAGE}.{module}")
