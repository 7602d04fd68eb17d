"""The corpus: public training scripts, unmodified, run by ``python`` and by ``autotune exec``.

For each script of ``benchmarks/corpus/corpus.yaml`` (its command line, data, environment and
what it prints that is not a result), in a fresh working copy for every run:

- ``python SCRIPT ARGS``, the script as a user runs it;
- ``autotune exec own.yaml SCRIPT -- ARGS``: an export of the script's own config (a study
  whose answer is the baseline: every knob at the script's own value);
- ``autotune exec loader.yaml SCRIPT -- ARGS``: a loader-only export (num_workers,
  persistent_workers, prefetch_factor);

and compares each exec run with the python run: exit status, stdout (autotune's own
``autotune:`` lines and the timings the entry declares left out), and every file the run wrote
or changed, byte for byte (the weights the script saves among them; where a weights file
differs, whether its tensors do). A script that seeds nothing is compared by the shape of its
output only (``deterministic: false``). Each run is timed by one clock, ``time.monotonic``
around the process, from spawn to exit. With ``--repeats N`` the three runs go in turns N
times (python, own, loader; the order rotates each turn), and the page gives the medians and
their spread (min..max).

The scripts are taken from a local git copy of pytorch/examples at the pinned commit, each
file checked by its sha256 (``--examples``); the data is made by ``corpus/make_data.py``.

    python benchmarks/corpus.py --examples ~/src/examples                 # all, one turn
    python benchmarks/corpus.py --only word_language_model regression     # some
    python benchmarks/corpus.py --torchvision-python /tmp/corpus-venv/bin/python --repeats 3
    python benchmarks/corpus.py --trials 6 --only mnist                   # also tune to an answer
    python benchmarks/corpus.py --trials 6 --studies-only --timeout 1800  # only tune, each to an answer

Writes ``benchmarks/results/corpus.md`` (``--out``) and prints each result as it comes.
Exit status: 0 when every script that ran was equivalent under both exports, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = HERE / "corpus"
TABLE = CORPUS / "corpus.yaml"
EXAMPLES_ENV = "AUTOTUNE_CORPUS_EXAMPLES"

#: The export of the script as written: a study whose answer is its baseline exports no knob
#: (the baseline's config is empty: every knob at the code's own value), only where it was measured.
OWN_EXPORT = (
    "# autotune: the script as written (the baseline): every knob at the script's own value\n"
    "measured_on: {found: the script as written}\n"
)
#: Configs that change how batches arrive, never what the model learns.
LOADER_EXPORT = (
    "# autotune: loader knobs only\n"
    "dataloader: {num_workers: 2, persistent_workers: true, prefetch_factor: 4}\n"
    "measured_on: {found: loader knobs only}\n"
)
EXPORTS = {"own": OWN_EXPORT, "loader": LOADER_EXPORT}
#: Weights files: where their bytes differ, their tensors are compared too.
WEIGHTS = (".pt", ".pth", ".tar")
_NUMBER = re.compile(r"[-+]?\d+(\.\d+)?([eE][-+]?\d+)?")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One script of the corpus, as ``corpus.yaml`` declares it."""

    name: str
    cls: str
    dir: str
    files: dict[str, str]
    script: str
    args: list[str]
    data: dict[str, str]
    env: dict[str, str]
    mask: list[str]
    deterministic: bool
    torchvision: bool
    fast: bool
    study_args: list[str]


@dataclasses.dataclass
class Ran:
    """One finished run: what the comparison reads."""

    rc: int
    stdout: str
    stderr: str
    files: dict[str, str]  # path under the working copy -> sha256, for each file written or changed
    seconds: float
    root: Path


def load_corpus(path: Path = TABLE) -> tuple[dict[str, Any], list[Entry]]:
    """The table's header (repository, commit, licence) and its entries."""
    import yaml

    table = yaml.safe_load(path.read_text())
    entries = [
        Entry(
            name=e["name"],
            cls=e["class"],
            dir=e["dir"],
            files=dict(e["files"]),
            script=e["script"],
            args=[str(a) for a in e.get("args", [])],
            data=dict(e.get("data") or {}),
            env={k: str(v) for k, v in (e.get("env") or {}).items()},
            mask=list(e.get("mask", [])),
            deterministic=e.get("deterministic", True),
            torchvision=e.get("torchvision", False),
            fast=e.get("fast", False),
            study_args=[str(a) for a in e.get("study_args", e.get("args", []))],
        )
        for e in table["scripts"]
    ]
    return table, entries


def examples_source(given: str | None) -> Path | None:
    """The local git copy of pytorch/examples: ``--examples``, else ``$AUTOTUNE_CORPUS_EXAMPLES``,
    else ``benchmarks/corpus/upstream/examples`` (git-ignored: clone it there)."""
    for candidate in (given, os.environ.get(EXAMPLES_ENV), CORPUS / "upstream" / "examples"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


def _git_show(source: Path, commit: str, path: str) -> bytes:
    where = ["-C", str(source)] if (source / ".git").exists() else ["--git-dir", str(source)]
    done = subprocess.run(["git", *where, "show", f"{commit}:{path}"], capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"{source}: no {path} at {commit}: {done.stderr.decode().strip()}")
    return done.stdout


def upstream_file(source: Path, commit: str, path: str, sha256: str) -> bytes:
    """One upstream file, unmodified: its sha256 must be the table's."""
    data = _git_show(source, commit, path)
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise SystemExit(f"{source}: {path} at {commit} has sha256 {got}; the corpus pins {sha256}")
    return data


def _make_data_module() -> Any:
    spec = importlib.util.spec_from_file_location("corpus_make_data", CORPUS / "make_data.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Layout:
    """Lays out fresh working copies: ``<copy>/run`` (the script's folder, LICENSE beside it,
    its data) and ``<copy>/data`` where a script reads ``../data``. The data of each kind is
    made once, then copied."""

    def __init__(self, table: dict[str, Any], source: Path, scratch: Path) -> None:
        self.table, self.source, self.scratch = table, source, scratch
        self._made: dict[str, Path] = {}
        self._make = _make_data_module()

    def data(self, kind: str) -> Path:
        if kind not in self._made:
            dest = self.scratch / "made" / kind
            self._make.KINDS[kind](dest)
            self._made[kind] = dest
        return self._made[kind]

    def copy(self, entry: Entry, label: str) -> Path:
        root = Path(tempfile.mkdtemp(prefix=f"{entry.name}-{label}-", dir=self.scratch))
        run = root / "run"
        commit = self.table["commit"]
        for name, sha in entry.files.items():
            target = run / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(upstream_file(self.source, commit, f"{entry.dir}/{name}", sha))
        licence = self.table["license"]
        (run / "LICENSE").write_bytes(upstream_file(self.source, commit, licence["path"], licence["sha256"]))
        for kind, dest in entry.data.items():
            shutil.copytree(self.data(kind), (run / dest).resolve(), dirs_exist_ok=True)
        return root


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under a working copy (``__pycache__`` left out: the interpreter's)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            found[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def run_once(entry: Entry, root: Path, command: list[str], timeout: float) -> Ran:
    """Run one command in a working copy, timed by ``time.monotonic`` from spawn to exit."""
    before = snapshot(root)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONHASHSEED": "0", **entry.env}
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=root / "run", env=env, capture_output=True, text=True, timeout=timeout)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc = 124
        text = lambda got: got.decode() if isinstance(got, bytes) else (got or "")  # noqa: E731
        out, err = text(exc.stdout), text(exc.stderr) + f"\ntimed out after {timeout:.0f} s"
    seconds = time.monotonic() - start
    after = snapshot(root)
    written = {path: sha for path, sha in after.items() if before.get(path) != sha}
    (root / "stdout.txt").write_text(out)  # (beside run/, after the snapshot: for --keep)
    (root / "stderr.txt").write_text(err)
    return Ran(rc, out, err, written, seconds, root)


def commands(entry: Entry, python: str, export: Path | None) -> list[str]:
    """``python SCRIPT ARGS``, or ``autotune exec EXPORT SCRIPT -- ARGS`` (the autotune beside that python)."""
    if export is None:
        return [python, entry.script, *entry.args]
    return [str(Path(python).parent / "autotune"), "exec", str(export), entry.script, "--", *entry.args]


def normalise(entry: Entry, stdout: str) -> list[str]:
    """stdout as compared: autotune's own lines left out, the declared timings masked (and, for
    a script that seeds nothing, every number)."""
    lines = []
    for line in stdout.splitlines():
        if line.startswith("autotune:"):
            continue
        for pattern in entry.mask:
            line = re.sub(pattern, "<t>", line)
        if not entry.deterministic:
            line = _NUMBER.sub("#", line)
        lines.append(line)
    return lines


def same_weights(python: str, a: Path, b: Path) -> str:
    """Whether two weights files hold the same tensors (run in the scripts' own python)."""
    code = (
        "import sys, torch\n"
        "def flat(o, p=''):\n"
        "    if isinstance(o, torch.nn.Module): o = o.state_dict()\n"
        "    if isinstance(o, torch.Tensor): return {p: o}\n"
        "    if isinstance(o, dict): return {k2: v2 for k, v in o.items() for k2, v2 in flat(v, p + '.' + str(k)).items()}\n"
        "    return {p: o}\n"
        "x, y = (flat(torch.load(f, weights_only=False)) for f in sys.argv[1:])\n"
        "eq = x.keys() == y.keys() and all(torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) "
        "else x[k] == y[k] for k in x)\n"
        "print('same' if eq else 'differ')\n"
    )
    done = subprocess.run([python, "-c", code, str(a), str(b)], capture_output=True, text=True)
    return {"same": "its tensors equal", "differ": "its tensors differ"}.get(
        done.stdout.strip(), "its tensors unreadable"
    )


def compare(entry: Entry, python: str, plain: Ran, other: Ran) -> list[str]:
    """What differs between a python run and another run of the same entry; empty: equivalent."""
    diffs = []
    if plain.rc != other.rc:
        diffs.append(f"exit status {plain.rc} vs {other.rc}")
    a, b = normalise(entry, plain.stdout), normalise(entry, other.stdout)
    if a != b:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        show = lambda lines: repr(lines[at][:80]) if at < len(lines) else "(no line)"  # noqa: E731
        diffs.append(f"stdout line {at + 1}: {show(a)} vs {show(b)} ({len(a)} vs {len(b)} lines)")
    missing = sorted(set(plain.files) - set(other.files))
    extra = sorted(set(other.files) - set(plain.files))
    if missing:
        diffs.append("files not written: " + ", ".join(missing))
    if extra:
        diffs.append("files written only here: " + ", ".join(extra))
    if entry.deterministic:
        for path in sorted(set(plain.files) & set(other.files)):
            if plain.files[path] != other.files[path]:
                note = ""
                if path.endswith(WEIGHTS):
                    note = f" ({same_weights(python, plain.root / path, other.root / path)})"
                size = lambda ran, path=path: (ran.root / path).stat().st_size  # noqa: E731
                diffs.append(f"{path}: bytes differ, {size(plain)} vs {size(other)} B{note}")
    return diffs


@dataclasses.dataclass
class Result:
    """One entry's runs and verdicts."""

    entry: Entry
    skipped: str | None = None
    seconds: dict[str, list[float]] = dataclasses.field(default_factory=lambda: {"python": [], "own": [], "loader": []})
    diffs: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    control: list[str] = dataclasses.field(default_factory=list)  # python against python, turns > 1
    answer: str | None = None
    rc: dict[str, int] = dataclasses.field(default_factory=dict)  # each label's first run
    tail: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def equivalent(self) -> bool:
        return not self.skipped and not any(self.diffs.values())


def check(
    entry: Entry, layout: Layout, python: str, repeats: int = 1, timeout: float = 300, keep: bool = False
) -> Result:
    """Run an entry ``repeats`` turns (python, own export, loader export; rotated), compare every
    exec run with the first python run."""
    result = Result(entry)
    exports = {}
    for label, text in EXPORTS.items():
        exports[label] = layout.scratch / f"{label}.yaml"
        exports[label].write_text(text)
    first: dict[str, Ran] = {}
    order = ["python", "own", "loader"]
    for turn in range(repeats):
        for label in order[turn % 3 :] + order[: turn % 3]:
            root = layout.copy(entry, label)
            ran = run_once(entry, root, commands(entry, python, exports.get(label)), timeout)
            result.seconds[label].append(ran.seconds)
            if label not in first:
                first[label] = ran
                result.rc[label] = ran.rc
                result.tail[label] = "\n".join((ran.stderr.strip().splitlines() or [""])[-3:])
                continue
            if label == "python" and not result.control:
                result.control = compare(entry, python, first["python"], ran)
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
    for label in ("own", "loader"):
        result.diffs[label] = compare(entry, python, first["python"], first[label])
    if not keep:
        for ran in first.values():
            shutil.rmtree(ran.root, ignore_errors=True)
    return result


#: What a study must not end in (issue 58's done-when): the study found no answer, or broke.
_BAD = (
    ("no complete trial", "no complete trial"),
    ("Traceback (most recent call last)", "a traceback"),
    ("startup: no batch", "a start-up timeout"),
    ("timed out after", "the harness's timeout"),
)


@dataclasses.dataclass
class Study:
    """One ``autotune run`` of an entry: how it ended, in what time, under what load."""

    rc: int
    seconds: float
    line: str  # the answer's line, else the last line it printed
    verdict: str  # an answer / a refusal within 30 s / **bad**: why
    load: str  # the 1-minute load average at its start and end
    log: Path  # everything it printed (stdout, then stderr)
    spent: list[dict] = dataclasses.field(default_factory=list)  # issue 62's check (``_spent``)


def _load() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _study_verdict(rc: int, seconds: float, text: str, answer: str | None) -> str:
    """Whether a study ended within issue 58's done-when."""
    for needle, why in _BAD:
        if needle in text:
            return f"**bad**: {why}"
    if answer is not None and rc == 0:
        return "an answer"
    if rc == 0 and ": unreliable: " in text:
        return "**no answer**: unreliable (every figure noisy: the host's load)"
    refusals = [line for line in text.splitlines() if line.startswith("autotune: error: ")]
    if rc != 0 and len(refusals) == 1:
        return (
            "a one-line refusal within 30 s" if seconds <= 30 else f"**late**: a one-line refusal, in {seconds:.0f} s"
        )
    if rc != 0 and seconds <= 30:
        return "a refusal within 30 s"
    return f"**bad**: exit {rc} after {seconds:.0f} s without an answer"


def study(entry: Entry, layout: Layout, python: str, trials: int, timeout: float, logs: Path) -> Study:
    """``autotune run --trials N`` in a fresh working copy, as a user runs it (the default space);
    its whole output kept in ``logs/<name>.log``."""
    root = layout.copy(entry, "study")
    autotune = str(Path(python).parent / "autotune")
    command = [autotune, "run", entry.script, "--trials", str(trials), "--store", "st", "--", *entry.study_args]
    before = _load()
    ran = run_once(entry, root, command, timeout)
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{entry.name}.log"
    log.write_text(f"$ {' '.join(command)}\n{ran.stdout}\n--- stderr ---\n{ran.stderr}")
    text = ran.stdout + ran.stderr
    lines = [line for line in text.splitlines() if line.strip()]
    found = next((line for line in lines if line.startswith("best: ")), None) or next(
        (line for line in lines if re.match(r"trial \d+, .*(x the baseline|as written)", line)), None
    )
    # (the summary's first line, on stdout: "study NAME: unreliable: ..." where nothing ranked)
    summary = next((line for line in ran.stdout.splitlines() if line.startswith("study ")), None)
    line = (found or summary or (lines[-1] if lines else "(no output)"))[:200]
    verdict = _study_verdict(ran.rc, ran.seconds, text, found)
    from _spent import spent_in

    spent = spent_in(root / "st")
    return Study(ran.rc, ran.seconds, line, verdict, f"{before}-{_load()}", log, spent)


def tune(entry: Entry, layout: Layout, python: str, trials: int, timeout: float) -> str:
    """``autotune run`` to an answer in a fresh working copy: the answer's line."""
    done = study(entry, layout, python, trials, timeout, layout.scratch / "studies")
    return f"exit {done.rc} in {done.seconds:.0f} s: {done.line}"


def studies_page(done: list[tuple[Entry, Study]], header: dict[str, str]) -> str:
    """The studies' table: what each ended with, in what time, under what load."""
    lines = [
        f"## Studies (`autotune run --trials {header['trials']}`, {header['date']})",
        "",
        f"- machine: {header['machine']}",
        f"- autotune: `{header['autotune']}`; pythons: {header['pythons']}",
        f"- command: `{header['command']}`",
        "",
        "| script | class of script | study ended | within the done-when | in s | load (start-end) |",
        "|---|---|---|---|---|---|",
    ]
    for entry, s in done:
        said = s.line.replace("|", "\\|")
        lines.append(
            f"| {entry.name} | {entry.cls} | exit {s.rc}: `{said}` | {s.verdict} | {s.seconds:.0f} | {s.load} |"
        )
    from _spent import said as spent_said

    lines += ["", "Trials spent on a losing value:", ""]
    lines += [f"- {entry.name}: {spent_said(s.spent)}" for entry, s in done]
    lines.append("")
    return "\n".join(lines)


def _has_torchvision(python: str) -> bool:
    return subprocess.run([python, "-c", "import torchvision"], capture_output=True).returncode == 0


def _median(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    return f"{med:.1f}" + (f" ({min(values):.1f}..{max(values):.1f})" if len(values) > 1 else "")


def _ratio(result: Result, label: str) -> str:
    a, b = result.seconds["python"], result.seconds[label]
    return f"{statistics.median(a) / statistics.median(b):.2f}" if a and b else "-"


def _verdict(result: Result, label: str) -> str:
    if result.skipped:
        return "skipped"
    diffs = result.diffs.get(label, [])
    return "yes" if not diffs else "**no**: " + "; ".join(d.replace("|", "\\|") for d in diffs)


def page(results: list[Result], header: dict[str, str]) -> str:
    """The results page: one row per script."""
    lines = [
        "# The corpus: public training scripts under `python` and `autotune exec`",
        "",
        "Each script of `benchmarks/corpus/corpus.yaml` (pytorch/examples at "
        f"`{header['commit'][:10]}`, unmodified, sha256-checked), run by `python SCRIPT ARGS` and by "
        "`autotune exec EXPORT SCRIPT -- ARGS` under two exports: **own**, the script's own config (the "
        "export of a study whose answer is the baseline), and **loader**, loader knobs only "
        "(`num_workers: 2, persistent_workers: true, prefetch_factor: 4`). Equivalent: the same exit "
        "status, the same stdout (autotune's `autotune:` lines and declared timings left out), the same "
        "files byte for byte (weights included). Seconds: `time.monotonic` around the process, spawn to "
        f"exit; median (min..max) of {header['repeats']} interleaved turn(s). Ratio: python s / exec s "
        "(1.00: no cost; below 1: exec slower).",
        "",
        f"- machine: {header['machine']}",
        f"- date: {header['date']}; autotune: `{header['autotune']}`",
        f"- pythons: {header['pythons']}",
        f"- command: `{header['command']}`",
        "",
        "| script | class of script | torch | equivalent, own config | equivalent, loader-only | python s "
        "| exec own s | ratio | exec loader s | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        e = r.entry
        where = "torchvision" if e.torchvision else "plain"
        if r.skipped:
            lines.append(f"| {e.name} | {e.cls} | {where} | skipped: {r.skipped} | | | | | | |")
            continue
        lines.append(
            f"| {e.name} | {e.cls} | {where} | {_verdict(r, 'own')} | {_verdict(r, 'loader')} "
            f"| {_median(r.seconds['python'])} | {_median(r.seconds['own'])} | {_ratio(r, 'own')} "
            f"| {_median(r.seconds['loader'])} | {_ratio(r, 'loader')} |"
        )
    controls = [r for r in results if r.control]
    if controls:
        lines += ["", "Python against python (the control: two runs of `python` that differ):", ""]
        lines += [f"- {r.entry.name}: " + "; ".join(r.control) for r in controls]
    answers = [r for r in results if r.answer]
    if answers:
        lines += ["", "Studies (`autotune run --trials N`):", ""]
        lines += [f"- {r.entry.name}: {r.answer}" for r in answers]
    failing = [r for r in results if not r.skipped and not r.equivalent]
    if failing:
        lines += ["", "autotune's last stderr lines where a run differed:", ""]
        for r in failing:
            for label in ("own", "loader"):
                if r.diffs.get(label):
                    last = (r.tail.get(label) or "(nothing)").splitlines()[-1]
                    lines.append(f"- {r.entry.name} ({label}): `{last}`")
    lines.append("")
    return "\n".join(lines)


def _machine() -> str:
    try:
        sys.path.insert(0, str(HERE))
        from _results import machine

        return machine()
    except Exception as exc:  # the page still says where it ran
        import platform

        return f"{platform.node()} ({os.cpu_count()} CPUs; {type(exc).__name__}: {exc})"


def _commit() -> str:
    """This tree's commit, and whether autotune/ differs from it (the runs used the tree as it is)."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "autotune"], capture_output=True, text=True).stdout
    return head + (" with uncommitted changes in autotune/" if dirty.strip() else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--examples",
        help=f"a git copy of pytorch/examples (default: ${EXAMPLES_ENV}, else benchmarks/corpus/upstream/examples)",
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these entries only, in this order")
    parser.add_argument("--fast", action="store_true", help="the fast subset only (the entries marked fast)")
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the python that runs plain-torch scripts; autotune is the one beside it",
    )
    parser.add_argument(
        "--torchvision-python",
        help="the python (with torchvision, and autotune beside it) for "
        "the scripts that import torchvision [default: --python]",
    )
    parser.add_argument("--repeats", type=int, default=1, help="interleaved turns of the three runs [1]")
    parser.add_argument("--trials", type=int, default=0, help="also `autotune run --trials N` each script (slow)")
    parser.add_argument(
        "--studies-only",
        action="store_true",
        help="only `autotune run --trials N` each script (no python/exec runs): the studies' table",
    )
    parser.add_argument("--logs", type=Path, help="keep each study's whole output here as NAME.log")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a run may take [300]")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "corpus.md", help="the results page")
    parser.add_argument("--no-page", action="store_true", help="print only; write no page")
    parser.add_argument(
        "--append", action="store_true", help="add this run to the page as a section of its own instead of replacing it"
    )
    parser.add_argument("--keep", action="store_true", help="keep the working copies (printed)")
    args = parser.parse_args(argv)

    table, entries = load_corpus()
    if args.only:
        unknown = sorted(set(args.only) - {e.name for e in entries})
        if unknown:
            parser.error(f"--only: unknown {', '.join(unknown)}; known: {', '.join(e.name for e in entries)}")
        entries = [next(e for e in entries if e.name == name) for name in dict.fromkeys(args.only)]  # (in its order)
    if args.fast:
        entries = [e for e in entries if e.fast]
    source = examples_source(args.examples)
    if source is None:
        parser.error(
            "no copy of pytorch/examples: pass --examples PATH (git clone https://github.com/pytorch/examples)"
        )
    tv_python = args.torchvision_python or args.python
    tv_ok = _has_torchvision(tv_python) if any(e.torchvision for e in entries) else False
    scratch = Path(tempfile.mkdtemp(prefix="autotune-corpus-"))
    layout = Layout(table, source, scratch)
    results = []
    studied: list[tuple[Entry, Study]] = []
    if args.studies_only and not args.trials:
        parser.error("--studies-only needs --trials N")
    for entry in entries:
        python = tv_python if entry.torchvision else args.python
        if entry.torchvision and not tv_ok:
            results.append(Result(entry, skipped=f"no torchvision in {tv_python}"))
            print(f"{entry.name}: skipped (no torchvision in {tv_python})", flush=True)
            continue
        if args.studies_only:
            done = study(entry, layout, python, args.trials, args.timeout, args.logs or scratch / "studies")
            studied.append((entry, done))
            print(
                f"{entry.name}: {done.verdict}, exit {done.rc} in {done.seconds:.0f} s (load {done.load}): {done.line}",
                flush=True,
            )
            continue
        result = check(entry, layout, python, args.repeats, args.timeout, args.keep)
        if args.trials:
            result.answer = tune(entry, layout, python, args.trials, args.timeout * 10)
        results.append(result)
        print(
            f"{entry.name}: own {_verdict(result, 'own')}; loader {_verdict(result, 'loader')}; python "
            f"{_median(result.seconds['python'])} s, exec own {_median(result.seconds['own'])} s, "
            f"loader {_median(result.seconds['loader'])} s",
            flush=True,
        )
        if result.answer:
            print(f"{entry.name}: study {result.answer}", flush=True)
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"working copies kept in {scratch}")
    if not args.no_page:
        versions = {
            p: subprocess.run(
                [p, "-c", "import torch, sys; print(sys.version.split()[0], 'torch', torch.__version__)"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            for p in dict.fromkeys([args.python, tv_python])
        }
        header = {
            "commit": table["commit"],
            "repeats": str(args.repeats),
            "machine": _machine(),
            "date": datetime.date.today().isoformat(),
            "autotune": _commit(),
            "pythons": "; ".join(f"{p}: {v}" for p, v in versions.items()),
            "command": "python benchmarks/corpus.py " + " ".join(sys.argv[1:] if argv is None else argv),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if args.studies_only:
            header["trials"] = str(args.trials)
            text = studies_page(studied, header)
            if args.append and args.out.exists():
                text = args.out.read_text().rstrip("\n") + "\n\n" + text
            args.out.write_text(text)
            print(f"wrote {args.out}")
            return 0 if all(not s.verdict.startswith("**bad") for _, s in studied) else 1
        text = page(results, header)
        if args.append and args.out.exists():
            text = args.out.read_text().rstrip("\n") + "\n\n#" + text.replace("\n# ", "\n## ")
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0 if all(r.equivalent for r in results if not r.skipped) else 1


if __name__ == "__main__":
    sys.exit(main())
