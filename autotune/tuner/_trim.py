"""The winner without its riders: knobs that came along in its draw are tried as the code has them.

A winner is a whole config. The sampler drew its knobs together, the climbs changed its workers
and batch size, and the confirmation re-ran it whole; the knobs beside its loader's shape (a
transfer thread, ``in_order=false``, bf16, ``malloc_retain``...) were never measured alone, so
the study cannot tell which of them pay. Each is something the export asks of production, and
some change the numbers (bf16). On the sweep's latency-bound loop (benchmarks/results/sweep.md)
a winner of batch 64 with 64 workers, prefetch_factor 1, out of order, a transfer thread, bf16
and malloc_retain ran 17,775 samples/s in a plain loop; the same loader in order with none of
those ran 18,671 (medians of 4 runs each, this 2-CPU host, 2026-11-29).

So after the confirmation the winner runs once more with its riders as the code has them
(``trim``, a ``trim`` trial). Where that run is within ``TRIM_WITHIN`` of the winner's median it
is confirmed like the winner (``confirm_trim``), and the trimmed config is the answer unless the
winner beats it beyond the noise or its median falls more than ``TRIM_WITHIN`` behind
(``lighter``): a knob that cannot show it pays is left as the code has it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core._kinds import Kind, Line, Request
from autotune.core._knobs import KNOBS, show_value
from autotune.core._outcome import RUNNING, WAITING
from autotune.tuner._confirm import TRIM_WITHIN, trim_run, untrimmed_of
from autotune.tuner._space import Choice, Space

if TYPE_CHECKING:
    from autotune.stores._records import TrialRow
    from autotune.tuner._confirm import Decision, Group

#: The knobs that make a config's shape, which the climbs and the batch search chose together: never trimmed.
SHAPE = ("batch_size", "lr_scaling", "num_workers", "persistent_workers", "prefetch_factor", "pin_memory")


def riders(sampled: Mapping[str, Any], code: Mapping[str, Any], space: Space) -> dict[str, Any]:
    """The knobs of a config (``sampled``, as the space writes them) outside its shape whose value
    is not the code's (``code``: the baseline's knobs as they ran; a knob it did not resolve, such
    as ``in_order`` without workers, at PyTorch's default), each with the code's value: those
    the space now draws from a list that holds the code's value (one it fixes stays).

    >>> space = Space("s", {"amp": Choice(("off", "bf16")), "prefetch": Choice(("none", "thread"))})
    >>> riders({"num_workers": 8, "amp": "bf16", "prefetch": "none"}, {"amp": "off", "prefetch": "none"}, space)
    {'amp': 'off'}
    """
    out = {}
    for name, value in sampled.items():
        domain = space.domains.get(name)
        if name in SHAPE or name not in KNOBS or not isinstance(domain, Choice):
            continue
        own = code.get(name, KNOBS[name].default)
        if value != own and own in domain.values():
            out[name] = own
    return out


def described(winner: Mapping[str, Any], trimmed: Mapping[str, Any]) -> str:
    """The riders as the winner has them: ``in_order=false, amp=bf16``."""
    return ", ".join(f"{name}={show_value(winner[name])}" for name in trimmed)


def trim(row: TrialRow, rows: Sequence[TrialRow], decision: Decision, space: Space, confirm: int) -> Request | None:
    """Once the confirmation has ended (``row`` was its last run; ``rows``: the study's, and
    ``decision`` on them), the winner's config with its riders as the code has them, once per
    study; None when the winner is the code as written, unconfirmed, or has no riders, or a trial
    still runs, or a re-run or trim is still owed (a follow-up the sampling left enqueued, such as a
    retry, is not: no tuner claims it after its own trials)."""
    winner, base = decision.winner, decision.baseline
    if (
        not confirm
        or not row.kind.repeats
        or not any(r.kind is Kind.CONFIRM for r in rows)
        or any(r.outcome == RUNNING or (r.outcome == WAITING and r.kind.closing) for r in rows)
        or any(r.kind is Kind.TRIM for r in rows)
        or winner is None
        or base is None
        or winner is base
        or not winner.confirmed
    ):
        return None
    first = winner.first
    trimmed = riders(first.sampled, base.first.config, space)
    if not trimmed:
        return None
    return Request(
        Kind.TRIM,
        {**first.sampled, **trimmed},
        first.number,
        f"the winner, trial {first.number}, runs again without {described(first.sampled, trimmed)} (as your code "
        "has them): none of them was measured alone; where it runs as fast, the export leaves them out",
        once=f"trim-{first.number}",
        enqueue_params=True,
    )


def confirm_trim(row: TrialRow, groups: Sequence[Group], confirm: int) -> list[Request | Line]:
    """After the trimmed config's first believed run: ``confirm`` re-runs of it where it ran within
    ``TRIM_WITHIN`` of the winner's median (its riders may pay nothing), else the line that says
    they pay and stay."""
    found = _trimmed(row, groups)
    if found is None or not row.reliable or row.ranked_rate is None:
        return []
    group, winner = found
    if len(group.ranked) != 1 or group.pending:
        return []  # (its first believed run only)
    lead = winner.first
    without = described(lead.sampled, riders_of(group.first, lead))
    if row.ranked_rate < (1 - TRIM_WITHIN) * winner.ranked_median:
        return [
            Line(
                f"trial {row.number} (trial {lead.number} without {without}) ran at {row.ranked_rate:,.0f} against "
                f"its median of {winner.ranked_median:,.0f}: they pay, and the winner keeps them"
            )
        ]
    why = (
        f"trial {row.number} (trial {lead.number} without {without}) ran at {row.ranked_rate:,.0f}, inside "
        f"{TRIM_WITHIN:.0%} of its median ({winner.ranked_median:,.0f}): confirming it with {confirm} "
        f"re-run{'s' if confirm > 1 else ''}"
    )  # (said with the first re-run)
    return [Request(Kind.CONFIRM, group.first.sampled, group.first.number, "" if n else why) for n in range(confirm)]


def riders_of(trimmed: TrialRow, winner: TrialRow) -> dict[str, Any]:
    """The knobs the trimmed run set back, with the values it ran."""
    return {k: v for k, v in trimmed.sampled.items() if k in winner.sampled and winner.sampled[k] != v}


def _trimmed(row: TrialRow, groups: Sequence[Group]) -> tuple[Group, Group] | None:
    """The group ``row`` ran in, where it is a trimmed config, and the winner it was trimmed from."""
    group = next((g for g in groups if any(r.number == row.number for r in g.runs)), None)
    winner = untrimmed_of(group, groups) if group is not None else None
    return (group, winner) if group is not None and winner is not None else None


def trim_line(chosen: Group, untrimmed: Group) -> str:
    """The findings line of a trimmed winner: what it left out, and the two configs' runs."""
    lead, first = untrimmed.first, trim_run(chosen)
    assert first is not None  # (chosen is untrimmed's trimmed config: ``Decision.untrimmed``)

    def runs(group: Group) -> str:
        return ", ".join(f"{rate:,.0f}" for rate in group.ranked)

    return (
        f"trial {first.number} is trial {lead.number}'s config without {described(lead.sampled, riders_of(first, lead))} "
        f"(as your code has them): they paid nothing beyond the noise (runs without: {runs(chosen)}; with: "
        f"{runs(untrimmed)} samples/s), so the export leaves them out"
    )
