"""Scoring a trained model on a test set, the same way for every model and run."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .config import ARCHITECTURES, TrainConfig
from .data import ImageSet, batches
from .devices import autocast_dtype, autocast_for

__all__ = ["evaluate"]


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: ImageSet,
    config: TrainConfig | None = None,
    return_outputs: bool = False,
) -> dict[str, Any]:
    """Accuracy and mean loss terms of ``model`` on ``data``, in evaluation mode (a
    CapsNet's decoder sees the capsule of the prediction, as at test time).

    ``config`` supplies the objective (:meth:`TrainConfig.loss`), the batch size and the
    precision; by default the defaults for the model's architecture.

    Returns a dict with ``accuracy`` (a fraction), ``count``, and the mean of each loss
    term (``margin_loss`` and ``reconstruction_loss`` for a CapsNet, ``cross_entropy``
    for the CNN). With ``return_outputs``, also the model's outputs for every image, on
    the CPU, except the reconstructions: for a CapsNet ``capsules`` ``[N, classes, dim]``,
    ``lengths`` ``[N, classes]`` and ``predictions`` ``[N]``.
    """
    architecture = next((name for name, a in ARCHITECTURES.items() if type(model) is a.model), None)
    if architecture is None or ARCHITECTURES[architecture].loss is None:
        raise TypeError(f"evaluate() scores a CapsNet or a ConvNet, got {type(model).__name__}")
    if config is None:
        config = TrainConfig(architecture=architecture, model=model.config)
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a capsnotes.TrainConfig, got {type(config).__name__}")
    if config.architecture != architecture:
        raise ValueError(
            f"a {config.architecture} configuration cannot score a {type(model).__name__}"
        )
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    precision = autocast_dtype(device, config.mixed_precision)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    totals: dict[str, Tensor] = {}  # loss terms summed over the images
    kept: dict[str, list[Tensor]] = {}
    for images, labels in batches(data.to(device), config.eval_batch_size):
        with autocast_for(device, precision):
            output = model(images)
        loss = config.loss(output, images, labels)
        correct += (output.predictions == labels).sum()
        for name, value in loss.terms.items():
            totals[name] = totals.get(name, 0) + value * labels.shape[0]
        if return_outputs:
            for name, value in output._asdict().items():
                if name != "reconstructions":
                    value = value.float() if value.is_floating_point() else value
                    kept.setdefault(name, []).append(value.cpu())
    model.train(was_training)
    total = len(data)
    means = {name: value.item() / total for name, value in totals.items()}
    result: dict[str, Any] = {"accuracy": correct.item() / total, **means, "count": total}
    if return_outputs:
        result.update({name: torch.cat(parts) for name, parts in kept.items()})
    return result
