"""Regenerate the manual's example output from a real study, and its screenshots.

    .venv/bin/python docs/tools/examples.py                 # a short quickstart study, then the blocks
    .venv/bin/python docs/tools/examples.py --store DIR     # keep the study's store in DIR
    .venv/bin/python docs/tools/examples.py --from DIR      # no new study: re-cut the blocks from DIR's logs
    .venv/bin/python docs/tools/examples.py -- --max-load 1 --max-spread 1000   # more `autotune run` options

It runs the Quickstart's command on `runners/mnist_script.py` (few trials, short training, so that
it takes minutes on a 2-core machine), then `autotune show`, the export and `autotune exec`, and
writes what each printed to `docs/examples/NAME.txt`, each headed by the command that printed it,
so that a page shows what produced its example. On a machine so busy that
every trial is noisy the study exports nothing, and this script stops and says so: run it on a
quieter machine, or pass `-- --max-load 1 --max-spread 1000` (figures believed whatever the load;
the command block then shows those options). Every page (docs/*.md and README.md) holds a
copy of a block between `<!-- example: NAME -->` and `<!-- /example -->`; those copies are
rewritten from the files, so no example output is typed by hand (tests/unit/test_manual.py checks
that each copy matches its file). Then docs/tools/screenshots.py photographs the MLflow UI and
`autotune report`'s page of the same study with headless Chromium (skipped, and said, without it).

What is changed in the output, and why: the store folder's temporary path reads `mlflow` (the
default a user has), the repository's path is cut, dates read `<date>` and process ids `<pid>`
(the manual carries no dates or hosts: those live in benchmarks/results/), and lines about other
tuners on the same host are dropped (they say what else ran on the build machine, not what a
user sees).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
AUTOTUNE = [sys.executable, "-m", "autotune"]
SCRIPT = "runners/mnist_script.py"
# What the example study runs: the quickstart's script, cut short (see the page's caption).
TRIALS = 4
SCRIPT_ARGS = ["--epochs", "1"]

_BLOCK = re.compile(r"(<!-- example: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /example -->)", re.DOTALL)
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d(?:[ T]\d\d:\d\d(?::\d\d)?)?\b")
_PID = re.compile(r"\bpid (\d+)\b")
_DROP = ("other tuner(s) run on this host", "waiting for CPU", "tuners on this host")
# The lines that open the study's summary, whichever the terminal's layout (the first found wins).
_SUMMARY_STARTS = ("best:", "winner:", "unreliable:", "no config")


def scrub(text: str, store: Path) -> str:
    """Output as a user would see it in their own checkout, with no date, host or pid."""
    text = text.replace(str(store), "mlflow").replace(str(ROOT) + "/", "")
    text = _DATE.sub("<date>", text)
    text = _PID.sub("pid <pid>", text)
    lines = [line.rstrip() for line in text.splitlines() if not any(d in line for d in _DROP)]
    return "\n".join(lines).strip("\n") + "\n"


def summary(run_output: str, most: int = 14) -> str:
    """The end of a study's output: from the first summary line on, else its last `most` lines."""
    lines = run_output.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith(_SUMMARY_STARTS):
            return "\n".join(lines[i:]) + "\n"
    return "\n".join(lines[-most:]) + "\n"


def fence(name: str, text: str) -> str:
    """The Markdown block a page holds for one example file."""
    lang = "yaml" if name.endswith(".yaml") else "text"
    return f"```{lang}\n{text.rstrip()}\n```\n"


def rewrite(page: str, examples: dict[str, str]) -> str:
    """`page` with each marked block replaced by its example; an unknown name is an error."""

    def one(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in examples:
            raise KeyError(f"<!-- example: {name} -->: no docs/examples/{name}.txt; known: {sorted(examples)}")
        return m.group(1) + fence(name, examples[name]) + m.group(4)

    return _BLOCK.sub(one, page)


def blocks(page: str) -> dict[str, str]:
    """The marked blocks a page holds, by name (their fenced text as written)."""
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(page)}


def load_examples() -> dict[str, str]:
    """docs/examples/*: the name a page uses is the file's name without .txt."""
    return {p.name.removesuffix(".txt"): p.read_text() for p in sorted(EXAMPLES.iterdir()) if p.is_file()}


def pages() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def update_pages() -> list[Path]:
    examples = load_examples()
    changed = []
    for path in pages():
        old = path.read_text()
        new = rewrite(old, examples)
        if new != old:
            path.write_text(new)
            changed.append(path)
    return changed


def _run(argv: list[str], env: dict[str, str], log: Path) -> str:
    print("$", " ".join(argv), flush=True)
    proc = subprocess.run(
        argv, check=False, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log.write_text(proc.stdout)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}; its output is in {log}")
    return proc.stdout


def command(trials: int, options: list[str]) -> str:
    return " ".join(["autotune run", SCRIPT, "--trials", str(trials), *options, "--", *SCRIPT_ARGS])


def study(store: Path, trials: int, options: list[str]) -> None:
    """The quickstart, short: its output and the next commands', logged in the store folder."""
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", COLUMNS="100", PYTHONUNBUFFERED="1")
    env.pop("AUTOTUNE_STORE", None)
    logs = store / "examples"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "command.log").write_text(command(trials, options) + "\n")
    _run(
        AUTOTUNE + ["run", SCRIPT, "--trials", str(trials), "--store", str(store), *options, "--", *SCRIPT_ARGS],
        env,
        logs / "run.log",
    )
    _run(AUTOTUNE + ["show", "--store", str(store)], env, logs / "show.log")
    export = store / "exports" / "mnist_script.yaml"
    if not export.exists():
        sys.exit(
            f"the study exported nothing (every figure noisy?); its output: {logs / 'run.log'}. "
            "Run this on a quieter machine, or add `-- --max-load 1 --max-spread 1000`"
        )
    (logs / "export.log").write_text(export.read_text())
    _run(AUTOTUNE + ["exec", str(export), SCRIPT, "--", *SCRIPT_ARGS], env, logs / "exec.log")


def cut(store: Path) -> dict[str, str]:
    """docs/examples/* from the logs in the store folder."""
    logs = store / "examples"
    run = scrub((logs / "run.log").read_text(), store)
    command = "$ " + (logs / "command.log").read_text()
    exec_lines = scrub((logs / "exec.log").read_text(), store).splitlines()
    out = {
        "quickstart-run.txt": command + run,
        "quickstart-end.txt": command + "...\n" + summary(run),
        "show.txt": "$ autotune show\n" + scrub((logs / "show.log").read_text(), store),
        "export.yaml": scrub((logs / "export.log").read_text(), store),
        # The script's own output, then exec's last line: the last few are what to read.
        "exec-end.txt": f"$ autotune exec mlflow/exports/mnist_script.yaml {SCRIPT} -- {' '.join(SCRIPT_ARGS)}\n"
        + "...\n"
        + "\n".join(exec_lines[-3:])
        + "\n",
    }
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    for name, text in out.items():
        (EXAMPLES / name).write_text(text)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, help="run the study in this store folder and keep it")
    ap.add_argument("--from", dest="source", type=Path, help="cut the blocks from this store's logs, no study")
    ap.add_argument("--trials", type=int, default=TRIALS)
    ap.add_argument("--no-screenshots", action="store_true")
    ap.add_argument("options", nargs="*", help="after --: more options for `autotune run`")
    args = ap.parse_args(argv)
    if args.source:
        store = args.source.resolve()
    else:
        store = (args.store or Path(tempfile.mkdtemp(prefix="autotune-examples-"))).resolve()
        if store.exists() and any(store.iterdir()):
            sys.exit(f"--store {store}: not empty; the example study starts from nothing")
        study(store, args.trials, args.options)
    cut(store)
    for path in update_pages():
        print("rewrote", path.relative_to(ROOT))
    if not args.no_screenshots:
        from screenshots import shoot  # docs/tools/screenshots.py, beside this file

        shoot(store)
    if not (args.store or args.source):
        shutil.rmtree(store, ignore_errors=True)
    else:
        print(f"the study's store: {store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
