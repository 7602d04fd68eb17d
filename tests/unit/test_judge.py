"""What the study believes of a finished trial (autotune.tuner._judge): hand-built results."""

from __future__ import annotations

from autotune.core._ceilings import Ceilings, ceiling_key
from autotune.core._knobs import Part
from autotune.core._outcome import Outcome
from autotune.tuner._judge import checked_ceilings
from autotune.tuner._option_groups import Noise

CONFIG = {"batch_size": 16, "num_workers": 2}
QUIET = {"samples_per_s": 1000.0, "samples_per_s_spread": 0.05, "foreign_cpu": 0.0, "data_wait_frac": 0.3}


def entry(part: Part, rate: float, load: float = 0.0) -> dict:
    return {
        "part": part.value,
        "key": ceiling_key(part, CONFIG),
        "samples_per_s": rate,
        "spread": 0.02,
        "windows": 2,
        "foreign_cpu": load,
    }


def check(measured: list[dict], ceilings: Ceilings | None = None, metrics: dict | None = None) -> list[dict]:
    return checked_ceilings(
        7,
        Outcome.COMPLETE,
        "",
        metrics or QUIET,
        CONFIG,
        measured,
        ceilings or Ceilings(),
        Noise(max_load=0.2, max_spread=1.0),
    )


def test_a_ceiling_measured_under_load_is_doubted_not_a_crash() -> None:
    # The trial's windows were quiet, its loader ceiling's were not (a neighbour started in
    # between), and the study has no other figure for that key: the doubted ceiling is left
    # out, and nothing is "distrusted" (the trial ran past no figure anybody believes).
    # Once raised TypeError (float / None) in the distrust message, killing the study.
    own = check([entry(Part.COMPUTE, 2000.0), entry(Part.LOADER, 600.0, load=0.6)])
    assert [e["part"] for e in own] == ["compute", "loader"]
    assert own[0]["doubt"] is None
    assert own[1]["doubt"] == "other processes used 60% of the CPUs while it was measured"
    assert not any("distrust" in e for e in own)


def test_a_doubted_own_ceiling_does_not_distrust_the_studys_figure() -> None:
    # The study's own loader ceiling for the key (1,200) is above the trial's 1,000: right.
    study = Ceilings([entry(Part.LOADER, 1200.0)])
    own = check([entry(Part.LOADER, 600.0, load=0.6)], study)
    assert not any("distrust" in e for e in own)


def test_a_ceiling_the_trial_ran_past_is_doubted_or_distrusted() -> None:
    own = check([entry(Part.COMPUTE, 700.0)])  # 1,000 samples/s past a 700 ceiling: wrong
    assert own[0]["doubt"] == "trial 7 ran at 143% of it"
    study = Ceilings([entry(Part.LOADER, 500.0)])  # the study's figure, run past
    own = check([], study)
    assert own == [
        {
            "part": "loader",
            "key": ceiling_key(Part.LOADER, CONFIG),
            "distrust": "trial 7 ran at 200% of the 500 other trials measured",
        }
    ]
