"""The host allocator's settings: glibc malloc told to keep freed memory (``malloc_retain``).

With its defaults, glibc's malloc gives freed memory at the top of its heap back to the
kernel once more than a threshold (128 KiB, raised only by some frees) is free there, and
takes a mapping of its own for each allocation above another. A training step frees and
allocates tensors of the same sizes every step, so a process can fall into handing the
same pages back and faulting them in again each step. On the 2-core CI machine the plain
MNIST loop did so 16k to 141k times a second (a median 9% of its CPU time in the kernel),
as much as each process's history happened to decide: it drew most of the "level" each
process shows from its start (benchmarks/RESULTS.md, "Noise"). Told to keep what it frees,
malloc serves every step from memory it already holds: no faults, and a median 9% faster.

The price is RAM: the heap stays at its peak instead of shrinking between steps (the
tuner's monitor sees it, and the RAM budget holds it). The settings are process-wide and
last for the process's life; DataLoader workers forked after them inherit them.
See ``mallopt(3)``.
"""

from __future__ import annotations

import platform

#: ``mallopt`` parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
#: Freed memory at the heap's top is given back only past this (default 128 KiB).
TRIM_THRESHOLD = 1 << 30
#: Allocations up to this come from the heap, not a mapping of their own: glibc's ceiling
#: (half its 64 MiB heap size on 64-bit; ``mallopt`` refuses more).
MMAP_THRESHOLD = 32 << 20
#: The heap grows by this much beyond a request, so that it grows seldom.
TOP_PAD = 64 << 20


def unavailable_reason() -> str | None:
    """None where ``retain`` can apply (glibc's malloc), else why not."""
    libc, _ = platform.libc_ver()
    if libc != "glibc":
        return f"needs glibc's malloc; this is {platform.system()} with {libc or 'another C library'}"
    return None


def retain() -> None:
    """Keep freed memory in this process for reuse (see the module's docstring).

    Raises:
        OSError: glibc refused a setting.
    """
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    for name, param, value in (("M_MMAP_THRESHOLD", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                               ("M_TRIM_THRESHOLD", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                               ("M_TOP_PAD", _M_TOP_PAD, TOP_PAD)):
        if libc.mallopt(param, value) != 1:
            raise OSError(f"malloc_retain: mallopt({name}, {value}) failed")
