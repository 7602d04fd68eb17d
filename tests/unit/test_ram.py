"""The machine check's RAM figures (autotune.machine._probe.ram_bytes): Linux's /proc/meminfo read
as psutil reads it, without importing psutil into a production run's process; psutil's where
the file has no such figures."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

from autotune.machine._probe import ram_bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/meminfo")
def test_ram_is_what_psutil_reads() -> None:
    total, available = ram_bytes()
    mem = psutil.virtual_memory()
    assert total == mem.total
    assert available == pytest.approx(mem.available, rel=0.05)  # (read a moment apart)


def test_a_meminfo_of_given_figures_is_read_in_bytes(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684084 kB\nMemFree:         1000 kB\nMemAvailable:   23953552 kB\n")
    assert ram_bytes(str(meminfo)) == (24684084 * 1024, 23953552 * 1024)


@pytest.mark.parametrize("text", ["MemTotal:       24684084 kB\n", "garbled", None], ids=["old-kernel", "bad", "none"])
def test_without_the_figures_psutils_are_taken(tmp_path: Path, text: str | None) -> None:
    meminfo = tmp_path / "meminfo"
    if text is not None:
        meminfo.write_text(text)
    total, _ = ram_bytes(str(meminfo))
    assert total == psutil.virtual_memory().total
