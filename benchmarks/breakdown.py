"""Where a training step's time goes, part by part, on the step's real timeline.

Hooks on the model's four parts stamp the time when each part's forward and backward
begins; on a GPU every stamp first waits for the device, so each interval holds the
work of one part. The intervals add up to the instrumented step:

    data → conv1 → primary capsules → digit capsules (votes + routing) → decoder
    → losses → backward in reverse order → optimizer

The step is also timed without hooks; on a GPU the difference is what waiting at every
stamp costs, a measure of how much the uninstrumented step overlaps launches and work.

    python -m benchmarks.breakdown --device cpu --batch-size 64
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
import tyro

from benchmarks.record import allocator_setting, command_line, header
from capsbook.analysis import training_flops
from capsnotes import CapsNet
from capsnotes.data import data_root, load_dataset
from capsnotes.data.files import write_json
from capsnotes.fast.plan import plan_for
from capsnotes.fast.precision import device_name, resolve_device
from capsnotes.training.config import TrainConfig, build_model
from capsnotes.training.options import DataRoot, Device
from capsnotes.training.step import TrainingStep
from capsnotes.training.train import build_run

#: timeline segment → the part of the model it is charged to
PARTS = {
    "data": "data",
    "conv1 forward": "conv1",
    "conv1 backward": "conv1",
    "primary forward": "primary capsules",
    "primary backward": "primary capsules",
    "digits forward": "digit capsules (votes + routing)",
    "digits backward": "digit capsules (votes + routing)",
    "decoder forward": "decoder + losses",
    "losses": "decoder + losses",
    "decoder backward": "decoder + losses",
    "optimizer": "optimizer",
}


@functools.cache
def flops_per_image(config: TrainConfig) -> int:
    """One training step's floating-point operations per image of ``config``'s model, as
    torch's FlopCounterMode counts them (capsbook.analysis.training_flops)."""
    model = build_model(config)
    side, channels = config.model.image_size, config.model.in_channels
    batch = (torch.rand(2, channels, side, side), torch.tensor([0, 1]))
    return training_flops(model, batch, config.objective)["total"]


class Timeline:
    """Time stamps of named segments; each segment lasts until the next stamp."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stamps: list[tuple[str, float]] = []
        self.enabled = False

    def stamp(self, name: str) -> None:
        if not self.enabled:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.stamps.append((name, time.perf_counter()))

    def segments(self) -> dict[str, float]:
        totals: dict[str, float] = defaultdict(float)
        for (name, start), (_, end) in zip(self.stamps, self.stamps[1:], strict=False):
            totals[name] += end - start
        return dict(totals)


def instrument(model: CapsNet, timeline: Timeline) -> None:
    parts = {
        "conv1": model.conv1,
        "primary": model.primary,
        "digits": model.digits,
        "decoder": model.decoder,
    }
    for name, module in parts.items():
        module.register_forward_pre_hook(lambda *_, n=name: timeline.stamp(f"{n} forward"))
        module.register_full_backward_pre_hook(lambda *_, n=name: timeline.stamp(f"{n} backward"))


def breakdown(device: torch.device, batch_size: int, repeats: int, root=None) -> dict:
    data = load_dataset("mnist", train=True, root=root, download=False).to(device)
    config = TrainConfig(batch_size=batch_size)
    # The trainer's run (model, implementations, precision, optimizer) and its very step,
    # :func:`capsnotes.training.step.training_step`, with stamps where the loss is computed and
    # where the optimizer starts; only the CUDA graph is left out, since its replay
    # cannot be divided.
    sample = lambda: next(data.batches(batch_size))  # noqa: E731
    run = build_run(
        config,
        device,
        plan_for(
            config, device, sample=sample, make_model=lambda: build_model(config), cuda_graph=False
        ),
    )
    trainer_step = run.step
    timeline = Timeline(device)
    instrument(run.model, timeline)

    def stamped_objective(output, *batch):  # noqa: ANN001, ANN002, ANN202
        timeline.stamp("losses")
        return trainer_step.objective(output, *batch)

    run.optimizer.register_step_pre_hook(lambda *_: timeline.stamp("optimizer"))
    # the trainer's step with its own parts (its model in its precision, its optimizer),
    # the objective stamped
    measured = TrainingStep(
        trainer_step.model, trainer_step.optimizer, stamped_objective, run.average
    )
    generator = torch.Generator(device=device).manual_seed(0)

    def step() -> None:
        timeline.stamp("data")
        measured(next(data.batches(batch_size, shuffle=True, max_shift=2, generator=generator)))
        timeline.stamp("end")

    def timed(instrumented: bool) -> float:
        timeline.enabled = instrumented
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - started

    for _ in range(2):
        timed(False)  # warm up
    plain = statistics.median(timed(False) for _ in range(repeats))
    per_part: dict[str, list[float]] = defaultdict(list)
    steps = []
    for _ in range(repeats):
        timeline.stamps.clear()
        steps.append(timed(True))
        charged: dict[str, float] = defaultdict(float)
        for segment, seconds in timeline.segments().items():
            charged[PARTS[segment]] += seconds
        for part, seconds in charged.items():
            per_part[part].append(seconds)
    timeline.enabled = False
    return {
        "device": device_name(device),
        "torch": torch.__version__,
        "allocator": allocator_setting(),
        "batch_size": batch_size,
        "precision": run.details["precision"],
        "convolution": run.details.get("convolution"),
        "step_seconds": plain,
        "instrumented_step_seconds": statistics.median(steps),
        "parts_seconds": {part: statistics.median(v) for part, v in per_part.items()},
    }


def print_breakdown(result: dict) -> None:
    step, batch = result["step_seconds"], result["batch_size"]
    print(
        f"{result['device']}, batch {batch}: {1000 * step:.1f} ms per step "
        f"({batch / step:.1f} images/s); instrumented "
        f"{1000 * result['instrumented_step_seconds']:.1f} ms"
    )
    total = sum(result["parts_seconds"].values())
    for name, seconds in sorted(result["parts_seconds"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:34s} {1000 * seconds:8.1f} ms  {seconds / total:6.1%}")
    flops = flops_per_image(TrainConfig()) * batch
    print(f"  arithmetic rate: {flops / step / 1e12:.3f} TFLOP/s")


@dataclass(frozen=True)
class Options:
    """Where a training step's time goes, part by part, on the step's real timeline."""

    device: Device = "auto"
    batch_size: int | None = None
    """images per step (None: 128 on a GPU, 64 on a CPU)"""
    repeats: int | None = None
    """timed steps (None: 50 on a GPU, 5 on a CPU)"""
    data_root: DataRoot = None
    json: Annotated[Path | None, tyro.conf.arg(metavar="PATH")] = None
    """also write the result as JSON"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Options, args=argv, prog="python -m benchmarks.breakdown")
    device = resolve_device(args.device)
    batch_size = args.batch_size or (128 if device.type == "cuda" else 64)
    repeats = args.repeats or (50 if device.type == "cuda" else 5)
    result = breakdown(device, batch_size, repeats, data_root(args.data_root))
    print_breakdown(result)
    if args.json:
        command = command_line("benchmarks.breakdown", argv)
        write_json(args.json, header(command, device) | result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
