"""capsnotes: Capsule Networks (Sabour, Frosst & Hinton, 2017), built to be read.

The public API the book and the tests use::

    squash, dynamic_routing, margin_loss, reconstruction_loss, capsnet_loss,
    CapsNet, CapsNetConfig, CapsNetOutput, PrimaryCapsules, DigitCapsules, Decoder,
    TrainConfig, evaluate (training itself: capsnotes.train.train),
    load_pretrained (the book's trained models, shipped with the package)
"""

from .config import TrainConfig
from .decoder import Decoder, mask_capsules
from .digit_capsules import DigitCapsules
from .evaluation import evaluate
from .losses import capsnet_loss, margin_loss, reconstruction_loss
from .model import CapsNet, CapsNetConfig, CapsNetOutput
from .pretrained import load_pretrained
from .primary_capsules import PrimaryCapsules
from .routing import DynamicRouting, dynamic_routing
from .squash import Squash, squash
from .version import __version__

__all__ = [
    "CapsNet",
    "CapsNetConfig",
    "CapsNetOutput",
    "Decoder",
    "DigitCapsules",
    "DynamicRouting",
    "PrimaryCapsules",
    "Squash",
    "TrainConfig",
    "__version__",
    "capsnet_loss",
    "dynamic_routing",
    "evaluate",
    "load_pretrained",
    "margin_loss",
    "mask_capsules",
    "reconstruction_loss",
    "squash",
]
