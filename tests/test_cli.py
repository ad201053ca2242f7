"""The command line, run as users run it: ``python -m capsnotes ...`` in a subprocess."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


def run(*args, env_root=None, timeout=600):
    env = dict(os.environ)
    if env_root is not None:
        env["CAPSNOTES_DATA"] = str(env_root)
    return subprocess.run(
        [sys.executable, "-m", "capsnotes", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout,
    )


def test_help_explains_commands_and_data():
    top = run("--help")
    assert top.returncode == 0 and "CAPSNOTES_DATA" in top.stdout and "evaluate" in top.stdout
    train_help = run("train", "--help")
    assert train_help.returncode == 0
    for word in ("quick", "paper", "--out", "history.json", "resumes"):
        assert word in train_help.stdout
    assert run("profiles").returncode == 0


def test_bad_arguments_are_reported(tmp_path, mnist_root):
    bad = run(
        "train",
        "--profile",
        "quick",
        "--out",
        str(tmp_path / "x"),
        "--epochs",
        "0",
        env_root=mnist_root,
    )
    assert bad.returncode == 2 and "epochs must be a positive int" in bad.stderr
    assert not (tmp_path / "x").exists()
    missing = run("evaluate", "--checkpoint", str(tmp_path / "none.safetensors"))
    assert missing.returncode == 2 and "no checkpoint" in missing.stderr
    (tmp_path / "bad.safetensors").write_bytes(b"not a checkpoint")
    corrupt = run("evaluate", "--checkpoint", str(tmp_path / "bad.safetensors"))
    assert (
        corrupt.returncode == 2 and "expected a capsnotes safetensors checkpoint" in corrupt.stderr
    )
    offline = run(
        "train",
        "--profile",
        "quick",
        "--out",
        str(tmp_path / "y"),
        "--data-root",
        str(tmp_path / "nodata"),
    )
    assert offline.returncode == 2 and "CAPSNOTES_DATA" in offline.stderr
    assert not (tmp_path / "y").exists() and not (tmp_path / "nodata").exists()


@pytest.mark.slow
def test_a_run_from_the_command_line_records_how_it_was_made(tmp_path, mnist_root):
    """A short real run through the command line: its files, its exact command, and the
    evaluate command on its checkpoint. (The `quick` profile's own bar — at least 92% on
    2,000 test digits within 300 core-seconds on a CPU — is asserted where the book trains
    it, in chapter 8, which nbval runs.)"""
    out = tmp_path / "short"
    options = ("--epochs", "2", "--train-size", "640", "--test-size", "500")
    result = run(
        "train",
        "--profile",
        "quick",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--no-progress",
        *options,
        env_root=mnist_root,
    )
    assert result.returncode == 0, result.stderr
    history = json.loads((out / "history.json").read_text())
    assert history["train_config"]["test_size"] == 500
    assert 0.5 <= history["epochs"][-1]["test_accuracy"] <= 1.0
    assert history["provenance"] == {
        "command": f"python -m capsnotes train --profile quick --out {out} --device cpu "
        "--no-progress " + " ".join(options),
        "profile": "quick",
        "overrides": {"epochs": 2, "train_size": 640, "test_size": 500},
        "fast_paths": True,
    }
    scored = run(
        "evaluate",
        "--checkpoint",
        str(out),
        "--test-size",
        "500",
        "--device",
        "cpu",
        env_root=mnist_root,
    )
    assert scored.returncode == 0, scored.stderr
    scores = json.loads(scored.stdout)
    assert scores["count"] == 500 and 0.5 <= scores["accuracy"] <= 1.0


@pytest.mark.slow
def test_train_keeps_freed_memory_in_its_own_process_only(tmp_path, mnist_root):
    """`train` restarts itself once with glibc's malloc tunables (recorded in the
    history) unless --default-allocator; the test process itself is left alone."""
    from capsnotes.allocator import RETAINING_TUNABLES, allocator_setting

    before = allocator_setting()
    tiny = ("--epochs", "1", "--train-size", "64", "--test-size", "50", "--batch-size", "32")
    for extra, expected in (
        ((), f"GLIBC_TUNABLES={RETAINING_TUNABLES}"),
        (("--default-allocator",), "glibc defaults"),
    ):
        out = tmp_path / ("default" if extra else "retained")
        result = run(
            "train",
            "--profile",
            "quick",
            "--out",
            str(out),
            "--device",
            "cpu",
            "--no-progress",
            *tiny,
            *extra,
            env_root=mnist_root,
        )
        assert result.returncode == 0, result.stderr
        (paths,) = json.loads((out / "history.json").read_text())["session_details"]
        if sys.platform.startswith("linux") and before == "glibc defaults":
            assert paths["allocator"] == expected
        assert paths["fast_paths"] is True
        assert paths["convolution"] in ("native", "matmul") and paths["routing"] == "fused"
        assert {"native, float32", "matmul, float32"} <= set(paths["step_seconds"])
    assert allocator_setting() == before
