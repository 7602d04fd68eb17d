"""Many tuners on one study: what sharing costs, and what a store outage loses. Writes the
"Many tuners" section of ``benchmarks/results/many-tuners.md``.

Everything is real: ``autotune run`` processes on the MNIST runner, a PostgreSQL database
per study and an ``mlflow server`` backed by PostgreSQL (``tests/lib/servers.py``).

1. One study size (``2K`` trials, then the confirmation re-runs) three ways, each on a
   fresh database and server: one tuner; two independent tuners started together with
   ``K`` each; one tuner with ``--jobs 2``. Wall time, trials per hour, duplicated work
   (must be 0), the spread of the baseline's samples/s over its runs (its first run and
   its ``--confirm`` re-runs, which every setting has), and the samples/s of the trials
   that ran beside another trial against those that had the host alone.
2. Outage drills: the tracking server down 20 s mid-trial; down 5 minutes mid-trial with
   ``--store-patience`` shorter than that (exit 3, then the same command again resumes);
   the PostgreSQL server restarted mid-trial (a private cluster holding both the study
   and MLflow's databases); a store folder on a 2 MiB tmpfs (as root). After each, both
   stores are compared trial by trial.

    python benchmarks/many_tuners.py            # about 15 minutes on a 2-core CPU
    python benchmarks/many_tuners.py --quick    # a smoke run, about 4 minutes
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from _results import ROOT, machine, spread, write_section
from autotune.core._kinds import Kind

sys.path.insert(0, str(ROOT / "tests" / "lib"))
from servers import (
    PG_HOST,
    PG_PORT,
    MlflowServer,
    PgServer,
    PrivateCluster,
    fresh_database,
    running_mlflow_server,
)

TARGET = f"{ROOT / 'runners' / 'mnist.py'}:train"
#: A small loader-only space: every config trains the same model the same way, so the
#: settings' trials are comparable and none diverges.
SPACE = """\
knobs:
  num_workers: {low: 0, high: 2}
  persistent_workers: [false, true]
  prefetch: [none, thread]
"""
#: Lines of a tuner's output that say what a store did to it.
STORE_LINE = re.compile(
    r"does not answer|answers again|autotune: stopped|is now recorded|cannot keep|"
    r"left RUNNING|closed by another tuner"
)


@dataclass(frozen=True)
class Plan:
    """How big everything is: the full run, or ``--quick``."""

    warmup: float
    window: float
    windows: int
    k: int  # trials per tuner of the two-tuner setting; the others run 2K
    confirm: int
    drill_trials: int
    short_outage_s: float
    long_outage_s: float
    patience_s: float  # --store-patience of the long drill: shorter than the outage
    db_down_s: float

    def budget(self) -> list[str]:
        return [
            "--warmup",
            str(self.warmup),
            "--window",
            str(self.window),
            "--windows",
            str(self.windows),
            "--ceiling-windows",
            "0",
            "--prune",
            "0",
        ]


FULL = Plan(
    warmup=1.0,
    window=1.5,
    windows=3,
    k=6,
    confirm=2,
    drill_trials=3,
    short_outage_s=20,
    long_outage_s=300,
    patience_s=120,
    db_down_s=10,
)
QUICK = Plan(
    warmup=0.3,
    window=0.5,
    windows=2,
    k=2,
    confirm=1,
    drill_trials=2,
    short_outage_s=5,
    long_outage_s=40,
    patience_s=15,
    db_down_s=3,
)


#: Every tuner process started, killed (with its process group) in the end whatever happened.
STARTED: list[Tuner] = []


class Tuner:
    """``autotune run`` in a subprocess of its own session, its output in a file."""

    def __init__(self, cwd: Path, *args: str) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.args = args
        self.cwd = cwd
        self.log = cwd / f"tuner-{uuid.uuid4().hex[:6]}.log"
        # Wide lines: rich wraps at 80 columns when it is not on a terminal.
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "COLUMNS": "10000"}
        env.pop("MLFLOW_TRACKING_URI", None)
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autotune", "run", TARGET, *args],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        STARTED.append(self)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"tuner still running after {timeout:.0f} s; output:\n{self.output[-3000:]}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def store_lines(self) -> list[str]:
        return [line.strip() for line in self.output.splitlines() if STORE_LINE.search(line)]


@dataclass
class Audit:
    """Both stores of one study, compared trial by trial."""

    trials: int = 0
    reruns: int = 0
    children: int = 0
    outcomes: Counter = field(default_factory=Counter)
    duplicated: dict[str, int] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)  # which trials the duplicated work was
    lost: list[str] = field(default_factory=list)  # trials missing or wrong in either store
    interrupted: list[int] = field(default_factory=list)
    baseline_rates: list[float] = field(default_factory=list)
    baseline_slots: list[str] = field(default_factory=list)
    baseline_beside: int = 0  # of the baseline's runs, those measured beside another trial
    beside: list[float] = field(default_factory=list)  # samples/s of trials run beside another
    alone: list[float] = field(default_factory=list)  # ... and of trials that had the host alone
    reruns_by_tuner: list[int] = field(default_factory=list)  # re-runs each tuner process ran
    parent_status: str = ""

    @property
    def duplicates(self) -> int:
        return sum(self.duplicated.values())


#: The kinds of trial that run an earlier trial's config again, as stored (user attr ``kind``).
REPEATS = tuple(kind.value for kind in Kind if kind.repeats)


def audit(url: str, tracking_uri: str, name: str, confirm: int, stores: list[Path]) -> Audit:
    """Read the study and its MLflow experiment back; count duplicated and lost work."""
    import optuna
    from mlflow import MlflowClient

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    found = Audit()
    trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    # a re-run (confirmation or re-measure) names the trial whose config it runs again (``of``)
    firsts = [t for t in trials if t.user_attrs.get("kind") not in REPEATS]
    found.trials, found.reruns = len(trials), len(trials) - len(firsts)
    found.outcomes = Counter(t.user_attrs.get("outcome", t.state.name.lower()) for t in trials)
    numbers = Counter(t.number for t in trials)
    baselines = [t for t in firsts if t.user_attrs.get("kind") == "baseline"]
    reruns = Counter(t.user_attrs["of"] for t in trials if t.user_attrs.get("kind") in REPEATS)
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], max_results=5000) if experiment else []
    parents = [r for r in runs if "autotune.trial" not in r.data.tags]
    found.parent_status = ",".join(r.info.status for r in parents) or "none"
    children = [r for r in runs if "autotune.trial" in r.data.tags]
    found.children = len(children)
    per_trial = Counter(r.data.tags["autotune.trial"] for r in children)
    found.duplicated = {
        "baselines past 1": max(0, len(baselines) - 1),
        f"re-runs past {confirm} of one config": sum(max(0, n - confirm) for n in reruns.values()),
        "trial numbers used twice": sum(n - 1 for n in numbers.values()),
        "MLflow children past 1 per trial": sum(max(0, n - 1) for n in per_trial.values())
        + sum(1 for key in per_trial if int(key) not in numbers),
        "parent runs past 1": max(0, len(parents) - 1),
    }
    if len(baselines) > 1:
        found.details.append(
            "baseline trials "
            + ", ".join(f"{t.number} (on {t.user_attrs.get('slot', {}).get('share', '?')})" for t in baselines)
        )
    found.details += [f"trial {n}: {c} re-runs" for n, c in sorted(reruns.items()) if c > confirm]
    found.details += [f"trial {n}: {c} MLflow children" for n, c in sorted(per_trial.items()) if c > 1]
    by_id = {r.info.run_id: r for r in children}
    for t in trials:
        outcome = t.user_attrs.get("outcome")
        if outcome == "interrupted":
            found.interrupted.append(t.number)
        if not t.state.is_finished():
            found.lost.append(f"trial {t.number} {t.state.name} in Optuna")
            continue
        run = by_id.get(t.user_attrs.get("mlflow_run_id", ""))
        if run is None:
            found.lost.append(f"trial {t.number} ({outcome}) has no MLflow child")
            continue
        if run.info.status == "RUNNING" or run.data.tags.get("autotune.outcome") != outcome:
            found.lost.append(
                f"trial {t.number}: MLflow says {run.info.status}/"
                f"{run.data.tags.get('autotune.outcome')}, Optuna {outcome}"
            )
        sps = t.user_attrs.get("metrics", {}).get("samples_per_s")
        if sps is not None and abs(run.data.metrics.get("samples_per_s", -1.0) - sps) > 1e-6 * sps:
            found.lost.append(
                f"trial {t.number}: samples/s {sps:.1f} in Optuna, {run.data.metrics.get('samples_per_s')} in MLflow"
            )
    for store in stores:
        left = sorted((store / "pending").rglob("*.json")) if (store / "pending").is_dir() else []
        found.lost += [f"pending result left: {p.name}" for p in left]
    owners = Counter(str(t.user_attrs.get("owner")) for t in trials if t.user_attrs.get("kind") in REPEATS)
    found.reruns_by_tuner = sorted(owners.values(), reverse=True)
    shared = {t.number: beside_another(t, trials) for t in trials}
    for t in trials:
        if t.user_attrs.get("outcome") == "complete":
            (found.beside if shared[t.number] else found.alone).append(t.user_attrs["metrics"]["samples_per_s"])
    if baselines:
        base = baselines[0].number
        for t in trials:
            if (t.number == base or t.user_attrs.get("of") == base) and t.user_attrs.get("outcome") == "complete":
                found.baseline_rates.append(t.user_attrs["metrics"]["samples_per_s"])
                found.baseline_slots.append(t.user_attrs.get("slot", {}).get("share", "?"))
                found.baseline_beside += shared[t.number]
    return found


def beside_another(trial, trials) -> bool:
    """Whether another trial of the study ran during more than half of ``trial`` (start to end as
    Optuna timed them: the claim to the recorded result, spawn and imports included)."""
    start, end = trial.datetime_start, trial.datetime_complete
    if start is None or end is None or end <= start:
        return False
    spans = sorted(
        (max(start, t.datetime_start), min(end, t.datetime_complete))
        for t in trials
        if t.number != trial.number and t.datetime_start and t.datetime_complete
    )
    covered, reach = 0.0, start
    for lo, hi in spans:  # the union of the overlaps
        lo = max(lo, reach)
        if hi > lo:
            covered += (hi - lo).total_seconds()
            reach = hi
    return covered > (end - start).total_seconds() / 2


def wait_until(condition, timeout: float, what: str, tuners: list[Tuner] = ()):
    """Poll ``condition`` until it is true; fail if a tuner exits first or on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the study may not exist yet
            if condition():
                return
        for tuner in tuners:
            if tuner.proc.poll() is not None:
                raise RuntimeError(f"tuner exited {tuner.proc.returncode} before {what}:\n{tuner.output[-3000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def measuring(url: str, name: str, number: int):
    """A condition: trial ``number`` has measured a window (so an outage now is mid-trial)."""
    import optuna

    def check() -> bool:
        trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
        return any(t.number == number and t.intermediate_values for t in trials)

    return check


# ---------------------------------------------------------------- part 1: settings


@dataclass
class Setting:
    label: str
    wall_s: float
    exits: list[int]
    tracebacks: int
    found: Audit
    notes: list[str]


def run_setting(
    label: str, tuners_args: list[list[str]], work: Path, pg: PgServer, plan: Plan, timeout: float
) -> Setting:
    """Start the tuners together on a fresh study database and MLflow server; audit both stores."""
    name = f"mt-{label.split()[0]}-{uuid.uuid4().hex[:6]}"
    folder = work / name
    with fresh_database(pg) as url, running_mlflow_server(pg, folder / "server") as server:
        common = [
            "--study",
            name,
            "--storage",
            url,
            "--tracking-uri",
            server.url,
            "--confirm",
            str(plan.confirm),
            "--space",
            str(work / "space.yaml"),
            *plan.budget(),
        ]
        started = time.monotonic()
        tuners = [Tuner(folder / f"host{i}", *common, "--store", "store", *args) for i, args in enumerate(tuners_args)]
        exits = [t.wait(timeout) for t in tuners]
        wall = time.monotonic() - started
        found = audit(url, server.url, name, plan.confirm, [t.cwd / "store" for t in tuners])
    notes = []
    for tuner in tuners:
        out = tuner.output
        notes += [line.strip() for line in out.splitlines() if "other tuner(s) run on this host" in line]
        exports = list((tuner.cwd / "store" / "exports").glob("*.yaml"))
        if exports:
            notes += [
                line.lstrip("# ").strip()
                for line in exports[0].read_text().splitlines()
                if line.startswith("#") and "each trial on" in line
            ]
    print(f"{label}: {wall:.0f} s, exits {exits}, {found}", file=sys.stderr)
    return Setting(label, wall, exits, sum("Traceback" in t.output for t in tuners), found, notes)


# ---------------------------------------------------------------- part 2: drills


@dataclass
class Drill:
    what: str
    happened: str
    exits: list[int]
    tracebacks: int
    lines: list[str]
    found: Audit | None

    def row(self) -> str:
        found = self.found
        if found is None:
            stores, lost = "no study", "nothing to lose"
        else:
            stores = f"{found.trials} trials / {found.children} MLflow children"
            lost = "; ".join(found.lost) or "nothing"
            if found.interrupted:
                lost += f"; interrupted: trials {', '.join(map(str, found.interrupted))}"
            if found.duplicates:
                lost += f"; duplicated work: {found.duplicates}"
        said = f"{len(dict.fromkeys(self.lines))} (below)" if self.lines else "nothing"
        return (
            f"| {self.what} | {self.happened} | {', '.join(map(str, self.exits))} | "
            f"{'yes' if self.tracebacks else 'no'} | {stores} | {lost} | {said} |"
        )


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def drill_tracking(work: Path, pg: PgServer, plan: Plan, down_s: float, patience: float | None, what: str) -> Drill:
    """The tracking server stops while trial 1 measures and comes back ``down_s`` later; if
    the tuner stopped meanwhile (exit 3), the same command is run again."""
    name = f"drill-mlflow-{uuid.uuid4().hex[:6]}"
    folder = work / name
    with fresh_database(pg) as url, running_mlflow_server(pg, folder / "server") as server:
        args = [
            "--study",
            name,
            "--storage",
            url,
            "--tracking-uri",
            server.url,
            "--trials",
            str(plan.drill_trials),
            "--confirm",
            "0",
            "--seed",
            "0",
            "--space",
            str(work / "space.yaml"),
            *plan.budget(),
            *(["--store-patience", str(patience)] if patience is not None else []),
        ]
        first = Tuner(folder / "host", *args)
        wait_until(measuring(url, name, 1), 300, "trial 1 to measure a window", [first])
        server.stop()
        stopped = time.monotonic()
        while time.monotonic() - stopped < down_s and first.proc.poll() is None:
            time.sleep(0.5)
        stopped_at = time.monotonic() - stopped if first.proc.poll() is not None else None
        time.sleep(max(0.0, down_s - (time.monotonic() - stopped)))
        server.start()
        down = time.monotonic() - stopped
        tuners = [first]
        exits = [first.wait(down_s + 600)]
        happened = f"server down {down:.0f} s from trial 1's first window"
        if stopped_at is not None:
            happened += f"; the tuner stopped {stopped_at:.0f} s into it"
        if exits[0] == 3:
            again = Tuner(folder / "host", *args)  # the same command, once the server is back
            tuners.append(again)
            exits.append(again.wait(600))
            happened += "; the same command run again once the server was back"
        found = audit(url, server.url, name, 0, [folder / "host" / "mlflow"])
    print(f"{what}: {happened}, exits {exits}, {found}", file=sys.stderr)
    return Drill(
        what,
        happened,
        exits,
        sum("Traceback" in t.output for t in tuners),
        [line for t in tuners for line in t.store_lines()],
        found,
    )


def drill_database(work: Path, plan: Plan) -> Drill:
    """PostgreSQL (holding the study and MLflow's databases) restarts while trial 1 measures."""
    what = f"PostgreSQL restarted, down {plan.db_down_s:.0f} s, mid-trial"
    cluster = PrivateCluster(os.environ)
    problem = cluster.problem()
    if problem is not None:
        return Drill(what, f"not run: {problem}", [], 0, [], None)
    name = f"drill-db-{uuid.uuid4().hex[:6]}"
    folder = work / name
    server = None
    try:
        pg = cluster.start()
        url, backend = pg.create_database(), pg.create_database()
        server = MlflowServer(backend, folder / "server")
        server.start()
        args = [
            "--study",
            name,
            "--storage",
            url,
            "--tracking-uri",
            server.url,
            "--trials",
            str(plan.drill_trials),
            "--confirm",
            "0",
            "--seed",
            "0",
            "--space",
            str(work / "space.yaml"),
            *plan.budget(),
        ]
        tuner = Tuner(folder / "host", *args)
        wait_until(measuring(url, name, 1), 300, "trial 1 to measure a window", [tuner])
        started = time.monotonic()
        cluster.restart(down_s=plan.db_down_s)
        down = time.monotonic() - started
        exits = [tuner.wait(600)]
        tuners = [tuner]
        if exits[0] == 3:
            tuners.append(again := Tuner(folder / "host", *args))
            exits.append(again.wait(600))
        found = audit(url, server.url, name, 0, [folder / "host" / "mlflow"])
        happened = (
            f"the database server stopped (fast: clients cut off) while trial 1 measured, "
            f"back {down:.0f} s later; the mlflow server's database too"
        )
    finally:
        if server is not None:
            server.stop()
        cluster.stop()
    print(f"{what}: exits {exits}, {found}", file=sys.stderr)
    return Drill(
        what,
        happened,
        exits,
        sum("Traceback" in t.output for t in tuners),
        [line for t in tuners for line in t.store_lines()],
        found,
    )


def drill_disk(work: Path, pg: PgServer, plan: Plan) -> Drill:
    """The store folder is a 2 MiB tmpfs: the tuner must stop before any trial, with one line."""
    what = "store folder on a full disk (2 MiB tmpfs)"
    if os.geteuid() != 0 or not shutil.which("mount"):
        return Drill(what, "not run: mounting a tmpfs needs root", [], 0, [], None)
    name = f"drill-disk-{uuid.uuid4().hex[:6]}"
    mount = work / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return Drill(what, f"not run: mount failed: {done.stderr.strip()}", [], 0, [], None)
    try:
        with fresh_database(pg) as url, fresh_database(pg) as backend:
            server = MlflowServer(backend, work / name / "server")
            try:
                server.start()
                tuner = Tuner(
                    work / name / "host",
                    "--study",
                    name,
                    "--storage",
                    url,
                    "--tracking-uri",
                    server.url,
                    "--store",
                    str(mount / "store"),
                    "--trials",
                    str(plan.drill_trials),
                    "--confirm",
                    "0",
                    "--space",
                    str(work / "space.yaml"),
                    *plan.budget(),
                )
                exits = [tuner.wait(300)]
                import optuna

                exists = name in {s.study_name for s in optuna.get_all_study_summaries(url)}
                found = audit(url, server.url, name, 0, []) if exists else None
            finally:
                server.stop()
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    out = tuner.output.strip().splitlines()
    happened = f"exit before any trial; {len(out)} line(s) of output" + ("" if exists else ", no study created")
    print(f"{what}: exits {exits}, {out}", file=sys.stderr)
    return Drill(what, happened, exits, int("Traceback" in tuner.output), [line.strip() for line in out], found)


# ---------------------------------------------------------------- the section


def revision() -> str:
    """The commit measured, and whether autotune/ had uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" with uncommitted changes in autotune/" if git("status", "--porcelain", "autotune") else "")


def work_row(s: Setting, ref_wall: float) -> str:
    f = s.found
    dup_text = "0" if not f.duplicates else ", ".join(f"{k}: {v}" for k, v in f.duplicated.items() if v)
    lost = "; ".join(f.lost) or "none"
    return (
        f"| {s.label} | {', '.join(map(str, s.exits))} | {s.wall_s:.0f} s ({ref_wall / s.wall_s:.2f}x) | "
        f"{f.trials} ({f.reruns} re-runs) | {f.trials / s.wall_s * 3600:,.0f} | "
        f"{' + '.join(map(str, f.reruns_by_tuner)) or '-'} | {dup_text} | {lost} |"
    )


def measure_row(s: Setting) -> str:
    f = s.found

    def rates(values: list[float]) -> str:
        return f"{spread(values, ',.0f')}, n={len(values)}" if values else "none"

    return (
        f"| {s.label} | {rates(f.baseline_rates)} | {f.baseline_beside} of {len(f.baseline_rates)} | "
        f"{', '.join(sorted(set(f.baseline_slots)))} | {rates(f.beside)} | {rates(f.alone)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny trials and short outages")
    parser.add_argument("--skip-drills", action="store_true", help="part 1 only")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, stores)")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    pg = PgServer(PG_HOST, PG_PORT)
    problem = pg.problem()
    if problem is not None:
        sys.exit(f"many_tuners: {problem}")
    started, rev = time.monotonic(), revision()
    work = Path(tempfile.mkdtemp(prefix="autotune-many-"))
    (work / "space.yaml").write_text(SPACE)
    settings: list[Setting] = []
    drills: list[Drill] = []
    try:
        k, jobs_timeout = plan.k, 1800
        settings.append(run_setting("1 tuner", [["--trials", str(2 * k)]], work, pg, plan, jobs_timeout))
        settings.append(run_setting("2 tuners", [["--trials", str(k)]] * 2, work, pg, plan, jobs_timeout))
        settings.append(
            run_setting("1 tuner --jobs 2", [["--trials", str(2 * k), "--jobs", "2"]], work, pg, plan, jobs_timeout)
        )
        if not args.skip_drills:
            drills.append(
                drill_tracking(
                    work,
                    pg,
                    plan,
                    plan.short_outage_s,
                    None,
                    f"tracking server down {plan.short_outage_s:.0f} s mid-trial (default patience, 300 s)",
                )
            )
            drills.append(
                drill_tracking(
                    work,
                    pg,
                    plan,
                    plan.long_outage_s,
                    plan.patience_s,
                    f"tracking server down {plan.long_outage_s / 60:.1f} min mid-trial, "
                    f"`--store-patience {plan.patience_s:.0f}`",
                )
            )
            drills.append(drill_database(work, plan))
            drills.append(drill_disk(work, pg, plan))
    finally:
        for tuner in STARTED:
            tuner.kill()
        if args.keep:
            print(f"work folder kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    total = time.monotonic() - started
    body = section(plan, settings, drills, total, args.quick, rev)
    write_section("many-tuners", "Many tuners", body)
    print(body)


def section(plan: Plan, settings: list[Setting], drills: list[Drill], total: float, quick: bool, rev: str) -> str:
    k = plan.k
    ref = settings[0].wall_s
    notes = [n for s in settings for n in s.notes]
    lines = [
        f"Machine: {machine()}; autotune at {rev} when the run began. Real `autotune run` processes on `runners/mnist.py:train`, a fresh PostgreSQL "
        "database per study and a real `mlflow server` (one worker, PostgreSQL backend, artifacts over HTTP) per "
        f"study. Trials: {plan.warmup:g} s warmup, {plan.windows} windows of {plan.window:g} s, no ceilings, "
        f"no pruning (`--prune 0`: every setting runs the same work), `--confirm {plan.confirm}`, in a "
        "loader-only space (`num_workers` 0-2, `persistent_workers`, `prefetch` none/thread) whose every config "
        f"trains the same way. Each setting ran once; the whole script took {total / 60:.0f} min"
        + (" (`--quick`: a smoke run, not figures to quote)." if quick else "."),
        "",
        "Regenerate with `python benchmarks/many_tuners.py` (`--quick` for a smoke run).",
        "",
        (
            f"**The same study, {2 * k} trials then the confirmation re-runs, three ways**: one tuner `--trials {2 * k}`; "
            f"two tuner processes started together, `--trials {k}` each; one tuner `--jobs 2 --trials {2 * k}`. "
            f"Duplicated work counts a second baseline, more than {plan.confirm} re-runs of one config, a trial number "
            "used twice, more than one MLflow child per trial or parent run per study: it must be 0. Lost: a trial "
            "unfinished in Optuna, without its MLflow child, or whose samples/s differ between the stores, or a result "
            "left in `pending/`. Trials/hour counts every trial, re-runs included, over the wall time."
        ),
        "",
        (
            "| setting | exit | wall (vs 1 tuner) | trials (re-runs) | trials/hour | re-runs per tuner | "
            "duplicated work | lost |"
        ),
        "|---|---|---|---|---|---|---|---|",
        *(work_row(s, ref) for s in settings),
        "",
        (
            "What the trials measured, samples/s as median (min..max), n runs. The baseline's runs are one config "
            "measured several times in every setting. A trial counts as run beside another when another trial of the "
            "study ran during more than half of it (Optuna's start and end times: from its claim to its recorded "
            "result, the worker's spawn and imports included)."
        ),
        "",
        (
            "| setting | baseline's runs | of them beside another trial | baseline measured on | "
            "all trials run beside another | all trials run alone |"
        ),
        "|---|---|---|---|---|---|",
        *(measure_row(s) for s in settings),
    ]
    if notes:
        lines += [
            "",
            "What the tuners said about sharing the host, and the `--jobs 2` export's header:",
            "",
            *(f"- `{_cell(n)}`" for n in dict.fromkeys(notes)),
        ]
    lines += ["", interpretation(settings)]
    wrong = [s for s in settings if s.found.duplicates or s.found.lost or any(s.exits) or s.tracebacks]
    for s in wrong:
        f = s.found
        lines += [
            "",
            f"**Not as it must be, {s.label}**: "
            + "; ".join(
                filter(
                    None,
                    [
                        ", ".join(f"{k}: {v}" for k, v in f.duplicated.items() if v),
                        "; ".join(f.details),
                        "; ".join(f.lost),
                        f"exit statuses {s.exits}" if any(s.exits) else "",
                        f"{s.tracebacks} traceback(s) printed" if s.tracebacks else "",
                    ],
                )
            )
            + ".",
        ]
    if drills:
        lines += [
            "",
            (
                f"**Outage drills** ({plan.drill_trials} trials each, `--confirm 0`, one tuner, the same space and "
                f"budget). The long tracking outage uses `--store-patience {plan.patience_s:.0f}`, shorter than the "
                "outage, so the tuner must stop with exit 3 and the same command run again once the server is back "
                "must resume it; with the default 300 s, an outage of 5 minutes ends at the patience's edge, and "
                'either path may happen. "Lost" is checked as above, trial by trial in both stores; an '
                "interrupted trial is named."
            ),
            "",
            "| drill | what happened | exit(s) | traceback | Optuna vs MLflow | lost | lines said about the store |",
            "|---|---|---|---|---|---|---|",
            *(d.row() for d in drills),
            "",
            "What the tuner printed about the store, each line once, in order:",
            "",
        ]
        for d in drills:
            if d.lines:
                lines += [f"- {d.what}:", *(f"  - `{_cell(x)}`" for x in dict.fromkeys(d.lines))]
    return "\n".join(lines)


def interpretation(settings: list[Setting]) -> str:
    """What the part-1 figures mean, with this run's numbers."""
    by = {s.label: s for s in settings}
    one, two, jobs = by["1 tuner"], by["2 tuners"], by["1 tuner --jobs 2"]

    def med(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    def width(values: list[float]) -> str:
        return f"{(max(values) - min(values)) / med(values):.0%}" if values else "n/a"

    alone = med(one.found.alone)
    crowded = med(two.found.beside) / alone
    if two.found.baseline_beside:
        baseline = (
            f"The baseline's runs show it too ({two.found.baseline_beside} of {len(two.found.baseline_rates)} "
            f"ran beside another trial; spread {width(two.found.baseline_rates)})."
        )
    else:
        baseline = (
            f"The baseline's runs do not show it there (none of its {len(two.found.baseline_rates)} ran "
            "beside another trial: its first run had the host alone while the other tuner waited for it)."
        )
    return (
        f"Reading it: two independent tuners finished the same study in {two.wall_s / one.wall_s:.0%} of one "
        f"tuner's wall time and `--jobs 2` in {jobs.wall_s / one.wall_s:.0%}. A trial's windows last as long "
        "whatever the load, so only trials run at once buy trials per hour, and the independent tuners ran "
        "fewer at once: the second waits for the baseline, and the confirmation re-runs go only to the tuners "
        "still running when they are planned (re-runs per tuner above). What a trial measures depends on its "
        "neighbour. Two independent tuners' trials are not pinned: each one's threads and DataLoader workers "
        f"spread over both cores, and a trial run beside another read a median {crowded:.0%} of what trials alone "
        f"on the host read ({med(two.found.beside):,.0f} against {alone:,.0f} samples/s)"
        + (", so such a study ranks its configs by how crowded the host was when each ran. " if crowded < 0.8 else ". ")
        + baseline
        + " `--jobs 2` pins each "
        "trial, its DataLoader workers included, to one CPU of its own: a trial beside another read "
        f"{med(jobs.found.beside) / alone:.0%} of the figure on both CPUs, and the baseline's runs spread "
        f"{width(jobs.found.baseline_rates)} (max-min over the median; {width(one.found.baseline_rates)} for one "
        "tuner on both CPUs). Its figures are per-core figures, and the export header says so: a config tuned "
        "on one core is tuned for one core."
    )


if __name__ == "__main__":
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    main()
