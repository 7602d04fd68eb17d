"""How a whole run ranks (short code that every trial runs to its end): on its wall time, what the
user waits for, and only against the same training as the baseline's.

A run's samples per second of its wall time is no figure to rank on where runs train different
samples: a script that stops after a number of steps trains 8x the samples at 8x the batch, and
ranked as faster while its run took longer. The baseline's samples over a run's wall time
(``wall_rate``) ranks every run of the same training on its wall time alone, in the units of
every other figure; a run that trained other samples is another training (``other_training``).
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
    steps = (f" ({shape['steps']:,} steps of {batch} against {base_shape['steps']:,} of {base_batch})"
             if shape.get("steps") and base_shape.get("steps") else "")
    return (f"its whole run trained {samples:,} samples, {samples / base:.2f}x the baseline's {base:,}{steps}: "
            "another training, whose wall time is no speedup of the baseline's")
