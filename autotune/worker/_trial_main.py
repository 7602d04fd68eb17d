"""The trial worker: ``python -m autotune.worker._trial_main SPEC_JSON``, one process per trial.

Environment knobs were set by the parent before this process started (so before
torch); this module sets backend flags and seeds, imports the user's function and
runs it under a :class:`~autotune.worker._trial.Trial`, reporting on the event pipe.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from autotune.core._events import FD_ENV, EventWriter
from autotune.machine._slots import CPUS_ENV
from autotune.training._ranks import RANKS_ENV, launch_ranks, local_rank, pin_rank

#: Lines of a traceback kept as a trial's reason.
TRACEBACK_LINES = 12
#: Set when the trial stopped the code before its end (its budget spent): see ``end``.
_stopped: list[bool] = []


def load_target(target: str):
    """Import the training function named by ``target``."""
    module_name, _, func = target.rpartition(":")
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        # Registered under its stem, with its folder on sys.path, so that
        # DataLoader workers started with "spawn" can unpickle its classes.
        sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path} as a module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    return getattr(module, func)


def error_event(exc: BaseException) -> dict[str, Any]:
    """What the parent needs to classify an exception: type, message, traceback tail."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    text = "".join(lines).rstrip().splitlines()
    return {"type": type(exc).__name__, "message": str(exc), "traceback": "\n".join(text[-TRACEBACK_LINES:])}


class _Logged:
    """Sends events on, and writes a line for each stage of the trial to its log (stdout):
    the log then says what the trial did beside what the training function printed."""

    def __init__(self, emit: EventWriter) -> None:
        self._emit = emit

    def __call__(self, kind: str, **fields: Any) -> None:
        self._emit(kind, **fields)
        line = _log_line(kind, fields)
        if line:
            print(f"autotune: {line}", flush=True)


def _log_line(kind: str, e: dict[str, Any]) -> str | None:
    rate = e["samples"] / e["seconds"] if e.get("seconds") else 0.0
    loss = f", loss {e['loss']:.4g}" if e.get("loss") is not None else ""
    if kind == "resolved":
        return f"first batch; running with {e['config']}"
    if kind == "compiling":
        return "compiling the model (torch.compile): the first forward and backward"
    if kind == "warmup":
        compiled = f", {e['compile_s']:.1f} s of it compiling" if "compile_s" in e else ""
        return f"warmup done: {e['steps']} steps in {e['seconds']:.2f} s{compiled}{loss}"
    if kind == "window":
        return (
            f"window {e['index'] + 1}: {e['samples']} samples in {e['seconds']:.3f} s = {rate:,.0f} samples/s, "
            f"data wait {e['data_wait'] / e['seconds']:.0%}{loss}"
            if e.get("seconds")
            else None
        )
    if kind == "ceiling":
        return f"{e['part']} ceiling window {e['index'] + 1}: {rate:,.0f} samples/s"
    if kind == "end":
        return f"done: {e['steps']} steps, {e['windows']} windows"
    return None


def run_script_measured(run: Any, target: str, argv: list[str], emit: Any) -> None:
    """Run an unmodified script under ``run``'s hooks (``autotune.training._hooks``) until its windows are
    done, then finish the trial.

    Raises:
        NotTunable: it gave nothing to measure (no DataLoader, no batch taken, no optimizer
            step, or no measured window before it ended), said with its last lines.
    """
    from autotune.training._children import ChildWatch
    from autotune.training._script import NotTunable, label, run_script
    from autotune.worker._trial import BudgetSpent

    def refuse_in_child(line: str) -> None:  # a forked child of the script's: the trial ends here
        emit("error", type=NotTunable.__name__, message=f"{label(target, argv)} {line}")
        os.killpg(os.getpgid(0), signal.SIGKILL)

    run.hooks.install()
    children = ChildWatch(refuse_in_child, lambda line: NotTunable(f"{label(target, argv)} {line}")).install()
    emit("loaded")  # torch is imported; the script's own imports count as its start-up
    try:
        said = run_script(target, argv)
    except BudgetSpent:
        _stopped.append(True)
        run.finish()
        return
    finally:
        children.remove()
        run.hooks.remove()
    hooks, why = run.hooks, None
    if hooks.training is None and not run.loaderless:
        why = (
            "stepped no torch.optim optimizer after taking a batch"
            if hooks.last_fetched is not None
            else "took no batch from the DataLoader it built"
            if hooks.built_loader
            else None
        )
        why = (
            f"{why} (autotune measures the DataLoader whose batches an optimizer.step() follows)"
            if why
            else "has no training loop: it built no DataLoader, stepped no optimizer and called no backward() "
            "(autotune measures a loop of optimizer steps, with or without a DataLoader)"
        )
    else:
        run.finish(ended=True)
        why = run.too_short(hooks.steps)  # (its optimizer steps: the first batch came before the loader was known)
    if why:
        raise NotTunable(f"{label(target, argv)} {why}" + (f"; its last lines: {said}" if said else ""))


def probe_machine(spec: dict[str, Any], emit: EventWriter) -> int:
    """The machine's fingerprint (``autotune.machine._probe.probe``), sent as a ``probe`` event: asked of
    a process forked from a warm worker, which has imported torch already."""
    import dataclasses

    from autotune.machine._probe import probe

    try:
        found = probe(spec["probe"], cpus=spec["cpus"])
    except ValueError as exc:  # a device this machine does not have: said by the tuner
        emit("probe", error=str(exc))
        return 2
    emit("probe", fingerprint=dataclasses.asdict(found))
    return 0


def main(argv: list[str] | None = None) -> int:
    # A segfault or abort in native code (a DataLoader collate, a CUDA kernel launch)
    # then leaves the Python stack in the trial log, which the crash reason quotes.
    faulthandler.enable()
    spec = json.loads((argv or sys.argv[1:])[0])
    if "probe" in spec:
        return probe_machine(spec, EventWriter(int(os.environ[FD_ENV])))
    ranked = local_rank() if os.environ.get(RANKS_ENV) else None
    if ranked is None and spec.get("nproc", 1) > 1:  # the launcher of a trial's ranks (autotune.training._ranks)
        writer = EventWriter(int(os.environ[FD_ENV]))
        writer("started", pid=os.getpid())
        return launch_ranks(
            sys.argv[1] if argv is None else argv[0],
            spec["nproc"],
            lambda e: writer(e["event"], **{k: v for k, v in e.items() if k not in ("event", "at")}),
        )
    if ranked is not None:  # one rank of them: its events on its own FIFO
        fd = os.open(os.path.join(os.environ[RANKS_ENV], str(ranked[0])), os.O_WRONLY)
        emit = _Logged(EventWriter(fd)) if ranked[0] == 0 else EventWriter(fd)
        if spec["device"].startswith("cuda"):
            spec["device"] = f"cuda:{ranked[0]}"
    else:
        emit = _Logged(EventWriter(int(os.environ[FD_ENV])))
    rank = f" (rank {ranked[0]} of {ranked[1]})" if ranked else ""
    print(
        f"autotune: trial worker pid {os.getpid()}{rank}: {spec['target']} on {spec['device']}, seed {spec['seed']}, "
        f"config {spec['config'] or '(your code as written)'}",
        flush=True,
    )
    emit("started", pid=os.getpid())
    # A --jobs slot's CPUs: pinned before torch starts, so that its thread pool and the
    # DataLoader workers (which inherit the mask) stay on them.
    cpus = {int(c) for c in os.environ.get(CPUS_ENV, "").split(",") if c}
    if ranked is not None:  # a rank keeps to its share of the trial's CPUs
        cpus = set(pin_rank(sorted(cpus) or None) or ())  # (a list inside a rank, which this is)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        import torch

        if cpus and ranked is None:  # (a rank's are OMP_NUM_THREADS: autotune.training._ranks.pin_rank)
            torch.set_num_threads(len(cpus))

        from autotune.core._config import Config
        from autotune.machine._launch import Budget
        from autotune.worker._trial import BudgetSpent, Trial

        torch.manual_seed(spec["seed"])
        script = spec.get("argv") is not None
        kind: type[Trial] = Trial
        if script:  # (its hooks imported for a script only)
            from autotune.worker._script_trial import ScriptTrial

            kind = ScriptTrial
        run = kind(
            Config(**spec["config"]),
            spec["device"],
            emit,
            Budget.from_worker_args(spec["budget"]),
            known_ceilings=spec.get("known_ceilings"),
            trace=spec.get("trace"),
        )
        run.apply_backends()  # before the user's code: its own later settings win, and are reported
        if script:
            run_script_measured(run, spec["target"], spec["argv"], emit)
        else:
            train = load_target(spec["target"])
            emit("loaded")  # torch and the user's module are imported: the parent times the spans
            try:
                train(run)
            except BudgetSpent:
                _stopped.append(True)
                run.finish()
            else:  # it returned by itself: its whole run is measured
                run.finish(ended=True)
                why = run.too_short(run.stepped) if run.stepped else None
                if why:
                    from autotune.training._script import NotTunable

                    raise NotTunable(f"{spec['target']} {why}")
    except BaseException as exc:  # reported, then a non-zero exit; the parent classifies
        traceback.print_exc()  # whole, in the trial's log (the reason keeps its tail)
        emit("error", **error_event(exc))
        return 1
    finally:
        sys.stdout.flush()
    return 0


def end(code: int) -> NoReturn:
    """End the worker with ``code``. Code that ran to its own end (or failed by itself) ends as under
    ``python train.py``: through the interpreter's normal shutdown, its threads joined, its files
    flushed and closed, its finalizers and ``atexit`` handlers run; a whole run's wall time counts
    them, as the user's does. Code the trial stopped midway (its budget spent) leaves nothing to wait
    for: the process ends at once (with torch loaded, the interpreter's teardown took about 0.5 s here,
    benchmarks/results/overhead.md), and the parent kills its group."""
    sys.stdout.flush()
    sys.stderr.flush()
    if _stopped:
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    end(main())
