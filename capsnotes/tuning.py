"""Choosing a model's implementation for the machine at hand, by measurement.

Whether a CPU trains CapsNet faster with torch's native convolutions or with the
convolutions as matrix products of :mod:`capsnotes.kernels` depends on the CPU (each has
won on some), so the trainer times one training pass of each on a real batch and builds
its model with the faster, as cuDNN's benchmark mode does on a GPU. The timing builds its
own two models; nothing is changed on a model after it is built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .devices import device_name
from .kernels import CONVOLUTIONS
from .losses import capsnet_loss
from .model import CapsNet, CapsNetConfig

__all__ = ["ConvolutionChoice", "choose_cpu_convolution"]


@dataclass(frozen=True)
class ConvolutionChoice:
    """What :func:`choose_cpu_convolution` decided, and the measured seconds of one
    forward and backward pass with each implementation (the fastest of the repeats)."""

    convolution: str
    seconds: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"convolutions": self.convolution, "step_seconds": self.seconds}


def choose_cpu_convolution(
    config: CapsNetConfig,
    images: Tensor,
    labels: Tensor,
    *,
    routing: str = "fused",
    reconstruction_weight: float = 0.0005,
    repeats: int = 2,
    cache: dict[str, ConvolutionChoice] | None = None,
) -> ConvolutionChoice:
    """Time a forward and backward pass of a CapsNet built with each convolution
    implementation on the batch ``images`` ``[B, C, H, W]``, ``labels`` ``[B]`` (on the
    CPU), alternating, after one warm-up round, and return the faster.

    ``cache``, if given, maps a description of the CPU, torch, the model and the batch
    shape to an earlier choice, which is returned instead of timing again (and a new
    choice is stored in it).
    """
    key = f"{device_name('cpu')}|torch {torch.__version__}|{config}|{tuple(images.shape)}"
    if cache is not None and key in cache:
        return cache[key]
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state alone
        models = {name: CapsNet(config, routing=routing, convolution=name) for name in CONVOLUTIONS}
    times: dict[str, list[float]] = {name: [] for name in models}
    for round_ in range(repeats + 1):
        for name, model in models.items():
            started = time.perf_counter()
            output = model(images, labels)
            capsnet_loss(output, images, labels, reconstruction_weight).total.backward()
            if round_:  # the first round warms up
                times[name].append(time.perf_counter() - started)
    seconds = {name: min(values) for name, values in times.items()}
    choice = ConvolutionChoice(min(seconds, key=seconds.__getitem__), seconds)
    if cache is not None:
        cache[key] = choice
    return choice
