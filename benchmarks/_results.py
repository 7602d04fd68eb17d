"""What every benchmark script shares: the machine line, medians with spread, and
writing one Markdown section of ``benchmarks/RESULTS.md``."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "RESULTS.md"


def spread(values: list[float], fmt: str) -> str:
    """Median, with min..max of the repeats."""
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}..{format(max(values), fmt)})"


def machine() -> str:
    """The machine the figures come from, as the study fingerprint names it (with the date)."""
    from autotune._probe import probe

    fp = probe("auto")
    return f"{fp.summary()}; {fp.ram_total_gib} GiB RAM"


def write_section(heading: str, body: str) -> None:
    """Replace the section under ``## heading`` in RESULTS.md, or append it."""
    section = f"## {heading}\n\n{body.strip()}\n"
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\n"
    pattern = re.compile(rf"## {re.escape(heading)}\n.*?(?=\n## |\Z)", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip() + "\n\n" + section
    RESULTS.write_text(text)
