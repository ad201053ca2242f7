"""A CapsNet's predictions as float32 computes them, at bf16's speed: what
:func:`capsnotes.training.evaluation.evaluate` and
:func:`capsnotes.experiments.affine.predictions` count on a CPU with bf16 units
(:func:`scorer_for` decides).

Counting right answers needs only the longest capsule, and bf16 moves the lengths far
less than they usually lie apart (the shipped MNIST model on the 10,000 test digits: at
most 0.0091, no prediction changed; a 2-core AMD EPYC Zen 5, in
``benchmarks/results/cpu-amd-zen5-2core-scoring.json``). So :class:`ExactPredictions`
runs the network in bf16 (the primary capsules squashed in float32), then the float32
model itself again on every image whose two longest capsules lie within ``margin`` of
each other in bf16. If no length is off by ``e`` or more, then where bf16 picks another
capsule than float32, bf16's pick is less than ``2e`` longer, in bf16, than float32's
winner, which in bf16 is no longer than bf16's second: the two longest bf16 capsules lie
within ``2e``. So where every length is off by less than ``margin / 2`` (0.05 by
default, 5.5 times the largest error measured, 0.0091), every prediction bf16 changes is
re-scored, and the counts are float32's. The bound holds only where the errors stay
below ``margin / 2`` on the images scored: the largest error was measured on the MNIST
test digits (on chapter 12's warped digits the counts came out as the float32 model's,
point by point, when this was written: checked, not kept as a record).

Hand-written, because autocast leaves the forward pass at about 2.2x float32's speed on
that CPU (measured while this was written, not kept as a record), and this at about
3.2x (the record): the first convolution (one input channel, 81 taps) is
one matrix product over its unfolded patches, whose rows are already the channels-last
layout the primary convolution runs fastest on; the votes and the routing go through
``chunk`` images at a time, so that their votes (360 KB an image in bf16) stay in the
cache through every routing pass instead of streaming from memory five times.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from ..checks import check_images, integer
from ..model import CapsNet
from ..squash import squash
from .cpu import bf16_is_fast
from .routing import route_parents_first


class ScoredBatch(NamedTuple):
    """What :class:`ExactPredictions` returns for a batch of ``B`` images."""

    predictions: Tensor  #: ``[B]``, the longest capsule, as the float32 model finds it
    rescored: Tensor  #: ``[B]``, True where the float32 model was run again


class ExactPredictions(nn.Module):
    """``model``'s predictions (a float32 :class:`~capsnotes.CapsNet`) from a bf16 pass,
    the near ties (lengths within ``margin``) decided by ``model`` itself."""

    def __init__(self, model: CapsNet, margin: float = 0.1, chunk: int = 16) -> None:
        super().__init__()
        if type(model) is not CapsNet:  # a subclass may predict otherwise
            raise TypeError(f"model must be a CapsNet, got {type(model).__name__}")
        number = isinstance(margin, (int, float)) and not isinstance(margin, bool)
        if not number or not margin >= 0:
            raise ValueError(f"margin must be a length difference >= 0, got {margin!r}")
        self.model, self.margin = model, margin
        self.chunk = integer("chunk", chunk, minimum=1)
        bf16, conv1, primary = torch.bfloat16, model.conv1, model.primary.conv
        # conv1's weight as the matrix its unfolded patches multiply: [C·k·k, channels]
        self.conv1_matrix = conv1.weight.flatten(1).t().to(bf16).contiguous()
        self.conv1_bias = conv1.bias.to(bf16)
        self.primary_weight = primary.weight.to(bf16, memory_format=torch.channels_last)
        self.primary_bias = primary.bias.to(bf16)
        # W_ij as one [in_dim, parent·out_dim] matrix per child i
        weight = model.digits.weight  # [I, J, D, K]
        self.vote_matrices = weight.permute(0, 3, 1, 2).flatten(2).to(bf16)

    @torch.no_grad()
    def lengths(
        self, images: Float[Tensor, "batch channel height width"]
    ) -> Float[Tensor, "batch class"]:
        """The digit capsules' lengths ``‖v_j‖`` from the bf16 pass, in float32."""
        config = self.model.config
        check_images(images, config)
        batch, kernel = len(images), config.conv_kernel
        side = images.shape[-1] - kernel + 1
        patches = F.unfold(images.to(torch.bfloat16), kernel).transpose(1, 2)
        features = torch.addmm(
            self.conv1_bias, patches.flatten(0, 1), self.conv1_matrix
        ).relu_()  # [B·side², channels]: rows are pixels, so a channels-last view
        features = features.view(batch, side, side, -1).permute(0, 3, 1, 2)
        maps = F.conv2d(
            features, self.primary_weight, self.primary_bias, config.primary_stride
        )  # [B, C·D, G, G]
        grid = maps.view(batch, config.primary_channels, config.primary_dim, -1)
        u = squash(grid.transpose(2, 3).flatten(1, 2).float())  # [B, I, K]
        outputs = [self.route(part) for part in u.to(torch.bfloat16).split(self.chunk)]
        return torch.linalg.vector_norm(torch.cat(outputs).float(), dim=-1)

    def route(self, u: Tensor) -> Tensor:
        """Votes ``[b, parent, child, D]`` for ``u`` ``[b, I, K]``, then routing."""
        children, batch = u.shape[1], u.shape[0]
        votes = torch.bmm(u.transpose(0, 1), self.vote_matrices)  # [I, b, J·D]
        votes = votes.view(children, batch, self.model.config.num_classes, -1)
        votes = votes.permute(1, 2, 0, 3).contiguous()  # the layout routing reads
        return route_parents_first(votes, self.iterations)[0]

    @property
    def iterations(self) -> int:
        return self.model.digits.iterations

    @torch.no_grad()
    def forward(
        self, images: Float[Tensor, "batch channel height width"]
    ) -> ScoredBatch:
        lengths = self.lengths(images)
        top = lengths.topk(2, dim=1).values
        predictions: Int[Tensor, " batch"] = lengths.argmax(dim=1)
        rescored: Bool[Tensor, " batch"] = top[:, 0] - top[:, 1] < self.margin
        if rescored.any():
            predictions[rescored] = self.model(images[rescored]).predictions
        return ScoredBatch(predictions, rescored)


def scorer_for(model: nn.Module, device: torch.device) -> nn.Module:
    """What scores ``model``'s predictions on ``device``: :class:`ExactPredictions` for
    a CapsNet on a CPU with bf16 units (:func:`~capsnotes.fast.cpu.bf16_is_fast`),
    ``model`` itself otherwise (another model, a GPU, a CPU that emulates bf16)."""
    if type(model) is CapsNet and device.type == "cpu" and bf16_is_fast():
        return ExactPredictions(model)
    return model
