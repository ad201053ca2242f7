"""Building a training run from its configuration: the one place where the model, its
implementations, the optimizer, the learning-rate schedule, the weight average and the
step are put together (the trainer, the benchmarks and the chapters all use it).

::

    config ─► build_run(config, device) ─► run.model, run.optimizer, run.scheduler,
                                           run.average, run.step(images, labels)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from .checkpoint import Checkpoint, load_model_state
from .checks import check_choice
from .config import ARCHITECTURES, TrainConfig
from .devices import autocast_dtype, resolve_device
from .graphs import GraphedStep
from .step import TrainingStep, WeightAverage
from .tuning import IMPLEMENTATIONS, PRECISIONS, choose_cpu_implementation, implementations

__all__ = ["TrainingRun", "build_model", "build_run", "choose_implementation", "make_optimizer"]


def build_model(
    config: TrainConfig, device: torch.device | str = "cpu", **implementation: str
) -> nn.Module:
    """A freshly initialised model of ``config``'s architecture, seeded by ``config.seed``
    without touching the global random state. ``implementation`` (a CapsNet's
    ``routing`` and ``convolution``) chooses how it computes, not what."""
    architecture = ARCHITECTURES[config.architecture]
    unknown = set(implementation) - set(architecture.implementations)
    if unknown:
        raise ValueError(
            f"a {config.architecture} model takes no implementation choice {sorted(unknown)}"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = architecture.model(config.model, **implementations(**implementation))
    return model.to(device)


def make_optimizer(
    model: nn.Module, learning_rate: float, fused: bool = True, capturable: bool = False
) -> torch.optim.Adam:
    """Adam over ``model``'s parameters, as the paper trains. With ``fused``, where the
    parameters' device has torch's fused Adam kernel (CPU and CUDA), it is used: one pass
    over each parameter per step instead of several, the same update up to rounding.
    ``capturable`` keeps the step count on the device, so that the update can be
    recorded in a CUDA graph."""
    parameters = list(model.parameters())
    fusable = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in parameters)
    return torch.optim.Adam(
        parameters, lr=learning_rate, fused=fused and fusable, capturable=capturable
    )


def choose_implementation(
    config: TrainConfig,
    device: torch.device,
    fast: bool = True,
    sample: tuple[Tensor, Tensor] | None = None,
) -> tuple[dict[str, str], dict[str, Any] | None]:
    """How the run should compute on ``device``: for a CapsNet with ``fast``, the fused
    routing backward, and on a CPU the convolutions and the precision that train
    ``sample`` (a real batch) fastest (:func:`~capsnotes.tuning.choose_cpu_implementation`).
    Returns the choice (``routing``, ``convolution``, ``precision``; whatever is left out
    takes its default) and the measurements that decided it (None if nothing was
    timed)."""
    if not ARCHITECTURES[config.architecture].implementations or not fast:
        return {}, None
    if device.type != "cpu" or sample is None:
        return {"routing": "fused"}, None
    choice = choose_cpu_implementation(
        config.model,
        *sample,
        reconstruction_weight=config.reconstruction_weight,
        mixed_precision=config.mixed_precision,
    )
    chosen = {"routing": "fused", "convolution": choice.convolution, "precision": choice.precision}
    return chosen, choice.to_dict()


@dataclass
class TrainingRun:
    """Everything a run trains with. ``step(images, labels)`` trains on one batch."""

    config: TrainConfig
    model: nn.Module
    optimizer: torch.optim.Adam
    scheduler: torch.optim.lr_scheduler.ExponentialLR
    step: TrainingStep | GraphedStep
    average: WeightAverage | None = None
    #: how the run computes (for the history): implementations, optimizer, graphs
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def result_model(self) -> nn.Module:
        """The run's model: the moving average of the weights when it keeps one."""
        return self.model if self.average is None else self.average.model

    @property
    def learning_rate(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def state(self) -> dict[str, Any]:
        """What a checkpoint holds (see :func:`capsnotes.checkpoint.save_checkpoint`)."""
        return {
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict(),
            "average_state": None if self.average is None else self.average.model.state_dict(),
        }

    def load(self, checkpoint: Checkpoint) -> None:
        """Continue from ``checkpoint``: weights, average, Adam's state and the schedule."""
        load_model_state(self.model, checkpoint.model_state, checkpoint.path)
        if self.average is not None:
            if checkpoint.average_state is None:
                raise ValueError(f"{checkpoint.path} has no averaged weights to resume from")
            load_model_state(self.average.model, checkpoint.average_state, checkpoint.path)
        self.optimizer.load_state_dict(checkpoint.optimizer_state)
        self.scheduler.load_state_dict(checkpoint.scheduler_state)


def build_run(
    config: TrainConfig,
    device: torch.device | str | None = None,
    *,
    fast: bool = True,
    sample: tuple[Tensor, Tensor] | None = None,
    implementation: dict[str, str] | None = None,
    fused_adam: bool | None = None,
    graphed: bool | None = None,
) -> TrainingRun:
    """The model, optimizer, schedule, average and step of a run of ``config``.

    With ``fast`` the model is built with the fast implementations for ``device``
    (:func:`choose_implementation`; on a CPU ``sample``, a real training batch, decides
    the convolutions and the precision), Adam is fused, and on a GPU the step is recorded
    as a CUDA graph. Without it, everything is the reference code. Where
    ``config.mixed_precision`` asks for it: bf16 autocast on a GPU that computes bf16
    natively, and on a CPU where the timing chose it.

    ``implementation`` (the model's ``routing``/``convolution``, and the ``precision``:
    ``"float32"`` or ``"bfloat16"``), ``fused_adam`` and ``graphed`` override single
    choices; the benchmarks measure each technique this way.
    """
    device = resolve_device(device)
    chosen, timings = choose_implementation(config, device, fast, sample)
    chosen = chosen | (implementation or {})
    precision_name = chosen.pop("precision", None)
    model = build_model(config, device, **chosen)
    # the names of how the model computes, for the history (the tables' first: reference)
    names = {
        key: chosen.get(key, next(iter(IMPLEMENTATIONS[key])))
        for key in ARCHITECTURES[config.architecture].implementations
    }
    graphed = (fast and device.type == "cuda") if graphed is None else graphed
    fused_adam = fast if fused_adam is None else fused_adam
    optimizer = make_optimizer(model, config.learning_rate, fused=fused_adam, capturable=graphed)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=config.lr_decay)
    average = WeightAverage(model, config.weight_averaging) if config.weight_averaging else None
    if precision_name is None:
        precision = autocast_dtype(device, config.mixed_precision)
    else:
        precision = PRECISIONS[check_choice("precision", precision_name, list(PRECISIONS))]
    step: TrainingStep | GraphedStep = TrainingStep(
        model, optimizer, config.loss, precision, average
    )
    if graphed:
        step = GraphedStep(step)
    details = {
        "fast_paths": fast,
        "optimizer": "Adam, fused" if optimizer.defaults.get("fused") else "Adam",
        "cuda_graphs": graphed,
        "precision": str(precision or torch.float32).removeprefix("torch."),
        **names,
    }
    if timings is not None:
        details |= {k: v for k, v in timings.items() if k not in ("convolution", "precision")}
    return TrainingRun(config, model, optimizer, scheduler, step, average, details)
