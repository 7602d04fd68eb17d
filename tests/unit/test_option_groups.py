"""Each option defined once (autotune.tuner._option_groups): every CLI flag and every ``tune``
argument maps to one field with its default and bounds; the groups check themselves; the keywords
``tune`` took before keep working with a warning that names their new place."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import warnings
from pathlib import Path
from typing import Any

import click
import pytest

import autotune
from autotune._api import _moved_in, tune
from autotune._cli import run
from autotune.core._bounds import Bound
from autotune.core._config import ConfigError
from autotune.machine._launch import Budget
from autotune.tuner._option_fields import fields_of, from_flat, place_of
from autotune.tuner._option_groups import (
    Basics,
    Judge,
    Limits,
    Measure,
    Noise,
    Options,
    Stores,
)
from autotune.tuner._options import StudyOptions

FIELDS = {field.name: field for cls in (Basics, Options) for _, field in fields_of(cls)}
#: The command line's own ways to say tune's target, args and progress.
CLI_ONLY = {"target", "args", "module", "quiet", "verbose"}
#: tune's arguments that are no option: what it tunes and who hears how it goes.
NOT_OPTIONS = {"target", "args", "progress", "options", "moved"}


def test_option_names_are_unique_across_the_groups() -> None:
    names = [field.name for cls in (Basics, Options) for _, field in fields_of(cls)]
    assert len(names) == len(set(names)) == 31, names


def test_every_cli_flag_maps_to_one_field_with_its_default_and_bounds() -> None:
    context = run.make_context("run", ["x.py:train"])  # the values click passes when not given
    flags = {p.name: p for p in run.params if p.name not in CLI_ONLY}
    assert set(flags) == set(FIELDS), "a flag without a field, or a field without a flag"
    for name, param in flags.items():
        field = FIELDS[name]
        assert context.params[name] == field.default, name
        assert param.opts[0] == "--" + name.replace("_", "-"), name  # one name in every layer
        bound: Bound | None = field.metadata["bound"]
        if bound is None:
            assert not isinstance(param.type, (click.IntRange, click.FloatRange)), name
            continue
        kind = click.IntRange if bound.integer else click.FloatRange
        assert type(param.type) is kind, name
        assert (param.type.min, param.type.max, param.type.min_open, param.type.max_open) == (
            bound.low,
            bound.high,
            bound.low_open,
            bound.high_open,
        ), name
        assert param.help == field.metadata["help"], name


def test_every_tune_argument_maps_to_one_field_with_its_default() -> None:
    params = inspect.signature(tune).parameters
    flat = {name: p for name, p in params.items() if name not in NOT_OPTIONS}
    assert set(flat) == set(Basics.__dataclass_fields__)
    for name, param in flat.items():
        assert param.default == FIELDS[name].default, name
    # every other option is a field of Options, and still taken flat (deprecated) under the same name
    for name, field in FIELDS.items():
        if name in flat:
            continue
        with pytest.warns(DeprecationWarning, match=re.escape(f"tune({name}=...) is deprecated")):
            moved = _moved_in(Options(), {name: field.default})
        assert moved == Options(), name


def test_the_flags_given_reach_tune_as_the_groups() -> None:
    argv = [
        "x.py:train",
        "--warmup",
        "0.2",
        "-j",
        "2",
        "--max-load",
        "1",
        "--profile",
        "off",
        "--horizon",
        "8",
        "--study",
        "s",
        "--timeout",
        "30",
    ]
    options = from_flat(Options, run.make_context("run", argv).params)
    assert options == Options(
        jobs=2,
        profile=False,
        measure=Measure(warmup=0.2),
        limits=Limits(timeout=30.0),
        noise=Noise(max_load=1.0),
        judge=Judge(horizon=8.0),
        stores=Stores(study="s"),
    )


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: Basics(trials=0), "trials=0: must be an integer >= 1"),
        (lambda: Measure(windows=2.5), "windows=2.5: must be an integer >= 1"),
        (lambda: Measure(window=float("nan")), "window=nan: must be a finite number >= 0.05"),  # (nan passes <, >)
        (lambda: Judge(prune=1.5), "prune=1.5: must be a number >= 0 and <= 1"),
        (lambda: Judge(divergence_tolerance=0), "divergence_tolerance=0: must be a number > 0"),
        (lambda: Judge(horizon=0), "horizon=0: must be a number > 0"),
        (lambda: Limits(ram_budget=True), "ram_budget=True: must be a number >= 0.01"),  # (a bool is no number)
        (lambda: Limits(ram_budget=float("inf")), "ram_budget=inf: must be a finite number >= 0.01"),
        (lambda: Options(jobs=0), "jobs=0: must be an integer >= 1"),
        (lambda: Noise(max_load=1.01), "max_load=1.01: must be a number >= 0 and <= 1"),
    ],
)
def test_each_group_checks_its_values_with_the_clis_error(make: Any, said: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(said)}$"):
        make()


def test_none_means_the_computed_default_where_the_field_allows_it() -> None:
    assert Limits(timeout=None, ram_budget=None).timeout is None and Judge(horizon=None).horizon is None
    with pytest.raises(ConfigError, match=re.escape("windows=None: must be an integer >= 1")):
        Measure(windows=None)


def test_an_old_keyword_warns_with_its_new_place_and_keeps_its_value() -> None:
    with pytest.warns(DeprecationWarning) as said:
        moved = _moved_in(Options(jobs=3), {"warmup": 0.2, "max_load": 1.0})
    removed = "is deprecated and will be removed in 0.2.0: pass"
    assert [str(w.message) for w in said] == [
        f"tune(warmup=...) {removed} options=Options(measure=Measure(warmup=...))",
        f"tune(max_load=...) {removed} options=Options(noise=Noise(max_load=...))",
    ]
    assert moved == Options(jobs=3, measure=Measure(warmup=0.2), noise=Noise(max_load=1.0))
    assert place_of(Options, "seed") == "options=Options(seed=...)"
    with pytest.raises(TypeError, match="unexpected keyword argument 'trails'"):
        _moved_in(Options(), {"trails": 3})


def test_an_old_keyword_with_a_bad_value_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with warnings.catch_warnings(), pytest.raises(ConfigError, match=re.escape("prune=2: must be a number")):
        warnings.simplefilter("ignore", DeprecationWarning)
        autotune.tune("x.py:train", store=tmp_path / "store", prune=2)
    assert not (tmp_path / "store").exists()
    with pytest.raises(ConfigError, match=re.escape("options={'jobs': 2}: must be an autotune.Options")):
        autotune.tune("x.py:train", store=tmp_path / "store", options={"jobs": 2})  # type: ignore[arg-type]


def test_a_studys_budget_is_its_measure_and_limits() -> None:
    given = StudyOptions(
        "t.py",
        options=Options(
            measure=Measure(warmup=0.5, windows=6, whole_run=0), limits=Limits(stall_timeout=5, timeout=40)
        ),
    )
    assert given.budget == Budget(warmup_s=0.5, windows=6, stall_s=5, timeout_s=40, whole_s=0)
    # no ceilings on several ranks: a part measured alone on one rank would wait on the others
    ranked = StudyOptions("t.py", options=Options(nproc_per_node=2))
    assert ranked.budget.ceiling_windows == 0 and StudyOptions("t.py").budget.ceiling_windows == 2
    # the budget's defaults are the options' (one definition: Budget's, which says why each)
    assert (Budget().warmup_s, Budget().window_s, Budget().windows) == (
        Measure().warmup,
        Measure().window,
        Measure().windows,
    )


def test_every_public_argument_is_documented() -> None:
    documented = autotune.tune.__doc__.split("Args:")[1].split("Returns:")[0]
    for name in inspect.signature(tune).parameters:
        assert re.search(rf"^\s+\**{name}:", documented, re.MULTILINE), f"tune's docstring does not document {name}"
    for cls in (Options, Measure, Limits, Noise, Judge, Stores):
        assert autotune.__dict__.get(cls.__name__, getattr(autotune, cls.__name__)) is cls
        assert cls.__name__ in autotune.__all__
        for field in dataclasses.fields(cls):
            assert re.search(rf"^\s+{field.name}: \S", cls.__doc__, re.MULTILINE), f"{cls.__name__}.{field.name}"


def parameter_counts(package: Path) -> dict[str, int]:
    """Each function of ``package`` that takes more than 8 parameters (``self`` and ``cls`` not
    counted, nor ``*args`` and ``**kwargs``): ``path:Class.function`` -> how many."""
    found: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):

        def visit(node: ast.AST, prefix: str, path: Path = path) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = child.args
                    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls")]
                    if len(names) > 8:
                        found[f"{path.relative_to(package)}:{prefix}{child.name}"] = len(names)
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                else:
                    visit(child, prefix)

        visit(ast.parse(path.read_text(), filename=str(path)), "")
    return found


def test_no_function_takes_more_than_8_parameters() -> None:
    found = parameter_counts(Path(autotune.__file__).parent)
    assert not found, f"more than 8 parameters: group them in a dataclass (as tune's options): {found}"


def test_the_parameter_count_sees_methods_keyword_only_and_not_self(tmp_path: Path) -> None:
    source = "class A:\n    def f(self, a, b, c, d, e, g, h, *v, i, j, **k): ...\n"
    (tmp_path / "m.py").write_text(source)
    assert parameter_counts(tmp_path) == {"m.py:A.f": 9}
    (tmp_path / "m.py").write_text(source.replace(", j", ""))
    assert parameter_counts(tmp_path) == {}


def test_the_contributing_guides_example_is_the_real_code() -> None:
    """docs/contributing.md shows adding an option on ``quiet_wait``: its field and its reader, as they are."""
    root = Path(autotune.__file__).parent
    guide = (root.parent / "docs" / "contributing.md").read_text().split("## Adding an option")[1].split("\n## ")[0]
    blocks = re.findall(r"```python\n(.*?)```", guide, re.DOTALL)
    assert len(blocks) == 2

    def flat(text: str) -> str:  # (the guide shows the code dedented; the formatter may wrap it)
        return re.sub(r"\s+", " ", text).strip()

    assert flat(blocks[0]) in flat((root / "tuner" / "_option_groups.py").read_text())
    assert flat(blocks[1]) in flat((root / "tuner" / "_study.py").read_text())
    with pytest.raises(ConfigError, match=re.escape("quiet_wait=-1.0: must be a number >= 0")):
        Noise(quiet_wait=-1.0)
