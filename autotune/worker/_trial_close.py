"""What a trial says of its run: the config it resolved (the ``resolved`` event, at its first
batch or step), how a window closes (what it reports) and how its run ends (the ``end`` event)."""

from __future__ import annotations

import time
from typing import Any

from autotune.worker._trial_state import Phase, TrialState


class Closing(TrialState):
    """A trial's window closes and its end; ``Trial`` holds the state they read."""

    def _close_window(self) -> float | None:
        self._sync()
        now = time.perf_counter()
        loss = self._win.loss()
        extra: dict[str, Any] = {} if self._epoch_rows is None else {"epoch_rows": self._epoch_rows}
        if self._extra:  # the baseline's run past its windows: kept only if the code ends by itself
            extra["extra"] = True
        if self.device.type == "cuda":
            import torch

            extra["gpu_mem_peak"] = torch.cuda.max_memory_allocated(self.device)
        curve = self._win.curve(self._seen)
        self._chunks.extend(curve)
        self._emit(
            "window",
            index=self._windows_done,
            steps=self._win.steps,
            samples=self._win.samples,
            samples_seen=self._seen,
            seconds=now - self._win.start,
            data_wait=self._win.wait,
            loss=loss,
            step_times=self._win.step_times,
            curve=curve,
            wall=time.time(),
            main_thread_s=time.thread_time() - self._win.thread,
            outside_s=self._win.outside,
            **extra,
        )
        self._windows_done += 1
        self._so_far = (self._so_far[0] + self._win.samples, self._so_far[1] + now - self._win.start)
        self._reset_window(now)
        return loss

    def finish(self, ended: bool = False) -> None:
        """Close a last partial window if the function returned mid-window (and a profile
        recording, with the steps it has), and say how the run ended.

        Args:
            ended: The code returned by itself (not stopped by the trial): its whole run was
                measured, and the ``end`` event gives its training's shape and times.
        """
        self._end_recording()
        if ended:
            self._split_warmup()
        if self._last_window_wanted():
            self._close_window()
        whole = {}
        if ended and self._loop_t0 is not None:
            whole = {
                "ended": True,
                "loop_s": self._last_step - self._loop_t0 - self._outside_total,
                "outside_s": self._outside_total,
                "epochs": self._epochs,
                "samples": self._seen,
            }
        short = (
            self._phase in (Phase.WARMUP, Phase.MEASURE)
            and not self._whole
            and not self._extra
            and not self._measured_all()
        )
        self._emit(
            "end",
            steps=self._step,
            windows=self._windows_done,
            short=short,
            config=self.resolved(),
            base_batch_size=self._base_batch_size,
            lr=self.lr,
            dataset=self.facts(),
            **whole,
        )

    def _sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def _say_resolved(self) -> None:
        """The ``resolved`` event, at the loop's first batch or step: the config as it runs, the
        code's batch size and lr, the dataset's facts."""
        self._emit(
            "resolved",
            config=self.resolved(),
            base_batch_size=self._base_batch_size,
            lr=self.lr,
            dataset=self.facts(),
        )
