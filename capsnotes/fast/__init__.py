"""How the same math runs fast: the wing the trainer and the experiments use and the
paper's modules never import; each module's docstring names the technique it holds.

:func:`speed_up` swaps a built CapsNet's layers for the fast ones. They hold the same
parameters under the same names, so a ``state_dict`` moves between the two freely.
"""

from __future__ import annotations

from torch import nn

from .convolution import MatmulConv2d
from .routing import FusedDigitCapsules

#: What :func:`speed_up` can choose, as the records name it (first: the paper's).
ROUTINGS = ("reference", "fused")
#: ``"matmul"``: the convolutions as matrix products, forward and backward;
#: ``"matmul-native-input"``: the same but for the input's gradient, which the
#: library's own kernel computes (:mod:`capsnotes.fast.convolution`).
CONVOLUTIONS = ("native", "matmul", "matmul-native-input")


def speed_up(
    model: nn.Module, routing: str = "fused", convolution: str = "native"
) -> nn.Module:
    """Swap the layers of ``model`` (a CapsNet) in place for fast ones and return it."""
    if routing not in ROUTINGS or convolution not in CONVOLUTIONS:
        raise ValueError(
            f"unknown routing {routing!r} or convolution {convolution!r}; expected one "
            f"of {ROUTINGS} and one of {CONVOLUTIONS}"
        )
    if routing == "fused":
        model.digits = FusedDigitCapsules.like(model.digits)
    if convolution != "native":
        input_gradient = "native" if convolution == "matmul-native-input" else "matmul"
        model.conv1 = MatmulConv2d.like(model.conv1, input_gradient)
        model.primary.conv = MatmulConv2d.like(model.primary.conv, input_gradient)
    return model
