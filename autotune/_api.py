"""The Python API: ``autotune.tune`` runs a study as ``autotune run`` does and returns a ``Result``.

``autotune run`` is a thin layer over ``tune``: the same options with the same
defaults (the CLI reads them from this module's signature constants), the same
checks, the same study.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core._bounds import LIMITS, check
from autotune.core._config import ConfigError
from autotune.core._guard import DIVERGENCE_TOLERANCE, PRUNE_FRACTION
from autotune.machine._launch import TRIAL_TAG_ENV, Budget
from autotune.machine._noise import FOREIGN_LOAD_MAX, QUIET_WAIT_S, REMEASURES, SPREAD_MAX
from autotune.tuner._options import DEFAULT_STORE, LOGGER, Reporter
from autotune._result import Result
from autotune.training._script import check_script, is_script
from autotune.tuner._shape import WHOLE_RUN_S
from autotune.stores._stores import STORE_PATIENCE_S

if TYPE_CHECKING:
    from autotune.tuner._space import Space

#: Trials ``tune`` runs when not told (the baseline first, if the study has none).
TRIALS = 12
#: Re-runs of each top config and of the baseline after the trials.
CONFIRM = 2
#: The shipped space a study searches when not told.
SPACE = "default"
_BUDGET = Budget()


def target_of(target: str | Callable[..., Any]) -> str:
    """``path/to/file.py:function`` or ``package.module:function`` for a training function.

    Each trial imports the function in its own process, so a function object must
    be importable: a top-level function of a package's module (named by the module),
    of a top-level module or of the script being run (named by its file, which is
    found from any folder).

    Raises:
        ConfigError: it cannot be imported from another process (a lambda, a nested
            function, one defined in a notebook or the interactive prompt).
    """
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    name = getattr(target, "__qualname__", None) or repr(target)
    module = getattr(target, "__module__", None)
    if not callable(target) or "<" in name or "." in name or module is None:
        raise ConfigError(f"target {name}: each trial imports the training function in its own process, "
                          "so it must be a top-level function of a .py file or module; got "
                          + ("a lambda or a nested function" if callable(target) else repr(target)))
    path = getattr(sys.modules.get(module), "__file__", None)
    if module != "__main__" and ("." in module or not path):  # a package's: importable by its name
        return f"{module}:{name}"
    if not path:
        raise ConfigError(f"target {name}: defined in an interactive session (a notebook or the prompt), "
                          "which a trial's process cannot import: put it in a .py file and pass "
                          "'file.py:" + name + "', or import it from there")
    return f"{Path(path).resolve()}:{name}"


def tune(target: str | Callable[..., Any], *, trials: int = TRIALS, space: str | Path = SPACE,
         study: str | None = None, storage: str | None = None, store: str | Path = DEFAULT_STORE,
         tracking_uri: str | None = None, device: str = "auto", jobs: int = 1,
         warmup: float = _BUDGET.warmup_s, window: float = _BUDGET.window_s, windows: int = _BUDGET.windows,
         timeout: float | None = None, startup_timeout: float = _BUDGET.startup_s,
         stall_timeout: float = _BUDGET.stall_s, compile_timeout: float = _BUDGET.compile_s,
         ram_budget: float | None = None,
         divergence_tolerance: float = DIVERGENCE_TOLERANCE, prune: float = PRUNE_FRACTION,
         confirm: int = CONFIRM, ceiling_windows: int = _BUDGET.ceiling_windows,
         max_load: float = FOREIGN_LOAD_MAX, max_spread: float = SPREAD_MAX, remeasure: int = REMEASURES,
         quiet_wait: float = QUIET_WAIT_S, seed: int | None = None, store_patience: float = STORE_PATIENCE_S,
         progress: bool | Reporter = True, args: Sequence[str] | None = None, nproc_per_node: int = 1,
         horizon: float | None = None, profile: bool = True, warm_start: bool = True,
         whole_run: float = WHOLE_RUN_S) -> Result:
    """Tune a training function, or a script as it is: the study ``autotune run`` runs, from Python.

    Each trial runs ``target`` in its own process, so it must be importable: a
    ``"path/to/file.py:train"`` string, or a top-level function of a module or of
    the script calling ``tune`` (guard that call with ``if __name__ == "__main__":``,
    since each trial imports the script). The options are ``autotune run``'s, with
    its defaults (``autotune run --help`` says what each does); ``ram_budget`` is
    in GiB. Running it again with the same study resumes that study.

    Example:
        >>> result = autotune.tune("runners/mnist.py:train", trials=8)  # doctest: +SKIP
        >>> print(result.speedup, result.config)  # doctest: +SKIP
        >>> result.export("best.yaml")  # then, in production: train(autotune.load("best.yaml"))  # doctest: +SKIP

    Args:
        progress: Print the live progress and the summary on the terminal, as ``run`` does.
            False: print nothing; the notes, each trial's end and the summary go to the ``autotune``
            logger at INFO (``logging.getLogger("autotune")``: silent until given a handler). Or a
            ``Reporter`` of your own, which receives the progress (nothing is printed).
        nproc_per_node: Ranks per trial: over 1, each trial runs through PyTorch's launcher
            (``torch.distributed.run --nproc-per-node N``), each rank on its share of the CPUs (on
            CUDA, its own GPU); samples/s is the job's, summed over the ranks.
        horizon: Hours the winner will train for in production (``--horizon``): see
            ``autotune.core._whole_runs.HORIZON_HELP``; None: the script's whole run as given.
        profile: After the confirmation, run the baseline and the winner once more with each step
            timed by part and a few steps traced by torch.profiler (``autotune.tuner._profiling``): the
            traces go to the parent MLflow run, the parts to the report and the summary.
        warm_start: A new study whose target an earlier study in the same storage tuned runs that
            study's top configs first, each measured here (``autotune.tuner._warm_start``).
        whole_run: Seconds within which the baseline's code must return by itself for every
            trial to run it whole, ranked on its wall time (``autotune.tuner._shape``); 0: never.
        args: The command line of a script target (``"train.py"`` or ``"-m package.train"``,
            no ``:function``): each trial runs it as ``python train.py ARGS`` would, unmodified,
            and applies the config from outside its code (``autotune.training._hooks``).

    Returns:
        The study's ``Result``; ``interrupted_by`` names the signal when Ctrl-C or
        SIGTERM stopped it early (the running trial is recorded; call again to resume).

    Raises:
        ConfigError: bad input (the argument, file or key, and what is allowed).
        autotune.BaselineFailed: your code as written did not complete a trial.
        autotune.StoreDown: the study's database or tracking store stayed down past
            ``store_patience``; finished results are kept.
    """
    if os.environ.get(TRIAL_TAG_ENV):
        raise RuntimeError("autotune.tune() was called inside one of its own trials: the trial imported "
                           "the script that calls it. Guard that call with `if __name__ == \"__main__\":`")
    given = {name: value for name, value in locals().items() if name in LIMITS}
    for name, value in given.items():
        check(name, value)
    given["profile"], given["warm_start"] = bool(profile), bool(warm_start)
    if args is not None and not (isinstance(target, str) and is_script(target)):
        raise ConfigError(f"args={list(args)!r}: a command line is for a script target (train.py or "
                          f"-m package.module), not the function {target!r}")
    target = target_of(target)
    argv = tuple(args or ()) if is_script(target) else None
    reporter = progress
    if progress is True:  # the terminal, as `autotune run` draws it
        from autotune._terminal import Progress

        reporter = Progress()
    with _shown(reporter):
        result = _run(target, given, argv=argv, trials=trials, space=str(space), study=study, storage=storage,
                      store=Path(store), tracking_uri=tracking_uri, device=device, jobs=jobs, timeout=timeout,
                      ram_budget=ram_budget, seed=seed, reporter=reporter or Reporter())
    from autotune._terminal import print_summary, summary_lines

    if progress is True:
        print_summary(result.study, result._found, Path(store))
    elif not progress:  # to the logger, as the notes (a Reporter of the caller's own: `run` prints it)
        for line in summary_lines(result.study, result._found, Path(store)):
            LOGGER.info(line)
    return result


def _shown(reporter: Any) -> contextlib.AbstractContextManager[None]:
    """Where a live view draws the study (``autotune._terminal.Progress``: ``autotune run``'s,
    ``tune(progress=True)``'s), the ``autotune`` logger's notes printed on its console meanwhile;
    else they go to the handlers the application gave that logger, if any."""
    from autotune._terminal import Progress, notes_on

    return notes_on(reporter.console) if isinstance(reporter, Progress) else contextlib.nullcontext()


def _run(target: str, limits: Mapping[str, Any], *, argv: tuple[str, ...] | None, trials: int, space: str, study: str | None,
         storage: str | None, store: Path, tracking_uri: str | None, device: str, jobs: int,
         timeout: float | None, ram_budget: float | None, seed: int | None,
         reporter: Reporter) -> Result:
    from autotune.machine._launch import new_tag
    from autotune.machine._probe import usable_cpus
    from autotune.training._ranks import check_ranks
    from autotune.machine._slots import plan_slots
    from autotune.tuner._space import load_space
    from autotune.stores._stores import check_folder
    from autotune.training._target import check_target
    from autotune.worker._warm import WarmWorker

    # before anything is created: bad input raises here
    loaded = load_space(space)
    if argv is not None:  # a script
        check_script(target)
        target_notes: list[str] = []
    else:
        target_notes = check_target(target)
    check_folder(store, f"the store folder {store}")  # read-only or full: said before anything starts
    check_ranks(limits["nproc_per_node"], jobs)
    # The slots' warm workers first: their imports (torch, 2-3 s) overlap the probe and the stores'
    # set-up instead of holding up the first trial. A slot's CPUs do not depend on its device.
    cpus = sorted(os.sched_getaffinity(0))[:usable_cpus()]
    warm = {slot.index: WarmWorker(os.environ, new_tag(), slot.cpus) for slot in plan_slots(jobs, cpus, ["cpu"])}
    try:
        return _study(target, argv, target_notes, loaded, limits, warm, cpus, trials=trials, study=study, storage=storage,
                      store=store, tracking_uri=tracking_uri, device=device, jobs=jobs, timeout=timeout,
                      ram_budget=ram_budget, seed=seed, reporter=reporter)
    finally:
        for worker in warm.values():
            worker.close()


def _study(target: str, argv: tuple[str, ...] | None, target_notes: list[str], loaded: Space, limits: Mapping[str, Any], warm: Mapping[int, Any],
           cpus: list[int], *, trials: int, study: str | None, storage: str | None, store: Path,
           tracking_uri: str | None, device: str, jobs: int, timeout: float | None, ram_budget: float | None,
           seed: int | None, reporter: Reporter) -> Result:
    import signal

    from autotune.tuner._finish import discard
    from autotune.tuner._options import BaselineFailed, StudyOptions
    from autotune.machine._probe import probe_forked
    from autotune.machine._slots import devices_of, plan_slots
    from autotune.stores._stores import open_storage
    from autotune.tuner._study import StudyRunner
    from autotune.stores._tracking import Tracker
    from autotune.stores._tracking import tracking_uri as default_uri

    devices = [device]
    if device == "cuda" or "," in device:
        import torch

        devices = devices_of(device, torch.cuda.device_count())
    # The stores' libraries are imported while the probe waits for the warm worker's torch: the
    # two imports overlap (on the 2-core CI machine a 2-trial study took 7.8 s instead of 9.0, medians of 4).
    threading.Thread(target=_import_stores, name="autotune-import", daemon=True).start()
    try:  # in a process forked from the first slot's warm worker, which has torch already
        fingerprint = probe_forked(warm[0], devices[0], len(cpus))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if devices == [device]:
        devices = [fingerprint.device]
    if limits["nproc_per_node"] > 1 and str(fingerprint.device).startswith("cuda"):
        import torch

        if limits["nproc_per_node"] * jobs > torch.cuda.device_count():
            raise ConfigError(f"--nproc-per-node {limits['nproc_per_node']}: each rank takes a GPU of its own, "
                              f"and this machine shows {torch.cuda.device_count()}")
    slots = plan_slots(jobs, cpus, devices)
    restricted, notes = loaded.restrict(fingerprint)
    for line in [*target_notes, *notes]:
        reporter.note(line)
    ranks = limits["nproc_per_node"]
    if ranks > 1 and limits["ceiling_windows"]:
        reporter.note(f"no ceilings on {ranks} ranks: a part measured alone on one rank would wait on the "
                      "others' collectives (samples/s, data wait and the loss are measured as usual)")
    budget = Budget(warmup_s=limits["warmup"], window_s=limits["window"], windows=limits["windows"],
                    ceiling_windows=0 if ranks > 1 else limits["ceiling_windows"], startup_s=limits["startup_timeout"],
                    stall_s=limits["stall_timeout"], compile_s=limits["compile_timeout"], timeout_s=timeout,
                    whole_s=limits.get("whole_run", WHOLE_RUN_S))
    options = StudyOptions(target, trials, study, storage, tracking_uri, store, device, budget,
                           int(ram_budget * 2**30) if ram_budget else None, seed,
                           limits["divergence_tolerance"], limits["prune"], limits["confirm"],
                           limits["store_patience"], limits["max_load"], limits["remeasure"],
                           limits["quiet_wait"], limits["max_spread"], argv, ranks, limits["horizon"],
                           profile=limits.get("profile", True), warm_start=limits.get("warm_start", True))
    store_created = not store.exists()  # (a study stopped by bad input at its baseline removes it)
    # the storage before the tracking store: a bad URL creates nothing
    backend = open_storage(store, storage, options.store_patience, reporter.note)
    tracker = Tracker(default_uri(store, tracking_uri), store / "artifacts", options.store_patience, reporter.note)
    try:
        runner = StudyRunner(options, fingerprint, restricted, tracker, reporter, backend, slots, warm)
        reporter.note(f"study {runner.name} on {fingerprint.summary()}; space {loaded.name}; "
                      f"RAM budget {runner.ram_budget / 2**30:.1f} GiB" + (" per trial" if jobs > 1 else ""))
        if jobs > 1:
            reporter.note(f"{jobs} trials at once: " + "; ".join(f"slot {s.index}: {s.share()}" for s in slots))
        found = runner.run()
    except BaselineFailed as exc:
        if exc.status == 2:  # bad input: nothing is left of the study that would resume
            discard(runner.study, runner.recorder, store, store_created)
        raise
    finally:
        if hasattr(reporter, "stop"):
            reporter.stop()
    stopped = signal.Signals(runner.interrupted_by).name if runner.interrupted_by else None
    return Result.of(runner.study, stopped, found)


def _import_stores() -> None:
    import contextlib

    with contextlib.suppress(Exception):  # (an import that fails raises where it is used)
        import mlflow  # noqa: F401
        import optuna  # noqa: F401


#: The defaults ``autotune run`` shows: ``tune``'s own (one source for both).
DEFAULTS = {name: p.default for name, p in inspect.signature(tune).parameters.items()
            if p.default is not inspect.Parameter.empty}
