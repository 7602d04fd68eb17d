"""The suite's own run order (tests/lib/order.py): every test once, the long files at the fronts of the shares."""

from __future__ import annotations

from order import deal, shares

LONG = ((("a", "a2"), 50.0), (("b",), 40.0), (("c",), 30.0), (("d",), 5.0))


def suite() -> tuple[list[str], list[str]]:
    files = ["u1"] * 6 + ["a"] * 3 + ["p1"] * 4 + ["b"] * 2 + ["a2"] * 1 + ["s1"] * 3 + ["c"] * 2 + ["d"] * 2
    folders = {
        "u1": "unit",
        "p1": "process",
        "s1": "study",
        "a": "study",
        "a2": "process",
        "b": "study",
        "c": "process",
        "d": "study",
    }
    return files, [folders[f] for f in files]


def test_shares_are_the_contiguous_sizes_worksteal_hands_out() -> None:
    assert shares(10, 3) == [3, 3, 4] and shares(968, 4) == [242] * 4 and sum(shares(7, 2)) == 7


def test_each_test_runs_once_whatever_the_number_of_processes() -> None:
    files, folders = suite()
    for workers in (1, 2, 3, 4, 8, 40):
        order = deal(files, folders, workers, LONG)
        assert sorted(order) == list(range(len(files))), workers


def test_one_process_runs_folder_by_folder_long_files_first() -> None:
    files, folders = suite()
    ran = [files[i] for i in deal(files, folders, 1, LONG)]
    assert ran == ["a"] * 3 + ["b"] * 2 + ["d"] * 2 + ["s1"] * 3 + ["a2", "c", "c"] + ["p1"] * 4 + ["u1"] * 6


def test_the_long_groups_lead_the_shares_balanced_by_their_seconds() -> None:
    files, folders = suite()
    order = deal(files, folders, 2, LONG)
    ran = [files[i] for i in order]
    size = shares(len(files), 2)[0]
    first, second = ran[:size], ran[size:]
    # a and a2 (50 s, kept together) to one share, b (40 s) to the other, c (30 s) to the lighter
    # second one, then d (5 s) to the first
    assert first[:6] == ["a", "a", "a", "a2", "d", "d"]
    assert second[:4] == ["b", "b", "c", "c"]
    # the rest behind them in folder order: studies, then processes, then the rules at the back
    rest = [f for f in ran if f in ("s1", "p1", "u1")]
    assert rest == ["s1"] * 3 + ["p1"] * 4 + ["u1"] * 6
    assert ran[-1] == "u1"
