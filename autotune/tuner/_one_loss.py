"""A knob value held after one clear loss: its first trial ran at under half the baseline's speed.

On this 2-CPU host bf16 runs small convolutional models at 0.13-0.17x of fp32, and a study of
pytorch/examples' MNIST script spent its first 3 sampled trials on amp=bf16 before the three-trial
rule (``autotune.tuner._precision``) held it; with 8 trials that was most of the search. Half the
baseline is far outside the run-to-run noise (16-25% on this host: ``PRUNE_FRACTION``'s reason),
so one such trial is a clear loss, if the value can be blamed for it:

- a trial that also changed ``compile`` blames nothing: its loop may still have been compiling;
- a value is suspect unless a trial with it ran at half the baseline's speed or more (the
  baseline's own values never are); an int value (workers) can explain a loss, not be held;
- of a trial's suspects, the one that changes the arithmetic of every step (precision, the
  model, a backend flag) is blamed where it is the only such one; loader, transfer and
  optimizer values are blamed only alone. Two step-changing suspects blame neither.

Pure functions of the rows, so every tuner on a study agrees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from autotune.core._knobs import KNOBS, Stage, show_value
from autotune.core._outcome import Outcome

#: Under this share of the baseline's loop samples/s, a trial is a clear loss.
LOSS_BELOW = 0.5
#: Stages whose knobs change what every step computes, and so can slow it several times.
STEP_STAGES = frozenset({Stage.PRECISION, Stage.MODEL, Stage.BACKENDS})

_FIGURES = (Outcome.COMPLETE.value, Outcome.DIVERGED.value, Outcome.PRUNED.value)


class Loss(NamedTuple):
    """Knob ``knob``'s value ``value`` lost clearly in trial ``trial``, as ``why`` says."""

    knob: str
    value: Any
    trial: int
    why: str


def value_of(row: Any, knob: str) -> Any:
    """The value a trial ran ``knob`` with: what it drew, else its config's."""
    return row.sampled.get(knob, row.config.get(knob))


def clear_losses(
    rows: Sequence[Any],
    base_rate: float | None,
    knobs: Iterable[str],
    base_config: Mapping[str, Any],
    believed: Callable[[Any], bool] = lambda row: True,
) -> list[Loss]:
    """The values of ``knobs`` (those the space draws) that lost clearly (see the module), in
    trial order. ``base_rate``: the baseline's loop samples/s; ``base_config``: the values it ran
    with; ``believed(row)``: whether a row's figure may count (a noisy one may not).

    >>> from types import SimpleNamespace as Row
    >>> bf16 = Row(number=1, sampled={"amp": "bf16", "num_workers": 2}, config={}, samples_per_s=15.0,
    ...            outcome="pruned", kind=None)
    >>> clear_losses([bf16], 100.0, ["amp", "num_workers"], {"amp": "off", "num_workers": 0})[0].why
    "amp=bf16 lost clearly: trial 1 with it ran at 15% of the baseline's 100 samples/s"
    """
    if not base_rate:
        return []
    knobs = list(knobs)
    rows = [
        r
        for r in rows
        if not getattr(r.kind, "repeats", False) and r.outcome in _FIGURES and r.samples_per_s and believed(r)
    ]

    def drawn(row: Any) -> set[tuple[str, str]]:
        return {(k, show_value(value_of(row, k))) for k in knobs if value_of(row, k) is not None}

    # (the baseline's own values never are suspect; "1x" is its batch size as the space draws it)
    cleared = {(k, show_value(v)) for k, v in base_config.items()} | {("batch_size", "1x")}
    for row in rows:
        if row.samples_per_s >= LOSS_BELOW * base_rate:
            cleared |= drawn(row)
    lost: list[Loss] = []
    for row in rows:
        if row.samples_per_s >= LOSS_BELOW * base_rate or value_of(row, "compile") not in (
            None,
            "off",
            base_config.get("compile"),
        ):
            continue  # (fast enough; or its loop may still have been compiling: compile's own hold judges it)
        suspects = sorted(drawn(row) - cleared)
        if set(suspects) & {(x.knob, show_value(x.value)) for x in lost}:
            continue  # a value already lost explains it
        stepping = [s for s in suspects if KNOBS[s[0]].stage in STEP_STAGES]
        for knob, _ in suspects if len(suspects) == 1 else stepping if len(stepping) == 1 else []:
            value = value_of(row, knob)
            lost.append(
                Loss(
                    knob,
                    value,
                    row.number,
                    f"{knob}={show_value(value)} lost clearly: trial "
                    f"{row.number} with it ran at {row.samples_per_s / base_rate:.0%} of the baseline's "
                    f"{base_rate:,.0f} samples/s",
                )
            )
    return lost


class Among(NamedTuple):
    """A knob drawn evenly from ``values``, not by the sampler: its other values lost clearly. The
    sampler keeps a categorical's choices for the whole study, and a value it draws is recorded
    as drawn, so a lost one is left out by not asking it (``autotune.tuner._space.Space.sample``)."""

    values: tuple[Any, ...]

    def pick(self, trial: int, knob: str) -> Any:
        """Trial ``trial``'s value of ``knob``: the same for every tuner that asks, and drawn apart
        from any other knob's (seeded by the trial alone, two knobs held among the same values
        took the same one in every trial: their effects could not be told apart).

        >>> among = Among(("off", "fp16"))
        >>> among.pick(3, "amp") == among.pick(3, "amp")
        True
        >>> len({(among.pick(n, "amp"), among.pick(n, "prefetch")) for n in range(16)})
        4
        """
        import random

        return random.Random(f"among-{knob}-{trial}").choice(self.values)


def loss_holds(losses: Sequence[Loss], choices: Mapping[str, Sequence[Any]]) -> dict[str, tuple[Any, str]]:
    """Knob -> (the value to hold it at, the line that says why) for each knob with a value that
    lost clearly: held at the one value left (on a CPU: amp at off once bf16 lost), or, where two
    or more are left, drawn ``Among`` them (on a GPU: amp from off and fp16 once bf16 lost).

    >>> loss_holds([Loss("amp", "bf16", 1, "amp=bf16 lost clearly: ...")], {"amp": ["off", "bf16"]})
    {'amp': ('off', 'amp held at off for the rest of the study: amp=bf16 lost clearly: ...')}
    >>> loss_holds([Loss("amp", "bf16", 1, "amp=bf16 lost clearly: ...")], {"amp": ["off", "bf16", "fp16"]})
    {'amp': (Among(values=('off', 'fp16')), 'amp drawn from off, fp16 for the rest of the study: amp=bf16 lost clearly: ...')}
    """
    out: dict[str, tuple[Any, str]] = {}
    for knob, values in choices.items():
        mine = [x for x in losses if x.knob == knob]
        left = [v for v in values if all(show_value(v) != show_value(x.value) for x in mine)]
        why = "; ".join(x.why for x in mine)
        if mine and len(left) == 1:
            out[knob] = (left[0], f"{knob} held at {show_value(left[0])} for the rest of the study: {why}")
        elif mine and left:
            shown = ", ".join(show_value(v) for v in left)
            out[knob] = (Among(tuple(left)), f"{knob} drawn from {shown} for the rest of the study: {why}")
    return out
