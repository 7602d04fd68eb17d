"""Shared test setup: MLflow telemetry off, and GPU tests skipped where there is no CUDA."""

from __future__ import annotations

import os

import pytest

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
