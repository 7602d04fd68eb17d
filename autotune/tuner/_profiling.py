"""Profile runs: after the confirmation, the baseline and the winner run once more, each step
timed by part and a few steps traced by torch.profiler (``autotune.worker._profile``).

The last tuner running the study runs them (with its first slot's CPUs and warm worker,
taking its turn on them like a trial), outside the Optuna study: they rank nothing. What
they found is kept in the study (``PROFILE_ATTR``) for whoever closes the parent MLflow run:
the traces go there under ``traces/``, the parts to its metrics and to the report.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core._config import Config
from autotune.core._memline import EXPANDABLE, MemoryFinding, memory_lines, swing_reason
from autotune.machine._launch import Budget, TrialSpec
from autotune.tuner._tuners import TunerPhase
from autotune.tuner._watch import run_trial
from autotune.worker._profile import LABELS, PARTS, changed, shares

if TYPE_CHECKING:
    from autotune.tuner._standing import Standing

#: The study's user attribute holding the profile runs' findings, by role.
PROFILE_ATTR = "profile"
#: Trace files as the parent run holds them: ``traces/<role>.pt.trace.json.gz``.
TRACE_NAME = "{role}.pt.trace.json.gz"


def profile_plan(standing: Standing, nproc: int = 1) -> tuple[list[tuple[str, int, dict[str, Any]]], str | None]:
    """Which configs to profile, as ``(role, trial, sampled config)``: the baseline's, and the
    winner's where the study has one other than the baseline; and why not one of them, or none
    (a line to say; the winner's, where its run was measured whole only, too short for a window).

    >>> profile_plan(None)
    ([], 'no profile: the study has no baseline figure')
    """
    if standing is None or standing.base is None or not standing.base.rates:
        return [], "no profile: the study has no baseline figure"
    if nproc > 1:
        return [], (
            f"no profile on {nproc} ranks: each rank would trace itself into one file "
            "(profile a single rank's run with --nproc-per-node 1)"
        )
    plan: list[tuple[str, int, dict[str, Any]]] = [("baseline", standing.base.first.number, {})]
    winner = standing.decision.winner
    best = standing.best
    if winner is None or winner is standing.base or best is None:
        return plan, None
    if not best.samples_per_s:  # (``autotune.core._outcome.classify``: "measured whole only")
        return plan, f"no profile of the winner (trial {best.number}): its run is too short to profile ({best.reason})"
    return [*plan, ("winner", best.number, dict(best.sampled))], None


def profile_budget(budget: Budget, marks: Sequence[int] = ()) -> Budget:
    """A profile run's budget: the study's warmup, one window, no ceilings, no added windows; at
    the baseline's first two ``marks`` where it has three or more (short code run whole: after its
    first window, the rest of the run is left for the profile's steps).

    >>> profile_budget(Budget(), [64, 128, 192, 256]).marks, profile_budget(Budget(), [64, 128]).marks
    ((64, 128), ())
    """
    return dataclasses.replace(
        budget,
        windows=1,
        ceiling_windows=0,
        learn_windows=0,
        learn_to=0.0,
        whole_s=0.0,
        marks=tuple(marks[:2]) if len(marks) >= 3 else (),
    )


def run_profiles(runner: Any, standing: Standing) -> dict[str, Any]:
    """Run the profile runs of ``standing`` (``profile_plan``) with ``--profile on``, when the study
    was not interrupted, if this tuner (``runner``, an ``autotune.tuner._study.StudyRunner``) is the
    last one running it; keep and say what they found. Returns it, by role (empty: none ran)."""
    if not runner.options.profile or runner.scheduler.signum:
        return {}
    runner.registry.enter(TunerPhase.PROFILING)
    others = runner.registry.live_others(runner._liveness, (TunerPhase.SAMPLING, TunerPhase.CONFIRMING))
    profiling = runner.registry.live_others(runner._liveness, (TunerPhase.PROFILING,))
    if others or any(_identity(t) < _identity(runner._owner) for t in profiling):
        # The last one profiles (of two that got here together, the first by identity). This one
        # leaves the phase at once: the last, checking a moment later, would see it profiling and,
        # were it the first by identity, leave the profile runs to it; nobody would run them.
        runner.registry.enter(TunerPhase.DONE)
        return {}
    plan, why = profile_plan(standing, runner.options.nproc_per_node)
    if why:
        runner.reporter.note(why)
    if not plan:
        return {}
    folder = runner.recorder.log_dir / "profile"
    kept: dict[str, Any] = {}
    began = time.monotonic()
    for role, number, sampled in plan:
        found_here = _profile_run(runner, standing, role, number, sampled, folder)
        if found_here is not None:
            kept[role] = found_here
    for role, again in expandable_plan(kept, plan):
        found_here = _profile_run(
            runner,
            standing,
            again,
            kept[role]["trial"],
            {**dict(next(s for r, _, s in plan if r == role)), "cuda_alloc_conf": EXPANDABLE},
            folder,
        )
        if found_here is not None:
            kept[again] = found_here
    spent = time.monotonic() - began
    if kept:
        runner.study.set_user_attr(PROFILE_ATTR, kept)
        runner.reporter.note(
            summary_line(kept, folder) + f"; the profile runs took {spent:.0f} s, "
            f"{spent / max(spent, time.monotonic() - runner._started):.0%} of this tuner's time "
            "(--profile off skips them)"
        )
        for line in memory_lines(kept):
            runner.reporter.note(line)
    return kept


def _profile_run(
    runner: Any, standing: Standing, role: str, number: int, sampled: Mapping[str, Any], folder: Path
) -> dict[str, Any] | None:
    """One profile run of trial ``number``'s ``sampled`` config as ``role``; what it found (None:
    it wrote no trace, and the terminal says why)."""
    options, slot = runner.options, runner.slots[0]
    started = time.monotonic()
    trace = folder / TRACE_NAME.format(role=role)
    marks = standing.base.first.shape.get("marks", ()) if standing.base else ()
    spec = TrialSpec(
        options.target,
        Config(**sampled),
        slot.device,
        profile_budget(options.budget, marks),
        seed=standing.seed(options.seed),
        cpus=slot.cpus,
        argv=options.argv,
        trace=str(trace),
    )
    with runner.host.turn(
        slot.runs_on,
        f"the {role}'s profile run of study {runner.name} (tuner pid {os.getpid()})",
        runner.reporter.note,
        runner.scheduler.interrupt,
    ):
        result = run_trial(
            spec,
            folder / f"{role}.log",
            runner.ram_budget,
            warm=runner._warm.get(slot.index),
            interrupt=runner.scheduler.interrupt,
        )
    if result.profile is None:
        why = (
            result.reason.splitlines()[0]
            if result.reason
            else "no trace written: the code returned before the steps it records (it is that short)"
        )
        runner.reporter.note(f"no profile of the {role} (trial {number}'s config): {result.outcome.value}: {why}")
        return None
    return {
        "trial": number,
        "parts": result.profile["parts"],
        "trace": result.profile["trace"],
        "recorded_step_s": result.profile["recorded_step_s"],
        "memory": result.profile.get("memory"),
        "samples_per_s": result.metrics.get("samples_per_s"),
        "seconds": time.monotonic() - started,
    }


def expandable_plan(kept: Mapping[str, Any], plan: list[tuple[str, int, dict[str, Any]]]) -> list[tuple[str, str]]:
    """Which profiled configs to run again with ``expandable_segments:True``, as ``(role, the
    new run's role)``: those whose reserved memory swings (``swing_reason``), on CUDA, that
    did not already run with it. The winner's where both swing (production runs it).

    >>> swinging = {"memory": {"steps": 50, "reserved_peak": 3 << 30, "allocated_peak": 1 << 30}}
    >>> expandable_plan({"baseline": swinging}, [("baseline", 0, {})])
    [('baseline', 'baseline_expandable')]
    >>> expandable_plan({"baseline": swinging}, [("baseline", 0, {"cuda_alloc_conf": "expandable_segments:True"})])
    []
    """
    configs = {role: sampled for role, _, sampled in plan}
    swinging = [
        role
        for role, found in kept.items()
        if role in configs
        and configs[role].get("cuda_alloc_conf") != EXPANDABLE
        and found.get("memory")
        and swing_reason(MemoryFinding.from_dict(found["memory"]))
    ]
    pick = "winner" if "winner" in swinging else (swinging[0] if swinging else None)
    return [] if pick is None else [(pick, f"{pick}_expandable")]


def _identity(tuner: Mapping[str, Any]) -> tuple[str, int, float]:
    return str(tuner.get("host")), int(tuner.get("pid") or 0), float(tuner.get("started") or 0.0)


def summary_line(kept: Mapping[str, Any], folder: Path) -> str:
    """What the profile runs found, in one line for the terminal."""
    base, win = kept.get("baseline"), kept.get("winner")
    if base and win:
        said = changed(base["parts"], win["parts"])
    else:
        one = base or win
        assert one is not None  # (kept: the baseline's run or the winner's, at least)
        big = sorted(((share, p) for p, share in shares(one["parts"]).items() if share >= 0.05), reverse=True)
        said = f"the {'baseline' if base else 'winner'}'s step {one['parts']['step'] * 1e3:.1f} ms: " + ", ".join(
            f"{LABELS[p]} {share:.0%}" for share, p in big
        )
    return f"profile: {said} (traces: {folder}; in MLflow: the parent run's traces/)"


def parent_figures(kept: Mapping[str, Any]) -> tuple[dict[str, float], list[str]]:
    """The parent run's profile metrics (``profile_<role>_<part>_ms`` and ``..._share``) and
    the trace files to attach, from the study's ``PROFILE_ATTR``.

    >>> parent_figures({"baseline": {"parts": {"forward": 0.002, "step": 0.004}, "trace": "/t/b.gz"}})[0]["profile_baseline_forward_share"]
    0.5
    """
    metrics: dict[str, float] = {}
    traces = []
    for role, found in kept.items():
        parts = found.get("parts") or {}
        for part, share in shares(parts).items():
            metrics[f"profile_{role}_{part}_share"] = share
        for part in (*PARTS, "step"):
            if part in parts:
                metrics[f"profile_{role}_{part}_ms"] = parts[part] * 1e3
        memory = found.get("memory") or {}
        for key in ("allocated_peak", "reserved_peak"):
            if key in memory:
                metrics[f"profile_{role}_{key}_mib"] = memory[key] / (1 << 20)
        if "mallocs" in memory:
            metrics[f"profile_{role}_cuda_mallocs"] = float(memory["mallocs"])
        traces += [path for path in (found.get("trace"), memory.get("timeline")) if path and Path(path).exists()]
    return metrics, traces
