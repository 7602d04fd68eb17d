"""One trial run to its end in a real worker process (autotune.tuner._watch): outcomes, limits, ceilings, leftovers."""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest
from conftest import tagged

from autotune import Config, Outcome
from autotune.core._ceilings import CACHED_BATCHES, bottleneck, ceiling_key
from autotune.core._guard import LossReference
from autotune.core._kinds import Kind
from autotune.core._knobs import Part
from autotune.machine._launch import TRIAL_TAG_ENV, Budget, TrialSpec
from autotune.machine._monitor import Monitor
from autotune.machine._reap import kill_orphans, sweep_orphans
from autotune.tuner._training_shape import shape_of, trial_budget
from autotune.tuner._watch import run_trial
from helpers import FIXTURES

FIXTURE = FIXTURES / "tiny_train.py"
ESCAPING = FIXTURE.with_name("escaping_train.py")
#: Short enough for ~4 s per trial (2.5 s of it importing torch in the worker); the
#: ceilings have their own tests.
FAST = Budget(warmup_s=0.2, window_s=0.3, windows=2, ceiling_windows=0)


class Watch:
    """on_event callback: keeps the events and every process the worker started."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.times: dict[str, float] = {}  # when each kind of event last arrived
        self.pid: int | None = None
        self.tag: str | None = None
        self.children: set[int] = set()

    def __call__(self, event: dict) -> None:
        self.events.append(event)
        self.times[event["event"]] = time.time()
        if event["event"] == "spawned":
            self.tag = event["tag"]
        if event["event"] == "started":
            self.pid = event["pid"]
        if self.pid is not None:
            try:
                self.children |= {p.pid for p in psutil.Process(self.pid).children(recursive=True)}
            except psutil.NoSuchProcess:
                pass

    def kinds(self) -> list[str]:
        """Event kinds in order, without the once-a-second progress beats."""
        return [e["event"] for e in self.events if e["event"] != "progress"]


def trial(
    tmp_path: Path,
    func: str,
    config: Config = Config(),
    budget: Budget = FAST,  # noqa: B008
    known: dict | None = None,
    fixture: Path = FIXTURE,
    **kwargs,
):
    watch = Watch()
    spec = TrialSpec(target=f"{fixture}:{func}", config=config, device="cpu", budget=budget, known_ceilings=known or {})
    result = run_trial(spec, tmp_path / "logs" / f"{func}.log", on_event=watch, **kwargs)
    return result, watch


def survivors(watch: Watch) -> list[psutil.Process]:
    """Live processes that are the worker, a child it had, or in its process group.

    Zombies are left out: a killed orphan is reparented to PID 1, which reaps it in its
    own time; it runs nothing and holds no memory.
    """
    assert watch.pid is not None, "the worker never reported its pid"

    def alive() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                ours = proc.pid == watch.pid or proc.pid in watch.children or os.getpgid(proc.pid) == watch.pid
                if ours and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (psutil.Error, ProcessLookupError):
                continue
        return found

    left = alive()
    if left:  # SIGKILL is sent, not instantaneous: let the kernel finish the job
        psutil.wait_procs(left, timeout=2)
        left = alive()
    return left


def test_complete_trial(tmp_path: Path) -> None:
    config = Config(batch_size="2x", lr_scaling="linear", prefetch="thread")
    result, watch = trial(tmp_path, "train", config)  # cold: its spans include torch's import
    assert (result.outcome, result.reason) == (Outcome.COMPLETE, "")
    assert len(result.windows) == 2
    assert watch.kinds()[:5] == ["spawned", "started", "loaded", "resolved", "warmup"]
    assert watch.kinds()[-3:] == ["window", "window", "end"]
    warmup = next(e for e in watch.events if e["event"] == "warmup")
    assert warmup["samples_seen"] == warmup["samples"] == 32 * warmup["steps"]
    assert 0 < warmup["loss"] < 10
    seen = warmup["samples_seen"]
    for window in result.windows:
        seen += window["samples"]
        assert window["samples_seen"] == seen  # counted from the first batch, warmup included
        assert window["samples"] == 32 * window["steps"]  # batch 2 * 16, drop_last
        assert window["steps"] >= FAST.min_window_steps
        assert window["seconds"] >= FAST.window_s
        assert 0 < window["loss"] < 10
    rates = [w["samples"] / w["seconds"] for w in result.windows]
    assert result.metrics["samples_per_s"] == pytest.approx(statistics.median(rates))
    assert result.metrics["samples_per_s"] > 0
    assert result.metrics["ram_peak"] > 0
    # the loop's thread: busy most of the time on a CPU (it computes), no GPU roof here
    assert all(0 < w["main_thread_s"] <= w["seconds"] * 1.05 for w in result.windows)
    assert 0 < result.metrics["main_thread_busy"] <= 1.05 and "main_roof" not in result.metrics
    assert result.resolved["batch_size"] == 32
    assert result.resolved["lr_scaling"] == "linear"
    assert result.resolved["prefetch"] == "thread"
    assert result.resolved["num_workers"] == 0
    assert "prefetch_factor" not in result.resolved  # inactive without workers
    assert result.base_batch_size == 16
    assert result.lr == pytest.approx(0.2)  # 0.1 * 32/16
    assert len(result.series["window_samples_per_s"]) == 2
    assert [p[0] for p in result.losses] == [warmup["samples"] / 2] + [
        w["samples_seen"] - w["samples"] / 2 for w in result.windows
    ]
    assert result.log_path.is_file()
    # the fixed cost around the measuring, span by span, adds up
    spans = [result.metrics[k] for k in ("spawn_s", "import_s", "setup_s", "teardown_s")]
    # timed from the worker's own stamps, not from when the tuner read each event
    stamps = [next(e for e in watch.events if e["event"] == kind)["at"] for kind in ("started", "loaded", "resolved")]
    assert stamps == sorted(stamps)
    assert result.metrics["import_s"] == pytest.approx(stamps[1] - stamps[0])
    assert result.metrics["setup_s"] == pytest.approx(stamps[2] - stamps[1])
    assert all(s >= 0 for s in spans) and result.metrics["import_s"] > 0.1  # torch at least
    assert result.metrics["overhead_s"] == pytest.approx(sum(spans))
    assert result.metrics["overhead_s"] < result.metrics["duration_s"]
    assert result.ceilings == []  # FAST measures none
    assert not survivors(watch)


#: FAST, then both ceilings over 2 windows each.
CEILINGS = dataclasses.replace(FAST, ceiling_windows=2)


def test_ceilings_follow_the_windows_compute_then_loader(tmp_path: Path, warm) -> None:
    result, watch = trial(tmp_path, "train_compute_bound", budget=CEILINGS, warm=warm)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert watch.kinds()[-7:] == ["window", "window", "ceiling", "ceiling", "ceiling", "ceiling", "end"]
    events = [e for e in watch.events if e["event"] == "ceiling"]
    assert [e["part"] for e in events] == ["compute", "compute", "loader", "loader"]
    by_part = {c["part"]: c for c in result.ceilings}
    for part in (Part.COMPUTE, Part.LOADER):
        entry = by_part[part.value]
        assert entry["key"] == ceiling_key(part, result.resolved)
        rates = [e["samples"] / e["seconds"] for e in events if e["part"] == part.value]
        assert entry["samples_per_s"] == pytest.approx(statistics.median(rates))
        assert entry["windows"] == 2
    # compute windows are as long as the trial's; a loader this fast may close at a quarter
    assert all(e["seconds"] >= CEILINGS.window_s for e in events if e["part"] == "compute")
    assert all(e["seconds"] >= CEILINGS.window_s / 4 for e in events if e["part"] == "loader")
    # The compute ceiling replays the last batches of the windows, in turn; the loader's
    # runs no user step (the fixture prints each batch's first sample index).
    seen = [int(line.split()[1]) for line in result.log_path.read_text().splitlines() if line.startswith("batch ")]
    replays = sum(e["steps"] for e in events if e["part"] == "compute")
    cached = seen[-replays - CACHED_BATCHES : -replays]
    assert seen[-replays:] == [cached[i % CACHED_BATCHES] for i in range(replays)]


def test_a_known_ceiling_is_not_measured_again(tmp_path: Path, warm) -> None:
    first, _ = trial(tmp_path, "train", budget=CEILINGS, warm=warm)
    compute = next(c for c in first.ceilings if c["part"] == "compute")
    again, watch = trial(tmp_path, "train", budget=CEILINGS, known={"compute": [compute["key"]]}, warm=warm)
    assert again.outcome is Outcome.COMPLETE
    assert [c["part"] for c in again.ceilings] == ["loader"]
    assert watch.kinds()[-4:] == ["window", "ceiling", "ceiling", "end"]


@pytest.mark.parametrize(
    "func, verdict",
    [
        ("train_loader_bound", "data-bound"),  # 2 ms per item, a tiny linear model
        ("train_compute_bound", "compute-bound"),  # batches from memory, a 4.7 M-parameter MLP
    ],
)
def test_the_bottleneck_verdict_on_real_trials(tmp_path: Path, func: str, verdict: str, warm) -> None:
    result, _ = trial(tmp_path, func, budget=CEILINGS, warm=warm)
    assert result.outcome is Outcome.COMPLETE, result.reason
    # its windows taken together: their samples over their seconds (what a bursty config ranks on)
    together = sum(w["samples"] for w in result.windows) / sum(w["seconds"] for w in result.windows)
    assert result.metrics["samples_per_s_all"] == together
    ceilings = {c["part"]: c["samples_per_s"] for c in result.ceilings}
    bound = bottleneck(
        result.metrics["samples_per_s"], result.metrics["data_wait_frac"], ceilings["compute"], ceilings["loader"]
    )
    assert bound.verdict == verdict, bound.why
    if verdict == "data-bound":
        # the loader alone cannot feed the model: the loop runs at the loader's pace. Only
        # a factor 2: with a busy core beside it, this tiny model's step (torch's 2 threads
        # contending) has measured 15x slower, 1.3 k samples/s against 450 from the loader.
        assert ceilings["loader"] < ceilings["compute"] / 2
        # (1.3: the ceiling is one window measured alone, and on the loaded CI machine a sleeping
        # loader's window read 381 samples/s where the trial's windows read 447)
        assert result.metrics["samples_per_s"] <= ceilings["loader"] * 1.3
        assert "the loader alone makes" in bound.why


@pytest.mark.parametrize(
    "func, low, high",
    [
        # workers burning 1 ms of CPU an item: their CPU counts (the worker process alone
        # would show almost none), plus a little for collation and the hand-over
        ("train_busy_loader", 0.0009, 0.004),
        # workers sleeping 2 ms an item: waiting is not CPU
        ("train_loader_bound", 0.0, 0.001),
    ],
)
def test_the_loader_ceiling_counts_its_workers_cpu(tmp_path: Path, func: str, low: float, high: float, warm) -> None:
    from autotune.machine._probe import usable_cpus

    result, _ = trial(tmp_path, func, budget=CEILINGS, warm=warm)
    assert result.outcome is Outcome.COMPLETE, result.reason
    loader = next(c for c in result.ceilings if c["part"] == "loader")
    assert low <= loader["cpu_per_sample"] <= high, loader
    assert loader["cpus"] == usable_cpus()
    compute = next(c for c in result.ceilings if c["part"] == "compute")
    assert compute["cpu_per_sample"] > 0


def test_crashing_function(tmp_path: Path, warm) -> None:
    result, watch = trial(tmp_path, "train_raises", warm=warm)
    assert result.outcome is Outcome.CRASHED
    assert result.reason.splitlines()[-1] == "ValueError: boom from the user's loop"
    assert "tiny_train.py" in result.reason  # the user's frame is in the traceback
    assert result.windows == []


def test_nan_loss_diverges_at_once(tmp_path: Path, warm) -> None:
    # The loss is nan from the first step: the warmup's loss read ends the trial, before
    # any measured window.
    result, watch = trial(tmp_path, "train_nan", budget=Budget(warmup_s=0.2, window_s=5, windows=4), warm=warm)
    assert result.outcome is Outcome.DIVERGED
    assert result.reason.startswith("loss is nan after ")
    assert result.windows == []
    assert result.metrics["duration_s"] < 20  # not 4 windows of 5 s after a warmup


def test_loss_worse_than_the_reference_diverges(tmp_path: Path, warm) -> None:
    # A baseline whose loss fell from 0.7 to 0.001 within 100 samples: this trial's real
    # loss (about 0.1 after thousands of samples) is (0.1 - 0.001) / (0.1 * 0.7) > 100% worse.
    reference = [(0.0, 0.7), (100.0, 0.001)]
    # (a config of its own: a run of the code as written against its own baseline is judged on nan/inf only)
    result, _ = trial(tmp_path, "train", Config(num_workers=0), against=LossReference(reference), warm=warm)
    assert result.outcome is Outcome.DIVERGED
    assert "over the same samples" in result.reason
    assert result.metrics["samples_per_s"] > 0  # its speed is kept: infeasible, not unmeasured


def test_a_larger_batch_is_judged_on_its_steps_and_its_samples_to_the_baselines_loss_are_kept(
    tmp_path: Path, warm
) -> None:
    """4x the batch without lr scaling learns 4x less per sample (lr_train.py: the same per
    step). Budgeted as the study budgets it (``trial_budget``: the baseline learns until its loss
    has fallen, a sampled trial ends at its marks times the batches' ratio, the same steps), it
    measures 4x the baseline's samples whatever the host's load. At the same samples (its
    warmup's curve counted) its loss is far worse, which is kept and shown; at the same steps
    it trains as the baseline does, so it is complete, and the samples it took to the baseline's
    loss (about 4x) rank it. (Measured in seconds, a trial slowed by the suite's load covered
    fewer samples than the baseline took to its own loss, and no ratio was recorded.)"""
    lr_train = FIXTURE.with_name("lr_train.py")
    # Its windows end at the samples they reach on a quiet host (5 ms a step of 8): judged on
    # 512-1,024 however loaded the host is (ending short of 1,024, it judged on 256-512, where
    # its windows start: its loss "flat" there, no time to it).
    learning = dataclasses.replace(trial_budget(FAST, Kind.BASELINE, None, 0.5), marks=(320, 800, 1280))
    base, _ = trial(tmp_path, "train", budget=learning, fixture=lr_train, warm=warm)
    assert base.outcome is Outcome.COMPLETE, base.reason
    shape = shape_of(base)  # type: ignore[arg-type]  # a TrialResult has a row's shape and metrics
    assert shape is not None and shape.step_samples == 8

    def larger(lr_scaling: str):
        config = Config(batch_size="4x", lr_scaling=lr_scaling)
        budget = trial_budget(FAST, Kind.SAMPLED, shape, 0.5, batch_size="4x")
        against = LossReference(base.losses, base.curve)
        return trial(tmp_path, "train", config, budget=budget, fixture=lr_train, against=against, warm=warm)

    fast, watch = larger("none")
    warmup = next(e for e in watch.events if e["event"] == "warmup")
    assert warmup["curve"][-1][1] == warmup["samples_seen"]
    assert warmup["samples_seen"] >= 4 * shape.marks[0]  # its warmup: the baseline's steps
    assert fast.outcome is Outcome.COMPLETE, fast.reason
    judged = fast.judged  # at the same samples, its warmup's pieces in: far worse, kept
    assert judged is not None and judged.excess > 0.5 and fast.metrics["loss_excess"] == judged.excess
    assert "to_loss_flat" not in fast.metrics, fast.metrics  # the baseline's loss fell: it ranks on time to it
    assert (fast.metrics.get("to_loss_ratio") or fast.metrics["to_loss_beyond"]) > 2, fast.metrics
    # 4x the batch with the lr 4x: as the baseline per sample, complete, near 1x the samples
    scaled, _ = larger("linear")
    assert scaled.outcome is Outcome.COMPLETE, scaled.reason
    # A passing trial keeps its comparison too, on the same samples: how near the tolerance it is.
    assert scaled.judged is not None and scaled.judged.excess <= 0.5
    assert (scaled.judged.first, scaled.judged.last) == (judged.first, judged.last)
    assert scaled.metrics["loss_excess"] == scaled.judged.excess
    assert scaled.metrics["to_loss_ratio"] < 1.5, scaled.metrics
    assert base.judged is None and "loss_excess" not in base.metrics  # the baseline judges, unjudged


def test_a_function_that_returns_by_itself_is_measured_whole(tmp_path: Path, warm) -> None:
    """The training-function path: a baseline that may run whole (``whole_s``) and returns after
    its 3 epochs is timed as a whole run, its shape said, no short measure; one stopped at
    whole_s is not, and its windows past the planned ones are dropped."""
    base, watch = trial(tmp_path, "train_epochs", budget=dataclasses.replace(FAST, whole_s=30.0), warm=warm)
    assert base.outcome is Outcome.COMPLETE and base.reason == "", base.reason
    assert base.shape["ended"] and base.shape["epochs"] == 3 and base.shape["samples"] == 3 * 512
    assert base.metrics["run_s"] > base.metrics["loop_s"] > 0 and base.metrics["run_samples_per_s"] > 0
    assert watch.events[-1]["ended"]
    endless, _ = trial(tmp_path, "train", budget=dataclasses.replace(FAST, whole_s=1.0), warm=warm)
    assert endless.outcome is Outcome.COMPLETE and "run_s" not in endless.metrics
    assert len(endless.windows) == 2 and not endless.shape.get("ended")  # its 2 planned windows, no extra


def test_a_whole_run_too_short_for_a_window_is_measured_on_its_wall_time(tmp_path: Path, warm) -> None:
    """A trial of a whole study whose run, at its batch, ends before a warmup and a window (dcgan at
    8x the batch: FakeData's 1,000 images in 2 batches) was counted a crash. Its wall time is its
    measure: complete, ranked on ``run_s``, its load over the run in ``foreign_cpu``. Measured in
    windows (the baseline, whose windows set every trial's marks), such a run is still too short."""
    few = dataclasses.replace(FAST, warmup_steps=11, whole=True, marks=(100_000, 200_000, 300_000))
    short, _ = trial(tmp_path, "train_epochs", Config(batch_size="8x"), budget=few, warm=warm)  # 12 steps
    assert short.outcome is Outcome.COMPLETE, short.reason
    assert short.reason.startswith("measured whole only: its run ended after 12 steps"), short.reason
    assert short.windows == [] and "samples_per_s" not in short.metrics
    assert short.metrics["run_s"] > 0 and short.metrics["run_samples_per_s"] > 0
    # (its load, where the monitor read the tree twice while it ran: under load a reading may take
    # longer than these 12 steps, and a run read once has no load to say, nor a doubt from it)
    assert 0 <= short.metrics.get("foreign_cpu", 0.0) <= 1
    windowed, _ = trial(tmp_path, "train_epochs", Config(batch_size="8x"), budget=dataclasses.replace(few, whole=False))
    assert windowed.outcome is Outcome.CRASHED, windowed.reason
    assert "ended after 12 training steps, before one measured window" in windowed.reason, windowed.reason


def test_time_to_the_baselines_loss_is_not_used_where_that_loss_does_not_fall(tmp_path: Path, warm) -> None:
    """Random labels: the baseline's loss holds at ln 2, and a 4x batch "reaches" it at once, which
    would rank as a speedup in time to the loss. The trial says the loss is flat instead, and ranks
    on its samples/s (``to_loss_flat``, ``autotune.tuner._training_shape.flat_runs``)."""
    longer = dataclasses.replace(FAST, windows=6)
    base, _ = trial(tmp_path, "train_random_labels", budget=longer, warm=warm)
    assert base.outcome is Outcome.COMPLETE, base.reason
    wide, _ = trial(
        tmp_path,
        "train_random_labels",
        Config(batch_size="4x", lr_scaling="linear"),
        budget=longer,
        against=LossReference(base.losses, base.curve),
        warm=warm,
    )
    assert wide.outcome is Outcome.COMPLETE, wide.reason
    assert wide.metrics.get("to_loss_flat") == 1.0 and 0.6 < wide.metrics["to_loss_target"] < 0.8
    assert "to_loss_ratio" not in wide.metrics and "to_loss_beyond" not in wide.metrics


def test_a_stalled_step_is_killed_within_the_stall_timeout(tmp_path: Path, warm) -> None:
    budget = Budget(warmup_s=0.2, window_s=0.3, windows=2, stall_s=2)
    result, watch = trial(tmp_path, "train_hangs", budget=budget, warm=warm)
    assert result.outcome is Outcome.TIMEOUT
    assert result.reason == "stalled: no step finished for 2 s"  # hung before the first report
    assert len(watch.children) >= 2  # its two DataLoader workers were seen alive
    assert not survivors(watch)  # the `sleep` it started included: it is in the group
    # the first batch, then silence: killed inside stall + 5 s of the last sign of life
    assert time.time() - watch.times["resolved"] < budget.stall_s + 5


def test_a_hang_before_the_first_batch_is_a_startup_timeout(tmp_path: Path) -> None:
    budget = Budget(warmup_s=0.2, window_s=0.3, windows=2, startup_s=3)
    result, watch = trial(tmp_path, "train_hangs_in_setup", budget=budget)
    assert result.outcome is Outcome.TIMEOUT
    assert result.reason.startswith("startup: no batch after 3 s")
    assert result.metrics["duration_s"] < budget.startup_s + 5
    assert not survivors(watch)


def test_a_trial_past_its_deadline_is_killed(tmp_path: Path, warm) -> None:
    # Healthy and making progress, but 1000 windows will not fit in 20 s (and a window will, even
    # where a start-up takes over 10 s: the whole suite on two slow cores, which at 10 s killed
    # one in CI before its first window). Its loader sleeps (a slow read): a loop that burned a
    # CPU for the 20 s took 20 s of the suite's CPU for what a sleeping one shows as well.
    budget = Budget(warmup_s=0.2, window_s=0.3, windows=1000, timeout_s=20)
    result, watch = trial(tmp_path, "train_loader_bound", budget=budget, warm=warm)
    assert result.outcome is Outcome.TIMEOUT
    assert result.reason == "deadline: still running after 20 s"
    assert result.windows  # what it measured is kept
    assert not survivors(watch)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("train_without_batches", "run.step() ran before any batch came from run.batches(loader)"),
        ("train_returns_at_once", "returned without taking a batch from run.batches(loader)"),
    ],
)
def test_a_loop_that_bypasses_run_batches_is_named_at_once(tmp_path: Path, name: str, said: str, warm) -> None:
    result, _ = trial(tmp_path, name, warm=warm)
    assert result.outcome is Outcome.CRASHED
    assert said in result.reason


def test_function_returning_before_a_window(tmp_path: Path, warm) -> None:
    result, watch = trial(tmp_path, "train_returns_early", warm=warm)
    assert result.outcome is Outcome.CRASHED  # (a baseline so is bad input: autotune.tuner._options.baseline_failed)
    assert (
        result.reason.startswith("NotTunable: ")
        and "train_returns_early ended after 3 training steps, before "
        "one measured window: a measure needs a warmup (at least 5 steps"
        in result.reason
    )
    assert watch.kinds()[-2:] == ["end", "error"]  # its end said first (what it measured), then why it is no measure
    assert watch.events[-2]["windows"] == 0 and watch.events[-2]["ended"]


def test_dataloader_workers_leave_no_orphans(tmp_path: Path) -> None:
    result, watch = trial(tmp_path, "train_workers")
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert result.resolved["num_workers"] == 2
    assert len(watch.children) >= 3  # two DataLoader workers and the stray `sleep`
    assert not survivors(watch)


def test_a_process_that_left_the_group_dies_with_the_trial(tmp_path: Path) -> None:
    result, watch = trial(tmp_path, "train_escapes", fixture=ESCAPING)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert watch.events[0] == {"event": "spawned", "pid": watch.pid, "tag": watch.tag}
    assert watch.tag.startswith(f"{os.getpid()}-")
    escaped = next(
        int(line.split()[1]) for line in result.log_path.read_text().splitlines() if line.startswith("escaped ")
    )
    assert escaped in watch.children  # alive during the trial, in a session of its own
    # run_trial waits for what it kills: no bound to wait on here
    assert not tagged(watch.tag, TRIAL_TAG_ENV)
    assert not psutil.pid_exists(escaped) or psutil.Process(escaped).status() == psutil.STATUS_ZOMBIE
    assert not survivors(watch)


def test_kill_orphans_kills_what_carries_the_tag_and_nothing_else() -> None:
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    env = {**os.environ, TRIAL_TAG_ENV: tag}
    sleep = ["sleep", "300"]
    # Popen returns once exec succeeded: each environment is readable at once.
    leader = subprocess.Popen(sleep, env=env, start_new_session=True)  # the worker: in the group, tagged
    escaped = subprocess.Popen(sleep, env=env, start_new_session=True)  # left the group, tagged
    bystander = subprocess.Popen(sleep, start_new_session=True)  # neither: not the trial's
    try:
        started = psutil.Process(leader.pid).create_time()
        assert kill_orphans(leader.pid, started, tag) == 2  # the leader counted once, not twice
        assert leader.wait(timeout=30) == escaped.wait(timeout=30) == -9  # SIGKILL
        assert bystander.poll() is None
        assert kill_orphans(leader.pid, started, tag) == 0
    finally:
        for proc in (leader, escaped, bystander):
            proc.kill()
            proc.wait(timeout=30)


def test_a_sweep_kills_the_trial_processes_of_tuners_that_are_gone() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # a tuner that died: its pid names no process now
    sleep = ["sleep", "300"]
    orphan = subprocess.Popen(sleep, env={**os.environ, TRIAL_TAG_ENV: f"{gone.pid}-abc"}, start_new_session=True)
    # a live tuner's trial (this test process plays the tuner), and a process of no trial
    alive = subprocess.Popen(sleep, env={**os.environ, TRIAL_TAG_ENV: f"{os.getpid()}-def"}, start_new_session=True)
    bystander = subprocess.Popen(sleep, start_new_session=True)
    try:
        assert sweep_orphans() == 1
        assert orphan.wait(timeout=30) == -9
        assert alive.poll() is None and bystander.poll() is None
    finally:
        for proc in (orphan, alive, bystander):
            proc.kill()
            proc.wait(timeout=30)


def test_ram_budget_kills_the_group(tmp_path: Path) -> None:
    # 1 MiB: a Python process alone is over it, so the monitor's first sample kills it.
    result, _ = trial(tmp_path, "train", ram_budget=2**20)
    assert result.outcome is Outcome.OOM_HOST
    assert result.reason.startswith("the trial's processes used ")
    assert result.reason.endswith("over the RAM budget of 1 MiB")
    assert result.windows == []
    assert result.metrics["ram_peak"] > 2**20  # a killed trial's memory figures are kept


def test_a_stall_over_the_ram_budget_ends_as_oom_host_though_the_sampler_is_behind(
    tmp_path: Path, warm, monkeypatch
) -> None:
    # A sampling thread that never reads (as one that fell behind on a loaded machine): the stall
    # verdict reads the tree's memory itself, and a tree over its budget ends as over its RAM.
    monkeypatch.setattr(Monitor, "_watch", lambda self: self._stop.wait())
    budget = Budget(warmup_s=0.2, window_s=0.3, windows=2, stall_s=2)
    result, _ = trial(tmp_path, "train_hangs", budget=budget, warm=warm, ram_budget=2**20)
    assert result.outcome is Outcome.OOM_HOST, result.reason
    assert result.reason.endswith("over the RAM budget of 1 MiB")
    under, _ = trial(tmp_path, "train_hangs", budget=budget, warm=warm, ram_budget=2**40)
    assert under.outcome is Outcome.TIMEOUT and under.reason == "stalled: no step finished for 2 s"


def test_a_tree_still_paging_memory_in_is_not_stalled(tmp_path: Path, warm) -> None:
    """No step for 4 s while 1 GiB is faulted in (a RAM hog on a loaded machine paged that slowly):
    the stall verdict reads the tree's memory, sees it grow and waits; the trial then steps on."""
    budget = Budget(warmup_s=0.2, window_s=0.3, windows=2, stall_s=2)
    result, _ = trial(tmp_path, "train_pages_slowly", budget=budget, warm=warm, ram_budget=2**40)
    assert result.outcome is Outcome.COMPLETE, result.reason
    # The readings saw the GiB come in. PSS is read at most once a second while memory climbs
    # (PSS_EVERY), so the last second of paging (4 of the 16 chunks) may come after the last
    # reading; a forked test worker shares torch's pages with its template, so little but the
    # GiB is its own (CI read 1,018 MiB).
    assert result.metrics["ram_peak"] > 0.75 * 2**30


def test_a_profile_run_times_a_run_handle_step_by_part_and_traces_it(tmp_path: Path, warm) -> None:
    from autotune.worker._profile import PARTS, trace_events

    trace = tmp_path / "t.pt.trace.json.gz"
    spec = TrialSpec(
        target=f"{FIXTURE}:train",
        config=Config(),
        device="cpu",
        budget=dataclasses.replace(FAST, windows=1),
        trace=str(trace),
    )
    result = run_trial(spec, tmp_path / "t.log", warm=warm)
    assert result.outcome is Outcome.COMPLETE, result.reason
    parts = result.profile["parts"]
    window = result.windows[0]
    assert parts["step"] == pytest.approx(window["seconds"] / window["steps"], rel=0.10)
    assert result.profile["trace"] == str(trace) and result.profile["recorded_steps"] >= 1
    names = {e.get("name") for e in trace_events(trace)}
    assert {f"autotune.{p}" for p in PARTS} <= names  # run.batches copies: all six parts


def test_missing_target_is_crashed_not_raised(tmp_path: Path, warm) -> None:
    spec = TrialSpec(target=f"{FIXTURE}:no_such_function", config=Config(), budget=FAST)
    result = run_trial(spec, tmp_path / "t.log", warm=warm)
    assert result.outcome is Outcome.CRASHED
    assert "AttributeError" in result.reason and "no_such_function" in result.reason


@pytest.mark.gpu
def test_a_real_cuda_oom_is_oom_gpu_and_the_next_trial_runs(tmp_path: Path) -> None:
    spec = TrialSpec(target=f"{FIXTURE}:train_cuda_oom", config=Config(), device="cuda", budget=FAST)
    result = run_trial(spec, tmp_path / "oom.log")
    assert result.outcome is Outcome.OOM_GPU, result.reason
    assert "CUDA out of memory" in result.reason
    # the worker process is gone with its CUDA context: the same GPU serves the next trial
    spec = TrialSpec(target=f"{FIXTURE}:train", config=Config(), device="cuda", budget=FAST)
    after = run_trial(spec, tmp_path / "after.log")
    assert after.outcome is Outcome.COMPLETE, after.reason


@pytest.mark.gpu
@pytest.mark.parametrize("flags", [{"cudnn_benchmark": True, "tf32": True}, {"cudnn_benchmark": False, "tf32": False}])
def test_the_worker_sets_the_backend_flags_before_the_users_code(tmp_path: Path, flags: dict) -> None:
    spec = TrialSpec(target=f"{FIXTURE}:train_reports_backends", config=Config(**flags), device="cuda", budget=FAST)
    result = run_trial(spec, tmp_path / "flags.log")
    assert result.outcome is Outcome.COMPLETE, result.reason
    precision = "high" if flags["tf32"] else "highest"
    assert (
        f"cudnn.benchmark={flags['cudnn_benchmark']} matmul_precision={precision}"
        in (tmp_path / "flags.log").read_text()
    )


@pytest.mark.gpu
def test_the_nvml_sampler_reads_the_trials_own_device(tmp_path: Path) -> None:
    import pynvml
    import torch

    from autotune.machine._monitor import nvml_handle

    # CUDA_VISIBLE_DEVICES may name a device by UUID: the handle must be that device's.
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    handle = nvml_handle(0, {"CUDA_VISIBLE_DEVICES": uuid})
    assert pynvml.nvmlDeviceGetUUID(handle) == uuid
    spec = TrialSpec(target=f"{FIXTURE}:train_holds_gpu_memory", config=Config(), device="cuda", budget=FAST)
    result = run_trial(spec, tmp_path / "nvml.log")
    assert result.outcome is Outcome.COMPLETE, result.reason
    held = 2 << 30  # tiny_train.HELD_BYTES
    assert result.metrics["gpu_mem_peak"] >= held  # NVML: the trial's device, its whole context
    assert result.metrics["torch_gpu_mem_peak"] >= held  # torch's own count, in the worker
    assert "gpu_util_mean" in result.metrics and "pcie_rx_mean" in result.metrics


def test_an_epochs_start_counts_in_the_windows_not_between_epochs(tmp_path: Path, warm) -> None:
    """A loader whose ``iter()`` takes 0.25 s (workers that do not persist start there, each epoch)
    and whose epochs are 4 instant batches: the windows count each epoch from its ``iter()``, so the
    figure is about 64 samples per 0.25 s, not the batches' speed with the starts left out as time
    between epochs (a study measured 57 non-persistent workers at 40,000 samples/s that a plain loop
    ran at 3,300)."""
    result, _ = trial(tmp_path, "train", fixture=FIXTURE.with_name("slow_iter_train.py"), warm=warm)
    assert result.outcome is Outcome.COMPLETE, result.reason
    assert result.metrics["samples_per_s"] < 64 / 0.25 * 1.2, result.metrics  # (without the starts: 10,000+)
