"""Property tests of the rules that decide (Hypothesis): random standings, ceilings missing, zero or in
doubt, figures None or zero, outcomes of every kind. The rules never raise, and never rank, prune
against, hold for or tell the sampler a figure that is not believed."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.core._ceilings import Ceilings, ceiling_key
from autotune.core._kinds import Kind, Request
from autotune.core._knobs import Part
from autotune.core._outcome import RUNNING, WAITING, Outcome
from autotune.machine._noise import is_noisy
from autotune.stores._records import TrialRow
from autotune.tuner._confirm import only_as_written
from autotune.tuner._judge import TrialIds, checked_ceilings, optuna_state, result_record
from autotune.tuner._option_groups import Noise
from autotune.tuner._planner import Settings, after_trial, confirmation, without_baseline
from autotune.tuner._space import Choice, IntRange, Space
from autotune.tuner._space_now import draw_caps, holds, space_now
from autotune.tuner._standing import findings, standing_of
from autotune.tuner._watch import TrialResult
from standings import with_bound

SPACE = Space(
    "p",
    {
        "num_workers": IntRange(0, 8, auto=True),
        "batch_size": Choice(("1x", "2x", "4x")),
        "lr_scaling": Choice(("none", "sqrt", "linear")),
        "persistent_workers": Choice((False, True)),
        "prefetch_factor": IntRange(1, 6),
        "amp": Choice(("off", "bf16")),
    },
)
OUTCOMES = [o.value for o in Outcome] + [RUNNING, WAITING]
DOUBTS = [
    None,
    None,
    "noisy: other processes used 48% of its CPUs while it measured (over 20%)",
    "noisy: its windows disagree, from lowest to highest 300% of their median (over 100%)",
    "short measure: the training function returned after 2 of 4 windows",
]
FIGURE = st.one_of(st.none(), st.just(0.0), st.floats(1.0, 1e6))
SHARE = st.floats(0.0, 1.0)
LOSS = st.one_of(st.floats(0.0, 10.0), st.sampled_from([math.nan, math.inf, 0.0]))
RUN = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def sampled(draw) -> dict:
    knobs = {
        "num_workers": st.integers(0, 12),
        "batch_size": st.sampled_from(["1x", "2x", "4x"]),
        "lr_scaling": st.sampled_from(["none", "sqrt", "linear"]),
        "persistent_workers": st.booleans(),
        "prefetch_factor": st.integers(1, 8),
        "amp": st.sampled_from(["off", "bf16"]),
    }
    names = draw(st.sets(st.sampled_from(sorted(knobs))))
    return {name: draw(knobs[name]) for name in sorted(names)}


def resolved(drawn: dict) -> dict:
    """The config as it ran: relative batch sizes of the code's 16 as samples."""
    config = {"num_workers": 0, "batch_size": 16, **drawn}
    config["batch_size"] = 16 * int(str(config["batch_size"]).rstrip("x"))
    return config


@st.composite
def rows(draw, most: int = 9) -> list[TrialRow]:
    found: list[TrialRow] = []
    for number in range(draw(st.integers(0, most))):
        kinds = [Kind.BASELINE, Kind.SAMPLED, Kind.RETRY, Kind.MORE_WORKERS, Kind.SMALLER_BATCH]
        if found:
            kinds += [Kind.CONFIRM, Kind.REMEASURE]
        kind = draw(st.sampled_from(kinds))
        of = (
            draw(st.integers(0, number - 1))
            if kind is not Kind.BASELINE and kind is not Kind.SAMPLED and number
            else None
        )
        if kind.repeats and of is None:
            kind = Kind.SAMPLED
        drawn = {} if kind is Kind.BASELINE else (found[of].sampled if kind.repeats else draw(sampled()))
        rate, outcome = draw(FIGURE), draw(st.sampled_from(OUTCOMES))
        metrics = {
            k: v
            for k, v in (
                ("samples_per_s", rate),
                ("samples_per_s_spread", draw(st.floats(0, 3))),
                ("data_wait_frac", draw(SHARE)),
                ("foreign_cpu", draw(SHARE)),
            )
            if v is not None
        }
        if draw(st.booleans()):
            metrics["loss_excess"] = draw(st.floats(-1, 5))
        losses = [(float(100 * i + 50), draw(LOSS)) for i in range(draw(st.integers(0, 4)))]
        curve = [(512 * i, 512 * (i + 1), draw(LOSS), 8) for i in range(draw(st.integers(0, 4)))]
        dataset = {"epoch_batches": draw(st.integers(1, 60))} if draw(st.booleans()) else {}
        doubt = draw(st.sampled_from(DOUBTS)) if outcome == "complete" and rate is not None else None
        found.append(
            TrialRow(
                number,
                kind is Kind.BASELINE or (kind.repeats and found[of].baseline),
                outcome,
                "",
                metrics,
                resolved(drawn),
                draw(st.sampled_from([16, None])),
                None,
                losses=losses,
                sampled=drawn,
                kind=kind,
                of=of,
                doubt=doubt,
                remeasure=draw(st.integers(0, 3)),
                curve=curve,
                dataset=dataset,
                lr=draw(st.sampled_from([0.01, None])),
                workers_high=draw(st.sampled_from([None, 4, 8])),
            )
        )
    return found


@st.composite
def ceilings(draw, configs: list[dict]) -> list[dict]:
    entries = []
    for config in configs:
        for part in (Part.COMPUTE, Part.LOADER):
            if draw(st.booleans()):
                continue
            entry = {
                "part": part.value,
                "key": ceiling_key(part, config),
                "samples_per_s": draw(st.one_of(st.just(0.0), st.floats(1.0, 1e6))),
                "spread": draw(st.floats(0, 2)),
                "foreign_cpu": draw(SHARE),
            }
            if draw(st.booleans()):
                entry.update(cpu_per_sample=draw(st.floats(0.0, 0.01)), cpus=2)
            if draw(st.integers(0, 4)) == 0:
                entry["doubt"] = "other processes used 60% of the CPUs while it was measured"
            if draw(st.integers(0, 6)) == 0:
                entry = {"part": entry["part"], "key": entry["key"], "distrust": "trial 3 ran at 150% of it"}
            entries.append(entry)
    return entries


@st.composite
def standings(draw):
    found_rows = draw(rows())
    study = Ceilings(draw(ceilings([r.config for r in found_rows])))
    return standing_of([with_bound(r, study) for r in found_rows], study)


@RUN
@given(standings())
def test_the_standing_never_raises_and_ranks_only_believed_figures(standing) -> None:
    believed = {r.number: r.samples_per_s for r in standing.rows if r.reliable}
    for group in standing.groups:
        assert sorted(group.rates) == sorted(believed[r.number] for r in group.runs if r.number in believed)
    winner = standing.decision.winner
    if winner is not None and not winner.rates:  # the code as written: every other config ruled out
        assert winner is standing.base and only_as_written(standing.groups, winner)
        assert findings(standing)[0].startswith(f"trial {winner.first.number} (the baseline: your code as written)")
    elif winner is not None:
        assert winner.rates and sorted(winner.rates) == sorted(r.samples_per_s for r in winner.runs if r.reliable)
        assert standing.best.reliable and standing.best.doubt is None
    assert findings(standing)


@RUN
@given(standings(), st.data())
def test_the_planners_rules_never_raise_and_never_ask_for_what_ran(standing, data) -> None:
    drawn = [r.sampled for r in standing.rows]
    settings_ = Settings(SPACE, 2, 0.5, 4, data.draw(st.integers(0, 3)), data.draw(st.booleans()))
    for row in standing.rows:
        for decision in after_trial(row, standing, settings_):
            if not isinstance(decision, Request):
                continue
            if decision.kind.repeats:
                assert decision.of is not None and decision.config == standing.rows[decision.of].sampled
            if decision.kind is Kind.REMEASURE and row.outcome == Outcome.INTERRUPTED.value:  # owed again, as it was
                assert row.kind is Kind.REMEASURE and decision.attempt == row.remeasure
            elif decision.kind is Kind.REMEASURE:  # only a noisy figure is measured again, up to the limit
                assert is_noisy(row.doubt) and decision.attempt == row.remeasure + 1 <= settings_.remeasure
            if decision.kind in (Kind.RETRY, Kind.MORE_WORKERS, Kind.SMALLER_BATCH):
                assert settings_.trials_left and dict(decision.config) not in drawn  # never a config drawn already
                assert row.reliable or row.outcome == Outcome.DIVERGED.value
    without_baseline(standing, data.draw(st.sampled_from([None, 0])))
    for request in confirmation(standing, data.draw(st.integers(0, 3))).requests:
        first = standing.rows[request.of]
        assert request.kind is Kind.CONFIRM and request.config == first.sampled and request.baseline == first.baseline


@RUN
@given(standings(), st.integers(0, 12), st.sampled_from(["1x", "2x", "4x", None]), st.data())
def test_the_space_now_never_raises_and_holds_only_for_a_believed_best(standing, workers, size, data) -> None:
    now, _ = space_now(SPACE, standing, 2, data.draw(st.sampled_from([None, 2**30])))
    assert now.domains["num_workers"].high >= SPACE.domains["num_workers"].high
    held = holds(standing, SPACE, data.draw(st.sampled_from([None, 0, 3])), 0.2, 1.0)
    loader = {k for k in held.values if k in ("num_workers", "persistent_workers", "prefetch_factor")}
    # (or a value of it broke the code where the baseline ran: autotune.tuner._broke)
    loader -= {k for k in loader if "crashed where the baseline ran" in held.why.get(k, "")}
    if loader:
        assert standing.best is not None and standing.best.reliable and standing.best.bottleneck.settled
    cap = draw_caps(standing, now, lambda line: None)
    if cap is not None:
        for name in ("num_workers", "prefetch_factor"):
            bound = cap(name, {"batch_size": size, "num_workers": workers})
            assert bound is None or bound >= 0


@st.composite
def results(draw):
    drawn = draw(sampled())
    config = resolved(drawn)
    # weighted to what most trials are: complete, believed, with ceilings of their own
    metrics = {
        k: v
        for k, v in (
            ("samples_per_s", draw(st.one_of(st.floats(1.0, 1e6), FIGURE))),
            ("samples_per_s_spread", draw(st.floats(0, 3))),
            ("data_wait_frac", draw(SHARE)),
            ("foreign_cpu", draw(st.one_of(st.floats(0, 0.1), SHARE))),
            ("main_roof", draw(FIGURE)),
        )
        if v is not None
    }
    own = draw(ceilings([config]))
    own = [e for e in own if "distrust" not in e and "doubt" not in e]  # a worker measures; the study judges
    outcome = draw(st.one_of(st.just(Outcome.COMPLETE), st.sampled_from(list(Outcome))))
    reason = (
        ""
        if outcome == Outcome.COMPLETE and draw(st.booleans())
        else draw(
            st.sampled_from(
                ["", "short measure: the training function returned after 2 of 4 windows", "crashed: Traceback ..."]
            )
        )
    )
    study = Ceilings(draw(ceilings([config])))
    return (
        TrialResult(
            outcome, reason, metrics, {}, [], config, 16, 0.01, __import__("pathlib").Path("x.log"), ceilings=own
        ),
        drawn,
        study,
    )


@RUN
@given(results(), st.floats(0.05, 1.0), st.floats(0.1, 5.0), st.sampled_from([None, 0.0, 500.0]))
def test_the_recorders_rules_never_raise_and_never_tell_an_unbelieved_figure(
    given_, max_load, max_spread, base_rate
) -> None:
    result, drawn, study = given_
    noise = Noise(max_load=max_load, max_spread=max_spread)
    record = result_record(
        TrialIds(7, 7, "run"), {"sampled": drawn, "kind": "sampled"}, result, study, base_rate, noise, {}
    )
    attrs = record["attrs"]
    state, value = optuna_state(result.outcome, result.metrics.get("samples_per_s"), attrs["doubt"])
    if state == "complete":
        assert value and not is_noisy(attrs["doubt"]) and result.outcome in (Outcome.COMPLETE, Outcome.DIVERGED)
    # the ceilings it keeps: its own (marked when doubted), and a distrust only for one it ran past
    own = checked_ceilings(
        7,
        result.outcome,
        result.reason,
        result.metrics,
        config := result.resolved,
        result.ceilings,
        study,
        noise,
    )
    assert own == attrs["ceilings"]
    for entry in own:
        if "distrust" in entry:
            value = study.get(Part(entry["part"]), config)
            assert value and result.metrics["samples_per_s"] > value
    row = dataclasses.replace(
        with_bound(
            TrialRow(
                7, False, result.outcome.value, result.reason, result.metrics, config, 16, None, doubt=attrs["doubt"]
            ),
            study,
        )
    )
    assert not (row.reliable and attrs["doubt"])
