"""The capsule explorer for Jupyter and Colab (chapter 9), where the HTML page's script
(``book/_ext/capsnotes-explorer.js``) does not run: the same test digits as the page's
(:func:`capsbook.explorer.digits_payload`), decoded with ipywidgets' sliders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from capsbook.explorer import OFFSETS, choose_digits

if TYPE_CHECKING:
    from torch import Tensor

    from capsnotes import CapsNet
    from capsnotes.data import ImageSet


class CapsuleExplorer:
    """The explorer for Jupyter and Colab (ipywidgets): a test digit (the digits of
    :func:`~capsbook.explorer.digits_payload`), the class whose capsule is decoded (at
    first the prediction), and a slider for each of its numbers, within ±0.25 of the
    digit's own value (the offsets of :data:`~capsbook.explorer.OFFSETS`). Moving any of
    them redraws the decoded image beside the input. Show :attr:`widget` in a notebook;
    :meth:`decoded` is the image the sliders make now.

    ``outputs``: :func:`~capsnotes.training.evaluation.evaluate`'s outputs on ``data``
    (``return_outputs=True``), if already computed."""

    def __init__(
        self,
        model: CapsNet,
        data: ImageSet,
        *,
        per_class: int = 3,
        wrong: int = 6,
        outputs: dict[str, Any] | None = None,
    ) -> None:
        import ipywidgets as widgets

        self.model, self.data = model.cpu().eval(), data
        chosen, self.predictions, self.capsules = choose_digits(
            self.model, data, per_class, wrong, outputs
        )
        config = self.model.config

        def describe(k: int) -> str:
            label, read = int(data.labels[k]), int(self.predictions[k])
            return f"#{k}: a {label}, read as {read}"

        self.picker = widgets.Dropdown(
            options=[(describe(k), k) for k in chosen], description="test digit"
        )
        self.fed = widgets.Dropdown(
            options=list(range(config.num_classes)), description="capsule"
        )
        self.sliders = [
            widgets.FloatSlider(
                step=0.005, description=f"dim {d}", readout_format=".3f"
            )
            for d in range(config.digit_dim)
        ]
        self.view = widgets.Output()
        self._quiet = False
        self.picker.observe(self._choose, names="value")
        self.fed.observe(self._reset, names="value")
        for slider in self.sliders:
            slider.observe(self._redraw, names="value")
        self._choose()
        self.widget = widgets.VBox(
            [widgets.HBox([self.picker, self.fed]), self.view, *self.sliders]
        )

    def decoded(self) -> Tensor:
        """The image ``[1, C, H, W]`` the decoder draws from the sliders' capsule."""
        import torch

        config = self.model.config
        full = torch.zeros(1, config.num_classes, config.digit_dim)
        full[0, self.fed.value] = torch.tensor([s.value for s in self.sliders])
        with torch.no_grad():
            pixels = self.model.decoder(full, torch.tensor([self.fed.value]))
        return pixels.view(1, config.in_channels, config.image_size, config.image_size)

    def _choose(self, *_: Any) -> None:
        """A new digit: decode the capsule of its prediction, at its own values."""
        self._quiet = True  # one redraw, after every slider has moved
        self.fed.value = int(self.predictions[self.picker.value])
        self._quiet = False
        self._reset()

    def _reset(self, *_: Any) -> None:
        """Every slider to the chosen capsule's own value, ±0.25 around it."""
        own = self.capsules[self.picker.value, self.fed.value].tolist()
        self._quiet = True
        for slider, value in zip(self.sliders, own):
            slider.min, slider.max = -10.0, 10.0  # widen first, so the value fits
            slider.value = value
            slider.min, slider.max = value + OFFSETS[0], value + OFFSETS[-1]
        self._quiet = False
        self._redraw()

    def _redraw(self, *_: Any) -> None:
        if self._quiet:
            return
        import torch
        from IPython.display import display

        from capsbook.plots import image_grid

        k = self.picker.value
        image = self.data.floats(slice(k, k + 1))
        with self.view:
            self.view.clear_output(wait=True)
            display(
                image_grid(
                    torch.cat([image, self.decoded()]),
                    ncols=2,
                    size=2.0,
                    titles=["input", "decoded"],
                )
            )
