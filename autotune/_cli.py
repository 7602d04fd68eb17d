"""The ``autotune`` command line: run, show, export, report, ui, doctor.

Heavy modules (torch, optuna, mlflow, rich) are imported inside the commands so
that ``autotune --help`` stays fast.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from autotune._api import DEFAULTS as D
from autotune.core._bounds import INTEGERS, LIMITS
from autotune.core._config import ConfigError
from autotune.tuner._confirm import CONFIRM_TOP
from autotune.core._knobs import KNOBS, show_value
from autotune.core._whole_runs import HORIZON_HELP
from autotune.training._script import command_line
from autotune.tuner._space import SPACES_DIR
from autotune.stores._exits import Group

_STORE_HELP = "Store folder: Optuna journal, MLflow database, artifacts, trial logs."


#: Set by ``exec``: this process ran the user's script, and ends as Python ends it (``main``).
_ran_users_code = False


def _store_options(fn):
    fn = click.option("--store", type=click.Path(path_type=Path), default=D["store"],
                      show_default=True, envvar="AUTOTUNE_STORE", help=_STORE_HELP)(fn)
    fn = click.option("--storage", metavar="URL",
                      help="Optuna storage: an RDB URL (e.g. postgresql://...) or a journal file; "
                           "default: STORE/optuna.journal.")(fn)
    return click.option("--study", metavar="NAME", help="Study name (default: from the target; "
                        "for show/export: the most recent study).")(fn)


def main(args: Sequence[str] | None = None) -> None:
    """The ``autotune`` program: ``cli``, then an exit that skips the interpreter's teardown,
    but for ``exec``.

    With torch, MLflow and SQLAlchemy loaded, freeing every module's objects at exit took
    2.0 s after a study's last line on the 2-core CI machine, each time the command ran.
    Everything a command of autotune's writes is written and closed before it returns, so the
    exit handlers run, the streams are flushed, and the process ends there. ``exec`` ran the
    user's script in this process: it ends through the interpreter's normal shutdown, as
    ``python train.py`` ends (its threads joined, its files flushed and closed, its finalizers and
    ``atexit`` handlers run, its own exit status).
    """
    try:
        cli.main(args, standalone_mode=True)
        code = 0
    except SystemExit as exc:
        if _ran_users_code:
            raise
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    atexit._run_exitfuncs()  # (what a normal exit runs first: MLflow's and logging's)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="autotune")
def cli() -> None:
    """Tune a PyTorch training loop's loader, transfer, precision and optimizer knobs
    by measuring short real trials of your own training script, unmodified.

    \b
      autotune run train.py --trials 12 -- ARGS     # or FILE.py:train, a function taking the Run
      autotune show
      autotune export -o best.yaml
      autotune exec best.yaml train.py -- ARGS      # production, the winner applied
      autotune report                  # one HTML page: winner, trials, knobs, loss, ceilings
      autotune ui
      autotune doctor
    """


def _bounded(name: str) -> click.ParamType:
    """The click type of option ``name``, with ``tune``'s bounds (``LIMITS``): one source for both."""
    low, high = LIMITS[name]
    bounds: dict[str, Any] = {}
    if low:
        bounds.update(min=low[0], min_open=not low[1])
    if high:
        bounds.update(max=high[0], max_open=not high[1])
    return (click.IntRange if name in INTEGERS else click.FloatRange)(**bounds)


def _spaces() -> str:
    return ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.yaml")))


@cli.command(epilog=f"Knobs: {', '.join(KNOBS)}.")
@click.argument("target", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-m", "module", metavar="MODULE", help="Tune a module run as a script (python -m MODULE ARGS).")
@click.option("--trials", "-n", type=_bounded("trials"), default=D["trials"], show_default=True,
              help="Trials to run now (the baseline first, if the study has none).")
@click.option("--space", default=D["space"], show_default=True,
              help=f"Search space: a shipped name ({_spaces()}) or a YAML file.")
@_store_options
@click.option("--tracking-uri", metavar="URI", help="MLflow tracking URI "
              "(default: $MLFLOW_TRACKING_URI, else sqlite in the store folder).")
@click.option("--device", default=D["device"], show_default=True,
              help="auto, cpu, cuda:N, or with --jobs a list (cuda:0,cuda:1) or cuda (every visible GPU).")
@click.option("--jobs", "-j", type=_bounded("jobs"), default=D["jobs"], show_default=True,
              help="Trials at once on this host, each on its own share: a disjoint set of the CPUs, "
                   "1/N of the RAM budget and, with several GPUs, a GPU of its own.")
@click.option("--nproc-per-node", type=_bounded("nproc_per_node"), default=D["nproc_per_node"], show_default=True,
              help="Ranks per trial: each trial runs through torch.distributed.run (torchrun), each rank on "
                   "its share of the CPUs (on CUDA, its own GPU); samples/s is summed over the ranks.")
@click.option("--whole-run", type=_bounded("whole_run"), default=D["whole_run"], show_default=True, metavar="SECONDS",
              help="Code whose baseline returns within this many seconds runs whole in every trial, ranked on its "
                   "wall time; longer code is measured at the baseline's windows, in samples (0: never whole).")
@click.option("--warmup", type=_bounded("warmup"), default=D["warmup"], show_default=True,
              help="Seconds of the baseline's warmup before measuring (later trials: the same samples).")
@click.option("--window", type=_bounded("window"), default=D["window"], show_default=True,
              help="Seconds per baseline window (later trials: the same samples).")
@click.option("--windows", type=_bounded("windows"), default=D["windows"], show_default=True,
              help="Measured windows per trial (samples/s is their median).")
@click.option("--timeout", type=_bounded("timeout"), default=None,
              help="Seconds a trial may run in all (default: the startup timeout + 5x its "
                   "measuring time).")
@click.option("--startup-timeout", type=_bounded("startup_timeout"), default=D["startup_timeout"], show_default=True,
              help="Seconds from a trial's start to its first batch (imports, dataset, workers).")
@click.option("--stall-timeout", type=_bounded("stall_timeout"), default=D["stall_timeout"], show_default=True,
              help="Seconds without a finished step before a trial counts as hung.")
@click.option("--compile-timeout", type=_bounded("compile_timeout"), default=D["compile_timeout"],
              show_default=True,
              help="Seconds torch.compile may take at a trial's first step (with compile in the space).")
@click.option("--horizon", type=_bounded("horizon"), default=D["horizon"], metavar="HOURS", help=HORIZON_HELP)
@click.option("--profile", type=click.Choice(["on", "off"]), default="on", show_default=True,
              callback=lambda _ctx, _param, value: value == "on",
              help="After the confirmation, run the baseline and the winner once more with each step "
                   "timed by part (data wait, copy, forward, backward, optimizer step) and a few steps "
                   "traced by torch.profiler: the traces go to the MLflow parent run (traces/), the "
                   "parts to the report and the summary.")
@click.option("--warm-start", type=click.Choice(["on", "off"]), default="on", show_default=True,
              callback=lambda _ctx, _param, value: value == "on",
              help="A new study of a target that an earlier study in the same storage tuned runs that "
                   "study's top configs first (each measured here, not copied).")
@click.option("--ram-budget", type=_bounded("ram_budget"), default=None, metavar="GIB",
              help="GiB one trial's processes may use (default: 75% of the RAM available at start).")
@click.option("--divergence-tolerance", type=_bounded("divergence_tolerance"),
              default=D["divergence_tolerance"], show_default=True,
              help="How much worse than the baseline's loss, at matched samples, a trial's may be "
                   "(0.5 = 50%) before it is diverged.")
@click.option("--prune", type=_bounded("prune"), default=D["prune"], show_default=True,
              help="Stop a trial whose windows all run under this share of the best's samples/s "
                   "(0: never).")
@click.option("--confirm", type=_bounded("confirm"), default=D["confirm"], show_default=True,
              help=f"Re-runs of each of the top {CONFIRM_TOP} configs and of the baseline after the "
                   "trials; the winner is chosen on the median of its runs (0: none).")
@click.option("--ceiling-windows", type=_bounded("ceiling_windows"), default=D["ceiling_windows"], show_default=True,
              help="Windows per ceiling (compute: the loop on batches already on the device; "
                   "loader: the loader alone), measured once per distinct config (0: none).")
@click.option("--max-load", type=_bounded("max_load"), default=D["max_load"], show_default=True,
              help="Share of a trial's CPUs (or GPU) other processes may use while it measures; above it "
                   "the trial is noisy: shown, never ranked, and measured again once the machine is "
                   "quiet (1: never noisy by load).")
@click.option("--max-spread", type=_bounded("max_spread"), default=D["max_spread"], show_default=True,
              help="(highest - lowest) / median of a trial's window rates above which it is noisy, "
                   "as above (a large value: never noisy by spread).")
@click.option("--remeasure", type=_bounded("remeasure"), default=D["remeasure"], show_default=True,
              help="Times a noisy trial is measured again at most (0: never).")
@click.option("--quiet-wait", type=_bounded("quiet_wait"), default=D["quiet_wait"], show_default=True,
              metavar="SECONDS", help="How long to wait for a quiet machine before measuring a noisy "
                                      "trial again.")
@click.option("--seed", type=int, default=None, help="Seed for the sampler and the trials: every trial trains from the "
                                                             "baseline's seed (a tuner joining a study takes it).")
@click.option("--store-patience", type=_bounded("store_patience"), default=D["store_patience"], show_default=True,
              metavar="SECONDS", help="How long the study database or tracking store may keep failing "
                                      "(a restart, a full disk) before the tuner stops with exit status 3; "
                                      "finished results wait in the store folder meanwhile.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the summary (and errors), no progress.")
@click.option("-v", "--verbose", is_flag=True, help="Also print a line per measured window.")
def run(target: str | None, args: tuple[str, ...], module: str | None, quiet: bool, verbose: bool,
        **options: Any) -> None:
    """Tune TARGET: a script as it is (train.py -- ARGS, or -m package.module -- ARGS), or a
    training function that takes the Run (path/to/file.py:function or package.module:function).

    A script runs unmodified, with its own command line (ARGS, after --): the DataLoaders and
    optimizers it builds get each trial's config from outside its code. A function that takes
    the Run can also tune AMP, compile, channels_last and the prefetchers.

    After the trials, the top configs and the baseline are re-run (--confirm) and
    the winner is chosen on the median of its runs. Ctrl-C stops the running trial, records it,
    exports the best so far and exits 130; running the same command again resumes the study.
    From Python: autotune.tune(TARGET, trials=..., ...) with the same options.
    """
    from autotune._api import tune
    from autotune.tuner._options import BaselineFailed, Reporter
    from autotune._terminal import Progress, print_summary

    if quiet and verbose:
        raise ConfigError("-q/--quiet, -v/--verbose: pick one")
    target, script_args = command_line(target, args, module)
    try:
        result = tune(target, progress=Reporter() if quiet else Progress(verbose), args=script_args, **options)
    except BaselineFailed as exc:  # 2: the input's fault, in one line; 1: the code's, with its traceback
        click.echo(f"autotune: {'error: ' if exc.status == 2 else ''}{exc}", err=True)
        sys.exit(exc.status)
    print_summary(result.study, result._found, options["store"])
    if result.interrupted_by:
        click.echo(f"autotune: stopped by {result.interrupted_by}; run the same command to resume study "
                   f"{result.study}", err=True)
        sys.exit(128 + signal.Signals[result.interrupted_by])  # the shell's convention: 130 for Ctrl-C


@cli.command("exec")
@click.argument("export_yaml", metavar="EXPORT.yaml", type=click.Path(path_type=Path))
@click.argument("target", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-m", "module", metavar="MODULE", help="Run a module as a script (python -m MODULE ARGS).")
@click.option("--device", default="auto", show_default=True, help="What the export is held against: auto, cpu, cuda:N.")
@click.option("--nproc-per-node", "nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run it on N ranks through torch.distributed.run (torchrun), each on its share of the CPUs.")
@click.option("--adapt", is_flag=True, help="Adapt num_workers, prefetch_factor as autotune.load(path, adapt=True).")
@click.option("--tracking-uri", help="With --adapt: log each epoch and the values in force to an MLflow run there.")
@click.option("--ram-budget", type=_bounded("ram_budget"), metavar="GIB", help="With --adapt: "
              "the RAM the job may hold [default: its memory cgroup's limit, else 75% of what is available].")
def exec_(export_yaml: Path, target: str | None, args: tuple[str, ...], module: str | None, device: str,
          nproc: int, adapt: bool, tracking_uri: str | None, ram_budget: float | None) -> None:
    """Run a script unmodified with an exported config: EXPORT.yaml train.py -- ARGS (or -m MODULE -- ARGS).

    The DataLoaders and optimizers the script builds get the export's values, as in the study;
    it says once what it applies, and what this machine or an unmodified script cannot take.
    Exits with the script's own status.
    """
    from autotune.production._exec import exec_script
    from autotune.training._script import is_script

    target, script_args = command_line(target, args, module)
    if not is_script(target):
        raise ConfigError(f"{target}: exec runs a script (train.py or -m package.module); a function that "
                          "takes the Run loads the export itself: train(autotune.load('best.yaml'))")
    global _ran_users_code
    _ran_users_code = True
    sys.exit(exec_script(export_yaml, target, script_args or [], device, nproc, adapt, tracking_uri, ram_budget))


def _open_study(store: Path, storage: str | None, name: str | None):
    import optuna

    from autotune.tuner._queue import is_marker
    from autotune.stores._stores import open_storage

    if storage is None and not (store / "optuna.journal").exists():
        raise ConfigError(f"--store {store}: no studies here (no {store / 'optuna.journal'}); "
                          "run `autotune run` first or pass --store/--storage")
    backend = open_storage(store, storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    summaries = [s for s in optuna.get_all_study_summaries(backend, include_best_trial=False)
                 if not is_marker(s.study_name)]
    if not summaries:
        raise ConfigError(f"--storage {storage or store}: holds no study")
    if name is None:
        latest = max(summaries, key=lambda s: s.datetime_start.timestamp() if s.datetime_start else 0)
        name = latest.study_name
    elif name not in {s.study_name for s in summaries}:
        raise ConfigError(f"--study {name!r}: no such study; known: "
                          f"{', '.join(s.study_name for s in summaries)}")
    return optuna.load_study(study_name=name, storage=backend)


@cli.command()
@_store_options
@click.option("--json", "as_json", is_flag=True, help="Print the study as JSON: its findings and every trial.")
@click.option("--csv", "as_csv", is_flag=True, help="Print every trial as CSV, a column per knob.")
@click.option("--wide", is_flag=True, help="Every column: ceilings' roof, others' load, step time, RAM peak.")
def show(study: str | None, storage: str | None, store: Path, as_json: bool, as_csv: bool, wide: bool) -> None:
    """The study's trials: knobs, samples/s, speedup, bottleneck, data wait, outcome, reason."""
    from autotune._result import Result
    from autotune._show import show_table

    if as_json and as_csv:
        raise ConfigError("--json, --csv: pick one")
    loaded = _open_study(store, storage, study)
    result = Result.of(loaded)
    if as_json:
        import json

        click.echo(json.dumps(result.as_dict(), indent=1, default=str))
    elif as_csv:
        click.echo(result.csv(), nl=False)
    else:
        show_table(result, wide)


@cli.command()
@_store_options
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write here (default: stdout).")
def export(study: str | None, storage: str | None, store: Path, output: Path | None) -> None:
    """The best config as YAML; load it with autotune.load(path)."""
    from autotune.tuner._standing import export_text, findings, standing

    loaded = _open_study(store, storage, study)
    found = standing(loaded)
    best = found.best
    if best is None:
        click.echo(f"autotune: study {loaded.study_name} has nothing to export: {findings(found)[0]}", err=True)
        sys.exit(1)
    text = export_text(loaded, found)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
        click.echo(f"wrote {output} (trial {best.number} of study {loaded.study_name})", err=True)


@cli.command()
@_store_options
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Write here (default: STORE/reports/STUDY.html).")
def report(study: str | None, storage: str | None, store: Path, output: Path | None) -> None:
    """The study as one self-contained HTML page: the winner, every trial, what each knob did,
    the loss against the baseline's, the ceilings. Also on the MLflow parent run (report.html)."""
    from autotune.tuner._report import report_html
    from autotune.tuner._standing import standing

    loaded = _open_study(store, storage, study)
    output = output or store / "reports" / f"{loaded.study_name}.html"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report_html(loaded.study_name, standing(loaded), loaded.user_attrs.get("fingerprint"),
                                  loaded.user_attrs.get("profile")))
    click.echo(f"wrote {output} (study {loaded.study_name}); open it in a browser", err=True)


@cli.command()
@click.option("--store", type=click.Path(path_type=Path), default=D["store"], show_default=True,
              envvar="AUTOTUNE_STORE", help=_STORE_HELP)
@click.option("--tracking-uri", metavar="URI", help="Serve this store instead.")
@click.option("--port", type=click.IntRange(1, 65535), default=5000, show_default=True)
def ui(store: Path, tracking_uri: str | None, port: int) -> None:
    """Serve the MLflow UI over the study's tracking store on 127.0.0.1."""
    from autotune.stores._tracking import runs_pages
    from autotune.stores._tracking import tracking_uri as default_uri

    uri = default_uri(store, tracking_uri)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        raise ConfigError(f"--store {store}: no MLflow database at {uri}; run `autotune run` first")
    # One person looking at one store: one worker, and none of the job runners MLflow
    # starts for its GenAI features (they more than doubled its processes and memory).
    argv = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    os.environ["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    click.echo(f"MLflow UI: http://127.0.0.1:{port}  (Ctrl-C stops it)", err=True)
    for line in runs_pages(uri, f"http://127.0.0.1:{port}"):
        click.echo(line, err=True)
    os.execv(sys.executable, argv)


@cli.command()
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--space", default=None, help="Also show what this space loses here.")
def doctor(device: str, space: str | None) -> None:
    """What this machine can tune, and why not."""
    from autotune.machine._probe import probe
    from autotune.training._script import SCRIPT_WAYS
    from autotune.tuner._space import load_space

    try:
        fp = probe(device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    click.echo(f"machine: {fp.summary()}")
    click.echo(f"  host {fp.host}, {fp.platform}, Python {fp.python}")
    click.echo(f"  RAM {fp.ram_available_gib} of {fp.ram_total_gib} GiB available; "
               f"pinned-memory limit (ulimit -l) {fp.pinned_limit}")
    click.echo(f"  device {fp.device}" + (f": {fp.gpu}, {fp.gpu_memory_gib} GiB, driver {fp.driver}"
                                          if fp.gpu else ""))
    click.echo(f"  NVML: {'yes' if fp.nvml else 'no (no GPU metrics)'}")
    click.echo("knobs: on this machine; in an unmodified script, what each acts on")
    for knob in KNOBS.values():
        missing = {v: c for v, c in knob.needs.items() if not fp.capabilities[c.value]}
        verdict = "ok" if not missing else "; ".join(
            f"not {show_value(v)}: {fp.reasons[c.value]}" for v, c in missing.items())
        click.echo(f"  {knob.name:18} {verdict}; script: {SCRIPT_WAYS[knob.stage]}")
    if space:
        _, notes = load_space(space).restrict(fp)
        click.echo(f"space {space}: " + ("usable as is" if not notes else "drops"))
        for line in notes:
            click.echo(f"  {line}")


if __name__ == "__main__":
    main()
