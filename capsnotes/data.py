"""MNIST and Fashion-MNIST as tensors, batching, and the paper's shift augmentation.

The images are read once through ``torchvision.datasets`` and then kept as one
``uint8`` tensor (47 MB for the MNIST training set), on the GPU when training there, so
that batching is indexing and never the bottleneck.

Where the files live: the ``root`` argument, else the environment variable
``CAPSNOTES_DATA``, else ``~/.cache/capsnotes/data``. Under that root torchvision's
layout is used (``MNIST/raw/train-images-idx3-ubyte``, ...); missing files are
downloaded when a network is there.
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

from .checks import check_positive_int
from .files import atomic_write_bytes

__all__ = [
    "DATASETS",
    "DEFAULT_DATA_ROOT",
    "ImageSet",
    "batches",
    "data_root",
    "load_dataset",
    "random_shift",
]

DEFAULT_DATA_ROOT = Path("~/.cache/capsnotes/data")

#: Dataset name → (torchvision class name, folder under the root, class names).
DATASETS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "mnist": ("MNIST", "MNIST", tuple(str(d) for d in range(10))),
    "fashion-mnist": (
        "FashionMNIST",
        "FashionMNIST",
        (
            "T-shirt/top",
            "Trouser",
            "Pullover",
            "Dress",
            "Coat",
            "Sandal",
            "Shirt",
            "Sneaker",
            "Bag",
            "Ankle boot",
        ),
    ),
}


def data_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The data root: ``root`` if given, else ``$CAPSNOTES_DATA``, else the default."""
    if root is None:
        root = os.environ.get("CAPSNOTES_DATA") or DEFAULT_DATA_ROOT
    return Path(root).expanduser().resolve()


@dataclass
class ImageSet:
    """A labelled image set held as tensors.

    ``images`` is ``uint8`` ``[N, C, H, W]``; ``labels`` is ``int64`` ``[N]``.
    """

    images: Tensor
    labels: Tensor
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        if not torch.is_tensor(self.images) or self.images.dtype != torch.uint8:
            got = self.images.dtype if torch.is_tensor(self.images) else type(self.images).__name__
            raise TypeError(f"images must be a uint8 tensor [N, C, H, W] (pixels 0-255), got {got}")
        if self.images.dim() != 4:
            raise ValueError(f"images must be [N, C, H, W], got {tuple(self.images.shape)}")
        if not torch.is_tensor(self.labels) or self.labels.dtype != torch.int64:
            got = self.labels.dtype if torch.is_tensor(self.labels) else type(self.labels).__name__
            raise TypeError(f"labels must be an int64 tensor [N], got {got}")
        if self.labels.shape != (self.images.shape[0],):
            raise ValueError(
                f"need one label per image: {self.images.shape[0]} images, "
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
        if size is not None:
            check_positive_int("subset size", size)
        if size is None or size >= len(self):
            return self
        generator = torch.Generator().manual_seed(seed)
        keep = torch.randperm(len(self), generator=generator)[:size].to(self.device)
        return ImageSet(self.images[keep], self.labels[keep], self.classes)

    def padded(self, size: int) -> ImageSet:
        """The images centred on a black ``size × size`` canvas (e.g. MNIST on 40×40, where
        shifts of up to 6 pixels place a digit anywhere, as the paper trains for affNIST)."""
        check_positive_int("canvas size", size)
        height, width = self.images.shape[2:]
        if size < max(height, width):
            raise ValueError(f"a {size}x{size} canvas cannot hold {height}x{width} images")
        top, left = (size - height) // 2, (size - width) // 2
        pad = (left, size - width - left, top, size - height - top)
        return ImageSet(F.pad(self.images, pad), self.labels, self.classes)

    def floats(self, index: Tensor | slice = slice(None)) -> Tensor:
        """Images at ``index`` as floats in ``[0, 1]``, ``[n, C, H, W]``."""
        return self.images[index].float().div_(255)


def _torchvision_class(name: str):  # noqa: ANN202 - a torchvision dataset class
    import torchvision.datasets

    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {sorted(DATASETS)}")
    return getattr(torchvision.datasets, DATASETS[name][0])


def load_dataset(
    name: str = "mnist",
    train: bool = True,
    root: str | os.PathLike[str] | None = None,
    download: bool = True,
) -> ImageSet:
    """Read a dataset split into an :class:`ImageSet` on the CPU.

    Args:
        name: ``"mnist"`` or ``"fashion-mnist"``.
        train: the training split (60,000 images) or the test split (10,000).
        root: data root; see :func:`data_root`.
        download: fetch missing files from the internet.

    Raises:
        FileNotFoundError: the files are missing and could not be downloaded; the message
            says where to put them.
    """
    dataset_class = _torchvision_class(name)
    root_path = data_root(root)
    folder = root_path / DATASETS[name][1]
    _gunzip_idx_files(folder / "raw")
    try:
        dataset = dataset_class(str(root_path), train=train, download=False)
    except RuntimeError:
        if not download:
            raise FileNotFoundError(_missing_message(name, folder, tried_download=False)) from None
        dataset = _download(dataset_class, name, root_path, folder, train)
    images = dataset.data
    if images.dim() == 3:  # torchvision keeps single-channel images as [N, H, W]
        images = images.unsqueeze(1)
    labels = torch.as_tensor(dataset.targets, dtype=torch.int64)
    return ImageSet(images.contiguous(), labels, DATASETS[name][2])


IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def _gunzip_idx_files(raw: Path) -> None:
    """Decompress ``<file>.gz`` where ``<file>`` is missing (e.g. Debian's Fashion-MNIST,
    whose recompressed archives torchvision would not accept). Each file appears whole
    or not at all."""
    for name in IDX_FILES:
        target, packed = raw / name, raw / f"{name}.gz"
        if target.exists() or not packed.exists():
            continue
        atomic_write_bytes(target, gzip.decompress(packed.read_bytes()))


def _download(dataset_class, name: str, root: Path, folder: Path, train: bool):  # noqa: ANN001, ANN202
    """Download, and on failure remove whatever the attempt created."""
    existed = {path: path.exists() for path in (root, folder, folder / "raw")}
    try:
        return dataset_class(str(root), train=train, download=True)
    except (RuntimeError, OSError) as error:
        raw = folder / "raw"
        if raw.exists():  # partial downloads, never files that were there before
            for path in raw.iterdir():
                if path.name.endswith((".gz", ".tmp", ".part")) and path.is_file():
                    path.unlink()
        for path in sorted(existed, key=lambda p: len(p.parts), reverse=True):
            if not existed[path] and path.exists() and not any(path.iterdir()):
                shutil.rmtree(path)
        raise FileNotFoundError(
            _missing_message(name, folder, tried_download=True) + f"\nThe download failed: {error}"
        ) from None


def _missing_message(name: str, folder: Path, tried_download: bool) -> str:
    torchvision_name = DATASETS[name][0]
    return (
        f"{torchvision_name} was not found under {folder / 'raw'}"
        + (" and could not be downloaded" if tried_download else "")
        + ".\nEither connect to the internet (it downloads automatically), or put the four "
        f"IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
        f"t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte; gzipped or not) into "
        f"{folder / 'raw'},\nor point the environment variable CAPSNOTES_DATA at a folder "
        f"that has {torchvision_name}/raw/ in it."
    )


def _check_shift(images: Tensor, max_shift: int) -> None:
    if not torch.is_tensor(images):
        raise TypeError(f"images must be a tensor [B, C, H, W], got {type(images).__name__}")
    if images.dim() != 4:
        raise ValueError(f"images must be a tensor [B, C, H, W], got shape {tuple(images.shape)}")
    if isinstance(max_shift, bool) or not isinstance(max_shift, int):
        raise TypeError(f"max_shift must be an int >= 0, got {type(max_shift).__name__}")
    if max_shift < 0:
        raise ValueError(f"max_shift must be >= 0, got {max_shift}")


def random_shift(
    images: Tensor, max_shift: int, generator: torch.Generator | None = None
) -> Tensor:
    """Shift every image by its own random offset of up to ``max_shift`` pixels in each
    direction, filling with zeros (the paper's only augmentation).

    ``images`` ``[B, C, H, W]`` → same shape, dtype and device.
    """
    _check_shift(images, max_shift)
    if max_shift == 0:
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


def batches(
    data: ImageSet,
    batch_size: int,
    shuffle: bool = False,
    max_shift: int = 0,
    generator: torch.Generator | None = None,
    drop_last: bool = False,
) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield ``(images, labels)``: floats ``[B, C, H, W]`` in ``[0, 1]`` and ``int64`` ``[B]``,
    on the device the data lives on.

    ``generator`` must live on that device too; it drives the shuffle and the shifts.
    """
    if not isinstance(data, ImageSet):
        raise TypeError(f"data must be an ImageSet, got {type(data).__name__}")
    check_positive_int("batch_size", batch_size)
    count = len(data)
    if shuffle:
        order = torch.randperm(count, generator=generator, device=data.device)
    else:
        order = torch.arange(count, device=data.device)
    stop = count - count % batch_size if drop_last else count
    for start in range(0, stop, batch_size):
        index = order[start : start + batch_size]
        images = data.floats(index)
        if max_shift:
            images = random_shift(images, max_shift, generator)
        yield images, data.labels[index]
