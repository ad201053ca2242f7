"""The trainer of every model the book trains: a run built from its configuration and
plan (:func:`build_run`), then epochs of steps, a test after each, checkpoints, and
resuming (:func:`train`). The model, its objective and its data come from the
configuration.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from ..data import checks
from ..fast import speed_up
from ..fast.graphs import GraphedStep
from ..fast.memory import keep_freed_memory
from ..fast.plan import Plan, plan_for
from ..fast.precision import Autocast, loss_scaling, resolve_device
from .checkpoint import Checkpoint, load_model_state, load_optimizer_state
from .config import TrainConfig, build_model, load_run_data
from .evaluation import evaluate
from .history import RunHistory
from .step import TrainingStep, WeightAverage


@dataclass
class TrainingRun:
    """Everything a run trains with; ``step(batch)`` trains on one batch."""

    config: TrainConfig
    model: nn.Module
    optimizer: torch.optim.Adam
    scheduler: torch.optim.lr_scheduler.ExponentialLR
    step: Callable[[Sequence[Tensor]], dict[str, Tensor]]
    plan: Plan
    average: WeightAverage | None = None
    #: float16's loss scaler (None in the other formats)
    scaler: torch.amp.GradScaler | None = None

    @property
    def details(self) -> dict[str, Any]:
        """The plan (how the run computes, with any timings) as history records it."""
        return self.plan.to_dict()

    @property
    def result_model(self) -> nn.Module:
        """The run's model: the moving average of the weights when it keeps one."""
        return self.model if self.average is None else self.average.model

    def state(self) -> dict[str, Any]:
        """``save_checkpoint``'s arguments."""
        average, scaler = self.average, self.scaler
        return {
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict(),
            "average_state": None if average is None else average.model.state_dict(),
            "scaler_state": None if scaler is None else scaler.state_dict(),
        }

    def load(self, checkpoint: Checkpoint) -> None:
        """Continue from ``checkpoint``: weights, average, Adam (as this run built it),
        schedule and float16's loss scale."""
        path = checkpoint.path
        load_model_state(self.model, checkpoint.model_state, path)
        if self.average is not None:
            if checkpoint.average_state is None:
                raise ValueError(f"{path} has no averaged weights to resume from")
            load_model_state(self.average.model, checkpoint.average_state, path)
        load_optimizer_state(self.optimizer, checkpoint.optimizer_state)
        self.scheduler.load_state_dict(checkpoint.scheduler_state)
        if self.scaler is not None and checkpoint.scaler_state:
            self.scaler.load_state_dict(checkpoint.scaler_state)


def build_optimizer(
    parameters: Iterable[nn.Parameter], config: TrainConfig, plan: Plan
) -> torch.optim.Adam:
    """The Adam of a run of ``config``, fused and capturable as ``plan`` says (no device
    read: a test builds a GPU plan's Adam on a CPU)."""
    return torch.optim.Adam(
        parameters,
        lr=config.learning_rate,
        fused=plan.fused_adam,
        capturable=plan.capturable_adam,
    )


def build_run(
    config: TrainConfig,
    device: torch.device | str | None = None,
    plan: Plan | None = None,
) -> TrainingRun:
    """The model, optimizer, schedule, average and step of a run of ``config``, built
    as ``plan`` says (default: :func:`plan_for` ``device``, untimed)."""
    device = resolve_device(device)
    plan = plan or plan_for(config, device)
    if plan.device_type != device.type:
        raise ValueError(
            f"a plan for {plan.device_type} cannot build a run on {device}"
        )
    if plan.keep_freed_memory:  # for this process, from now on
        keep_freed_memory()
    model = build_model(config)
    if plan.routing is not None:
        model = speed_up(model, plan.routing, plan.convolution)
    model = model.to(device)
    optimizer = build_optimizer(model.parameters(), config, plan)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=config.lr_decay)
    decay = config.weight_averaging
    average = WeightAverage(model, decay) if decay else None
    # the parts of the step, wrapped as the plan says: the model compiled, its forward
    # pass in 16 bits, the objective and Adam scaling float16's loss
    stepped = torch.compile(model) if plan.compile else model
    if plan.dtype is not None:
        stepped = Autocast(stepped, plan.dtype)
    objective, stepping, scaler = config.objective, optimizer, None
    if plan.loss_scaling:
        scaler = torch.amp.GradScaler(device.type)
        objective, stepping = loss_scaling(objective, optimizer, scaler)
    step = TrainingStep(stepped, stepping, objective, average)
    if plan.cuda_graph:
        step = GraphedStep(step, config.batch_size)
    return TrainingRun(config, model, optimizer, scheduler, step, plan, average, scaler)


@dataclass
class TrainResult:
    """The trained model (``TrainingRun.result_model``), its history and its folder."""

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
    implementation: dict[str, Any] | None = None,
) -> TrainResult:
    """Train a model with ``config``, saving into ``out_dir`` after every epoch (the
    checkpoint every ``checkpoint_every`` epochs and after the last; ``provenance``,
    e.g. the command, in the history). ``resume`` continues from ``out_dir``'s
    checkpoint of the same configuration with fewer ``epochs`` (an extended run trains
    exactly as a longer one would have). ``fast``: the fast paths; ``implementation``
    fixes choices of the plan instead of timing them (``{"convolution": "native"}``;
    one that contradicts a resumed run's is refused, :func:`plan_for`)."""
    checks.integer("checkpoint_every", checkpoint_every, minimum=1)
    device = resolve_device(device)
    log = RunHistory(Path(out_dir), config, device, provenance, resume)
    train_data, test_data = load_run_data(config, device, data_root)
    options = dict(
        reference=not fast, kept=log.choices_to_keep(), **(implementation or {})
    )
    run = _build_timed_run(
        config, device, train_data, bool(log.epochs_to_train()), options
    )
    if log.checkpoint is not None:  # weights, Adam, schedule and loss scale
        run.load(log.checkpoint)
    for epoch in log.epochs_to_train():
        record = _train_epoch(run, train_data, epoch, progress)
        run.scheduler.step()
        record |= _test(run, test_data)
        log.add(record, run.details)
        log.save(run.state, checkpoint_every)
        if on_epoch_end is not None:
            on_epoch_end(record)
    return TrainResult(run.result_model, log.history, log.out_dir)


def estimate_run(
    config: TrainConfig,
    device: torch.device | str | None = None,
    *,
    steps: int = 50,
    data_root: str | Path | None = None,
) -> dict[str, Any]:
    """How long the training epochs of a run of ``config`` take on ``device``, from
    ``steps`` steps of the run :func:`train` builds there, timed after five that are
    not (a CPU makes its choice, a GPU records its graph). Nothing is saved."""
    checks.integer("steps", steps, minimum=1)
    device, size = resolve_device(device), config.batch_size
    train_data, _ = load_run_data(config, device, data_root)
    if len(train_data) < size:
        raise ValueError(f"estimate_run needs at least one batch of {size} images")
    run = _build_timed_run(config, device, train_data)
    generator = torch.Generator(device=device).manual_seed(config.seed)
    batches = (  # epoch after epoch, full batches only
        batch
        for _ in itertools.count()
        for batch in train_data.batches(size, True, config.max_shift, generator)
        if len(batch[0]) == size
    )

    def take(count: int) -> None:
        """``count`` steps, and a wait for the device to finish them."""
        stats = [run.step(next(batches)) for _ in range(count)]
        stats[-1]["correct"].item()

    run.model.train()
    take(5)
    started = time.perf_counter()
    take(steps)
    step_seconds = (time.perf_counter() - started) / steps
    per_epoch = -(-len(train_data) // size)
    return {
        "seconds_per_step": step_seconds,
        "steps_per_epoch": per_epoch,
        "epoch_seconds": step_seconds * per_epoch,
        "run_seconds": step_seconds * per_epoch * config.epochs,
        "plan": run.details,
    }


def _build_timed_run(
    config: TrainConfig,
    device: torch.device,
    train_data: Any,
    timed: bool = True,
    options: dict[str, Any] | None = None,
) -> TrainingRun:
    """:func:`build_run` with :func:`plan_for`'s ``options``; if ``timed``, a CPU times
    its open choices on a real batch of ``train_data`` with fresh models."""
    sample = (lambda: next(train_data.batches(config.batch_size))) if timed else None
    make_model = (lambda: build_model(config)) if timed else None
    plan = plan_for(
        config, device, sample=sample, make_model=make_model, **(options or {})
    )
    return build_run(config, device, plan)


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s randomness in a run seeded by ``seed``: each epoch
    draws its shuffle and shifts from its own seed, so that a resumed run sees exactly
    the batches an uninterrupted run would have seen."""
    return seed * 1_000_003 + epoch


def _train_epoch(
    run: TrainingRun, data: Any, epoch: int, progress: bool
) -> dict[str, Any]:
    """One pass over ``data``. Nothing is read back from the device until the end."""
    config, device = run.config, next(run.model.parameters()).device
    run.model.train()
    seed = epoch_seed(config.seed, epoch)
    generator = torch.Generator(device=device).manual_seed(seed)
    learning_rate = run.optimizer.param_groups[0]["lr"]
    started = time.perf_counter()
    shuffled = data.batches(config.batch_size, True, config.max_shift, generator)
    bar = tqdm(
        shuffled,
        total=-(-len(data) // config.batch_size),
        desc=f"epoch {epoch}/{config.epochs}",
        disable=not progress,
        leave=False,
    )
    # dropout (the CNN's) draws from torch's global generator: seeded by the epoch too,
    # within fork_rng, which gives the caller back its random state afterwards
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        steps = [run.step(batch) for batch in bar]  # each: loss terms, right answers
    names = list(steps[0])
    table = torch.stack(
        [torch.stack([s[name].float() for name in names]) for s in steps]
    )
    columns = dict(zip(names, table.T.tolist()))  # the one wait
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
    config, models = run.config, {"": run.result_model}
    if run.average is not None:
        models["_live"] = run.model
    record = {}
    for suffix, model in models.items():
        scores = evaluate(
            model, test_data, config.objective, batch_size=config.eval_batch_size
        )
        del scores["count"]  # len(test_data), below
        record |= {f"test_{name}{suffix}": value for name, value in scores.items()}
    seconds = time.perf_counter() - tested_at
    return record | {"test_count": len(test_data), "eval_seconds": seconds}
