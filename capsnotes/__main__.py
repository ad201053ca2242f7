"""Command line: ``python -m capsnotes {train,evaluate,profiles} --help``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Sequence

DESCRIPTION = """\
Train and evaluate the CapsNet of "Dynamic Routing Between Capsules" (Sabour, Frosst &
Hinton, 2017).

Data: MNIST / Fashion-MNIST are read from --data-root, else from the environment variable
CAPSNOTES_DATA, else from ~/.cache/capsnotes/data (torchvision's layout: MNIST/raw/...),
and downloaded there when missing and a network is available.
"""

TRAIN_HELP = """\
Train a model and write DIR/history.json (one record per epoch: losses, train and test
accuracy as fractions, seconds, images/s) and DIR/checkpoint.safetensors after every
epoch (or every --checkpoint-every epochs). Running the same command again resumes from
the checkpoint (or does nothing if the run is complete).

profiles:
  quick  for a 2-core CPU: a subset of real MNIST, about two minutes
  paper  for a GPU: the full training set, shifts of up to 2 pixels, 100 epochs
         (under three minutes on an H100)

Any field of the profile can be overridden with the options below.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m capsnotes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser(
        "train",
        help="train a model (see: train --help)",
        description=TRAIN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "--profile",
        default="auto",
        choices=["auto", "quick", "paper"],
        help="predefined settings; auto = paper on a GPU, quick otherwise",
    )
    train.add_argument("--out", required=True, metavar="DIR", help="output folder")
    train.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    train.add_argument("--data-root", metavar="PATH", help="data folder (default: see above)")
    train.add_argument("--dataset", choices=["mnist", "fashion-mnist"], help="dataset")
    train.add_argument("--epochs", type=int, help="number of epochs")
    train.add_argument("--batch-size", type=int, help="training batch size")
    train.add_argument("--lr", type=float, dest="learning_rate", help="initial learning rate")
    train.add_argument("--lr-decay", type=float, help="learning-rate factor per epoch")
    train.add_argument("--train-size", type=int, help="train on a random subset of this size")
    train.add_argument("--test-size", type=int, help="test on a fixed random subset of this size")
    train.add_argument("--max-shift", type=int, help="random shift augmentation, in pixels")
    train.add_argument("--routing-iterations", type=int, help="routing iterations (default 3)")
    train.add_argument("--seed", type=int, help="random seed")
    train.add_argument(
        "--weight-averaging",
        type=float,
        metavar="DECAY",
        help="keep a moving average of the weights with this decay per step (0: none) "
        "and make it the run's model",
    )
    train.add_argument(
        "--no-resume",
        action="store_true",
        help="start over even if DIR has a checkpoint (it is overwritten)",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument(
        "--checkpoint-every",
        type=int,
        default=1,
        metavar="N",
        help="write the checkpoint after every N epochs and after the last (default 1)",
    )
    train.add_argument(
        "--reference",
        action="store_true",
        help="use only the reference code paths, not capsnotes.fast",
    )
    train.add_argument(
        "--default-allocator",
        action="store_true",
        help="keep glibc's default malloc settings (by default this command restarts "
        "itself once so that glibc keeps large freed blocks: faster CPU training; see "
        "capsnotes/allocator.py)",
    )

    evaluate = commands.add_parser(
        "evaluate",
        help="score a checkpoint on a test set",
        description="Print the test accuracy and losses of a checkpoint as JSON.",
    )
    evaluate.add_argument(
        "--checkpoint",
        required=True,
        metavar="PATH",
        help="a checkpoint.safetensors file, or the folder holding one",
    )
    evaluate.add_argument("--device", default="auto", help="auto (default), cpu, cuda")
    evaluate.add_argument("--data-root", metavar="PATH", help="data folder")
    evaluate.add_argument("--test-size", type=int, help="evaluate on a fixed random subset")
    evaluate.add_argument("--batch-size", type=int, default=500, help="evaluation batch size")

    commands.add_parser("profiles", help="print the predefined training profiles as JSON")
    return parser


def _train(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from .train import default_profile, profile, train

    name = default_profile() if args.profile == "auto" else args.profile
    fields = (
        "dataset",
        "epochs",
        "batch_size",
        "learning_rate",
        "lr_decay",
        "train_size",
        "test_size",
        "max_shift",
        "seed",
        "weight_averaging",
    )
    overrides = {f: getattr(args, f) for f in fields if getattr(args, f) is not None}
    config = profile(name, **overrides)
    if args.routing_iterations is not None:
        config = dataclasses.replace(
            config,
            model=dataclasses.replace(config.model, routing_iterations=args.routing_iterations),
        )
    result = train(
        config,
        args.out,
        device=args.device,
        data_root=args.data_root,
        resume=not args.no_resume,
        progress=not args.no_progress,
        fast=not args.reference,
        checkpoint_every=args.checkpoint_every,
        provenance={
            "command": "python -m capsnotes " + shlex.join(argv),
            "profile": name,
            "overrides": overrides
            | ({"routing_iterations": args.routing_iterations} if args.routing_iterations else {}),
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
    from .checkpoint import load_checkpoint, load_model_state
    from .data import load_dataset
    from .model import CapsNet
    from .train import TrainConfig, evaluate, resolve_device

    checkpoint = load_checkpoint(args.checkpoint)
    config = TrainConfig.from_dict(checkpoint.metadata["train_config"])
    device = resolve_device(args.device)
    model = CapsNet(config.model)
    load_model_state(model, checkpoint.result_state, checkpoint.path)
    model.to(device)
    test_set = load_dataset(config.dataset, False, args.data_root).subset(args.test_size, seed=0)
    scores = evaluate(model, test_set, args.batch_size, config.mixed_precision)
    scores.update(
        checkpoint=str(checkpoint.path),
        epoch=checkpoint.metadata.get("epoch"),
        dataset=config.dataset,
    )
    print(json.dumps(scores, indent=1))
    return 0


def _profiles() -> int:
    from .train import PROFILES

    print(json.dumps({name: cfg.to_dict() for name, cfg in PROFILES.items()}, indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.command == "train" and not args.default_allocator:
        from .allocator import restart_retaining_freed_memory

        restart_retaining_freed_memory("capsnotes", argv)
    try:
        if args.command == "train":
            return _train(args, argv)
        if args.command == "evaluate":
            return _evaluate(args)
        return _profiles()
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
