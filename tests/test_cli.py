"""The command line: options made from the dataclasses, the shipped models' commands still
meaning what they meant, clear errors, a real run through it (in process, and once as a
process of its own)."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from capsnotes.__main__ import main, train_config
from capsnotes.checkpoint import load_checkpoint
from capsnotes.config import PROFILES, TrainConfig, build_model
from capsnotes.data import load_dataset
from capsnotes.evaluation import evaluate
from capsnotes.pretrained import PRETRAINED, load_pretrained
from tests.conftest import REPO, TINY

#: a tiny CapsNet through the command line's model options
TINY_OPTIONS = (
    "--conv-channels",
    str(TINY.conv_channels),
    "--primary-channels",
    str(TINY.primary_channels),
    "--primary-dim",
    str(TINY.primary_dim),
    "--digit-dim",
    str(TINY.digit_dim),
    "--decoder-hidden",
    *map(str, TINY.decoder_hidden),
)


def run(*args: str, env_root=None, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m capsnotes ARGS`` in a process of its own (the one test that needs it)."""
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


#: The shipped models the command line trained (the campaign trained ``multimnist``;
#: tests/test_pretrained.py checks its configuration against the campaign's scale).
TRAINED_BY_THE_CLI = sorted(set(PRETRAINED) - {"multimnist"})


@pytest.mark.parametrize("name", TRAINED_BY_THE_CLI)
def test_the_shipped_models_commands_still_make_their_configuration(name):
    """The command in each shipped record, parsed today, gives the record's configuration."""
    _, record = load_pretrained(name)
    command = record["provenance"]["command"].split()
    assert command[:3] == ["python", "-m", "capsnotes"]
    _, config, run_options, overrides = train_config(command[4:])
    assert config == TrainConfig.from_dict(record["train_config"])
    assert overrides == record["provenance"]["overrides"]
    assert str(run_options.out).startswith(("runs/", "/"))


def test_every_field_is_an_option_with_its_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--profile", "quick", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for field in dataclasses.fields(TrainConfig):
        if field.name != "model":
            assert f"--{field.name.replace('_', '-')}" in text, field.name
    for field in dataclasses.fields(TINY):
        assert f"--{field.name.replace('_', '-')}" in text, field.name
    for word in ("quick", "paper", "history.json", "resumes", "--out", "Adam's initial"):
        assert word in text


def test_options_override_the_profile_and_are_recorded():
    name, config, run_options, overrides = train_config(
        [
            "--profile",
            "quick",
            "--out",
            "x",
            "--epochs",
            "3",
            "--learning-rate",
            "0.002",
            *TINY_OPTIONS,
        ]
    )
    assert name == "quick" and str(run_options.out) == "x"
    assert config == dataclasses.replace(
        PROFILES["quick"], epochs=3, learning_rate=0.002, model=TINY
    )
    assert overrides["epochs"] == 3 and overrides["learning_rate"] == 0.002
    assert overrides["model"]["conv_channels"] == TINY.conv_channels
    # another architecture is another profile's: the CNN's model options come with it
    _, cnn, _, _ = train_config(["--profile", "cnn", "--out", "x", "--channels", "8", "8", "4"])
    assert cnn.architecture == "cnn" and cnn.model.channels == (8, 8, 4)


def exit_code(argv: list[str]) -> int:
    """``main(argv)``'s status, also where the option parser exits by itself."""
    try:
        return main(argv)
    except SystemExit as done:
        return done.code


def test_bad_values_get_the_configuration_s_errors(tmp_path, capsys):
    out = tmp_path / "x"
    for option, value, message in (
        ("--epochs", "0", "epochs must be a positive int, got 0"),
        ("--batch-size", "-4", "batch_size must be a positive int, got -4"),
        ("--routing-iterations", "0", "routing_iterations must be a positive int, got 0"),
        ("--max-shift", "-1", "max_shift must be >= 0"),
        ("--architecture", "cnn", "a cnn run needs model=ConvNetConfig(...), got CapsNetConfig"),
        ("--epochs", "two", "--epochs"),
    ):
        assert exit_code(["train", "--profile", "quick", "--out", str(out), option, value]) == 2
        assert message in capsys.readouterr().err, option
    assert not out.exists()
    with pytest.raises(SystemExit) as done:  # a model option the CNN does not have
        main(["train", "--profile", "cnn", "--routing-iterations", "1", "--out", str(out)])
    assert done.value.code == 2 and "--routing-iterations" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["train", "--profile", "fastest", "--out", str(out)])
    assert done.value.code == 2 and "invalid choice: 'fastest'" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", str(tmp_path / "none.safetensors")]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    (tmp_path / "bad.safetensors").write_bytes(b"not a checkpoint")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "bad.safetensors")]) == 2
    assert "expected a capsnotes safetensors checkpoint" in capsys.readouterr().err
    nodata = tmp_path / "nodata"
    code = main(
        [
            "train",
            "--profile",
            "quick",
            "--out",
            str(out),
            "--data-root",
            str(nodata),
        ]
    )
    assert code == 2 and "CAPSNOTES_DATA" in capsys.readouterr().err
    assert not out.exists() and not nodata.exists()
    assert main(["profiles"]) == 0
    assert json.loads(capsys.readouterr().out).keys() == set(PROFILES)


@pytest.mark.slow
def test_a_tiny_run_through_the_command_line_records_how_it_was_made(tmp_path, mnist_root, capsys):
    out = tmp_path / "tiny"
    options = ["--epochs", "1", "--train-size", "64", "--test-size", "50", "--batch-size", "32"]
    argv = [
        "train",
        "--profile",
        "quick",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--no-progress",
        "--data-root",
        str(mnist_root),
        *options,
        *TINY_OPTIONS,
    ]
    assert main(argv) == 0
    history = json.loads((out / "history.json").read_text())
    assert TrainConfig.from_dict(history["train_config"]).model == TINY
    assert len(history["epochs"]) == 1 and history["train_config"]["test_size"] == 50
    assert history["provenance"]["command"] == "python -m capsnotes " + " ".join(argv)
    # the run's recorded test accuracy is what its checkpoint scores on the same digits
    checkpoint = load_checkpoint(out)
    config = TrainConfig.from_dict(checkpoint.metadata["train_config"])
    model = build_model(config)
    model.load_state_dict(checkpoint.result_state)
    test_set = load_dataset("mnist", False, mnist_root).subset(50, seed=0)
    assert evaluate(model, test_set)["accuracy"] == history["test_accuracy"]
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(out),
                "--test-size",
                "50",
                "--device",
                "cpu",
                "--data-root",
                str(mnist_root),
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["accuracy"] == history["test_accuracy"]


@pytest.mark.slow
def test_a_run_as_a_process_of_its_own_records_what_it_chose(tmp_path, mnist_root):
    """``python -m capsnotes train`` in a process: the fast paths, and on a CPU the
    convolution and precision its timing chose."""
    out = tmp_path / "process"
    result = run(
        "train",
        "--profile",
        "quick",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--no-progress",
        "--epochs",
        "1",
        "--train-size",
        "64",
        "--test-size",
        "50",
        *TINY_OPTIONS,
        env_root=mnist_root,
    )
    assert result.returncode == 0, result.stderr
    (details,) = json.loads((out / "history.json").read_text())["session_details"]
    assert details["fast_paths"] is True and details["routing"] == "fused"
    chosen = f"{details['convolution']}, {details['precision']}"
    assert details["step_seconds"][chosen] == min(details["step_seconds"].values())
