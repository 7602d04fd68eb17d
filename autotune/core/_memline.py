"""The CUDA caching allocator over a profile run's timed window: a memory timeline, and
whether reserved memory swings (``autotune.worker._profile``, ``autotune.tuner._profiling``).

On a CUDA device a profile run reads the allocator's allocated and reserved bytes at each
edge of a step (after the edge's device sync: two reads of its counters, no device work),
its peaks over the window, and how many times it called ``cudaMalloc`` / ``cudaFree`` and
retried a failed allocation. ``swing_reason`` says, as data, whether reserved memory moved
in a way that ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` addresses: new segments
still being reserved after the warmup (shapes that vary ask for blocks the cache cannot
split), the cache freed and refilled (each retry synchronises the device), or much more
reserved than the step ever held (fragmentation). Where it does, the profile phase runs
the same config once more with that setting and reports the measured difference.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The allocator's counters read at the window's edges (``torch.cuda.memory_stats``).
COUNTERS = ("num_device_alloc", "num_device_free", "num_alloc_retries")
#: Samples kept in a timeline (6 edges a step: about 1,000 steps); later ones are dropped.
MAX_SAMPLES = 6000
#: Reserved memory growing by at least this much (and ``GROWTH_SHARE`` of where it started)
#: after the warmup counts as a swing.
GROWTH_BYTES, GROWTH_SHARE = 64 << 20, 0.05
#: Reserved memory over the allocated peak by at least this much, and this share of the
#: reserved peak, counts as fragmentation.
IDLE_BYTES, IDLE_SHARE = 256 << 20, 0.3
#: The allocator setting the finding names, as the ``cuda_alloc_conf`` knob spells it.
EXPANDABLE = "expandable_segments:True"
_MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class MemoryFinding:
    """What the allocator did over a window of ``steps`` steps; bytes, and counts of calls."""

    steps: int
    allocated_peak: int
    reserved_peak: int
    reserved_start: int
    reserved_end: int
    reserved_low: int
    mallocs: int = 0
    frees: int = 0
    retries: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, found: Mapping[str, Any]) -> MemoryFinding:
        return cls(**{f.name: int(found.get(f.name) or 0) for f in dataclasses.fields(cls)})


def swing_reason(found: MemoryFinding) -> str | None:
    """Why reserved memory swings over the window, in words, or None where it held still.

    >>> gib = 1 << 30
    >>> swing_reason(MemoryFinding(100, 2 * gib, 2 * gib, 2 * gib, 2 * gib, 2 * gib)) is None
    True
    >>> swing_reason(MemoryFinding(100, 5 * gib // 2, 3 * gib, 2 * gib, 3 * gib, 2 * gib, mallocs=12))
    'reserved memory grew 1024 MiB over 100 steps after the warmup (12 cudaMalloc calls): shapes that vary ask for blocks the cache cannot split'
    >>> swing_reason(MemoryFinding(100, 1 * gib, 4 * gib, 4 * gib, 4 * gib, 4 * gib))
    'reserved 4096 MiB against 1024 MiB at most allocated: 75% of it cached and idle (fragmentation)'
    """
    said = []
    if found.retries:
        said.append(
            f"the allocator failed {found.retries} cudaMalloc calls and freed its cache to retry (a device sync each)"
        )
    elif found.frees:
        said.append(
            f"reserved memory fell and rose again ({found.frees} cudaFree calls, low "
            f"{found.reserved_low / _MIB:.0f} MiB, peak {found.reserved_peak / _MIB:.0f} MiB)"
        )
    grew = found.reserved_end - found.reserved_start
    if found.mallocs and grew >= max(GROWTH_BYTES, GROWTH_SHARE * found.reserved_start):
        said.append(
            f"reserved memory grew {grew / _MIB:.0f} MiB over {found.steps} steps after the warmup "
            f"({found.mallocs} cudaMalloc calls): shapes that vary ask for blocks the cache cannot split"
        )
    idle = found.reserved_peak - found.allocated_peak
    if idle >= max(IDLE_BYTES, IDLE_SHARE * found.reserved_peak):
        said.append(
            f"reserved {found.reserved_peak / _MIB:.0f} MiB against {found.allocated_peak / _MIB:.0f} MiB "
            f"at most allocated: {idle / found.reserved_peak:.0%} of it cached and idle (fragmentation)"
        )
    return "; ".join(said) or None


def effect_line(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """The measured effect of ``expandable_segments:True``: two profile runs' findings
    (``parts`` and ``memory``), without and with it.

    >>> mib = 1 << 20
    >>> effect_line({"parts": {"step": 0.010}, "memory": {"reserved_peak": 3000 * mib, "mallocs": 12}},
    ...             {"parts": {"step": 0.009}, "memory": {"reserved_peak": 2000 * mib, "mallocs": 3}})
    'with expandable_segments:True: step 10.0 -> 9.0 ms (0.90x), reserved peak 3000 -> 2000 MiB, 12 -> 3 cudaMalloc calls'
    """
    s0, s1 = before["parts"]["step"], after["parts"]["step"]
    m0, m1 = before.get("memory") or {}, after.get("memory") or {}
    return (
        f"with {EXPANDABLE}: step {s0 * 1e3:.1f} -> {s1 * 1e3:.1f} ms ({s1 / s0 if s0 else 0:.2f}x), "
        f"reserved peak {m0.get('reserved_peak', 0) / _MIB:.0f} -> {m1.get('reserved_peak', 0) / _MIB:.0f} MiB, "
        f"{m0.get('mallocs', 0)} -> {m1.get('mallocs', 0)} cudaMalloc calls"
    )


def memory_lines(kept: Mapping[str, Any]) -> list[str]:
    """The terminal's lines on CUDA memory: each profiled config whose reserved memory swings,
    why, and the measured effect of ``expandable_segments:True`` where it was run."""
    lines = []
    for role, found in kept.items():
        if role.endswith("_expandable") or not found.get("memory"):
            continue
        why = swing_reason(MemoryFinding.from_dict(found["memory"]))
        if why:
            again = kept.get(f"{role}_expandable")
            lines.append(
                f"memory: the {role}'s {why}; "
                + (
                    effect_line(found, again)
                    if again
                    else f"{EXPANDABLE} (PYTORCH_CUDA_ALLOC_CONF) addresses it, not measured here"
                )
            )
    return lines


class MemoryLine:
    """The allocator's bytes at each step edge over the timed window, on a CUDA ``device``."""

    def __init__(self, device: Any) -> None:
        self._device = device
        self.samples: list[tuple[float, str, int, int]] = []
        self._t0 = 0.0
        self._counters: dict[str, int] = {}
        self._steps_from = 0
        self.active = False

    def start(self, step: int) -> None:
        """The timed window starts (at ``step``): clear the samples, reset the peaks."""
        import torch

        torch.cuda.reset_peak_memory_stats(self._device)
        stats = torch.cuda.memory_stats(self._device)
        self._counters = {k: int(stats.get(k, 0)) for k in COUNTERS}
        self.samples = []
        self._t0 = time.perf_counter()
        self._steps_from = step
        self.active = True
        self.sample("start")

    def sample(self, part: str) -> None:
        """One reading at an edge into ``part``."""
        if not self.active or len(self.samples) >= MAX_SAMPLES:
            return
        import torch

        self.samples.append(
            (
                round(time.perf_counter() - self._t0, 6),
                part,
                torch.cuda.memory_allocated(self._device),
                torch.cuda.memory_reserved(self._device),
            )
        )

    def stop(self, step: int) -> MemoryFinding:
        """The window ended (at ``step``): what the allocator did over it."""
        import torch

        self.sample("end")
        self.active = False
        stats = torch.cuda.memory_stats(self._device)
        moved = {k: int(stats.get(k, 0)) - self._counters.get(k, 0) for k in COUNTERS}
        reserved = [s[3] for s in self.samples] or [0]
        return MemoryFinding(
            step - self._steps_from,
            torch.cuda.max_memory_allocated(self._device),
            torch.cuda.max_memory_reserved(self._device),
            reserved[0],
            reserved[-1],
            min(reserved),
            moved["num_device_alloc"],
            moved["num_device_free"],
            moved["num_alloc_retries"],
        )

    def write(self, path: Path, found: MemoryFinding) -> None:
        """The timeline and the finding as JSON (seconds from the window's start, the part an edge
        starts, allocated and reserved bytes)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "columns": ["t_s", "part", "allocated", "reserved"],
                    "samples": self.samples,
                    "finding": found.as_dict(),
                    "swings": swing_reason(found),
                }
            )
        )


def memory_path(trace: str | Path) -> Path:
    """The timeline's file beside a profile run's trace: ``<role>.memory.json``.

    >>> memory_path("/p/winner.pt.trace.json.gz").name
    'winner.memory.json'
    """
    trace = Path(trace)
    return trace.with_name(trace.name.split(".")[0] + ".memory.json")
