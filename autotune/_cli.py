"""The ``autotune`` command line: run, show, export, report, ui, doctor.

Heavy modules (torch, optuna, mlflow, rich) are imported inside the commands so
that ``autotune --help`` stays fast; the commands that take the study's options are built when
asked for (``_Commands``), so that ``exec``, in a user's process, loads none of the tuner.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from autotune.core._bounds import RAM_BUDGET
from autotune.core._config import ConfigError
from autotune.core._knobs import KNOBS, show_value
from autotune.stores._exits import Group
from autotune.training._script import command_line
from autotune.tuner._option_flags import ranged

#: Set by ``exec``: this process ran the user's script, and ends as Python ends it (``main``).
_ran_users_code = False

#: The commands whose flags are the study's options (``autotune.tuner._option_groups``), built on
#: first use (``_study_commands``): those groups import the tuner's modules for their defaults, which
#: ``exec`` never needs (55 ms of CPU in each production run's start, 2026-11-29).
STUDY_COMMANDS = ("run", "show", "export", "report", "ui")


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


class _Commands(Group):
    """The ``autotune`` group: a study's command is built when it is asked for (``STUDY_COMMANDS``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *STUDY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in STUDY_COMMANDS:
            _study_commands()
        return super().get_command(ctx, cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
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


@cli.command("exec")
@click.argument("export_yaml", metavar="EXPORT.yaml", type=click.Path(path_type=Path))
@click.argument("target", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-m", "module", metavar="MODULE", help="Run a module as a script (python -m MODULE ARGS).")
@click.option("--device", default="auto", show_default=True, help="What the export is held against: auto, cpu, cuda:N.")
@click.option(
    "--nproc-per-node",
    "nproc",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run it on N ranks through torch.distributed.run (torchrun), each on its share of the CPUs.",
)
@click.option("--adapt", is_flag=True, help="Adapt num_workers, prefetch_factor as autotune.load(path, adapt=True).")
@click.option("--tracking-uri", help="With --adapt: log each epoch and the values in force to an MLflow run there.")
@click.option(
    "--ram-budget",
    type=ranged(RAM_BUDGET),
    metavar="GIB",
    help="With --adapt: the RAM the job may hold [default: its memory cgroup's limit, else 75% of what is available].",
)
def exec_(
    export_yaml: Path,
    target: str | None,
    args: tuple[str, ...],
    module: str | None,
    device: str,
    nproc: int,
    **adapting: Any,
) -> None:
    """Run a script unmodified with an exported config: EXPORT.yaml train.py -- ARGS (or -m MODULE -- ARGS).

    The DataLoaders and optimizers the script builds get the export's values, as in the study;
    it says once what it applies, and what this machine or an unmodified script cannot take.
    Exits with the script's own status.
    """
    from autotune.production._exec import exec_script
    from autotune.training._script import is_script

    target, script_args = command_line(target, args, module)
    if not is_script(target):
        raise ConfigError(
            f"{target}: exec runs a script (train.py or -m package.module); a function that "
            "takes the Run loads the export itself: train(autotune.load('best.yaml'))"
        )
    global _ran_users_code
    _ran_users_code = True
    raise SystemExit(exec_script(export_yaml, target, script_args or [], device, nproc, **adapting))  # (as passed)


def _open_study(store: Path, storage: str | None, name: str | None):
    import optuna

    from autotune.stores._stores import open_storage
    from autotune.tuner._queue import is_marker

    if storage is None and not (store / "optuna.journal").exists():
        raise ConfigError(
            f"--store {store}: no studies here (no {store / 'optuna.journal'}); "
            "run `autotune run` first or pass --store/--storage"
        )
    backend = open_storage(store, storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    summaries = [
        s for s in optuna.get_all_study_summaries(backend, include_best_trial=False) if not is_marker(s.study_name)
    ]
    if not summaries:
        raise ConfigError(f"--storage {storage or store}: holds no study")
    if name is None:
        latest = max(summaries, key=lambda s: s.datetime_start.timestamp() if s.datetime_start else 0)
        name = latest.study_name
    elif name not in {s.study_name for s in summaries}:
        raise ConfigError(f"--study {name!r}: no such study; known: {', '.join(s.study_name for s in summaries)}")
    return optuna.load_study(study_name=name, storage=backend)


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
    click.echo(
        f"  RAM {fp.ram_available_gib} of {fp.ram_total_gib} GiB available; "
        f"pinned-memory limit (ulimit -l) {fp.pinned_limit}"
    )
    click.echo(f"  device {fp.device}" + (f": {fp.gpu}, {fp.gpu_memory_gib} GiB, driver {fp.driver}" if fp.gpu else ""))
    click.echo(f"  NVML: {'yes' if fp.nvml else 'no (no GPU metrics)'}")
    click.echo("knobs: on this machine; in an unmodified script, what each acts on")
    for knob in KNOBS.values():
        missing = {v: c for v, c in knob.needs.items() if not fp.capabilities[c.value]}
        verdict = (
            "ok"
            if not missing
            else "; ".join(f"not {show_value(v)}: {fp.reasons[c.value]}" for v, c in missing.items())
        )
        click.echo(f"  {knob.name:18} {verdict}; script: {SCRIPT_WAYS[knob.stage]}")
    if space:
        _, notes = load_space(space).restrict(fp)
        click.echo(f"space {space}: " + ("usable as is" if not notes else "drops"))
        for line in notes:
            click.echo(f"  {line}")


@functools.cache
def _study_commands() -> dict[str, click.Command]:
    """``run``, ``show``, ``export``, ``report`` and ``ui``, with their flags, registered on ``cli``
    (once)."""
    from autotune.tuner._option_fields import from_flat
    from autotune.tuner._option_flags import flags
    from autotune.tuner._option_groups import Basics, Options, Stores

    # (the flags of the commands that read a study: which, in which storage, in which store folder)
    store_options = flags(Stores, Basics, only=("study", "storage", "store"))

    @cli.command(epilog=f"Knobs: {', '.join(KNOBS)}.")
    @click.argument("target", required=False)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    @click.option("-m", "module", metavar="MODULE", help="Tune a module run as a script (python -m MODULE ARGS).")
    @flags(Basics, Options)
    @click.option("-q", "--quiet", is_flag=True, help="Print only the summary (and errors), no progress.")
    @click.option(
        "-v",
        "--verbose",
        is_flag=True,
        help="Every trial's full lines, every note, the whole summary and "
        "a line per measured window (on a terminal the live table shows a row per config; a pipe or a "
        "log gets the full lines without -v).",
    )
    def run(
        target: str | None, args: tuple[str, ...], module: str | None, quiet: bool, verbose: bool, **options: Any
    ) -> None:
        """Tune TARGET: a script as it is (train.py -- ARGS, or -m package.module -- ARGS), or a
        training function that takes the Run (path/to/file.py:function or package.module:function).

        A script runs unmodified, with its own command line (ARGS, after --): the DataLoaders and
        optimizers it builds get each trial's config from outside its code. A function that takes
        the Run can also tune AMP, compile, channels_last and the prefetchers.

        After the trials, the top configs and the baseline are re-run (--confirm) and
        the winner is chosen on the median of its runs. Ctrl-C stops the running trial, records it,
        exports the best so far and exits 130; running the same command again resumes the study.
        From Python: autotune.tune(TARGET, trials=..., options=autotune.Options(...)), the same options.
        """
        from autotune._api import tune
        from autotune._terminal import Progress, print_summary
        from autotune.tuner._options import BaselineFailed, Reporter

        if quiet and verbose:
            raise ConfigError("-q/--quiet, -v/--verbose: pick one")
        target, script_args = command_line(target, args, module)
        try:
            basics = {field.name: options[field.name] for field in dataclasses.fields(Basics)}  # (tune's flat ones)
            result = tune(
                target,
                progress=Reporter() if quiet else Progress(verbose),
                args=script_args,
                **basics,
                options=from_flat(Options, options),
            )
        except BaselineFailed as exc:  # 2: the input's fault, in one line; 1: the code's, with its traceback
            click.echo(f"autotune: {'error: ' if exc.status == 2 else ''}{exc}", err=True)
            sys.exit(exc.status)
        print_summary(result.study, result._standing, options["store"], verbose)
        if result.interrupted_by:
            click.echo(
                f"autotune: stopped by {result.interrupted_by}; run the same command to resume study {result.study}",
                err=True,
            )
            sys.exit(128 + signal.Signals[result.interrupted_by])  # the shell's convention: 130 for Ctrl-C

    @cli.command()
    @store_options
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
    @store_options
    @click.option("-o", "--output", type=click.Path(path_type=Path), help="Write here (default: stdout).")
    def export(study: str | None, storage: str | None, store: Path, output: Path | None) -> None:
        """The best config as YAML; load it with autotune.load(path)."""
        from autotune.tuner._export_text import export_text
        from autotune.tuner._standing import findings, read_standing

        loaded = _open_study(store, storage, study)
        standing = read_standing(loaded)
        best = standing.best
        if best is None:
            click.echo(f"autotune: study {loaded.study_name} has nothing to export: {findings(standing)[0]}", err=True)
            sys.exit(1)
        text = export_text(loaded, standing)
        if output is None:
            click.echo(text, nl=False)
        else:
            output.write_text(text)
            click.echo(f"wrote {output} (trial {best.number} of study {loaded.study_name})", err=True)

    @cli.command()
    @store_options
    @click.option(
        "-o", "--output", type=click.Path(path_type=Path), help="Write here (default: STORE/reports/STUDY.html)."
    )
    def report(study: str | None, storage: str | None, store: Path, output: Path | None) -> None:
        """The study as one self-contained HTML page: the winner, every trial, what each knob did,
        the loss against the baseline's, the ceilings. Also on the MLflow parent run (report.html)."""
        from autotune.tuner._report import report_html
        from autotune.tuner._standing import read_standing

        loaded = _open_study(store, storage, study)
        output = output or store / "reports" / f"{loaded.study_name}.html"
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(
            report_html(
                loaded.study_name,
                read_standing(loaded),
                loaded.user_attrs.get("fingerprint"),
                loaded.user_attrs.get("profile"),
            )
        )
        click.echo(f"wrote {output} (study {loaded.study_name}); open it in a browser", err=True)

    @cli.command()
    @flags(Basics, only=("store",))
    @click.option("--tracking-uri", metavar="URI", help="Serve this store instead.")
    @click.option("--port", type=click.IntRange(1, 65535), default=5000, show_default=True)
    def ui(store: Path, tracking_uri: str | None, port: int) -> None:
        """Serve the MLflow UI over the study's tracking store on 127.0.0.1."""
        from autotune.stores._tracking import runs_pages
        from autotune.stores._tracking import tracking_uri as default_uri

        uri = default_uri(store, tracking_uri)
        if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists():
            raise ConfigError(f"--store {store}: no MLflow database at {uri}; run `autotune run` first")
        # One person looking at one store: one worker, and none of the job runners MLflow
        # starts for its GenAI features (they more than doubled its processes and memory).
        argv = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            uri,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ]
        os.environ["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        click.echo(f"MLflow UI: http://127.0.0.1:{port}  (Ctrl-C stops it)", err=True)
        for line in runs_pages(uri, f"http://127.0.0.1:{port}"):
            click.echo(line, err=True)
        os.execv(sys.executable, argv)

    return {"run": run, "show": show, "export": export, "report": report, "ui": ui}


def __getattr__(name: str) -> click.Command:
    if name in STUDY_COMMANDS:  # (``autotune._cli.run``: the command, built on first use)
        return _study_commands()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
