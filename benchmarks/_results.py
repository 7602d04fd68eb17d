"""What every benchmark script shares: the machine line, medians with spread, and
writing one Markdown section of a topic's page, ``benchmarks/results/<topic>.md``, with its
raw figures and plots in ``benchmarks/data/<topic>/``."""

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
#: One results page per topic: ``results/<topic>.md``.
PAGES = HERE / "results"
#: Each topic's raw figures (JSON) and plots (PNG): ``data/<topic>/``.
DATA = HERE / "data"
#: Names one page that every topic's figures go to instead of their own (the harness's
#: ``--results``, e.g. ``results/gpu.md`` on a GPU host); read by every script it runs.
RESULTS_ENV = "AUTOTUNE_BENCH_RESULTS"


def results_path(topic: str) -> Path:
    """The page a topic's figures go to: ``results/<topic>.md``, or the one page named by
    ``AUTOTUNE_BENCH_RESULTS``."""
    named = os.environ.get(RESULTS_ENV)
    return Path(named) if named else PAGES / f"{topic}.md"


def data_path(topic: str, name: str, ext: str = ".png") -> Path:
    """A raw-figures or plot file of a topic: ``data/<topic>/<name><ext>``. With one page named
    by ``AUTOTUNE_BENCH_RESULTS``, in the folder of that page's name and suffixed with it
    (``results/gpu.md``: ``data/gpu/runners-gpu.png``). The folder is made."""
    named = os.environ.get(RESULTS_ENV)
    stem = Path(named).stem if named else None
    folder = DATA / (stem or topic)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}{'-' + stem if stem else ''}{ext}"


def link(topic: str, path: Path) -> str:
    """``path`` as the page of ``topic`` links to it (relative, with forward slashes)."""
    return Path(os.path.relpath(path, results_path(topic).resolve().parent)).as_posix()


def spread(values: list[float], fmt: str) -> str:
    """Median, with min..max of the repeats."""
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}..{format(max(values), fmt)})"


def machine() -> str:
    """The machine the figures come from, as the study fingerprint names it (with the date),
    plus the host CPU and its vector extensions: two "2-CPU AMD EPYC" VMs of this project
    differed in bf16 on the CPU by a factor of 6 (results/reach.md, the jpeg runs on each host)."""
    from autotune.machine._probe import probe

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


def one_trial(
    target: str,
    config: Any,
    budget: Any,
    logs: Path,
    *,
    device: Any = None,
    seed: int = 0,
    warm: Any = None,
    strict: bool = True,
    reference: Any = None,
) -> Any:
    """One real trial of ``target`` (``path.py:function``) under ``config``, as a study runs
    it: forked from ``warm`` (an ``autotune.worker._warm.WarmWorker``) or, with None, spawned cold; on
    ``device`` (None: what ``--device auto`` picks); its loss judged against ``reference`` (a
    baseline's ``TrialResult``, as a study judges its trials) if given. Its ``TrialResult`` if
    it completed; otherwise a RuntimeError, or with ``strict=False`` its result all the same and
    a line on stderr saying why."""
    from autotune.core._guard import LossReference
    from autotune.machine._launch import TrialSpec
    from autotune.machine._probe import probe
    from autotune.tuner._watch import run_trial

    spec = TrialSpec(target, config, device or probe("auto").device, budget, seed=seed)
    judged = {"against": LossReference(reference.losses, reference.curve)} if reference else {}
    result = run_trial(spec, logs / f"{Path(target.partition(':')[0]).stem}-{time.time_ns()}.log", warm=warm, **judged)
    if result.outcome.value == "complete":
        return result
    why = f"{Path(target).name} {config.set_values()}: {result.outcome.value}: {result.reason}"
    if strict:
        raise RuntimeError(why)
    print(f"  {why}", file=sys.stderr)
    return result


def write_section(topic: str, heading: str, body: str) -> None:
    """Replace the section under ``## heading`` on the topic's page, or append it (the page's
    history runs oldest first, so a new run lands at its end)."""
    results = results_path(topic)
    section = f"## {heading}\n\n{body.strip()}\n"
    text = results.read_text() if results.exists() else f"# {heading}\n\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.DOTALL | re.MULTILINE)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(text)


def read_section(topic: str, heading: str) -> str | None:
    """The body of the last section on the topic's page headed ``## heading``, or headed
    ``## heading (DATE...)`` as the page's history keeps older runs; None if there is none."""
    results = results_path(topic)
    if not results.exists():
        return None
    found = re.findall(
        rf"^## {re.escape(heading)}(?: \([^\n]*\))?\n(.*?)(?=^## |\Z)", results.read_text(), re.DOTALL | re.MULTILINE
    )
    return found[-1] if found else None
