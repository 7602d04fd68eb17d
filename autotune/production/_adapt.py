"""The adaptive loader in production: ``autotune.load(path, adapt=True)``.

A study measures one afternoon; in production the storage slows, a neighbour takes cores, and
the exported worker count is wrong for hours. With ``adapt`` the recipe keeps measuring what the
loop waits on its loader, epoch by epoch, and between epochs moves ``num_workers`` (and, with
the workers at their most, ``prefetch_factor``) when that wait rises or falls past thresholds
(``autotune.production._adapt_rule.decide``: a pure rule over the epochs so far). It never changes what changes the math (the
batch size, the lr, the precision), never moves within an epoch (a new iterator would replay or
skip samples), and undoes a move that ran slower. Every move is printed once and, with a
tracking URI, logged to an MLflow run of the production job with the values in force.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from autotune.machine._margin import gpu_line
from autotune.production._adapt_rule import MOST_PREFETCH, Epoch, Mark, Move, decide, held, most_workers
from autotune.production._prodlog import FLUSH_S


class AdaptiveLoaders:
    """The loaders a recipe built, rebuilt between epochs with the values ``decide`` moves to;
    each epoch measured at the loop (how long it waited for each batch). Within an epoch, the
    memory margin (``autotune.machine._margin``): past it, the values step down to what fits, mid-epoch
    where the loader can go on where it was (a map-style dataset delivering in order), and stay
    at most there for the rest of the job."""

    def __init__(self, cpus: int, say: Any = None, log: Any = None, budget: int | None = None) -> None:
        from autotune.machine._margin import Cgroup, Footprint, default_budget

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

    def flush(self, timeout: float = FLUSH_S) -> bool:
        """Wait (``timeout`` seconds at most) until the epochs logged so far are in MLflow
        (``autotune.production._prodlog``: a background thread writes them); whether they are. True without
        a tracking URI."""
        return self._log is None or self._log.flush(timeout)

    def built(self, loader: Any, dataset: Any, kwargs: Mapping[str, Any]) -> None:
        """Remember what ``loader`` was built from (its final DataLoader kwargs), and build the
        loader the epochs run on: the same, its batches counted and its order kept."""
        from torch.utils.data import IterableDataset

        from autotune.machine._margin import Counted, EpochOrder

        workers = int(kwargs.get("num_workers", 0) or 0)
        kw = {**kwargs, "collate_fn": Counted(loader.collate_fn, workers)}
        order = None
        if (
            loader.batch_sampler is not None
            and not isinstance(dataset, IterableDataset)
            and kwargs.get("in_order", True)
        ):
            order = EpochOrder(loader.batch_sampler)
            kw = {k: v for k, v in kw.items() if k not in ("batch_size", "shuffle", "sampler", "drop_last")}
            kw["batch_sampler"] = order
        self._built[id(loader)] = {
            "dataset": dataset,
            "kwargs": kw,
            "current": None,
            "epochs": [],
            "order": order,
            "floor": workers,
            "ceiling": most_workers(self._cpus, workers),
            "stuck": {},
            "prefetch": MOST_PREFETCH,
            "step": None,
        }
        self._build(self._built[id(loader)], kw)

    def iterate(self, loader: Any, batches: Any, count: Any) -> Iterator[Any]:
        """An epoch of ``loader`` (the loader in force for it), through ``batches`` (the recipe's
        own iteration: the device copy and prefetch), measured; then the next epoch's values."""
        from autotune.machine._margin import CHECK_EVERY

        state = self._built.get(id(loader))
        if state is None:  # not built by this recipe: as it is
            yield from batches(loader)
            return
        state["kwargs"]["collate_fn"].restart()
        cpu_began, own_began = cpu_seconds(), self._footprint.cpu()
        waited = unmade = samples = 0.0
        peak = 0
        began = asked = time.perf_counter()
        checked = -CHECK_EVERY  # the first batch of a loader is checked: its queue fills from there
        while True:
            source, step, seeded = batches(state["current"]), None, False
            counted, order = state["kwargs"]["collate_fn"], state["order"]
            ready = 0  # batches made and not taken when the loop asked (0: it waits for a worker)
            for batch in source:
                if not seeded:  # its iterator has drawn its seed: the user's generator again
                    state["current"].generator, seeded = state["kwargs"].get("generator"), True
                wait = time.perf_counter() - asked
                waited += wait
                unmade += wait if ready <= 0 else 0.0
                yield batch
                samples += count(batch)
                counted.took(batch)
                if order is not None:
                    order.trained()
                asked = time.perf_counter()
                ready = counted.ready()
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
        own = (
            (own_ended - own_began) / (wall * cpu_ended[1])
            if own_began is not None and own_ended is not None and cpu_ended is not None
            else None
        )
        epoch = Epoch(
            waited / wall,
            samples / wall,
            int(kw.get("num_workers", 0) or 0),
            kw.get("prefetch_factor"),
            busy,
            own,
            unmade / wall,
        )
        state["epochs"].append(epoch)
        now = time.monotonic()
        stuck = held(state["stuck"], state["epochs"], now)
        move = decide(state["epochs"], state["floor"], state["ceiling"], stuck, state["prefetch"])
        if move is not None and move.undoes:  # undone back to these: they stay a while
            state["stuck"][(move.workers, move.prefetch)] = Mark(len(state["epochs"]), now, move.was)
        if self._log is not None:
            memory = {"ram_gib": peak / 2**30} if peak else {}
            memory.update({k: v for k, v in (("cpu_busy_frac", busy), ("cpu_own_frac", own)) if v is not None})
            self._log(
                len(state["epochs"]),
                {
                    "data_wait_frac": epoch.wait,
                    "data_wait_unmade_frac": epoch.wanting,
                    "samples_per_s": epoch.rate,
                    **memory,
                },
                {"num_workers": epoch.workers, "prefetch_factor": epoch.prefetch},
            )
        if state["step"] is not None:  # a step the loader could not take mid-epoch
            self._step(state, state["step"], mid_epoch=False)
        elif move is not None:
            self._rebuild(state, move)

    def _check(self, state: dict[str, Any], counted: Any) -> tuple[Any, int]:
        """The margin's step for the tree as it is now (or None), and what it holds."""
        from autotune.machine._margin import fit

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
        """Say once when the GPU's reserved memory passes the margin (``autotune.machine._margin.gpu_line``)."""
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
        from autotune.core._loaders import drop_worker_kwargs

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

        from autotune.machine._margin import Counted

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

    from autotune.machine._monitor import cpus_busy

    try:
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        return cpus_busy(cpus), len(cpus)
    except (AttributeError, OSError):
        return None


def adapting_line(adaptive: AdaptiveLoaders) -> str:
    """What the adaptive loader does, said after the values a recipe trains with: the RAM budget
    it keeps within, how that is counted, and the study's winner's highest (GiB, from the export)."""
    from autotune.machine._margin import MARGIN

    budget = adaptive.budget / 2**30
    ram_peak = adaptive.ram_peak
    peak = (
        ""
        if ram_peak is None
        else f"; the study's winner held {ram_peak:.2f} GiB"
        + (": over this budget, so expect steps down" if ram_peak > budget else "")
    )
    return (
        f" (adapting num_workers and prefetch_factor between epochs, and stepping them down past "
        f"{MARGIN:.0%} of a {budget:.2f} GiB RAM budget, counted by {adaptive.counted_by}{peak})"
    )
