"""The Python API: ``autotune.tune`` runs a study as ``autotune run`` does and returns a ``Result``.

``autotune run`` is a thin layer over ``tune``: the same options with the same
defaults (the CLI reads them from this module's signature constants), the same
checks, the same study.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._config import ConfigError
from autotune._guard import DIVERGENCE_TOLERANCE, PRUNE_FRACTION
from autotune._noise import FOREIGN_LOAD_MAX, QUIET_WAIT_S, REMEASURES, SPREAD_MAX
from autotune._launch import Budget, TRIAL_TAG_ENV
from autotune._stores import STORE_PATIENCE_S
from autotune._options import DEFAULT_STORE

if TYPE_CHECKING:
    import optuna

    from autotune._records import TrialRow
    from autotune._handles import Recipe
    from autotune._standing import Standing
    from autotune._options import Reporter

#: Trials ``tune`` runs when not told (the baseline first, if the study has none).
TRIALS = 12
#: Re-runs of each top config and of the baseline after the trials.
CONFIRM = 2
#: The shipped space a study searches when not told.
SPACE = "default"
_BUDGET = Budget()


@dataclasses.dataclass(frozen=True)
class Result:
    """What a study found: its winner, the speedup, every trial.

    The same figures as the ``run`` summary, ``show`` and the export header: a
    config's median over its runs (its confirmations), the baseline 1.00x.

    Attributes:
        study: The study's name.
        findings: The summary's lines: the winner and its speedup, how sure, the bottleneck.
        interrupted_by: The signal that stopped the study early (``"SIGINT"``), or None.
    """

    study: str
    findings: tuple[str, ...]
    interrupted_by: str | None
    _found: Standing = dataclasses.field(repr=False)
    _export: str | None = dataclasses.field(repr=False)

    @classmethod
    def of(cls, study: optuna.Study, interrupted_by: str | None = None, found: Standing | None = None) -> Result:
        """The result of a study as its storage holds it now (or as ``found`` read it)."""
        from autotune._standing import export_text, findings, standing

        found = found or standing(study)
        text = export_text(study, found) if found.best is not None else None
        return cls(study.study_name, tuple(findings(found)), interrupted_by, found, text)

    @property
    def winner(self) -> Recipe | None:
        """The winning config as ``autotune.load`` gives it from the export (None: no winner)."""
        if self._export is None:
            return None
        import yaml

        from autotune._export import recipe_from_mapping

        return recipe_from_mapping(yaml.safe_load(self._export), f"study {self.study}'s export")

    @property
    def config(self) -> dict[str, Any]:
        """The winner's knobs as it ran them (empty: no winner)."""
        best = self._found.best
        return dict(best.config) if best else {}

    @property
    def samples_per_s(self) -> float | None:
        """The winner's samples/s: the median of its runs."""
        win = self._found.decision.winner
        return win.median if win and win.rates else None

    @property
    def baseline_samples_per_s(self) -> float | None:
        """The baseline's (your code as written) samples/s: the median of its runs."""
        base = self._found.base
        return base.median if base and base.rates else None

    @property
    def speedup(self) -> float | None:
        """The winner's samples/s over the baseline's (None: either has no believed figure)."""
        win = self._found.decision.winner
        return self._found.speedup(win) if win else None

    @property
    def spread(self) -> float | None:
        """± on the winner's figure: half the spread of its runs (of its windows, when it ran once)."""
        win = self._found.decision.winner
        if win is None:
            return None
        spread = win.spread if win.confirmed else win.lead.metrics.get("samples_per_s_spread", 0.0)
        return spread / 2

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every trial as a plain dict (``show --json`` prints these)."""
        return [row_dict(r, self._found) for r in self._found.rows]

    def table(self) -> str:
        """Every trial as a plain-text table: number, outcome, samples/s, speedup, the knobs
        that varied, the reason (no pandas needed)."""
        from autotune._knobs import show_value
        from autotune._records import kind_label

        rows = self._found.rows
        keys = self._found.varied_knobs()
        best = self._found.best
        head = ["#", "outcome", "samples/s", "speedup", *keys, "reason"]
        body = [[f"{r.number}{' *' if best and r.number == best.number else ''}",
                 r.outcome + (f" ({kind_label(r)})" if kind_label(r) else ""),
                 f"{r.samples_per_s:,.0f}" if r.samples_per_s else "-",
                 f"{r.speedup:.2f}x" if r.speedup else "-",
                 *(show_value(r.config.get(k, "-")) for k in keys),
                 _first_line(r.doubt or r.reason)] for r in rows]
        widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
        return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
                         for line in [head, *body])

    def as_dict(self) -> dict[str, Any]:
        """The study as plain data: its findings, the winner's figures, every trial (``show --json``)."""
        best = self._found.best
        return {"study": self.study, "findings": list(self.findings),
                "winner": best.number if best else None, "speedup": self.speedup, "spread": self.spread,
                "samples_per_s": self.samples_per_s, "baseline_samples_per_s": self.baseline_samples_per_s,
                "config": self.config, "export": self._export, "trials": self.rows}

    def csv(self) -> str:
        """Every trial as CSV: its figures, then a column per knob (as it ran), then the reason."""
        import csv
        import io

        from autotune._knobs import KNOBS

        rows = self.rows
        figures = ["number", "kind", "of", "baseline", "winner", "outcome", "samples_per_s", "speedup", "doubt",
                   "data_wait", "foreign_cpu", "bottleneck", "efficiency"]
        knobs = [k for k in KNOBS if any(k in r["config"] for r in rows)]
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([*figures, *knobs, "reason"])
        for r in rows:
            writer.writerow([*("" if r[f] is None else r[f] for f in figures),
                             *("" if r["config"].get(k) is None else r["config"][k] for k in knobs), r["reason"]])
        return out.getvalue()

    def export(self, path: str | Path) -> Path:
        """Write the winner as the YAML ``autotune.load`` reads; return the path.

        Raises:
            ValueError: the study has no winner (its first finding says why).
        """
        if self._export is None:
            raise ValueError(f"study {self.study} has nothing to export: {self.findings[0]}")
        path = Path(path)
        path.write_text(self._export)
        return path

    def __str__(self) -> str:
        return f"study {self.study}: " + "\n  ".join(self.findings)


def row_dict(row: TrialRow, found: Standing) -> dict[str, Any]:
    """One trial as plain data: what ``Result.rows`` and ``show --json`` give. ``kind`` says why it
    ran (``baseline``, ``sampled``, ``confirm``, ``remeasure``, ``retry``, ``more_workers``,
    ``smaller_batch``), ``of`` the trial whose config it runs again or starts from, ``baseline``
    whether it runs the code as written (the baseline or a re-run of it)."""
    bound = row.bottleneck
    best = found.best
    return {
        "number": row.number, "kind": row.kind.value, "of": row.of, "baseline": row.baseline,
        "outcome": row.outcome, "reason": row.reason, "winner": bool(best and row.number == best.number),
        "samples_per_s": row.samples_per_s, "speedup": row.speedup, "doubt": row.doubt,
        "data_wait": row.metrics.get("data_wait_frac"), "foreign_cpu": row.metrics.get("foreign_cpu"),
        "bottleneck": bound.verdict if bound else None, "efficiency": bound.efficiency if bound else None,
        "config": dict(row.config), "sampled": dict(row.sampled), "metrics": dict(row.metrics),
    }


def _first_line(text: str | None) -> str:
    from autotune._outcome import headline

    return headline(text or "")


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
         progress: bool | Reporter = True) -> Result:
    """Tune a training function: the study ``autotune run`` runs, from Python.

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
        progress: Print the live progress and the summary on the terminal, as ``run`` does;
            or a ``Reporter`` of your own, which receives the progress (nothing is printed).

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
        _check(name, value)
    return _run(target_of(target), given, trials=trials, space=str(space), study=study, storage=storage,
                store=Path(store), tracking_uri=tracking_uri, device=device, jobs=jobs, timeout=timeout,
                ram_budget=ram_budget, seed=seed, progress=progress)


#: Each numeric option's bounds, for tune and the CLI alike: (least, inclusive?), (most, inclusive?).
LIMITS: dict[str, tuple[tuple[float, bool] | None, tuple[float, bool] | None]] = {
    "trials": ((1, True), None), "jobs": ((1, True), None), "warmup": ((0, True), None),
    "window": ((0.05, True), None), "windows": ((1, True), None), "timeout": ((1, True), None),
    "startup_timeout": ((1, True), None), "stall_timeout": ((0.5, True), None),
    "compile_timeout": ((1, True), None),
    "ram_budget": ((0.01, True), None), "divergence_tolerance": ((0, False), None),
    "prune": ((0, True), (1, True)), "confirm": ((0, True), None), "ceiling_windows": ((0, True), None),
    "max_load": ((0, True), (1, True)), "max_spread": ((0, True), None), "remeasure": ((0, True), None),
    "quiet_wait": ((0, True), None), "store_patience": ((0, True), None),
}
INTEGERS = frozenset({"trials", "jobs", "windows", "confirm", "ceiling_windows", "remeasure"})


def _check(name: str, value: Any) -> None:
    """Raise ConfigError unless ``value`` is allowed for option ``name`` (None: its default)."""
    if value is None and name in ("timeout", "ram_budget"):
        return
    low, high = LIMITS[name]
    kind = "an integer" if name in INTEGERS else "a number"
    wrong_type = isinstance(value, bool) or not isinstance(value, int if name in INTEGERS else (int, float))
    out = not wrong_type and ((low and (value < low[0] if low[1] else value <= low[0]))
                              or (high and (value > high[0] if high[1] else value >= high[0])))
    if wrong_type or out:
        bounds = " and ".join(filter(None, [
            low and f"{'>=' if low[1] else '>'} {low[0]}", high and f"{'<=' if high[1] else '<'} {high[0]}"]))
        raise ConfigError(f"{name}={value!r}: must be {kind} {bounds}")


def _run(target: str, limits: Mapping[str, Any], *, trials: int, space: str, study: str | None,
         storage: str | None, store: Path, tracking_uri: str | None, device: str, jobs: int,
         timeout: float | None, ram_budget: float | None, seed: int | None,
         progress: bool | Reporter) -> Result:
    import signal

    from autotune._probe import probe
    from autotune._slots import devices_of, plan_slots
    from autotune._space import load_space
    from autotune._stores import check_folder, open_storage
    from autotune._options import Reporter, StudyOptions  # noqa: F811
    from autotune._study import StudyRunner
    from autotune._tracking import Tracker
    from autotune._tracking import tracking_uri as default_uri
    from autotune._target import check_target

    target_notes = check_target(target)  # before anything is created: bad input raises here
    loaded = load_space(space)
    devices = [device]
    if device == "cuda" or "," in device:
        import torch

        devices = devices_of(device, torch.cuda.device_count())
    try:
        fingerprint = probe(devices[0])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if devices == [device]:
        devices = [fingerprint.device]
    slots = plan_slots(jobs, sorted(os.sched_getaffinity(0))[:fingerprint.cpus], devices)
    restricted, notes = loaded.restrict(fingerprint)
    if progress is True:
        from autotune._terminal import Progress

        reporter: Reporter = Progress()
    else:
        reporter = progress or Reporter()
    for line in [*target_notes, *notes]:
        reporter.note(line)
    budget = Budget(warmup_s=limits["warmup"], window_s=limits["window"], windows=limits["windows"],
                    ceiling_windows=limits["ceiling_windows"], startup_s=limits["startup_timeout"],
                    stall_s=limits["stall_timeout"], compile_s=limits["compile_timeout"], timeout_s=timeout)
    options = StudyOptions(target, trials, study, storage, tracking_uri, store, device, budget,
                           int(ram_budget * 2**30) if ram_budget else None, seed,
                           limits["divergence_tolerance"], limits["prune"], limits["confirm"],
                           limits["store_patience"], limits["max_load"], limits["remeasure"],
                           limits["quiet_wait"], limits["max_spread"])
    check_folder(store, f"the store folder {store}")  # read-only or full: said before anything starts
    # the storage before the tracking store: a bad URL creates nothing
    backend = open_storage(store, storage, options.store_patience, reporter.note)
    tracker = Tracker(default_uri(store, tracking_uri), store / "artifacts", options.store_patience, reporter.note)
    try:
        runner = StudyRunner(options, fingerprint, restricted, tracker, reporter, backend, slots)
        reporter.note(f"study {runner.name} on {fingerprint.summary()}; space {loaded.name}; "
                      f"RAM budget {runner.ram_budget / 2**30:.1f} GiB" + (" per trial" if jobs > 1 else ""))
        if jobs > 1:
            reporter.note(f"{jobs} trials at once: " + "; ".join(f"slot {s.index}: {s.share()}" for s in slots))
        found = runner.run()
    finally:
        if hasattr(reporter, "stop"):
            reporter.stop()
    stopped = signal.Signals(runner.interrupted_by).name if runner.interrupted_by else None
    result = Result.of(runner.study, stopped, found)
    if progress is True:
        from autotune._terminal import print_summary

        print_summary(runner.name, found, store)
    return result


#: The defaults ``autotune run`` shows: ``tune``'s own (one source for both).
DEFAULTS = {name: p.default for name, p in inspect.signature(tune).parameters.items()
            if p.default is not inspect.Parameter.empty}
