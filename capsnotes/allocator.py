"""Keeping large freed blocks in a CPU training process (glibc on Linux only).

glibc hands every freed block above its mmap threshold back to the kernel, and that
threshold grows by itself to at most 32 MiB. A CPU training step of CapsNet allocates
and frees several larger tensors (at a batch of 64: the 191 MB im2col buffer of the
primary-capsule convolution, the 47 MB votes and their gradient), so every step
page-faults and zeroes them anew. glibc keeps such blocks for reuse when the process
starts with

    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=2147483648

capsnotes never changes the allocator of a process it is imported into: ``mallopt``
from inside a running process switches glibc's dynamic threshold off for the rest of
that process, and nothing can switch it back on. Instead, the command line
``python -m capsnotes train`` — a process of its own — restarts itself once with the
setting above (``--default-allocator`` keeps glibc's defaults). To get the same in a
script or a notebook kernel, start it with that environment variable set.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence

__all__ = ["RETAINING_TUNABLES", "allocator_setting", "restart_retaining_freed_memory"]

#: glibc tunables that keep freed blocks of up to 1 GiB in the process.
RETAINING_TUNABLES = "glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=2147483648"


def _glibc_linux() -> bool:
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def allocator_setting() -> str:
    """How this process's allocator was set up: ``"glibc defaults"``, the glibc malloc
    tunables it was started with, or ``"not glibc"``."""
    if not _glibc_linux():
        return "not glibc"
    tunables = [
        item
        for item in os.environ.get("GLIBC_TUNABLES", "").split(":")
        if item.startswith("glibc.malloc.")
    ]
    return "GLIBC_TUNABLES=" + ":".join(tunables) if tunables else "glibc defaults"


def restart_retaining_freed_memory(module: str, argv: Sequence[str]) -> None:
    """Replace this process by ``python -m module *argv`` started with
    :data:`RETAINING_TUNABLES`, unless glibc's malloc tunables are already set (then, and
    on other platforms, return and do nothing). Only for command-line entry points,
    before they have done any work."""
    if not _glibc_linux() or allocator_setting() != "glibc defaults":
        return
    existing = os.environ.get("GLIBC_TUNABLES")
    env = dict(os.environ)
    env["GLIBC_TUNABLES"] = f"{existing}:{RETAINING_TUNABLES}" if existing else RETAINING_TUNABLES
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)
