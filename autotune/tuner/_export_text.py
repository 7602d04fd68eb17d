"""The export: the winning config as the YAML ``autotune.load`` and ``autotune exec`` read, with a
header of what the study found (``findings``), the winner's memory and how to use it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.tuner._standing import Standing, findings

if TYPE_CHECKING:
    import optuna


def export_text(study: optuna.Study, standing: Standing) -> str:
    """The winning config as the YAML snippet ``autotune.load`` reads."""
    from autotune.production._export import MEASURED_ON, render
    from autotune.training._frameworks import own_settings

    best, win = standing.best, standing.decision.winner
    assert best is not None and win is not None  # (every caller exports a study with a winner)
    fingerprint = study.user_attrs.get("fingerprint", {})
    first, *rest = findings(standing)
    # A config tuned on a --jobs slot is tuned for that share of the host.
    share = f"; each trial on {best.slot['share']} (--jobs)" if best.slot.get("cpus") else ""
    memory = winner_memory(standing)
    held = (
        [
            "memory: the winner's highest "
            + ", ".join(f"{value} GiB {MEMORY_WORDS[key]}" for key, value in memory.items())
        ]
        if memory
        else []
    )
    header = [
        f"autotune: study {study.study_name}, {first}",
        *rest,
        *held,
        f"measured on: {fingerprint.get('summary', 'unknown machine')}{share}",
        _how_to_use(study.user_attrs.get("target", ""), study.user_attrs.get("script")),
    ]
    base = standing.base.first if standing.base else None
    own = own_settings(best.dataset.get("framework"), best.config, base.config if base else {})
    if own:  # a Lightning or Trainer script: the same, in the framework's own settings
        header.append(f"or {own}")
    machine = {key: fingerprint[key] for key in MEASURED_ON if fingerprint.get(key) is not None}
    if best.slot.get("cpus"):
        machine["cpus"] = len(best.slot["cpus"])
    machine.update(memory)
    if standing.base is not None and standing.base.run_s and win.run_s:  # for `autotune exec`'s line
        machine.update(run_s=round(standing.base.run_s, 2), winner_run_s=round(win.run_s, 2))
    return render(
        best.config, best.base_batch_size, header, machine, f"study {study.study_name}: {first.split(' (')[0]}"
    )


#: What an export's memory figures (``winner_memory``) are, in its header.
MEMORY_WORDS = {
    "ram_peak_gib": "host RAM (its process tree: PSS, and batches in shared memory no process maps)",
    "gpu_mem_peak_gib": "GPU memory",
}


def winner_memory(standing: Standing) -> dict[str, float]:
    """The winner's highest host RAM (``autotune.machine._proctree.tree_memory``) and GPU memory over its believed
    runs, in GiB: what ``autotune.load(path, adapt=True)`` holds against its RAM budget."""
    win = standing.decision.winner
    runs = [r for r in win.runs if r.reliable] if win else []
    out = {}
    for key, metric in (("ram_peak_gib", "ram_peak"), ("gpu_mem_peak_gib", "gpu_mem_peak")):
        values = [r.metrics[metric] for r in runs if r.metrics.get(metric)]
        if values:
            out[key] = round(max(values) / 2**30, 2)
    return out


def _how_to_use(target: str, script: bool | None) -> str:
    """The export header's last line: how production applies it, for a script or a function
    (``script`` None: a study from before it was recorded, read from the target's form)."""
    from autotune.training._script import is_script

    if script is None:
        script = bool(target) and is_script(target.split(" -- ")[0])
    return f"run with: autotune exec path {target}" if script else "load with: autotune.load(path)"
