"""The digits every wing reads: MNIST and Fashion-MNIST as tensors, batching, and the
paper's shift augmentation; beside them, files written whole (``files``) and checks of
what a user hands over (``checks``).

The images are read once through ``torchvision.datasets`` and then kept as one ``uint8``
tensor (47 MB for the MNIST training set), on the GPU when training there, so that
batching is indexing and never the bottleneck. The files live in torchvision's layout
(``MNIST/raw/train-images-idx3-ubyte``, ...) under :func:`data_root`; missing ones are
downloaded when a network is there, gzipped ones (as Debian ships them) unpacked.
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from . import checks
from .files import atomic_write_bytes

#: Dataset name → (torchvision class and folder, class names).
DATASETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "mnist": ("MNIST", tuple("0123456789")),
    "fashion-mnist": (
        "FashionMNIST",
        ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat")
        + ("Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"),
    ),
}
IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def data_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The data root: ``root`` if given, else ``$CAPSNOTES_DATA``, else the default."""
    root = root or os.environ.get("CAPSNOTES_DATA") or "~/.cache/capsnotes/data"
    return Path(root).expanduser().resolve()


@dataclass
class ImageSet:
    """A labelled image set: ``images`` ``uint8 [N, C, H, W]``, ``labels`` ``int64
    [N]``."""

    images: Tensor
    labels: Tensor
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        if not torch.is_tensor(self.images) or self.images.dtype != torch.uint8:
            got = getattr(self.images, "dtype", type(self.images).__name__)
            raise TypeError(
                f"images must be a uint8 tensor [N, C, H, W] (pixels 0-255), got {got}"
            )
        if self.images.dim() != 4:
            raise ValueError(
                f"images must be [N, C, H, W], got {tuple(self.images.shape)}"
            )
        if not torch.is_tensor(self.labels) or self.labels.dtype != torch.int64:
            got = getattr(self.labels, "dtype", type(self.labels).__name__)
            raise TypeError(f"labels must be an int64 tensor [N], got {got}")
        if self.labels.shape[:1] != self.images.shape[:1]:
            raise ValueError(
                f"need one label per image: {len(self.images)} images, "
                f"labels of shape {tuple(self.labels.shape)}"
            )

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def device(self) -> torch.device:
        return self.images.device

    def to(self, device: torch.device | str) -> ImageSet:
        return ImageSet(self.images.to(device), self.labels.to(device), self.classes)

    def subset(self, size: int | None, seed: int = 0) -> ImageSet:
        """A random subset of ``size`` images (all of them if ``size`` is None)."""
        if size is None or checks.integer("subset size", size, minimum=1) >= len(self):
            return self
        generator = torch.Generator().manual_seed(seed)
        keep = torch.randperm(len(self), generator=generator)[:size].to(self.device)
        return ImageSet(self.images[keep], self.labels[keep], self.classes)

    def padded(self, size: int) -> ImageSet:
        """The images centred on a black ``size × size`` canvas."""
        height, width = self.images.shape[2:]
        if checks.integer("canvas size", size, minimum=1) < max(height, width):
            raise ValueError(
                f"a {size}x{size} canvas cannot hold {height}x{width} images"
            )
        top, left = (size - height) // 2, (size - width) // 2
        pad = (left, size - width - left, top, size - height - top)
        return ImageSet(F.pad(self.images, pad), self.labels, self.classes)

    def floats(self, index: Tensor | slice = slice(None)) -> Tensor:
        """Images at ``index`` as floats in ``[0, 1]``, ``[n, C, H, W]``."""
        return self.images[index].float().div_(255)

    def batches(
        self,
        batch_size: int,
        shuffle: bool = False,
        max_shift: int = 0,
        generator: torch.Generator | None = None,
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """``(images, labels)``: floats ``[B, C, H, W]`` in ``[0, 1]`` and ``int64
        [B]``, on the set's device; ``generator`` (on that device too) drives shuffle
        and shifts."""
        checks.integer("batch_size", batch_size, minimum=1)
        count = len(self)
        if shuffle:
            order = torch.randperm(count, generator=generator, device=self.device)
        else:
            order = torch.arange(count, device=self.device)
        for index in order.split(batch_size):
            images = self.floats(index)
            if max_shift:
                images = random_shift(images, max_shift, generator)
            yield images, self.labels[index]


def load_dataset(
    name: str = "mnist",
    train: bool = True,
    root: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> ImageSet:
    """A split of ``"mnist"`` or ``"fashion-mnist"`` (60,000 training or 10,000 test
    images) as an :class:`ImageSet` on the CPU. ``download``: fetch missing files; a
    ``FileNotFoundError`` that says where to put them when that fails."""
    if name not in DATASETS:
        raise ValueError(
            f"unknown dataset {name!r}; expected one of {sorted(DATASETS)}"
        )
    import torchvision.datasets

    folder_name, classes = DATASETS[name]
    dataset_class = getattr(torchvision.datasets, folder_name)
    root_path = data_root(root)
    raw = root_path / folder_name / "raw"
    for file in IDX_FILES:  # Debian's recompressed archives: torchvision refuses them
        packed = raw / f"{file}.gz"
        if packed.exists() and not (raw / file).exists():
            atomic_write_bytes(raw / file, gzip.decompress(packed.read_bytes()))
    try:
        dataset = dataset_class(str(root_path), train=train, download=False)
    except RuntimeError:
        if not download:
            raise FileNotFoundError(missing_message(folder_name, raw, False)) from None
        dataset = _download(dataset_class, root_path, raw, train)
    images = dataset.data.unsqueeze(1).contiguous()  # [N, H, W] → [N, 1, H, W]
    labels = torch.as_tensor(dataset.targets, dtype=torch.int64)
    return ImageSet(images, labels, classes)


def _download(dataset_class, root: Path, raw: Path, train: bool):  # noqa: ANN001, ANN202
    """Download; on failure remove what the attempt created, never what was there."""
    existed = {path: path.exists() for path in (root, raw.parent, raw)}
    try:
        return dataset_class(str(root), train=train, download=True)
    except (RuntimeError, OSError) as error:
        for path in raw.iterdir() if raw.exists() else ():
            if path.is_file() and path.name.endswith((".gz", ".tmp", ".part")):
                path.unlink()
        for path in sorted(existed, key=lambda p: len(p.parts), reverse=True):
            if not existed[path] and path.exists() and not any(path.iterdir()):
                shutil.rmtree(path)
        message = missing_message(dataset_class.__name__, raw, True)
        raise FileNotFoundError(f"{message}\nThe download failed: {error}") from None


def missing_message(name: str, raw: Path, tried_download: bool) -> str:
    failed = " and could not be downloaded" if tried_download else ""
    return (
        f"{name} was not found under {raw}{failed}.\nEither connect to the internet "
        "(it downloads automatically), or put the four IDX files "
        f"({', '.join(IDX_FILES)}; gzipped or not) into {raw},\nor point the "
        f"environment variable CAPSNOTES_DATA at a folder that has {name}/raw/ in it."
    )


def random_shift(
    images: Tensor, max_shift: int, generator: torch.Generator | None = None
) -> Tensor:
    """Shift every image ``[B, C, H, W]`` by its own random offset of up to
    ``max_shift`` pixels in each direction, filling with zeros (the paper's only
    augmentation)."""
    if not torch.is_tensor(images) or images.dim() != 4:
        shape = tuple(getattr(images, "shape", ()))
        raise ValueError(f"images must be a tensor [B, C, H, W], got shape {shape}")
    if checks.integer("max_shift", max_shift, minimum=0) == 0:
        return images
    batch, channels, height, width = images.shape
    padded = F.pad(images, (max_shift,) * 4)  # zeros all round
    offsets = torch.randint(
        0, 2 * max_shift + 1, (2, batch), generator=generator, device=images.device
    )
    rows = offsets[0, :, None] + torch.arange(height, device=images.device)  # [B, H]
    cols = offsets[1, :, None] + torch.arange(width, device=images.device)  # [B, W]
    # Gather each image's window: padded[b, c, rows[b, y], cols[b, x]]
    b = torch.arange(batch, device=images.device)[:, None, None, None]
    c = torch.arange(channels, device=images.device)[None, :, None, None]
    return padded[b, c, rows[:, None, :, None], cols[:, None, None, :]]
