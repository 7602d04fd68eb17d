"""MLflow: an experiment per study, a parent run per study, a child run per trial.

Logged through ``MlflowClient`` with explicit run ids: the fluent API's active-run
stack is thread-local, and optuna-integration's MLflowCallback is deprecated and
records pruned and failed trials as FINISHED.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from autotune.core._config import ConfigError
from autotune.core._outcome import Outcome, clip
from autotune.stores._stores import STORE_PATIENCE_S, Patience, first_line

T = TypeVar("T")

#: MLflow run status per outcome: a pruned or interrupted trial was stopped by
#: us, the failures failed; complete and diverged ran their whole budget.
RUN_STATUS = {
    Outcome.COMPLETE: "FINISHED",
    Outcome.DIVERGED: "FINISHED",
    Outcome.PRUNED: "KILLED",
    Outcome.OOM_GPU: "FAILED",
    Outcome.OOM_HOST: "FAILED",
    Outcome.TIMEOUT: "FAILED",
    Outcome.CRASHED: "FAILED",
    Outcome.DISTORTED: "FAILED",
    Outcome.INTERRUPTED: "KILLED",
}

_PARAM_LIMIT = 6000  # MLflow's param value length limit (3.x)
_TAG_LIMIT = 4000  # of a tag's value we use for reasons (MLflow 3 allows 8000)


def tracking_uri(store: Path, explicit: str | None = None) -> str:
    """``--tracking-uri``, else ``MLFLOW_TRACKING_URI``, else SQLite in the store folder."""
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store.resolve()}/mlflow.db"


def runs_url(base: str, experiment_id: str) -> str:
    """A study's runs page listing every trial's run, fastest first: ordered by a metric, MLflow's
    runs page lists child runs flat instead of folded under their parent run.

    >>> runs_url("http://127.0.0.1:5000", "1")
    'http://127.0.0.1:5000/#/experiments/1/runs?orderByKey=metrics.%60samples_per_s%60&orderByAsc=false'
    """
    return f"{base}/#/experiments/{experiment_id}/runs?orderByKey=metrics.%60samples_per_s%60&orderByAsc=false"


def runs_pages(uri: str, base: str) -> list[str]:
    """One line per study in the store at ``uri``: its runs page with every trial listed
    (``runs_url``); none where the store cannot be read."""
    from mlflow.tracking import MlflowClient

    try:
        experiments = MlflowClient(uri).search_experiments()
    except Exception:  # noqa: BLE001 - the UI still serves the store; the line is a courtesy
        return []
    return [
        f"  study {e.name}, every trial fastest first: {runs_url(base, e.experiment_id)}"
        for e in experiments
        if e.name != "Default"
    ]


class Tracker:
    """Writes a study's runs to one MLflow tracking store.

    Once it has answered, a store that stops answering is waited for: each call is
    retried while the store has failed for less than ``patience`` seconds, then
    ``StoreDown`` is raised (``autotune.stores._stores``).

    Args:
        uri: The tracking URI.
        artifact_root: Where a new experiment keeps artifacts when the store is a
            local database (a server chooses its own).
        patience: Seconds a store may keep failing (``--store-patience``).
        on_wait: Told when the store stops and starts answering.
    """

    def __init__(
        self,
        uri: str,
        artifact_root: Path | None = None,
        patience: float = STORE_PATIENCE_S,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        # MLflow's own retries off: ours (Patience) know which failures to wait out, and for how long.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        import logging

        from mlflow import MlflowClient

        from autotune.stores._schema import seed_store

        # MLflow logs its schema migrations at INFO; the study's own output says enough.
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        self.uri = uri
        self._artifact_root = artifact_root
        # Tuners sharing a new local SQLite store race through MLflow's schema
        # migrations ("duplicate column name"): the loser retries once the winner is done.
        attempts = 5 if uri.startswith("sqlite:") else 1
        seed_store(uri)  # a new local store: a copy of an empty one, not MLflow's migrations
        for attempt in range(attempts):
            try:
                self.client = MlflowClient(tracking_uri=uri)  # a local store is created here
                self.client.search_experiments(max_results=1)
                break
            except Exception as exc:  # any failure here means: unusable before any trial ran
                if attempt + 1 < attempts:
                    time.sleep(1.0 + attempt)
                    continue
                raise ConfigError(f"tracking store {uri!r} cannot be reached: {first_line(exc)}") from None
        self._patience = Patience(f"the tracking store {uri}", patience, on_wait=on_wait)

    def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One write or read of the store, waited out while it is down (see ``Patience``)."""
        return self._patience.call(method, *args, **kwargs)

    def experiment(self, name: str) -> str:
        """The id of the experiment named ``name``, created on first use.

        Tuners starting together race to create it: the store's unique name lets
        one win, and the others read the winner's.
        """
        found = self._call(self.client.get_experiment_by_name, name)
        if found is not None:
            return found.experiment_id
        experiment_id = self._create_experiment(name)
        # MLflow 3's UI opens an experiment of unknown kind in its GenAI view; this one is training runs
        self._call(self.client.set_experiment_tag, experiment_id, "mlflow.experimentKind", "custom_model_development")
        return experiment_id

    def _create_experiment(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        location = None
        if self._artifact_root is not None and not self.uri.startswith(("http", "databricks")):
            location = (self._artifact_root / name).resolve().as_uri()
        try:
            return self._call(self.client.create_experiment, name, artifact_location=location)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            found = self._call(self.client.get_experiment_by_name, name)
            assert found is not None  # (creating it said it exists)
            return found.experiment_id

    def parent_run(self, experiment_id: str, run_id: str | None, tags: Mapping[str, str]) -> str:
        """Reopen the study's parent run, or start it."""
        if run_id is not None:
            self._call(self.client.update_run, run_id, status="RUNNING")
            return run_id
        return self._call(
            self.client.create_run, experiment_id, tags=dict(tags), run_name=tags.get("autotune.study")
        ).info.run_id

    def start_trial(
        self, experiment_id: str, parent_id: str, number: int, params: Mapping[str, Any], tags: Mapping[str, str]
    ) -> str:
        """Start a trial's child run with its knob values as params."""
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        run = self._call(
            self.client.create_run,
            experiment_id,
            run_name=f"trial-{number}",
            tags={MLFLOW_PARENT_RUN_ID: parent_id, "autotune.trial": str(number), **tags},
        )
        self.log_params(run.info.run_id, params)
        return run.info.run_id

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        self._call(self.client.log_batch, run_id, params=[Param(k, _text(v)) for k, v in params.items()])

    def end_trial(
        self,
        run_id: str,
        outcome: Outcome,
        reason: str,
        metrics: Mapping[str, float],
        series: Mapping[str, list[float]],
        params: Mapping[str, Any],
        log_path: Path | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """Log a finished trial in one batch (one REST call against a server) and close it."""
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        rows = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
        rows += [Metric(k, float(v), now, step) for k, values in series.items() for step, v in enumerate(values)]
        self._call(
            self.client.log_batch,
            run_id,
            metrics=rows,
            params=[Param(k, _text(v)) for k, v in params.items()],
            tags=[
                RunTag("autotune.outcome", outcome.value),
                RunTag("autotune.reason", clip(reason, _TAG_LIMIT)),
                *(RunTag(k, clip(v, _TAG_LIMIT)) for k, v in (tags or {}).items()),
            ],
        )
        if log_path is not None and log_path.exists():
            self._call(self.client.log_artifact, run_id, str(log_path))
        self._call(self.client.set_terminated, run_id, status=RUN_STATUS[outcome])

    def tag_runs(self, tags: Mapping[str, Mapping[str, str]]) -> None:
        """Set tags on runs: run id to its tags (one call each; ``mlflow.runName`` renames it)."""
        from mlflow.entities import RunTag

        for run_id, these in tags.items():
            self._call(self.client.log_batch, run_id, tags=[RunTag(k, v) for k, v in these.items()])

    def kill(self, run_id: str, reason: str | None = None, log_path: Path | None = None) -> None:
        """Close a run that did not finish (interrupted, or left RUNNING by a killed tuner)."""
        from mlflow.entities import RunTag

        if reason is not None:
            self._call(
                self.client.log_batch,
                run_id,
                tags=[
                    RunTag("autotune.outcome", Outcome.INTERRUPTED.value),
                    RunTag("autotune.reason", clip(reason, _TAG_LIMIT)),
                ],
            )
        if log_path is not None and log_path.exists():
            self._call(self.client.log_artifact, run_id, str(log_path))
        self._call(self.client.set_terminated, run_id, status="KILLED")

    def delete_runs(self, experiment_id: str, parent_id: str) -> None:
        """Delete a parent run and its children (MLflow's deleted stage: gone from the UI and searches)."""
        children = self._call(
            self.client.search_runs,
            [experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{parent_id}'",
            max_results=1000,
        )
        for run_id in [r.info.run_id for r in children] + [parent_id]:
            self._call(self.client.delete_run, run_id)

    def finish_parent(
        self,
        run_id: str,
        artifacts: Mapping[str, str],
        metrics: Mapping[str, float],
        images: Mapping[str, bytes] | None = None,
        status: str = "FINISHED",
        tags: Mapping[str, str] | None = None,
        files: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Attach text artifacts, images (PNG bytes, by artifact name), files (by artifact folder), summary
        metrics and tags to the parent run and close it."""
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        self._call(
            self.client.log_batch,
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
            tags=[RunTag(k, v) for k, v in (tags or {}).items()],
        )
        for name, text in artifacts.items():
            self._call(self.client.log_text, run_id, text, name)
        for name, data in (images or {}).items():
            self._log_bytes(run_id, data, name)
        for folder, paths in (files or {}).items():
            for path in paths:
                self._call(self.client.log_artifact, run_id, path, folder)
        self._call(self.client.set_terminated, run_id, status=status)

    def _log_bytes(self, run_id: str, data: bytes, name: str) -> None:
        """One artifact of these bytes at ``name`` (MLflow's client logs files, text or figures)."""
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / Path(name).name
            path.write_bytes(data)
            parent = str(Path(name).parent)
            self._call(self.client.log_artifact, run_id, str(path), None if parent == "." else parent)


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:_PARAM_LIMIT]
