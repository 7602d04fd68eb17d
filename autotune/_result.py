"""What a study found, as ``autotune.tune`` returns it and ``show`` prints it: a ``Result``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from autotune.production._recipe import Recipe
    from autotune.stores._records import TrialRow
    from autotune.tuner._standing import Standing


@dataclasses.dataclass(frozen=True)
class Result:
    """What a study found: its winner, the speedup, every trial.

    The same figures as the ``run`` summary, ``show`` and the export header: a
    config's median over its runs (its confirmations), the baseline 1.00x.

    Attributes:
        study: The study's name.
        findings: The summary's lines: the winner and its speedup, how sure, the bottleneck.
        interrupted_by: The signal that stopped the study early (``"SIGINT"``), or None.
    """

    study: str
    findings: tuple[str, ...]
    interrupted_by: str | None
    _standing: Standing = dataclasses.field(repr=False)
    _export: str | None = dataclasses.field(repr=False)

    @classmethod
    def of(cls, study: optuna.Study, interrupted_by: str | None = None, standing: Standing | None = None) -> Result:
        """The result of a study as its storage holds it now (or as ``standing`` read it)."""
        from autotune.tuner._export_text import export_text
        from autotune.tuner._standing import findings, read_standing

        standing = standing or read_standing(study)
        text = export_text(study, standing) if standing.best is not None else None
        return cls(study.study_name, tuple(findings(standing)), interrupted_by, standing, text)

    @property
    def winner(self) -> Recipe | None:
        """The winning config as ``autotune.load`` gives it from the export (None: no winner)."""
        if self._export is None:
            return None
        import yaml

        from autotune.production._export import recipe_from_mapping

        return recipe_from_mapping(yaml.safe_load(self._export), f"study {self.study}'s export")

    @property
    def config(self) -> dict[str, Any]:
        """The winner's knobs as it ran them (empty: no winner)."""
        best = self._standing.best
        return dict(best.config) if best else {}

    @property
    def samples_per_s(self) -> float | None:
        """The winner's samples/s: the median of its runs."""
        win = self._standing.decision.winner
        return win.median if win and win.rates else None

    @property
    def baseline_samples_per_s(self) -> float | None:
        """The baseline's (your code as written) samples/s: the median of its runs."""
        base = self._standing.base
        return base.median if base and base.rates else None

    @property
    def run_s(self) -> float | None:
        """The winner's whole run in seconds, process start to exit, the median of its runs (None:
        the study did not run the code whole: it ran past ``whole_run``)."""
        win = self._standing.decision.winner
        return win.run_s if win else None

    @property
    def baseline_run_s(self) -> float | None:
        """The code as written's whole run in seconds, the median of its runs (None: not run whole)."""
        base = self._standing.base
        return base.run_s if base else None

    @property
    def speedup(self) -> float | None:
        """The winner's samples/s over the baseline's (None: either has no believed figure)."""
        win = self._standing.decision.winner
        return self._standing.speedup(win) if win else None

    @property
    def spread(self) -> float | None:
        """± on the winner's figure: half the spread of its runs (of its windows, when it ran once)."""
        win = self._standing.decision.winner
        if win is None:
            return None
        spread = win.spread if win.confirmed else win.lead.metrics.get("samples_per_s_spread", 0.0)
        return spread / 2

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every trial as a plain dict (``show --json`` prints these)."""
        return [row_dict(r, self._standing) for r in self._standing.rows]

    def table(self) -> str:
        """Every trial as a plain-text table: number, outcome, samples/s, speedup, the knobs
        that varied, the reason (no pandas needed)."""
        from autotune.core._knobs import show_value
        from autotune.stores._records import kind_label

        rows = self._standing.rows
        keys = self._standing.varied_knobs()
        best = self._standing.best
        head = ["#", "outcome", "samples/s", "speedup", *keys, "reason"]
        body = [
            [
                f"{r.number}{' *' if best and r.number == best.number else ''}",
                r.outcome + (f" ({kind_label(r)})" if kind_label(r) else ""),
                f"{r.samples_per_s:,.0f}" if r.samples_per_s else "-",
                f"{r.speedup:.2f}x" if r.speedup else "-",
                *(show_value(r.config.get(k, "-")) for k in keys),
                _first_line(r.doubt or r.reason),
            ]
            for r in rows
        ]
        widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
        return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [head, *body])

    def as_dict(self) -> dict[str, Any]:
        """The study as plain data: its findings, the winner's figures, every trial (``show --json``)."""
        best = self._standing.best
        return {
            "study": self.study,
            "findings": list(self.findings),
            "winner": best.number if best else None,
            "speedup": self.speedup,
            "spread": self.spread,
            "samples_per_s": self.samples_per_s,
            "baseline_samples_per_s": self.baseline_samples_per_s,
            "run_s": self.run_s,
            "baseline_run_s": self.baseline_run_s,
            "config": self.config,
            "export": self._export,
            "trials": self.rows,
        }

    def csv(self) -> str:
        """Every trial as CSV: its figures, then a column per knob (as it ran), then the reason."""
        import csv
        import io

        from autotune.core._knobs import KNOBS

        rows = self.rows
        figures = [
            "number",
            "kind",
            "of",
            "baseline",
            "winner",
            "outcome",
            "samples_per_s",
            "speedup",
            "doubt",
            "data_wait",
            "foreign_cpu",
            "bottleneck",
            "efficiency",
        ]
        knobs = [k for k in KNOBS if any(k in r["config"] for r in rows)]
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([*figures, *knobs, "reason"])
        for r in rows:
            writer.writerow(
                [
                    *("" if r[f] is None else r[f] for f in figures),
                    *("" if r["config"].get(k) is None else r["config"][k] for k in knobs),
                    r["reason"],
                ]
            )
        return out.getvalue()

    def export(self, path: str | Path) -> Path:
        """Write the winner as the YAML ``autotune.load`` reads; return the path.

        Raises:
            ValueError: the study has no winner (its first finding says why).
        """
        if self._export is None:
            raise ValueError(f"study {self.study} has nothing to export: {self.findings[0]}")
        path = Path(path)
        path.write_text(self._export)
        return path

    def __str__(self) -> str:
        return f"study {self.study}: " + "\n  ".join(self.findings)


def row_dict(row: TrialRow, standing: Standing) -> dict[str, Any]:
    """One trial as plain data: what ``Result.rows`` and ``show --json`` give. ``kind`` says why it
    ran (``baseline``, ``sampled``, ``confirm``, ``remeasure``, ``retry``, ``more_workers``,
    ``smaller_batch``), ``of`` the trial whose config it runs again or starts from, ``baseline``
    whether it runs the code as written (the baseline or a re-run of it)."""
    bound = row.bottleneck
    best = standing.best
    return {
        "number": row.number,
        "kind": row.kind.value,
        "of": row.of,
        "baseline": row.baseline,
        "outcome": row.outcome,
        "reason": row.reason,
        "winner": bool(best and row.number == best.number),
        "samples_per_s": row.samples_per_s,
        "speedup": row.speedup,
        "doubt": row.doubt,
        "data_wait": row.metrics.get("data_wait_frac"),
        "foreign_cpu": row.metrics.get("foreign_cpu"),
        "bottleneck": bound.verdict if bound else None,
        "efficiency": bound.efficiency if bound else None,
        "config": dict(row.config),
        "sampled": dict(row.sampled),
        "metrics": dict(row.metrics),
    }


def _first_line(text: str | None) -> str:
    from autotune.core._outcome import headline

    return headline(text or "")
