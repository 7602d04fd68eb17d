"""A trial, or a production run, on several processes: ``--nproc-per-node N``.

Each trial goes through PyTorch's own launcher, ``python -m torch.distributed.run --standalone
--nproc-per-node N``, as the user's job does in production: one rank per process, each with
its share of the trial's CPUs (``rank_share``; on CUDA, its own GPU), ``num_workers`` per rank.

The trial's worker, the process the tuner started, becomes the launcher's parent
(``launch_ranks``): it starts torchrun, reads each rank's events from a FIFO of the rank's
own (``RANKS_ENV``), and tells the tuner about one trial: rank 0's events, with each window's
samples/s summed over the ranks (the whole job's) and its data wait the slowest rank's
(``combine``). A rank whose windows are done leaves; a collective of another then loses its
peer, which ends the trial with the windows every rank closed. Before that, a rank that raises
ends the trial with its error, named by rank; one that dies or hangs ends it as a crash or a
stall, as a one-process trial would. torchrun starts its ranks in sessions of their own, so the
trial's process group does not hold them: they carry the trial's tag, by which the tuner ends
whatever a trial leaves (``autotune.tuner._watch``). Ceilings are not measured on several ranks: a
part measured alone on one rank would wait on the others' collectives.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: The folder of a trial's rank FIFOs (one per local rank, named by it), set for its ranks.
RANKS_ENV = "AUTOTUNE_RANK_EVENTS"
#: The CPUs of the whole job (every rank's), set for its ranks: each rank keeps to its share
#: (``pin_rank``), and what the job runs on is what an export's ``measured_on`` is compared with.
JOB_CPUS_ENV = "AUTOTUNE_JOB_CPUS"
#: Seconds to wait, once rank 0 is done, for the other ranks' last windows.
LAST_WINDOWS_S = 5.0


def torchrun(nproc: int, module_args: Sequence[str]) -> list[str]:
    """The command that runs ``python -m MODULE ARGS`` on ``nproc`` ranks of this host."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        *module_args,
    ]


def local_rank() -> tuple[int, int] | None:
    """(local rank, local world size) when this process is a rank torchrun started, else None."""
    if "LOCAL_RANK" not in os.environ:
        return None
    return int(os.environ["LOCAL_RANK"]), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def rank_share(cpus: Sequence[int], rank: int, ranks: int) -> list[int]:
    """A rank's CPUs: its contiguous share of ``cpus`` (one each, shared in turn, when there are
    fewer CPUs than ranks).

    >>> rank_share([0, 1, 2, 3], 1, 2), rank_share([0, 1, 2], 2, 3), rank_share([5], 1, 2)
    ([2, 3], [2], [5])
    """
    if len(cpus) < ranks:
        return [cpus[rank % len(cpus)]]
    size = len(cpus) // ranks
    return list(cpus[rank * size : (rank + 1) * size])


def check_ranks(nproc: int, jobs: int = 1) -> None:
    """Raise ConfigError unless this machine's CPUs give each of ``nproc`` ranks (of each of
    ``jobs`` trials at once) one of its own."""
    from autotune.core._config import ConfigError
    from autotune.machine._probe import usable_cpus

    cpus = usable_cpus()
    if nproc * jobs > cpus:
        raise ConfigError(
            f"--nproc-per-node {nproc}"
            + (f" with --jobs {jobs}" if jobs > 1 else "")
            + f": this machine gives it {cpus} CPU(s), and each rank needs one of its own "
            f"(at most {cpus // jobs})"
        )


def pin_rank(cpus: Sequence[int] | None = None) -> list[int] | None:
    """In a rank: keep to its share of ``cpus`` (default: this process's). Its CPUs; None outside
    a rank. Its torch threads are set as torchrun sets them, by ``OMP_NUM_THREADS``
    (``rank_environ``)."""
    ranked = local_rank()
    if ranked is None:
        return None
    share = rank_share(sorted(cpus or os.sched_getaffinity(0)), *ranked)
    os.sched_setaffinity(0, share)
    return share


def rank_environ(environ: Mapping[str, str], ranks: int, cpus: Sequence[int] | None = None) -> dict[str, str]:
    """torchrun's environment: each rank's torch threads as many as its share of the CPUs
    (torchrun itself would set 1), unless the user set ``OMP_NUM_THREADS``."""
    from autotune.machine._probe import usable_cpus

    env = dict(environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, len(cpus or os.sched_getaffinity(0)) // ranks)))
    # (counted as the study's probe counts them, a cgroup's CPU quota included: what the export's
    # measured_on holds)
    env[JOB_CPUS_ENV] = str(len(cpus) if cpus else usable_cpus())
    return env


def job_cpus() -> int | None:
    """In a rank started with ``rank_environ``: the CPUs of the whole job; else None (this
    process's own are the job's)."""
    value = os.environ.get(JOB_CPUS_ENV, "") if local_rank() is not None else ""
    return int(value) if value.isdigit() and int(value) > 0 else None


def combine(windows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The job's window from the same window of each rank (rank 0's first): samples/s summed
    over the ranks, the data wait the slowest rank's; the rest is rank 0's.

    >>> w = combine([{"samples": 100, "seconds": 1.0, "data_wait": 0.2, "steps": 4},
    ...              {"samples": 90, "seconds": 0.9, "data_wait": 0.45, "steps": 4}])
    >>> w["samples"], w["data_wait"], w["rank_data_wait"]
    (200, 0.5, [0.2, 0.5])
    """
    first = dict(windows[0])
    seconds = first["seconds"]
    rates = [w["samples"] / w["seconds"] if w.get("seconds") else 0.0 for w in windows]
    waits = [w["data_wait"] / w["seconds"] if w.get("seconds") else 0.0 for w in windows]
    first.update(
        samples=round(sum(rates) * seconds),
        data_wait=max(waits) * seconds,
        rank_samples_per_s=[round(r, 1) for r in rates],
        rank_data_wait=[round(w, 3) for w in waits],
    )
    return first


class _Ranks:
    """The events of every rank, as they come: (rank, event), and (rank, None) once it closed its FIFO."""

    def __init__(self, folder: str, ranks: int) -> None:
        self.events: queue.Queue = queue.Queue()
        for rank in range(ranks):
            path = os.path.join(folder, str(rank))
            os.mkfifo(path)
            threading.Thread(target=self._read, args=(path, rank), daemon=True, name=f"rank-{rank}").start()

    def _read(self, path: str, rank: int) -> None:
        with open(path, "rb") as fifo:  # (blocks until the rank opens it)
            for line in fifo:
                if line.strip():
                    self.events.put((rank, json.loads(line)))
        self.events.put((rank, None))


def launch_ranks(payload: str, ranks: int, send: Callable[[dict[str, Any]], None]) -> int:
    """Run the trial ``payload`` on ``ranks`` ranks through torchrun and ``send`` the tuner its
    events as one trial's; the exit status to end with."""
    folder = tempfile.mkdtemp(prefix="autotune-ranks-")
    channels = _Ranks(folder, ranks)
    env = {**rank_environ(os.environ, ranks, sorted(os.sched_getaffinity(0))), RANKS_ENV: folder}
    proc = subprocess.Popen(torchrun(ranks, ["autotune.worker._trial_main", payload]), env=env)
    print(
        f"autotune: {ranks} ranks through torch.distributed.run (pid {proc.pid}); samples/s is summed over "
        "them, data wait is the slowest rank's",
        flush=True,
    )
    pending: dict[int, dict[int, dict[str, Any]]] = {}  # window index -> rank -> its window
    sent, closed, exited_at = 0, set(), None
    end, deadline = None, 0.0  # the end event to send, and when to stop waiting for windows
    finished: dict[int, dict[str, Any]] = {}  # rank -> its end event (its windows done)
    while True:
        try:
            rank, event = channels.events.get(timeout=0.2)
        except queue.Empty:
            rank, event = -1, None
        if event is None and rank >= 0:
            closed.add(rank)
        elif event is not None:
            kind = event["event"]
            if kind == "window":
                pending.setdefault(event["index"], {})[rank] = event
            elif kind == "error" and end is None and finished:
                # A rank whose windows were done has left, and a collective of this one lost its peer:
                # the trial is over, with the windows every rank closed.
                end, deadline = finished[min(finished)], time.monotonic()
            elif kind == "error" and end is None:
                send({**event, "message": f"rank {rank}: {event.get('message', '')}"})
                _stop(proc)
                return 1
            elif kind == "end":
                finished[rank] = event
                if rank == 0:
                    end, deadline = event, time.monotonic() + LAST_WINDOWS_S
            elif rank == 0 and kind not in ("started", "error"):
                send(event)
        while len(pending.get(sent, {})) == ranks:  # every rank closed window ``sent``
            send(combine([pending[sent][r] for r in range(ranks)]))
            del pending[sent]
            sent += 1
        if end is not None and (not pending or time.monotonic() >= deadline):
            send({**end, "windows": sent})
            _stop(proc)
            return 0
        if end is None and finished and proc.poll() is not None:  # every rank left without rank 0's end
            end, deadline = finished[min(finished)], time.monotonic()
        if end is None and proc.poll() is not None:
            exited_at = exited_at or time.monotonic()
            if len(closed) == ranks or time.monotonic() - exited_at > 2.0:  # (a rank that died unopened)
                return proc.returncode or 1  # a rank died without a Python error: torchrun's words are in the log


def _stop(proc: subprocess.Popen) -> None:
    """End torchrun and its ranks (the other ranks may wait on a collective of one that is done)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
