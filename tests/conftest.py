"""Shared test setup: MLflow telemetry off, and GPU tests skipped where there is no CUDA."""

from __future__ import annotations

import os

import pytest

# Imported so that every test sees the real-server fixtures (PostgreSQL, MLflow server).
from servers import mlflow_server, own_mlflow_server, postgres, postgres_server  # noqa: F401

# Set at import time, before any test imports mlflow (its telemetry reads this).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``@pytest.mark.gpu`` tests cleanly when torch sees no CUDA device."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return  # do not pay for importing torch when no GPU test was collected
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; torch.cuda.is_available() is False")
    for item in gpu_items:
        item.add_marker(skip)


#: Every process a test starts inherits this variable (with the test's own value),
#: including workers in their own sessions and orphans reparented to PID 1.
TAG = "AUTOTUNE_TEST_TAG"


def tagged(value: str, variable: str = TAG) -> list:
    """Live (non-zombie) processes whose environment carries ``variable=value`` (by default
    this test's tag; a trial's tag is ``autotune._watch.TRIAL_TAG_ENV``)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(variable) == value and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture(autouse=True)
def no_process_left_behind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """After every test, no process it started is alive (checked with psutil)."""
    import uuid

    import psutil

    value = f"{request.node.name}-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(TAG, value)
    yield value
    left = tagged(value)
    if left:  # a SIGKILL is sent, not instant: give the kernel a moment
        psutil.wait_procs(left, timeout=3)
        left = tagged(value)
    for proc in left:
        proc.kill()
    assert not left, f"processes left alive by the test: {[(p.pid, p.name()) for p in left]}"


@pytest.fixture(autouse=True)
def environment_restored():
    """Each test leaves this process's environment as it found it: code under test may set
    variables (a Recipe applies cuda_alloc_conf), and later tests start processes from it."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
