"""What the hooks of an unmodified script cost: ``python SCRIPT`` against ``autotune exec EXPORT
SCRIPT`` (the production hooks: the loader and optimizer built with the export's values), in
turns, on ``_timed_loop.py``, which times its own steps. The goal: within 2%.

Writes the section ``Script hooks`` of ``results/scripts.md`` and ``data/scripts/hooks.json``.

    python benchmarks/script_hooks.py --turns 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _results import ROOT, data_path, machine, spread, write_section

TOPIC = "scripts"
SCRIPT = ROOT / "benchmarks" / "_timed_loop.py"
#: The script's own values, set explicitly: the hooks apply each (a knob left unset is not touched).
EXPORT = "dataloader: {batch_size: 64, num_workers: 0}\noptimizer: {lr_scaling: none, fused_optimizer: false}\n"


def rate(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_DISABLE_TELEMETRY": "true"}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    return float(next(line for line in out.splitlines() if line.startswith("rate ")).split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=8, help="runs of each, in turns")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        export = Path(folder) / "plain.yaml"
        export.write_text(EXPORT)
        plain, hooked = [], []
        for _ in range(args.turns):
            plain.append(rate([sys.executable, str(SCRIPT)]))
            hooked.append(rate([sys.executable, "-m", "autotune", "exec", str(export), str(SCRIPT)]))
    ratios = [h / p for h, p in zip(hooked, plain)]
    data_path(TOPIC, "hooks", ".json").write_text(
        json.dumps({"machine": machine(), "plain": plain, "exec": hooked}, indent=1)
    )
    body = "\n".join(
        [
            f"Machine: {machine()}.",
            "",
            f"`benchmarks/_timed_loop.py` (an MLP on in-memory tensors, batch 64, Adam; 3,000 timed steps), "
            f"{args.turns} turns of `python SCRIPT` then `autotune exec EXPORT SCRIPT`; samples/s, median (min..max).",
            "",
            "| run | samples/s |",
            "|---|---|",
            f"| plain | {spread(plain, ',.0f')} |",
            f"| `autotune exec` | {spread(hooked, ',.0f')} |",
            "",
            f"exec / plain, turn by turn: {spread([100 * r for r in ratios], '.1f')}% "
            f"(median of the runs: {100 * statistics.median(hooked) / statistics.median(plain):.1f}%).",
        ]
    )
    print(body)
    write_section(TOPIC, "Script hooks", body)


if __name__ == "__main__":
    main()
