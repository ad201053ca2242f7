"""capsnotes: Capsule Networks (Sabour, Frosst & Hinton, 2017), built to be read.

The paper, importable from here::

    squash, dynamic_routing, PrimaryCapsules, DigitCapsules, Decoder, mask_capsules,
    margin_loss, reconstruction_loss, capsnet_loss, CapsNet, CapsNetConfig

Training, data and the shipped models are modules of their own, imported when used:
``capsnotes.data``, ``capsnotes.config``, ``capsnotes.train``, ``capsnotes.evaluation``,
``capsnotes.pretrained``; how the same math runs fast is ``capsnotes.fast``.
"""

from .capsules import DigitCapsules, PrimaryCapsules
from .decoder import Decoder, mask_capsules
from .losses import capsnet_loss, margin_loss, reconstruction_loss
from .model import CapsNet, CapsNetConfig, CapsNetOutput
from .routing import DynamicRouting, dynamic_routing
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
    "margin_loss",
    "mask_capsules",
    "reconstruction_loss",
    "squash",
]
