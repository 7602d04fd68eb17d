"""Trial vs production, interleaved: what a trial costs the training it measures, with the
machine's drift taken out. Writes the "Trial vs production, interleaved" section of
``benchmarks/results/trial-vs-production.md``, and the raw slices to
``benchmarks/data/trial-vs-production/interleaved-<cases>[-<pair>].json``.

``production.py`` compares a trial's samples/s with production's, each in its own process,
one after the other. On this 2-core VM a process's speed moves by 20-40% over tens of
seconds (benchmarks/results/levels.md), so the ratio of two such rates needs many turns to say
anything within 3%. Here both run in the same seconds instead. In each turn:

- **trial**: a tuner process as a study has it (a warm worker that has already served one
  trial, the tuner's monitor watching), running a long trial of the case's config;
- **production**: ``train(autotune.load(yaml))`` in a process of its own, under the YAML the
  study would export for that config;

both start; each is stopped (SIGSTOP on every process of its tree, the tuner and its monitor
included) as soon as it has made ``WARM_STEPS`` steps, and then they run by turns, ``--slice``
seconds each (ABAB..., which one first drawn per turn): only one trains at a time, and a
drift of the machine falls on both alike. Each counts its optimizer steps, and stamps when
each ended, in a shared file (``_counted.py``, the same wrapper in both). A slice counts the
steps between the first and the last step that ended in it, over the time between those two
ends (so the signals' delivery is in neither figure). A turn's figure: the trial's steps per
running second over production's. Every turn starts both anew, so the level a process draws
at its start varies across turns; the turns' geometric mean and its 95% bootstrap interval
are the result.

What this measures is the trial's cost to the training (the monitor's readings, the Trial's
bookkeeping per step, the fork from the warm worker), not how the trial's own windows measure
it; ``production.py`` checks the two figures end to end. The Trial's windows and the monitor's
readings are timed in wall seconds, which run on while a process is stopped: a period that
ran out meanwhile fires at the resume. With slices of 3 s and a study's 1.5 s windows, a
trial closes 2 windows per 3 s slice (as a study's trial does), the monitor reads its tree
31 times (30) and PSS 3 times (3). Only cases whose time goes to computing (``CPU_BOUND``):
a loader that waits on a timer would see its waits elapse while stopped. A slice counts from
the first step that ended after its resume: a loader whose steps come in bursts (jpeg: all of
an epoch's batches at once) may end none in ``SETTLE_S``, and the step before would count the
seconds it was stopped.

``--pair production production`` runs the same protocol on two production processes: the
spread two identical processes show under it, for scale. ``--pair monitor-slowed production``
(or ``cold``, or ``bare``) measures a trial another way against production, to find where a
cost comes from.

    python benchmarks/interleaved.py                        # about 25 minutes on a 2-core CPU
    python benchmarks/interleaved.py --turns 1 --pairs 2    # a smoke run
    python benchmarks/interleaved.py --cases 4 --pair production production
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _counted import COUNTER_ENV, TARGET_ENV, new_counter, read_counter
from _results import HERE, data_path, machine, one_trial, spread, write_section
from autotune.machine._launch import Budget, TrialSpec, build_command, new_tag
from autotune.machine._proctree import _walk
from autotune.production._export import render
from autotune.worker._warm import WarmWorker
from production import CASES, TOPIC, geometric_mean_ci, monitor_slowed

COUNTED = f"{HERE / '_counted.py'}:train"
#: Steps each process makes before the slices start (imports, the dataset, the first
#: batches and the allocator's growth are behind it by then).
WARM_STEPS = 200
#: The unmeasured trial a turn's warm worker serves first, as a study's worker has served
#: others before the one measured.
FIRST_BUDGET = Budget(windows=2, window_s=1.0, ceiling_windows=0, learn_windows=0)
#: The measured trial's budget: more windows than the slices last, no ceilings (the
#: controller kills it when they are done).
MEASURED_BUDGET = Budget(windows=100_000, ceiling_windows=0, learn_windows=0)
KINDS = ("trial", "production")
#: Trials measured another way (``--pair``), to find where a cost of the trial comes from:
#: the tuner's monitor reading once every 5 s (``production.monitor_slowed``), the trial
#: spawned as a new interpreter instead of forked from the warm worker, or the trial's
#: worker alone (``bare``: spawned by this script, its events drained here; no tuner, no
#: monitor, no warm worker: what the Trial costs in the training process itself).
VARIANTS = {
    "monitor-slowed": "trial, the monitor at 0.2 Hz",
    "cold": "trial, spawned cold",
    "bare": "trial's worker alone",
}
#: After a process is let run, this long before its slice's first step is read: the steps in
#: a slice count from one that ended while it ran, and the time between its first and last
#: step's end, so the signals' delivery and the wake-up fall outside both processes' figures.
SETTLE_S = 0.1
#: Cases whose time goes to computing (indices into ``production.CASES``): a loader that waits
#: on a timer for most of an item (the I/O-bound case) would see its waits elapse while
#: stopped. jpeg's items wait 4 ms and then decode: a stop spares each of its 24 workers at most
#: the rest of one wait per slice, a few ms of its 3 s, and the trial and production alike.
CPU_BOUND = [0, 1, 2, 4, 5, 6]


def case_env(target: str, counter: Path) -> dict[str, str]:
    return {**os.environ, TARGET_ENV: target, COUNTER_ENV: str(counter)}


def tuner(case: int, counter: Path, logs: Path, kind: str) -> None:
    """A tuner process (``--tuner``): a warm worker serves one short trial, then the measured
    one (``kind``: a trial, or one of ``VARIANTS``), which outlasts the slices; the controller
    kills this tree when it is done."""
    _name, target, config = CASES[case]
    os.environ[TARGET_ENV] = target
    scratch = logs / f"first-{os.getpid()}.count"
    new_counter(scratch)
    os.environ[COUNTER_ENV] = str(scratch)
    warm = WarmWorker(os.environ, new_tag())
    try:
        one_trial(COUNTED, config, FIRST_BUDGET, logs, device="cpu", warm=warm)
        os.environ[COUNTER_ENV] = str(counter)
        with monitor_slowed() if kind == "monitor-slowed" else contextlib.nullcontext():
            one_trial(COUNTED, config, MEASURED_BUDGET, logs, device="cpu", warm=None if kind == "cold" else warm)
    finally:
        warm.close()


def start(kind: str, case: int, counter: Path, folder: Path, yaml_path: Path) -> subprocess.Popen:
    _name, target, _config = CASES[case]
    new_counter(counter)
    if kind == "bare":
        return start_bare(case, counter, folder)
    if kind != "production":
        argv = [sys.executable, __file__, "--tuner", str(case), str(counter), str(folder), kind]
    else:
        code = (
            "import sys, autotune\n"
            f"sys.path.insert(0, {str(HERE)!r})\n"
            "import _counted\n"
            f"_counted.train(autotune.load({str(yaml_path)!r}, device='cpu', check=False))\n"
        )
        argv = [sys.executable, "-c", code]
    log = open(folder / f"{kind}-{counter.stem}.log", "w")  # noqa: SIM115 (closed with the process's end)
    return subprocess.Popen(
        argv, env=case_env(target, counter), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def start_bare(case: int, counter: Path, folder: Path) -> subprocess.Popen:
    """The trial's worker (``python -m autotune.worker._trial_main``) as the tuner would start it cold,
    but by this script: its events go to a pipe a thread here drains."""
    _name, target, config = CASES[case]
    spec = TrialSpec(COUNTED, config, "cpu", MEASURED_BUDGET)
    read_fd, write_fd = os.pipe()
    argv, env = build_command(spec, write_fd, case_env(target, counter), tag=new_tag())
    log = open(folder / f"bare-{counter.stem}.log", "w")  # noqa: SIM115 (closed with the process's end)
    try:
        proc = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True
        )
    finally:
        os.close(write_fd)

    def drain() -> None:
        with os.fdopen(read_fd, "rb") as events:
            while events.read1(1 << 16):
                pass

    threading.Thread(target=drain, daemon=True).start()
    return proc


def tree(pid: int) -> list[int]:
    return _walk(pid, lambda p: p if os.path.exists(f"/proc/{p}") else None)


def signal_tree(pid: int, sig: int) -> None:
    """``sig`` to ``pid`` and every descendant; twice for SIGSTOP, so that a process forked
    meanwhile by one not yet stopped is caught too."""
    for _ in range(2 if sig == signal.SIGSTOP else 1):
        for p in tree(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)


def kill_descendants(keep: set[int]) -> None:
    """SIGKILL every process below this one but ``keep``: this process is its descendants'
    subreaper (``become_subreaper``), so a tuner that died leaves its trial here, not lost
    (stopped processes die of SIGKILL too)."""
    for p in reversed(tree(os.getpid())[1:]):
        if p not in keep:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


def become_subreaper() -> None:
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def steady_read(counter: Path) -> tuple[int, int]:
    """Steps and the last one's end, from a running process: read until two reads agree (a
    step's two numbers are not written at once)."""
    last = read_counter(counter)[:2]
    while (now := read_counter(counter)[:2]) != last:
        last = now
    return now


def one_turn(
    case: int, pair: tuple[str, str], folder: Path, yaml_path: Path, args: argparse.Namespace, turn: int, keep: set[int]
) -> dict:
    """Both processes anew; their slices, each (label, steps, seconds between the first and
    the last step's end in it); the ratio of their steps per running second."""
    names = [VARIANTS.get(kind, kind) for kind in pair]
    labels = [names[0], names[1] if pair[1] != pair[0] else f"{names[1]} B"]
    counters = {label: folder / f"turn{turn}-{i}.count" for i, label in enumerate(labels)}
    procs = {label: start(kind, case, counters[label], folder, yaml_path) for label, kind in zip(labels, pair)}
    try:
        # each stopped as soon as it has made its warm-up steps: both start the slices alike
        warming, deadline = set(labels), time.monotonic() + 300
        while warming:
            for label in sorted(warming):
                if read_counter(counters[label])[0] >= WARM_STEPS:
                    signal_tree(procs[label].pid, signal.SIGSTOP)
                    warming.discard(label)
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs.values()):
                raise RuntimeError(f"turn {turn}: a process did not reach {WARM_STEPS} steps; logs in {folder}")
            time.sleep(0.05)
        for label, kind in zip(labels, pair):
            if kind in ("trial", "monitor-slowed") and read_counter(counters[label])[2] == procs[label].pid:
                raise RuntimeError(f"turn {turn}: the trial was spawned cold, not forked from the warm worker")
        slices = []
        order = labels if random.Random(turn).random() < 0.5 else labels[::-1]
        for _ in range(args.pairs):
            for label in order:
                pid = procs[label].pid
                resumed = time.monotonic_ns()
                signal_tree(pid, signal.SIGCONT)
                time.sleep(SETTLE_S)
                steps0, ns0 = steady_read(counters[label])
                # a slice counts from a step that ended in it: one that ended before the stop
                # would count the seconds the process was stopped (a loader whose steps come in
                # bursts, one per batch of an epoch at once, often has none in SETTLE_S)
                while ns0 < resumed and time.monotonic_ns() - resumed < args.slice * 1e9 / 2:
                    time.sleep(0.002)
                    steps0, ns0 = steady_read(counters[label])
                time.sleep(max(0.0, args.slice - (time.monotonic_ns() - resumed) / 1e9))
                signal_tree(pid, signal.SIGSTOP)
                time.sleep(0.02)  # (a stop lands at the process's next scheduling point)
                steps1, ns1, _ = read_counter(counters[label])
                if procs[label].poll() is not None or steps1 <= steps0 or ns0 < resumed:
                    raise RuntimeError(
                        f"turn {turn}: {label} made no step in a slice (or in its first half); logs in {folder}"
                    )
                slices.append((label, steps1 - steps0, (ns1 - ns0) / 1e9))
    finally:
        kill_descendants(keep)
        for p in procs.values():
            p.wait()
    rates = {
        label: sum(s[1] for s in slices if s[0] == label) / sum(s[2] for s in slices if s[0] == label)
        for label in labels
    }
    return {
        "labels": labels,
        "steps_per_s": rates,
        "ratio": rates[labels[0]] / rates[labels[1]] * 100,
        "slices": slices,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--tuner":
        tuner(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", nargs="*", type=int, default=[4], choices=CPU_BOUND, help="indices into production.CASES"
    )
    parser.add_argument("--turns", type=int, default=12, help="pairs of processes per case")
    parser.add_argument("--pairs", type=int, default=12, help="pairs of slices per turn")
    parser.add_argument("--slice", type=float, default=3.0, help="seconds each process runs at a time")
    parser.add_argument(
        "--pair",
        nargs=2,
        default=list(KINDS),
        choices=[*KINDS, *VARIANTS],
        help="the two compared (production production: the protocol's own spread; "
        "monitor-slowed, cold, bare: trials measured another way)",
    )
    args = parser.parse_args()
    pair = tuple(args.pair)
    rows, raw = [], {}
    become_subreaper()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (the finally clauses kill what is left)
    suffix = "-".join(map(str, args.cases)) + ("" if pair == KINDS else "-" + "-".join(pair))
    raw_path = data_path(TOPIC, f"interleaved-{suffix}", ".json")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        warm = WarmWorker(os.environ, new_tag())
        try:
            for case in args.cases:
                name, target, config = CASES[case]
                # the YAML production runs: what the study would export for a trial of this config
                new_counter(folder / "first.count")
                os.environ.update({TARGET_ENV: target, COUNTER_ENV: str(folder / "first.count")})
                first = one_trial(COUNTED, config, FIRST_BUDGET, folder, device="cpu", warm=warm)
                yaml_path = folder / f"case{case}.yaml"
                yaml_path.write_text(render(first.resolved, first.base_batch_size, ["benchmark"]))
                batch = first.resolved["batch_size"]
                turns = []
                for turn in range(args.turns):
                    turns.append(one_turn(case, pair, folder, yaml_path, args, turn, keep={warm.pid}))
                    raw[name] = {"batch_size": batch, "turns": turns}
                    raw_path.write_text(
                        json.dumps({"machine": machine(), "args": vars(args), "cases": raw}, indent=1) + "\n"
                    )
                    a, b = turns[-1]["labels"]
                    print(
                        f"{name}: {a} {turns[-1]['steps_per_s'][a] * batch:,.0f}, "
                        f"{b} {turns[-1]['steps_per_s'][b] * batch:,.0f} samples/s: {turns[-1]['ratio']:.1f}%",
                        flush=True,
                    )
                rows.append(row(name, turns, batch))
        finally:
            warm.close()
    body = "\n".join(
        [
            f"Machine: {machine()}. `python benchmarks/interleaved.py --cases {' '.join(map(str, args.cases))} "
            f"--turns {args.turns} --pairs {args.pairs} --slice {args.slice:g}"
            + ("" if pair == KINDS else f" --pair {' '.join(pair)}")
            + "`.",
            "",
            f"Each turn: the two processes anew, each stopped after {WARM_STEPS} steps, then by turns {args.slice:g} s at "
            f"a time ({args.pairs} pairs of slices), the other one and its whole tree stopped; a slice counts the "
            "steps between the first and the last that ended in it, over the time between them. *per turn*: the "
            "first one's steps per running second over the second one's; their geometric mean over the turns "
            "with a 95% bootstrap interval. Goal: the trial within 3% of production.",
            "",
            "| case | compared | turns | samples/s (medians of the turns) | per turn | mean (95% CI) |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    write_section(TOPIC, "Trial vs production, interleaved", body)
    print(body)


def row(name: str, turns: list[dict], batch: int) -> str:
    a, b = turns[0]["labels"]
    ratios = [t["ratio"] for t in turns]
    mean, low, high = geometric_mean_ci(ratios)
    rates = {label: statistics.median(t["steps_per_s"][label] * batch for t in turns) for label in (a, b)}
    return (
        f"| {name} | {a} / {b} | {len(turns)} | {rates[a]:,.0f} / {rates[b]:,.0f} | {spread(ratios, '.1f')}% "
        f"| {mean:.1f}% ({low:.1f}..{high:.1f}%) |"
    )


if __name__ == "__main__":
    main()
