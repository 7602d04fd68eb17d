"""Watch a trial from outside: host RAM of its process tree (read by ``autotune.machine._proctree``),
its GPU (NVML), and what other processes take of the CPUs and the GPU it measures on
(foreign load)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping

from autotune.machine._proctree import TreeReading, read_known, read_tree, tree_memory

#: Seconds between samples: fast enough to catch a RAM hog before swap. A sample
#: reads RSS of the tree and the system's available memory (``read_tree``: 0.4 ms for
#: a trial with 4 DataLoader workers on the 2-core CI machine, 2.6 ms with 32, CPU
#: times included).
INTERVAL = 0.1
#: Seconds between exact (PSS) readings at most, which cost about 3 ms per process and
#: more with its memory (``PSS_SHARE``): RSS sums shared pages once per forked worker, so
#: it over-counts (3x for a trial with 4 workers) and is only a cheap upper bound; PSS is
#: read when that bound crosses the budget, when the floor is crossed, and this often for
#: the record. (RSS does not bound the batches in flight, which the exact reading adds:
#: ``tree_memory``. Those count against the budget this often, and the machine's floor,
#: read every ``INTERVAL``, sees them as soon as they are made.)
PSS_EVERY = 1.0
#: The machine keeps at least this share of its memory available: below it the
#: running trial is killed, whatever its budget (other processes count too).
AVAILABLE_FLOOR = 0.10
#: Share of one CPU the tree's RSS readings may take. Their cost grows with every process
#: in the trial's tree, and what the monitor takes, the trial does not get, while in
#: production nothing watches: past this share the tree is read less
#: often than ``INTERVAL``. The machine's available memory (one read of /proc/meminfo) is
#: read every ``INTERVAL`` whatever the tree, and a crossed floor reads the tree at once.
MONITOR_SHARE = 0.02
#: The same for the PSS readings, past ``PSS_EVERY``. A PSS reading walks the page
#: tables of every process in the tree, in the kernel, while the trial runs: 20 ms for
#: the ResNet runner's 0.9 GB tree on a 2-core host, so once a second it took 2% of a CPU
#: and, with the RSS readings, the trial 1.7-2.2% of its steps (benchmarks/results/
#: trial-vs-production.md). PSS is only the record (a reading past the RAM
#: budget's RSS bound, or under the floor, is taken at once, whatever this share), so
#: its share is a quarter of the RSS readings', and a tree whose RSS rose ``PSS_GROWTH``
#: above its highest before the last PSS reading is read again as soon as ``PSS_EVERY``
#: allows, so that a peak is not missed while memory climbs (RSS that swings with each
#: step's allocations does not count as climbing).
PSS_SHARE = 0.005
PSS_GROWTH = 0.1
#: Seconds between walks of the trial's process tree at most. A walk finds the tree's
#: processes through each of their threads' ``children`` files, which is most of what a
#: reading costs: 1.2 of 1.9 ms on the jpeg runner's 25-process tree, whose main process has
#: 26 threads (a queue feeder per DataLoader worker). Between walks a reading reads the
#: processes it knows (0.4 ms) and holds no CPU reading (``Sample.cpu``: the foreign load
#: starts from a walk, which misses no process); one of them gone makes it a walk. A process
#: born between walks counts from the next one: its RAM, against the budget, up to this late
#: (a crossed floor reads the tree at once).
WALK_EVERY = 1.0


@dataclasses.dataclass(frozen=True)
class Sample:
    """One reading. ``ram`` is the PSS of the whole process tree (DataLoader
    workers included), read every ``PSS_EVERY`` s; None between those readings. ``cpu``
    is read with each walk of the tree (``WALK_EVERY``); None between walks."""

    wall: float
    rss: int
    ram: int | None
    available: int
    cpu: CpuReading | None = None
    gpu_util: float | None = None
    gpu_mem: int | None = None
    pcie_tx: float | None = None
    pcie_rx: float | None = None
    gpu_foreign: float | None = None


@dataclasses.dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds at one moment (``foreign_cpu`` takes two).

    Attributes:
        busy: Busy time of the CPUs the trial may use, every process's (steal
            included: a VM's neighbours take it).
        tree: The trial's process tree: live processes, and those they reaped.
        tuner: The tuner process itself (its own threads, not its children).
    """

    busy: float
    tree: float
    tuner: float


def foreign_cpu(start: CpuReading, end: CpuReading, seconds: float, cpus: int) -> float:
    """Share of ``cpus`` CPUs over ``seconds`` used by processes outside the trial and its tuner.

    >>> foreign_cpu(CpuReading(10, 4, 1), CpuReading(13, 6, 1), 2.0, 2)  # a hog's 1 s of 2 s x 2 CPUs
    0.25
    """
    if seconds <= 0 or cpus <= 0:
        return 0.0
    other = (end.busy - start.busy) - (end.tree - start.tree) - (end.tuner - start.tuner)
    return min(1.0, max(0.0, other / (seconds * cpus)))


def foreign_gpu(samples, own_pids: set[int]) -> float | None:
    """SM utilisation (0-1) of a GPU by processes outside ``own_pids``, from NVML's
    per-process samples (``nvmlDeviceGetProcessUtilization``); None when none of the
    samples is the trial's own: NVML then sees pids of another pid namespace (a
    container), and telling ours from theirs is impossible.

    >>> class S: pass
    >>> a, b = S(), S(); a.pid, a.smUtil, b.pid, b.smUtil = 7, 60, 9, 30
    >>> foreign_gpu([a, b], {7})
    0.3
    """
    samples = list(samples)
    if not any(s.pid in own_pids for s in samples):
        return None
    return min(1.0, sum(s.smUtil for s in samples if s.pid not in own_pids) / 100)


def size(n: float) -> str:
    """Bytes for people: ``1.50 GiB``, ``300 MiB``."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def cpus_busy(cpus: tuple[int, ...]) -> float:
    """Busy CPU seconds since boot of the CPUs ``cpus`` (every process's, steal included)."""
    import psutil

    per_cpu = psutil.cpu_times(percpu=True)
    total = 0.0
    for index in cpus:
        if index < len(per_cpu):
            t = per_cpu[index]
            # psutil's own busy time: all but idle and iowait (guest time is inside user).
            total += (
                sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
            )
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

    The watchdog cannot die quietly: a GPU reading that fails turns the GPU
    readings off (said in ``problems``); any other error ends the trial through
    ``on_error``, since a trial without its RAM guard must not go on.

    Args:
        pid: The worker's pid (its children are found on every sample).
        ram_budget: Bytes the tree may use (``tree_memory``: PSS, and shared memory held unmapped).
        on_limit: Called once, with the reason, when the tree crosses
            ``ram_budget`` or the machine's available memory falls under ``floor``.
        gpu: An NVML handle, or None.
        floor: Bytes of available memory the machine keeps (default:
            ``AVAILABLE_FLOOR`` of its total).
        cpus: The CPUs the trial may use, for its foreign load (default: this
            process's affinity).
        on_error: Called once, with the reason, when the monitor itself fails.
    """

    def __init__(
        self,
        pid: int,
        ram_budget: int | None = None,
        on_limit: Callable[[str], None] | None = None,
        gpu=None,
        floor: int | None = None,
        cpus: tuple[int, ...] = (),
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        import psutil

        self.samples: list[Sample] = []
        self.problems: list[str] = []
        self._pid, self._budget, self._on_limit, self._gpu = pid, ram_budget, on_limit, gpu
        self._on_error = on_error
        self.floor = floor if floor is not None else int(psutil.virtual_memory().total * AVAILABLE_FLOOR)
        self.cpus = tuple(cpus) or tuple(sorted(os.sched_getaffinity(0)))
        self._tuner = psutil.Process()
        self._gpu_seen = 0  # NVML's timestamp of the last per-process sample read
        self.ram_now = 0  # the tree's memory as ``limit_now`` last read it
        self._gpu_foreign_off = False
        super().__init__("autotune-monitor")

    def _loop(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # noqa: BLE001 - the trial must not run on unguarded
            reason = f"the trial's monitor (RAM guard) failed: {type(exc).__name__}: {exc}"
            self.problems.append(reason)
            if self._on_error:
                self._on_error(reason)

    def _watch(self) -> None:
        import psutil

        fired = False
        last_tree = last_pss = last_walk = 0.0
        tree_every, pss_every = INTERVAL, PSS_EVERY  # widened by what each reading costs (*_SHARE)
        known: tuple[int, ...] = ()  # the tree's processes at the last walk
        top_rss = pss_rss = 0  # the tree's highest RSS so far; and up to the last PSS reading
        lowest = None  # available memory's low since the last sample, which records it
        while not self._stop.is_set():
            now = time.time()
            available = psutil.virtual_memory().available
            lowest = available if lowest is None else min(lowest, available)
            under_floor = available < self.floor
            if under_floor or now - last_tree >= tree_every:
                spent = time.thread_time()
                tree = read_known(known) if known and now - last_walk < WALK_EVERY and not under_floor else None
                walked = tree is None
                if tree is None:
                    tree, last_walk = read_tree(self._pid), now
                    known = tree.pids
                rss = tree.rss
                top_rss = max(top_rss, rss)
                sample = Sample(
                    now, rss, None, lowest, self._cpu_reading(tree) if walked else None, *self._gpu_reading(tree.pids)
                )
                lowest = None
                tree_every, last_tree = max(INTERVAL, (time.thread_time() - spent) / MONITOR_SHARE), now
                climbed = rss > (1 + PSS_GROWTH) * pss_rss and now - last_pss >= PSS_EVERY
                if (self._budget and rss > self._budget) or under_floor or climbed or now - last_pss >= pss_every:
                    spent = time.thread_time()
                    sample = dataclasses.replace(sample, ram=tree_memory(tree.pids))
                    pss_every, last_pss = max(PSS_EVERY, (time.thread_time() - spent) / PSS_SHARE), now
                    pss_rss = top_rss
                self.samples.append(sample)
                if not fired and self._on_limit and sample.ram is not None:
                    reason = self._limit_reason(sample.ram, available)
                    if reason:
                        fired = True
                        self._on_limit(reason)
            self._stop.wait(INTERVAL)

    def _cpu_reading(self, tree: TreeReading | None = None) -> CpuReading:
        times = self._tuner.cpu_times()
        return CpuReading(cpus_busy(self.cpus), (tree or read_tree(self._pid)).cpu, times.user + times.system)

    def foreign_cpu(self, since: float) -> float | None:
        """Foreign CPU load (see ``foreign_cpu``) from wall time ``since`` to now; None
        before the first sample."""
        start = next((s for s in reversed(self.samples) if s.wall <= since and s.cpu), None)
        if start is None:
            start = next((s for s in self.samples if s.cpu), None)
        if start is None or start.cpu is None:  # (a sample with a reading, or none)
            return None
        now = time.time()
        return foreign_cpu(start.cpu, self._cpu_reading(), now - start.wall, len(self.cpus))

    def foreign_gpu(self, since: float, until: float) -> float | None:
        """Mean foreign SM load of the trial's GPU over ``[since, until]`` (None: unknown)."""
        seen = [s.gpu_foreign for s in self.samples if since <= s.wall <= until and s.gpu_foreign is not None]
        return statistics.fmean(seen) if seen else None

    def limit_now(self) -> str | None:
        """The tree's memory read now, on the caller's thread: why it is over the budget or the
        machine under its floor, or None. A verdict that would end the trial for another reason
        asks first: a tree that pages in gigabytes stops stepping, and on a loaded machine the
        stall timer (3 s) fired before the sampling thread's next reading named the RAM."""
        import psutil

        if not self._on_limit:
            return None
        return self._limit_reason(self.read_ram(), psutil.virtual_memory().available)

    def read_ram(self) -> int:
        """The tree's memory (``tree_memory``) read now, on the caller's thread (also kept as ``ram_now``)."""
        self.ram_now = tree_memory(read_tree(self._pid).pids)
        return self.ram_now

    def last_ram(self) -> int:
        """The tree's memory as last read (PSS where read, else RSS; 0 before any reading)."""
        for sample in reversed(self.samples):
            if sample.ram is not None:
                return sample.ram
        return self.samples[-1].rss if self.samples else 0

    def _limit_reason(self, ram: int, available: int) -> str | None:
        if self._budget and ram > self._budget:
            return f"the trial's processes used {size(ram)}, over the RAM budget of {size(self._budget)}"
        if available < self.floor:
            return (
                f"the machine's available memory fell to {size(available)}, under the floor "
                f"of {size(self.floor)}; the trial's processes used {size(ram)}"
            )
        return None

    def _gpu_reading(self, pids: tuple[int, ...]) -> tuple:
        if self._gpu is None:
            return ()
        import pynvml

        try:
            util = pynvml.nvmlDeviceGetUtilizationRates(self._gpu).gpu
            mem = pynvml.nvmlDeviceGetMemoryInfo(self._gpu).used
            tx = pynvml.nvmlDeviceGetPcieThroughput(self._gpu, pynvml.NVML_PCIE_UTIL_TX_BYTES)
            rx = pynvml.nvmlDeviceGetPcieThroughput(self._gpu, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        except pynvml.NVMLError as exc:  # the driver went away, or the device fell off the bus
            self.problems.append(f"GPU readings stopped: NVML: {exc}")
            self._gpu = None
            return ()
        return float(util), int(mem), tx / 1024, rx / 1024, self._gpu_foreign(pids)  # NVML: KB/s; MB/s here

    def _gpu_foreign(self, pids: tuple[int, ...]) -> float | None:
        """Other processes' SM use of the trial's GPU since the last reading (None: unknown)."""
        if self._gpu_foreign_off:
            return None
        import pynvml

        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(self._gpu, self._gpu_seen)
        except pynvml.NVMLError_NotFound:  # no process sampled since the last reading
            return None
        except pynvml.NVMLError as exc:  # not supported here (MIG, some vGPUs)
            self._gpu_foreign_off = True
            self.problems.append(f"other processes' use of the GPU cannot be read: NVML: {exc}")
            return None
        if samples:
            self._gpu_seen = max(s.timeStamp for s in samples)
        return foreign_gpu(samples, set(pids))

    def summary(self, since: float = 0.0, until: float = float("inf")) -> dict[str, float]:
        """Peak RAM (``tree_memory``), minimum available RAM and GPU means/peaks over ``[since, until]``."""
        window = [s for s in self.samples if since <= s.wall <= until]
        out: dict[str, float] = {}
        exact = [s.ram for s in window if s.ram is not None]
        if exact:
            out["ram_peak"] = float(max(exact))
        if window:
            out["available_min"] = float(min(s.available for s in window))
        # (a reading sets all three: _gpu_reading)
        gpu = [
            (s.gpu_util, s.gpu_mem, s.pcie_rx)
            for s in window
            if s.gpu_util is not None and s.gpu_mem is not None and s.pcie_rx is not None
        ]
        if gpu:
            out["gpu_util_mean"] = statistics.fmean(util for util, _, _ in gpu)
            out["gpu_mem_peak"] = float(max(mem for _, mem, _ in gpu))
            out["pcie_rx_mean"] = statistics.fmean(rx for _, _, rx in gpu)
        return out
