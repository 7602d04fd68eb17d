"""What every benchmark script shares: the machine line, medians with spread, and
writing one Markdown section of ``benchmarks/RESULTS.md``."""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Names the results file when it is not ``benchmarks/RESULTS.md`` (the harness's
#: ``--results``, e.g. ``RESULTS-gpu.md`` on a GPU host); read by every script it runs.
RESULTS_ENV = "AUTOTUNE_BENCH_RESULTS"


def results_path() -> Path:
    """The Markdown file the figures go to."""
    return Path(os.environ.get(RESULTS_ENV) or HERE / "RESULTS.md")


def figure_path(name: str, ext: str = ".png") -> Path:
    """A figure (or raw data) file beside the results, suffixed like it: ``runners-gpu.png``."""
    results = results_path()
    return results.parent / f"{name}{results.stem.removeprefix('RESULTS')}{ext}"


def spread(values: list[float], fmt: str) -> str:
    """Median, with min..max of the repeats."""
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}..{format(max(values), fmt)})"


def machine() -> str:
    """The machine the figures come from, as the study fingerprint names it (with the date),
    plus the host CPU and its vector extensions: two "2-CPU AMD EPYC" VMs of this project
    differed in bf16 on the CPU by a factor of 6 (RESULTS.md, runners)."""
    from autotune._probe import probe

    fp = probe("auto")
    return f"{fp.summary()}; {fp.ram_total_gib} GiB RAM; {host_cpu()}"


def host_cpu() -> str:
    """The CPU model and which of the vector extensions that decide bf16 and fp32 speed it has."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "CPU model unknown"
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    model = fields.get("model name\t", "").strip() or "CPU model unknown"
    flags = set(fields.get("flags\t\t", "").split())
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
    return f"{model} ({', '.join(f for f in wanted if f in flags) or 'none of avx2/avx512'})"


def one_trial(target: str, config: Any, budget: Any, logs: Path, *, device: Any = None, seed: int = 0,
              warm: Any = None, strict: bool = True, reference: Any = None) -> Any:
    """One real trial of ``target`` (``path.py:function``) under ``config``, as a study runs
    it: forked from ``warm`` (an ``autotune._pool.WarmWorker``) or, with None, spawned cold; on
    ``device`` (None: what ``--device auto`` picks); its loss judged against ``reference`` (a
    baseline's ``TrialResult``, as a study judges its trials) if given. Its ``TrialResult`` if
    it completed; otherwise a RuntimeError, or with ``strict=False`` its result all the same and
    a line on stderr saying why."""
    from autotune._probe import probe
    from autotune._runner import TrialSpec, run_trial

    spec = TrialSpec(target, config, device or probe("auto").device, budget, seed=seed)
    judged = {"reference": reference.losses, "reference_curve": reference.curve} if reference else {}
    result = run_trial(spec, logs / f"{Path(target.partition(':')[0]).stem}-{time.time_ns()}.log", warm=warm,
                       **judged)
    if result.outcome.value == "complete":
        return result
    why = f"{Path(target).name} {config.set_values()}: {result.outcome.value}: {result.reason}"
    if strict:
        raise RuntimeError(why)
    print(f"  {why}", file=sys.stderr)
    return result


def write_section(heading: str, body: str) -> None:
    """Replace the section under ``## heading`` in the results file, or append it."""
    results = results_path()
    section = f"## {heading}\n\n{body.strip()}\n"
    text = results.read_text() if results.exists() else "# Benchmark results\n\n"
    pattern = re.compile(rf"## {re.escape(heading)}\n.*?(?=\n## |\Z)", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip() + "\n\n" + section
    results.write_text(text)
