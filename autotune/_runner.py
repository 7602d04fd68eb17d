"""Run one trial: build the worker's command, spawn it, read its events, watch it, classify."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._config import Config
from autotune._events import FD_ENV, EventReader
from autotune._guard import (
    DIVERGENCE_TOLERANCE,
    LEARN_WINDOWS,
    Chunk,
    Comparison,
    Point,
    judge_loss,
    judged_curve,
    learned_share,
    loss_curve,
    loss_history,
)
from autotune._knobs import KNOBS
from autotune._monitor import Monitor, nvml_handle
from autotune._outcome import Outcome, classify
from autotune._slots import CPUS_ENV

if TYPE_CHECKING:
    import psutil

    from autotune._pool import WarmWorker

#: The worker's environment names its trial here. Every process it starts inherits it,
#: whatever its session or parent, so the trial's processes can be found after they
#: called ``setsid`` or were reparented to PID 1 (issue 12, point 4).
TRIAL_TAG_ENV = "AUTOTUNE_TRIAL_TAG"


@dataclasses.dataclass(frozen=True)
class Budget:
    """How long a trial measures, and how long it may take.

    Attributes:
        warmup_steps: Steps before measuring (at least).
        warmup_s: Seconds before measuring (at least): DataLoader workers start,
            cudnn.benchmark searches, caches fill.
        window_s: Seconds per measured window (at least ``min_window_steps`` steps).
        windows: Measured windows per trial; samples/s is their median.
        min_window_steps: Steps a window needs before it may close.
        ceiling_windows: Windows (of ``window_s``) per ceiling, measured after the
            trial's own windows (``autotune._ceilings``); 0 measures none.
        learn_windows: Windows the trial may measure past ``windows`` while its loss
            over its judged span (``autotune._guard.judged_span``) is above ``learn_to``
            times its warmup's: the baseline's, so that its curve reaches samples where a
            config that does not learn shows as diverged, however slow the machine is.
        learn_to: See ``learn_windows``.
        startup_s: Seconds from spawn to the first batch (imports, the dataset,
            DataLoader workers starting).
        stall_s: Seconds without a finished step, once training runs, before the
            trial counts as hung.
        compile_s: Seconds ``torch.compile`` may take at the model's first step (no step
            finishes meanwhile) before the trial counts as hung: a ResNet's first compile
            on a fresh 2-core machine took over 60 s (the compiler's caches empty), 32 s
            with them warm.
        timeout_s: Wall-clock limit for the whole worker, start-up included;
            ``None`` derives one from the others.
    """

    warmup_steps: int = 5
    warmup_s: float = 1.0
    window_s: float = 1.5
    windows: int = 4
    min_window_steps: int = 2
    ceiling_windows: int = 2
    learn_windows: int = 0
    learn_to: float = 0.0
    startup_s: float = 60.0
    stall_s: float = 30.0
    compile_s: float = 600.0
    timeout_s: float | None = None

    def deadline(self) -> float:
        """The worker's wall-clock limit: its start-up, then 5x the measured time."""
        if self.timeout_s is not None:
            return self.timeout_s
        return self.startup_s + 5 * self.measuring_s()

    def learning(self, tolerance: float = DIVERGENCE_TOLERANCE) -> Budget:
        """This budget for a baseline, whose curve judges every trial's divergence: it measures
        up to ``LEARN_WINDOWS`` times its windows more until its loss has fallen to
        ``learned_share(tolerance)`` of its warmup's."""
        return dataclasses.replace(self, learn_windows=LEARN_WINDOWS * self.windows,
                                   learn_to=learned_share(tolerance))

    def measuring_s(self) -> float:
        """The most time a trial measures, as planned: warmup, windows (and those it may add
        while its loss falls), and both ceilings' windows."""
        return self.warmup_s + (self.windows + self.learn_windows + 2 * self.ceiling_windows) * self.window_s

    def worker_args(self) -> dict[str, Any]:
        """What the worker's Trial takes (the limits are the parent's to enforce)."""
        args = dataclasses.asdict(self)
        for limit in ("startup_s", "stall_s", "compile_s", "timeout_s"):
            del args[limit]
        return args


@dataclasses.dataclass(frozen=True)
class TrialSpec:
    """Everything the worker needs; pure data."""

    target: str
    config: Config  # type: ignore[valid-type]
    device: str = "cpu"
    budget: Budget = Budget()
    seed: int = 0
    #: Ceiling keys per part already measured in the study: the worker skips them.
    known_ceilings: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    #: CPUs the worker pins itself to (its slot's share, ``autotune._slots``); empty: not pinned.
    cpus: tuple[int, ...] = ()


@dataclasses.dataclass
class TrialResult:
    """What one worker did."""

    outcome: Outcome
    reason: str
    metrics: dict[str, float]
    series: dict[str, list[float]]
    windows: list[dict[str, Any]]
    resolved: dict[str, Any]
    base_batch_size: int | None
    lr: float | None
    log_path: Path
    losses: list[Point] = dataclasses.field(default_factory=list)
    ceilings: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: Its loss curve (``autotune._guard.loss_curve``): the baseline's judges the study's trials.
    curve: list[Chunk] = dataclasses.field(default_factory=list)
    #: What its loader read (``autotune._run.dataset_facts``): batches per epoch, batched fetch.
    dataset: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Its loss against the baseline's as the divergence verdict compared them, complete or
    #: diverged (None: no baseline to judge by, nothing shared with it, or stopped before its
    #: end). Also in :attr:`metrics` where finite: ``loss_excess``, and the ``loss_tolerance``
    #: it was held to.
    judged: Comparison | None = None


def worker_environ(environ: Mapping[str, str], tag: str) -> dict[str, str]:
    """What every trial worker's interpreter starts with, cold or warm
    (``autotune._pool``): unbuffered output, this package importable, and its tag."""
    env = dict(environ)
    env[TRIAL_TAG_ENV] = tag
    env["PYTHONUNBUFFERED"] = "1"
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, environ.get("PYTHONPATH")) if p)
    return env


def new_tag() -> str:
    """A tag unique across tuners and trials, starting with this tuner's pid (which
    ``sweep_orphans`` reads)."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


def build_command(spec: TrialSpec, event_fd: int, environ: Mapping[str, str],
                  python: str = sys.executable, *, tag: str) -> tuple[list[str], dict[str, str]]:
    """The worker's argv and environment (pure: no process is started).

    A CUDA trial sees only its own device (as cuda:0); environment knobs are set
    here because they must be in place before torch starts. ``tag`` goes in
    ``TRIAL_TAG_ENV``, which marks the worker and everything it starts.
    """
    env = worker_environ(environ, tag)
    env[FD_ENV] = str(event_fd)
    if spec.cpus:
        env[CPUS_ENV] = ",".join(map(str, spec.cpus))
    device = spec.device
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[index] if index < len(visible) else str(index)
        device = "cuda:0"
    for knob in KNOBS.values():
        value = getattr(spec.config, knob.name)
        if knob.env_var and value not in (None, "default"):
            env[knob.env_var] = value
    payload = {"target": spec.target, "config": spec.config.set_values(), "device": device,
               "budget": spec.budget.worker_args(), "seed": spec.seed,
               "known_ceilings": {part: list(keys) for part, keys in spec.known_ceilings.items()}}
    return [python, "-m", "autotune._worker", json.dumps(payload)], env


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_processes(victims: Sequence[psutil.Process], tag: str | None = None, timeout: float = 5.0,
                    spare: int | None = None) -> int:
    """SIGKILL ``victims`` and, given a ``tag``, every live process whose environment
    carries it but ``spare`` (a warm worker, whose tag its trials share); wait until
    they are dead; return how many were killed, each once.

    One scan of the process table: a few milliseconds. A process that emptied its
    environment, or runs as another user (its environment unreadable), escapes the tag.
    """
    import psutil

    found = {proc.pid: proc for proc in victims}
    if tag is not None:
        for proc in psutil.process_iter():
            if proc.pid in (os.getpid(), spare) or proc.pid in found:
                continue
            try:
                if proc.environ().get(TRIAL_TAG_ENV) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                    found[proc.pid] = proc
            except psutil.Error:  # gone, a zombie, or not ours to read
                continue
    killed = []
    for proc in found.values():
        try:
            proc.kill()  # psutil checks the pid still names the same process first
            killed.append(proc)
        except psutil.Error:  # gone since, or not ours to kill
            continue
    # Dead means gone or a zombie, not psutil.wait_procs's gone: a killed orphan stays a
    # zombie until PID 1 reaps it, which some inits do only every 2 s.
    deadline = time.monotonic() + timeout
    left = killed
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [proc for proc in left if _running(proc)]
    return len(killed)


def _running(proc: psutil.Process) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_orphans(pgid: int, started: float, tag: str | None = None) -> int:
    """Kill what is left of a worker (by a tuner that was killed); return how many.

    The group's leader may be gone while its DataLoader workers live on, so its
    members are found by group id, and only those started with it or later count
    (a group id, like a pid, can be reused after every member has exited). Given
    the trial's ``tag`` (from its ``spawned`` event), the processes that left the
    group (``setsid``) are found by their environment and killed too.
    """
    import psutil

    members = []
    for proc in psutil.process_iter(["create_time"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["create_time"] >= started - 1.0 \
                    and proc.status() != psutil.STATUS_ZOMBIE:  # a zombie is dead already
                members.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return _kill_processes(members, tag)


def sweep_orphans() -> int:
    """Kill the trial processes on this host whose tuner is gone; return how many.

    A trial's tag starts with its tuner's pid (``run_trial``). Its processes outlive a
    tuner that was killed; when another host then closes the trial as stale, no
    RUNNING trial is left to find them by, so every tuner sweeps its host at start.
    A tuner counts as gone when no process has its pid, or the one that has it
    started after the trial's process did (the pid was reused).
    """
    import psutil

    orphans = []
    for proc in psutil.process_iter(["create_time"]):
        try:
            tag = proc.environ().get(TRIAL_TAG_ENV, "")
            if not tag or proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            tuner = int(tag.partition("-")[0])
        except (psutil.Error, ValueError):
            continue
        try:
            if psutil.Process(tuner).create_time() <= proc.info["create_time"]:
                continue  # its tuner lives
        except psutil.NoSuchProcess:
            pass
        orphans.append(proc)
    return _kill_processes(orphans) if orphans else 0


#: Events that show the training loop is alive (the stall clock restarts on each).
_PROGRESS = frozenset({"resolved", "progress", "warmup", "window", "ceiling"})

Verdict = tuple[Outcome, str]


def run_trial(spec: TrialSpec, log_path: Path, ram_budget: int | None = None,
              on_event: Callable[[dict[str, Any]], Verdict | None] | None = None, *,
              interrupt: threading.Event | None = None, reference: Sequence[Point] = (),
              tolerance: float = DIVERGENCE_TOLERANCE, floor: int | None = None,
              reference_curve: Sequence[Chunk] = (), warm: WarmWorker | None = None) -> TrialResult:
    """Run one worker to its end and classify it. Never raises for the trial's own faults.

    The worker runs in its own process group, which is killed when the trial ends
    (however it ends), so no DataLoader worker outlives it; so is every process
    carrying the trial's tag (``TRIAL_TAG_ENV``), which catches those that left
    the group with ``setsid``. It is also killed, as
    ``timeout``, when it has no batch after ``budget.startup_s``, no finished step
    for ``budget.stall_s`` or runs past the deadline; as ``oom_host`` when the
    monitor sees the RAM budget or the machine's floor crossed.

    Args:
        spec: What to run.
        log_path: Where the worker's stdout and stderr go.
        ram_budget: Bytes its process tree may use.
        on_event: Gets every event (and a first ``spawned`` one with the pid and the
            tag, which ``kill_orphans`` takes); a verdict it returns (pruned,
            diverged) stops the trial with that outcome.
        interrupt: Set from elsewhere (a signal handler) to stop the trial as
            ``interrupted``.
        reference: The baseline's loss history, to judge divergence.
        reference_curve: The baseline's loss curve: divergence is judged on the same
            samples in both (``autotune._guard.divergence``).
        tolerance: See ``autotune._guard.divergence``.
        floor: Available-memory floor in bytes (default: the monitor's).
        warm: The slot's warm worker (``autotune._pool``): the worker is forked from it
            when it can be, else spawned cold.
    """
    read_fd, write_fd = os.pipe()
    tag = warm.tag if warm is not None else new_tag()
    argv, env = build_command(spec, write_fd, os.environ, tag=tag)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    spawned = time.monotonic()  # the spans (``overheads``) start here: the spawn's own cost counts
    with open(log_path, "wb") as log:
        proc = warm.spawn(argv[-1], env, log.fileno(), write_fd) \
            if warm is not None and warm.takes(env) else None
        if proc is None:
            proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, pass_fds=(write_fd,), start_new_session=True)
    os.close(write_fd)
    killed: list[Verdict] = []

    def kill(outcome: Outcome, reason: str) -> None:
        if not killed:
            killed.append((outcome, reason))
        _kill_group(proc.pid)

    def judge(event: dict[str, Any]) -> None:
        verdict = on_event(event) if on_event else None
        if verdict:
            kill(*verdict)

    gpu = nvml_handle(int(spec.device.partition(":")[2] or 0), os.environ) \
        if spec.device.startswith("cuda") else None
    events: dict[str, Any] = {}
    windows: list[dict[str, Any]] = []
    ceilings: list[dict[str, Any]] = []
    reader = EventReader()
    budget = spec.budget
    started = time.time()
    alive = time.monotonic()
    # Seconds from the spawn to each kind's first event, and to the exit. An event counts from the
    # worker's stamp (``at``, see ``EventWriter``), not from when this loop read it: a loaded
    # machine can delay the read past the next event.
    arrived: dict[str, float] = {}
    step = 0
    # Compiling (torch.compile's first forward and backward) finishes no step: while it runs the
    # stall clock allows budget.compile_s, and the deadline moves by what it took.
    compiling: float | None = None
    stall_limit, compiled_s = budget.stall_s, 0.0
    judge({"event": "spawned", "pid": proc.pid, "tag": tag})
    try:
        with Monitor(proc.pid, ram_budget, lambda why: kill(Outcome.OOM_HOST, why), gpu, floor,
                     cpus=spec.cpus, on_error=lambda why: kill(Outcome.CRASHED, why)) as monitor:
            while True:
                exited = proc.poll() is not None
                if exited and "exit" not in arrived:
                    arrived["exit"] = time.monotonic() - spawned
                ready, _, _ = select.select([read_fd], [], [], 0 if exited else 0.1)
                data = os.read(read_fd, 1 << 16) if ready else b""
                now = time.monotonic()
                for event in reader.feed(data):
                    events[event["event"]] = event
                    arrived.setdefault(event["event"], event.get("at", now) - spawned)
                    if event["event"] == "compiling":  # torch.compile at the first forward: no step
                        compiling, stall_limit = now, max(budget.stall_s, budget.compile_s)
                    elif event["event"] in _PROGRESS:
                        alive, step = now, event.get("step", step)
                        if compiling is not None:  # the deadline moves by what compiling took
                            compiled_s += now - compiling
                            compiling, stall_limit = None, budget.stall_s
                    if event["event"] in ("window", "ceiling"):
                        _add_foreign_load(event, monitor)
                        (windows if event["event"] == "window" else ceilings).append(event)
                    judge(event)
                if exited and not data:
                    break
                if exited or killed:
                    continue
                if interrupt is not None and interrupt.is_set():
                    kill(Outcome.INTERRUPTED, "the tuner was interrupted (Ctrl-C or SIGTERM)")
                elif "resolved" not in events and now - spawned > budget.startup_s:
                    kill(Outcome.TIMEOUT, f"startup: no batch after {budget.startup_s:.0f} s "
                                          "(imports, the dataset, DataLoader workers starting)")
                elif "resolved" in events and now - alive > stall_limit:
                    kill(Outcome.TIMEOUT, f"stalled: no step finished for {stall_limit:.0f} s"
                                          + (" while torch.compile compiled the model (--compile-timeout)"
                                             if compiling else "")
                                          + (f" (the last report was at step {step})" if step else ""))
                elif now - spawned > budget.deadline() + compiled_s:
                    kill(Outcome.TIMEOUT, f"deadline: still running after {budget.deadline() + compiled_s:.0f} s"
                                          + (f" ({compiled_s:.0f} s of it compiling)" if compiled_s else ""))
    finally:
        _kill_group(proc.pid)  # orphaned DataLoader workers, or everything on Ctrl-C
        proc.wait()
        os.close(read_fd)
        # those that left the group; the group's dying members are waited for
        _kill_processes((), tag, spare=warm.pid if warm is not None else None)
    if monitor.problems:  # handled, and said: in the log and the reason
        with open(log_path, "a") as log:
            log.writelines(f"autotune: {line}\n" for line in monitor.problems)
    stderr_tail = log_tail(log_path.read_text(errors="replace"))
    metrics = summarize(windows, monitor, started, events)
    metrics.update(overheads(arrived))
    measured = summarize_ceilings(ceilings)
    losses = loss_history(events.get("warmup"), windows)
    curve = judged_curve(events.get("warmup"), windows)
    memory_low = metrics.get("available_min", float("inf")) < 2 * monitor.floor
    outcome, reason = classify(proc.returncode, killed[0] if killed else None, events.get("error"),
                               windows, stderr_tail, history=losses, reference=reference,
                               tolerance=tolerance, memory_low=memory_low, expected_windows=budget.windows,
                               reference_curve=reference_curve, curve=curve,
                               batches=events["end"].get("steps") if "end" in events else None)
    if monitor.problems and not killed:
        reason = "\n".join(filter(None, [reason, *monitor.problems]))
    # Kept for the trials the verdict judged (those that ran to their end), not for one stopped
    # early (pruned, timed out, crashed), whose partial loss was never held against the tolerance.
    judged = judge_loss(reference, losses, reference_curve, curve) \
        if (reference or reference_curve) and outcome in (Outcome.COMPLETE, Outcome.DIVERGED) else None
    if judged is not None and math.isfinite(judged.excess):
        metrics.update(loss_excess=judged.excess, loss_tolerance=tolerance)
    final = events.get("end") or events.get("resolved") or {}
    return TrialResult(outcome, reason, metrics, window_series(windows, monitor), windows,
                       final.get("config", {}), final.get("base_batch_size"), final.get("lr"), log_path,
                       losses, measured, loss_curve(windows), final.get("dataset") or {}, judged)


def _add_foreign_load(event: dict[str, Any], monitor: Monitor) -> None:
    """Put in a window or ceiling event, as it arrives, the share of the trial's CPUs (and
    GPU) that other processes used during it: ``foreign_cpu``, ``foreign_gpu``."""
    if "wall" not in event:
        return
    since = event["wall"] - event["seconds"]
    for name, value in (("foreign_cpu", monitor.foreign_cpu(since)),
                        ("foreign_gpu", monitor.foreign_gpu(since, event["wall"]))):
        if value is not None:
            event[name] = value


def log_tail(text: str, lines: int = 10) -> str:
    """The evidence in a trial's log: the last ``lines`` lines, or for a native crash,
    faulthandler's report (the worker enables it) cut to the crashing thread's stack. The
    worker's own ``autotune:`` lines (what it measured) are left out: they are in the log."""
    all_lines = [line for line in text.splitlines() if not line.startswith("autotune: ")]
    fatal = [i for i, line in enumerate(all_lines) if line.startswith("Fatal Python error:")]
    if not fatal:
        return "\n".join(all_lines[-lines:])
    # The report is blocks split by blank lines: the error, one stack per thread, the
    # extension modules. Keep the error and the current thread's stack.
    blocks = "\n".join(all_lines[fatal[-1]:]).split("\n\n")
    kept = [blocks[0]] + [b for b in blocks[1:] if b.startswith("Current thread")][:1]
    return "\n".join(kept)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarize(windows: Sequence[Mapping[str, Any]], monitor: Monitor, started: float,
              events: Mapping[str, Any]) -> dict[str, float]:
    """Per-trial figures: median samples/s and its spread, step-time percentiles, data wait, RAM, GPU."""
    metrics: dict[str, float] = {"duration_s": time.time() - started}
    metrics.update(monitor.summary())
    if "warmup" in events:
        metrics["warmup_s"] = events["warmup"]["seconds"]
        if "compile_s" in events["warmup"]:  # torch.compile's cost, kept out of the windows
            metrics["compile_s"] = events["warmup"]["compile_s"]
    if not windows:
        return metrics
    rates = [w["samples"] / w["seconds"] for w in windows]
    median = statistics.median(rates)
    steps = [t for w in windows for t in w["step_times"]]
    metrics.update(
        samples_per_s=median,
        samples_per_s_spread=(max(rates) - min(rates)) / median if median else 0.0,
        step_time_p50=_percentile(steps, 0.5),
        step_time_p95=_percentile(steps, 0.95),
        data_wait_frac=sum(w["data_wait"] for w in windows) / sum(w["seconds"] for w in windows),
        **_main_thread(windows),
        measured_samples=float(sum(w["samples"] for w in windows)),
    )
    for name in ("foreign_cpu", "foreign_gpu"):
        seen = [(w[name], w["seconds"]) for w in windows if name in w]
        if seen:  # over the measured time: the windows, weighted by their length
            metrics[name] = sum(v * t for v, t in seen) / sum(t for _, t in seen)
    if windows[-1].get("loss") is not None:
        metrics["loss"] = windows[-1]["loss"]
    if "gpu_mem_peak" in windows[-1]:
        metrics["torch_gpu_mem_peak"] = float(max(w["gpu_mem_peak"] for w in windows))
    return metrics


def summarize_ceilings(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per ceiling a trial measured: its part, key, median samples/s and spread,
    and the CPU seconds one sample cost it."""
    by_part: dict[str, list[Mapping[str, Any]]] = {}
    for event in events:
        by_part.setdefault(event["part"], []).append(event)
    measured = []
    for part, windows in by_part.items():
        rates = [w["samples"] / w["seconds"] for w in windows]
        median = statistics.median(rates)
        entry = {"part": part, "key": windows[0]["key"], "samples_per_s": median,
                 "spread": (max(rates) - min(rates)) / median if median else 0.0, "windows": len(rates)}
        foreign = [w["foreign_cpu"] for w in windows if "foreign_cpu" in w]
        if foreign:  # its worst window: one busy window is enough to doubt a ceiling
            entry["foreign_cpu"] = max(foreign)
        samples = sum(w["samples"] for w in windows)
        if samples and all("cpu_s" in w for w in windows):
            # CPU seconds per sample of this part alone: with the other part's, what sharing the
            # machine's CPUs allows (autotune._ceilings.cpu_roof).
            entry.update(cpu_per_sample=sum(w["cpu_s"] for w in windows) / samples, cpus=windows[0]["cpus"])
        measured.append(entry)
    return measured


def overheads(arrived: Mapping[str, float]) -> dict[str, float]:
    """A trial's fixed cost around its measuring, from the worker's stamps on its events
    (``at``; else when the event was read) and the tuner's reading of its exit.

    ``spawn_s``: to the worker's first event (the interpreter and autotune);
    ``import_s``: torch and the user's module; ``setup_s``: the user's code up to
    its first batch (dataset, model, loader workers); ``teardown_s``: from the
    last event to the process's exit (as the tuner's loop saw it, up to a poll of
    0.1 s late); ``overhead_s``: their sum.
    """
    spans = {"spawn_s": (None, "started"), "import_s": ("started", "loaded"),
             "setup_s": ("loaded", "resolved"), "teardown_s": ("end", "exit")}
    found = {}
    for name, (begin, end) in spans.items():
        if (begin is None or begin in arrived) and end in arrived:
            found[name] = arrived[end] - (arrived[begin] if begin else 0.0)
    if len(found) == len(spans):
        found["overhead_s"] = sum(found.values())
    return found


def _main_thread(windows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The loop's main thread: its busy share of the windows (``main_thread_busy``) and, on a
    GPU, where it only launches work, the samples/s it would allow fully busy (``main_roof``).
    On the CPU the thread computes too: its roof is the compute's, already measured."""
    seen = [w for w in windows if "main_thread_s" in w]
    busy_s, seconds = sum(w["main_thread_s"] for w in seen), sum(w["seconds"] for w in seen)
    if not seen or not seconds:
        return {}
    found = {"main_thread_busy": busy_s / seconds}
    if busy_s > 0 and any("gpu_mem_peak" in w for w in seen):  # a CUDA trial (the window reads its memory)
        found["main_roof"] = sum(w["samples"] for w in seen) / busy_s
    return found


def window_series(windows: Sequence[Mapping[str, Any]], monitor: Monitor) -> dict[str, list[float]]:
    """Per-window series for MLflow: throughput, loss, data wait, RAM and GPU util."""
    series: dict[str, list[float]] = {}

    def add(name: str, value: float | None) -> None:
        if value is not None:
            series.setdefault(name, []).append(float(value))

    for w in windows:
        add("window_samples_per_s", w["samples"] / w["seconds"])
        add("window_loss", w.get("loss"))
        add("window_data_wait_frac", w["data_wait"] / w["seconds"])
        add("window_foreign_cpu", w.get("foreign_cpu"))
        add("window_foreign_gpu", w.get("foreign_gpu"))
        seen = monitor.summary(since=w["wall"] - w["seconds"], until=w["wall"])
        add("window_ram", seen.get("ram_peak"))
        add("window_gpu_util", seen.get("gpu_util_mean"))
    return series
