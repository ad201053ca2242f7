"""The reconstruction decoder (Sabour et al. 2017, §4.1, Fig. 2).

Only one digit capsule reaches the decoder: during training the capsule of the true
label, at test time the capsule of the prediction. The others are set to zero, so the
decoder must rebuild the image from the 16 numbers of a single capsule — which forces
those numbers to describe the digit's pose, thickness and style.
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxtyping import Float, Int
from torch import Tensor, nn

from .checks import check_masking, check_sizes


def mask_capsules(
    capsules: Float[Tensor, "batch classes dim"], classes: Int[Tensor, " batch"]
) -> Float[Tensor, "batch classes_times_dim"]:
    """Keep the capsule of ``classes[b]`` in each example, zero the rest, and
    flatten."""
    check_masking(capsules, classes)
    # [B, classes]: 1 for the class kept, 0 for the others
    keep = nn.functional.one_hot(classes, capsules.shape[1]).to(capsules.dtype)
    return (capsules * keep.unsqueeze(-1)).flatten(1)


class Decoder(nn.Module):
    """Three fully connected layers from the masked capsules to the pixels:
    ``[B, classes × dim]`` → ``[B, output_size]`` in ``[0, 1]``; the paper's sizes are
    160 → 512 → 1024 → 784 with ReLU, ReLU, sigmoid."""

    def __init__(
        self,
        num_classes: int = 10,
        capsule_dim: int = 16,
        output_size: int = 784,
        hidden: Sequence[int] = (512, 1024),
    ) -> None:
        super().__init__()
        check_sizes(
            num_classes=num_classes,
            capsule_dim=capsule_dim,
            output_size=output_size,
            hidden=hidden,
        )
        self.num_classes, self.capsule_dim = num_classes, capsule_dim
        sizes = [num_classes * capsule_dim, *hidden]
        layers: list[nn.Module] = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU(inplace=True)]
        layers += [nn.Linear(sizes[-1], output_size), nn.Sigmoid()]
        self.layers = nn.Sequential(*layers)

    def forward(
        self,
        capsules: Float[Tensor, "batch classes dim"],
        classes: Int[Tensor, " batch"],
    ) -> Float[Tensor, "batch pixels"]:
        check_masking(capsules, classes, self.num_classes, self.capsule_dim)
        return self.layers(mask_capsules(capsules, classes))
