"""What the whole network's listing (:mod:`capsbook.listing`) shows: the package's
functions and layers in the order the book builds them (:data:`PARTS`), and beside their
lines the paper's own words (:data:`NOTES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capsnotes import (
    CapsNet,
    Decoder,
    DigitCapsules,
    PrimaryCapsules,
    capsnet_loss,
    dynamic_routing,
    dynamic_routing_with_couplings,
    margin_loss,
    mask_capsules,
    reconstruction_loss,
    squash,
)


@dataclass(frozen=True)
class Piece:
    """A function or class the page shows, the chapter that explains it (its file name
    without ``.md``), and for a class the methods shown (empty: all of them)."""

    obj: Any
    chapter: str
    methods: tuple[str, ...] = ()


#: What the page shows, in the order the book builds it: squash, the two capsule layers,
#: routing, the margin loss, the mask and decoder, the reconstruction loss, the model
#: that joins them and the objective it is trained with.
PARTS: tuple[Piece, ...] = (
    Piece(squash, "02_squash"),
    Piece(PrimaryCapsules, "03_primary_capsules", ("__init__", "forward")),
    Piece(
        DigitCapsules,
        "04_digit_capsules",
        ("__init__", "reset_parameters", "votes", "forward"),
    ),
    Piece(dynamic_routing_with_couplings, "05_routing"),
    Piece(dynamic_routing, "05_routing"),
    Piece(margin_loss, "06_margin_loss"),
    Piece(mask_capsules, "07_decoder"),
    Piece(Decoder, "07_decoder"),
    Piece(reconstruction_loss, "07_decoder"),
    Piece(
        CapsNet, "08_training", ("__init__", "primary_capsules", "encode", "forward")
    ),
    Piece(capsnet_loss, "08_training"),
)

#: (object, a piece of one of its lines, the paper's words beside that line).
#: Quotations from Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules", arXiv
#: 1710.09829 v2 (2017), word for word, with the section (§), equation or procedure line
#: they come from; "…" marks words left out.
NOTES: tuple[tuple[Any, str, str], ...] = (
    (
        squash,
        "scale = squared_length",
        "“We therefore use a non-linear ‘squashing’ function to ensure that short "
        "vectors get shrunk to almost zero length and long vectors get shrunk to a "
        "length slightly below 1.” (§2, eq. 1)",
    ),
    (
        PrimaryCapsules,
        "self.conv = nn.Conv2d(",
        "“The second layer (PrimaryCapsules) is a convolutional capsule layer with 32 "
        "channels of convolutional 8D capsules (i.e. each primary capsule contains 8 "
        "convolutional units with a 9 × 9 kernel and a stride of 2).” (§4)",
    ),
    (
        DigitCapsules,
        "self.weight = nn.Parameter(",
        "The final layer has “one 16D capsule per digit class and each of these "
        "capsules receives input from all the capsules in the layer below.” (§4)",
    ),
    (
        DigitCapsules,
        'torch.einsum("ijdk,bik->bijd"',
        "û_j|i = W_ij u_i: “prediction vectors” … “produced by multiplying the output "
        "u_i of a capsule in the layer below by a weight matrix W_ij” (§2, eq. 2)",
    ),
    (
        dynamic_routing_with_couplings,
        "logits = u_hat.new_zeros(",
        "“for all capsule i in layer l and capsule j in layer (l + 1): b_ij ← 0.” "
        "(Procedure 1, line 2)",
    ),
    (
        dynamic_routing_with_couplings,
        "coupling = logits.softmax(dim=2)",
        "“The coupling coefficients between capsule i and all the capsules in the "
        "layer above sum to 1 and are determined by a ‘routing softmax’” (§2, eq. 3)",
    ),
    (
        dynamic_routing_with_couplings,
        's = torch.einsum("bij,bijd->bjd"',
        "“the total input to a capsule s_j is a weighted sum over all ‘prediction "
        "vectors’ û_j|i from the capsules in the layer below” (§2, eq. 2)",
    ),
    (
        dynamic_routing_with_couplings,
        'logits = logits + torch.einsum("bijd,bjd->bij"',
        "“The agreement is simply the scalar product a_ij = v_j · û_j|i.” (§2)",
    ),
    (
        margin_loss,
        "loss_present = present",
        "“To allow for multiple digits, we use a separate margin loss, L_k for each "
        "digit capsule, k” (§3, eq. 4)",
    ),
    (
        margin_loss,
        "lam: float = 0.5",
        "“The λ down-weighting of the loss for absent digit classes stops the initial "
        "learning from shrinking the lengths of the activity vectors of all the digit "
        "capsules. We use λ = 0.5.” (§3)",
    ),
    (
        margin_loss,
        "return (loss_present + loss_absent).sum(dim=1)",
        "“The total loss is simply the sum of the losses of all digit capsules.” (§3)",
    ),
    (
        mask_capsules,
        "keep = nn.functional.one_hot(",
        "“During training, we mask out all but the activity vector of the correct "
        "digit capsule.” (§4.1)",
    ),
    (
        Decoder,
        "self.layers = nn.Sequential(",
        "“a decoder consisting of 3 fully connected layers that model the pixel "
        "intensities” (§4.1, Fig. 2)",
    ),
    (
        reconstruction_loss,
        "errors = (",
        "“We minimize the sum of squared differences between the outputs of the "
        "logistic units and the pixel intensities.” (§4.1)",
    ),
    (
        reconstruction_loss,
        "return weight * errors.sum(dim=1).mean()",
        "“We scale down this reconstruction loss by 0.0005 so that it does not "
        "dominate the margin loss during training.” (§4.1)",
    ),
    (
        CapsNet,
        "self.conv1 = nn.Conv2d(",
        "“Conv1 has 256, 9 × 9 convolution kernels with a stride of 1 and ReLU "
        "activation.” (§4)",
    ),
    (
        CapsNet,
        "lengths = torch.linalg.vector_norm(",
        "“We use the length of the activity vector to represent the probability that "
        "the entity exists and its orientation to represent the instantiation "
        "parameters.” (abstract)",
    ),
    (
        capsnet_loss,
        "margin_term + reconstruction_term,",
        "“We use an additional reconstruction loss to encourage the digit capsules to "
        "encode the instantiation parameters of the input digit.” (§4.1)",
    ),
)
