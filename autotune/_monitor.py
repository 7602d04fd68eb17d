"""Watch a trial from outside: host RAM of its process tree (psutil) and its GPU (NVML)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping

#: Seconds between samples: fast enough to catch a RAM hog before swap. A sample
#: reads RSS of the tree and the system's available memory (about 1 ms for a
#: trial with 4 DataLoader workers on the 2-core CI machine).
INTERVAL = 0.1
#: Seconds between exact (PSS) readings, which cost about 3 ms per process: RSS
#: sums shared pages once per forked worker, so it over-counts (3x for a trial
#: with 4 workers) and is only a cheap upper bound; PSS is read when that bound
#: crosses the budget, when the floor is crossed, and this often for the record.
PSS_EVERY = 1.0
#: The machine keeps at least this share of its memory available: below it the
#: running trial is killed, whatever its budget (other processes count too).
AVAILABLE_FLOOR = 0.10


@dataclasses.dataclass(frozen=True)
class Sample:
    """One reading. ``ram`` is the PSS of the whole process tree (DataLoader
    workers included), read every ``PSS_EVERY`` s; None between those readings."""

    wall: float
    rss: int
    ram: int | None
    available: int
    gpu_util: float | None = None
    gpu_mem: int | None = None
    pcie_tx: float | None = None
    pcie_rx: float | None = None


def size(n: float) -> str:
    """Bytes for people: ``1.50 GiB``, ``300 MiB``."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def process_tree(pid: int) -> list:
    """``pid`` and all its descendants as psutil processes (empty once it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_cpu_s() -> float:
    """CPU seconds (user + system) this process and its descendants have used so far.

    The live tree is read through psutil; descendants already gone and reaped (a
    DataLoader's workers at the end of an epoch) count through ``os.times()``, read
    first so that one reaped in between is missed rather than counted twice.
    """
    import psutil

    own = os.times()
    total = own.children_user + own.children_system
    for proc in process_tree(os.getpid()):
        try:
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        total += times.user + times.system
    return total


def tree_rss(procs: list) -> int:
    """Sum of RSS: cheap, and an upper bound of the tree's real use."""
    import psutil

    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return total


def tree_memory(procs: list) -> int:
    """Bytes used by a process tree: PSS where the platform has it, so pages
    shared by forked DataLoader workers count once in total; RSS elsewhere."""
    import psutil

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


class Background:
    """A loop on a daemon thread for the length of a ``with`` block.

    Subclasses write ``_loop``, which must return soon after ``self._stop`` is set
    (wait on it instead of sleeping).
    """

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        raise NotImplementedError


class Monitor(Background):
    """Samples a process tree on a background thread until stopped.

    Args:
        pid: The worker's pid (its children are found on every sample).
        ram_budget: Bytes the tree may use (PSS).
        on_limit: Called once, with the reason, when the tree crosses
            ``ram_budget`` or the machine's available memory falls under ``floor``.
        gpu: An NVML handle, or None.
        floor: Bytes of available memory the machine keeps (default:
            ``AVAILABLE_FLOOR`` of its total).
    """

    def __init__(self, pid: int, ram_budget: int | None = None,
                 on_limit: Callable[[str], None] | None = None, gpu=None, floor: int | None = None) -> None:
        import psutil

        self.samples: list[Sample] = []
        self._pid, self._budget, self._on_limit, self._gpu = pid, ram_budget, on_limit, gpu
        self.floor = floor if floor is not None else int(psutil.virtual_memory().total * AVAILABLE_FLOOR)
        super().__init__("autotune-monitor")

    def _loop(self) -> None:
        import psutil

        fired = False
        last_pss = 0.0
        while not self._stop.is_set():
            now = time.time()
            procs = process_tree(self._pid)
            rss = tree_rss(procs)
            available = psutil.virtual_memory().available
            over_budget = bool(self._budget) and rss > self._budget
            under_floor = available < self.floor
            ram = None
            if over_budget or under_floor or now - last_pss >= PSS_EVERY:
                ram, last_pss = tree_memory(procs), now
            self.samples.append(Sample(now, rss, ram, available, *self._gpu_reading()))
            if not fired and self._on_limit and ram is not None:
                reason = self._limit_reason(ram, available)
                if reason:
                    fired = True
                    self._on_limit(reason)
            self._stop.wait(INTERVAL)

    def _limit_reason(self, ram: int, available: int) -> str | None:
        if self._budget and ram > self._budget:
            return (f"the trial's processes used {size(ram)}, over the RAM budget "
                    f"of {size(self._budget)}")
        if available < self.floor:
            return (f"the machine's available memory fell to {size(available)}, under the floor "
                    f"of {size(self.floor)}; the trial's processes used {size(ram)}")
        return None

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
        """Peak RAM (PSS), minimum available RAM and GPU means/peaks over ``[since, until]``."""
        window = [s for s in self.samples if since <= s.wall <= until]
        out: dict[str, float] = {}
        exact = [s.ram for s in window if s.ram is not None]
        if exact:
            out["ram_peak"] = float(max(exact))
        if window:
            out["available_min"] = float(min(s.available for s in window))
        gpu = [s for s in window if s.gpu_util is not None]
        if gpu:
            out["gpu_util_mean"] = statistics.fmean(s.gpu_util for s in gpu)
            out["gpu_mem_peak"] = float(max(s.gpu_mem for s in gpu))
            out["pcie_rx_mean"] = statistics.fmean(s.pcie_rx for s in gpu)
        return out
