"""CapsNet's training objective: margin loss (eq. 4) plus the weighted reconstruction
loss (§4.1), combined in one place, :func:`capsnet_loss`."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import torch
from jaxtyping import Float
from torch import Tensor

from .checks import check_capsule_output, check_margin_loss, check_reconstruction_loss


class Loss(NamedTuple):
    """The value of a training objective for one batch."""

    total: Tensor  #: the scalar to minimise
    #: its named parts, scalars, as the training records keep them
    terms: dict[str, Tensor]


class CapsuleOutput(Protocol):
    """What :func:`capsnet_loss` reads of a model's output."""

    capsules: Tensor  #: ``[B, classes, dim]``
    reconstructions: Tensor  #: ``[B, ...]``, as many values per example as its target


def class_presence(target: Tensor, num_classes: int, dtype: torch.dtype) -> Tensor:
    """``T_k`` ``[B, num_classes]``: 1 where class ``k`` is present, from class indices
    ``[B]`` or from a presence matrix ``[B, num_classes]`` (several classes per
    image)."""
    if target.dim() == 1:
        return torch.nn.functional.one_hot(target.long(), num_classes).to(dtype)
    return target.to(dtype)


def margin_loss(
    v: Float[Tensor, "batch classes dim"],
    target: Tensor,
    m_pos: float = 0.9,
    m_neg: float = 0.1,
    lam: float = 0.5,
) -> Float[Tensor, ""]:
    r"""Margin loss of eq. 4, summed over classes and averaged over the batch.

    .. math:: L_k = T_k \max(0, m^+ - \lVert v_k\rVert)^2
              + \lambda (1 - T_k) \max(0, \lVert v_k\rVert - m^-)^2

    ``target`` holds class indices ``[B]`` or presence ``[B, classes]``. A present class
    should be longer than ``m_pos``, an absent one shorter than ``m_neg``; ``lam``
    down-weights the absent ones, so that early in training the lengths of all capsules
    are not pushed to zero.
    """
    check_margin_loss(v, target, m_pos, m_neg, lam)
    present = class_presence(target, v.shape[1], v.dtype)  # T_k: [B, classes]
    lengths = torch.linalg.vector_norm(v, dim=-1)  # [B, classes]
    # Both hinge terms are squared: the gradient fades as a length reaches its margin.
    loss_present = present * torch.relu(m_pos - lengths).pow(2)
    loss_absent = lam * (1.0 - present) * torch.relu(lengths - m_neg).pow(2)
    return (loss_present + loss_absent).sum(dim=1).mean()


def reconstruction_loss(
    reconstructions: Float[Tensor, "batch ..."], images: Tensor, weight: float = 0.0005
) -> Float[Tensor, ""]:
    """Sum of squared pixel errors per image, times ``weight``, averaged over the batch.

    The paper scales the *sum* (not the mean) by 0.0005 "so that it does not dominate
    the margin loss"; with a mean the term would be 784× weaker on MNIST. ``images`` is
    ``[B, ...]`` with as many values per image, pixels in ``[0, 1]``.
    """
    check_reconstruction_loss(reconstructions, images, weight)
    errors = (
        reconstructions.flatten(1) - images.flatten(1).to(reconstructions.dtype)
    ).pow(2)
    return weight * errors.sum(dim=1).mean()


def capsnet_loss(
    output: CapsuleOutput,
    images: Tensor,
    target: Tensor,
    reconstruction_weight: float = 0.0005,
    *,
    margin: Callable[[Tensor, Tensor], Tensor] = margin_loss,
    reconstruction: Callable[[Tensor, Tensor, float], Tensor] = reconstruction_loss,
) -> Loss:
    """The objective CapsNet is trained with (§4.1): the margin loss of the digit
    capsules plus ``reconstruction_weight`` × the summed squared error of the
    reconstructions (0: the decoder does not help), both in float32, also where the
    forward pass ran in 16 bits. ``output`` is what ``CapsNet(images, labels)``
    returned; ``margin`` and ``reconstruction`` are the paper's terms unless a
    comparison replaces one (:mod:`capsnotes.experiments.mistakes`)."""
    check_capsule_output(output)
    margin_term = margin(output.capsules.float(), target)
    reconstruction_term = reconstruction(
        output.reconstructions.float(), images, reconstruction_weight
    )
    return Loss(
        margin_term + reconstruction_term,
        {
            "margin_loss": margin_term.detach(),
            "reconstruction_loss": reconstruction_term.detach(),
        },
    )
