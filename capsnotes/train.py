"""The training loop: epochs of steps, a test after each, checkpoints, and resuming.

``train(config, out_dir)`` writes, after every epoch, ``out_dir/history.json`` and
``out_dir/checkpoint.safetensors`` (both atomically), and resumes from that checkpoint
when called again with the same configuration. The history is in both on purpose: the
checkpoint carries the history of exactly the epochs its weights have seen (a resumed
run continues both from one file, so they cannot disagree), and ``history.json`` is the
record for readers and tools, written after every epoch also when the checkpoint is
written less often (``checkpoint_every``). What a step does is
:func:`capsnotes.step.training_step`; what a run is built from is
:func:`capsnotes.run.build_run`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from .allocator import allocator_setting
from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .checks import check_positive_int
from .config import TrainConfig
from .data import ImageSet, batches, load_dataset
from .devices import device_name, resolve_device
from .evaluation import evaluate
from .files import write_json
from .history import RunHistory
from .run import TrainingRun, build_run

__all__ = [
    "TrainResult",
    "checkpoint_to_resume",
    "epoch_seed",
    "implementation_to_keep",
    "load_run_data",
    "train",
]


@dataclass
class TrainResult:
    """The trained model (on the training device; the averaged weights if the run kept a
    moving average), its history and where it was saved."""

    model: nn.Module
    history: dict[str, Any]
    out_dir: Path


def train(
    config: TrainConfig,
    out_dir: str | Path,
    *,
    device: torch.device | str | None = None,
    data_root: str | Path | None = None,
    resume: bool = True,
    progress: bool = True,
    fast: bool = True,
    on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
    provenance: dict[str, Any] | None = None,
    checkpoint_every: int = 1,
    implementation: dict[str, str] | None = None,
) -> TrainResult:
    """Train a model with ``config``, saving into ``out_dir`` after every epoch.

    ``resume`` continues from ``out_dir``'s checkpoint; it must come from the same
    configuration, except that ``epochs`` may be larger (the learning rate and each
    epoch's batches do not depend on the number of epochs, so a run extended from 12 to
    16 epochs trains exactly as a 16-epoch run would). ``fast`` builds the run with the
    fast implementations (:func:`~capsnotes.run.build_run`). ``provenance`` (e.g. the CLI's
    exact command) is kept in the history; ``on_epoch_end`` gets each epoch's record;
    the checkpoint is written every ``checkpoint_every`` epochs and after the last.
    ``implementation`` fixes how a new run computes (``routing``, ``convolution``,
    ``precision``) instead of timing the candidates: timings are close for small models,
    so two runs of one configuration may otherwise choose differently.
    """
    check_positive_int("checkpoint_every", checkpoint_every)
    started = time.perf_counter()
    device = resolve_device(device)
    out_dir = Path(out_dir)
    checkpoint_path = out_dir / "checkpoint.safetensors"
    previous = checkpoint_to_resume(checkpoint_path, config) if resume else None
    train_set, test_set = load_run_data(config, device, data_root)
    done = 0 if previous is None else len(previous.metadata["history"]["epochs"])
    kept = implementation_to_keep(previous, device) if fast else None
    implementation = kept or implementation
    timing = done < config.epochs and implementation is None
    sample = next(batches(train_set, config.batch_size)) if timing else None
    run = build_run(config, device, fast=fast, sample=sample, implementation=implementation)
    history = RunHistory.start(config, device, provenance)
    if previous is not None:
        run.load(previous)
        history = RunHistory.resume(previous.metadata["history"], config)
    details = {"provenance": provenance or {}, "allocator": allocator_setting(), **run.details}
    for epoch in range(done + 1, config.epochs + 1):
        record = _train_epoch(run, train_set, epoch, progress)
        run.scheduler.step()
        record |= _test(run, test_set)
        history.add_epoch(record, time.perf_counter() - started, details)
        if epoch == config.epochs or (epoch - done) % checkpoint_every == 0:
            metadata = {"train_config": config.to_dict(), "epoch": epoch, "history": history.record}
            save_checkpoint(checkpoint_path, metadata=metadata, **run.state())
        write_json(out_dir / "history.json", history.record)
        if on_epoch_end is not None:
            on_epoch_end(record)
    return TrainResult(run.result_model, history.record, out_dir)


def load_run_data(
    config: TrainConfig, device: torch.device, data_root: str | Path | None = None
) -> tuple[ImageSet, ImageSet]:
    """The run's training and test sets (subsets if the configuration asks), on ``device``."""
    train_set = load_dataset(config.dataset, True, data_root).subset(config.train_size, config.seed)
    test_set = load_dataset(config.dataset, False, data_root).subset(config.test_size, seed=0)
    if config.canvas is not None:
        train_set, test_set = train_set.padded(config.canvas), test_set.padded(config.canvas)
    model = config.model
    expected = (model.in_channels, model.image_size, model.image_size)
    if tuple(train_set.images.shape[1:]) != expected or len(train_set.classes) != model.num_classes:
        raise ValueError(
            f"dataset {config.dataset!r} has images {tuple(train_set.images.shape[1:])} and "
            f"{len(train_set.classes)} classes, but the model expects images {expected} and "
            f"{model.num_classes} classes"
        )
    return train_set.to(device), test_set.to(device)


def checkpoint_to_resume(path: Path, config: TrainConfig) -> Checkpoint | None:
    """The checkpoint at ``path`` to continue a run of ``config`` from (None if there is
    none); raises if it comes from another configuration or has more epochs."""
    if not path.exists():
        return None
    checkpoint = load_checkpoint(path)
    before = TrainConfig.from_dict(checkpoint.metadata["train_config"])
    if dataclasses.replace(before, epochs=config.epochs) != config:
        raise ValueError(
            f"{path} comes from a different configuration; "
            "train into another folder, or pass resume=False (--no-resume) to start over"
        )
    done = len(checkpoint.metadata["history"]["epochs"])
    if config.epochs < done:
        raise ValueError(
            f"{path} has trained {done} epochs already, more than the {config.epochs} asked for"
        )
    return checkpoint


def implementation_to_keep(
    previous: Checkpoint | None, device: torch.device
) -> dict[str, str] | None:
    """A resumed run on the same kind of device computes as it did before (another
    convolution or precision would change the results): the implementation and precision
    its last call recorded, or None to choose anew."""
    if previous is None:
        return None
    history = previous.metadata["history"]
    details = (history.get("session_details") or [{}])[-1]
    convolution = details.get("convolution") or details.get("convolutions")  # older records
    if history.get("device") != device_name(device) or convolution is None:
        return None
    kept = {"routing": details.get("routing", "fused"), "convolution": convolution}
    return kept | {"precision": details.get("precision", "float32")}


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s randomness in a run seeded by ``seed``."""
    # Each epoch draws its shuffle and shifts from its own seed, so that a resumed run
    # sees exactly the batches an uninterrupted run would have seen.
    return seed * 1_000_003 + epoch


def _train_epoch(run: TrainingRun, data: ImageSet, epoch: int, progress: bool) -> dict[str, Any]:
    """One pass over ``data``. Nothing is read back from the device until the end."""
    config = run.config
    run.model.train()
    generator = torch.Generator(device=data.device).manual_seed(epoch_seed(config.seed, epoch))
    learning_rate = run.learning_rate
    stats: list[Tensor] = []  # per step: the loss terms, then the correct predictions
    names: list[str] = []
    started = time.perf_counter()
    shuffled = batches(
        data, config.batch_size, shuffle=True, max_shift=config.max_shift, generator=generator
    )
    steps = -(-len(data) // config.batch_size)
    bar = tqdm(
        shuffled,
        total=steps,
        desc=f"epoch {epoch}/{config.epochs}",
        disable=not progress,
        leave=False,
    )
    for images, labels in bar:
        step_stats = run.step(images, labels)
        names = list(step_stats)
        stats.append(torch.stack([value.float() for value in step_stats.values()]))
    columns = dict(zip(names, torch.stack(stats).T.tolist(), strict=True))  # the one wait
    seconds = time.perf_counter() - started
    correct = columns.pop("correct")
    record: dict[str, Any] = {"epoch": epoch, "learning_rate": learning_rate}
    record |= {name: sum(values) / len(values) for name, values in columns.items()}
    record |= {
        "train_accuracy": sum(correct) / len(data),
        "seconds": seconds,
        "images_per_second": len(data) / seconds,
    }
    return record | {f"step_{name}": values for name, values in columns.items()}


def _test(run: TrainingRun, test_set: ImageSet) -> dict[str, Any]:
    """The epoch's test scores: of the run's model and, when it keeps a moving average,
    of the trained weights themselves (``*_live``)."""
    tested_at = time.perf_counter()
    scores = evaluate(run.result_model, test_set, run.config)
    record = {f"test_{name}": value for name, value in scores.items() if name != "count"}
    if run.average is not None:
        live = evaluate(run.model, test_set, run.config)
        record |= {f"test_{name}_live": value for name, value in live.items() if name != "count"}
    return record | {"eval_seconds": time.perf_counter() - tested_at}
