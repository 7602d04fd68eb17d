"""malloc_retain: glibc's malloc keeps what a step frees, so the next step faults nothing in.

Each check runs in a fresh interpreter: the settings last for a process's life and cannot be
undone, and the control is a process with glibc's defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
from fixtures.heap_rounds import PAGES

from autotune import Config, Recipe
from autotune.machine import _malloc
from helpers import FIXTURES


def _thp() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read()
    except OSError:
        return ""


pytestmark = [
    pytest.mark.skipif(_malloc.unavailable_reason() is not None, reason="needs glibc's malloc"),
    # the checks count 4 KiB pages faulted in: huge pages for every heap, or malloc tuned from
    # the environment, would change the control's count, not what retain does
    pytest.mark.skipif("[always]" in _thp(), reason="transparent huge pages are always on here"),
    pytest.mark.skipif(
        any(k.startswith("MALLOC_") or k == "GLIBC_TUNABLES" for k in os.environ),
        reason="malloc is tuned from the environment",
    ),
]

#: In a fresh interpreter: ``setup``, then two rounds of a step's worth of host memory
#: (``heap_rounds``); prints the minor faults the second round took.
ROUNDS = """
import json, sys
sys.path.insert(0, {fixtures!r})
{setup}
from heap_rounds import second_round_faults
print(json.dumps(second_round_faults()))
"""


def second_round_faults(setup: str = "") -> int:
    out = subprocess.run(
        [sys.executable, "-c", ROUNDS.format(fixtures=str(FIXTURES), setup=setup)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)


def test_glibc_defaults_fault_a_freed_step_in_again() -> None:
    # The control: the first round's 20 MiB was a mapping of its own, handed back on free;
    # the second comes from a heap grown for it, every page faulted in again.
    assert second_round_faults() > PAGES // 2


def test_retain_serves_the_next_step_from_freed_memory() -> None:
    assert second_round_faults("from autotune.machine._malloc import retain; retain()") < PAGES // 50


def test_a_recipe_with_malloc_retain_applies_it_when_training_starts(tmp_path) -> None:
    # what production runs: autotune.load of an export that sets the knob, then its batches
    recipe = tmp_path / "best.yaml"
    recipe.write_text("backends:\n  malloc_retain: true\n")
    load = f"import autotune; run = autotune.load({str(recipe)!r}, device='cpu', check=False, quiet=True)\n"
    assert second_round_faults(load + "for _ in run.batches([]): pass") < PAGES // 50
    # made but never trained with (Result.winner makes one in the caller's process): nothing changes
    assert second_round_faults(load + "assert run.resolved()['malloc_retain'] is True") > PAGES // 2


def test_a_recipe_without_it_leaves_glibc_alone(tmp_path) -> None:
    recipe = tmp_path / "best.yaml"
    recipe.write_text("backends:\n  malloc_retain: false\n")
    setup = (
        f"import autotune; run = autotune.load({str(recipe)!r}, device='cpu', check=False, quiet=True)\n"
        "for _ in run.batches([]): pass"
    )
    assert second_round_faults(setup) > PAGES // 2


@pytest.mark.parametrize("retained", [False, True])
def test_a_trial_with_malloc_retain_applies_it_in_its_worker(tmp_path, retained: bool) -> None:
    # a real trial, forked from a warm worker as a study runs it; the function frees and takes
    # 20 MiB again once its batches have started, and prints the faults that took
    from autotune.machine._launch import Budget, TrialSpec, new_tag
    from autotune.tuner._watch import run_trial
    from autotune.worker._warm import WarmWorker

    log = tmp_path / "trial.log"
    spec = TrialSpec(
        target=f"{FIXTURES / 'tiny_train.py'}:train_reports_heap_faults",
        config=Config(malloc_retain=retained),
        device="cpu",
        budget=Budget(warmup_s=0.1, window_s=0.2, windows=2, ceiling_windows=0, learn_windows=0),
    )
    warm = WarmWorker(os.environ, new_tag())
    try:
        result = run_trial(spec, log, warm=warm)
    finally:
        warm.close()
    assert result.outcome.name == "COMPLETE", result.reason
    faults = int(log.read_text().split("second round faults=")[1].split()[0])
    assert (faults < PAGES // 50) if retained else (faults > PAGES // 2), faults


def test_elsewhere_it_is_refused_in_the_space_and_warned_about_in_production(monkeypatch) -> None:
    monkeypatch.setattr(_malloc.platform, "libc_ver", lambda: ("", ""))
    reason = _malloc.unavailable_reason()
    assert reason is not None and "needs glibc's malloc" in reason
    called = []
    monkeypatch.setattr(_malloc, "retain", lambda: called.append(True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in Recipe(Config(malloc_retain=True), "cpu", quiet=True).batches([]):
            pass
    assert not called
    assert any("malloc_retain=true not applied: needs glibc's malloc" in str(w.message) for w in caught), caught


def test_a_preloaded_allocator_is_not_glibc_s(monkeypatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    assert _malloc.unavailable_reason() == (
        "needs glibc's malloc, which LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 replaces"
    )
