"""Trial slots on one host: ``--jobs N`` runs N trials at once, each on its own share.

Trials measured side by side disturb each other through the CPUs, the RAM and a
GPU's PCIe link, so each slot gets a disjoint set of CPUs (its worker pins itself
before torch starts; DataLoader workers inherit the mask, and torch's intra-op
threads are sized to it), 1/N of the RAM budget, and on a multi-GPU host a GPU of
its own. A config tuned in a slot is tuned for that share of the host: the share is
recorded with every trial and said in the export.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from autotune.core._config import ConfigError

#: Environment variable naming the CPUs a worker pins itself to ("0,1,2").
CPUS_ENV = "AUTOTUNE_CPUS"


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one trial at a time runs.

    Attributes:
        index: 0..N-1.
        cpus: The CPUs its trials are pinned to; empty: not pinned (one slot).
        of_cpus: The CPUs this tuner may use in all.
        device: The torch device its trials train on ("cpu", "cuda:2").
    """

    index: int
    cpus: tuple[int, ...]
    of_cpus: int
    device: str

    @property
    def runs_on(self) -> tuple[int, ...]:
        """The CPUs its trials run on: its own, or every CPU this process may use when not pinned
        (what its trials take turns on with other tuners', and whose load they are judged by)."""
        return self.cpus or tuple(sorted(os.sched_getaffinity(0)))

    def share(self) -> str:
        """``CPUs 0-1 (2 of 4), cuda:1`` (``all 4 CPUs`` when not pinned)."""
        cpus = (
            f"CPUs {cpu_list(self.cpus)} ({len(self.cpus)} of {self.of_cpus})"
            if self.cpus
            else f"all {self.of_cpus} CPUs"
        )
        return cpus + (f", {self.device}" if self.device.startswith("cuda") else "")

    def record(self) -> dict[str, object]:
        """What each trial stores about where it ran."""
        return {
            "slot": self.index,
            "cpus": list(self.cpus),
            "of_cpus": self.of_cpus,
            "device": self.device,
            "share": self.share(),
        }


def cpu_list(cpus: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    parts: list[list[int]] = []
    run: list[int] = []
    for cpu in sorted(cpus):
        if run and cpu != run[-1] + 1:
            parts.append(run)
            run = []
        run.append(cpu)
    if run:
        parts.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in parts)


def plan_slots(jobs: int, cpus: Sequence[int], devices: Sequence[str]) -> list[Slot]:
    """Split ``cpus`` into ``jobs`` disjoint, contiguous sets, and give each slot a device.

    One slot is not pinned (the tuner's whole share, as before ``--jobs``). The
    first slots get one CPU more when the count does not divide. CUDA devices are
    one per slot: two trials on one GPU would measure each other.

    Raises:
        ConfigError: more slots than CPUs, or than the CUDA devices given.
    """
    cpus = sorted(cpus)
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: must be at least 1")
    if jobs > len(cpus):
        raise ConfigError(
            f"--jobs {jobs}: more trial slots than the {len(cpus)} CPUs this tuner may use "
            f"({cpu_list(cpus)}); allowed: 1 to {len(cpus)}"
        )
    cuda = [d for d in devices if d.startswith("cuda")]
    if cuda and jobs > len(cuda):
        raise ConfigError(
            f"--jobs {jobs}: one trial per GPU, and --device gives {len(cuda)} "
            f"({', '.join(cuda)}); allowed: 1 to {len(cuda)}"
        )
    if jobs == 1:
        return [Slot(0, (), len(cpus), devices[0])]
    size, extra = divmod(len(cpus), jobs)
    slots, start = [], 0
    for index in range(jobs):
        end = start + size + (index < extra)
        slots.append(Slot(index, tuple(cpus[start:end]), len(cpus), devices[index % len(devices)]))
        start = end
    return slots


def devices_of(device: str, cuda_count: int) -> list[str]:
    """``--device`` as a list: ``cuda`` is every visible GPU, ``cuda:0,cuda:2`` those.

    Raises:
        ConfigError: a CUDA index that is not visible.
    """
    if device == "cuda":
        return [f"cuda:{i}" for i in range(cuda_count)] or ["cuda:0"]
    names = [d.strip() for d in device.split(",") if d.strip()]
    for name in names:
        if name.startswith("cuda:") and name[5:].isdigit() and int(name[5:]) >= cuda_count:
            raise ConfigError(
                f"--device {device!r}: {name} is not visible; this host shows {cuda_count} CUDA device(s)"
            )
    return names
