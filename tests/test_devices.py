"""Device choice and mixed precision: bf16 only where the GPU computes it natively."""

import pytest
import torch

from capsnotes.devices import (
    autocast_dtype,
    autocast_for,
    bf16_is_native,
    device_name,
    resolve_device,
)


@pytest.mark.parametrize(
    ("capability", "native"),
    [
        ((7, 5), False),
        ((7, 0), False),
        ((6, 1), False),
        ((8, 0), True),
        ((8, 9), True),
        ((9, 0), True),
    ],
    ids=["T4", "V100", "P100", "A100", "L4", "H100"],
)
def test_bf16_autocast_only_on_gpus_with_native_bf16(monkeypatch, capability, native):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert bf16_is_native(capability) is native
    expected = torch.bfloat16 if native else None
    assert autocast_dtype(torch.device("cuda"), enabled=True) is expected
    assert autocast_dtype(torch.device("cuda"), enabled=False) is None


def test_the_cpu_trains_in_float32():
    assert autocast_dtype("cpu") is None
    with autocast_for("cpu", None):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    with autocast_for("cpu", torch.bfloat16):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16


def test_devices_are_resolved_and_described():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(None).type in ("cpu", "cuda")
    assert device_name("cpu").startswith("CPU: ")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert device_name("cpu").endswith(", 1 thread")
        torch.set_num_threads(2)
        assert device_name("cpu").endswith(", 2 threads")
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="PyTorch sees no CUDA GPU"):
            resolve_device("cuda")
