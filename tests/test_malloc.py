"""malloc_retain: glibc's malloc keeps what a step frees, so the next step faults nothing in.

Each check runs in a fresh interpreter: the settings last for a process's life, and the
test process must keep glibc's defaults (the control is a process with those defaults)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from autotune import Config, Recipe, _malloc

pytestmark = pytest.mark.skipif(_malloc.unavailable_reason() is not None, reason="needs glibc's malloc")

#: Two rounds of a step's worth of host memory (20 MiB: above glibc's first mmap threshold,
#: 128 KiB, below the 32 MiB that retain serves from the heap): allocate, touch every page,
#: free; prints the minor faults the second round took.
ROUNDS = """
import ctypes, json, sys
{setup}
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def faults():
    return int(open("/proc/self/stat").read().rpartition(")")[2].split()[7])
def one_round(size=20 << 20):
    chunk = libc.malloc(size)
    ctypes.memset(chunk, 1, size)
    libc.free(chunk)
one_round()
before = faults()
one_round()
print(json.dumps(faults() - before))
"""
#: Pages in a round: every one faults in when the memory came fresh from the kernel.
PAGES = (20 << 20) // 4096  # 5120


def second_round_faults(setup: str = "") -> int:
    out = subprocess.run([sys.executable, "-c", ROUNDS.format(setup=setup)], capture_output=True, text=True,
                         check=True, timeout=120)
    return json.loads(out.stdout)


def test_glibc_defaults_fault_a_freed_step_in_again() -> None:
    # The control: the first round's 20 MiB was a mapping of its own, handed back on free;
    # the second comes from a heap grown for it, every page faulted in again.
    assert second_round_faults() > PAGES // 2


def test_retain_serves_the_next_step_from_freed_memory() -> None:
    assert second_round_faults("from autotune._malloc import retain; retain()") < PAGES // 50


def test_a_recipe_with_malloc_retain_applies_it(tmp_path) -> None:
    # what production runs: autotune.load of an export that sets the knob
    recipe = tmp_path / "best.yaml"
    recipe.write_text("backends:\n  malloc_retain: true\n")
    setup = (f"import autotune; run = autotune.load({str(recipe)!r}, device='cpu', check=False)\n"
             "assert run.resolved()['malloc_retain'] is True")
    assert second_round_faults(setup) < PAGES // 50


def test_a_recipe_without_it_leaves_glibc_alone(tmp_path) -> None:
    recipe = tmp_path / "best.yaml"
    recipe.write_text("backends:\n  malloc_retain: false\n")
    setup = f"import autotune; autotune.load({str(recipe)!r}, device='cpu', check=False)"
    assert second_round_faults(setup) > PAGES // 2


def test_elsewhere_it_is_refused_in_the_space_and_warned_about_in_production(monkeypatch) -> None:
    monkeypatch.setattr(_malloc.platform, "libc_ver", lambda: ("", ""))
    reason = _malloc.unavailable_reason()
    assert reason is not None and "needs glibc's malloc" in reason
    called = []
    monkeypatch.setattr(_malloc, "retain", lambda: called.append(True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Recipe(Config(malloc_retain=True), "cpu")
    assert not called
    assert any("malloc_retain=true not applied: needs glibc's malloc" in str(w.message) for w in caught), caught
