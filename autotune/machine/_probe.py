"""What this machine can tune: the fingerprint stored with a study and every export."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import math
import os
import platform
import resource
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.core._knobs import Capability
from autotune.machine import _malloc

if TYPE_CHECKING:
    from autotune.machine._launch import Launcher


def usable_cpus() -> int:
    """CPUs this process may really use: affinity mask, then any cgroup CPU quota."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity API
        count = os.cpu_count() or 1
    try:  # cgroup v2: "max 100000" or "200000 100000"
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            count = min(count, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return count


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """The machine a measurement was taken on."""

    host: str
    platform: str
    python: str
    torch: str
    cpus: int
    ram_total_gib: float
    ram_available_gib: float
    device: str
    gpu: str | None
    gpu_memory_gib: float | None
    driver: str | None
    nvml: bool
    pinned_limit: str
    capabilities: dict[str, bool]
    reasons: dict[str, str]
    date: str

    def summary(self) -> str:
        """One line for export headers and MLflow tags."""
        what = self.gpu or f"CPU ({self.platform})"
        return f"{what}, {self.cpus} CPUs, torch {self.torch}, {self.date}"


def _nvml_info() -> tuple[bool, str | None]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library or no driver: NVML is simply absent
        return False, None
    try:
        return True, pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()


def _fused_reason(torch, device, try_step: bool = True) -> str | None:
    """None if AdamW really runs fused on ``device`` (``try_step``: a step is run to see), else
    why not (feature detection)."""
    if "fused" not in inspect.signature(torch.optim.AdamW).parameters:
        return "torch.optim.AdamW takes no fused= argument in this torch"
    if not try_step:
        return None
    failed: list[str] = []

    def step() -> None:
        try:
            param = torch.zeros(2, device=device, requires_grad=True)
            param.grad = torch.ones(2, device=device)
            torch.optim.AdamW([param], fused=True).step()
        except (RuntimeError, ValueError) as exc:
            failed.append(str(exc).splitlines()[0])

    # On a thread of its own, which keeps the step out of the caller's thread-locals: in a DDP rank
    # that had run it on its main thread, gloo's process-group destructor deadlocked at the
    # script's end (py-spy: it joins a thread that waits for the GIL to free a Python object;
    # plain torchrun with one fused step first: 1 run of 4; torch 2.13). On a thread it still hung
    # once in 6, so a process that goes on to train (exec) does not try the step unless it wants
    # fused (``probe(try_fused=...)``, ``autotune.production._export``).
    probe_thread = threading.Thread(target=step, name="autotune-fused-probe")
    probe_thread.start()
    probe_thread.join()
    return f"fused AdamW fails on {device.type}: {failed[0]}" if failed else None


def _compile_reason(torch, cuda: bool) -> str | None:
    """None if ``torch.compile`` can build kernels here, else why not: Inductor writes C++
    for the CPU (a compiler on PATH) and Triton for CUDA (the triton package)."""
    import importlib.util
    import shutil

    if not hasattr(torch, "compile"):
        return "this torch has no torch.compile"
    if cuda:
        return None if importlib.util.find_spec("triton") else "torch.compile on CUDA needs the triton package"
    compilers = [c for c in (os.environ.get("CXX"), "g++", "c++", "clang++") if c]
    if not any(shutil.which(c) for c in compilers):
        return f"torch.compile on the CPU needs a C++ compiler; none of {', '.join(compilers)} is on PATH"
    return None


def ram_bytes(meminfo: str = "/proc/meminfo") -> tuple[int, int]:
    """This machine's RAM and the part of it available, in bytes: Linux's ``MemTotal`` and
    ``MemAvailable``, as psutil's ``virtual_memory()`` reads them, without importing psutil (10 ms
    and 2,500 objects in each ``autotune exec``'s process); psutil's elsewhere."""
    try:
        with open(meminfo) as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["MemTotal"].split()[0]) * 1024, int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):  # (not Linux, or a kernel before 3.14)
        import psutil

        mem = psutil.virtual_memory()
        return mem.total, mem.available


def probe(device: str = "auto", cpus: int | None = None, try_fused: bool = True) -> Fingerprint:
    """Probe CPUs, RAM, torch, CUDA, NVML and which knob capabilities are present.

    Args:
        device: "auto" (the first CUDA device if any, else CPU), "cpu" or "cuda:N".
        cpus: The CPUs the study may use (default: this process's, ``usable_cpus``).
        try_fused: Run a fused AdamW step to see that it works (else only its signature is
            read): a process that then trains, an export's, runs none unless it wants fused.

    Raises:
        ValueError: a device this machine does not have, or an unknown one.
    """
    import torch

    dev = resolve_device(device, torch)
    cuda = dev.type == "cuda"
    nvml, driver = _nvml_info() if cuda else (False, None)
    reasons: dict[str, str] = {}
    if not cuda:
        why = (
            "torch.cuda.is_available() is False"
            if device in ("auto", "cpu") and not torch.cuda.is_available()
            else f"the study runs on {dev}"
        )
        reasons[Capability.CUDA.value] = f"needs CUDA; {why}"
        reasons[Capability.CUDNN.value] = f"needs cuDNN on a CUDA device; {why}"
    elif not torch.backends.cudnn.is_available():
        reasons[Capability.CUDNN.value] = "torch.backends.cudnn.is_available() is False"
    if cuda and not torch.cuda.is_bf16_supported():
        reasons[Capability.BF16.value] = f"{torch.cuda.get_device_name(dev)} has no bf16 support"
    fused = _fused_reason(torch, dev, try_fused)
    if fused:
        reasons[Capability.FUSED_OPTIMIZER.value] = fused
    compiled = _compile_reason(torch, cuda)
    if compiled:
        reasons[Capability.COMPILE.value] = compiled
    malloc = _malloc.unavailable_reason()
    if malloc:
        reasons[Capability.GLIBC_MALLOC.value] = malloc
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    total, available = ram_bytes()
    props = torch.cuda.get_device_properties(dev) if cuda else None
    return Fingerprint(
        host=socket.gethostname(),
        platform=f"{platform.system()} {platform.machine()}",
        python=platform.python_version(),
        torch=torch.__version__,
        cpus=cpus or usable_cpus(),
        ram_total_gib=round(total / 2**30, 1),
        ram_available_gib=round(available / 2**30, 1),
        device=str(dev),
        gpu=props.name if props else None,
        gpu_memory_gib=round(props.total_memory / 2**30, 1) if props else None,
        driver=driver,
        nvml=nvml,
        pinned_limit="unlimited" if memlock == resource.RLIM_INFINITY else f"{memlock // 1024} KiB",
        capabilities={c.value: c.value not in reasons for c in Capability},
        reasons=reasons,
        date=datetime.date.today().isoformat(),
    )


def probe_forked(launcher: Launcher, device: str, cpus: int) -> Fingerprint:
    """``probe``, in a process forked from ``launcher`` (a warm worker: torch and the optimizer's
    first use are paid there already, where they took the tuner 2.0 s and 1.6 s of CPU on the
    2-core CI machine), else in this process.

    Raises:
        ValueError: as ``probe``.
    """
    import json

    from autotune.core._events import FD_ENV, EventReader

    read_fd, write_fd = os.pipe()
    try:
        with open(os.devnull, "wb") as log:
            proc = launcher.spawn(
                json.dumps({"probe": device, "cpus": cpus}),
                {**launcher.environ, FD_ENV: str(write_fd)},
                log.fileno(),
                write_fd,
            )
        os.close(write_fd)
        write_fd = -1
        reader, found = EventReader(), {}
        while proc is not None and (data := os.read(read_fd, 1 << 16)):
            found.update({e["event"]: e for e in reader.feed(data)})
        if proc is not None:
            proc.wait()
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    event = found.get("probe")
    if event is None:  # no warm worker, or it died: probe here
        return probe(device, cpus)
    if "error" in event:
        raise ValueError(event["error"])
    return Fingerprint(**event["fingerprint"])


def resolve_device(device: str, torch=None):
    """Turn "auto" / "cpu" / "cuda[:N]" into a ``torch.device``, with a clear error."""
    if torch is None:
        import torch
    if device == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"--device {device!r}: {exc}; allowed: auto, cpu, cuda, cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device!r}: torch.cuda.is_available() is False")
        dev = torch.device("cuda", dev.index or 0)
    elif dev.type != "cpu":
        raise ValueError(f"--device {device!r}: allowed: auto, cpu, cuda, cuda:N")
    return dev
