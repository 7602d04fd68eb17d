"""The order the suite runs in: the long test files dealt out to the pytest-xdist processes.

pytest-xdist's ``worksteal`` gives each of its N processes one contiguous 1/N of the collected
tests, which each runs from the front, and an idle process steals from the back of the longest
queue. With every whole study at the front of the order, one process held them all and ran its
longest files last: the suite ended on them (a Lightning study and two DDP ones started 320 s into
a 387 s run, four processes on the 2-core CI machine). ``deal`` puts the long files at the fronts
of the N shares, balanced by their seconds, and the short tests behind them, where stealing evens
out the ends.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Run order by folder: whole studies first, then real processes, then the rules.
ORDER = ("study", "process", "unit")
#: The longest test files as groups that one process runs, with their seconds in a full run on the
#: 2-core CI machine (pytest -n 3, the sum of each file's setup, call and teardown; 2026-11-28):
#: their share of a loaded suite, which is what balancing the processes needs. The files that use
#: the session's MLflow server share a process: each process that runs one starts a server of its
#: own (about 6 s of CPU).
LONG: tuple[tuple[tuple[str, ...], float], ...] = (
    (("test_many_tuners", "test_tuners_retry", "test_servers"), 117),
    (("test_outages",), 88),
    (("test_frameworks",), 83),
    (("test_watch",), 82),
    (("test_corpus",), 80),
    (("test_do_no_harm",), 60),
    (("test_ddp",), 74),
    (("test_e2e",), 64),
    (("test_margin",), 59),
    (("test_adapt",), 58),
    (("test_resume",), 57),
    (("test_warm",), 44),
    (("test_script_study",), 36),
    (("test_safety",), 29),
    (("test_noisy_study",), 26),
    (("test_worker_studies",), 25),
    (("test_live_view",), 100),  # (4 studies under a pty: 100-160 s alone on the loaded 2-core host)
    (("test_gan_study", "test_broke_study"), 60),  # (a study and an exec: 105 s alone beside a CI run)
    (("test_precision_study",), 18),
    (("test_recorder",), 17),
    (("test_stream_study",), 13),
)


def shares(total: int, workers: int) -> list[int]:
    """The sizes of the contiguous shares pytest-xdist's worksteal hands ``workers`` idle processes."""
    sizes = []
    for i in range(workers):
        size = total // (workers - i)
        sizes.append(size)
        total -= size
    return sizes


def deal(
    files: Sequence[str], folders: Sequence[str], workers: int, long: Sequence[tuple[tuple[str, ...], float]] = LONG
) -> list[int]:
    """The run order, as indices into the collected tests (``files``: each test's file stem;
    ``folders``: its folder). One process (``workers`` < 2): folder by folder (``ORDER``), the long
    files first. Several: each long group goes whole to the share with the fewest seconds so far,
    at its front, longest first; the other tests fill the shares in folder order."""

    def folder_rank(i: int) -> int:
        return ORDER.index(folders[i]) if folders[i] in ORDER else len(ORDER)

    group_of = {name: g for g, (names, _) in enumerate(long) for name in names}
    if workers < 2:
        return sorted(range(len(files)), key=lambda i: (folder_rank(i), group_of.get(files[i], len(long))))
    rest = sorted((i for i in range(len(files)) if files[i] not in group_of), key=folder_rank)
    grouped = [[i for i in range(len(files)) if group_of.get(files[i]) == g] for g in range(len(long))]
    fronts: list[list[int]] = [[] for _ in range(workers)]
    seconds = [0.0] * workers
    for g in sorted(range(len(long)), key=lambda g: -long[g][1]):
        if not grouped[g]:
            continue
        w = min(range(workers), key=lambda w: seconds[w])
        fronts[w] += grouped[g]
        seconds[w] += long[g][1]
    order: list[int] = []
    for front, size in zip(fronts, shares(len(files), workers)):
        fill = max(0, size - len(front))
        order += front + rest[:fill]
        rest = rest[fill:]
    return order + rest
