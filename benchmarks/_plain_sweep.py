"""The plain side of ``sweep.py``: the plain loop's settings (a grid point, or a study's export
in the plain loop's terms), one measure of it in a process of its own (``_io_loop.py``), and the
sweep of a grid. Imports no torch and no autotune module until an export is read.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

LOOP = Path(__file__).resolve().parent / "_io_loop.py"
#: io_train.py's batch and lr as written (``_io_loop.CODE_BATCH``, ``CODE_LR``; kept here too so
#: that this module imports no torch).
CODE_BATCH, CODE_LR = 16, 0.1
#: The export's keys the plain loop takes as they are, beside the DataLoader's.
LOOP_KNOBS = {"prefetch", "amp", "fused_optimizer", "malloc_retain", "lr_scaling"}


def env() -> dict[str, str]:
    return {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0))


def scaled_lr(batch: int, rule: str = "linear", base: int = CODE_BATCH) -> float:
    """The code's lr (written for batch ``base``) at ``batch`` by ``rule`` (the study's
    ``lr_scaling``); the plain loop's speed does not depend on it, its training does."""
    ratio = batch / base
    return CODE_LR * {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}[rule]


def point(batch: int, workers: int, prefetch_factor: int) -> dict[str, Any]:
    """One grid point: the plain loop's settings (persistent workers, linear lr)."""
    return {
        "loader": {
            "batch_size": batch,
            "num_workers": workers,
            "persistent_workers": True,
            "prefetch_factor": prefetch_factor,
        },
        "lr": scaled_lr(batch),
    }


def grid(batches: list[int], workers: list[int], factors: list[int]) -> list[dict[str, Any]]:
    return [point(b, w, f) for b, w, f in itertools.product(batches, workers, factors)]


def workers(n: int) -> str:
    return f"{n} worker" + ("" if n == 1 else "s")


def label(settings: dict[str, Any]) -> str:
    """A plain loop's settings in a few words."""
    loader = settings["loader"]
    words = [f"batch {loader['batch_size']}", workers(loader.get("num_workers", 0))]
    if loader.get("num_workers"):
        words += [
            "persistent" if loader.get("persistent_workers") else "not persistent",
            f"prefetch_factor {loader.get('prefetch_factor', 2)}",
        ]
        if loader.get("in_order") is False:
            words.append("in_order=False")
    if loader.get("pin_memory"):
        words.append("pin_memory")
    extras = settings.get("extras", {})
    words += [f"{k}={v}" for k, v in extras.items()]
    return ", ".join(words)


def plain_terms(export: dict[str, Any]) -> dict[str, Any]:
    """The study's export (parsed YAML) as the plain loop's settings: the DataLoader's kwargs,
    the lr its scaling gives, the loop's other settings, and the knobs the plain loop cannot take
    (``untranslated``: set away from PyTorch's default), which the page names."""
    from autotune.core._knobs import KNOBS

    values = {key: value for section, body in export.items() if section != "measured_on" for key, value in body.items()}
    base = values.pop("base_batch_size", CODE_BATCH)
    loader, extras, untranslated = {}, {}, []
    for key, value in values.items():
        knob = KNOBS[key]
        if knob.dataloader_kwarg:
            loader[knob.dataloader_kwarg] = value
        elif key in LOOP_KNOBS:
            if value != knob.default and key != "lr_scaling":
                extras[key] = value
        elif value != knob.default:
            untranslated.append(f"{key}={value}")
    batch = loader.setdefault("batch_size", base)
    rule = values.get("lr_scaling", "none")
    return {"loader": loader, "lr": scaled_lr(batch, rule, base), "extras": extras, "untranslated": untranslated}


def winner_of(export: str | None) -> dict[str, Any]:
    """The plain loop's settings of a study's export (its YAML text); with none (no figure the
    study believed), the code as written, which is what its user keeps."""
    if not export:
        return {
            "loader": {"batch_size": CODE_BATCH},
            "lr": CODE_LR,
            "extras": {},
            "untranslated": [],
            "no_export": True,
        }
    import yaml

    return plain_terms(yaml.safe_load(export))


def loop_argv(settings: dict[str, Any], samples: int, warmup: int) -> list[str]:
    extras = settings.get("extras", {})
    argv = [
        sys.executable,
        str(LOOP),
        "--loader",
        json.dumps(settings["loader"]),
        "--lr",
        repr(settings["lr"]),
        "--samples",
        str(samples),
        "--warmup-samples",
        str(warmup),
    ]
    if extras.get("amp", "off") != "off":
        argv += ["--amp", extras["amp"]]
    if extras.get("fused_optimizer"):
        argv.append("--fused")
    if extras.get("prefetch", "none") != "none":
        argv += ["--prefetch", extras["prefetch"]]
    if extras.get("malloc_retain"):
        argv.append("--malloc-retain")
    return argv


def measure(settings: dict[str, Any], samples: int, warmup: int) -> dict[str, Any]:
    """One run of the plain loop in a process of its own: its figures, the 1-minute load average
    before it, and the share of the CPUs other processes used while it ran (``_host_load``)."""
    from _host_load import timed

    argv = loop_argv(settings, samples, warmup)
    done, before, foreign = timed(lambda: subprocess.run(argv, check=False, capture_output=True, text=True, env=env()))
    if done.returncode:
        raise RuntimeError(f"{label(settings)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load_before": before, "foreign": foreign}


def sweep(points: list[dict[str, Any]], repeats: int, samples: int, warmup: int, seed: int = 0) -> list[dict[str, Any]]:
    """Every point ``repeats`` times; each round the points in a new random order."""
    runs: list[list[dict[str, Any]]] = [[] for _ in points]
    order = random.Random(seed)
    for round_ in range(repeats):
        for i in order.sample(range(len(points)), len(points)):
            runs[i].append(measure(points[i], samples, warmup))
            print(
                f"sweep round {round_ + 1}: {label(points[i])}: {runs[i][-1]['samples_per_s']:,.0f} samples/s",
                file=sys.stderr,
                flush=True,
            )
    return [{**p, "runs": r} for p, r in zip(points, runs)]


def best_point(swept: list[dict[str, Any]]) -> dict[str, Any]:
    """The point with the best median samples/s."""
    return max(swept, key=lambda p: statistics.median(r["samples_per_s"] for r in p["runs"]))
