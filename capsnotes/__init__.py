"""capsnotes: Capsule Networks (Sabour, Frosst & Hinton, 2017), built to be read.

The paper is importable from here (``__all__``). Beside it, in folders of their own and
imported when used: the digits (``capsnotes.data``), training (``capsnotes.training``),
the experiments beyond MNIST (``capsnotes.experiments``) and how the same math runs fast
(``capsnotes.fast``).
"""

from .capsules import DigitCapsules, PrimaryCapsules
from .decoder import Decoder, mask_capsules
from .losses import capsnet_loss, margin_loss, reconstruction_loss
from .model import CapsNet, CapsNetConfig, CapsNetOutput
from .routing import DynamicRouting, dynamic_routing, dynamic_routing_with_couplings
from .squash import Squash, squash

__version__ = "0.3.0"

__all__ = [
    "CapsNet",
    "CapsNetConfig",
    "CapsNetOutput",
    "Decoder",
    "DigitCapsules",
    "DynamicRouting",
    "PrimaryCapsules",
    "Squash",
    "__version__",
    "capsnet_loss",
    "dynamic_routing",
    "dynamic_routing_with_couplings",
    "margin_loss",
    "mask_capsules",
    "reconstruction_loss",
    "squash",
]
