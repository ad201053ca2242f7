"""Command line: ``python -m capsnotes {train,evaluate,affine,profiles}``.

``train``'s options are made from the dataclasses by tyro: every field of the chosen
profile's :class:`~capsnotes.TrainConfig` and of its model's configuration is an option
(``--epochs``, ``--conv-channels``, ...), documented by the field, with the profile's
value as its default. The other commands' few options are declared once with argparse.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import tyro

from .affine import AFFNIST_RANGES, robustness
from .allocator import restart_retaining_freed_memory
from .checkpoint import load_checkpoint, load_model_state
from .config import ARCHITECTURES, PROFILES, TrainConfig, default_profile
from .data import load_dataset
from .devices import resolve_device
from .evaluation import evaluate
from .files import write_json
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
Train a model and write OUT/history.json (one record per epoch: losses, train and test
accuracy as fractions, seconds, images/s) and OUT/checkpoint.safetensors after every
epoch (or every --checkpoint-every epochs). Running the same command again resumes from
the checkpoint (or does nothing if the run is complete); with a larger --epochs it
extends a finished run exactly as a longer run would have gone.

--profile NAME picks the defaults (python -m capsnotes profiles prints them):
  quick      CapsNet, any CPU: 2,560 MNIST digits, 2 epochs, about a minute
  paper      CapsNet, the paper's setting: all 60,000 digits, shifts of up to 2 pixels,
             100 epochs (under three minutes on an H100)
  cnn        the baseline CNN sized for a CPU (1.25M parameters), all of MNIST
  paper-cnn  the paper's 35.4M-parameter baseline CNN
  auto       paper on a GPU, quick otherwise (the default)

Every option below overrides one field of the profile; the model's sizes are the
options of the profile's architecture.
"""


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
    """train with the reference implementations only (no fused kernels, no graphs)"""
    default_allocator: bool = False
    """keep glibc's malloc settings (by default the command restarts itself once so that
    glibc keeps large freed blocks; see capsnotes/allocator.py)"""


def _config_options(architecture: str) -> type:
    """A dataclass with the fields of :class:`TrainConfig`, its ``model`` typed as the
    architecture's configuration class, for tyro to make options of."""
    hints = typing.get_type_hints(TrainConfig)
    fields: list[tuple[str, Any, Any]] = []
    for field in dataclasses.fields(TrainConfig):
        if field.name == "model":
            fields.append(("model", ARCHITECTURES[architecture].config, None))
            continue
        aliases = tuple(field.metadata.get("flags", ())) or None
        help_text = tyro.conf.arg(help=field.metadata["help"], aliases=aliases)
        fields.append((field.name, Annotated[hints[field.name], help_text], None))
    return dataclasses.make_dataclass(
        "ConfigOptions", [(name, kind, dataclasses.field(default=d)) for name, kind, d in fields]
    )


def _profile_and_architecture(argv: Sequence[str]) -> tuple[str, str, list[str]]:
    """The profile (``--profile``, default auto) and the architecture the options will
    describe (``--architecture``, default the profile's), and the other arguments."""
    first = argparse.ArgumentParser(add_help=False, prog="python -m capsnotes train")
    first.add_argument("--profile", default="auto", choices=["auto", *PROFILES])
    first.add_argument("--architecture", choices=list(ARCHITECTURES))
    known, rest = first.parse_known_args(argv)
    name = default_profile() if known.profile == "auto" else known.profile
    architecture = known.architecture or PROFILES[name].architecture
    if known.architecture:
        rest = [*rest, "--architecture", known.architecture]
    return name, architecture, rest


def train_config(argv: Sequence[str]) -> tuple[str, TrainConfig, RunOptions, dict[str, Any]]:
    """The profile's name, the configuration and the run options ``train ARGV`` asks for,
    and the fields that differ from the profile's."""
    name, architecture, rest = _profile_and_architecture(argv)
    base = PROFILES[name]
    options_class = _config_options(architecture)
    model = base.model
    if not isinstance(model, ARCHITECTURES[architecture].config):
        model = ARCHITECTURES[architecture].config()  # another architecture than the profile's
    defaults = {f.name: getattr(base, f.name) for f in dataclasses.fields(TrainConfig)}
    config_defaults = options_class(**(defaults | {"model": model}))

    def command(run: RunOptions, config: Any = config_defaults) -> tuple[RunOptions, Any]:
        return run, config

    # the options' class is made above, so its annotation is set here, not written
    command.__annotations__ = {"run": RunOptions, "config": options_class, "return": tuple}
    run, options = tyro.cli(
        command,
        args=rest,
        prog="python -m capsnotes train --profile NAME",
        description=TRAIN_HELP,
        config=(tyro.conf.OmitArgPrefixes, tyro.conf.OmitSubcommandPrefixes),
    )
    values = {f.name: getattr(options, f.name) for f in dataclasses.fields(TrainConfig)}
    config = TrainConfig.from_dict(values | {"model": dataclasses.asdict(options.model)})
    overrides = {k: v for k, v in values.items() if k != "model" and v != defaults[k]}
    model_changes = {
        k: v for k, v in dataclasses.asdict(options.model).items() if v != getattr(model, k)
    }
    if model_changes:
        overrides["model"] = model_changes
    return name, config, run, overrides


def _train(argv: Sequence[str]) -> int:
    name, config, run, overrides = train_config(argv[1:])
    device = resolve_device(run.device)
    if not run.default_allocator:  # only once the arguments are known to be good
        restart_retaining_freed_memory("capsnotes", argv)
    result = train(
        config,
        run.out,
        device=device,
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
        f"profile {name}: test accuracy {history.get('test_accuracy', float('nan')):.4f} "
        f"after {len(history['epochs'])} epochs on {history['device']} "
        f"({history['wall_seconds']:.1f} s); wrote {result.out_dir}/history.json"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m capsnotes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("train", help="train a model (see: train --help)", add_help=False)
    where = argparse.ArgumentParser(add_help=False)  # the options every other command has
    where.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    where.add_argument("--data-root", metavar="PATH", help="data folder (default: see above)")
    evaluate_parser = commands.add_parser(
        "evaluate",
        parents=[where],
        help="score a checkpoint on a test set",
        description="Print the test accuracy and losses of a checkpoint as JSON.",
    )
    evaluate_parser.add_argument(
        "--checkpoint", required=True, metavar="PATH", help="checkpoint.safetensors or its folder"
    )
    evaluate_parser.add_argument("--test-size", type=int, help="evaluate on a fixed subset")
    evaluate_parser.add_argument("--batch-size", type=int, default=500, help="default 500")
    affine = commands.add_parser(
        "affine",
        parents=[where],
        help="score shipped models on affine-warped test digits",
        description="Warp the MNIST test digits with random affine transformations "
        "(capsnotes.affine), score a shipped CapsNet and the shipped CNN on the same images, "
        "sweep one factor at a time, and write the record as JSON.",
    )
    affine.add_argument("--out", required=True, metavar="FILE", help="the JSON record")
    affine.add_argument("--capsnet", default="mnist", choices=sorted(PRETRAINED))
    affine.add_argument("--cnn", default="cnn-mnist", choices=sorted(PRETRAINED))
    affine.add_argument("--seed", type=int, default=0, help="seed of the random warps")
    affine.add_argument("--sweep-size", type=int, default=2000, help="images per sweep point")
    commands.add_parser("profiles", help="print the predefined training profiles as JSON")
    return parser


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
        print(json.dumps({name: cfg.to_dict() for name, cfg in PROFILES.items()}, indent=1))
        return 0
    except (ValueError, TypeError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
