"""The trainer: a run built from its configuration, epochs of steps, a test after each,
checkpoints, and resuming. It trains every model the book trains; what differs between
them (the model, its objective, its data) comes from the configuration.

::

    config ─► build_run(config, device) ─► run.model, run.optimizer, run.scheduler,
                                           run.average, run.step(batch)
    train(config, out_dir): for each epoch, for each batch, run.step(batch); test; save

``train`` writes ``out_dir/history.json`` (every epoch: losses, train and test accuracy,
seconds, images/s; every call: the device, the command, how the run computed) and
``out_dir/checkpoint.safetensors`` after every epoch, and resumes from that checkpoint
when called again with the same configuration. The history is in both on purpose: the
checkpoint carries the history of exactly the epochs its weights have seen.

How a run computes fast is the :mod:`capsnotes.fast` wing: the fused routing on every
device; on a CPU, the convolutions and precision that train a real batch fastest; on a
GPU, its 16-bit format and (for bf16) the step recorded as a CUDA graph.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from . import checks
from .checkpoint import Checkpoint, load_checkpoint, load_model_state, save_checkpoint
from .config import TrainConfig, build_model, load_run_data
from .evaluation import evaluate
from .fast import speed_up
from .fast.cpu import PRECISIONS, choose_cpu_implementation
from .fast.graphs import GraphedStep
from .fast.precision import device_name, gpu_precision, resolve_device
from .files import write_json
from .step import TrainingStep, WeightAverage


@dataclass
class TrainingRun:
    """Everything a run trains with. ``step(batch)`` trains on one batch."""

    config: TrainConfig
    model: nn.Module
    optimizer: torch.optim.Adam
    scheduler: torch.optim.lr_scheduler.ExponentialLR
    step: TrainingStep
    average: WeightAverage | None = None
    #: how the run computes (for the history): implementations, precision, optimizer,
    #: graphs
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def result_model(self) -> nn.Module:
        """The run's model: the moving average of the weights when it keeps one."""
        return self.model if self.average is None else self.average.model

    def state(self) -> dict[str, Any]:
        """What a checkpoint holds (:func:`capsnotes.checkpoint.save_checkpoint`)."""
        return {
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict(),
            "average_state": None
            if self.average is None
            else self.average.model.state_dict(),
        }

    def load(self, checkpoint: Checkpoint) -> None:
        """Continue from ``checkpoint``: weights, average, Adam's state and the
        schedule."""
        load_model_state(self.model, checkpoint.model_state, checkpoint.path)
        if self.average is not None:
            if checkpoint.average_state is None:
                raise ValueError(
                    f"{checkpoint.path} has no averaged weights to resume from"
                )
            load_model_state(
                self.average.model, checkpoint.average_state, checkpoint.path
            )
        self.optimizer.load_state_dict(checkpoint.optimizer_state)
        self.scheduler.load_state_dict(checkpoint.scheduler_state)


def choose_implementation(
    config: TrainConfig, device: torch.device, sample: tuple | None
) -> dict[str, Any]:
    """How a run of ``config`` computes on ``device`` (the fast path): ``routing``,
    ``convolution`` and ``precision`` (a 16-bit format's name, or ``"float32"``), and on
    a CPU the timings of the candidates that decided (``sample``: a real batch)."""
    capsnet = config.architecture != "cnn"  # the CNN has no layers of CapsNet's to swap
    chosen: dict[str, Any] = {"precision": "float32"}
    if capsnet:
        chosen |= {"routing": "fused", "convolution": "native"}
    if device.type == "cuda" and config.mixed_precision:
        chosen["precision"] = str(gpu_precision(device)).removeprefix("torch.")
    if device.type == "cpu" and sample is not None and capsnet:
        choice = choose_cpu_implementation(
            lambda: build_model(config),
            config.objective,
            sample,
            mixed_precision=config.mixed_precision,
        )
        chosen |= {"convolution": choice.convolution, "precision": choice.precision}
        chosen |= choice.to_dict()
    return chosen


def build_run(
    config: TrainConfig,
    device: torch.device | str | None = None,
    *,
    fast: bool = True,
    sample: tuple | None = None,
    implementation: dict[str, Any] | None = None,
    graphed: bool | None = None,
    fused_adam: bool | None = None,
) -> TrainingRun:
    """The model, optimizer, schedule, average and step of a run of ``config``.

    With ``fast``, the model computes with the fast layers for ``device``
    (:func:`choose_implementation`), Adam is fused, and on a GPU that trains in bf16 or
    float32 the step is recorded as a CUDA graph; without it everything is the reference
    code in float32. ``implementation`` (``routing``, ``convolution``, ``precision``),
    ``graphed`` and ``fused_adam`` override single choices (the benchmarks measure each
    technique so).
    """
    device = resolve_device(device)
    chosen = choose_implementation(config, device, sample) if fast else {}
    chosen |= implementation or {}
    model = build_model(config)
    if "routing" in chosen:
        model = speed_up(model, chosen["routing"], chosen.get("convolution", "native"))
    model = model.to(device)
    precision = {**PRECISIONS, "float16": torch.float16}[
        chosen.get("precision", "float32")
    ]
    scaler = torch.amp.GradScaler(device.type) if precision == torch.float16 else None
    if graphed is None:
        graphed = fast and device.type == "cuda" and scaler is None
    fused_adam = fast if fused_adam is None else fused_adam
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=config.learning_rate,
        fused=fused_adam,
        capturable=graphed,
    )
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=config.lr_decay)
    average = (
        WeightAverage(model, config.weight_averaging)
        if config.weight_averaging
        else None
    )
    step = TrainingStep(model, optimizer, config.objective, precision, scaler, average)
    if graphed:
        step = GraphedStep(step)
    details = {
        "fast_paths": fast,
        "optimizer": "Adam, fused" if fused_adam else "Adam",
        "cuda_graphs": graphed,
        "precision": str(precision or torch.float32).removeprefix("torch."),
    } | {k: v for k, v in chosen.items() if k != "precision"}
    return TrainingRun(config, model, optimizer, scheduler, step, average, details)


@dataclass
class TrainResult:
    """The trained model (the averaged weights if the run kept a moving average), its
    history and where it was saved."""

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

    ``resume`` continues from ``out_dir``'s checkpoint, which must come from the same
    configuration but for a larger ``epochs`` (an extended run trains exactly as a
    longer one would have). ``fast``: the fast paths (:func:`build_run`);
    ``implementation`` fixes them instead of timing the candidates. ``provenance`` (e.g.
    the command) is kept in the history; ``on_epoch_end`` gets each epoch's record; the
    checkpoint is written every ``checkpoint_every`` epochs and after the last.
    """
    checks.integer("checkpoint_every", checkpoint_every, minimum=1)
    started = time.perf_counter()
    device = resolve_device(device)
    out_dir = Path(out_dir)
    checkpoint_path = out_dir / "checkpoint.safetensors"
    previous = checkpoint_to_resume(checkpoint_path, config) if resume else None
    train_data, test_data = load_run_data(config, device, data_root)
    done = 0 if previous is None else len(previous.metadata["history"]["epochs"])
    implementation = (
        implementation_to_keep(previous, device) if fast else None
    ) or implementation
    timing = (
        fast
        and implementation is None
        and done < config.epochs
        and device.type == "cpu"
    )
    sample = next(train_data.batches(config.batch_size)) if timing else None
    run = build_run(
        config, device, fast=fast, sample=sample, implementation=implementation
    )
    if previous is None:
        history = {
            "train_config": config.to_dict(),
            "device": device_name(device),
            "torch": torch.__version__,
            "capsnotes": version("capsnotes"),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "provenance": provenance or {},
            "epochs": [],
        }
    else:
        run.load(previous)
        history = previous.metadata["history"] | {"train_config": config.to_dict()}
    for epoch in range(done + 1, config.epochs + 1):
        record = _train_epoch(run, train_data, epoch, progress)
        run.scheduler.step()
        record |= _test(run, test_data)
        # this call's first epoch: it becomes a session of the run
        if epoch == done + 1:
            history.setdefault("sessions", []).append(0.0)
            details = {"provenance": provenance or {}, **run.details}
            history.setdefault("session_details", []).append(details)
        history["epochs"].append(record)
        history["sessions"][-1] = time.perf_counter() - started
        history["wall_seconds"] = sum(history["sessions"])
        history["test_accuracy"] = record["test_accuracy"]
        if epoch == config.epochs or (epoch - done) % checkpoint_every == 0:
            metadata = {
                "train_config": config.to_dict(),
                "epoch": epoch,
                "history": history,
            }
            save_checkpoint(checkpoint_path, metadata=metadata, **run.state())
        write_json(out_dir / "history.json", history)
        if on_epoch_end is not None:
            on_epoch_end(record)
    return TrainResult(run.result_model, history, out_dir)


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
            "train into another folder, or pass resume=False (--no-resume) to start "
            "over"
        )
    done = len(checkpoint.metadata["history"]["epochs"])
    if config.epochs < done:
        raise ValueError(
            f"{path} has trained {done} epochs already, more than the {config.epochs} "
            "asked for"
        )
    return checkpoint


def implementation_to_keep(
    previous: Checkpoint | None, device: torch.device
) -> dict | None:
    """A run resumed on the same device computes as it did before (another convolution
    or precision would change the results): what its last call recorded, or None."""
    if previous is None:
        return None
    history = previous.metadata["history"]
    details = (history.get("session_details") or [{}])[-1]
    if history.get("device") != device_name(device) or "convolution" not in details:
        return None
    return {
        key: details[key]
        for key in ("routing", "convolution", "precision")
        if key in details
    }


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s randomness in a run seeded by ``seed``: each epoch
    draws its shuffle and shifts from its own seed, so that a resumed run sees exactly
    the batches an uninterrupted run would have seen."""
    return seed * 1_000_003 + epoch


def _train_epoch(
    run: TrainingRun, data: Any, epoch: int, progress: bool
) -> dict[str, Any]:
    """One pass over ``data``. Nothing is read back from the device until the end."""
    config = run.config
    run.model.train()
    device = next(run.model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(
        epoch_seed(config.seed, epoch)
    )
    learning_rate = run.optimizer.param_groups[0]["lr"]
    stats: list[torch.Tensor] = []  # per step: the loss terms, then the right answers
    started = time.perf_counter()
    shuffled = data.batches(
        config.batch_size, shuffle=True, max_shift=config.max_shift, generator=generator
    )
    steps = -(-len(data) // config.batch_size)
    bar = tqdm(
        shuffled,
        total=steps,
        desc=f"epoch {epoch}/{config.epochs}",
        disable=not progress,
        leave=False,
    )
    for batch in bar:
        step_stats = run.step(batch)
        stats.append(torch.stack([value.float() for value in step_stats.values()]))
    columns = dict(zip(step_stats, torch.stack(stats).T.tolist()))  # the one wait
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


def _test(run: TrainingRun, test_data: Any) -> dict[str, Any]:
    """The epoch's test scores: of the run's model and, when it keeps a moving average,
    of the trained weights themselves (``*_live``)."""
    tested_at = time.perf_counter()
    batch_size = run.config.eval_batch_size
    scores = evaluate(
        run.result_model, test_data, run.config.objective, batch_size=batch_size
    )
    record = {
        f"test_{name}": value for name, value in scores.items() if name != "count"
    }
    if run.average is not None:
        live = evaluate(
            run.model, test_data, run.config.objective, batch_size=batch_size
        )
        record |= {
            f"test_{name}_live": value
            for name, value in live.items()
            if name != "count"
        }
    return record | {
        "test_count": scores["count"],
        "eval_seconds": time.perf_counter() - tested_at,
    }
