"""What the study believes of a finished trial: the doubt on its figure and on each ceiling it
measured, and which of the study's ceilings it shows wrong. Pure functions, so that the rules
are tested on hand-built results in milliseconds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune._ceilings import Ceilings, ceiling_key
from autotune._knobs import Part
from autotune._noise import ceiling_doubt, doubt
from autotune._outcome import Outcome
from autotune._records import bottleneck_of


def checked_ceilings(number: int, outcome: Outcome, reason: str, metrics: Mapping[str, float],
                     resolved: Mapping[str, Any], measured: list[Mapping[str, Any]], ceilings: Ceilings,
                     max_load: float, max_spread: float) -> list[dict[str, Any]]:
    """The trial's own ceiling entries, each marked with a ``doubt`` when others loaded the
    CPUs while it was measured or the trial ran past it beyond the noise; and a
    ``distrust`` entry for each ceiling of the study it ran past. Either way the
    ceiling is not used, and the next trial with its key measures it again.

    Only a ceiling the trial ran past counts against it (``Bottleneck.ran_past``, each
    with the value it was compared with): one of its own already doubted (measured under
    load) shows nothing wrong with the study's figure for that key."""
    own = [dict(entry) for entry in measured]
    for entry in own:
        entry["doubt"] = ceiling_doubt(entry, max_load)
    sps = metrics.get("samples_per_s")
    if outcome != Outcome.COMPLETE or not sps or doubt(metrics, reason, max_load, max_spread):
        return own  # a figure not believed proves no ceiling wrong
    mine = {e["part"]: e for e in own if not e["doubt"]}
    for part in bottleneck_of(metrics, resolved, ceilings, own).ran_past:
        if part not in (Part.COMPUTE.value, Part.LOADER.value):
            continue  # the CPU roof is derived from the two: it is said unreliable, not re-measured
        if part in mine:
            mine[part]["doubt"] = f"trial {number} ran at {sps / mine[part]['samples_per_s']:.0%} of it"
        else:
            value = ceilings.get(Part(part), resolved)
            own.append({"part": part, "key": ceiling_key(Part(part), resolved),
                        "distrust": f"trial {number} ran at {sps / value:.0%} of the {value:,.0f} "
                                    "other trials measured"})
    return own
