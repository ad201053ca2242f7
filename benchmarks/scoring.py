"""Scoring the shipped model fast and exactly: ``evaluate`` over the 10,000 test digits
with the float32 model alone and as it scores by default, side by side in one process.
``python -m benchmarks.scoring --record NAME``

The two take turns for ``--repeats`` rounds; the record keeps every pass's seconds, the
medians' digits per second, both counts of right answers (they must be equal) and,
where :func:`capsnotes.fast.cpu.bf16_is_fast` lets ``evaluate`` take the bf16 pass,
what that pass alone would get wrong: its largest length difference from float32, the
predictions it changes before the near ties are re-scored, and how many it re-scored.
The CPU kernels are the process's: run it again under ``ATEN_CPU_CAPABILITY`` and
``ONEDNN_MAX_CPU_ISA``, and each setting gets its entry in
``benchmarks/results/NAME-scoring.json``.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Annotated, Any

import torch
import tyro

from benchmarks.record import RESULTS, add_kernels_entry, command_line, header, kernels
from capsnotes.data import load_dataset
from capsnotes.fast.cpu import bf16_is_fast
from capsnotes.fast.scoring import ExactPredictions
from capsnotes.training.evaluation import evaluate
from capsnotes.training.options import DataRoot
from capsnotes.training.pretrained import load_pretrained


@torch.no_grad()
def bf16_pass_errors(model: torch.nn.Module, data: Any) -> dict[str, Any]:
    """How far the bf16 pass of :class:`ExactPredictions` lies from float32 on ``data``."""
    scorer, largest, changed, rescored = ExactPredictions(model), 0.0, 0, 0
    for images, _ in data.batches(500):
        reference, lengths = model(images).lengths, scorer.lengths(images)
        largest = max(largest, (lengths - reference).abs().max().item())
        changed += (lengths.argmax(1) != reference.argmax(1)).sum().item()
        rescored += scorer(images).rescored.sum().item()
    return {
        "largest_length_difference": largest,
        "predictions_changed_before_rescoring": changed,
        "rescored": rescored,
        "margin": scorer.margin,
    }


@dataclasses.dataclass(frozen=True)
class Options:
    """evaluate over the test set: the float32 model alone against the default."""

    repeats: int = 3
    """rounds of the two passes, taking turns (the medians count)"""
    data_root: DataRoot = None
    record: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """add this kernel setting's entry to benchmarks/results/NAME-scoring.json"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Options, args=argv, prog="python -m benchmarks.scoring")
    model, _ = load_pretrained("mnist")
    data = load_dataset("mnist", False, args.data_root)
    seconds: dict[str, list[float]] = {"float32": [], "default": []}
    scores: dict[str, dict[str, Any]] = {}
    for _ in range(args.repeats):
        for name, fast in (("float32", False), ("default", True)):
            started = time.perf_counter()
            scores[name] = evaluate(model, data, fast=fast)
            seconds[name].append(time.perf_counter() - started)
    rate = {name: len(data) / statistics.median(s) for name, s in seconds.items()}
    entry = header(command_line("benchmarks.scoring", argv), "cpu") | {
        "threads": torch.get_num_threads(),
        "bf16_is_fast": bf16_is_fast(),
        "seconds": seconds,
        "digits_per_s": rate,
        "speedup": rate["default"] / rate["float32"],
        "right": {name: round(s["accuracy"] * s["count"]) for name, s in scores.items()},
        "bf16_pass": bf16_pass_errors(model, data) if bf16_is_fast() else None,
    }
    print(json.dumps({kernels(): entry}, indent=1))
    if entry["right"]["float32"] != entry["right"]["default"]:
        print("the counts differ", file=sys.stderr)
        return 1
    if args.record:
        path = RESULTS / f"{args.record}-scoring.json"
        add_kernels_entry(path, entry)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
