"""The trainer: a run built from its configuration, epochs of steps, a test after each,
checkpoints, and resuming. It trains every model the book trains; what differs between
them (the model, its objective, its data) comes from the configuration.

::

    config ─► plan_for(config, device, ...) ─► build_run ─► run.model, run.optimizer,
              run.scheduler, run.average, run.step(batch)
    train(config, out_dir): for each epoch, for each batch, run.step(batch); test; save

``train`` writes ``out_dir/history.json`` (every epoch: losses, train and test accuracy,
seconds, images/s; every call: the device, the command, how the run computed) and
``out_dir/checkpoint.safetensors`` after every epoch, and resumes from that checkpoint
when called again with the same configuration. The history is in both on purpose: the
checkpoint carries the history of exactly the epochs its weights have seen.
:class:`RunHistory` keeps both, beside the loop.

How a run computes is decided by one function, :func:`capsnotes.fast.plan.plan_run`
(the fused routing on every device; on a CPU, the convolutions and precision that train
a real batch fastest; on a GPU, its 16-bit format and, outside float16, the step
recorded as a CUDA graph); :func:`build_run` builds what the plan says.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from .. import __version__
from ..data import checks
from ..data.files import write_json
from ..fast import CONVOLUTIONS, speed_up
from ..fast.cpu import choose_cpu_implementation, cpu_matmul_rates
from ..fast.graphs import GraphedStep
from ..fast.plan import BF16_SPEEDUP, Plan, plan_run
from ..fast.precision import (
    Autocast,
    device_capability,
    device_name,
    loss_scaling,
    resolve_device,
)
from .checkpoint import (
    Checkpoint,
    load_checkpoint,
    load_model_state,
    load_optimizer_state,
    save_checkpoint,
)
from .config import TrainConfig, build_model, load_run_data
from .evaluation import evaluate
from .step import TrainingStep, WeightAverage


@dataclass
class TrainingRun:
    """Everything a run trains with. ``step(batch)`` trains on one batch."""

    config: TrainConfig
    model: nn.Module
    optimizer: torch.optim.Adam
    scheduler: torch.optim.lr_scheduler.ExponentialLR
    step: Callable[[Sequence[Tensor]], dict[str, Tensor]]
    #: how the run computes (:func:`plan_for`), with the CPU's timings where it made any
    plan: Plan
    average: WeightAverage | None = None
    #: float16's loss scaler (None in the other formats)
    scaler: torch.amp.GradScaler | None = None

    @property
    def details(self) -> dict[str, Any]:
        """How the run computes, as its history records it: the plan, its timings."""
        return self.plan.to_dict()

    @property
    def result_model(self) -> nn.Module:
        """The run's model: the moving average of the weights when it keeps one."""
        return self.model if self.average is None else self.average.model

    def state(self) -> dict[str, Any]:
        """What a checkpoint holds (``save_checkpoint``'s arguments)."""
        average, scaler = self.average, self.scaler
        return {
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict(),
            "average_state": None if average is None else average.model.state_dict(),
            "scaler_state": None if scaler is None else scaler.state_dict(),
        }

    def load(self, checkpoint: Checkpoint) -> None:
        """Continue from ``checkpoint``: weights, average, Adam's state (in the Adam
        this run built), the schedule, and float16's loss scale."""
        load_model_state(self.model, checkpoint.model_state, checkpoint.path)
        if self.average is not None:
            if checkpoint.average_state is None:
                raise ValueError(
                    f"{checkpoint.path} has no averaged weights to resume from"
                )
            load_model_state(
                self.average.model, checkpoint.average_state, checkpoint.path
            )
        load_optimizer_state(self.optimizer, checkpoint.optimizer_state)
        self.scheduler.load_state_dict(checkpoint.scheduler_state)
        if self.scaler is not None and checkpoint.scaler_state:
            self.scaler.load_state_dict(checkpoint.scaler_state)


def plan_for(
    config: TrainConfig,
    device: torch.device | str | None = None,
    *,
    reference: bool = False,
    sample: Callable[[], Sequence[Tensor]] | None = None,
    kept: dict[str, Any] | None = None,
    **choices: Any,
) -> Plan:
    """The plan a run of ``config`` computes with on ``device``, finished here:

    1. the rules of :func:`~capsnotes.fast.plan.plan_run` for the device's type and
       compute capability and this torch (``reference``: the paper's code, float32);
    2. the choices the caller fixes (``choices``, :data:`~capsnotes.fast.plan.CHOICES`),
       or those a resumed run ``kept`` from its last session on this device (another
       convolution or precision would change its results);
    3. on a CPU, the choices still open timed on a real batch, ``sample()``, and the
       fastest taken (:mod:`capsnotes.fast.cpu`); the timings are kept in the plan.
       Without ``sample`` they keep the rules' defaults.
    """
    device = resolve_device(device)
    plan = plan_run(
        config,
        device.type,
        device_capability(device),
        torch.__version__,
        reference=reference,
    )
    plan = plan.with_choices(**((kept if not reference else None) or choices))
    if not plan.timed or sample is None:
        return plan
    rates = None
    precisions = [plan.precision]
    if "precision" in plan.timed:  # bf16 is timed only where its products are fast
        rates = cpu_matmul_rates()
        precisions = ["float32", "bfloat16"][: 1 + (rates.speedup >= BF16_SPEEDUP)]
    timed = "convolution" in plan.timed
    choice = choose_cpu_implementation(
        lambda: build_model(config),
        config.objective,
        sample(),
        convolutions=CONVOLUTIONS if timed else [plan.convolution],
        precisions=precisions,
    )
    made = {name: getattr(choice, name) for name in plan.timed}
    timings = {"step_seconds": choice.seconds}
    if rates is not None:
        timings["matmul_gflops"] = dataclasses.asdict(rates)
    return dataclasses.replace(plan.with_choices(**made), timings=timings)


def build_optimizer(
    parameters: Iterable[nn.Parameter], config: TrainConfig, plan: Plan
) -> torch.optim.Adam:
    """The Adam of a run of ``config`` for ``parameters``, built as ``plan`` says: fused
    where the plan fuses it, and capturable (its step counts beside the parameters) for
    a step recorded as a CUDA graph. :func:`build_run` builds its optimizer here; this
    reads neither the parameters' device nor any other, so a test can build the Adam of
    a GPU's plan on a CPU."""
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
    if plan is None:
        plan = plan_for(config, device)
    if plan.device_type != device.type:
        raise ValueError(
            f"a plan for {plan.device_type} cannot build a run on {device}"
        )
    model = build_model(config)
    if plan.routing is not None:
        model = speed_up(model, plan.routing, plan.convolution)
    model = model.to(device)
    optimizer = build_optimizer(model.parameters(), config, plan)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=config.lr_decay)
    average = None
    if config.weight_averaging:
        average = WeightAverage(model, config.weight_averaging)
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
    implementation: dict[str, Any] | None = None,
) -> TrainResult:
    """Train a model with ``config``, saving into ``out_dir`` after every epoch.

    ``resume`` continues from ``out_dir``'s checkpoint, which must come from the same
    configuration but for a larger ``epochs`` (an extended run trains exactly as a
    longer one would have). ``fast``: the fast paths (:func:`plan_for`);
    ``implementation`` fixes choices of the plan (e.g. ``{"convolution": "native"}``)
    instead of timing them. ``provenance`` (e.g. the command) is kept in the history;
    ``on_epoch_end`` gets each epoch's record; the checkpoint is written every
    ``checkpoint_every`` epochs and after the last.
    """
    checks.integer("checkpoint_every", checkpoint_every, minimum=1)
    device = resolve_device(device)
    log = RunHistory(Path(out_dir), config, device, provenance, resume)
    train_data, test_data = load_run_data(config, device, data_root)
    plan = plan_for(
        config,
        device,
        reference=not fast,
        # a real batch, for a CPU to time what is open (not when nothing is to train)
        sample=(lambda: next(train_data.batches(config.batch_size)))
        if log.epochs_to_train()
        else None,
        kept=log.choices_to_keep(),
        **(implementation or {}),
    )
    run = build_run(config, device, plan)
    log.resume(run)  # weights, Adam, schedule and loss scale from the checkpoint
    for epoch in log.epochs_to_train():
        record = _train_epoch(run, train_data, epoch, progress)
        run.scheduler.step()
        record |= _test(run, test_data)
        log.add(record, run.details)
        log.save(run, checkpoint_every)
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
    not (in which a CPU makes its choice and a GPU records its graph): the seconds per
    step, and per epoch and for the whole run's epochs (their tests come on top), with
    the run's plan. Nothing is saved."""
    checks.integer("steps", steps, minimum=1)
    device = resolve_device(device)
    train_data, _ = load_run_data(config, device, data_root)
    if len(train_data) < config.batch_size:
        raise ValueError(
            f"estimate_run needs at least one batch of {config.batch_size} images"
        )
    sample = lambda: next(train_data.batches(config.batch_size))  # noqa: E731
    run = build_run(config, device, plan_for(config, device, sample=sample))
    generator = torch.Generator(device=device).manual_seed(config.seed)

    def full_batches() -> Any:
        while True:
            for batch in train_data.batches(
                config.batch_size, True, config.max_shift, generator
            ):
                if len(batch[0]) == config.batch_size:
                    yield batch

    batches = full_batches()
    run.model.train()
    for _ in range(5):
        stats = run.step(next(batches))
    stats["correct"].item()  # wait for the device
    started = time.perf_counter()
    for _ in range(steps):
        stats = run.step(next(batches))
    stats["correct"].item()
    step_seconds = (time.perf_counter() - started) / steps
    per_epoch = -(-len(train_data) // config.batch_size)
    return {
        "seconds_per_step": step_seconds,
        "steps_per_epoch": per_epoch,
        "epoch_seconds": step_seconds * per_epoch,
        "run_seconds": step_seconds * per_epoch * config.epochs,
        "plan": run.details,
    }


class RunHistory:
    """A run's history (``history.json``, and the copy in its checkpoint): the record
    of every epoch, and of every call of :func:`train` that trained (a *session*) its
    seconds, device, versions, provenance and plan. Its ``device`` names every device
    the run trained on; ``torch`` and ``capsnotes`` are its first session's."""

    def __init__(
        self,
        out_dir: Path,
        config: TrainConfig,
        device: torch.device,
        provenance: dict[str, Any] | None,
        resume: bool,
    ) -> None:
        self.out_dir, self.config = out_dir, config
        self.started = time.perf_counter()
        self.session = {
            "device": device_name(device),
            "torch": torch.__version__,
            "capsnotes": __version__,
            "provenance": provenance or {},
        }
        path = out_dir / "checkpoint.safetensors"
        self.checkpoint = checkpoint_to_resume(path, config) if resume else None
        if self.checkpoint is None:
            self.history: dict[str, Any] = {
                "train_config": config.to_dict(),
                **{key: self.session[key] for key in ("device", "torch", "capsnotes")},
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "provenance": provenance or {},
                "epochs": [],
            }
        else:
            self.history = self.checkpoint.metadata["history"]
            self.history["train_config"] = config.to_dict()
        self.done_before = len(self.history["epochs"])

    def epochs_to_train(self) -> range:
        return range(self.done_before + 1, self.config.epochs + 1)

    def choices_to_keep(self) -> dict[str, Any]:
        """A fast run resumed on the device of its last session computes as that session
        did (another convolution or precision would change its results): its choices,
        or none."""
        last = (self.history.get("session_details") or [{}])[-1]
        device = last.get("device", self.history["device"])
        if device != self.session["device"] or not last.get("fast_paths"):
            return {}
        keys = ("routing", "convolution", "precision")
        return {key: last[key] for key in keys if key in last}

    def resume(self, run: TrainingRun) -> None:
        """Continue ``run`` from the checkpoint, if the run has one."""
        if self.checkpoint is not None:
            run.load(self.checkpoint)

    def add(self, record: dict[str, Any], details: dict[str, Any]) -> None:
        """Add an epoch's record; the session's first also starts the session."""
        history = self.history
        if len(history["epochs"]) == self.done_before:
            sessions = history.setdefault("session_details", [])
            for earlier in sessions:  # written before a session named its device
                earlier.setdefault("device", history["device"])
            sessions.append(self.session | details)
            history.setdefault("sessions", []).append(0.0)
            history["device"] = "; ".join(dict.fromkeys(s["device"] for s in sessions))
        history["epochs"].append(record)
        history["sessions"][-1] = time.perf_counter() - self.started
        history["wall_seconds"] = sum(history["sessions"])
        history["test_accuracy"] = record["test_accuracy"]

    def save(self, run: TrainingRun, checkpoint_every: int) -> None:
        """Write ``history.json``, after the checkpoint when one is due: every
        ``checkpoint_every`` epochs of this session, and after the last epoch."""
        epoch = len(self.history["epochs"])
        if (
            epoch == self.config.epochs
            or (epoch - self.done_before) % checkpoint_every == 0
        ):
            metadata = {
                "train_config": self.config.to_dict(),
                "epoch": epoch,
                "history": self.history,
            }
            save_checkpoint(
                self.out_dir / "checkpoint.safetensors",
                metadata=metadata,
                **run.state(),
            )
        write_json(self.out_dir / "history.json", self.history)


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
