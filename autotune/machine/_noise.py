"""When a measured figure is not to be believed: foreign load, spread, short measures.

A trial measures its samples/s on a machine it shares. The parent's monitor
measures, window by window, what other processes took of the CPUs (and GPU) the
trial may use (``autotune.machine._monitor.foreign_cpu``). A figure taken while others
took a large share, or whose windows disagree wildly, or taken over fewer windows
than asked (the training function ran out of data), is *doubted*: it is recorded
and shown, marked, but never ranks, prunes, holds knobs or is exported. A noisy
trial is measured again once the machine is quiet (``wait_for_quiet``); a short
one would be short again, so it is not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

#: Share of a trial's CPUs (or of its GPU) that other processes may take during its
#: windows before its figure counts as noisy. A CPU-bound process on one core of
#: this project's 2-core machine takes 50%, and the trial then reads 30-90% of its
#: quiet figure (benchmarks/results/noise.md); a quiet machine reads 0-5%.
FOREIGN_LOAD_MAX = 0.2
#: (max - min) / median of a trial's window rates above which its median means
#: little: one trial measured windows of 545, 122, 166 and 2,293 samples/s, a spread of 6.1.
SPREAD_MAX = 1.0
#: Times a noisy trial is measured again at most (each once the machine is quiet).
REMEASURES = 2
#: Seconds the study waits for a quiet machine before measuring a noisy trial again.
QUIET_WAIT_S = 120.0
#: Seconds of each look at the machine's load while waiting.
QUIET_LOOK_S = 1.0

NOISY, SHORT = "noisy", "short measure"
#: What a doubt of a run whose windows disagree says (and of no other: ``autotune.tuner._bursty``).
WINDOWS_DISAGREE = "its windows disagree"


def doubt(
    metrics: Mapping[str, float], reason: str, max_load: float = FOREIGN_LOAD_MAX, max_spread: float = SPREAD_MAX
) -> str | None:
    """Why a complete trial's samples/s is not to be believed, or None.

    The text starts with its kind: ``noisy`` (measured again when the machine is
    quiet) or ``short measure``.

    >>> doubt({"samples_per_s": 900, "foreign_cpu": 0.48}, "")
    'noisy: other processes used 48% of its CPUs while it measured (over 20%)'
    >>> doubt({"samples_per_s": 900, "foreign_cpu": 0.01, "samples_per_s_spread": 0.2}, "") is None
    True
    """
    if reason.startswith(SHORT):
        return reason.partition(",")[0].partition(";")[0]
    load = metrics.get("foreign_cpu", 0.0)
    if load > max_load:
        return f"{NOISY}: other processes used {load:.0%} of its CPUs while it measured (over {max_load:.0%})"
    gpu = metrics.get("foreign_gpu", 0.0)
    if gpu > max_load:
        return f"{NOISY}: other processes used {gpu:.0%} of its GPU while it measured (over {max_load:.0%})"
    spread = metrics.get("samples_per_s_spread", 0.0)
    # (a whole run ranks on its wall time, whose noise its re-runs measure; its windows end where
    # the baseline's did, and its last, partial one where the code returned)
    if spread > max_spread and "run_s" not in metrics:
        return (
            f"{NOISY}: {WINDOWS_DISAGREE}, from lowest to highest {spread:.0%} of their median (over {max_spread:.0%})"
        )
    return None


def is_noisy(why: str | None) -> bool:
    """Whether a doubt (see ``doubt``) is one that measuring again may lift."""
    return why is not None and why.startswith(NOISY)


def ceiling_doubt(entry: Mapping[str, float], max_load: float = FOREIGN_LOAD_MAX) -> str | None:
    """Why a ceiling a trial measured is not to be believed (others loaded the CPUs), or None."""
    load = entry.get("foreign_cpu", 0.0)
    if load > max_load:
        return f"other processes used {load:.0%} of the CPUs while it was measured"
    return None


def machine_load(cpus: tuple[int, ...], seconds: float = QUIET_LOOK_S) -> float:
    """Share of ``cpus`` busy over the next ``seconds``, this process excluded."""
    import psutil

    from autotune.machine._monitor import CpuReading, cpus_busy, foreign_cpu

    me = psutil.Process()

    def reading() -> CpuReading:
        t = me.cpu_times()
        return CpuReading(cpus_busy(cpus), 0.0, t.user + t.system)

    start, began = reading(), time.monotonic()
    time.sleep(seconds)
    return foreign_cpu(start, reading(), time.monotonic() - began, len(cpus))


def wait_for_quiet(
    cpus: tuple[int, ...],
    max_load: float,
    patience: float,
    stop: threading.Event,
    load: Callable[[tuple[int, ...]], float] = machine_load,
) -> tuple[bool, float, float]:
    """Wait until the load on ``cpus`` is at most ``max_load``, for up to ``patience`` seconds.

    Returns:
        (quiet, the last load seen, seconds waited). ``stop`` ends the wait early.
    """
    began = time.monotonic()
    seen = load(cpus)
    while seen > max_load and time.monotonic() - began < patience and not stop.is_set():
        seen = load(cpus)
    return seen <= max_load, seen, time.monotonic() - began
