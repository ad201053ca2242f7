"""The command line: options made from the dataclasses by tyro in one pass, the shipped
models' commands still meaning what they meant, clear errors, a real run through it (in
process, and once as a process of its own, from a checkout that is not installed)."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import typing

import pytest
import torch

import capsnotes
from capsnotes.data import load_dataset
from capsnotes.training.checkpoint import load_checkpoint
from capsnotes.training.cli import ShippedCapsNet, ShippedCNN, main, train_config
from capsnotes.training.config import PROFILES, TrainConfig, build_model
from capsnotes.training.evaluation import evaluate
from capsnotes.training.pretrained import PRETRAINED, load_pretrained, pretrained_files
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


#: Makes ``importlib.metadata`` find no installed ``capsnotes``, as on a machine where
#: the package is only a checkout on PYTHONPATH (benchmarks/gpu_session.sh runs it so).
NOT_INSTALLED = """
import importlib.metadata as metadata

_distribution = metadata.distribution


def distribution(name):
    if name == "capsnotes":
        raise metadata.PackageNotFoundError(name)
    return _distribution(name)


metadata.distribution = distribution
"""


def not_installed_env(checkout) -> dict[str, str]:
    """The environment of a process that imports capsnotes from ``checkout`` only: the
    checkout first on ``PYTHONPATH``, then a ``sitecustomize`` that hides the installed
    package (its metadata, and the installed copy behind the checkout on the path)."""
    site = checkout.parent / "not-installed"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NOT_INSTALLED)
    return dict(os.environ, PYTHONPATH=f"{checkout}{os.pathsep}{site}")


def run_from_checkout(
    checkout, *args: str, env_root=None, timeout: int = 600
) -> subprocess.CompletedProcess:
    """``PYTHONPATH=CHECKOUT python -m capsnotes ARGS`` in a process of its own, with the
    installed package out of sight (its metadata, and the installed copy behind the
    checkout on the path)."""
    env = not_installed_env(checkout)
    if env_root is not None:
        env["CAPSNOTES_DATA"] = str(env_root)
    return subprocess.run(
        [sys.executable, "-m", "capsnotes", *args],
        capture_output=True,
        text=True,
        cwd=checkout.parent,
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


def test_affine_offers_each_kind_of_model_the_shipped_models_of_that_kind():
    """``affine --capsnet``'s choices are the shipped single-digit CapsNets and ``--cnn``'s
    the shipped CNNs, as their records say (a newly shipped model must be added)."""
    records = {n: json.loads(pretrained_files(n)[1].read_text()) for n in PRETRAINED}
    kinds = {n: TrainConfig.from_dict(r["train_config"]).architecture for n, r in records.items()}
    for choices, kind in ((ShippedCapsNet, "capsnet"), (ShippedCNN, "cnn")):
        shipped = [name for name in PRETRAINED if kinds[name] == kind]
        assert sorted(typing.get_args(choices)) == sorted(shipped), kind


def another_value(name: str, value):
    """A valid value of the field ``name`` other than ``value``."""
    if name == "dataset":
        return "fashion-mnist" if value == "mnist" else "mnist"
    if isinstance(value, bool):
        return not value
    if value is None:
        return 40
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.5
    return tuple(size + 1 for size in value)


def as_options(name: str, value) -> list[str]:
    option = f"--{name.replace('_', '-')}"
    if isinstance(value, bool):
        return [option if value else f"--no-{name.replace('_', '-')}"]
    return [option, *map(str, value if isinstance(value, tuple) else [value])]


def test_every_field_is_an_option_that_sets_it():
    """Each field of TrainConfig (but the architecture, which comes with its profile's
    model) and of the model's configuration, given on the command line with a value
    other than the profile's, is in the configuration made, and among the overrides
    recorded."""
    quick = PROFILES["quick"]
    wanted = {
        f.name: another_value(f.name, getattr(quick, f.name))
        for f in dataclasses.fields(TrainConfig)
        if f.name not in ("model", "architecture")
    }
    model = {
        f.name: another_value(f.name, getattr(quick.model, f.name))
        for f in dataclasses.fields(quick.model)
    }
    argv = ["--profile", "quick", "--out", "x"]
    for name, value in (wanted | model).items():
        argv += as_options(name, value)
    _, config, _, overrides = train_config(argv)
    assert {name: getattr(config, name) for name in wanted} == wanted
    assert dataclasses.asdict(config.model) == model
    assert {name: overrides[name] for name in wanted} == wanted
    assert overrides["model"] == dataclasses.asdict(config.model)


def test_each_command_s_help_lists_its_options_and_the_profile_s_defaults(capsys):
    """``--help`` exits 0 for every command and lists its options; a profile's help shows
    that profile's values as the defaults (the quick profile's, where they differ from
    TrainConfig's)."""
    with pytest.raises(SystemExit) as done:
        main(["train", "--profile", "quick", "--help"])
    assert done.value.code == 0
    text = unboxed(capsys.readouterr().out)
    for field in [*dataclasses.fields(TrainConfig), *dataclasses.fields(TINY)]:
        if field.name != "model":
            assert re.search(f"--{field.name.replace('_', '-')}[ ,]", text), field.name
    quick, plain = PROFILES["quick"], TrainConfig()
    differs = [f.name for f in dataclasses.fields(TrainConfig) if f.name != "model"]
    differs = [name for name in differs if getattr(quick, name) != getattr(plain, name)]
    assert differs  # the quick profile is not TrainConfig's defaults
    for name in differs:
        shown = re.search(rf"--{name.replace('_', '-')} \S+ .*?\(default: ([^)]*)\)", text)
        assert shown and shown.group(1) == str(getattr(quick, name)), name
    for command, words in (
        ([], ("train", "evaluate", "affine", "profiles")),
        (["train"], ("--profile", *PROFILES)),
        (["evaluate"], ("--checkpoint", "--test-size", "--device", "--data-root")),
        (["affine"], ("--out", "--capsnet", "--cnn", "--sweep-size")),
    ):
        with pytest.raises(SystemExit) as done:
            main([*command, "--help"])
        text = capsys.readouterr().out
        assert done.value.code == 0 and all(word in text for word in words), command


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
    # the profile's name alone, or none at all (auto: quick without a GPU), mean the same
    assert train_config(["cnn", "--out", "x", "--channels", "8", "8", "4"])[1] == cnn
    auto = "paper" if torch.cuda.is_available() else "quick"
    for argv in (["--out", "x"], ["--profile", "auto", "--out", "x"]):
        name, config, _, overrides = train_config(argv)
        assert (name, config, overrides) == (auto, PROFILES[auto], {})


def exit_code(argv: list[str]) -> int:
    """``main(argv)``'s status, also where the option parser exits by itself."""
    try:
        return main(argv)
    except SystemExit as done:
        return done.code


def unboxed(text: str) -> str:
    """tyro's message without its box: the words, joined by single spaces."""
    return " ".join(text.replace("│", " ").split())


def test_bad_values_get_the_configuration_s_errors(tmp_path, capsys):
    out = tmp_path / "x"
    for option, value, message in (
        ("--epochs", "0", "epochs must be a positive int, got 0"),
        ("--batch-size", "-4", "batch_size must be a positive int, got -4"),
        ("--routing-iterations", "0", "routing_iterations must be a positive int, got 0"),
        ("--max-shift", "-1", "max_shift must be >= 0"),
        # the quick profile's model is a CapsNet: the parser offers the CapsNets only
        ("--architecture", "cnn", "Expected one of ('capsnet', 'capsnet-pairs')"),
        ("--dataset", "cifar", "Expected one of ('mnist', 'fashion-mnist')"),
        ("--epochs", "two", "--epochs"),
    ):
        assert exit_code(["train", "--profile", "quick", "--out", str(out), option, value]) == 2
        assert message in unboxed(capsys.readouterr().err), option
    assert not out.exists()
    with pytest.raises(SystemExit) as done:  # a model option the CNN does not have
        main(["train", "--profile", "cnn", "--routing-iterations", "1", "--out", str(out)])
    assert done.value.code == 2 and "--routing-iterations" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["train", "--profile", "fastest", "--out", str(out)])
    assert done.value.code == 2 and "fastest" in capsys.readouterr().err
    for argv, message in (  # a choice of the other kind of model is refused by name
        (["train", "paper", "--architecture", "cnn"], "Expected one of ('capsnet', "),
        (["train", "cnn", "--architecture", "capsnet"], "Expected one of ('cnn', 'cnn-pairs')"),
        (["affine", "--cnn", "mnist"], "Expected one of ('cnn-mnist',)"),
        (
            ["affine", "--capsnet", "cnn-mnist"],
            "Expected one of ('mnist', 'mnist-long', 'fashion-mnist')",
        ),
    ):
        assert exit_code([*argv, "--out", str(out)]) == 2
        assert message in unboxed(capsys.readouterr().err), argv
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
def test_a_run_from_a_checkout_that_is_not_installed_records_what_it_chose(tmp_path, mnist_root):
    """``PYTHONPATH=CHECKOUT python -m capsnotes train`` in a process of its own, with no
    installed capsnotes in sight (as on the GPU machine): it trains with the fast paths,
    and on a CPU records the convolution and precision its timing chose and the
    checkout's version."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "capsnotes", checkout / "capsnotes")
    probe = subprocess.run(  # which capsnotes the process imports; none is installed
        [sys.executable, "-c", "import capsnotes, importlib.metadata as m; "
         "print(capsnotes.__file__); m.version('capsnotes')"],
        capture_output=True, text=True, cwd=tmp_path, env=not_installed_env(checkout),
    )  # fmt: skip
    assert probe.stdout.startswith(str(checkout)) and "PackageNotFoundError" in probe.stderr
    out = tmp_path / "process"
    result = run_from_checkout(
        checkout,
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
    history = json.loads((out / "history.json").read_text())
    (details,) = history["session_details"]
    assert details["fast_paths"] is True and details["routing"] == "fused"
    chosen = f"{details['convolution']}, {details['precision']}"
    assert details["step_seconds"][chosen] == min(details["step_seconds"].values())
    assert history["capsnotes"] == details["capsnotes"] == capsnotes.__version__


def test_a_broken_tyro_is_named_with_what_to_do(tmp_path):
    """A tyro that is installed but fails to import with a plain ImportError (not only a
    missing one): every command says which package failed, why, and what to install."""
    broken = tmp_path / "broken" / "tyro"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('a broken tyro install')\n")
    env = dict(os.environ, PYTHONPATH=f"{broken.parent}{os.pathsep}{REPO}")
    run = subprocess.run(
        [sys.executable, "-m", "capsnotes", "profiles"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "tyro, which fails to import (a broken tyro install)" in run.stderr
    assert "pip install tyro" in run.stderr and "Traceback" not in run.stderr
