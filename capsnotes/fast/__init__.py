"""How the same math runs fast: the trainer's wing of the package, which the paper's
modules never import.

* :mod:`~capsnotes.fast.routing` — routing with the votes laid out parents first and a
  backward derived by hand;
* :mod:`~capsnotes.fast.convolution` — the convolutions as matrix products;
* :mod:`~capsnotes.fast.cpu` — choosing, by timing, what a CPU trains fastest with;
* :mod:`~capsnotes.fast.precision` — devices, and what they are;
* :mod:`~capsnotes.fast.plan` — how a run computes (implementations, precision, loss
  scaling, CUDA graph, Adam, compiling), decided in one place from the configuration,
  the device and torch's version;
* :mod:`~capsnotes.fast.graphs` — the training step recorded once as a CUDA graph.

:func:`speed_up` swaps a built CapsNet's layers for the fast ones. They hold the same
parameters under the same names, so a ``state_dict`` moves between the two freely.
"""

from __future__ import annotations

from torch import nn

from .convolution import MatmulConv2d
from .routing import FusedDigitCapsules

#: The choices :func:`speed_up` knows, by the names the records use (first: the
#: paper's).
ROUTINGS = ("reference", "fused")
CONVOLUTIONS = ("native", "matmul")


def speed_up(
    model: nn.Module, routing: str = "fused", convolution: str = "native"
) -> nn.Module:
    """Swap the layers of ``model`` (a CapsNet) in place for fast ones and return it."""
    if routing not in ROUTINGS or convolution not in CONVOLUTIONS:
        raise ValueError(
            f"unknown routing {routing!r} or convolution {convolution!r}; expected "
            "one of "
            f"{ROUTINGS} and one of {CONVOLUTIONS}"
        )
    if routing == "fused":
        model.digits = FusedDigitCapsules.like(model.digits)
    if convolution == "matmul":
        model.conv1 = MatmulConv2d.like(model.conv1)
        model.primary.conv = MatmulConv2d.like(model.primary.conv)
    return model
