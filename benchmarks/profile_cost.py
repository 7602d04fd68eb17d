"""What the profile runs cost a study (``--profile on``, the default): the quickstart's study
(``runners/mnist_script.py``, an unmodified script) run ``--runs`` times, each in a new store;
per run the profile runs' wall seconds (their sum, as the study records them) against the
tuner's whole wall time, median (min..max). Writes the section ``Profile runs' cost`` of
``results/profile.md`` and ``data/profile/cost.json``.

    python benchmarks/profile_cost.py --runs 3 --trials 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, data_path, machine, spread, write_section

TOPIC = "profile"


def one_study(trials: int) -> dict:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        began = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "autotune",
                "run",
                str(ROOT / "runners" / "mnist_script.py"),
                "--trials",
                str(trials),
                "--confirm",
                "1",
                "-q",
            ],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        wall = time.monotonic() - began
        if done.returncode != 0:
            raise SystemExit(f"the study failed:\n{done.stderr[-3000:]}")
        storage = optuna.storages.JournalStorage(JournalFileBackend(str(Path(tmp) / "mlflow" / "optuna.journal")))
        kept = optuna.load_study(study_name="mnist_script", storage=storage).user_attrs.get("profile", {})
    spent = sum(role["seconds"] for role in kept.values())
    return {
        "wall_s": wall,
        "profile_s": spent,
        "share": spent / wall,
        "roles": sorted(kept),
        "steps_ms": {role: found["parts"]["step"] * 1e3 for role, found in kept.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trials", type=int, default=4)
    args = parser.parse_args()
    runs = [one_study(args.trials) for _ in range(args.runs)]
    for run in runs:
        print(json.dumps(run))
    raw = data_path(TOPIC, "cost", ".json")
    raw.write_text(json.dumps({"machine": machine(), "trials": args.trials, "runs": runs}, indent=1))
    shares = [100 * r["share"] for r in runs]
    body = (
        f"Machine: {machine()}.\n\n"
        f"`python benchmarks/profile_cost.py --runs {args.runs} --trials {args.trials}`: the quickstart's study "
        f"(`runners/mnist_script.py`, {args.trials} trials, `--confirm 1`), {args.runs} runs.\n\n"
        f"- the profile runs took {spread([r['profile_s'] for r in runs], '.1f')} s of studies of "
        f"{spread([r['wall_s'] for r in runs], '.0f')} s: **{spread(shares, '.1f')}%** of the study's time "
        "(goal: under 5%)\n"
        f"- profiled: {', '.join(sorted({role for r in runs for role in r['roles']}))} (the winner only where "
        "one beat the baseline)\n\n"
        f"Raw figures: `{raw.relative_to(ROOT)}`."
    )
    write_section(TOPIC, f"Profile runs' cost ({time.strftime('%Y-%m-%d')})", body)


if __name__ == "__main__":
    main()
