"""The two layers of capsules (Sabour et al. 2017, §4).

* :class:`PrimaryCapsules` — the first layer whose outputs are vectors: a convolution
  produces ``capsule_channels × capsule_dim`` feature maps, and every group of
  ``capsule_dim`` maps at one grid position is read as one capsule and squashed. With
  the paper's sizes, 20×20×256 features become 32 channels × 6×6 positions = 1,152
  capsules of 8 dimensions.
* :class:`DigitCapsules` — one capsule per class: every primary capsule ``i`` votes
  ``û_{j|i} = W_ij u_i`` for every digit capsule ``j`` (eq. 2), and routing by agreement
  combines the votes. 1,152 × 10 matrices of 16×8, 1,474,560 weights, no bias.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor, nn

from .checks import check_capsules, check_features, check_iterations, check_sizes
from .routing import (
    Couplings,
    Outputs,
    Votes,
    dynamic_routing,
    dynamic_routing_with_couplings,
)
from .squash import squash

#: Standard deviation of the normal initialisation of ``W_ij``.
WEIGHT_INIT_STD = 0.01


def conv_output_size(size: int, kernel_size: int, stride: int = 1) -> int:
    """Side length after an unpadded convolution; raises if nothing is left."""
    out = (size - kernel_size) // stride + 1
    if out < 1:
        raise ValueError(
            f"a {kernel_size}x{kernel_size} convolution with stride {stride} needs "
            f"inputs of at least {kernel_size} pixels, got {size}"
        )
    return out


class PrimaryCapsules(nn.Module):
    """Convolutional capsules: conv ``k×k``, stride ``s`` → squashed ``capsule_dim``
    vectors, ordered channel-major (all positions of capsule channel 0 first)."""

    def __init__(
        self,
        in_channels: int = 256,
        capsule_channels: int = 32,
        capsule_dim: int = 8,
        kernel_size: int = 9,
        stride: int = 2,
    ) -> None:
        super().__init__()
        check_sizes(
            in_channels=in_channels,
            capsule_channels=capsule_channels,
            capsule_dim=capsule_dim,
            kernel_size=kernel_size,
            stride=stride,
        )
        self.capsule_channels, self.capsule_dim = capsule_channels, capsule_dim
        # One convolution computes every capsule's components at once: output channel
        # c * capsule_dim + k is component k of capsule channel c.
        self.conv = nn.Conv2d(
            in_channels, capsule_channels * capsule_dim, kernel_size, stride
        )

    def forward(
        self, features: Float[Tensor, "batch channel height width"]
    ) -> Float[Tensor, "batch capsule dim"]:
        check_features(features, self.conv)
        maps = self.conv(features)  # [B, C·D, H', W']
        batch = maps.shape[0]
        capsules = maps.view(
            batch, self.capsule_channels, self.capsule_dim, *maps.shape[2:]
        )
        # each capsule's D components to the last axis: [B, C, H', W', D] → [B, N, D]
        capsules = capsules.permute(0, 1, 3, 4, 2).reshape(batch, -1, self.capsule_dim)
        return squash(capsules)  # u: every ‖u_i‖ < 1


class DigitCapsules(nn.Module):
    """A fully connected capsule layer with routing by agreement: ``u`` ``[B, in_caps,
    in_dim]`` → ``v`` ``[B, out_caps, out_dim]``. ``weight[i, j]`` is the paper's
    ``W_ij`` (``[in_caps, out_caps, out_dim, in_dim]``)."""

    def __init__(
        self,
        in_caps: int = 1152,
        in_dim: int = 8,
        out_caps: int = 10,
        out_dim: int = 16,
        iterations: int = 3,
    ) -> None:
        super().__init__()
        check_sizes(in_caps=in_caps, in_dim=in_dim, out_caps=out_caps, out_dim=out_dim)
        self.in_caps, self.in_dim = in_caps, in_dim
        self.out_caps, self.out_dim = out_caps, out_dim
        self.iterations = check_iterations(iterations)
        self.weight = nn.Parameter(torch.empty(in_caps, out_caps, out_dim, in_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=WEIGHT_INIT_STD)

    def votes(self, u: Float[Tensor, "batch child in_dim"]) -> Votes:
        """``û_{j|i} = W_ij u_i`` for every child ``i`` and parent ``j``."""
        check_capsules("u", u, self.in_caps, self.in_dim)
        return torch.einsum("ijdk,bik->bijd", self.weight, u)

    def forward(self, u: Float[Tensor, "batch child in_dim"]) -> Outputs:
        return dynamic_routing(self.votes(u), self.iterations)

    def forward_with_couplings(
        self, u: Float[Tensor, "batch child in_dim"]
    ) -> tuple[Outputs, Couplings]:
        """The outputs and the last iteration's couplings ``[batch, child, parent]``."""
        return dynamic_routing_with_couplings(self.votes(u), self.iterations)

    def extra_repr(self) -> str:
        return (
            f"in_caps={self.in_caps}, in_dim={self.in_dim}, out_caps={self.out_caps}, "
            f"out_dim={self.out_dim}, iterations={self.iterations}"
        )
