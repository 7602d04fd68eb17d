"""A trial's figures, from its events and its monitor: samples/s and spread, step times,
data wait, its fixed costs, its ceilings, the per-window series MLflow plots; and the
evidence in its log."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.machine._monitor import Monitor


def add_foreign_load(event: dict[str, Any], monitor: Monitor) -> None:
    """Put in a window or ceiling event, as it arrives, the share of the trial's CPUs (and
    GPU) that other processes used during it: ``foreign_cpu``, ``foreign_gpu``."""
    if "wall" not in event:
        return
    since = event["wall"] - event["seconds"]
    for name, value in (
        ("foreign_cpu", monitor.foreign_cpu(since)),
        ("foreign_gpu", monitor.foreign_gpu(since, event["wall"])),
    ):
        if value is not None:
            event[name] = value


def run_load(monitor: Monitor, since: float) -> dict[str, float]:
    """For a whole run measured without a window (too few steps for one): the share of its CPUs
    other processes used from ``since`` (wall time: its first batch) to its last reading while it
    ran, as a window's ``foreign_cpu``, so that a run slowed by others is doubted as a window is.
    Its last reading is the one with the most CPU of its tree: after the exit the tree reads less."""
    from autotune.machine._monitor import foreign_cpu

    readings = [s for s in monitor.samples if s.cpu is not None]
    start = next((s for s in reversed(readings) if s.wall <= since), readings[0] if readings else None)
    end = max(readings, key=lambda s: (s.cpu.tree, s.wall), default=None)  # type: ignore[union-attr]
    if start is None or end is None or start.cpu is None or end.cpu is None or end.wall <= start.wall:
        return {}
    return {"foreign_cpu": foreign_cpu(start.cpu, end.cpu, end.wall - start.wall, len(monitor.cpus))}


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
    blocks = "\n".join(all_lines[fatal[-1] :]).split("\n\n")
    kept = [blocks[0]] + [b for b in blocks[1:] if b.startswith("Current thread")][:1]
    return "\n".join(kept)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarize(
    windows: Sequence[Mapping[str, Any]], monitor: Monitor, started: float, events: Mapping[str, Any]
) -> dict[str, float]:
    """Per-trial figures: median samples/s and its spread, step-time percentiles, data wait, RAM, GPU."""
    metrics: dict[str, float] = {"duration_s": time.time() - started}
    metrics.update(monitor.summary())
    if "warmup" in events:
        metrics["warmup_s"] = events["warmup"]["seconds"]
        if "compile_s" in events["warmup"]:  # torch.compile's cost, kept out of the windows
            metrics["compile_s"] = events["warmup"]["compile_s"]
        if "compile_warm" in events["warmup"]:  # 1: its graphs were in the study's Inductor cache
            metrics["compile_warm"] = events["warmup"]["compile_warm"]
        if "repeat_share" in events["warmup"]:  # rows seen again in its first batches (autotune.worker._streams)
            metrics["repeat_share"] = events["warmup"]["repeat_share"]
    if not windows:
        return metrics
    rates = [w["samples"] / w["seconds"] for w in windows]
    median = statistics.median(rates)
    steps = [t for w in windows for t in w["step_times"]]
    samples, seconds = sum(w["samples"] for w in windows), sum(w["seconds"] for w in windows)
    metrics.update(
        samples_per_s=median,
        samples_per_s_spread=(max(rates) - min(rates)) / median if median else 0.0,
        step_time_p50=_percentile(steps, 0.5),
        step_time_p95=_percentile(steps, 0.95),
        data_wait_frac=sum(w["data_wait"] for w in windows) / seconds,
        **_main_thread(windows),
        measured_samples=float(samples),
        # (its windows together, samples over seconds: what a run of it feels where they disagree)
        samples_per_s_all=samples / seconds,
        samples_per_step=samples / max(1, sum(w["steps"] for w in windows)),
    )
    epochs = [w["epoch_rows"] for w in windows if w.get("epoch_rows")]
    if epochs:  # the rows of its loader's last whole epoch
        metrics["epoch_rows"] = float(max(epochs))
    outside = sum(w.get("outside_s", 0.0) for w in windows)
    if outside:  # between epochs (an evaluation pass): its own figure, never in samples/s
        metrics["outside_loop_s"] = outside
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
        entry = {
            "part": part,
            "key": windows[0]["key"],
            "samples_per_s": median,
            "spread": (max(rates) - min(rates)) / median if median else 0.0,
            "windows": len(rates),
        }
        foreign = [w["foreign_cpu"] for w in windows if "foreign_cpu" in w]
        if foreign:  # its worst window: one busy window is enough to doubt a ceiling
            entry["foreign_cpu"] = max(foreign)
        samples = sum(w["samples"] for w in windows)
        if samples and all("cpu_s" in w for w in windows):
            # CPU seconds per sample of this part alone: with the other part's, what sharing the
            # machine's CPUs allows (autotune.core._ceilings.cpu_roof).
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
    spans = {
        "spawn_s": (None, "started"),
        "import_s": ("started", "loaded"),
        "setup_s": ("loaded", "resolved"),
        "teardown_s": ("end", "exit"),
    }
    found = {}
    for name, (begin, end) in spans.items():
        if (begin is None or begin in arrived) and end in arrived:
            found[name] = arrived[end] - (arrived[begin] if begin else 0.0)
    if len(found) == len(spans):
        found["overhead_s"] = sum(found.values())
    return found


def run_figures(end: Mapping[str, Any], arrived: Mapping[str, float]) -> dict[str, float]:
    """A whole run's wall time as the user waits for it, and its parts, for a run whose code
    returned by itself (its ``end`` event says ``ended``); empty for any other.

    ``run_s``: process start to exit, through the interpreter's normal shutdown (such a run is
    started cold, as ``python train.py`` is: ``autotune.machine._launch.launch``, and ends as it
    does: ``autotune.worker._trial_main.end``); ``startup_s``: to the first batch (interpreter, imports, the dataset,
    the model, DataLoader workers starting); ``loop_s``: the training loop, first batch to last
    step, less ``outside_s``, the time between its epochs (test passes, checkpoints); ``after_s``:
    the rest (after the last step: a last test pass, saving, the exit); ``run_samples_per_s``:
    the samples it trained over ``run_s``.

    >>> run_figures({"ended": True, "loop_s": 6.0, "outside_s": 1.0, "samples": 900}, {"resolved": 3.0, "exit": 11.0})
    {'run_s': 11.0, 'startup_s': 3.0, 'loop_s': 6.0, 'outside_s': 1.0, 'after_s': 1.0, 'run_samples_per_s': 81.81818181818181}
    """
    if not end.get("ended") or "exit" not in arrived or "resolved" not in arrived or not end.get("samples"):
        return {}
    run_s = arrived["exit"]
    startup_s = arrived["resolved"]
    loop_s, outside_s = end["loop_s"], end["outside_s"]
    return {
        "run_s": run_s,
        "startup_s": startup_s,
        "loop_s": loop_s,
        "outside_s": outside_s,
        "after_s": max(0.0, run_s - startup_s - loop_s - outside_s),
        "run_samples_per_s": end["samples"] / run_s,
    }


def marks_of(warmup: Mapping[str, Any] | None, windows: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Where a run's warmup and windows ended (``samples_seen``) and the loop's seconds by then:
    the baseline's are where every later trial's end (``autotune.worker._marks``).

    >>> marks_of({"samples_seen": 320, "seconds": 1.0}, [{"samples_seen": 960, "seconds": 1.5}])
    {'marks': [320, 960], 'at': [1.0, 2.5]}
    """
    stretches = ([warmup] if warmup else []) + list(windows)
    marks, at, clock = [], [], 0.0
    for event in stretches:
        clock += event["seconds"]
        marks.append(event["samples_seen"])
        at.append(round(clock, 4))
    return {"marks": marks, "at": at}


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
