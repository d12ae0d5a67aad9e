"""What the tests share that is not a fixture (the fixtures are in conftest.py): the tiny sizes, the words of the small
corpora, the arguments of a tiny run of a script, inputs drawn the same on every device, and the one comparison that
takes the dtype into account."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from gmlp import GMLPConfig, GMLPVisionConfig

ROOT = Path(__file__).resolve().parents[1]

# The tiny models of the tests: small enough to run hundreds of times, dropout off so that outputs are deterministic,
# and a visible spatial init (W near zero would hide token mixing). conftest.py's `tiny_config` and
# `tiny_vision_config` start from these; tests/ecosystem/fsdp_worker.py, a process of its own, reads TINY_TEXT.
TINY_TEXT = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "max_position_embeddings": 16,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "spatial_init_eps": 16.0,
}
TINY_VISION = {
    "image_size": 16,
    "patch_size": 4,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_labels": 3,
    "spatial_init_eps": 16.0,
    "drop_path_rate": 0.0,
}


def tiny_text_config(*sizes: dict, **overrides) -> GMLPConfig:
    """A tiny text config: TINY_TEXT, then each dict of `sizes`, then `overrides` (conftest.py's `tiny_config`)."""
    return GMLPConfig(**{**TINY_TEXT, **{key: value for size in sizes for key, value in size.items()}, **overrides})


def tiny_vision_config(*sizes: dict, **overrides) -> GMLPVisionConfig:
    """A tiny vision config: TINY_VISION, then each dict of `sizes`, then `overrides`."""
    settings = {**TINY_VISION, **{key: value for size in sizes for key, value in size.items()}, **overrides}
    return GMLPVisionConfig(**settings)


# ---- the small corpora of the script tests ---------------------------------------------------------------------
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "red",
    "mat",
    "while",
    "an",
    "old",
    "dog",
    "slept",
    "by",
    "the",
    "warm",
    "fire",
    "and",
    "the",
    "king",
    "sang",
    "to",
    "his",
    "sister",
]
# A paragraph for SQuAD-style questions.
CONTEXT = "the red fox lives in the green forest near the old river and eats small birds every day"


def rotated_lines(count: int) -> list[str]:
    """`count` lines, each the words rotated by its index (modulo 20), so that every line differs."""
    return [" ".join(WORDS[i % 20 :] + WORDS[: i % 20]) for i in range(count)]


def write(path: Path, content: str | bytes) -> Path:
    """Writes `content` (text as UTF-8) to `path`, making its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


# ---- the arguments of a tiny run of a script -------------------------------------------------------------------
# The scripts' tiny model, as `--config_overrides` of the gmlp-tiny preset.
SCRIPT_SIZES = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "max_position_embeddings": 32}


def config_overrides(**changes) -> str:
    """`--config_overrides` of the scripts' tiny model: SCRIPT_SIZES, then `changes`."""
    return ",".join(f"{key}={value}" for key, value in {**SCRIPT_SIZES, **changes}.items())


def flags(**options) -> list[str]:
    """Command-line arguments from keywords, in their order: `--name value`; True is a bare `--name`; None and False
    are left out."""
    arguments = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        arguments.append(f"--{name}")
        if value is not True:
            arguments.append(str(value))
    return arguments


def tiny_run(output_dir, *extra: str, tokenizer=None, overrides: dict | None = None, **options) -> list[str]:
    """The arguments of a tiny run of a script from scratch: the gmlp-tiny preset at SCRIPT_SIZES (then
    `overrides`), the `tokenizer` folder if given, `output_dir`, no reporting and no checkpoints; then `options` as
    flags (they replace those defaults in place) and the `extra` arguments as they are (a later flag wins)."""
    defaults = {
        "config_name": "gmlp-tiny",
        "config_overrides": config_overrides(**(overrides or {})),
        "tokenizer_name": tokenizer,
        "output_dir": output_dir,
        "report_to": "none",
        "save_strategy": "no",
    }
    return [*flags(**{**defaults, **options}), *extra]


# ---- inputs and comparisons on the selected device and dtype (conftest.py's --device and --dtype) ----------------
def seeded(draw, *args, seed: int, **kwargs) -> torch.Tensor:
    """`draw(*args, **kwargs)` (torch.randn, torch.randint, ...) from a CPU generator seeded with `seed`, then moved
    to the default device (the selected one in a device-aware test): the same values on every device."""
    generator = torch.Generator().manual_seed(seed)
    return draw(*args, generator=generator, device="cpu", **kwargs).to(torch.get_default_device())


# bf16 keeps 8 bits of mantissa: after a few layers a relative error of a few 1e-3 is expected. tests/model/test_bf16.py
# explains the figure; it is far below what a wrong path gives (tens of percent).
BF16_RELATIVE_TOLERANCE = 3e-2


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """‖actual − expected‖ / ‖expected‖, in fp32."""
    expected = expected.float()
    return float((actual.float() - expected).norm() / expected.norm())


def assert_close(actual: torch.Tensor, expected: torch.Tensor, msg: str | None = None, **tolerances) -> None:
    """`torch.testing.assert_close(actual, expected, msg=msg, **tolerances)`, exactly, for fp32 tensors; when either
    is bf16 (a --dtype bf16 pass), the relative error of the whole tensor within BF16_RELATIVE_TOLERANCE instead."""
    if torch.bfloat16 not in (actual.dtype, expected.dtype):
        torch.testing.assert_close(actual, expected, msg=msg, **tolerances)
        return
    actual, expected = actual.detach(), expected.detach()
    assert actual.shape == expected.shape, (msg, actual.shape, expected.shape)
    error = relative_error(actual, expected) if expected.norm() > 0 else float(actual.float().norm())
    assert error <= BF16_RELATIVE_TOLERANCE, (
        f"{msg or ''} relative error {error:.3g} > {BF16_RELATIVE_TOLERANCE} (bf16)"
    )


def differ(actual: torch.Tensor, expected: torch.Tensor, **tolerances) -> bool:
    """The control of an equivalence: `not torch.allclose(actual, expected, **tolerances)` for fp32 tensors; in
    bf16, a relative error of more than 3 times BF16_RELATIVE_TOLERANCE (well beyond bf16's rounding)."""
    if torch.bfloat16 not in (actual.dtype, expected.dtype):
        return not torch.allclose(actual, expected, **tolerances)
    return relative_error(actual, expected) > 3 * BF16_RELATIVE_TOLERANCE


REMOTE_LOAD = textwrap.dedent(
    """
    import json, sys, torch
    sys.modules["gmlp"] = None  # any `import gmlp` now fails: the package is not there
    try:
        import gmlp
    except ImportError:
        pass
    else:
        raise SystemExit("gmlp is still importable")
    import transformers
    directory, auto_name, inputs_path, outputs_path, options = sys.argv[1:]
    auto_class = getattr(transformers, auto_name)
    model = auto_class.from_pretrained(directory, trust_remote_code=True, **json.loads(options)).eval()
    assert not type(model).__module__.startswith("gmlp"), type(model).__module__
    inputs = torch.load(inputs_path)
    with torch.no_grad():
        outputs = model(inputs)
    result = outputs.logits if hasattr(outputs, "logits") else outputs.last_hidden_state
    torch.save({"result": result, "module": type(model).__module__, "name": type(model).__name__}, outputs_path)
    """
)


def load_as_remote_code(directory: Path, auto_name: str, inputs: torch.Tensor, work: Path, **options) -> dict:
    """Load the saved model in `directory` with `trust_remote_code` (and the `from_pretrained` keywords `options`, as
    JSON) in a process that cannot import this package, run it on `inputs`: its output (`result`, logits or last
    hidden state) and its class (`module`, `name`)."""
    work.mkdir(parents=True, exist_ok=True)
    torch.save(inputs, work / "inputs.pt")
    (work / "load.py").write_text(REMOTE_LOAD)
    command = [sys.executable, str(work / "load.py"), str(directory), auto_name, str(work / "inputs.pt")]
    # Run from an empty directory with a clean environment, so neither the cwd nor PYTHONPATH can provide gmlp.
    run = subprocess.run(
        [*command, str(work / "outputs.pt"), json.dumps(options)],
        cwd=work,
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(work / "hf_home"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    remote = torch.load(work / "outputs.pt")
    assert remote["module"].startswith("transformers_modules"), remote["module"]
    return remote


def free_port() -> int:
    """A TCP port free on this machine now, for torchrun's rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def child_env(*paths: Path) -> dict:
    """A fresh interpreter's environment: this checkout (and `paths`) importable, one thread, offline."""
    pythonpath = os.pathsep.join(str(path) for path in (ROOT, *paths))
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": "1"}


def python(
    cwd, *arguments, timeout: int = 300, paths: tuple[Path, ...] = (), env: dict | None = None
) -> subprocess.CompletedProcess:
    """A fresh interpreter run with `arguments` in `cwd` (`child_env(*paths)`, updated with `env`), its output
    captured."""
    command, environment = [sys.executable, *map(str, arguments)], child_env(*paths) | (env or {})
    return subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout, check=False
    )
