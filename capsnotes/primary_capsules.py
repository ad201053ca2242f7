"""Primary capsules: the first layer whose outputs are vectors (Sabour et al. 2017, §4).

A convolution produces ``capsule_channels × capsule_dim`` feature maps; every group of
``capsule_dim`` maps at one grid position is read as one capsule and squashed. With the
paper's sizes, 20×20×256 features become 32 channels × 6×6 positions = 1,152 capsules
of 8 dimensions.
"""

from __future__ import annotations

from torch import Tensor, nn

from .checks import FloatTensor, check_positive_ints, checked
from .squash import squash

__all__ = ["PrimaryCapsules", "conv_output_size"]


def conv_output_size(size: int, kernel_size: int, stride: int = 1) -> int:
    """Side length after an unpadded convolution; raises if nothing is left."""
    out = (size - kernel_size) // stride + 1
    if out < 1:
        raise ValueError(
            f"a {kernel_size}x{kernel_size} convolution with stride {stride} needs inputs "
            f"of at least {kernel_size} pixels, got {size}"
        )
    return out


def _features_shape(arguments: dict) -> tuple[int | None, ...]:
    return (None, arguments["self"].conv.in_channels, None, None)


class PrimaryCapsules(nn.Module):
    """Convolutional capsules: conv ``k×k``, stride ``s`` → squashed ``capsule_dim`` vectors.

    Input ``[B, in_channels, H, W]``; output ``u`` of shape
    ``[B, capsule_channels * H' * W', capsule_dim]``, ordered channel-major (all positions
    of capsule channel 0 first), every vector squashed. ``convolution`` is the class of
    the convolution, ``nn.Conv2d`` or one with its parameters that computes the same
    (chapter 14's ``MatmulConv2d``).
    """

    def __init__(
        self,
        in_channels: int = 256,
        capsule_channels: int = 32,
        capsule_dim: int = 8,
        kernel_size: int = 9,
        stride: int = 2,
        convolution: type[nn.Conv2d] = nn.Conv2d,
    ) -> None:
        super().__init__()
        check_positive_ints(
            in_channels=in_channels,
            capsule_channels=capsule_channels,
            capsule_dim=capsule_dim,
            kernel_size=kernel_size,
            stride=stride,
        )
        self.capsule_channels = capsule_channels
        self.capsule_dim = capsule_dim
        # One convolution computes every capsule's components at once: output channel
        # c * capsule_dim + k is component k of capsule channel c.
        self.conv = convolution(
            in_channels, capsule_channels * capsule_dim, kernel_size, stride=stride
        )

    @checked(features=FloatTensor(shape=_features_shape))
    def forward(self, features: Tensor) -> Tensor:
        maps = self.conv(features)  # [B, C·D, H', W']
        batch, _, height, width = maps.shape
        capsules = maps.view(batch, self.capsule_channels, self.capsule_dim, height, width)
        # Move each capsule's components to the last axis: [B, C, H', W', D] -> [B, N, D]
        capsules = capsules.permute(0, 1, 3, 4, 2).reshape(batch, -1, self.capsule_dim)
        return squash(capsules)  # u: [B, N, D], every ‖u_i‖ < 1

    def num_capsules(self, height: int, width: int) -> int:
        """How many capsules an input of ``height × width`` features yields."""
        conv = self.conv
        out_h = conv_output_size(height, conv.kernel_size[0], conv.stride[0])
        out_w = conv_output_size(width, conv.kernel_size[1], conv.stride[1])
        return self.capsule_channels * out_h * out_w
