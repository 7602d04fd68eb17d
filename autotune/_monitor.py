"""Watch a trial from outside: host RAM of its process tree (psutil) and its GPU (NVML)."""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Callable, Mapping

#: Seconds between samples: fast enough to catch a RAM spike before swap.
INTERVAL = 0.2


@dataclasses.dataclass(frozen=True)
class Sample:
    """One reading. ``ram`` is the whole process tree (DataLoader workers included)."""

    wall: float
    ram: int
    available: int
    gpu_util: float | None = None
    gpu_mem: int | None = None
    pcie_tx: float | None = None
    pcie_rx: float | None = None


def tree_memory(pid: int) -> int:
    """Bytes used by ``pid`` and all its descendants.

    PSS where the platform has it, so pages shared by forked DataLoader workers
    count once in total; RSS elsewhere.
    """
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
            total += getattr(info, "pss", info.rss)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        except psutil.AccessDenied:
            total += proc.memory_info().rss
    return total


def nvml_handle(cuda_index: int, environ: Mapping[str, str]):
    """The NVML handle of the device a worker sees as ``cuda:cuda_index``.

    CUDA_VISIBLE_DEVICES renumbers devices and may name them by UUID; NVML does
    not apply it, so map through it (by UUID where given). None without NVML.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    entry = visible[cuda_index] if cuda_index < len(visible) else str(cuda_index)
    if entry.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(entry))
    return pynvml.nvmlDeviceGetHandleByUUID(entry)


class Monitor:
    """Samples a process tree on a background thread until stopped.

    Args:
        pid: The worker's pid (its children are found on every sample).
        ram_budget: Bytes; crossing it calls ``on_over_budget(ram)`` once.
        gpu: An NVML handle, or None.
    """

    def __init__(self, pid: int, ram_budget: int | None = None,
                 on_over_budget: Callable[[int], None] | None = None, gpu=None) -> None:
        self.samples: list[Sample] = []
        self._pid, self._budget, self._over, self._gpu = pid, ram_budget, on_over_budget, gpu
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="autotune-monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        import psutil

        fired = False
        while not self._stop.is_set():
            ram = tree_memory(self._pid)
            sample = Sample(time.time(), ram, psutil.virtual_memory().available, *self._gpu_reading())
            self.samples.append(sample)
            if self._budget and ram > self._budget and not fired and self._over:
                fired = True
                self._over(ram)
            self._stop.wait(INTERVAL)

    def _gpu_reading(self) -> tuple:
        if self._gpu is None:
            return ()
        import pynvml

        util = pynvml.nvmlDeviceGetUtilizationRates(self._gpu).gpu
        mem = pynvml.nvmlDeviceGetMemoryInfo(self._gpu).used
        tx = pynvml.nvmlDeviceGetPcieThroughput(self._gpu, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        rx = pynvml.nvmlDeviceGetPcieThroughput(self._gpu, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        return float(util), int(mem), tx / 1024, rx / 1024  # NVML gives KB/s; report MB/s

    def summary(self, since: float = 0.0, until: float = float("inf")) -> dict[str, float]:
        """Peak RAM, minimum available RAM and GPU means/peaks over ``[since, until]``."""
        window = [s for s in self.samples if since <= s.wall <= until] or self.samples[-1:]
        if not window:
            return {}
        out = {"ram_peak": float(max(s.ram for s in window)),
               "available_min": float(min(s.available for s in window))}
        gpu = [s for s in window if s.gpu_util is not None]
        if gpu:
            out["gpu_util_mean"] = statistics.fmean(s.gpu_util for s in gpu)
            out["gpu_mem_peak"] = float(max(s.gpu_mem for s in gpu))
            out["pcie_rx_mean"] = statistics.fmean(s.pcie_rx for s in gpu)
        return out
