"""Command line: ``python -m capsnotes {train,evaluate,affine,profiles}``.

``train``'s command line is made from the dataclasses by tyro, in one pass: each profile
is a subcommand (``train --profile paper``, or ``train paper``), whose options are every
field of :class:`RunOptions`, of the profile's :class:`~capsnotes.training.config.TrainConfig`
and of its model's configuration (``--epochs``, ``--conv-channels``, ...), documented by
the field, with the profile's value as its default. The other commands' few options are
argparse's, and need no tyro.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Union

import torch

from ..data import load_dataset
from ..data.files import write_json
from ..experiments.affine import AFFNIST_RANGES, robustness
from ..fast.precision import device_name, resolve_device
from .checkpoint import load_checkpoint, load_model_state
from .config import PROFILES, TrainConfig, build_model, load_run_data
from .evaluation import evaluate
from .pretrained import PRETRAINED, load_pretrained
from .train import train

try:
    import tyro
except ModuleNotFoundError:  # only ``train`` needs it; see train_config
    tyro = None

DESCRIPTION = """\
Train and evaluate the CapsNet of "Dynamic Routing Between Capsules" (Sabour, Frosst &
Hinton, 2017), and the baseline CNN it is compared with.

Data: MNIST / Fashion-MNIST are read from --data-root, else from the environment
variable CAPSNOTES_DATA, else from ~/.cache/capsnotes/data (torchvision's layout:
MNIST/raw/...), and downloaded there when missing and a network is available.
"""

TRAIN_HELP = """\
Train a model and write OUT/history.json (one record per epoch) and
OUT/checkpoint.safetensors after every epoch (or every --checkpoint-every epochs).
The same command again resumes from the checkpoint (or does nothing if the run is
complete); with a larger --epochs it extends a finished run exactly as a longer run
would have gone.

--profile NAME (or NAME alone) picks the defaults (python -m capsnotes profiles prints
them): quick, paper, cnn, paper-cnn, multimnist, multimnist-cnn, or auto (the default:
paper on a GPU, quick otherwise). Every option after it overrides one field of the
profile (python -m capsnotes train --profile NAME --help lists them).
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


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How to run the training, as opposed to what to train."""

    out: Path
    """output folder: history.json and checkpoint.safetensors"""
    device: str = "auto"
    """auto (a GPU if there is one), cpu, cuda or cuda:N"""
    data_root: Path | None = None
    """data folder (default: $CAPSNOTES_DATA, else ~/.cache/capsnotes/data)"""
    resume: bool = True
    """continue from OUT's checkpoint (--no-resume: start over, overwriting it)"""
    progress: bool = True
    """show a progress bar"""
    checkpoint_every: int = 1
    """write the checkpoint after every N epochs and after the last"""
    reference: bool = False
    """train with the reference code only (no fast layers, float32, no graphs)"""


@dataclasses.dataclass(frozen=True)
class TrainCommand:
    """``train PROFILE``'s options: how to run, and what to train."""

    profile: tyro.conf.Suppress[str]
    run: RunOptions
    config: Annotated[TrainConfig, tyro.conf.AvoidSubcommands]


def train_config(
    argv: Sequence[str],
) -> tuple[str, TrainConfig, RunOptions, dict[str, Any]]:
    """The profile's name, the configuration and the run options ``train ARGV`` asks
    for, and the fields it changes of the profile's (``model``: the model's fields)."""
    if tyro is None:
        raise ValueError(
            "python -m capsnotes train builds its options with tyro, which is not "
            "installed: pip install tyro (on a machine without a network, carry its "
            "wheels: benchmarks/gpu_wheels.sh)"
        )
    auto = "paper" if torch.cuda.is_available() else "quick"
    defaults = {
        name: TrainCommand(profile, RunOptions(out=tyro.MISSING), PROFILES[profile])
        for name, profile in [("auto", auto), *((name, name) for name in PROFILES)]
    }
    helps = {"auto": f"the default: paper on a GPU, quick otherwise (here: {auto})"}
    helps |= {
        name: f"the {name} profile: {text}" for name, text in PROFILE_HELP.items()
    }
    profiles = [
        Annotated[
            TrainCommand,
            tyro.conf.subcommand(
                name,
                default=default,
                description=helps[name],
                prefix_name=False,
                is_default=name == "auto",  # tyro 1.0.14 and later
            ),
        ]
        for name, default in defaults.items()
    ]
    # the profile, after an optional --profile: `--profile paper` is `paper`
    marker = tyro.conf.arg(help="optional, before the profile's name")
    command_line = dataclasses.make_dataclass(
        "Train",
        [
            ("train", Union[tuple(profiles)]),  # noqa: UP007 (a Union of a list)
            ("profile", Annotated[bool, tyro.conf.FlagCreatePairsOff, marker], False),
        ],
        frozen=True,
    )
    command = tyro.cli(
        command_line,
        args=argv,
        prog="python -m capsnotes train",
        description=TRAIN_HELP,
        config=(tyro.conf.OmitArgPrefixes,),
    ).train
    name, config = command.profile, command.config
    profile, chosen = PROFILES[name].to_dict(), config.to_dict()
    changed = {k: v for k, v in chosen.items() if k != "model" and v != profile[k]}
    model = {k: v for k, v in chosen["model"].items() if v != profile["model"].get(k)}
    return name, config, command.run, changed | ({"model": model} if model else {})


def _train(argv: Sequence[str]) -> int:
    name, config, run, overrides = train_config(argv[1:])
    result = train(
        config,
        run.out,
        device=run.device,
        data_root=run.data_root,
        resume=run.resume,
        progress=run.progress,
        fast=not run.reference,
        checkpoint_every=run.checkpoint_every,
        provenance={
            "command": "python -m capsnotes " + shlex.join(argv),
            "profile": name,
            "overrides": overrides,
            "fast_paths": not run.reference,
        },
    )
    history = result.history
    print(
        f"profile {name}: test accuracy "
        f"{history.get('test_accuracy', float('nan')):.4f} "
        f"after {len(history['epochs'])} epochs on {history['device']} "
        f"({history.get('wall_seconds', 0):.1f} s); wrote {result.out_dir}/history.json"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m capsnotes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "train", help="train a model (see: train --help)", add_help=False
    )
    # the options every other command has
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--device", default="auto", help="auto (default), cpu, cuda or cuda:N"
    )
    where.add_argument(
        "--data-root", metavar="PATH", help="data folder (default: see above)"
    )
    evaluate_parser = commands.add_parser(
        "evaluate",
        parents=[where],
        help="score a checkpoint on its test set",
        description="Print the test accuracy and losses of a checkpoint as JSON.",
    )
    evaluate_parser.add_argument(
        "--checkpoint",
        required=True,
        metavar="PATH",
        help="checkpoint.safetensors or its folder",
    )
    evaluate_parser.add_argument(
        "--test-size", type=int, help="evaluate on a fixed subset"
    )
    affine = commands.add_parser(
        "affine",
        parents=[where],
        help="score shipped models on affine-warped test digits",
        description="Warp the MNIST test digits with random affine transformations "
        "(capsnotes.experiments.affine), score a shipped CapsNet and the shipped CNN on the same "
        "images, "
        "sweep one factor at a time, and write the record as JSON.",
    )
    affine.add_argument("--out", required=True, metavar="FILE", help="the JSON record")
    affine.add_argument("--capsnet", default="mnist", choices=sorted(PRETRAINED))
    affine.add_argument("--cnn", default="cnn-mnist", choices=sorted(PRETRAINED))
    affine.add_argument("--seed", type=int, default=0, help="seed of the random warps")
    affine.add_argument(
        "--sweep-size", type=int, default=2000, help="images per sweep point"
    )
    commands.add_parser(
        "profiles", help="print the predefined training profiles as JSON"
    )
    return parser


def _evaluate(args: argparse.Namespace) -> int:
    checkpoint = load_checkpoint(args.checkpoint)
    config = TrainConfig.from_dict(checkpoint.metadata["train_config"])
    config = dataclasses.replace(config, test_size=args.test_size)
    model = build_model(config)
    load_model_state(model, checkpoint.result_state, checkpoint.path)
    device = resolve_device(args.device)
    _, test_data = load_run_data(config, device, args.data_root)
    scores = evaluate(model.to(device), test_data, config.objective)
    scores |= {"checkpoint": str(checkpoint.path), "dataset": config.dataset}
    print(json.dumps(scores | {"epoch": checkpoint.metadata.get("epoch")}, indent=1))
    return 0


def _affine(args: argparse.Namespace, argv: Sequence[str]) -> int:
    device = resolve_device(args.device)
    models, facts = {}, {}
    for role, name in (("capsnet", args.capsnet), ("cnn", args.cnn)):
        model, history = load_pretrained(name, device)
        models[role] = model
        facts[role] = {
            "pretrained": name,
            "parameters": sum(p.numel() for p in model.parameters()),
            "trained_test_accuracy": history["epochs"][-1]["test_accuracy"],
        }
    test_set = load_dataset("mnist", False, args.data_root)
    record = robustness(
        models,
        test_set,
        ranges=AFFNIST_RANGES,
        seed=args.seed,
        sweep_size=args.sweep_size,
    )
    for role in models:
        record["models"][role] |= facts[role]
        record[f"{role}_accuracy"] = record["models"][role]["affine_accuracy"]
        record[f"{role}_plain_accuracy"] = record["models"][role]["plain_accuracy"]
    record["device"] = device_name(device)
    record["command"] = "python -m capsnotes " + shlex.join(argv)
    write_json(args.out, record)
    print(
        f"affine-warped MNIST ({record['count']:,} images, seed {args.seed}): CapsNet "
        f"{record['capsnet_accuracy']:.4f}, CNN {record['cnn_accuracy']:.4f}; wrote "
        f"{args.out}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["train"]:
            return _train(argv)
        args = _parser().parse_args(argv)
        if args.command == "evaluate":
            return _evaluate(args)
        if args.command == "affine":
            return _affine(args, argv)
        print(
            json.dumps(
                {name: cfg.to_dict() for name, cfg in PROFILES.items()}, indent=1
            )
        )
        return 0
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
