"""Command line: ``python -m capsnotes {train,evaluate,affine,explorer,profiles}``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from .affine import AFFNIST_RANGES, robustness
from .allocator import restart_retaining_freed_memory
from .checkpoint import load_checkpoint, load_model_state
from .config import PROFILES, TrainConfig, default_profile, profile
from .data import load_dataset
from .devices import resolve_device
from .evaluation import evaluate
from .explorer import write_explorer_data
from .files import write_json
from .model import CapsNetConfig
from .pretrained import PRETRAINED, load_pretrained
from .run import build_model
from .train import train

DESCRIPTION = """\
Train and evaluate the CapsNet of "Dynamic Routing Between Capsules" (Sabour, Frosst &
Hinton, 2017), and the baseline CNN it is compared with.

Data: MNIST / Fashion-MNIST are read from --data-root, else from the environment variable
CAPSNOTES_DATA, else from ~/.cache/capsnotes/data (torchvision's layout: MNIST/raw/...),
and downloaded there when missing and a network is available.
"""

TRAIN_HELP = """\
Train a model and write DIR/history.json (one record per epoch: losses, train and test
accuracy as fractions, seconds, images/s) and DIR/checkpoint.safetensors after every
epoch (or every --checkpoint-every epochs). Running the same command again resumes from
the checkpoint (or does nothing if the run is complete); with a larger --epochs it
extends a finished run exactly as a longer run would have gone.

profiles (python -m capsnotes profiles prints them in full):
  quick      CapsNet, a 2-core CPU: a subset of real MNIST, about two minutes
  paper      CapsNet, a GPU: the full training set, shifts of up to 2 pixels, 100 epochs
             (under three minutes on an H100)
  cnn        the baseline CNN sized for a CPU (1.25M parameters), all of MNIST
  paper-cnn  the paper's 35.4M-parameter baseline CNN, a GPU

Every field of the profile can be overridden with the options below.
"""

#: Fields of the model's configuration that the command line exposes.
MODEL_OPTIONS = ("routing_iterations",)
_TYPES: dict[str, tuple[Any, str]] = {
    "int": (int, "N"),
    "int | None": (int, "N"),
    "float": (float, "X"),
    "str": (str, "NAME"),
}


def _option(parser: argparse.ArgumentParser, field: dataclasses.Field, default_note: str) -> None:
    """One command-line option for a configuration field, documented by the field."""
    meta = field.metadata
    flags = [f"--{field.name.replace('_', '-')}", *meta.get("flags", ())]
    kwargs: dict[str, Any] = {"dest": field.name, "default": None}
    if field.type == "bool":
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs["type"], metavar = _TYPES[field.type]
        kwargs["metavar"] = meta.get("metavar", metavar)
    if "choices" in meta:
        kwargs["choices"] = meta["choices"]
        kwargs.pop("metavar", None)
    parser.add_argument(*flags, help=f"{meta['help']} ({default_note})", **kwargs)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m capsnotes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train_parser = commands.add_parser(
        "train",
        help="train a model (see: train --help)",
        description=TRAIN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train_parser.add_argument(
        "--profile",
        default="auto",
        choices=["auto", *PROFILES],
        help="predefined settings; auto = paper on a GPU, quick otherwise",
    )
    train_parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    train_parser.add_argument(
        "--device", default="auto", help="auto (default), cpu, cuda or cuda:N"
    )
    train_parser.add_argument(
        "--data-root", metavar="PATH", help="data folder (default: see above)"
    )
    fields = train_parser.add_argument_group("the run's configuration (capsnotes.TrainConfig)")
    for field in dataclasses.fields(TrainConfig):
        if field.name != "model":
            _option(fields, field, "default: the profile's")
    model_fields = {f.name: f for f in dataclasses.fields(CapsNetConfig)}
    for name in MODEL_OPTIONS:
        _option(fields, model_fields[name], "CapsNet only; default: the profile's")
    train_parser.add_argument(
        "--no-resume",
        action="store_true",
        help="start over even if DIR has a checkpoint (it is overwritten)",
    )
    train_parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    train_parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=1,
        metavar="N",
        help="write the checkpoint after every N epochs and after the last (default 1)",
    )
    train_parser.add_argument(
        "--reference",
        action="store_true",
        help="train with the reference implementations only (no fused kernels, graphs)",
    )
    train_parser.add_argument(
        "--default-allocator",
        action="store_true",
        help="keep glibc's default malloc settings (by default this command restarts "
        "itself once so that glibc keeps large freed blocks: faster CPU training; see "
        "capsnotes/allocator.py)",
    )

    evaluate_parser = commands.add_parser(
        "evaluate",
        help="score a checkpoint on a test set",
        description="Print the test accuracy and losses of a checkpoint as JSON.",
    )
    evaluate_parser.add_argument(
        "--checkpoint",
        required=True,
        metavar="PATH",
        help="a checkpoint.safetensors file, or the folder holding one",
    )
    evaluate_parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda")
    evaluate_parser.add_argument("--data-root", metavar="PATH", help="data folder")
    evaluate_parser.add_argument("--test-size", type=int, help="evaluate on a fixed random subset")
    evaluate_parser.add_argument(
        "--batch-size", type=int, default=500, help="evaluation batch size"
    )

    affine = commands.add_parser(
        "affine",
        help="score shipped models on affine-warped test digits",
        description="Warp the MNIST test digits with random affine transformations "
        "(capsnotes.affine: rotation, shear and scale as in affNIST, translation within the "
        "training shifts), score a shipped CapsNet and the shipped CNN on the same images, "
        "sweep one factor at a time, and write the record as JSON.",
    )
    affine.add_argument("--out", required=True, metavar="FILE", help="the JSON record")
    affine.add_argument("--capsnet", default="mnist", choices=sorted(PRETRAINED))
    affine.add_argument("--cnn", default="cnn-mnist", choices=sorted(PRETRAINED))
    affine.add_argument("--seed", type=int, default=0, help="seed of the random warps")
    affine.add_argument(
        "--sweep-size", type=int, default=2000, help="test images per point of the sweeps"
    )
    affine.add_argument("--device", default="auto", help="auto (default), cpu, cuda")
    affine.add_argument("--data-root", metavar="PATH", help="data folder")

    explorer = commands.add_parser(
        "explorer",
        help="write the data file of the book's capsule explorer",
        description="Write capsnotes-explorer-data.js (the shipped model's decoder and a "
        "few dozen test digits) into DIR; the book's build does this itself.",
    )
    explorer.add_argument("--out", required=True, metavar="DIR", help="output folder")
    explorer.add_argument("--data-root", metavar="PATH", help="data folder")

    commands.add_parser("profiles", help="print the predefined training profiles as JSON")
    return parser


def train_config(args: argparse.Namespace) -> tuple[str, TrainConfig, dict[str, Any]]:
    """The profile's name, the configuration the arguments ask for, and the overrides."""
    name = default_profile() if args.profile == "auto" else args.profile
    overrides = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(TrainConfig)
        if field.name != "model" and getattr(args, field.name) is not None
    }
    model = {name: getattr(args, name) for name in MODEL_OPTIONS if getattr(args, name) is not None}
    if model and PROFILES[name].architecture != "capsnet" and "architecture" not in overrides:
        raise ValueError(f"--{next(iter(model)).replace('_', '-')} applies to CapsNet runs only")
    return name, profile(name, **overrides, model=model), overrides | model


def _train(args: argparse.Namespace, argv: Sequence[str]) -> int:
    name, config, overrides = train_config(args)
    device = resolve_device(args.device)
    if not args.default_allocator:  # only once the arguments are known to be good
        restart_retaining_freed_memory("capsnotes", argv)
    result = train(
        config,
        args.out,
        device=device,
        data_root=args.data_root,
        resume=not args.no_resume,
        progress=not args.no_progress,
        fast=not args.reference,
        checkpoint_every=args.checkpoint_every,
        provenance={
            "command": "python -m capsnotes " + shlex.join(argv),
            "profile": name,
            "overrides": overrides,
            "fast_paths": not args.reference,
        },
    )
    history = result.history
    print(
        f"profile {name}: test accuracy {history.get('test_accuracy', float('nan')):.4f} "
        f"after {len(history['epochs'])} epochs on {history['device']} "
        f"({history['wall_seconds']:.1f} s); wrote {result.out_dir}/history.json"
    )
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    checkpoint = load_checkpoint(args.checkpoint)
    config = TrainConfig.from_dict(checkpoint.metadata["train_config"])
    config = dataclasses.replace(config, eval_batch_size=args.batch_size)
    device = resolve_device(args.device)
    model = build_model(config)
    load_model_state(model, checkpoint.result_state, checkpoint.path)
    test_set = load_dataset(config.dataset, False, args.data_root).subset(args.test_size, seed=0)
    scores = evaluate(model.to(device), test_set, config)
    scores.update(
        checkpoint=str(checkpoint.path),
        epoch=checkpoint.metadata.get("epoch"),
        dataset=config.dataset,
    )
    print(json.dumps(scores, indent=1))
    return 0


def _affine(args: argparse.Namespace, argv: Sequence[str]) -> int:
    device = resolve_device(args.device)
    models, plain = {}, {}
    for role, name in (("capsnet", args.capsnet), ("cnn", args.cnn)):
        model, history = load_pretrained(name, device)
        models[role] = model
        plain[role] = {"pretrained": name, "parameters": sum(p.numel() for p in model.parameters())}
        plain[role]["trained_test_accuracy"] = history["epochs"][-1]["test_accuracy"]
    test_set = load_dataset("mnist", False, args.data_root)
    record = robustness(
        models, test_set, ranges=AFFNIST_RANGES, seed=args.seed, sweep_size=args.sweep_size
    )
    for role, facts in plain.items():
        record["models"][role] |= facts
        record[f"{role}_accuracy"] = record["models"][role]["affine_accuracy"]
        record[f"{role}_plain_accuracy"] = record["models"][role]["plain_accuracy"]
    record["command"] = "python -m capsnotes " + shlex.join(argv)
    write_json(args.out, record)
    print(
        f"affine-warped MNIST ({record['count']:,} images, seed {args.seed}): CapsNet "
        f"{record['capsnet_accuracy']:.4f}, CNN {record['cnn_accuracy']:.4f}; wrote {args.out}"
    )
    return 0


def _profiles() -> int:
    print(json.dumps({name: cfg.to_dict() for name, cfg in PROFILES.items()}, indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "train":
            return _train(args, argv)
        if args.command == "evaluate":
            return _evaluate(args)
        if args.command == "affine":
            return _affine(args, argv)
        if args.command == "explorer":
            path = write_explorer_data(args.out, data_root=args.data_root)
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")
            return 0
        return _profiles()
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
