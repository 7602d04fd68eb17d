"""The manual: pages without dates or hosts, a glossary of the output's words, example blocks that
are copies of a real run's output (docs/tools/examples.py), and the pictures the pages show."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def _examples_module():
    spec = importlib.util.spec_from_file_location("docs_examples", ROOT / "docs" / "tools" / "examples.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


examples = _examples_module()

# A date, a CPU or GPU model (a host's name for itself here), or a commit: figures that carry
# them belong in benchmarks/results/, which the pages link to.
_DATED = [
    ("a date", re.compile(r"\b20\d\d-\d\d-\d\d\b")),
    ("a machine", re.compile(r"\b(EPYC|Xeon|Ryzen|[AH]100|H200|L4|T4|V100)\b")),
    ("a commit", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")),
]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_page_carries_no_date_machine_or_commit(page: Path) -> None:
    text = page.read_text()
    found = [(what, m.group(0)) for what, rx in _DATED for m in rx.finditer(text)]
    assert found == [], f"{page.relative_to(ROOT)}: move these to benchmarks/results/: {found}"


@pytest.mark.parametrize(
    "text, hit",
    [
        ("on 2026-11-29 it found", "a date"),
        ("a 2-CPU AMD EPYC", "a machine"),
        ("on one H200", "a machine"),
        ("the tree at e5a608e", "a commit"),
        ("10,535 samples/s on 4 workers, batch 128", None),
    ],
)
def test_the_page_check_finds_what_it_looks_for(text: str, hit: str | None) -> None:
    found = [what for what, rx in _DATED if rx.search(text)]
    assert found == ([hit] if hit else [])


def test_the_glossary_defines_the_words_the_output_uses() -> None:
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    defined = {m.group(1).lower() for m in re.finditer(r"^\*\*([^*]+)\*\*", glossary, re.MULTILINE)}
    words = [
        "baseline",
        "trial",
        "window",
        "marks",
        "whole run",
        "ceiling",
        "bottleneck",
        "held",
        "noisy",
        "confirmation",
        "export",
        "warmup",
        "speedup",
        "spread",
        "data wait",
        "others",
        "pruned",
        "diverged",
        "outcome",
        "kind",
        "config",
        "knob",
        "study",
        "store folder",
    ]
    assert [w for w in words if w not in defined] == []


def test_every_example_block_is_a_copy_of_its_generated_file() -> None:
    files = examples.load_examples()
    seen = set()
    for page in PAGES:
        for name, body in examples.blocks(page.read_text()).items():
            assert name in files, f"{page.name}: <!-- example: {name} --> has no docs/examples/{name}.txt"
            assert body == examples.fence(name, files[name]), (
                f"{page.name}: the block {name} differs from docs/examples/{name}.txt: "
                "run `.venv/bin/python docs/tools/examples.py --from STORE` (or without --from), never edit it"
            )
            seen.add(name)
    assert {"quickstart-end", "show", "exec-end", "export.yaml"} <= seen


def test_rewrite_replaces_the_marked_block_and_refuses_an_unknown_name() -> None:
    page = "intro\n<!-- example: end -->\n```text\nold\n```\n<!-- /example -->\nafter\n"
    assert examples.rewrite(page, {"end": "best: trial 3\n"}) == (
        "intro\n<!-- example: end -->\n```text\nbest: trial 3\n```\n<!-- /example -->\nafter\n"
    )
    with pytest.raises(KeyError, match="example: end .*known: \\['other'\\]"):
        examples.rewrite(page, {"other": "x"})


def test_scrub_leaves_no_date_pid_or_temporary_path(tmp_path: Path) -> None:
    store = tmp_path / "store"
    raw = (
        f"study s on CPU (Linux x86_64), 2 CPUs, torch 2.13.0+cpu, 2026-11-29; space {examples.ROOT}/x.yaml\n"
        "1 other tuner(s) run on this host (pid 8567: study io on all 2 CPUs)\n"
        f"exported: {store}/exports/s.yaml   \n"
    )
    assert examples.scrub(raw, store) == (
        "study s on CPU (Linux x86_64), 2 CPUs, torch 2.13.0+cpu, <date>; space x.yaml\n"
        "exported: mlflow/exports/s.yaml\n"
    )


def test_summary_starts_at_the_winner_line_else_takes_the_last_lines() -> None:
    out = "trial 0\ntrial 1\nbest: trial 1, 1.2x\nexported: x.yaml\n"
    assert examples.summary(out) == "best: trial 1, 1.2x\nexported: x.yaml\n"
    assert examples.summary("a\nb\nc\n", most=2) == "b\nc\n"


def test_the_pictures_the_pages_show_exist() -> None:
    for page in PAGES:
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text()):
            assert (page.parent / target).is_file(), f"{page.name}: {target} is missing"
