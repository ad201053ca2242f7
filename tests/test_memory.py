"""capsnotes.fast.memory: glibc keeps freed blocks in the process when a CPU run says so."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from capsnotes.fast import memory
from capsnotes.fast.memory import keep_freed_memory
from capsnotes.fast.plan import plan_run
from capsnotes.training import train
from capsnotes.training.config import TrainConfig
from tests.conftest import TINY

GLIBC = platform.libc_ver()[0] == "glibc"
needs_glibc = pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")


#: Run in a fresh process: in one that has already kept a large block, malloc reuses
#: the freed block whatever the settings say.
HEAP_OR_MAPPED = """
import ctypes, ctypes.util, torch
from capsnotes.fast.memory import keep_freed_memory

class MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2 (glibc 2.33 and later)
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2
size = 64 << 20  # above glibc's largest automatic mmap threshold (32 MiB)
for keep in (False, True):  # not back: a kept block, freed, is reused either way
    assert keep_freed_memory(keep)
    before = libc.mallinfo2().hblkhd  # bytes in blocks mapped on their own
    block = torch.empty(size, dtype=torch.uint8)
    print(keep, libc.mallinfo2().hblkhd - before >= size)
    del block
"""


@needs_glibc
def test_a_large_block_comes_from_the_heap_only_while_freed_memory_is_kept():
    done = subprocess.run(
        [sys.executable, "-c", HEAP_OR_MAPPED], capture_output=True, text=True, check=True
    )
    # mapped on its own (and unmapped when freed) unless freed memory is kept; kept, it
    # comes from the heap, which keeps it when it is freed
    assert done.stdout.split() == ["False", "True", "True", "False"]


def test_where_the_c_library_is_not_glibc_nothing_is_set(monkeypatch):
    monkeypatch.setattr(memory, "_mallopt", lambda: None)
    assert keep_freed_memory(True) is False


@pytest.mark.parametrize("keep", [1, "yes", None])
def test_keep_must_be_a_bool(keep):
    with pytest.raises(TypeError, match="keep must be True or False"):
        keep_freed_memory(keep)


@pytest.mark.parametrize("reference", [False, True])
def test_a_cpu_run_sets_the_allocator_as_its_plan_says(monkeypatch, reference):
    calls = []
    monkeypatch.setattr(train, "keep_freed_memory", lambda keep=True: calls.append(keep))
    config = TrainConfig(model=TINY, mixed_precision=False)
    plan = plan_run(config, "cpu", reference=reference)
    train.build_run(config, "cpu", plan)
    assert calls == ([] if reference else [True])
