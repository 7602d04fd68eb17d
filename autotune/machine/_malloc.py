"""The host allocator's settings: glibc malloc told to keep freed memory (``malloc_retain``).

With its defaults, glibc's malloc gives freed memory at the top of its heap back to the
kernel once more than a threshold (128 KiB, raised only by some frees) is free there, and
takes a mapping of its own for each allocation above another. A training step frees and
allocates tensors of the same sizes every step, so a process can fall into handing the
same pages back and faulting them in again each step. On the 2-core CI machine a plain
MNIST loop did so 16k to 141k times a second (a median 9% of its CPU time in the kernel),
as much as each process's history happened to decide, and the runs that faulted more were
the slower ones (benchmarks/results/levels.md). Told to keep what it frees, malloc serves
every step from memory it already holds: no faults, and a median 9% faster there.

The price is RAM: the heap stays at its peak instead of shrinking between steps (the
tuner's monitor sees it, and the RAM budget holds it). The settings are process-wide and
last for the process's life; DataLoader workers forked after them inherit them.
See ``mallopt(3)``.
"""

from __future__ import annotations

import os
import platform

#: ``mallopt`` parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
#: Freed memory at the heap's top is given back only past this (default 128 KiB).
TRIM_THRESHOLD = 1 << 30
#: Allocations up to this come from the heap, not a mapping of their own: the most glibc's own
#: dynamic threshold ever reaches on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX); larger tensors keep
#: mappings of their own, as they would anyway.
MMAP_THRESHOLD = 32 << 20
#: The heap grows by this much beyond a request, so that it grows seldom.
TOP_PAD = 64 << 20


#: Allocators that replace glibc's malloc when preloaded: ``mallopt`` would then tune one
#: that nothing uses.
_REPLACEMENTS = ("jemalloc", "tcmalloc", "mimalloc")


def unavailable_reason() -> str | None:
    """None where ``retain`` can apply (glibc's malloc, not replaced), else why not."""
    libc, _ = platform.libc_ver()
    if libc != "glibc":
        return f"needs glibc's malloc; this is {platform.system()} with {libc or 'another C library'}"
    preloaded = os.environ.get("LD_PRELOAD", "")
    if any(name in preloaded for name in _REPLACEMENTS):
        return f"needs glibc's malloc, which LD_PRELOAD={preloaded} replaces"
    return None


def retain() -> None:
    """Keep freed memory in this process for reuse (see the module's docstring).

    Raises:
        OSError: glibc refused a setting.
    """
    import ctypes

    mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: glibc's malloc among them
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    for name, param, value in (
        ("M_MMAP_THRESHOLD", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        ("M_TRIM_THRESHOLD", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        ("M_TOP_PAD", _M_TOP_PAD, TOP_PAD),
    ):
        if mallopt(param, value) != 1:
            raise OSError(f"malloc_retain: mallopt({name}, {value}) failed")
