"""Freed memory kept in the process: :func:`keep_freed_memory`.

A CPU training step allocates and frees the same large buffers every step (the primary
convolution's columns alone: 96 MB in bf16 at batch 64). glibc's ``malloc`` serves a
block above its mmap threshold (at most 32 MiB unless set) with a mapping of its own and
unmaps it when it is freed, and returns the top of its heap to the kernel once more than
its trim threshold lies free there: the next step gets the memory back from the kernel
as zeroed pages, faulted in one by one. Raising both thresholds (``mallopt``, ``man 3
mallopt``) keeps freed blocks in the process for the next step (the step with and
without: ``benchmarks/results/*-floor.json`` and ``*-floor-released.json``).
Hand-written: neither Python nor torch exposes the C library's allocator settings, so
``mallopt`` is called through ``ctypes``; the same settings made as ``GLIBC_TUNABLES``
work only if set before Python starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

#: Kept: blocks up to 1 GiB come from the heap, and up to 2 GiB of freed heap stays
#: (mallopt takes a C int: 2**31 - 1 is the largest).
KEPT = {M_MMAP_THRESHOLD: 1 << 30, M_TRIM_THRESHOLD: (1 << 31) - 1}
#: glibc's starting values (its dynamic raising of the mmap threshold, which these
#: starting values allow, is not restored once a value was set).
GLIBC_DEFAULTS = {M_MMAP_THRESHOLD: 128 * 1024, M_TRIM_THRESHOLD: 128 * 1024}


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 -- present in glibc only
        return libc.mallopt
    except (OSError, AttributeError):
        return None


def keep_freed_memory(keep: bool = True) -> bool:
    """Have this process's ``malloc`` keep freed blocks (``keep``) or return them to
    the kernel at glibc's starting thresholds (``keep=False``). Returns whether the
    setting was made: False where the C library is not glibc (nothing is changed)."""
    if not isinstance(keep, bool):
        raise TypeError(f"keep must be True or False, got {keep!r}")
    mallopt = _mallopt()
    if mallopt is None:
        return False
    values = KEPT if keep else GLIBC_DEFAULTS
    return all(mallopt(parameter, value) == 1 for parameter, value in values.items())
