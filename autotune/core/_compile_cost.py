"""What torch.compile costs a config, cold and warm, and which of the two a user pays.

A study keeps its own Inductor cache (``STORE/inductor/STUDY``): a config's first compiled run
builds its graphs there (cold), its re-runs find them (warm: tracing only, a fraction of the
time). Production under ``autotune exec`` starts with the user's own cache, so its first run on
a machine compiles cold: that is the cost a whole run ranks on, whichever of the config's runs
the figure came from. Each run says which it was (``compile_warm``: torch's cache counters,
``autotune.worker._window.compile_warm``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any


def cold_and_warm(runs: Iterable[Mapping[str, Any]]) -> tuple[float | None, float | None]:
    """The median compile time of a config's cold runs and of its warm ones (each None where it
    has none), from its runs' metrics. A run that does not say (a study from before it was
    recorded) counts as cold: its compile built what it needed as far as anyone knows.

    >>> cold_and_warm([{"compile_s": 40.0, "compile_warm": 0.0}, {"compile_s": 4.0, "compile_warm": 1.0},
    ...                {"compile_s": 5.0, "compile_warm": 1.0}, {"samples_per_s": 9.0}])
    (40.0, 4.5)
    >>> cold_and_warm([{"compile_s": 3.0, "compile_warm": 1.0}])
    (None, 3.0)
    """
    runs = list(runs)
    cold = [m["compile_s"] for m in runs if "compile_s" in m and m.get("compile_warm") != 1.0]
    warm = [m["compile_s"] for m in runs if "compile_s" in m and m.get("compile_warm") == 1.0]
    return (statistics.median(cold) if cold else None, statistics.median(warm) if warm else None)


def paid_compile(metrics: Mapping[str, Any], cold: float | None) -> float:
    """The seconds a run's wall time lacks of the compile a user pays: for a warm run of a config
    whose cold compile was measured (``cold``), what cold compiling takes beyond its own; else 0.

    >>> paid_compile({"compile_s": 4.0, "compile_warm": 1.0}, 40.0), paid_compile({"compile_s": 40.0}, 40.0)
    (36.0, 0.0)
    >>> paid_compile({"compile_s": 4.0, "compile_warm": 1.0}, None)
    0.0
    """
    if cold is None or metrics.get("compile_warm") != 1.0:
        return 0.0
    return max(0.0, cold - metrics.get("compile_s", 0.0))


def compile_line(cold: float | None, warm: float | None, whole: bool) -> str:
    """The findings' words for a config's compile time, cold and warm; ``whole``: its figures are
    whole runs (the compile a user pays is in their wall time), else its loop's samples/s (compile
    kept out of them).

    >>> compile_line(40.0, 4.5, True)
    'compile: torch.compile took 40.0 s cold (a first run on a machine: what its whole run counts) and 4.5 s warm (a later run that finds its cache)'
    >>> compile_line(None, 4.5, True)
    'compile: torch.compile took 4.5 s warm (its graphs were cached already; a first run on a machine takes longer)'
    >>> compile_line(12.0, None, False)
    'compile: torch.compile took 12.0 s before the first step (kept out of the figures)'
    """
    where = "what its whole run counts" if whole else "kept out of the figures"
    if cold is not None and warm is not None:
        return (
            f"compile: torch.compile took {cold:.1f} s cold (a first run on a machine: {where}) "
            f"and {warm:.1f} s warm (a later run that finds its cache)"
        )
    if cold is None and warm is not None:
        return (
            f"compile: torch.compile took {warm:.1f} s warm (its graphs were cached already; a first run on a "
            "machine takes longer)"
        )
    return f"compile: torch.compile took {cold or 0.0:.1f} s before the first step ({where})"
