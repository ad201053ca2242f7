"""Training and evaluation: Adam with exponential learning-rate decay, as in the paper.

``train(config, out_dir)`` writes, after every epoch, ``out_dir/checkpoint.safetensors``
and ``out_dir/history.json`` (both atomically), and resumes from that checkpoint when
called again with the same configuration. Two profiles are predefined:

* ``quick`` — a 2-core CPU: real MNIST, a subset, a few minutes at most. CI and the book
  on a CPU use it.
* ``paper`` — a GPU: all 60,000 training images with the paper's shift augmentation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from . import __version__
from .allocator import allocator_setting
from .checkpoint import atomic_write_bytes, load_checkpoint, load_model_state, save_checkpoint
from .checks import check_positive_int, check_positive_number
from .data import DATASETS, ImageSet, batches, load_dataset
from .fast import accelerate, choose_cpu_convolution
from .losses import margin_loss, reconstruction_loss
from .model import CapsNet, CapsNetConfig, dataclass_from_dict
from .step import TrainingStep, autocast_for

__all__ = [
    "PROFILES",
    "TrainConfig",
    "TrainResult",
    "autocast_for",
    "build_model",
    "default_profile",
    "evaluate",
    "make_optimizer",
    "profile",
    "resolve_device",
    "train",
    "tune_cpu_convolutions",
]


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (and so its results)."""

    dataset: str = "mnist"
    epochs: int = 1
    batch_size: int = 128
    learning_rate: float = 1e-3
    lr_decay: float = 0.96  #: the learning rate is multiplied by this after every epoch
    train_size: int | None = None  #: a random subset of the training set; None = all
    test_size: int | None = None  #: a random (fixed) subset of the test set; None = all
    max_shift: int = 2  #: random shifts of up to this many pixels, zero-padded
    seed: int = 0
    reconstruction_weight: float = 0.0005
    eval_batch_size: int = 500
    mixed_precision: bool = True  #: bf16 autocast, on CUDA only
    #: decay per step of a moving average of the weights (0: none). With one, the
    #: averaged weights are the run's model: tested every epoch, saved and returned.
    weight_averaging: float = 0.0
    model: CapsNetConfig = field(default_factory=CapsNetConfig)

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            object.__setattr__(self, "model", CapsNetConfig.from_dict(self.model))
        positive = ("epochs", "batch_size", "eval_batch_size")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("train_size", "test_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be None or a positive int, got {value!r}")
        check_positive_number("learning_rate", self.learning_rate)
        if not 0 < self.lr_decay <= 1:
            raise ValueError(f"lr_decay must lie in (0, 1], got {self.lr_decay}")
        if isinstance(self.max_shift, bool) or not isinstance(self.max_shift, int):
            raise TypeError(f"max_shift must be an int >= 0, got {self.max_shift!r}")
        if self.max_shift < 0:
            raise ValueError(f"max_shift must be >= 0, got {self.max_shift}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed must be an int, got {self.seed!r}")
        if not 0 <= self.weight_averaging < 1:
            raise ValueError(
                "weight_averaging must lie in [0, 1) (0: no averaging), "
                f"got {self.weight_averaging}"
            )
        if not self.reconstruction_weight >= 0:
            raise ValueError(
                f"reconstruction_weight must be >= 0, got {self.reconstruction_weight}"
            )
        if self.dataset not in DATASETS:
            raise ValueError(
                f"unknown dataset {self.dataset!r}; expected one of {sorted(DATASETS)}"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        return dataclass_from_dict(cls, values)

    def key(self) -> str:
        """A short hash of the configuration: equal configurations, equal keys."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


PROFILES: dict[str, TrainConfig] = {
    "quick": TrainConfig(
        epochs=3,
        batch_size=32,
        train_size=2560,
        test_size=2000,
        max_shift=0,
        lr_decay=0.9,
    ),
    "paper": TrainConfig(epochs=100, batch_size=128, max_shift=2, lr_decay=0.955),
}


def profile(name: str, **overrides: Any) -> TrainConfig:
    """The predefined configuration ``name`` with some fields replaced."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; expected one of {sorted(PROFILES)}")
    return TrainConfig.from_dict(PROFILES[name].to_dict() | overrides)


def default_profile() -> str:
    """``paper`` where a CUDA GPU is available, ``quick`` otherwise."""
    return "paper" if torch.cuda.is_available() else "quick"


def resolve_device(device: torch.device | str | None = None) -> torch.device:
    """``None`` or ``"auto"``: the GPU if there is one, else the CPU."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}: {error}"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but PyTorch sees no CUDA GPU")
    return device


def build_model(config: TrainConfig, device: torch.device | str = "cpu") -> CapsNet:
    """A freshly initialised model, seeded by ``config.seed`` without touching the
    global random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = CapsNet(config.model)
    return model.to(device)


def device_name(device: torch.device) -> str:
    """A readable description of ``device``, e.g. ``NVIDIA H100 80GB HBM3`` or
    ``CPU: AMD EPYC, 2 threads``."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"CPU: {model}, {torch.get_num_threads()} threads"


@torch.no_grad()
def evaluate(
    model: CapsNet,
    data: ImageSet,
    batch_size: int = 500,
    mixed_precision: bool = True,
    reconstruction_weight: float = 0.0005,
    return_outputs: bool = False,
) -> dict[str, Any]:
    """Accuracy and mean losses of ``model`` on ``data`` (the decoder sees the predicted
    capsule, as at test time).

    Returns a dict with ``accuracy`` (a fraction), ``margin_loss``,
    ``reconstruction_loss`` and ``count``; with ``return_outputs``, also ``lengths``
    ``[N, classes]``, ``predictions`` ``[N]`` and ``capsules`` ``[N, classes, dim]`` on the
    CPU.
    """
    check_positive_int("batch_size", batch_size)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    data = data.to(device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    margin_total = torch.zeros((), device=device)
    recon_total = torch.zeros((), device=device)
    kept: dict[str, list[Tensor]] = {"lengths": [], "predictions": [], "capsules": []}
    for images, labels in batches(data, batch_size):
        with autocast_for(device, mixed_precision):
            out = model(images)
        count = labels.shape[0]
        margin_total += margin_loss(out.capsules.float(), labels) * count
        recon_total += (
            reconstruction_loss(out.reconstructions.float(), images, reconstruction_weight) * count
        )
        correct += (out.predictions == labels).sum()
        if return_outputs:
            kept["lengths"].append(out.lengths.float().cpu())
            kept["predictions"].append(out.predictions.cpu())
            kept["capsules"].append(out.capsules.float().cpu())
    model.train(was_training)
    total = len(data)
    result: dict[str, Any] = {
        "accuracy": correct.item() / total,
        "margin_loss": margin_total.item() / total,
        "reconstruction_loss": recon_total.item() / total,
        "count": total,
    }
    if return_outputs:
        result.update({name: torch.cat(parts) for name, parts in kept.items()})
    return result


@dataclass
class TrainResult:
    """The trained model (on the training device; the averaged weights if the run kept a
    moving average), its history and where it was saved."""

    model: CapsNet
    history: dict[str, Any]
    out_dir: Path


def _epoch_seed(seed: int, epoch: int) -> int:
    # Each epoch draws its shuffle and shifts from its own seed, so that a resumed run
    # sees exactly the batches an uninterrupted run would have seen.
    return seed * 1_000_003 + epoch


def _check_data_fits(config: TrainConfig, data: ImageSet) -> None:
    model = config.model
    expected = (model.in_channels, model.image_size, model.image_size)
    if tuple(data.images.shape[1:]) != expected or len(data.classes) != model.num_classes:
        raise ValueError(
            f"dataset {config.dataset!r} has images {tuple(data.images.shape[1:])} and "
            f"{len(data.classes)} classes, but the model expects images {expected} and "
            f"{model.num_classes} classes"
        )


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
) -> TrainResult:
    """Train a CapsNet with ``config``, saving into ``out_dir`` after every epoch.

    Args:
        config: the run's configuration (see :data:`PROFILES`).
        out_dir: receives ``checkpoint.safetensors`` and ``history.json``.
        device: ``"cpu"``, ``"cuda"``, or None for the GPU when there is one.
        data_root: where the datasets are; see :func:`capsnotes.data.data_root`.
        resume: continue from ``out_dir``'s checkpoint if it has one. It must come from
            the same configuration, except that ``epochs`` may be larger: the learning
            rate and each epoch's batches do not depend on the number of epochs, so a run
            extended from 12 to 16 epochs trains exactly as a 16-epoch run would.
        progress: show a tqdm progress bar.
        fast: use the tested fast paths of :mod:`capsnotes.fast`.
        on_epoch_end: called with each epoch's record after it is saved.
        provenance: JSON-serialisable facts about how this call was made (the CLI passes
            the exact command, the profile and its overrides). The call that starts the
            run keeps it as ``history["provenance"]``; every call that trains adds it to
            ``history["session_details"]``, with the fast paths and allocator it used.
        checkpoint_every: write the checkpoint after every this many epochs (and after
            the last); ``history.json`` is written after every epoch. On a GPU an epoch
            can take less time than writing the model and Adam's state.

    With ``fast`` on a CUDA device, each step is replayed from a CUDA graph
    (:class:`~capsnotes.step.TrainingStep`).
    """
    check_positive_int("checkpoint_every", checkpoint_every)
    started = time.perf_counter()
    device = resolve_device(device)
    out_dir = Path(out_dir)
    checkpoint_path = out_dir / "checkpoint.safetensors"

    previous = None
    if resume and checkpoint_path.exists():
        previous = load_checkpoint(checkpoint_path)
        before = TrainConfig.from_dict(previous.metadata["train_config"])
        if dataclasses.replace(before, epochs=config.epochs) != config:
            raise ValueError(
                f"{checkpoint_path} comes from a different configuration; "
                "train into another folder, or pass resume=False (--no-resume) to start over"
            )
        done = len(previous.metadata["history"]["epochs"])
        if config.epochs < done:
            raise ValueError(
                f"{checkpoint_path} has trained {done} epochs already, more than the "
                f"{config.epochs} asked for"
            )

    train_set = load_dataset(config.dataset, True, data_root).subset(config.train_size, config.seed)
    test_set = load_dataset(config.dataset, False, data_root).subset(config.test_size, seed=0)
    _check_data_fits(config, train_set)
    train_set, test_set = train_set.to(device), test_set.to(device)

    model = build_model(config, device)
    # Starts as an exact copy: built from the same seed.
    averaged = build_model(config, device) if config.weight_averaging else None
    graphed = fast and device.type == "cuda"
    optimizer = make_optimizer(model, config.learning_rate, fused=fast, capturable=graphed)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=config.lr_decay)
    history = {
        "format": 1,
        "train_config": config.to_dict(),
        "device": device_name(device),
        "torch": torch.__version__,
        "capsnotes": __version__,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "provenance": provenance or {},
        "epochs": [],
    }
    if previous is not None:
        load_model_state(model, previous.model_state, checkpoint_path)
        if averaged is not None:
            if previous.average_state is None:
                raise ValueError(f"{checkpoint_path} has no averaged weights to resume from")
            load_model_state(averaged, previous.average_state, checkpoint_path)
        optimizer.load_state_dict(previous.optimizer_state)
        scheduler.load_state_dict(previous.scheduler_state)
        history = previous.metadata["history"]
        history["train_config"] = config.to_dict()  # the same, or more epochs
    # Wall time of each call of train() that trained something; their sum is the run's.
    sessions = history.setdefault("sessions", [])
    start_epoch = len(history["epochs"]) + 1
    if fast:
        accelerate(model, device)
        if averaged is not None:
            accelerate(averaged, device)
    details = {
        "provenance": provenance or {},
        "fast_paths": fast,
        "allocator": allocator_setting(),
        "optimizer": "Adam, fused" if optimizer.defaults.get("fused") else "Adam",
        "cuda_graphs": graphed,
    }
    if fast and device.type == "cpu" and start_epoch <= config.epochs:
        details |= tune_cpu_convolutions(model, config, train_set).to_dict()
    step = TrainingStep(
        model,
        optimizer,
        config.reconstruction_weight,
        config.mixed_precision,
        graphed=graphed,
        averaged=averaged,
        decay=config.weight_averaging,
    )
    result_model = model if averaged is None else averaged

    def test(which: CapsNet) -> dict[str, Any]:
        return evaluate(
            which,
            test_set,
            config.eval_batch_size,
            config.mixed_precision,
            config.reconstruction_weight,
        )

    for epoch in range(start_epoch, config.epochs + 1):
        record = _train_epoch(step, config, train_set, epoch, progress)
        scheduler.step()
        tested_at = time.perf_counter()
        scores = test(result_model)
        record.update(
            test_accuracy=scores["accuracy"],
            test_margin_loss=scores["margin_loss"],
            test_reconstruction_loss=scores["reconstruction_loss"],
        )
        if averaged is not None:  # the trained weights themselves, for comparison
            live = test(model)
            record.update(
                test_accuracy_live=live["accuracy"], test_margin_loss_live=live["margin_loss"]
            )
        record["eval_seconds"] = time.perf_counter() - tested_at
        history["epochs"].append(record)
        if epoch == start_epoch:
            sessions.append(0.0)
            history.setdefault("session_details", []).append(details)
        sessions[-1] = time.perf_counter() - started
        history["wall_seconds"] = sum(sessions)
        history["test_accuracy"] = record["test_accuracy"]
        last = epoch == config.epochs
        if last or (epoch - start_epoch + 1) % checkpoint_every == 0:
            save_checkpoint(
                checkpoint_path,
                model.state_dict(),
                {"train_config": config.to_dict(), "epoch": epoch, "history": history},
                optimizer.state_dict(),
                scheduler.state_dict(),
                average_state=None if averaged is None else averaged.state_dict(),
            )
        _write_json(out_dir / "history.json", history)
        if on_epoch_end is not None:
            on_epoch_end(record)

    return TrainResult(result_model, history, out_dir)


def make_optimizer(
    model: nn.Module, learning_rate: float, fused: bool = True, capturable: bool = False
) -> torch.optim.Adam:
    """Adam over ``model``'s parameters, as the paper trains. With ``fused``, where the
    parameters' device has torch's fused Adam kernel (CPU and CUDA), it is used: one pass
    over each parameter per step instead of several, the same update up to rounding.
    Otherwise torch's default implementation. ``capturable`` keeps the step count on the
    device, so that the update can be recorded in a CUDA graph."""
    parameters = list(model.parameters())
    fusable = {"cpu", "cuda"}
    if fused and all(p.device.type in fusable and p.is_floating_point() for p in parameters):
        return torch.optim.Adam(parameters, lr=learning_rate, fused=True, capturable=capturable)
    return torch.optim.Adam(parameters, lr=learning_rate, capturable=capturable)


def tune_cpu_convolutions(model: CapsNet, config: TrainConfig, data: ImageSet) -> Any:
    """Native or matmul convolutions for this CPU, timed on a forward and backward pass of
    one real training batch (the parameters do not change)."""
    images, labels = next(batches(data, config.batch_size))
    cpu = device_name(torch.device("cpu"))
    key = f"{cpu}|torch {torch.__version__}|{config.model.to_dict()}|{tuple(images.shape)}"

    def step() -> None:
        out = model(images, labels)
        loss = margin_loss(out.capsules, labels) + reconstruction_loss(
            out.reconstructions, images, config.reconstruction_weight
        )
        loss.backward()

    return choose_cpu_convolution(model, step, key)


def _train_epoch(
    step: TrainingStep,
    config: TrainConfig,
    data: ImageSet,
    epoch: int,
    progress: bool,
) -> dict[str, Any]:
    """One pass over ``data``. Nothing is read back from the device until the end."""
    step.model.train()
    device = data.device
    generator = torch.Generator(device=device).manual_seed(_epoch_seed(config.seed, epoch))
    learning_rate = step.optimizer.param_groups[0]["lr"]
    stats: list[Tensor] = []  # per step: margin loss, reconstruction loss, correct
    steps = -(-len(data) // config.batch_size)
    started = time.perf_counter()
    bar = tqdm(
        batches(
            data, config.batch_size, shuffle=True, max_shift=config.max_shift, generator=generator
        ),
        total=steps,
        desc=f"epoch {epoch}/{config.epochs}",
        disable=not progress,
        leave=False,
    )
    for images, labels in bar:
        stats.append(step(images, labels))
    margins, recons, correct = torch.stack(stats).T.tolist()  # the epoch's one wait
    seconds = time.perf_counter() - started
    return {
        "epoch": epoch,
        "learning_rate": learning_rate,
        "margin_loss": sum(margins) / len(margins),
        "reconstruction_loss": sum(recons) / len(recons),
        "train_accuracy": sum(correct) / len(data),
        "seconds": seconds,
        "images_per_second": len(data) / seconds,
        "step_margin_loss": margins,
        "step_reconstruction_loss": recons,
    }


def _write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, (json.dumps(value, indent=1) + "\n").encode())
