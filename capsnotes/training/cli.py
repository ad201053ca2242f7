"""``python -m capsnotes {train,evaluate,affine,profiles}``, made by one ``tyro.cli``:
each command is a dataclass whose documented fields are its options and
whose ``run(argv)`` does it. ``train``'s profiles are subcommands (``train paper``)
whose options are the fields of :class:`RunOptions`, ``TrainConfig`` and its model's
configuration, the profile's values their defaults.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import torch

from ..data import load_dataset
from ..data.files import write_json
from ..experiments.affine import robustness
from ..fast.precision import device_name, resolve_device
from .checkpoint import load_checkpoint, load_model_state
from .config import PROFILES, TrainConfig, build_model, load_run_data, with_choices
from .evaluation import evaluate
from .pretrained import load_pretrained
from .train import train

try:
    import tyro

    from .options import DataRoot, Device, Out
except ImportError as error:  # not installed, or installed but broken (parse says so)
    tyro, TYRO_ERROR = None, error

DESCRIPTION = """\
Train and evaluate the CapsNet of "Dynamic Routing Between Capsules" (Sabour, Frosst &
Hinton, 2017), and the baseline CNN it is compared with.

Data: MNIST / Fashion-MNIST are read from --data-root, else from the environment
variable CAPSNOTES_DATA, else from ~/.cache/capsnotes/data (torchvision's layout:
MNIST/raw/...), and downloaded there when missing and a network is available.
"""

#: What each profile trains, in a line (capsnotes.training.config describes them).
PROFILE_HELP = {
    "quick": "a subset of MNIST, about a minute on a 2-core CPU",
    "paper": "the paper's setting, all 60,000 shifted digits for 100 epochs",
    "cnn": "the CPU-sized baseline CNN on all of MNIST",
    "paper-cnn": "the paper's 35.4M-parameter baseline CNN",
    "multimnist": "two overlapping digits, at the width a 2-core CPU trains in hours",
    "multimnist-cnn": "the CPU-sized baseline CNN on the same overlapping digits",
}

TRAIN_HELP = """\
Train a model into OUT: history.json and checkpoint.safetensors after every epoch. The
same command resumes an interrupted run; with a larger --epochs it extends a finished
one as a longer run would have gone. --profile NAME (or NAME alone; default auto: paper
on a GPU, quick otherwise) picks the defaults, and every option after it overrides one
field (train NAME --help lists them; python -m capsnotes profiles prints them all).
"""

#: ``affine``'s choices: the shipped models of each kind (checked by tests/test_cli.py).
ShippedCapsNet = Literal["mnist", "mnist-long", "fashion-mnist"]
ShippedCNN = Literal["cnn-mnist"]


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How to run the training, as opposed to what to train."""

    out: Out
    device: Device = "auto"
    data_root: DataRoot = None
    resume: bool = True
    """continue from OUT's checkpoint (--no-resume: start over, overwriting it)"""
    progress: bool = True
    """show a progress bar"""
    checkpoint_every: int = 1
    """write the checkpoint after every N epochs and after the last"""
    reference: bool = False
    """train with the reference code only (no fast layers, float32, no graphs)"""


@dataclasses.dataclass(frozen=True)
class Profile:
    """A profile's options: how to run, and what to train."""

    name: tyro.conf.Suppress[str]
    run: RunOptions
    config: Annotated[TrainConfig, tyro.conf.AvoidSubcommands]

    def overrides(self) -> dict[str, Any]:
        """The fields this command changes of its profile's (``model``: the model's)."""
        profile, chosen = PROFILES[self.name].to_dict(), self.config.to_dict()
        changed = {k: v for k, v in chosen.items() if k != "model" and v != profile[k]}
        model = {
            k: v for k, v in chosen["model"].items() if v != profile["model"].get(k)
        }
        return changed | ({"model": model} if model else {})


def _train_command() -> type:
    """``train``: the profiles as subcommands (default ``auto``) after an optional
    ``--profile``."""
    auto = "paper" if torch.cuda.is_available() else "quick"
    helps = {"auto": f"the default: paper on a GPU, quick otherwise (here: {auto})"}
    helps |= {p: f"the {p} profile: {text}" for p, text in PROFILE_HELP.items()}
    unset = RunOptions(out=tyro.MISSING)  # --out has no default
    profiles = [
        Annotated[
            Profile,
            tyro.conf.subcommand(
                name,
                default=Profile(profile, unset, with_choices(PROFILES[profile])),
                description=helps[name],
                prefix_name=False,
                is_default=name == "auto",
            ),
        ]
        for name, profile in [("auto", auto), *((name, name) for name in PROFILES)]
    ]
    marker = tyro.conf.arg(help="takes no value: train --profile NAME is train NAME")
    return dataclasses.make_dataclass(
        "Train",
        [
            ("chosen", Union[tuple(profiles)]),  # noqa: UP007 (a Union of a list)
            ("profile", Annotated[bool, tyro.conf.FlagCreatePairsOff, marker], False),
        ],
        frozen=True,
        namespace={"run": _run_train, "__doc__": TRAIN_HELP},
    )


def _run_train(command: Any, argv: Sequence[str]) -> int:
    chosen: Profile = command.chosen
    run = chosen.run
    result = train(
        TrainConfig.from_dict(chosen.config.to_dict()),  # not with_choices' class
        run.out,
        device=run.device,
        data_root=run.data_root,
        resume=run.resume,
        progress=run.progress,
        fast=not run.reference,
        checkpoint_every=run.checkpoint_every,
        provenance={
            "command": "python -m capsnotes " + shlex.join(argv),
            "profile": chosen.name,
            "overrides": chosen.overrides(),
            "fast_paths": not run.reference,
        },
    )
    history = result.history
    print(
        f"profile {chosen.name}: test accuracy "
        f"{history.get('test_accuracy', float('nan')):.4f} "
        f"after {len(history['epochs'])} epochs on {history['device']} "
        f"({history.get('wall_seconds', 0):.1f} s); wrote {result.out_dir}/history.json"
    )
    return 0


@dataclasses.dataclass(frozen=True)
class Evaluate:
    """Print the test accuracy and losses of a checkpoint as JSON."""

    checkpoint: Path
    """checkpoint.safetensors or its folder"""
    test_size: int | None = None
    """evaluate on a fixed subset of this size (None: the whole test set)"""
    device: Device = "auto"
    data_root: DataRoot = None

    def run(self, argv: Sequence[str]) -> int:
        checkpoint = load_checkpoint(self.checkpoint)
        config = TrainConfig.from_dict(checkpoint.metadata["train_config"])
        config = dataclasses.replace(config, test_size=self.test_size)
        model = build_model(config)
        load_model_state(model, checkpoint.result_state, checkpoint.path)
        device = resolve_device(self.device)
        _, test_data = load_run_data(config, device, self.data_root)
        scores = evaluate(model.to(device), test_data, config.objective)
        scores |= {"checkpoint": str(checkpoint.path), "dataset": config.dataset}
        scores["epoch"] = checkpoint.metadata.get("epoch")
        print(json.dumps(scores, indent=1))
        return 0


@dataclasses.dataclass(frozen=True)
class Affine:
    """Warp the MNIST test digits with random affine transformations
    (capsnotes.experiments.affine), score a shipped CapsNet and the shipped CNN on the
    same images, sweep one factor at a time, and write the record as JSON."""

    out: Path
    """the JSON record"""
    capsnet: ShippedCapsNet = "mnist"
    """the shipped CapsNet to score"""
    cnn: ShippedCNN = "cnn-mnist"
    """the shipped CNN to score"""
    seed: int = 0
    """seed of the random warps"""
    sweep_size: int = 2000
    """images per sweep point"""
    device: Device = "auto"
    data_root: DataRoot = None

    def run(self, argv: Sequence[str]) -> int:
        device = resolve_device(self.device)
        names = {"capsnet": self.capsnet, "cnn": self.cnn}
        shipped = {role: load_pretrained(name, device) for role, name in names.items()}
        models = {role: model for role, (model, _) in shipped.items()}
        test_set = load_dataset("mnist", False, self.data_root)
        record = robustness(
            models, test_set, seed=self.seed, sweep_size=self.sweep_size
        )
        for role, (model, history) in shipped.items():
            scores = record["models"][role]
            scores["pretrained"] = names[role]
            scores["parameters"] = sum(p.numel() for p in model.parameters())
            scores["trained_test_accuracy"] = history["epochs"][-1]["test_accuracy"]
            record[f"{role}_accuracy"] = scores["affine_accuracy"]
            record[f"{role}_plain_accuracy"] = scores["plain_accuracy"]
        record["device"] = device_name(device)
        record["command"] = "python -m capsnotes " + shlex.join(argv)
        write_json(self.out, record)
        capsnet, cnn = record["capsnet_accuracy"], record["cnn_accuracy"]
        print(
            f"affine-warped MNIST ({record['count']:,} images, seed {self.seed}): "
            f"CapsNet {capsnet:.4f}, CNN {cnn:.4f}; wrote {self.out}"
        )
        return 0


@dataclasses.dataclass(frozen=True)
class Profiles:
    """Print the predefined training profiles as JSON."""

    def run(self, argv: Sequence[str]) -> int:
        print(json.dumps({name: c.to_dict() for name, c in PROFILES.items()}, indent=1))
        return 0


def parse(argv: Sequence[str]) -> Any:
    """The command ``argv`` asks for: a ``Train`` (its ``chosen`` a :class:`Profile`),
    :class:`Evaluate`, :class:`Affine` or :class:`Profiles`; tyro prints the help or a
    usage error and exits where ``argv`` asks for one."""
    if tyro is None:
        raise ValueError(
            f"python -m capsnotes builds its options with tyro, which fails to import "
            f"({TYRO_ERROR}): pip install tyro (on a machine without a network, carry "
            "its wheels: benchmarks/gpu_wheels.sh)"
        )
    choices = [  # each command named by its class, described by its docstring
        Annotated[kind, tyro.conf.subcommand(kind.__name__.lower(), prefix_name=False)]
        for kind in (_train_command(), Evaluate, Affine, Profiles)
    ]
    return tyro.cli(
        Union[tuple(choices)],  # noqa: UP007 (a Union of a list)
        prog="python -m capsnotes",
        description=DESCRIPTION,
        args=list(argv),
        config=(tyro.conf.OmitArgPrefixes,),
    )


def train_config(
    argv: Sequence[str],
) -> tuple[str, TrainConfig, RunOptions, dict[str, Any]]:
    """The profile's name, configuration, run options and overrides ``train ARGV`` asks
    for."""
    chosen: Profile = parse(["train", *argv]).chosen
    config = TrainConfig.from_dict(chosen.config.to_dict())  # not with_choices' class
    return chosen.name, config, chosen.run, chosen.overrides()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return parse(argv).run(argv)
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
