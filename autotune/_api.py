"""The Python API: ``autotune.tune`` runs a study as ``autotune run`` does and returns a ``Result``.

``autotune run`` is a thin layer over ``tune``: the same options (``Basics``, ``Options``: each
defined once, with its default, bounds and help), the same checks, the same study.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._result import Result
from autotune.core._config import REMOVED_IN, ConfigError
from autotune.machine._launch import TRIAL_TAG_ENV
from autotune.training._script import check_script, is_script
from autotune.tuner._option_fields import defaults_of, fields_of, place_of, replace_flat
from autotune.tuner._option_groups import Basics, Options
from autotune.tuner._options import LOGGER, Reporter, StudyOptions

if TYPE_CHECKING:
    from autotune.tuner._space import Space

_BASICS = Basics()
#: Every option's default, by its name (``tune``'s flat arguments and ``Options``' fields).
DEFAULTS = {**defaults_of(Basics), **defaults_of(Options)}
#: Each bounded option's (least, included?), (most, included?): read from the fields.
LIMITS = {
    field.name: (
        None if bound.low is None else (bound.low, not bound.low_open),
        None if bound.high is None else (bound.high, not bound.high_open),
    )
    for cls in (Basics, Options)
    for _, field in fields_of(cls)
    if (bound := field.metadata.get("bound"))
}


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
        raise ConfigError(
            f"target {name}: each trial imports the training function in its own process, "
            "so it must be a top-level function of a .py file or module; got "
            + ("a lambda or a nested function" if callable(target) else repr(target))
        )
    path = getattr(sys.modules.get(module), "__file__", None)
    if module != "__main__" and ("." in module or not path):  # a package's: importable by its name
        return f"{module}:{name}"
    if not path:
        raise ConfigError(
            f"target {name}: defined in an interactive session (a notebook or the prompt), "
            "which a trial's process cannot import: put it in a .py file and pass "
            "'file.py:" + name + "', or import it from there"
        )
    return f"{Path(path).resolve()}:{name}"


def tune(
    target: str | Callable[..., Any],
    *,
    trials: int = _BASICS.trials,
    space: str | Path = _BASICS.space,
    store: str | Path = _BASICS.store,
    device: str = _BASICS.device,
    args: Sequence[str] | None = None,
    progress: bool | Reporter = True,
    options: Options | None = None,
    **moved: Any,
) -> Result:
    """Tune a training function, or a script as it is: the study ``autotune run`` runs, from Python.

    Each trial runs ``target`` in its own process, so it must be importable: a
    ``"path/to/file.py:train"`` string, or a top-level function of a module or of
    the script calling ``tune`` (guard that call with ``if __name__ == "__main__":``,
    since each trial imports the script). Running it again with the same study resumes
    that study. The everyday options are arguments; the others are ``options``, in groups,
    each option with the default, bounds and help of its ``autotune run`` flag of the same name.

    Example:
        >>> result = autotune.tune("runners/mnist.py:train", trials=8)  # doctest: +SKIP
        >>> print(result.speedup, result.config)  # doctest: +SKIP
        >>> result.export("best.yaml")  # then, in production: train(autotune.load("best.yaml"))  # doctest: +SKIP

    Args:
        target: The training function: ``"path/to/file.py:train"``, ``"package.module:train"`` or the
            function itself; or a script as it is (``"train.py"``, ``"-m package.train"``) with ``args``.
        trials: Trials to run now (the baseline first, if the study has none).
        space: Search space: a shipped name (``"default"``, ``"loader"``, ...) or a YAML file.
        store: Store folder: Optuna journal, MLflow database, artifacts, trial logs.
        device: ``"auto"``, ``"cpu"``, ``"cuda:N"``, or with ``Options.jobs`` a list
            (``"cuda:0,cuda:1"``) or ``"cuda"`` (every visible GPU).
        args: The command line of a script target (no ``:function``): each trial runs it as
            ``python train.py ARGS`` would, unmodified, and applies the config from outside its code.
        progress: Print the live progress and the summary on the terminal, as ``run`` does.
            False: print nothing; the notes, each trial's end and the summary go to the ``autotune``
            logger at INFO (``logging.getLogger("autotune")``: silent until given a handler). Or a
            ``Reporter`` of your own, which receives the progress (nothing is printed).
        options: Every other option, in groups: ``Options(jobs=2, measure=Measure(windows=6))``
            (see ``Options``, ``Measure``, ``Limits``, ``Noise``, ``Judge``, ``Stores``).
        **moved: The options ``tune`` took as keywords before they moved into ``options``
            (``warmup=``, ``jobs=``, ...): still taken, with a DeprecationWarning naming the new
            place, until they are removed in 0.2.0.

    Returns:
        The study's ``Result``; ``interrupted_by`` names the signal when Ctrl-C or
        SIGTERM stopped it early (the running trial is recorded; call again to resume).

    Raises:
        ConfigError: bad input (the argument, file or key, and what is allowed).
        autotune.BaselineFailed: your code as written did not complete a trial.
        autotune.StoreDown: the study's database or tracking store stayed down past
            ``Stores.store_patience``; finished results are kept.
    """
    if os.environ.get(TRIAL_TAG_ENV):
        raise RuntimeError(
            "autotune.tune() was called inside one of its own trials: the trial imported "
            'the script that calls it. Guard that call with `if __name__ == "__main__":`'
        )
    basics = Basics(trials=trials, space=str(space), store=Path(store), device=device)  # (bad values raise here)
    if options is not None and not isinstance(options, Options):
        raise ConfigError(f"options={options!r}: must be an autotune.Options (its groups hold the rest)")
    options = _moved_in(options or Options(), moved)
    if args is not None and not (isinstance(target, str) and is_script(target)):
        raise ConfigError(
            f"args={list(args)!r}: a command line is for a script target (train.py or "
            f"-m package.module), not the function {target!r}"
        )
    target = target_of(target)
    argv = tuple(args or ()) if is_script(target) else None
    given = StudyOptions(target, basics, options, argv)
    if progress is True:  # the terminal, as `autotune run` draws it
        from autotune._terminal import Progress

        reporter: Reporter = Progress()
    else:
        reporter = progress or Reporter()
    with _shown(reporter):
        result = _run(given, reporter)
    from autotune._terminal import print_summary, summary_lines

    if progress is True:
        print_summary(result.study, result._standing, given.store)
    elif not progress:  # to the logger, as the notes (a Reporter of the caller's own: `run` prints it)
        for line in summary_lines(result.study, result._standing, given.store):
            LOGGER.info(line)
    return result


def _moved_in(options: Options, moved: Mapping[str, Any]) -> Options:
    """``options`` with the keywords ``tune`` took before they moved into it, each said once as
    deprecated with its new place."""
    known = DEFAULTS.keys() - {field.name for field in dataclasses.fields(Basics)}
    for name in moved:
        if name not in known:
            raise TypeError(f"tune() got an unexpected keyword argument {name!r}")
        warnings.warn(
            f"tune({name}=...) is deprecated and will be removed in {REMOVED_IN}: pass {place_of(Options, name)}",
            DeprecationWarning,
            stacklevel=3,
        )
    return replace_flat(options, dict(moved))


def _shown(reporter: Any) -> contextlib.AbstractContextManager[None]:
    """Where a live view draws the study (``autotune._terminal.Progress``: ``autotune run``'s,
    ``tune(progress=True)``'s), the ``autotune`` logger's notes printed on its console meanwhile;
    else they go to the handlers the application gave that logger, if any."""
    from autotune._terminal import Progress, notes_on

    return notes_on(reporter.console, reporter.shown) if isinstance(reporter, Progress) else contextlib.nullcontext()


def _run(given: StudyOptions, reporter: Reporter) -> Result:
    from autotune.machine._launch import new_tag
    from autotune.machine._probe import usable_cpus
    from autotune.machine._slots import plan_slots
    from autotune.stores._stores import check_folder
    from autotune.training._ranks import check_ranks
    from autotune.training._target import check_target
    from autotune.tuner._space import load_space
    from autotune.worker._warm import WarmWorker

    # before anything is created: bad input raises here
    loaded = load_space(given.basics.space)
    if given.argv is not None:  # a script
        check_script(given.target)
        target_notes: list[str] = []
    else:
        target_notes = check_target(given.target)
    store = given.store
    check_folder(store, f"the store folder {store}")  # read-only or full: said before anything starts
    check_ranks(given.nproc_per_node, given.options.jobs)
    # The slots' warm workers first: their imports (torch, 2-3 s) overlap the probe and the stores'
    # set-up instead of holding up the first trial. A slot's CPUs do not depend on its device.
    cpus = sorted(os.sched_getaffinity(0))[: usable_cpus()]
    slots = plan_slots(given.options.jobs, cpus, ["cpu"])
    warm = {slot.index: WarmWorker(os.environ, new_tag(), slot.cpus) for slot in slots}
    try:
        return _study(given, loaded, target_notes, warm, cpus, reporter)
    finally:
        for worker in warm.values():
            worker.close()


def _study(
    given: StudyOptions,
    loaded: Space,
    target_notes: list[str],
    warm: Mapping[int, Any],
    cpus: list[int],
    reporter: Reporter,
) -> Result:
    import signal

    from autotune.machine._probe import probe_forked
    from autotune.machine._slots import devices_of, plan_slots
    from autotune.stores._stores import open_storage
    from autotune.stores._tracking import Tracker
    from autotune.stores._tracking import tracking_uri as default_uri
    from autotune.tuner._finish import discard
    from autotune.tuner._options import BaselineFailed
    from autotune.tuner._study import StudyRunner

    device, jobs, ranks, store = given.basics.device, given.options.jobs, given.nproc_per_node, given.store
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
    if ranks > 1 and str(fingerprint.device).startswith("cuda"):
        import torch

        if ranks * jobs > torch.cuda.device_count():
            raise ConfigError(
                f"--nproc-per-node {ranks}: each rank takes a GPU of its own, "
                f"and this machine shows {torch.cuda.device_count()}"
            )
    slots = plan_slots(jobs, cpus, devices)
    restricted, notes = loaded.restrict(fingerprint)
    for line in [*target_notes, *notes]:
        reporter.note(line)
    if ranks > 1 and given.options.measure.ceiling_windows:
        reporter.note(
            f"no ceilings on {ranks} ranks: a part measured alone on one rank would wait on the "
            "others' collectives (samples/s, data wait and the loss are measured as usual)"
        )
    store_created = not store.exists()  # (a study stopped by bad input at its baseline removes it)
    # the storage before the tracking store: a bad URL creates nothing
    stores = given.stores
    backend = open_storage(store, stores.storage, stores.store_patience, reporter.note)
    tracker = Tracker(
        default_uri(store, stores.tracking_uri), store / "artifacts", stores.store_patience, reporter.note
    )
    try:
        runner = StudyRunner(given, fingerprint, restricted, tracker, reporter, backend, slots, warm)
        reporter.note(
            f"study {runner.name} on {fingerprint.summary()}; space {loaded.name}; "
            f"RAM budget {runner.ram_budget / 2**30:.1f} GiB" + (" per trial" if jobs > 1 else "")
        )
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
