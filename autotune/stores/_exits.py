"""How the ``autotune`` program ends when something went wrong: one line each, and an exit status
that says whose it is.

- 1: the code as written failed (``autotune run``: its baseline; the traceback follows).
- 2: bad input (an argument, file or key; a script that gave nothing to measure).
- 3: a store (the study's database, the tracking store) stayed down past its patience.
- 4: an error inside autotune itself: a bug, not the user's; its traceback is saved to a file.
- 130 / 143: Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from autotune.core._config import ConfigError
from autotune.stores._stores import StoreDown

#: The exit status of an error inside autotune itself (a bug, not the user's input or code), beside
#: 1 (the code as written failed: its traceback), 2 (bad input), 3 (a store stayed down), 130 (Ctrl-C).
INTERNAL_ERROR = 4


def _save_traceback() -> Path:
    """The current exception's traceback, written to the cache folder; its path."""
    import tempfile
    import time
    import traceback

    from autotune.stores._schema import cache_dir

    text = f"autotune {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}"
    for folder in (cache_dir() / "errors", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"autotune-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
            path.write_text(text)
            return path
        except OSError:
            continue
    raise


class Group(click.Group):
    """Turns bad input into exit status 2, Ctrl-C into 130, and an error of autotune's own into
    ``INTERNAL_ERROR``, each with one clear line."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own: usage errors say themselves (exit 2)
        except ConfigError as exc:
            click.echo(f"autotune: error: {exc}", err=True)
            sys.exit(2)
        except StoreDown as exc:
            click.echo(
                f"autotune: stopped: {exc}. Finished results are kept in the store folder; once the "
                "store works again, run the same command to resume",
                err=True,
            )
            sys.exit(3)
        except KeyboardInterrupt:
            click.echo("autotune: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            click.echo(
                f"autotune: internal error (a bug in autotune, not in your code or input): "
                f"{type(exc).__name__}: {first}; the traceback is in {_save_traceback()}: please "
                "report it with that file",
                err=True,
            )
            sys.exit(INTERNAL_ERROR)
