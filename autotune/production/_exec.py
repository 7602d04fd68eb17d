"""``autotune exec EXPORT.yaml train.py -- ARGS``: a script in production with an exported config,
applied from outside its code as it was in the study (``autotune.training._hooks``)."""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from autotune.core._config import ConfigError
from autotune.core._knobs import show_value
from autotune.production._exit_clock import Watcher, boot_seconds_of, watching
from autotune.training._script import SCRIPT_STAGES, ScriptExited, check_script, label, module_of, run_script


def exec_script(
    export: Path,
    target: str,
    argv: Sequence[str],
    device: str = "auto",
    nproc: int = 1,
    adapt: bool = False,
    tracking_uri: str | None = None,
    ram_budget: float | None = None,
) -> object:
    """Run the script in this process with the export applied; return its exit status, as it passed
    it to ``sys.exit`` (an int, a message, None), for the interpreter's normal exit to end on. With
    ``nproc`` over 1, this process becomes torchrun's (``torch.distributed.run --nproc-per-node``),
    each of whose ranks runs it so, on its share of the CPUs.

    Says once, on stderr, what it applies and what it cannot: a knob this machine cannot
    honour (``autotune.load`` warns and drops it); the loop's knobs (amp, prefetch, the model's)
    say where they are held (``autotune.training._outside``).
    With ``adapt``, every loader the script builds adapts as ``autotune.load(path, adapt=True)``'s
    (``tracking_uri``, ``ram_budget``: as there), each rank on its own.

    Raises:
        ConfigError: the export or the script is bad input.
    """
    from autotune.production._export import load
    from autotune.training._hooks import Hooks
    from autotune.training._ranks import check_ranks, local_rank, pin_rank, rank_environ, torchrun

    if not adapt and (tracking_uri or ram_budget):
        raise ConfigError(f"{'--tracking-uri' if tracking_uri else '--ram-budget'}: applies with --adapt only")
    check_script(target)
    ranked = local_rank()
    if nproc > 1 and ranked is None:
        check_ranks(nproc)
        load(export, device, quiet=True)  # (bad input said once, here, not by every rank)
        script = ["-m", module_of(target)] if module_of(target) else [target]
        adapting = (
            ["--adapt"] * adapt
            + ["--tracking-uri", str(tracking_uri)] * bool(tracking_uri)
            + ["--ram-budget", str(ram_budget)] * bool(ram_budget)
        )
        command = torchrun(
            nproc, ["autotune", "exec", str(export), "--device", device, *adapting, *script, "--", *argv]
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, command, rank_environ(os.environ, nproc))
    pin_rank()
    said_by_me = ranked is None or ranked[0] == 0  # (rank 0 says it for all)
    # (exec's own start, torch's import included: see paused_collector; the exit's watcher, a
    # program of its own, is disarmed if the start raises: ``watching``)
    with paused_collector(), watching(said_by_me) as watcher:
        recipe = load(export, device, quiet=True, adapt=adapt, tracking_uri=tracking_uri, ram_budget=ram_budget)
        recipe.stages = SCRIPT_STAGES
        knobs = (
            " ".join(f"{k}={show_value(v)}" for k, v in recipe.config.set_values().items())
            or "nothing (the code as written)"
        )
        if said_by_me:
            running = f"{ranked[1]} ranks, each running" if ranked else "running"
            adapts = recipe._adapting() if recipe.adaptive is not None else ""
            print(
                f"autotune: {running} {label(target, argv)} with {recipe.origin or export}: {knobs}{adapts}",
                file=sys.stderr,
                flush=True,
            )
        ended: list[bool] = []
        if said_by_me:
            # Said once the process has exited (``autotune.production._exit_clock``), else once its own
            # exit handlers ran: registered before it runs, so that its threads are joined and its own
            # atexit handlers run first (atexit runs the last registered first).
            atexit.register(say_wall_time, ended, watcher, export, label(target, argv), device)
        hooks = Hooks(recipe).install()
    try:
        run_script(target, argv)
    except ScriptExited as exc:
        return exc.status  # (a message passed to sys.exit is printed by the interpreter, as under python)
    except Exception as exc:  # the script's own error: its traceback and status 1, as python would give
        # (the hook prints the exception's own __traceback__: it is cut to the script's frames first)
        exc.with_traceback(script_frames(exc.__traceback__, target))
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return 1
    finally:
        hooks.remove()
    ended.append(True)
    return 0


def say_wall_time(ended: list[bool], watcher: Watcher | None, export: Path, what: str, device: str) -> None:
    """At exit, where the script ``ended`` as it should: arm the ``watcher`` with exec's last line,
    or (none) say it now, to the exit handlers."""
    if not ended:
        return
    facts = measured_facts(export, what, device)
    if watcher is not None:
        watcher.arm(*wall_template(facts, "exit"))
    else:
        print(wall_line(facts, process_age(), "exit handlers"), file=sys.stderr, flush=True)


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Python's cyclic garbage collector paused while exec starts (its own imports, the export,
    the machine check's import of torch, the hooks), and on again, as it was, before the script
    runs: the script then collects as under ``python``, its own objects and torch's alike.

    Exec's modules (click, autotune's, PyYAML, then psutil: 12,000 objects before torch's 156,000)
    moved the points where a full collection falls during torch's import: pytorch/examples'
    regression took 3 full collections where ``python`` took 2, and 166-180 ms of collecting
    against python's 76-78 ms, which was most of what exec cost it. Paused, 65-72 ms (the
    objects of the start are collected once, at the script's first collection); a 10-step
    script with a DataLoader and SGD: 370-376 ms against python's 416-420 ms (2026-11-29, this
    2-CPU host, torch 2.13; ``gc.callbacks`` summed over each process).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def script_frames(tb: TracebackType | None, target: str) -> TracebackType | None:
    """The traceback from the script's own first frame on: what ``python train.py`` shows, without
    autotune's and runpy's frames above it (all of it where the script's frame is not found)."""
    module = module_of(target)
    path = None if module is not None else str(Path(target).resolve())
    here = tb
    while here is not None:
        code = here.tb_frame.f_code
        if code.co_filename == path or (
            module is not None and code.co_name == "<module>" and here.tb_frame.f_globals.get("__name__") == "__main__"
        ):
            return here
        here = here.tb_next
    return tb


def measured_facts(export: Path, what: str, device: str) -> dict[str, Any]:
    """What ``wall_line`` compares ``exec``'s run with: where the study measured the script's whole
    run as written on this machine (process start to exit), its wall time and the winner's; else
    why there is nothing to compare with. Read in the script's process, as it ends."""
    facts: dict[str, Any] = {"what": what}
    try:
        from autotune.core._config import read_yaml
        from autotune.machine._probe import probe
        from autotune.production._export import MEASURED_SECTION, differences
        from autotune.training._ranks import job_cpus

        measured = read_yaml(export).get(MEASURED_SECTION) or {}
        base = measured.get("run_s")
        if not isinstance(base, (int, float)) or base <= 0:
            return {**facts, "none": "the study did not run it whole, so it has no whole run to compare with"}
        # (no fused step tried: the facts compared need none, and its AdamW imported torch._dynamo
        # at the exit of a script that builds no torch.optim optimizer, 0.7-1.5 s of CPU, 2026-11-29)
        differs = differences(measured, probe(device, cpus=job_cpus(), try_fused=False))
        if differs:
            return {**facts, "none": f"the study measured it on another machine ({'; '.join(differs)})"}
        return {**facts, "base": base, "winner": measured.get("winner_run_s")}
    except Exception as exc:  # (the line is a report: a problem reading it must not fail the job)
        return {**facts, "none": f"no comparison ({exc})"}


def wall_template(facts: Mapping[str, Any], until: str) -> tuple[str, float | None]:
    """The line ``exec`` ends with, as the exit's watcher fills it (``autotune.production._exit_clock``):
    ``{took}`` for the script's wall time from process start to its ``until`` (its exit, or its
    exit handlers where its exit cannot be watched), ``{ratio}`` for the study's whole run of the
    script as written on this machine (``measured_facts``) over it; and that run's seconds, the
    ratio's numerator (None: no comparison).

    >>> wall_template({"what": "train.py -- --tag {x}", "none": "no comparison"}, "exit")
    ('autotune: ran train.py -- --tag {{x}} in {took:.1f} s (process start to its exit); no comparison', None)
    """
    line = f"autotune: ran {_braced(facts['what'])} in {{took:.1f}} s (process start to its {until})"
    if "none" in facts:
        return f"{line}; {_braced(facts['none'])}", None
    base, winner = facts["base"], facts.get("winner")
    return (
        line
        + f"; as written it ran {base:.1f} s in the study on this machine: {{ratio:.2f}}x"
        + (f" (the study's runs of this config: {winner:.1f} s)" if winner else ""),
        base,
    )


def wall_line(facts: Mapping[str, Any], took: float, until: str) -> str:
    """``wall_template``'s line filled with ``took`` seconds, as the watcher fills it.

    >>> wall_line({"what": "train.py", "base": 12.0, "winner": 9.5}, 10.0, "exit")
    "autotune: ran train.py in 10.0 s (process start to its exit); as written it ran 12.0 s in the study on this machine: 1.20x (the study's runs of this config: 9.5 s)"
    >>> wall_line({"what": "train.py", "none": "no comparison (x)"}, 10.0, "exit handlers")
    'autotune: ran train.py in 10.0 s (process start to its exit handlers); no comparison (x)'
    """
    template, base = wall_template(facts, until)
    # (the watcher, which imports nothing of autotune's, fills it the same way: _exit_clock.WATCHER)
    return template.format(took=took, ratio=base / took if base else 0.0)


def _braced(text: str) -> str:
    return str(text).replace("{", "{{").replace("}", "}}")


def process_age() -> float:
    """Seconds since this process started, to the clock's tick (10 ms): its start in ticks since boot
    (``/proc/self/stat``) against the boot clock. psutil's ``create_time`` adds the boot time, which
    Linux gives in whole seconds, so it could be up to a second off a stopwatch."""
    import time

    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME) - boot_seconds_of(os.getpid())
    except (OSError, ValueError, IndexError, AttributeError):  # (not Linux)
        import psutil

        return time.time() - psutil.Process().create_time()
