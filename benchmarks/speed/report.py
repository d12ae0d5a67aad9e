"""The tables of saved results: each results file's markdown (`benchmarks/results/speed_*.md`) and the tables of
docs/benchmarks.md, which are marked there by the results file and table they come from:

    <!-- table speed_training.json training.like_for_like -->
    ...the table, rewritten by `python -m benchmarks.speed --docs`...
    <!-- end table -->
"""

import json
import re
from pathlib import Path

from ..common import RESULTS_DIR, ROOT
from . import (
    fft_choice,
    generation,
    gpu,
    inference,
    memory,
    padding_free,
    precision,
    profile,
    saved,
    scaling,
    training,
)

# Each section: a module with measure(args) -> dict and render(result) -> {table name: markdown lines}, in the
# order of the reports.
SECTIONS = {
    "training": training,
    "inference": inference,
    "generation": generation,
    "precision": precision,
    "profile": profile,
    "memory": memory,
    "saved": saved,
    "scaling": scaling,
    "fft_choice": fft_choice,
    "padding_free": padding_free,
    "gpu": gpu,
}
DOCS = (ROOT / "docs" / "benchmarks.md",)
MARKED = re.compile(r"^(<!-- table (\S+) (\w+)\.([^\n]+) -->\n).*?^(<!-- end table -->)", re.DOTALL | re.MULTILINE)


def machine_line(machine: dict) -> str:
    """Where and how the results were measured."""
    gpu = f"GPU {machine['gpu']} (CUDA {machine['cuda']}), " if "gpu" in machine else ""
    peak = machine.get("matmul_peak_gflops_fp32")
    return (
        f"Machine: {gpu}{machine['cpu']}, {machine['threads']} threads, torch {machine['torch']}, fp32; measured dense "
        f"matmul peak {peak:.0f} GFLOP/s; allocator {machine['allocator']}; "
        f"load average at start {tuple(round(x, 1) for x in machine['load_average_at_start'])}."
    )


def markdown(results: dict) -> str:
    """Every table of a results file, after the machine's line."""
    lines = [machine_line(results["machine"]), ""]
    for name, section in SECTIONS.items():
        if name in results:
            for part in section.render(results[name]).values():
                lines += part
    return "\n".join(lines)


def marked_table(file: str, section: str, part: str, results_dir: Path = RESULTS_DIR) -> str:
    """One named table of one section of a results file, as markdown, without its heading (the page has its own)."""
    results = json.loads((results_dir / file).read_text())
    lines = [line for line in SECTIONS[section].render(results[section])[part] if not line.startswith("### ")]
    return "\n".join(lines).lstrip("\n")


def docs(text: str, results_dir: Path = RESULTS_DIR) -> str:
    """`text` with every marked table rewritten from its results file."""

    def fill(match: re.Match) -> str:
        start, file, section, part, end = match.groups()
        return f"{start}{marked_table(file, section, part, results_dir)}\n{end}"

    return MARKED.sub(fill, text)
