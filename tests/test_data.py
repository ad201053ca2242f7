import os
from pathlib import Path

import pytest
import torch
import torchvision

from capsnotes.data import ImageSet, data_root, load_dataset, random_shift
from tests.conftest import make_tiny_dataset


def test_loads_tiny_idx_files(tiny_mnist):
    root, written = tiny_mnist
    train = load_dataset("mnist", train=True, root=root, download=False)
    test = load_dataset("mnist", train=False, root=root, download=False)
    assert train.images.shape == (12, 1, 28, 28) and train.images.dtype == torch.uint8
    assert test.images.shape == (7, 1, 28, 28)
    assert torch.equal(train.images[:, 0], written["train-images-idx3-ubyte"].to(torch.uint8))
    assert torch.equal(test.labels, written["t10k-labels-idx1-ubyte"])
    assert train.labels.dtype == torch.int64
    assert train.classes == tuple("0123456789")


def test_gzipped_files_are_extracted_whole(tmp_path):
    written = make_tiny_dataset(tmp_path, folder="FashionMNIST", compress=True)
    data = load_dataset("fashion-mnist", train=False, root=tmp_path, download=False)
    assert torch.equal(data.images[:, 0], written["t10k-images-idx3-ubyte"].to(torch.uint8))
    assert data.classes[0] == "T-shirt/top"
    leftovers = [
        p.name for p in (tmp_path / "FashionMNIST" / "raw").iterdir() if p.suffix == ".tmp"
    ]
    assert leftovers == []


def test_corrupt_gzip_leaves_no_partial_file(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b this is not gzip data")
    with pytest.raises(OSError):
        load_dataset("mnist", root=tmp_path, download=False)
    assert sorted(p.name for p in raw.iterdir()) == ["train-images-idx3-ubyte.gz"]


def test_root_from_argument_environment_or_default(monkeypatch, tmp_path):
    monkeypatch.setenv("CAPSNOTES_DATA", str(tmp_path))
    assert data_root() == tmp_path.resolve()
    assert data_root(tmp_path / "x") == (tmp_path / "x").resolve()
    monkeypatch.delenv("CAPSNOTES_DATA")
    assert data_root() == Path("~/.cache/capsnotes/data").expanduser().resolve()


def test_missing_data_without_download_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError) as caught:
        load_dataset("mnist", root=tmp_path / "empty", download=False)
    message = str(caught.value)
    assert str(tmp_path / "empty" / "MNIST" / "raw") in message
    assert "CAPSNOTES_DATA" in message and "train-images-idx3-ubyte" in message
    assert not (tmp_path / "empty").exists()


def test_failed_download_offline_leaves_nothing_behind(tmp_path, monkeypatch):
    def offline(self):  # what torchvision does without a network, minus the network
        os.makedirs(self.raw_folder, exist_ok=True)
        (Path(self.raw_folder) / "train-images-idx3-ubyte.gz").write_bytes(b"x")
        raise RuntimeError(
            "Error downloading train-images-idx3-ubyte.gz: Name or service not known"
        )

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", offline)
    root = tmp_path / "fresh"
    with pytest.raises(FileNotFoundError, match="could not be downloaded") as caught:
        load_dataset("mnist", root=root, download=True)
    assert "Name or service not known" in str(caught.value)
    assert not root.exists()


def test_unknown_dataset():
    with pytest.raises(ValueError, match="expected one of"):
        load_dataset("cifar10")


def test_imageset_checks_and_subset():
    images = torch.arange(10, dtype=torch.uint8).view(10, 1, 1, 1).expand(10, 1, 2, 2).contiguous()
    data = ImageSet(images, torch.arange(10), tuple("0123456789"))
    sub = data.subset(4, seed=3)
    assert len(sub) == 4 and torch.equal(sub.images[:, 0, 0, 0].long(), sub.labels)
    assert torch.equal(sub.labels, data.subset(4, seed=3).labels)  # seeded
    assert data.subset(None) is data and data.subset(50) is data
    with pytest.raises(ValueError, match="one label per image"):
        ImageSet(images, torch.arange(9), ())
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        ImageSet(images[:, 0], torch.arange(10), ())
    assert data.floats().max() == 9 / 255


def test_batches_cover_everything_once():
    data = ImageSet(torch.zeros(10, 1, 2, 2, dtype=torch.uint8), torch.arange(10), ())
    seen = torch.cat([labels for _, labels in data.batches(3)])
    assert torch.equal(seen, torch.arange(10))
    generator = torch.Generator().manual_seed(0)
    shuffled = torch.cat([labels for _, labels in data.batches(4, True, generator=generator)])
    assert sorted(shuffled.tolist()) == list(range(10)) and not torch.equal(
        shuffled, torch.arange(10)
    )
    assert [len(y) for _, y in data.batches(4)] == [4, 4, 2]
    images, _ = next(data.batches(4))
    assert images.dtype == torch.float32 and images.shape == (4, 1, 2, 2)
    with pytest.raises(ValueError, match="batch_size"):
        next(data.batches(0))


def test_random_shift_moves_each_image_by_at_most_two_pixels_with_zero_fill():
    torch.manual_seed(0)
    images = torch.zeros(200, 1, 28, 28)
    images[:, :, 10:18, 10:18] = torch.rand(200, 1, 8, 8) + 0.1
    shifted = random_shift(images, 2, torch.Generator().manual_seed(1))
    assert shifted.shape == images.shape
    offsets = set()
    for before, after in zip(images, shifted, strict=True):
        matches = [
            (dy, dx)
            for dy in range(-2, 3)
            for dx in range(-2, 3)
            if torch.equal(torch.roll(before, (dy, dx), dims=(1, 2)), after)
        ]
        assert len(matches) == 1
        offsets.add(matches[0])
    assert len(offsets) == 25  # every shift in [-2, 2]² occurs


def test_random_shift_pads_with_zeros_at_the_border():
    images = torch.ones(50, 1, 5, 5)
    shifted = random_shift(images, 2, torch.Generator().manual_seed(0))
    assert (shifted.sum(dim=(1, 2, 3)) <= 25).all()
    assert (shifted.sum(dim=(1, 2, 3)) < 25).any()
    assert torch.equal(random_shift(images, 0), images)
    with pytest.raises(ValueError, match="max_shift"):
        random_shift(images, -1)


def test_real_mnist_is_found(mnist_root):
    test = load_dataset("mnist", train=False, root=mnist_root)
    assert len(test) == 10_000
    assert test.labels.bincount().tolist() == [
        980,
        1135,
        1032,
        1010,
        982,
        892,
        958,
        1028,
        974,
        1009,
    ]


def test_images_are_centred_on_a_larger_canvas():
    from capsnotes.data import ImageSet

    images = torch.arange(2 * 28 * 28, dtype=torch.int64).remainder(256).to(torch.uint8)
    data = ImageSet(images.view(2, 1, 28, 28), torch.tensor([3, 4]), tuple("0123456789"))
    padded = data.padded(40)
    assert padded.images.shape == (2, 1, 40, 40) and padded.labels.tolist() == [3, 4]
    assert torch.equal(padded.images[:, :, 6:34, 6:34], data.images)
    assert padded.images.sum() == data.images.sum()
    with pytest.raises(ValueError, match="cannot hold 28x28"):
        data.padded(20)
