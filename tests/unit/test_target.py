"""The training function checked from its source before any trial spawns (autotune.training._target)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autotune import ConfigError
from autotune.core._config import read_yaml
from autotune.training._target import check_target

LOOP = """
    for x, y in run.batches(loader):
        run.step(model(x).sum(), opt)
"""


def target(tmp_path: Path, source: str, name: str = "train") -> str:
    path = tmp_path / "user_train.py"
    path.write_text(textwrap.dedent(source))
    return f"{path}:{name}"


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (
            "def train():\n    pass\n",
            "train() (",
        ),
        ("class Net:\n    pass\n", "Net is a class"),
        (
            "def train(run, epochs):\n    pass\n",
            "needs 2 arguments; autotune passes one, the Run: give epochs a default",
        ),
        ("def train(run, *, steps):\n    pass\n", "needs keyword argument(s) steps"),
        ("def train(run):\n    for x in loader:\n        pass\n", "never iterates run.batches(...)"),
        ("def train(run:\n", "line 1: "),
    ],
)
def test_a_mistake_in_the_function_is_one_line_naming_it(tmp_path: Path, source: str, said: str) -> None:
    name = "Net" if "class" in source else "train"
    with pytest.raises(ConfigError) as raised:
        check_target(target(tmp_path, source, name))
    assert said in str(raised.value) and "\n" not in str(raised.value)
    if source.startswith("def train():"):
        assert "takes no argument" in str(raised.value) and "def train(run)" in str(raised.value)


def test_a_script_targeted_as_a_function_is_pointed_at_the_script_mode(tmp_path: Path) -> None:
    parses = (
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--lr')\n"
        "args = parser.parse_args()\n\ndef train(run):\n    for b in run.batches(loader):\n        pass\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"line 4 parses the command line when imported .*autotune run "
        r".*user_train.py -- ARGS",
    ):
        check_target(target(tmp_path, parses))
    # pytorch/examples' train(args, model, device, loader, optimizer, epoch), beside its main()
    examples = (
        "def train(args, model, device, train_loader, optimizer, epoch):\n    pass\n\n"
        "def main():\n    args = parser.parse_args()\n\nif __name__ == '__main__':\n    main()\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"needs 6 arguments; .*; or tune the script as it is, unmodified: "
        r"autotune run .*user_train.py -- ARGS",
    ):
        check_target(target(tmp_path, examples))


@pytest.mark.parametrize(
    "body",
    [
        "def train(run):\n    fit(run)\n",  # the loop is in a helper the source cannot follow
        "def train(run):\n    def inner():\n        pass\n    inner()\n",
        "def train(run, epochs=3):" + LOOP,
        "def train(*args):\n    pass\n",
    ],
)
def test_what_the_source_cannot_rule_out_passes(tmp_path: Path, body: str) -> None:
    assert check_target(target(tmp_path, body)) == []


def test_a_host_sync_per_step_is_named_with_its_line(tmp_path: Path) -> None:
    source = "def train(run):" + LOOP + "        losses.append(loss.item())\n    print(total.item())\n"
    notes = check_target(target(tmp_path, source))
    assert len(notes) == 1  # the one in the loop; the one after it costs nothing per step
    assert "user_train.py, line 4: loss.item() inside the loop over run.batches(loader)" in notes[0]


@pytest.mark.parametrize(
    ("loop", "line"),
    [
        ("    for i, (x, y) in enumerate(run.batches(loader)):\n", 3),
        ("    for x, y in tqdm(run.batches(loader), desc='train'):\n", 3),
        ("    it = run.batches(loader)\n    for x, y in it:\n", 4),
        ("    it = run.batches(loader)\n    while True:\n        x, y = next(it)\n", 5),
    ],
)
def test_a_host_sync_per_step_is_found_in_every_form_of_the_loop(tmp_path: Path, loop: str, line: int) -> None:
    body = (
        "        loss = model(x).sum()\n        print(loss.item())\n"
        "        if i % 10 == 0:\n            log(loss.cpu())\n"
    )  # every 10 steps: as it should be
    notes = check_target(target(tmp_path, "def train(run):\n" + loop + body))
    assert len(notes) == 1 and f"user_train.py, line {line + 1}: loss.item() inside the loop" in notes[0], notes


def test_user_files_must_be_utf8_and_keys_unique(tmp_path: Path) -> None:
    latin = tmp_path / "space.yaml"
    latin.write_bytes("knobs:\n  # r\xe9glage\n  amp: [off]\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"space.yaml: line 2: not UTF-8 text \(byte 0xe9\); save it as UTF-8"):
        read_yaml(latin)
    twice = tmp_path / "twice.yaml"
    twice.write_text("knobs:\n  amp: [off]\n  batch_size: [1x]\n  amp: [bf16]\n")
    with pytest.raises(ConfigError, match=r"twice.yaml: line 4: 'amp' appears twice in one mapping"):
        read_yaml(twice)
    py = tmp_path / "latin_train.py"
    py.write_bytes("# r\xe9glage\ndef train(run):\n    pass\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="line 1: not UTF-8"):
        check_target(f"{py}:train")
