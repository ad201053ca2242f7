"""Pictures of the mechanism, drawn from a model object, so that they cannot drift from
the code: every shape a diagram prints is read from a forward pass of the model it is
given, and every number it shows is computed from that model.

* :func:`architecture` — the whole network (the paper's Figures 1 and 2) with the tensor
  shape after every stage;
* :func:`primary_grouping` — how the primary convolution's channels become capsules;
  :func:`reshaped_grouping` — where the popular reshape puts the same numbers;
* :func:`votes_add_up` — one image's votes ``û_{j|i}`` for each parent laid head to
  tail, and their agreement;
* :func:`routing_idea` — the idea of routing on one digit: a part, the votes for the
  label's parent agreeing and those for the runner-up's not, the part's couplings;
* :func:`routing_of_one_child` — one primary capsule's votes and its couplings to the
  parents, iteration by iteration (:func:`most_routed_child` picks a child worth
  watching);
* :func:`decoder_with_mask` — the mask and the decoder, and the image it draws.

Each returns a :class:`Diagram`, which Jupyter, Jupyter Book and Colab show as SVG.
Hand-written with matplotlib: no diagram library reads tensor shapes off a model.

One module a figure, on what they share (``_draw``: the colours, :class:`Diagram`, the
boxes and arrows, the shapes read off a model); import them from here.
"""

from capsbook.diagrams._architecture import architecture
from capsbook.diagrams._decoder_with_mask import decoder_with_mask
from capsbook.diagrams._draw import (
    BLUE,
    GREEN,
    GREY,
    SVG_STYLE,
    VERMILLION,
    WIDTH,
    Diagram,
    shape_text,
)
from capsbook.diagrams._primary_grouping import primary_grouping
from capsbook.diagrams._reshaped_grouping import reshaped_grouping
from capsbook.diagrams._routing_idea import routing_idea
from capsbook.diagrams._routing_of_one_child import (
    most_routed_child,
    routing_of_one_child,
)
from capsbook.diagrams._votes import votes_add_up

__all__ = [
    "BLUE",
    "GREEN",
    "GREY",
    "VERMILLION",
    "SVG_STYLE",
    "WIDTH",
    "Diagram",
    "architecture",
    "decoder_with_mask",
    "most_routed_child",
    "primary_grouping",
    "reshaped_grouping",
    "routing_idea",
    "routing_of_one_child",
    "shape_text",
    "votes_add_up",
]
