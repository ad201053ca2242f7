"""Checkpoints: a round trip of everything a run saves (weights, Adam, schedule, float16's
loss scale), damaged and foreign files refused, atomic writes, and Adam's state loaded
into the Adam a run built."""

import json
import os

import pytest
import torch

from capsnotes import CapsNet
from capsnotes.data.files import atomic_write_bytes
from capsnotes.training.checkpoint import load_checkpoint, load_optimizer_state, save_checkpoint
from tests.conftest import TINY


def trained_state():
    torch.manual_seed(0)
    model = CapsNet(TINY)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.9)
    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([1, 2, 3, 4])
    out = model(images, labels)
    (out.lengths.sum() + out.reconstructions.sum()).backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def test_round_trip(tmp_path):
    model, optimizer, scheduler = trained_state()
    path = save_checkpoint(
        tmp_path / "c.safetensors",
        model.state_dict(),
        {"epoch": 3, "x": [1, 2]},
        optimizer.state_dict(),
        scheduler.state_dict(),
    )
    loaded = load_checkpoint(path)
    assert loaded.metadata == {"epoch": 3, "x": [1, 2]}
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.model_state[name], value)
    fresh = CapsNet(TINY)
    fresh.load_state_dict(loaded.model_state)
    new_optimizer = torch.optim.Adam(fresh.parameters(), lr=1e-3)
    new_optimizer.load_state_dict(loaded.optimizer_state)
    for old, new in zip(optimizer.state.values(), new_optimizer.state.values(), strict=True):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(old[key], new[key])
    new_scheduler = torch.optim.lr_scheduler.ExponentialLR(new_optimizer, 0.9)
    new_scheduler.load_state_dict(loaded.scheduler_state)
    assert new_scheduler.get_last_lr() == scheduler.get_last_lr()


def test_folder_means_its_checkpoint_file(tmp_path):
    model, _, _ = trained_state()
    save_checkpoint(tmp_path / "checkpoint.safetensors", model.state_dict(), {})
    assert load_checkpoint(tmp_path).path == tmp_path / "checkpoint.safetensors"


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupted_checkpoint_is_a_value_error(tmp_path, damage):
    model, optimizer, _ = trained_state()
    path = save_checkpoint(
        tmp_path / "c.safetensors", model.state_dict(), {}, optimizer.state_dict()
    )
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[-100] ^= 0xFF  # inside the tensor data
    elif damage == "garbage":
        data = bytearray(os.urandom(1000))
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="capsnotes|corrupted"):
        load_checkpoint(path)


def test_foreign_safetensors_file_is_rejected(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(3)}, str(path))
    with pytest.raises(ValueError, match="expected a capsnotes safetensors checkpoint"):
        load_checkpoint(path)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nothing.safetensors")


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "file.bin"
    atomic_write_bytes(path, b"old")

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, b"new contents")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_atomic_writes_are_readable_like_plain_files(tmp_path):
    import os
    import stat

    atomic_write_bytes(tmp_path / "new.bin", b"data")
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"data")
    mode = stat.S_IMODE(os.stat(tmp_path / "new.bin").st_mode)
    assert mode == stat.S_IMODE(os.stat(plain).st_mode)


def test_the_loss_scale_round_trips_and_older_checkpoints_have_none(tmp_path):
    model, optimizer, _ = trained_state()
    scaler = torch.amp.GradScaler("cpu", init_scale=512.0, growth_interval=11)
    path = save_checkpoint(
        tmp_path / "c.safetensors", model.state_dict(), {}, scaler_state=scaler.state_dict()
    )
    assert load_checkpoint(path).scaler_state == scaler.state_dict()
    # a checkpoint written before the scaler was saved: its header has no "scaler"
    from safetensors.torch import load, save

    data = path.read_bytes()
    header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])["__metadata__"]
    del header["scaler"]
    path.write_bytes(save(load(data), metadata=header))
    assert load_checkpoint(path).scaler_state is None


def test_adam_s_state_loads_into_the_adam_that_was_built():
    """torch's load_state_dict takes the saved groups' fused and capturable flags; the
    built optimizer's are kept, and the step counts go where that optimizer keeps them."""
    model, optimizer, _ = trained_state()  # unfused, not capturable
    state = optimizer.state_dict()
    fused = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    load_optimizer_state(fused, state)
    assert fused.param_groups[0]["fused"] is True
    # a capturable Adam (a CUDA graph's) on this CPU: it can be built and loaded (where
    # its step counts go, the test below sees on another device)
    capturable = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
    load_optimizer_state(capturable, state)
    assert capturable.param_groups[0]["capturable"] is True
    steps = [saved["step"].item() for saved in capturable.state.values()]
    assert steps == [1] * len(state["state"])
    # and back: a capturable run's state into a plain Adam
    plain = torch.optim.Adam(model.parameters(), lr=1e-3)
    load_optimizer_state(plain, capturable.state_dict())
    assert not plain.param_groups[0]["capturable"] and not plain.param_groups[0]["fused"]
    assert all(s["step"].device.type == "cpu" for s in plain.state.values())


def test_a_resumed_capturable_adam_keeps_its_step_counts_beside_its_parameters(tmp_path):
    """A checkpoint holds Adam's step counts on the CPU (a plain Adam keeps them there,
    and every saved tensor is read back there); resumed into a capturable Adam whose
    parameters are on another device, they must move beside the parameters, or the
    graphed step fails. This CPU has no second device with values, but the ``meta``
    device holds parameters (with no values) and a capturable Adam can be built for
    them: the step counts must land on ``meta``, and a plain Adam's stay on the CPU."""
    model, optimizer, _ = trained_state()  # unfused, not capturable: steps on the CPU
    path = save_checkpoint(
        tmp_path / "c.safetensors", model.state_dict(), {}, optimizer.state_dict()
    )
    state = load_checkpoint(path).optimizer_state
    assert {saved["step"].device.type for saved in state["state"].values()} == {"cpu"}
    with torch.device("meta"):
        elsewhere = CapsNet(TINY)
    capturable = torch.optim.Adam(elsewhere.parameters(), lr=1e-3, capturable=True)
    load_optimizer_state(capturable, state)
    assert capturable.param_groups[0]["capturable"] is True
    assert len(capturable.state) == len(list(elsewhere.parameters()))
    for parameter, saved in capturable.state.items():
        assert parameter.device.type == "meta"
        assert saved["step"].device == parameter.device, "a step count left on the CPU"
        assert saved["exp_avg"].device == parameter.device
    plain = torch.optim.Adam(elsewhere.parameters(), lr=1e-3)
    load_optimizer_state(plain, state)
    assert {saved["step"].device.type for saved in plain.state.values()} == {"cpu"}
    assert {saved["exp_avg"].device.type for saved in plain.state.values()} == {"meta"}


def test_a_resumed_fused_adam_keeps_its_step_counts_beside_its_parameters(tmp_path):
    """A T4's Adam is fused but not capturable: its kernel reads the step counts on the
    parameters' device, so a checkpoint's (read back on the CPU) must move there too. On
    ``meta``, as above: the step counts must land on ``meta``, and stay after a reload."""
    model, optimizer, _ = trained_state()  # unfused, not capturable: steps on the CPU
    path = save_checkpoint(
        tmp_path / "c.safetensors", model.state_dict(), {}, optimizer.state_dict()
    )
    state = load_checkpoint(path).optimizer_state
    with torch.device("meta"):
        elsewhere = CapsNet(TINY)
    fused = torch.optim.Adam(elsewhere.parameters(), lr=1e-3, fused=False)
    for group in fused.param_groups:  # fused=True, as a GPU builds it (torch may refuse
        group["fused"] = True  # to build a fused Adam for meta parameters)
    load_optimizer_state(fused, state)
    assert fused.param_groups[0]["fused"] is True
    assert fused.param_groups[0]["capturable"] is False
    assert len(fused.state) == len(list(elsewhere.parameters()))
    for parameter, saved in fused.state.items():
        assert parameter.device.type == "meta"
        assert saved["step"].device == parameter.device, "a step count left on the CPU"
        assert saved["exp_avg"].device == parameter.device
