"""What the CPU's timed choice picks under this process's kernels: the trainer's own
:func:`capsnotes.fast.plan.plan_for`, on a real batch of the ``paper`` profile, at each
batch size, ``--repeats`` times. ``python -m benchmarks.choice --record NAME``

A plan times every convolution (and bf16 against float32 where the CPU's bf16 products
are fast) on fresh models and keeps the fastest, so what it picks can differ from CPU
to CPU. The kernels are the process's: run it again under ``ATEN_CPU_CAPABILITY`` and
``ONEDNN_MAX_CPU_ISA`` (``=avx2``/``AVX2``, ``=default``), and each setting gets its
entry in ``benchmarks/results/NAME-choice.json``: per batch size, each repeat's choice
and the seconds of every candidate it timed.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import torch
import tyro

from benchmarks.record import RESULTS, add_kernels_entry, command_line, header, kernels
from capsnotes.data import load_dataset
from capsnotes.fast.plan import plan_for
from capsnotes.training.config import build_model, profile
from capsnotes.training.options import DataRoot


def timed_choices(
    batch_size: int, repeats: int, data_root: str | None = None, name: str = "paper"
) -> list[dict[str, Any]]:
    """``repeats`` plans of the profile ``name`` at ``batch_size``, each timed on the
    first batch of the training digits: its choices and its timings."""
    config = dataclasses.replace(profile(name), batch_size=batch_size)
    digits = load_dataset(config.dataset, True, data_root)
    batch = next(digits.batches(batch_size))
    plans = [
        plan_for(config, "cpu", sample=lambda: batch, make_model=lambda: build_model(config))
        for _ in range(repeats)
    ]
    return [
        {"convolution": p.convolution, "precision": p.precision, "timings": p.timings}
        for p in plans
    ]


@dataclasses.dataclass(frozen=True)
class Options:
    """The trainer's timed choice of convolution and precision on this CPU."""

    batch_sizes: tuple[int, ...] = (64, 128)
    repeats: int = 3
    """plans made at each batch size, one after another"""
    data_root: DataRoot = None
    record: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """add this kernel setting's entry to benchmarks/results/NAME-choice.json"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Options, args=argv, prog="python -m benchmarks.choice")
    entry = header(command_line("benchmarks.choice", argv), "cpu") | {
        "threads": torch.get_num_threads(),
        "choices": {
            str(size): timed_choices(size, args.repeats, args.data_root)
            for size in args.batch_sizes
        },
    }
    print(json.dumps({kernels(): entry}, indent=1))
    if args.record:
        path = RESULTS / f"{args.record}-choice.json"
        add_kernels_entry(path, entry)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
