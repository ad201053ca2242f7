"""What every benchmark record starts with, written once: which machine, which torch, when,
by what command, with which allocator; and where the records live.

Each benchmark adds its own measurements after :func:`header`'s keys, and writes the
record with :func:`capsnotes.data.files.write_json` (atomically: nothing half-written).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from capsnotes.data.files import write_json
from capsnotes.fast.precision import device_name

#: The committed records (benchmarks/results/NAME.json).
RESULTS = Path(__file__).resolve().parent / "results"


def cpu_details() -> dict[str, Any]:
    """What /proc/cpuinfo says of the CPU (Linux; empty elsewhere): the model name, family
    and model numbers, and which of the flags that matter for bf16 it reports. For the
    record only: the trainer decides by timing, not by flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor is enough
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    return {
        "model_name": fields.get("model name"),
        "vendor": fields.get("vendor_id"),
        "family": fields.get("cpu family"),
        "model": fields.get("model"),
        "flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}),
    }


def allocator_setting() -> str:
    """The glibc malloc tunables this process was started with (``GLIBC_TUNABLES``), for
    the records: on some CPUs they change how fast a CPU step runs (the README)."""
    return os.environ.get("GLIBC_TUNABLES") or "glibc defaults"


def kernels() -> str:
    """The CPU kernels this process was started with (``ATEN_CPU_CAPABILITY``,
    ``ONEDNN_MAX_CPU_ISA``), as the records name them."""
    settings = [
        f"{name}={os.environ[name]}"
        for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
        if os.environ.get(name)
    ]
    return " ".join(settings) or "the machine's own"


def add_kernels_entry(path: Path, entry: dict[str, Any]) -> None:
    """Add ``entry`` to the record at ``path`` under this process's kernel setting
    (:func:`kernels`), keeping the other settings' entries; written whole."""
    record = json.loads(path.read_text()) if path.exists() else {}
    write_json(path, record | {kernels(): entry})


def command_line(module: str, argv: list[str] | None = None) -> str:
    """The command that made a record, as a shell would take it back:
    ``python -m MODULE ARGS`` (``argv`` defaults to this process's arguments)."""
    arguments = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", "-m", module, *arguments])


def header(command: str, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The keys every record starts with: the device by name, the CPU's details (on a
    CPU; None on a GPU), torch's version, the date (UTC), the command, the allocator."""
    on_cpu = torch.device(device).type == "cpu"
    return {
        "device": device_name(device),
        "cpu": cpu_details() if on_cpu else None,
        "torch": torch.__version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "allocator": allocator_setting(),
    }
