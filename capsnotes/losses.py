"""CapsNet's training objective: margin loss (eq. 4) plus the weighted reconstruction
loss (§4.1), combined in one place, :func:`capsnet_loss`."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .checks import check_class_indices, check_float_tensor
from .model import CapsNetOutput

__all__ = ["Loss", "capsnet_loss", "class_presence", "margin_loss", "reconstruction_loss"]


def class_presence(
    target: Tensor, num_classes: int, dtype: torch.dtype, batch: int | None = None
) -> Tensor:
    """``T_k``: 1 where class ``k`` is present, as ``[B, num_classes]`` of ``dtype``.

    ``target`` is either class indices ``[B]`` (one class per image, each in
    ``[0, num_classes)``) or already a presence matrix ``[B, num_classes]`` (several
    classes per image, as in MultiMNIST). With ``batch``, ``B`` must equal it.
    """
    if not torch.is_tensor(target):
        raise TypeError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.dim() == 1:
        check_class_indices("target", target, num_classes, batch)
        return torch.nn.functional.one_hot(target.long(), num_classes).to(dtype)
    expected = (batch if batch is not None else target.shape[0], num_classes)
    if target.dim() == 2 and tuple(target.shape) == expected and not target.is_complex():
        return target.to(dtype)
    rows = "batch" if batch is None else batch
    raise ValueError(
        f"target must be class indices [{rows}] or presence [{rows}, {num_classes}], "
        f"got shape {tuple(target.shape)}"
    )


def _check_margins(m_pos: float, m_neg: float, lam: float) -> None:
    if not 0 <= m_neg < m_pos:
        raise ValueError(f"margins must satisfy 0 <= m_neg < m_pos, got {m_neg}, {m_pos}")
    if not lam >= 0:
        raise ValueError(f"lam must be >= 0, got {lam}")


def margin_loss(
    v: Tensor,
    target: Tensor,
    m_pos: float = 0.9,
    m_neg: float = 0.1,
    lam: float = 0.5,
) -> Tensor:
    r"""Margin loss of eq. 4, summed over classes and averaged over the batch.

    .. math:: L_k = T_k \max(0, m^+ - \lVert v_k\rVert)^2
              + \lambda (1 - T_k) \max(0, \lVert v_k\rVert - m^-)^2

    Args:
        v: class capsules ``[B, num_classes, dim]``.
        target: class indices ``[B]`` or presence ``[B, num_classes]``.
        m_pos, m_neg: a present class should be longer than ``m_pos``, an absent one
            shorter than ``m_neg``.
        lam: down-weights absent classes, so that early in training the lengths of all
            capsules are not pushed to zero.

    Returns:
        A scalar tensor.
    """
    check_float_tensor("v", v, "[batch, classes, dim]", dims=3)
    _check_margins(m_pos, m_neg, lam)
    present = class_presence(target, v.shape[1], v.dtype, batch=v.shape[0])  # T_k
    lengths = torch.linalg.vector_norm(v, dim=-1)  # [B, classes]
    # Both hinge terms are squared: the gradient fades as a length reaches its margin.
    loss_present = present * torch.relu(m_pos - lengths).pow(2)
    loss_absent = lam * (1.0 - present) * torch.relu(lengths - m_neg).pow(2)
    return (loss_present + loss_absent).sum(dim=1).mean()


def reconstruction_loss(reconstructions: Tensor, images: Tensor, weight: float = 0.0005) -> Tensor:
    """Sum of squared pixel errors per image, times ``weight``, averaged over the batch.

    The paper scales the *sum* (not the mean) by 0.0005 "so that it does not dominate
    the margin loss"; with a mean the term would be 784× weaker on MNIST.

    Args:
        reconstructions: ``[B, ...]`` with as many values per image as ``images``.
        images: ``[B, C, H, W]`` (or any ``[B, ...]``), pixels in ``[0, 1]``.
    """
    check_float_tensor("reconstructions", reconstructions)
    if not torch.is_tensor(images):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if reconstructions.shape[0] != images.shape[0]:
        raise ValueError(
            f"batch sizes differ: {reconstructions.shape[0]} reconstructions for "
            f"{images.shape[0]} images"
        )
    if reconstructions[0].numel() != images[0].numel():
        raise ValueError(
            f"each reconstruction must have as many pixels as its image: "
            f"{tuple(reconstructions.shape[1:])} vs {tuple(images.shape[1:])}"
        )
    errors = (reconstructions.flatten(1) - images.flatten(1).to(reconstructions.dtype)).pow(2)
    return weight * errors.sum(dim=1).mean()


class Loss(NamedTuple):
    """The value of a training objective for one batch."""

    total: Tensor  #: the scalar to minimise
    terms: dict[str, Tensor]  #: its named parts, scalars, as the training records keep them


def capsnet_loss(
    output: CapsNetOutput, images: Tensor, target: Tensor, reconstruction_weight: float = 0.0005
) -> Loss:
    """The objective CapsNet is trained with (§4.1): the margin loss of the digit capsules
    plus ``reconstruction_weight`` × the summed squared error of the reconstructions.

    Args:
        output: what ``CapsNet(images, labels)`` returned (the decoder saw the capsule
            of the label in training, of the prediction at test time).
        images: the input images ``[B, C, H, W]``.
        target: class indices ``[B]`` or presence ``[B, num_classes]``.
        reconstruction_weight: 0.0005 in the paper; 0 trains without the decoder's
            help (its parameters then get no gradient).

    Both terms are computed in float32, also when the forward pass ran in bf16.
    """
    margin = margin_loss(output.capsules.float(), target)
    reconstruction = reconstruction_loss(
        output.reconstructions.float(), images, reconstruction_weight
    )
    return Loss(
        margin + reconstruction,
        {"margin_loss": margin.detach(), "reconstruction_loss": reconstruction.detach()},
    )
