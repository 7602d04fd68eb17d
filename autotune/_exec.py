"""``autotune exec EXPORT.yaml train.py -- ARGS``: a script in production with an exported config,
applied from outside its code as it was in the study (``autotune._hooks``)."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from autotune._knobs import KNOBS, show_value
from autotune._script import SCRIPT_STAGES, ScriptExited, check_script, label, run_script


def exec_script(export: Path, target: str, argv: Sequence[str], device: str = "auto") -> int:
    """Run the script in this process with the export applied; return its exit status.

    Says once, on stderr, what it applies and what it cannot: a knob this machine cannot
    honour (``autotune.load`` warns and drops it) or one that needs the code (the ``Run`` handle).

    Raises:
        ConfigError: the export or the script is bad input.
    """
    from autotune._export import load
    from autotune._hooks import Hooks

    check_script(target)
    recipe = load(export, device, quiet=True)
    recipe.stages = SCRIPT_STAGES
    values = recipe.config.set_values()
    applied = {k: v for k, v in values.items() if KNOBS[k].stage in SCRIPT_STAGES}
    needs_code = {k: v for k, v in values.items() if k not in applied}
    knobs = " ".join(f"{k}={show_value(v)}" for k, v in applied.items()) or "nothing (the code as written)"
    print(f"autotune: running {label(target, argv)} with {recipe.origin or export}: {knobs}", file=sys.stderr, flush=True)
    if needs_code:
        print("autotune: not applied to an unmodified script (they need the Run handle): "
              + " ".join(f"{k}={show_value(v)}" for k, v in needs_code.items()), file=sys.stderr, flush=True)
    hooks = Hooks(recipe).install()
    try:
        run_script(target, argv)
    except ScriptExited as exc:
        return exc.status if isinstance(exc.status, int) else 1
    except Exception:  # the script's own error: its traceback and status 1, as python would give
        traceback.print_exc()
        return 1
    finally:
        hooks.remove()
    return 0
