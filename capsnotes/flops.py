"""Exact arithmetic cost of CapsNet: multiply-adds per image, layer by layer.

Counted are the products of the linear and bilinear operations — convolutions, votes,
the two sums of routing, the decoder's matrix products — which are where the arithmetic
is. Element-wise work (ReLU, squash, softmax, the losses, Adam) is left out; it is a few
operations per element of tensors far smaller than the products' operand traffic.

A training step runs each product three times: forward, gradient with respect to its
input, gradient with respect to its weights (or its second operand). The first
convolution needs no input gradient, because nothing upstream learns.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import CapsNetConfig
from .primary_capsules import conv_output_size

__all__ = ["LayerCost", "layer_costs", "training_flops_per_image"]


@dataclass(frozen=True)
class LayerCost:
    """Multiply-adds per image of one part of the model."""

    name: str
    forward_macs: int
    backward_macs: int

    @property
    def training_flops(self) -> int:
        """Floating-point operations (2 per multiply-add) of one training step, per image."""
        return 2 * (self.forward_macs + self.backward_macs)


def layer_costs(config: CapsNetConfig | None = None) -> list[LayerCost]:
    """Per-image multiply-adds of each part of the model, forward and backward."""
    c = config or CapsNetConfig()
    side1 = conv_output_size(c.image_size, c.conv_kernel)
    side2 = c.primary_grid
    conv1 = side1 * side1 * c.conv_channels * c.in_channels * c.conv_kernel**2
    primary_out = c.primary_channels * c.primary_dim
    primary = side2 * side2 * primary_out * c.conv_channels * c.primary_kernel**2
    children, parents = c.num_primary_capsules, c.num_classes
    votes = children * parents * c.digit_dim * c.primary_dim
    # each iteration's weighted sum, plus an agreement between iterations
    routing = (2 * c.routing_iterations - 1) * children * parents * c.digit_dim
    sizes = [parents * c.digit_dim, *c.decoder_hidden, c.in_channels * c.image_size**2]
    decoder = sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    return [
        LayerCost("conv1", conv1, conv1),  # weight gradient only
        LayerCost("primary capsules", primary, 2 * primary),
        LayerCost("votes", votes, 2 * votes),
        LayerCost("routing", routing, 2 * routing),
        LayerCost("decoder", decoder, 2 * decoder),
    ]


def training_flops_per_image(config: CapsNetConfig | None = None) -> int:
    """Floating-point operations of one training step, per image (≈ 1.2 GFLOP for the
    paper's model)."""
    return sum(layer.training_flops for layer in layer_costs(config))
