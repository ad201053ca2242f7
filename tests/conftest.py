"""Shared fixtures: real MNIST for training tests, tiny IDX files for data tests."""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path

import pytest
import torch

from capsnotes import CapsNetConfig
from capsnotes.data import data_root

REPO = Path(__file__).resolve().parents[1]

#: The one small CapsNet the unit tests build: every layer of the paper's model, a few
#: channels each, so that a forward and backward pass takes milliseconds.
TINY = CapsNetConfig(
    conv_channels=8, primary_channels=2, primary_dim=4, digit_dim=4, decoder_hidden=(16, 16)
)


if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest runs on two workers (pyproject.toml's addopts), each given one thread, and so
    # are the notebook kernels and command lines they start: two processes of two threads
    # each on a 2-core machine wait on each other's threads and run several times slower.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def write_idx(path: Path, array: torch.Tensor, compress: bool = False) -> None:
    """Write a uint8 tensor as an IDX file (the MNIST format: magic, sizes, bytes)."""
    array = array.to(torch.uint8).contiguous()
    header = struct.pack(">BBBB", 0, 0, 0x08, array.dim())
    header += b"".join(struct.pack(">I", size) for size in array.shape)
    data = header + array.numpy().tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)


def make_tiny_dataset(
    root: Path, folder: str = "MNIST", train: int = 12, test: int = 7, compress: bool = False
) -> dict[str, torch.Tensor]:
    """A tiny dataset in torchvision's layout under ``root/folder/raw``; returns the
    tensors written so tests can compare."""
    generator = torch.Generator().manual_seed(0)
    tensors = {
        "train-images-idx3-ubyte": torch.randint(0, 256, (train, 28, 28), generator=generator),
        "train-labels-idx1-ubyte": torch.arange(train) % 10,
        "t10k-images-idx3-ubyte": torch.randint(0, 256, (test, 28, 28), generator=generator),
        "t10k-labels-idx1-ubyte": (torch.arange(test) * 3) % 10,
    }
    for name, value in tensors.items():
        write_idx(root / folder / "raw" / name, value, compress)
    return tensors


@pytest.fixture
def tiny_mnist(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    return tmp_path, make_tiny_dataset(tmp_path)


@pytest.fixture(scope="session")
def mnist_root() -> Path:
    """The real MNIST: $CAPSNOTES_DATA, else ../shared/data beside the repo, else the
    default root (downloading there when a network is available)."""
    if os.environ.get("CAPSNOTES_DATA"):
        return data_root()
    shared = REPO.parent / "shared" / "data"
    if (shared / "MNIST" / "raw").is_dir():
        return shared.resolve()
    return data_root()


@pytest.fixture(scope="session")
def built_book(tmp_path_factory, worker_id) -> Path:
    """The HTML of one `jupyter-book build book` from a fresh copy, shared by the tests
    that check the build and open its pages (tests/book_build.py). One build per test
    run: pytest-xdist's workers share a base folder, and the first to get the lock
    builds while the others wait for its result."""
    from filelock import FileLock

    from tests.book_build import build_book

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent  # this run's, every worker's
    with FileLock(str(shared / "book.lock")):
        html, log = shared / "book" / "repo" / "_build" / "html", shared / "book.log"
        if not log.exists():
            html, result = build_book(shared / "book")
            log.write_text(f"{result.returncode}\n{result.stdout[-5000:]}{result.stderr[-5000:]}")
        code, _, output = log.read_text().partition("\n")
    assert code == "0", output
    return html
