"""The memory margin of an adaptive recipe (``autotune.load(path, adapt=True)``): a job whose
items grow 256x mid-run (tests/fixtures/growing_train.py: 1,280 items a epoch, batch 16, items
of 4 KiB, 1 MiB from 1 s on, 2 epochs, a 30 ms step) with the export ``num_workers: 6,
prefetch_factor: 8``, in a memory cgroup of 1 GiB (the kernel kills at its limit, as a
container's would). Per repeat, interleaved: the fixed export in the cgroup (killed? when?),
the adaptive one in it (finished? its peak, its wall time), and the fixed export without a
limit (its peak and wall time: what the steps cost).

Writes the section ``Memory margin (DATE)`` of ``results/production.md`` and
``data/production/margin.json``. Needs the right to make a memory cgroup (root, cgroup v1 or a
delegated v2).

    python benchmarks/margin.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _results import ROOT, data_path, machine, spread, write_section

sys.path.insert(0, str(ROOT / "tests" / "process"))
sys.path.insert(0, str(ROOT / "tests" / "lib"))
TOPIC = "production"
#: A limit far past anything the job holds: the fixed export's own peak, read by its cgroup.
NO_LIMIT = 64 << 30


def peak(group: Path) -> int:
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        if (group / name).exists():
            return int((group / name).read_text())
    return 0


def once(export: Path, limit: int, *args: str) -> dict:
    import test_margin

    test_margin.LIMIT = limit
    group = test_margin._new_cgroup()
    if group is None:
        sys.exit("no memory cgroup can be made here (needs root, cgroup v1 or a delegated v2)")
    began = time.perf_counter()
    try:
        done = test_margin.job(str(export), *args, group=group)
        wall = time.perf_counter() - began
        out = {
            "rc": done.returncode,
            "wall_s": wall,
            "peak_mib": peak(group) / 2**20,
            "killed": done.returncode != 0 and test_margin._hits(group) > 0,
        }
    finally:
        test_margin.remove(group)
    if done.returncode == 0:
        out["moves"] = json.loads(done.stdout.strip().splitlines()[-1])["moves"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from test_margin import EXPORT, LIMIT

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "best.yaml"
        export.write_text(EXPORT)
        for _ in range(args.repeats):
            row = {
                "fixed": once(export, LIMIT),
                "adaptive": once(export, LIMIT, "--adapt"),
                "unlimited": once(export, NO_LIMIT),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    raw = data_path(TOPIC, "margin", ".json")
    raw.write_text(json.dumps({"machine": machine(), "limit": LIMIT, "rows": rows}, indent=1))
    killed = sum(r["fixed"]["killed"] for r in rows)
    finished = [r["adaptive"] for r in rows if r["adaptive"]["rc"] == 0]
    cost = [r["adaptive"]["wall_s"] / r["unlimited"]["wall_s"] for r in rows if r["adaptive"]["rc"] == 0]
    body = (
        f"Machine: {machine()}.\n\nCommand: `python benchmarks/margin.py --repeats {args.repeats}`; raw figures "
        f"`{raw.relative_to(ROOT / 'benchmarks')}`. The job: tests/fixtures/growing_train.py (1,280 items an "
        "epoch, batch 16, items 4 KiB then 1 MiB from 1 s on, 2 epochs, a 30 ms step), the export "
        f"`{EXPORT.strip()}`, in a memory cgroup of {LIMIT / 2**30:.2f} GiB; repeats interleaved.\n\n"
        f"- **The fixed export**: killed by the kernel in {killed} of {len(rows)} runs, after "
        f"{spread([r['fixed']['wall_s'] for r in rows], '.1f')} s; without a limit it peaks at "
        f"{spread([r['unlimited']['peak_mib'] for r in rows], ',.0f')} MiB.\n"
        f"- **With `adapt=True`**: finished in {len(finished)} of {len(rows)} runs, peaking at "
        f"{spread([r['peak_mib'] for r in finished], ',.0f') if finished else '-'} MiB of the "
        f"{LIMIT / 2**20:,.0f}; its wall time {spread(cost, '.2f') if cost else '-'}x that of the fixed export "
        f"without a limit (what stepping down cost). The steps of the last run: "
        f"{'; '.join(finished[-1]['moves']) if finished else 'none'}.\n"
    )
    write_section(TOPIC, f"Memory margin ({time.strftime('%Y-%m-%d')})", body)
    print(body)


if __name__ == "__main__":
    main()
