"""Warm start: a new study of a target that an earlier study in the same store tuned runs that
study's top configs first (``--warm-start on``, the default).

The store remembers: a second study of the same function (a new data revision, a rerun after an
upgrade) need not pay the whole search again. Its founder looks for finished studies of the same
target in the study storage (the same folder, or the team's PostgreSQL), takes the most recent one
on the same machine (else the most recent on another), and enqueues that study's top configs
(those that beat its baseline, best first in what they ranked on) right after the baseline, as
trials of their own kind (``warm_start``). Nothing is copied: each runs and is measured here,
and the sampler learns from it as from a draw. A source measured on another machine (other CPUs,
GPU or torch) orders the first draws only, and the line says so. What the source learnt breaks
the code (``autotune.tuner._broke``: a knob held at the code's own after a crash) is held in the
new study from its start, with the source's line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core._kinds import Kind, Request

if TYPE_CHECKING:
    from autotune.tuner._standing import Standing

#: Configs of the source study run first, at most.
TOP = 3
#: What makes two studies' machines the same, of the fingerprint they record.
MACHINE_KEYS = ("platform", "cpus", "device", "gpu", "torch")


@dataclasses.dataclass(frozen=True)
class Source:
    """The earlier study a warm start takes its configs from."""

    name: str
    configs: list[dict[str, Any]]  # as the space writes them ("2x"), best first
    speedups: list[float]  # each one's speedup there
    same_machine: bool
    #: Knob -> line: the knobs the source study found to break the code (``learnt``).
    broke: dict[str, str] = dataclasses.field(default_factory=dict)

    def requests(self) -> list[Request]:
        """One enqueued trial per config (its params fixed for the sampler)."""
        return [Request(Kind.WARM_START, config, enqueue_params=True) for config in self.configs]

    def line(self) -> str:
        """What the warm start does, in one line."""
        held = (
            (
                f"{', '.join(self.broke)} held at your code's own, as study {self.name} found a value of "
                f"{'each' if len(self.broke) > 1 else 'it'} breaks your code"
            )
            if self.broke
            else ""
        )
        if not self.configs:
            return f"warm start: {held} (--warm-start off skips this)"
        shown = ", ".join(f"{s:.2f}x" for s in self.speedups)
        where = (
            "the same target on this machine"
            if self.same_machine
            else "the same target on another machine: they set the order of the first draws only, "
            "their figures are not used"
        )
        return (
            f"warm start: the {len(self.configs)} top config(s) of study {self.name} ({shown} there) run "
            f"first, measured here ({where}; --warm-start off skips this){'; ' + held if held else ''}"
        )


def same_machine(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two recorded fingerprints (``Fingerprint`` as dicts) name the same kind of machine.

    >>> same_machine({"cpus": 2, "torch": "2.13", "date": "2026-11-26"}, {"cpus": 2, "torch": "2.13", "date": "x"})
    True
    >>> same_machine({"cpus": 2}, {"cpus": 16})
    False
    """
    if not a or not b:
        return False
    return all(a.get(k) == b.get(k) for k in MACHINE_KEYS)


def top_configs(standing: Standing, top: int = TOP) -> tuple[list[dict[str, Any]], list[float]]:
    """The configs of a finished study that beat its baseline, best first in what they ranked
    on (their time to the baseline's loss where the batch changed), with their speedups there:
    distinct configs as sampled, believed figures only."""
    if standing.base is None or not standing.base.ranked:
        return [], []
    ranked = sorted(
        (g for g in standing.groups if g is not standing.base and g.ranked and not g.first.baseline),
        key=lambda g: -g.ranked_median,
    )
    configs, speedups = [], []
    for group in ranked:
        speedup = standing.speedup(group)
        sampled = dict(group.first.sampled)
        if speedup is None or speedup <= 1.0 or not sampled or sampled in configs:
            continue
        configs.append(sampled)
        speedups.append(speedup)
        if len(configs) == top:
            break
    return configs, speedups


def learnt(standing: Standing, carried: Mapping[str, str]) -> dict[str, str]:
    """Knob -> line for each knob the finished study ``standing`` held because a value of it broke
    the code: its own crashes', and what its own warm start ``carried``."""
    from autotune.tuner._broke import broke_holds, broken

    if standing.base is None:
        return dict(carried)
    knobs = {k for r in standing.rows for k in r.sampled}
    return {
        k: line
        for k, (_, line) in broke_holds(broken(standing.rows, knobs, standing.base.first.config), carried).items()
    }


def pick(candidates: Sequence[tuple[str, Mapping[str, Any], float]], fingerprint: Mapping[str, Any]) -> list[str]:
    """The candidate studies (name, fingerprint, start time) in the order to try them as a source:
    the same machine first, the most recent first.

    >>> pick([("a", {"cpus": 2}, 1.0), ("b", {"cpus": 16}, 3.0), ("c", {"cpus": 2}, 2.0)], {"cpus": 2})
    ['c', 'a', 'b']
    """
    return [name for name, _, _ in sorted(candidates, key=lambda c: (not same_machine(c[1], fingerprint), -c[2]))]


def find_source(storage: Any, name: str, target: str, fingerprint: Mapping[str, Any], top: int = TOP) -> Source | None:
    """The earlier study of ``target`` in ``storage`` a new study ``name`` starts from, or None."""
    import optuna

    from autotune.tuner._broke import BROKE_ATTR
    from autotune.tuner._queue import is_marker
    from autotune.tuner._standing import read_standing

    candidates = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        attrs = summary.user_attrs
        if summary.study_name == name or is_marker(summary.study_name) or attrs.get("target") != target:
            continue
        started = summary.datetime_start.timestamp() if summary.datetime_start else 0.0
        candidates.append((summary.study_name, attrs.get("fingerprint") or {}, started))
    known = {n: fp for n, fp, _ in candidates}
    for source in pick(candidates, fingerprint):
        study = optuna.load_study(study_name=source, storage=storage)
        standing = read_standing(study)
        configs, speedups = top_configs(standing, top)
        carried = study.user_attrs.get(BROKE_ATTR) or {}
        broke = {
            k: line if line.startswith("study ") else f"study {source} learnt: {line}"
            for k, line in learnt(standing, carried).items()
        }
        if configs or broke:
            return Source(source, configs, speedups, same_machine(known[source], fingerprint), broke)
    return None
