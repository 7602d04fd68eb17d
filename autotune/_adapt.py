"""The adaptive loader in production: ``autotune.load(path, adapt=True)``.

A study measures one afternoon; in production the storage slows, a neighbour takes cores, and
the exported worker count is wrong for hours. With ``adapt`` the recipe keeps measuring what the
loop waits on its loader, epoch by epoch, and between epochs moves ``num_workers`` (and, with
the workers at their most, ``prefetch_factor``) when that wait rises or falls past thresholds
(``decide``: a pure rule over the epochs so far). It never changes what changes the math (the
batch size, the lr, the precision), never moves within an epoch (a new iterator would replay or
skip samples), and undoes a move that ran slower. Every move is printed once and, with a
tracking URI, logged to an MLflow run of the production job with the values in force.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from autotune._margin import gpu_line

#: Data wait (the share of an epoch's wall time the loop waited for its next batch) past which
#: the loader is short of workers, and under which it has more than it needs.
HIGH, LOW = 0.10, 0.02
#: Epochs in a row past a threshold before a move (twice that under ``LOW``): one slow epoch
#: (a cache refilling, a neighbour's burst) moves nothing.
PATIENCE = 2
#: A move down that ran under this share of the rate before it is undone; a move up (more
#: workers or prefetch, which cost RAM and CPU) that did not gain ``1 / WORSE`` of it, too.
WORSE = 0.97
#: The most workers per usable CPU (an I/O-bound loader's workers mostly sleep) and in all.
WORKERS_PER_CPU, MOST_WORKERS = 4, 64
#: Epochs and seconds (both must pass) the values a move was undone back to stay put
#: (``decide``'s ``stuck``): long enough not to churn (each move restarts the workers), short
#: enough to follow a storage that slows hours into the job.
STUCK_EPOCHS, STUCK_S = 16, 600.0
#: The most ``prefetch_factor`` a move asks for.
MOST_PREFETCH = 16
#: The share of its CPUs kept busy (by the job or others) past which no move goes up, where the
#: training tree itself keeps ``CPU_OWN`` of them busy: the loop then waits for CPU time, which
#: more workers only split finer. Busy CPUs beside a loader whose workers sleep on storage do not
#: stop more of them from helping (its loop needs little CPU: a test of it failed in CI under a
#: guard on the machine's share alone). Reasoned and unit-tested, not yet seen to bind: the steady
#: benchmark's data wait of 30% on a 2-CPU host came with its CPUs 40% busy (the sandbox's pipe
#: latency, in no CPU time), and its moves up were tried and undone.
CPU_FULL = 0.9
CPU_OWN = 0.5


@dataclasses.dataclass(frozen=True)
class Epoch:
    """One measured epoch: its data wait share, samples/s, the loader's values in force, the
    share of the process's CPUs kept busy (``cpu``, by every process: ``cpu_seconds``) and by
    the training process tree itself (``own``); None: not read."""

    wait: float
    rate: float
    workers: int
    prefetch: int | None
    cpu: float | None = None
    own: float | None = None


@dataclasses.dataclass(frozen=True)
class Move:
    """New loader values, and why, in one line; ``undoes``: back to the values before a move
    that did not pay."""

    workers: int
    prefetch: int | None
    why: str
    undoes: bool = False


def decide(epochs: Sequence[Epoch], floor: int, ceiling: int,
           stuck: Collection[tuple[int, int | None]] = (), most_prefetch: int = MOST_PREFETCH) -> Move | None:
    """The loader's values for the next epoch, or None to keep them.

    Up where the last ``PATIENCE`` epochs at these values all waited over ``HIGH``: workers to
    what would have fed the loop (its workers over the share of time they kept up, Little's
    law), at most ``ceiling``; with the workers at ``ceiling``, ``prefetch_factor`` doubled.
    Down one step (a quarter of the workers) where ``2 * PATIENCE`` epochs all waited under
    ``LOW``, never under ``floor`` (the export's own). Back to the values before a move whose
    second epoch (the first pays for starting its workers) ran under ``WORSE`` of their rate, or,
    for a move up, gained less than ``1 / WORSE`` (more workers cost RAM and CPU); an undo is
    not itself judged, and ``stuck`` (the values a move was undone back to) move no more the
    same way: where more workers did not help, waiting is not for want of them (the CPUs are).
    Nor does a move go up while ``CPU_FULL`` of the CPUs are busy and the tree itself keeps
    ``CPU_OWN`` of them so (``Epoch.cpu``, ``Epoch.own``): its loop waits for CPU, not workers.
    ``prefetch_factor`` goes up to ``most_prefetch`` at most (lower after a memory margin step).

    >>> up = [Epoch(0.5, 500.0, 2, 2), Epoch(0.5, 510.0, 2, 2)]
    >>> decide(up, 2, 8)
    Move(workers=4, prefetch=2, why='data wait 50% over 2 epochs (over 10%): num_workers 2 -> 4', undoes=False)
    >>> decide([*up, Epoch(0.3, 600.0, 4, 2), Epoch(0.3, 450.0, 4, 2)], 2, 8).why
    'num_workers 4 -> 2: the move ran 0.88x the samples/s before it'
    >>> decide([*up, Epoch(0.6, 500.0, 2, 2)], 2, 8, stuck={(2, 2)}) is None
    True
    >>> decide([Epoch(0.5, 500.0, 2, 2, cpu=0.95, own=0.7)] * 2, 2, 8) is None  # waiting for CPU
    True
    """
    values = [(e.workers, e.prefetch) for e in epochs]
    runs = [i for i in range(1, len(values)) if values[i] != values[i - 1]]  # where each later run starts
    run = len(epochs) - (runs[-1] if runs else 0)
    last, before = epochs[-1], (epochs[runs[-1] - 1] if runs else None)
    undoing = len(runs) >= 2 and values[runs[-2] - 1] == values[-1]  # back where the run before started
    up = before is not None and (last.workers, last.prefetch or 0) > (before.workers, before.prefetch or 0)
    if before is not None and not undoing and run == 2 and \
            last.rate < (before.rate / WORSE if up else WORSE * before.rate):
        undo = ", ".join([f"num_workers {last.workers} -> {before.workers}"] * (last.workers != before.workers)
                         + [f"prefetch_factor {last.prefetch} -> {before.prefetch}"] * (last.prefetch != before.prefetch))
        return Move(before.workers, before.prefetch,
                    f"{undo}: the move ran {last.rate / before.rate:.2f}x the samples/s before it", undoes=True)
    stays = (last.workers, last.prefetch) in stuck
    recent = epochs[-PATIENCE:]
    full = all(e.cpu is not None and e.own is not None and e.cpu >= CPU_FULL and e.own >= CPU_OWN for e in recent)
    if run >= PATIENCE and all(e.wait > HIGH for e in recent) and not stays and not full:
        wait = sum(e.wait for e in recent) / len(recent)
        said = f"data wait {wait:.0%} over {len(recent)} epochs (over {HIGH:.0%}): "
        if last.workers < ceiling:
            wanted = min(ceiling, max(last.workers + 1, math.ceil(max(last.workers, 1) / max(1 - wait, 0.05))))
            return Move(wanted, last.prefetch, said + f"num_workers {last.workers} -> {wanted}")
        if last.workers and last.prefetch is not None and last.prefetch < most_prefetch:
            wanted = min(most_prefetch, 2 * last.prefetch)
            return Move(last.workers, wanted, said + f"prefetch_factor {last.prefetch} -> {wanted} "
                                                     f"(num_workers at its most here, {ceiling})")
        return None
    calm = epochs[-2 * PATIENCE:]
    if run >= 2 * PATIENCE and last.workers > floor and all(e.wait < LOW for e in calm) and not stays:
        wanted = max(floor, last.workers - max(1, last.workers // 4))
        return Move(wanted, last.prefetch, f"data wait under {LOW:.0%} over {len(calm)} epochs: "
                                           f"num_workers {last.workers} -> {wanted}")
    return None


def most_workers(cpus: int, exported: int) -> int:
    """The most workers a move asks for on ``cpus`` usable CPUs (never under the export's).

    >>> most_workers(2, 2), most_workers(32, 4), most_workers(2, 12)
    (8, 64, 12)
    """
    return max(exported, min(MOST_WORKERS, WORKERS_PER_CPU * cpus))


class AdaptiveLoaders:
    """The loaders a recipe built, rebuilt between epochs with the values ``decide`` moves to;
    each epoch measured at the loop (how long it waited for each batch). Within an epoch, the
    memory margin (``autotune._margin``): past it, the values step down to what fits, mid-epoch
    where the loader can go on where it was (a map-style dataset delivering in order), and stay
    at most there for the rest of the job."""

    def __init__(self, cpus: int, say: Any = None, log: Any = None, budget: int | None = None) -> None:
        from autotune._margin import Cgroup, Footprint, default_budget

        self._built: dict[int, dict[str, Any]] = {}  # id(user's loader) -> its state
        self._cpus = cpus
        self._say = say or (lambda line: print(f"autotune: adapt: {line}", file=sys.stderr, flush=True))
        self._log = log  # (step, metrics, values) -> None: the production run's MLflow logging
        # In a memory cgroup with a limit (a container's), its own count against it; else an estimate.
        self._cgroup = Cgroup.find()
        self.budget = min(budget or default_budget(self._cgroup), self._cgroup.limit if self._cgroup else 1 << 62)
        self.counted_by = "its memory cgroup" if self._cgroup else "an estimate of the process tree"
        self._footprint = Footprint()
        self.make: Any = None  # (dataset, **kwargs) -> a DataLoader; None: DataLoader itself
        # GiB: the study's winner's highest host RAM and GPU memory (the export's), where known
        self.ram_peak: float | None = None
        self.gpu_peak: float | None = None
        self._gpu_total: int | None = None
        self._gpu_said = False
        self.moves: list[Move] = []

    def built(self, loader: Any, dataset: Any, kwargs: Mapping[str, Any]) -> None:
        """Remember what ``loader`` was built from (its final DataLoader kwargs), and build the
        loader the epochs run on: the same, its batches counted and its order kept."""
        from torch.utils.data import IterableDataset

        from autotune._margin import Counted, EpochOrder

        workers = int(kwargs.get("num_workers", 0) or 0)
        kw = {**kwargs, "collate_fn": Counted(loader.collate_fn, workers)}
        order = None
        if loader.batch_sampler is not None and not isinstance(dataset, IterableDataset) \
                and kwargs.get("in_order", True):
            order = EpochOrder(loader.batch_sampler)
            kw = {k: v for k, v in kw.items() if k not in ("batch_size", "shuffle", "sampler", "drop_last")}
            kw["batch_sampler"] = order
        self._built[id(loader)] = {"dataset": dataset, "kwargs": kw, "current": None, "epochs": [], "order": order,
                                   "floor": workers, "ceiling": most_workers(self._cpus, workers), "stuck": {},
                                   "prefetch": MOST_PREFETCH, "step": None}
        self._build(self._built[id(loader)], kw)

    def iterate(self, loader: Any, batches: Any, count: Any) -> Iterator[Any]:
        """An epoch of ``loader`` (the loader in force for it), through ``batches`` (the recipe's
        own iteration: the device copy and prefetch), measured; then the next epoch's values."""
        from autotune._margin import CHECK_EVERY

        state = self._built.get(id(loader))
        if state is None:  # not built by this recipe: as it is
            yield from batches(loader)
            return
        state["kwargs"]["collate_fn"].restart()
        cpu_began, own_began = cpu_seconds(), self._footprint.cpu()
        waited = samples = 0.0
        peak = 0
        began = asked = time.perf_counter()
        checked = -CHECK_EVERY  # the first batch of a loader is checked: its queue fills from there
        while True:
            source, step, seeded = batches(state["current"]), None, False
            counted, order = state["kwargs"]["collate_fn"], state["order"]
            for batch in source:
                if not seeded:  # its iterator has drawn its seed: the user's generator again
                    state["current"].generator, seeded = state["kwargs"].get("generator"), True
                waited += time.perf_counter() - asked
                yield batch
                samples += count(batch)
                counted.took(batch)
                if order is not None:
                    order.trained()
                asked = time.perf_counter()
                if asked - checked >= CHECK_EVERY:
                    checked = asked
                    step, used = self._check(state, counted)
                    peak = max(peak, used)
                    if step is not None and order is not None:
                        break  # on at the batch reached, with the values that fit
            else:
                break
            # its loader's workers go with it: a generator's (the recipe's batches) closed, a
            # DataLoader iterator's (a script's loop under autotune exec) shut down
            end = getattr(source, "close", None) or getattr(source, "_shutdown_workers", None)
            if end is not None:
                end()
            source = None
            order.resume()
            self._step(state, step, mid_epoch=True)
            asked, checked = time.perf_counter(), -CHECK_EVERY
        wall = time.perf_counter() - began
        if wall <= 0 or not samples:
            return
        kw = state["kwargs"]
        cpu_ended, own_ended = cpu_seconds(), self._footprint.cpu()
        busy = (cpu_ended[0] - cpu_began[0]) / (wall * cpu_ended[1]) if cpu_began and cpu_ended else None
        own = (own_ended - own_began) / (wall * cpu_ended[1]) if None not in (own_began, own_ended, cpu_ended) \
            else None
        epoch = Epoch(waited / wall, samples / wall, int(kw.get("num_workers", 0) or 0), kw.get("prefetch_factor"),
                      busy, own)
        state["epochs"].append(epoch)
        seen, now = len(state["epochs"]), time.monotonic()
        stuck = {values for values, (epoch_at, at) in state["stuck"].items()
                 if seen - epoch_at < STUCK_EPOCHS or now - at < STUCK_S}
        move = decide(state["epochs"], state["floor"], state["ceiling"], stuck, state["prefetch"])
        if move is not None and move.undoes:
            state["stuck"][(move.workers, move.prefetch)] = (seen, now)  # undone back to these: they stay a while
        if self._log is not None:
            memory = {"ram_gib": peak / 2**30} if peak else {}
            memory.update({k: v for k, v in (("cpu_busy_frac", busy), ("cpu_own_frac", own)) if v is not None})
            self._log(len(state["epochs"]), {"data_wait_frac": epoch.wait, "samples_per_s": epoch.rate, **memory},
                      {"num_workers": epoch.workers, "prefetch_factor": epoch.prefetch})
        if state["step"] is not None:  # a step the loader could not take mid-epoch
            self._step(state, state["step"], mid_epoch=False)
        elif move is not None:
            self._rebuild(state, move)

    def _check(self, state: dict[str, Any], counted: Any) -> tuple[Any, int]:
        """The margin's step for the tree as it is now (or None), and what it holds."""
        from autotune._margin import fit

        kw = state["kwargs"]
        in_flight, size = counted.in_flight()
        used = self._cgroup.used() if self._cgroup is not None else None
        held = max(0, used - in_flight) if used is not None else self._footprint.held()
        workers = int(kw.get("num_workers", 0) or 0)
        step = fit(held, size, self.budget, workers, kw.get("prefetch_factor"))
        if step is not None and state["order"] is None and state["step"] is None:
            state["step"] = step  # taken at the epoch's end: this loader cannot go on mid-epoch
            self._say(step.why + " (at the epoch's end: this loader cannot go on mid-epoch)")
        self._check_gpu()
        return (step if state["order"] is not None else None), held + in_flight

    def _check_gpu(self) -> None:
        """Say once when the GPU's reserved memory passes the margin (``autotune._margin.gpu_line``)."""
        import torch

        if self._gpu_said or not torch.cuda.is_initialized():
            return
        device = torch.cuda.current_device()
        if self._gpu_total is None:
            self._gpu_total = torch.cuda.get_device_properties(device).total_memory
        line = gpu_line(torch.cuda.memory_reserved(device), self._gpu_total, self.gpu_peak)
        if line is not None:
            self._gpu_said = True
            self._say(line)

    def _step(self, state: dict[str, Any], step: Any, mid_epoch: bool) -> None:
        """Take a margin step, and hold it: no later move goes above it."""
        state["step"] = None
        state["ceiling"] = min(state["ceiling"], step.workers)
        state["floor"] = min(state["floor"], step.workers)
        state["prefetch"] = min(state["prefetch"], step.prefetch or MOST_PREFETCH)
        state["epochs"] = []  # the rates before were at values it may not go back to
        self._rebuild(state, Move(step.workers, step.prefetch, step.why), said=mid_epoch, mid_epoch=mid_epoch)

    def _rebuild(self, state: dict[str, Any], move: Move, said: bool = True, mid_epoch: bool = False) -> None:
        persistent = bool(state["kwargs"].get("persistent_workers"))
        from autotune._loaders import drop_worker_kwargs

        kw = drop_worker_kwargs({**state["kwargs"], "num_workers": move.workers, "prefetch_factor": move.prefetch or 2})
        self._build(state, kw, own_seed=mid_epoch or persistent)
        self.moves.append(move)
        if said:
            self._say(move.why)

    def _build(self, state: dict[str, Any], kw: dict[str, Any], own_seed: bool = False) -> None:
        """Build the loader the next batches come from. With ``own_seed`` (where the loader as
        exported would not start an iterator: mid-epoch, or between epochs of persistent
        workers), its first iterator draws its workers' seed from a generator of its own, so the
        process's random state (and the next epoch's order) stays that of the export's loader."""
        import torch
        from torch.utils.data import DataLoader

        from autotune._margin import Counted

        old = state["current"]
        if old is not None:
            # a new loader: nothing of it in flight
            kw["collate_fn"] = Counted(kw["collate_fn"].collate, int(kw.get("num_workers", 0) or 0))
        built = {**kw, "generator": torch.Generator()} if own_seed else kw
        state["current"], state["kwargs"] = (self.make or DataLoader)(state["dataset"], **built), kw
        shutdown = getattr(getattr(old, "_iterator", None), "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()  # a persistent loader's workers would live on


def cpu_seconds() -> tuple[float, int] | None:
    """Busy CPU seconds of the CPUs this process may run on (every process's: the job's own, and
    a neighbour's, which more workers cannot take either), and how many they are; None where not
    read (the tree's own share is ``Footprint.cpu``'s)."""
    import os

    from autotune._monitor import cpus_busy

    try:
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        return cpus_busy(cpus), len(cpus)
    except (AttributeError, OSError):
        return None


def adapting_line(adaptive: AdaptiveLoaders) -> str:
    """What the adaptive loader does, said after the values a recipe trains with: the RAM budget
    it keeps within, how that is counted, and the study's winner's highest (GiB, from the export)."""
    from autotune._margin import MARGIN

    budget = adaptive.budget / 2**30
    ram_peak = adaptive.ram_peak
    peak = "" if ram_peak is None else f"; the study's winner held {ram_peak:.2f} GiB" + (
        ": over this budget, so expect steps down" if ram_peak > budget else "")
    return (f" (adapting num_workers and prefetch_factor between epochs, and stepping them down past "
            f"{MARGIN:.0%} of a {budget:.2f} GiB RAM budget, counted by {adaptive.counted_by}{peak})")


def production_log(tracking_uri: str | None, origin: str | None) -> Any:
    """With a tracking URI, an MLflow run for the production job (experiment
    ``autotune-production``, named after the recipe's origin) and the logging of each epoch
    (``AdaptiveLoaders``'s ``log``): its data wait and samples/s as metrics, the loader values in
    force as metrics and as the tag ``autotune.adapt``; None without one."""
    if not tracking_uri:
        return None
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("autotune-production")
    experiment_id = experiment.experiment_id if experiment else client.create_experiment("autotune-production")
    run = client.create_run(experiment_id, run_name=f"production: {origin or 'the defaults'}",
                            tags={"autotune.origin": origin or "the defaults"})
    in_force: list[str] = []

    def log(step: int, metrics: Mapping[str, float], values: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric, RunTag

        # One call an epoch (one transaction, one request to a server): the loop waits for it.
        figures = {**metrics, **{k: float(v) for k, v in values.items() if v is not None}}
        stamp = int(time.time() * 1000)
        now = " ".join(f"{k}={v}" for k, v in values.items())
        tags = [] if in_force and in_force[-1] == now else [RunTag("autotune.adapt", now)]
        in_force.append(now)
        client.log_batch(run.info.run_id, metrics=[Metric(k, v, stamp, step) for k, v in figures.items()], tags=tags)

    log.run_id = run.info.run_id  # type: ignore[attr-defined]
    return log
