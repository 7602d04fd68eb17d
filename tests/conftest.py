"""Shared test setup: MLflow telemetry off, and GPU tests skipped where there is no CUDA."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Imported so that every test sees the real-server fixtures (PostgreSQL, MLflow server).
from servers import mlflow_server, own_mlflow_server, postgres, postgres_server  # noqa: F401
from tuners import launch  # noqa: F401  (a fixture: tuners of one study, started and stopped)

# Set at import time, before any test imports mlflow (its telemetry reads this).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the collection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the tests (tests/lib/order.py: the long files dealt out to the pytest-xdist processes),
    and skip ``@pytest.mark.gpu`` tests cleanly when torch sees no CUDA device."""
    from order import deal

    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    order = deal([item.path.stem for item in items], [item.path.parent.name for item in items], workers)
    items[:] = [items[i] for i in order]
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return  # do not pay for importing torch when no GPU test was collected
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; torch.cuda.is_available() is False")
    for item in gpu_items:
        item.add_marker(skip)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests that train in the pytest process itself (the runners' production runs, the adaptive
    recipes) do so on one intra-op thread, where torch has been imported (the trials, processes
    of their own, set theirs as the product does). On two, beside the suite's other processes,
    a parallel region's threads wait on each other: the runners' four production runs took 23 s
    of CPU and 20 s beside a CPU hog on one core, and 11.5 s and 12.7 s on one."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


#: Every process a test starts inherits this variable (with the test's own value),
#: including workers in their own sessions and orphans reparented to PID 1.
TAG = "AUTOTUNE_TEST_TAG"


def tagged(value: str, variable: str = TAG) -> list:
    """Live (non-zombie) processes whose environment carries ``variable=value`` (by default
    this test's tag; a trial's tag is ``autotune.tuner._watch.TRIAL_TAG_ENV``), the commands forked from
    a template included (each writes its environment where ``/proc/PID/environ`` reads: forked_cli)."""
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


@pytest.fixture(scope="session", autouse=True)
def own_host():
    """Each test process is a host of its own to the tuners' turn-taking (``HostRegistry``): the
    tuners of one host hold its CPUs one trial at a time, whatever their study, so with one folder
    for the whole suite every study of the suite's processes waited for the others' trials, and a
    trial that sleeps (a slow read, a server down) held the other processes idle too. Tests of
    tuners sharing a host give them a folder of their own (test_many_tuners, test_host_registry);
    a test's own tuners still share its process's folder and take turns."""
    import tempfile

    from autotune.tuner._tuners import HOST_DIR_ENV

    with tempfile.TemporaryDirectory(prefix="autotune-host-") as folder, pytest.MonkeyPatch.context() as patch:
        patch.setenv(HOST_DIR_ENV, folder)
        yield Path(folder)


@pytest.fixture(scope="session")
def warm():
    """A warm worker, as a study's slot has, one per test process: the trials of the tests that
    take it are forked from it, each 2-3 s of a new interpreter and torch less (on the 2-core CI
    machine, about 3 s of CPU for each trial that started cold). It starts without this test's
    tag, so that it is no test's leftover; tests of what a trial leaves behind, and of the warm
    worker itself, start their own (its trials share its tag). It is itself forked from the
    suite's template of warm workers (tests/lib/forked_cli.py) where it can be."""
    import forked_cli
    from autotune.machine._launch import new_tag

    worker = forked_cli.warm_worker(
        {k: v for k, v in os.environ.items() if k not in (TAG, "PYTORCH_CUDA_ALLOC_CONF")}, new_tag()
    )
    yield worker
    worker.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Every study a test in tests/study runs to its end is held to issue 62's rule
    (tests/lib/lost_values.py): no second trial on a knob value that ran under half the baseline's
    speed, unless the study says why. Checked once the test's body passed (a failed test's own
    failure says more), on the store folders under its ``tmp_path`` (a ``--storage`` is checked as
    its run ends: tests/lib/helpers.py, tuners.py): a new study test is checked without asking."""
    result = yield
    if item.path.parent.name == "study":
        import lost_values

        lost_values.check_journals(getattr(item, "funcargs", {}).get("tmp_path"))
    return result


@pytest.fixture(autouse=True)
def environment_restored():
    """Each test leaves this process's environment as it found it: code under test may set
    variables (a Recipe applies cuda_alloc_conf), and later tests start processes from it."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
