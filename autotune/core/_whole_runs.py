"""How a whole run ranks (short code that every trial runs to its end): on its wall time, what the
user waits for, and only against the same training as the baseline's.

A run's samples per second of its wall time is no figure to rank on where runs train different
samples: a script that stops after a number of steps trains 8x the samples at 8x the batch, and
ranked as faster while its run took longer. The baseline's samples over a run's wall time
(``wall_rate``) ranks every run of the same training on its wall time alone, in the units of
every other figure; a run that trained other samples is another training (``other_training``).
Where production trains longer than the script as given (``--horizon``), a run ranks on its projected
time for that long instead (``horizon_rate``): start-up and compile once, the loop for the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def wall_rate(base_samples: float, run_s: float) -> float:
    """What a whole run of the baseline's training ranks on: the baseline's samples over the run's
    wall time, so that of two runs the shorter ranks first, whatever each counted.

    >>> wall_rate(960, 12.0), wall_rate(960, 8.0)
    (80.0, 120.0)
    """
    return base_samples / run_s


def other_training(shape: Mapping[str, Any], batch: Any, base_shape: Mapping[str, Any], base_batch: Any) -> str | None:
    """Why a whole run (its ``shape``: ``autotune.tuner._watch.shape_of_run``) trained other
    samples than the baseline's, or None where it trained the same, or either did not say.

    The same within a batch an epoch and one more: an epoch's last, partial batch is dropped or
    kept by batch size, and the first batch is not counted (it comes before an optimizer step
    shows the loader trains): 4 epochs of 256 rows count 992 samples at batch 32, 768 at 256.

    >>> other_training({"samples": 768, "epochs": 4}, 256, {"samples": 992, "epochs": 4}, 32) is None
    True
    >>> print(other_training({"samples": 51_200, "steps": 200}, 256, {"samples": 6_400, "steps": 200}, 32))
    its whole run trained 51,200 samples, 8.00x the baseline's 6,400 (200 steps of 256 against 200 of 32): another training, whose wall time is no speedup of the baseline's
    """
    samples, base = shape.get("samples"), base_shape.get("samples")
    if not samples or not base:
        return None
    epochs = max(shape.get("epochs") or 1, base_shape.get("epochs") or 1)
    batches = [b for b in (batch, base_batch) if isinstance(b, int)]
    if abs(samples - base) <= (epochs + 1) * max(batches, default=0):
        return None
    steps = (
        f" ({shape['steps']:,} steps of {batch} against {base_shape['steps']:,} of {base_batch})"
        if shape.get("steps") and base_shape.get("steps")
        else ""
    )
    return (
        f"its whole run trained {samples:,} samples, {samples / base:.2f}x the baseline's {base:,}{steps}: "
        "another training, whose wall time is no speedup of the baseline's"
    )


def loss_cost(ratio: float | None) -> float | None:
    """What a whole run's samples to the baseline's loss, over the baseline's (``ratio``), count
    for in its ranking: only a cost. The production run is the script as given, and it trains all
    its samples whatever loss it passes on the way, so a run on another batch that reaches the
    baseline's loss early ranks on its wall time alone (its whole run, not an early stop the
    script never makes); one that needs more samples than the baseline for it (``ratio`` over 1,
    or a bound: not there by its end) ranks on its wall time for that many, as production must
    train that much longer for the same loss. None where it costs nothing.

    >>> loss_cost(0.75), loss_cost(1.0), loss_cost(None), loss_cost(1.3)
    (None, None, None, 1.3)
    """
    return ratio if ratio is not None and ratio > 1.0 else None


#: The hours of production that compile must pay back within where ``--horizon`` is not given (whole
#: runs then rank on the script's wall time as given: it is the production run).
HORIZON_H = 1.0
#: What ``--horizon`` does (the CLI's help; ``autotune.tune``'s ``horizon`` points here).
HORIZON_HELP = (
    "Hours the winner will train for in production. Without it, the script as given is the production "
    "run and whole runs rank on its wall time; with it, they rank on start-up + compile + the loop's "
    "projected time for HOURS of the baseline's training. compile is not drawn once its measured cost "
    f"would not pay back within them ({HORIZON_H:g} h without it)."
)
#: A whole run that spends over this share of its wall time starting up ranks mostly start-up: fewer
#: DataLoader workers and no compile win there, whatever they do to a longer production run.
STARTUP_SHARE = 0.25


def horizon_rate(metrics: Mapping[str, Any], base_loop: float | None, horizon_h: float) -> float | None:
    """What a whole run ranks on under ``--horizon``: the samples of a production run (the baseline's
    loop samples/s, ``base_loop``, for ``horizon_h`` hours) over this config's projected time for them:
    its start-up, its compile and those samples at its own loop's samples/s. None where a figure is
    missing (a run from before they were recorded: it ranks on its wall time).

    At 100 samples/s the baseline trains 360,000 samples in an hour; a config at 120/s that starts
    in 6 s and compiles in 30 s takes 6 + 30 + 3,000 s for them, against the baseline's 4 + 3,600:
    1.19x, where its short whole run (36 s more of a 60 s run) ranks it slower.

    >>> round(horizon_rate({"samples_per_s": 120.0, "startup_s": 6.0, "compile_s": 30.0}, 100.0, 1.0), 2)
    118.58
    >>> round(3604 / 3036, 2), horizon_rate({"startup_s": 6.0}, 100.0, 1.0)
    (1.19, None)
    """
    loop, startup = metrics.get("samples_per_s"), metrics.get("startup_s")
    if not loop or not base_loop or startup is None:
        return None
    samples = base_loop * horizon_h * 3600
    return samples / (startup + (metrics.get("compile_s") or 0.0) + samples / loop)


def with_production_rate(
    metrics: Mapping[str, Any], base_loop: float | None, horizon_h: float | None
) -> dict[str, Any]:
    """A finished run's ``metrics`` with what it ranks on under ``--horizon``
    (``production_samples_per_s``: ``horizon_rate``) added where it ran whole, so that Optuna's
    sampler learns the figure the study ranks on, not the short run's own samples over its wall
    time (which weighs start-up and compile as the horizon does not). ``base_loop``: the
    baseline's loop samples/s (None: this is the baseline's first run, measured against its own).

    >>> m = {"samples_per_s": 120.0, "startup_s": 6.0, "compile_s": 30.0, "run_s": 60.0}
    >>> round(with_production_rate(m, 100.0, 1.0)["production_samples_per_s"], 2)
    118.58
    >>> "production_samples_per_s" in with_production_rate(m, 100.0, None)
    False
    """
    metrics = dict(metrics)
    if horizon_h is not None and metrics.get("run_s"):
        rate = horizon_rate(metrics, base_loop or metrics.get("samples_per_s"), horizon_h)
        if rate is not None:
            metrics["production_samples_per_s"] = rate
    return metrics


def objective_lines(base_metrics: Mapping[str, Any], horizon_h: float | None) -> list[str]:
    """What a study of whole runs ranks on, in one line, once its baseline (``base_metrics``) ran
    whole; and where no ``--horizon`` is given and start-up is over ``STARTUP_SHARE`` of that run,
    one line that says so.

    >>> objective_lines({"run_s": 16.0, "startup_s": 4.0}, None)[0][:62]
    "objective: your script's whole run as given (the production ru"
    >>> print(objective_lines({"run_s": 16.0, "startup_s": 5.0}, None)[1])
    start-up is 31% of your script's whole run (5.0 s of 16.0 s), so its ranking weighs start-up: if production trains longer, pass --horizon HOURS to rank on start-up + compile + the loop's time for that long
    >>> objective_lines({"run_s": 16.0, "startup_s": 5.0}, 10.0)
    ["objective: a production run of 10 h of the baseline's training (--horizon 10): whole runs rank on start-up + compile + the loop's projected time for it"]
    """
    if horizon_h is not None:
        return [
            f"objective: a production run of {horizon_h:g} h of the baseline's training (--horizon "
            f"{horizon_h:g}): whole runs rank on start-up + compile + the loop's projected time for it"
        ]
    lines = ["objective: your script's whole run as given (the production run): whole runs rank on its wall time"]
    run_s, startup_s = base_metrics.get("run_s"), base_metrics.get("startup_s")
    if run_s and startup_s and startup_s / run_s > STARTUP_SHARE:
        lines.append(
            f"start-up is {startup_s / run_s:.0%} of your script's whole run ({startup_s:.1f} s of "
            f"{run_s:.1f} s), so its ranking weighs start-up: if production trains longer, pass "
            "--horizon HOURS to rank on start-up + compile + the loop's time for that long"
        )
    return lines
