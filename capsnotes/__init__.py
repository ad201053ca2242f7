"""capsnotes: Capsule Networks (Sabour, Frosst & Hinton, 2017), built to be read.

The public API the book and the tests use::

    squash, dynamic_routing, margin_loss, reconstruction_loss,
    CapsNet, CapsNetConfig, CapsNetOutput, PrimaryCapsules, DigitCapsules, Decoder,
    load_pretrained (the book's trained model, shipped with the package)
"""

from .decoder import Decoder, mask_capsules
from .digit_capsules import DigitCapsules
from .losses import margin_loss, reconstruction_loss
from .model import CapsNet, CapsNetConfig, CapsNetOutput
from .pretrained import load_pretrained
from .primary_capsules import PrimaryCapsules
from .routing import DynamicRouting, dynamic_routing
from .squash import Squash, squash

__version__ = "0.1.0"

__all__ = [
    "CapsNet",
    "CapsNetConfig",
    "CapsNetOutput",
    "Decoder",
    "DigitCapsules",
    "DynamicRouting",
    "PrimaryCapsules",
    "Squash",
    "dynamic_routing",
    "load_pretrained",
    "margin_loss",
    "mask_capsules",
    "reconstruction_loss",
    "squash",
]
