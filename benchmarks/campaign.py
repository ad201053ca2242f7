"""The paper's experiments, stage by stage: ``python -m benchmarks.campaign``.

The stages are the rows of :data:`STAGE_TABLE`, in the order they run: what each runs,
the datasets it reads and the model it ships (``--help`` lists them). Each writes
``OUT/<stage>.json`` as soon as it finishes; a stage whose record exists is skipped, so
the same command resumes; every training run inside a stage resumes from its own
checkpoint too (``OUT/runs/<stage>/...``).

Two scales (``--scale``): ``full``, the paper's model and data for a GPU, and ``cpu``,
``table1``, ``multimnist`` and ``multimnist_controls`` narrowed to fit the 2-core CPU that
builds the book (the reasons are in :data:`SCALES`). ``--smoke`` runs the chosen scale's
stages on tiny subsets with tiny models, in a minute or two on any machine (the tests run
it).

The campaign orders runs and writes records; every run is trained by
:func:`capsnotes.training.train.train`, which computes as :func:`capsnotes.training.train.plan_for`
decides for the device (each run's history, and each record, say how).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from capsbook.analysis import routing_statistics
from capsnotes.data import data_root, load_dataset
from capsnotes.data.files import write_json
from capsnotes.experiments.affine import (
    AffineParameters,
    AffineRanges,
    accuracy,
    random_affine_parameters,
)
from capsnotes.experiments.multimnist import CANVAS, MAX_SHIFT, both_right
from capsnotes.fast.precision import device_name, resolve_device
from capsnotes.training.checkpoint import load_checkpoint, load_model_state
from capsnotes.training.config import (
    TEST_PAIRS_SEED,
    TrainConfig,
    build_model,
    load_run_data,
    profile,
)
from capsnotes.training.evaluation import evaluate
from capsnotes.training.pretrained import load_pretrained
from capsnotes.training.train import plan_for, train
from tools.ship_pretrained import save_pretrained

#: The paper's Table 1 (test error in %, mean ± standard deviation over three trials
#: where it gives one) and its MultiMNIST errors.
PAPER_TABLE1 = {
    "baseline": {"mnist": 0.39, "multimnist": 8.1},
    "r=1, no reconstruction": {"mnist": 0.34, "mnist_std": 0.032},
    "r=1, reconstruction": {"mnist": 0.29, "mnist_std": 0.011, "multimnist": 7.5},
    "r=3, no reconstruction": {"mnist": 0.35, "mnist_std": 0.036},
    "r=3, reconstruction": {"mnist": 0.25, "mnist_std": 0.005, "multimnist": 5.2},
}


@dataclass(frozen=True)
class Budget:
    """How much of each experiment a scale runs, and why."""

    name: str
    stages: tuple[str, ...]
    reason: str
    seeds: tuple[int, ...] = (0, 1, 2)
    #: the sizes of every CapsNet and CNN trained on MNIST (CapsNetConfig and ConvNetConfig
    #: fields), Table 1's CNN profile, and what every Table 1 run trains on (TrainConfig
    #: fields)
    capsnet: dict[str, Any] = dataclasses.field(default_factory=dict)
    table1_cnn_profile: str = "paper-cnn"
    cnn: dict[str, Any] = dataclasses.field(default_factory=dict)
    table1_run: dict[str, Any] = dataclasses.field(default_factory=lambda: {"epochs": 15})
    #: MultiMNIST: the CapsNet's sizes, the run (TrainConfig fields; ``train_size`` is the
    #: number of fresh pairs per epoch), and the test pairs (None: one per test digit)
    multimnist_capsnet: dict[str, Any] = dataclasses.field(default_factory=dict)
    multimnist_run: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"epochs": 10, "train_size": 240_000}
    )
    multimnist_test: int | None = None
    #: MultiMNIST's controls: the CapsNets' sizes (both r), the CNN's (ConvNetConfig
    #: fields of the multimnist-cnn profile), and the run every row trains
    controls_capsnet: dict[str, Any] = dataclasses.field(default_factory=dict)
    controls_cnn: dict[str, Any] = dataclasses.field(default_factory=dict)
    controls_run: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"epochs": 10, "train_size": 240_000}
    )
    affine40_epochs: int = 30
    affine40_test: int | None = None  #: warped test digits (None: all 10,000)
    #: fields of every TrainConfig (--smoke)
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: save_pretrained's tolerance between the float16 weights and the run
    ship_tolerance: float = 0.001
    #: ship whatever the accuracy (--smoke: to exercise the step)
    always_ship: bool = False
    compare_steps: int | None = None


@dataclass
class Campaign:
    out: Path
    runs: Path
    budget: Budget
    device: torch.device
    data_root: str | Path | None
    command: str
    progress: bool = False

    def config(self, name: str, model: dict[str, Any] | None = None, **fields: Any) -> TrainConfig:
        """Profile ``name`` with the budget's overrides, then ``fields``, and ``model``
        (model fields) replaced."""
        return profile(name, **(self.budget.overrides | fields), model=model or {})

    def train(self, config: TrainConfig, folder: str, checkpoint_every: int = 25) -> dict[str, Any]:
        result = train(
            config,
            self.runs / folder,
            device=self.device,
            data_root=self.data_root,
            progress=False,
            on_epoch_end=self._report(folder) if self.progress else None,
            checkpoint_every=checkpoint_every,
            provenance={"command": self.command, "campaign_run": folder},
        )
        return result.history

    def _report(self, folder: str) -> Callable[[dict[str, Any]], None]:
        def report(record: dict[str, Any]) -> None:
            print(
                f"{folder} epoch {record['epoch']}: test accuracy "
                f"{record['test_accuracy']:.4f}, {record['images_per_second']:.0f} images/s",
                flush=True,
            )

        return report

    def load_model(self, folder: str, config: TrainConfig) -> torch.nn.Module:
        """The trained model of the run in ``folder``, with the reference implementations."""
        checkpoint = load_checkpoint(self.runs / folder / "checkpoint.safetensors")
        model = build_model(config)
        load_model_state(model, checkpoint.result_state, checkpoint.path)
        return model.to(self.device).eval()

    def record(self, stage: str, values: dict[str, Any]) -> dict[str, Any]:
        from benchmarks.compare import cpu_details

        values = {
            "stage": stage,
            "source_commit": source_commit(),
            "scale": self.budget.name,
            "scale_reason": self.budget.reason,
            "device": device_name(self.device),
            # how the paper's model trains on this device (each run records its own)
            "plan": plan_for(profile("paper"), self.device).to_dict(),
            "cpu": cpu_details(),
            "command": self.command,
            "torch": torch.__version__,
        } | values
        write_json(self.out / f"{stage}.json", values)
        return values


def source_commit() -> str | None:
    """The commit of the checkout the campaign runs from (None outside a git checkout)."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return result.stdout.strip()


@dataclass(frozen=True)
class Arm:
    """A row of a stage trained once per seed: profile ``profile`` with the model fields
    ``model`` and the training fields ``changes`` (on top of the stage's own), its runs in
    ``OUT/runs/<stage>/<folder>-seed<N>``, and the fields that describe it in the record."""

    key: str
    folder: str
    profile: str
    model: dict[str, Any]
    changes: dict[str, Any] = dataclasses.field(default_factory=dict)
    described: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Trained:
    """One finished run of an :class:`Arm`."""

    arm: Arm
    seed: int
    folder: str
    config: TrainConfig
    history: dict[str, Any]


def _runs(
    c: Campaign,
    stage: str,
    arms: Sequence[Arm],
    run: dict[str, Any],
    *,
    seed_major: bool = False,
    checkpoint_every: int = 25,
) -> Iterator[Trained]:
    """Train every arm once per seed of the budget, with the training fields ``run``: arm
    by arm, or with ``seed_major`` seed by seed (so that a partial campaign has whole
    seeds)."""
    seeds = c.budget.seeds
    if seed_major:
        order = [(arm, seed) for seed in seeds for arm in arms]
    else:
        order = [(arm, seed) for arm in arms for seed in seeds]
    for arm, seed in order:
        config = c.config(arm.profile, arm.model, seed=seed, **(run | arm.changes))
        folder = f"{stage}/{arm.folder}-seed{seed}"
        yield Trained(arm, seed, folder, config, c.train(config, folder, checkpoint_every))


def _seeded_rows(
    c: Campaign,
    stage: str,
    arms: Sequence[Arm],
    run: dict[str, Any],
    per_seed: tuple[str, ...],
    read: Callable[[Trained], dict[str, Any]],
    **order: Any,
) -> list[dict[str, Any]]:
    """A record row per arm, trained as :func:`_runs` trains them: its ``key`` and
    ``described`` fields, its ``seeds``, a list per name in ``per_seed`` of what ``read``
    says of each run, the rest of what ``read`` says of the arm's last run, and the
    spread of its ``test_errors``."""
    rows = {
        arm.key: {"key": arm.key} | arm.described | {name: [] for name in ("seeds", *per_seed)}
        for arm in arms
    }
    for trained in _runs(c, stage, arms, run, **order):
        row = rows[trained.arm.key]
        row["seeds"].append(trained.seed)
        for name, value in read(trained).items():
            if name in per_seed:
                row[name].append(value)
            else:
                row[name] = value
    for row in rows.values():
        row["test_error"] = _spread(row["test_errors"])
    return list(rows.values())


def _measured(history: dict[str, Any], rate: str = "images_per_second") -> dict[str, Any]:
    """What every run's history says of it: its test error, its wall time, its mean
    training rate (named ``rate``), and what the trainer chose for it (precision,
    convolution, ...) by timing."""
    return {
        "test_errors": 1 - history["test_accuracy"],
        "wall_seconds": history["wall_seconds"],
        rate: statistics.fmean(e["images_per_second"] for e in history["epochs"]),
        "implementations": history["session_details"][-1],
    }


def _train_config(config: TrainConfig) -> dict[str, Any]:
    """The run's training fields (its model's are recorded apart)."""
    return {k: v for k, v in config.to_dict().items() if k != "model"}


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def _routing(model: torch.nn.Module, test_set: Any) -> dict[str, Any]:
    """How the trained model routes the test digits (chapter 5's measurements)."""
    stats = routing_statistics(model, test_set, iterations=(1, 2, 3))
    return {
        "accuracy_by_iterations": {str(r): a for r, a in stats.accuracy.items()},
        "entropy": stats.entropy,
        "weighted_entropy": stats.weighted_entropy,
        "top_coupling": stats.top_coupling,
        "uniform_entropy": stats.uniform_entropy,
    }


def _table1_arms(b: Budget) -> list[Arm]:
    """Table 1's rows: CapsNet with r = 1 and r = 3, each without and with the
    reconstruction loss, and the baseline CNN."""

    def arm(
        key: str,
        kind: str,
        routing: int | None,
        reconstruction: bool | None,
        profile_name: str,
        changes: dict[str, Any],
        model: dict[str, Any],
    ) -> Arm:
        described = {
            "model": kind,
            "routing_iterations": routing,
            "reconstruction": reconstruction,
            "profile": profile_name,
            "changes": changes,
            "model_changes": model,
        }
        folder = key.replace(", ", "-").replace("=", "").replace(" ", "-")
        return Arm(key, folder, profile_name, model, changes, described)

    capsnets = [
        arm(
            f"r={routing}, {'reconstruction' if recon else 'no reconstruction'}",
            "capsnet",
            routing,
            recon,
            "paper",
            {"reconstruction_weight": 0.0005 if recon else 0.0},
            b.capsnet | {"routing_iterations": routing},
        )
        for routing in (1, 3)
        for recon in (False, True)
    ]
    return [*capsnets, arm("baseline", "cnn", None, None, b.table1_cnn_profile, {}, b.cnn)]


def _table1(c: Campaign) -> dict[str, Any]:
    test_set = load_dataset("mnist", False, c.data_root)

    def read(run: Trained) -> dict[str, Any]:
        tested = test_set.subset(run.config.test_size, seed=0)  # as the trainer tests
        model = c.load_model(run.folder, run.config)
        capsnet = run.arm.described["model"] == "capsnet"
        return _measured(run.history) | {
            **({"routing": _routing(model, tested)} if capsnet else {}),
            "model_config": dataclasses.asdict(run.config.model),
            "test_count": len(tested),
            "train_config": _train_config(run.config),
            "parameters": _parameters(model),
        }

    per_seed = ("test_errors", "wall_seconds", "images_per_second", "routing", "implementations")
    rows = _seeded_rows(c, "table1", _table1_arms(c.budget), c.budget.table1_run, per_seed, read)
    by_key = {row["key"]: row for row in rows}
    paired = {}
    for recon in ("no reconstruction", "reconstruction"):
        one, three = by_key[f"r=1, {recon}"], by_key[f"r=3, {recon}"]
        differences = [b - a for a, b in zip(one["test_errors"], three["test_errors"], strict=True)]
        paired[recon] = {
            "r3_minus_r1_per_seed": differences,
            **_spread(differences),
            "r3_better_in": sum(d < 0 for d in differences),
            "seeds": len(differences),
        }
    return {
        "rows": rows,
        "paired_r3_minus_r1": paired,
        "paper_test_errors_percent": PAPER_TABLE1,
    }


def _multimnist(c: Campaign) -> dict[str, Any]:
    config = c.config(
        "multimnist",
        c.budget.multimnist_capsnet | {"image_size": CANVAS},
        max_shift=MAX_SHIFT,
        **({"test_size": None} | c.budget.multimnist_run),
    )
    # the test pairs are the budget's, whatever the overrides say of test digits
    config = dataclasses.replace(config, test_size=c.budget.multimnist_test)
    history = c.train(config, "multimnist")
    ship = save_pretrained(
        c.runs / "multimnist",
        "multimnist",
        folder=c.out / "weights",
        data_root=c.data_root,
        tolerance=c.budget.ship_tolerance,
    )["shipped"]
    return {
        "test_error": 1 - history["epochs"][-1]["test_accuracy"],
        "test_count": history["epochs"][-1]["test_count"],
        "test_error_per_epoch": [1 - e["test_accuracy"] for e in history["epochs"]],
        "paper_test_error_percent": {
            "capsnet": PAPER_TABLE1["r=3, reconstruction"]["multimnist"],
            "baseline": PAPER_TABLE1["baseline"]["multimnist"],
        },
        "pairs": {
            "canvas": CANVAS,
            "max_shift": MAX_SHIFT,
            "train_pairs_per_epoch": config.train_size,
            "test_pairs": "one per test digit" if c.budget.multimnist_test is None else None,
            "test_seed": TEST_PAIRS_SEED,
        },
        "train_config": config.to_dict(),
        "parameters": sum(p.numel() for p in build_model(config).parameters()),
        "wall_seconds": history["wall_seconds"],
        "images_per_second": statistics.fmean(e["images_per_second"] for e in history["epochs"]),
        "implementation": history["session_details"][-1],
        "shipped": ship,
    }


def _controls_arms(b: Budget) -> list[Arm]:
    """MultiMNIST's rows: CapsNet with r = 3 and r = 1 (both with the reconstruction loss
    of the multimnist profile) and the baseline CNN for pairs, all on the pairs' canvas."""
    canvas = {"image_size": CANVAS}
    return [
        Arm("r=3", "r3", "multimnist", b.controls_capsnet | {"routing_iterations": 3} | canvas),
        Arm("r=1", "r1", "multimnist", b.controls_capsnet | {"routing_iterations": 1} | canvas),
        Arm("baseline", "cnn", "multimnist-cnn", b.controls_cnn | canvas),
    ]


#: The controls' paired comparisons (first, second), and each row's line in the paper
CONTROL_PAIRS = (("r=3", "r=1"), ("r=3", "baseline"), ("r=1", "baseline"))
CONTROL_PAPER_ROWS = {"r=3": "r=3, reconstruction", "r=1": "r=1, reconstruction"}


def _pairs_read(c: Campaign, folder: str, config: TrainConfig) -> torch.Tensor:
    """Which of the test pairs the trained run in ``folder`` reads right (both digits)."""
    _, test_pairs = load_run_data(config, c.device, c.data_root)
    model = c.load_model(folder, config)
    predictions = evaluate(model, test_pairs, return_outputs=True)["predictions"]
    return both_right(predictions, test_pairs.labels.cpu())


def _paired_counts(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """The pairs the first run reads and the second does not, and the other way."""
    only_first, only_second = int((a & ~b).sum()), int((b & ~a).sum())
    return {
        "only_first": only_first,
        "only_second": only_second,
        "first_minus_second_error": (only_second - only_first) / len(a),
    }


def _multimnist_controls(c: Campaign) -> dict[str, Any]:
    read_right: dict[str, list[torch.Tensor]] = {}

    def read(run: Trained) -> dict[str, Any]:
        right = _pairs_read(c, run.folder, run.config)
        read_right.setdefault(run.arm.key, []).append(right)
        measured = _measured(run.history, rate="pairs_per_second")
        # the errors and the paired counts come from one reading of the test pairs, by
        # the paper's code; the trainer tested with its fast code, whose rounding can
        # flip a pair or two: its count is kept beside
        trainer = measured.pop("test_errors")
        return measured | {
            "test_errors": 1 - right.float().mean().item(),
            "trainer_test_errors": trainer,
            "test_errors_per_epoch": [1 - e["test_accuracy"] for e in run.history["epochs"]],
            # the pairs read wrong, as a bit per pair (hex, pair 0 the lowest bit)
            "wrong_pairs_hex": hex(sum(1 << int(i) for i in (~right).nonzero())),
            "architecture": run.config.architecture,
            "model_config": dataclasses.asdict(run.config.model),
            "train_config": _train_config(run.config),
            "parameters": _parameters(build_model(run.config)),
            "test_count": len(right),
        }

    per_seed = (
        "test_errors",
        "trainer_test_errors",
        "test_errors_per_epoch",
        "wall_seconds",
        "pairs_per_second",
        "implementations",
        "wrong_pairs_hex",
    )
    run = {"max_shift": MAX_SHIFT, "test_size": None} | c.budget.controls_run
    arms = _controls_arms(c.budget)
    # seed by seed, so that a partial campaign has whole seeds; resumable epoch by epoch
    rows = _seeded_rows(
        c, "multimnist_controls", arms, run, per_seed, read, seed_major=True, checkpoint_every=1
    )
    paired = {}
    for first, second in CONTROL_PAIRS:
        per_seed_counts = [
            _paired_counts(a, b) for a, b in zip(read_right[first], read_right[second], strict=True)
        ]
        paired[f"{first} vs {second}"] = {
            "per_seed": per_seed_counts,
            "first_minus_second_error": _spread(
                [p["first_minus_second_error"] for p in per_seed_counts]
            ),
        }
    return {
        "rows": rows,
        "paired": paired,
        "pairs": {
            "canvas": CANVAS,
            "max_shift": MAX_SHIFT,
            "test_pairs": "one per test digit",
            "test_seed": TEST_PAIRS_SEED,
        },
        "paper_test_error_percent": {
            arm.key: PAPER_TABLE1[CONTROL_PAPER_ROWS.get(arm.key, arm.key)]["multimnist"]
            for arm in arms
        },
    }


def _ship(c: Campaign, name: str, folder: str, accuracy: float) -> dict[str, Any]:
    """Ship the run in ``folder`` as ``OUT/weights/<name>`` if its test ``accuracy`` beats
    the model ``name`` that ships with the package (in --smoke always, to exercise the
    step)."""
    _, shipped = load_pretrained(name)
    to_beat = shipped["shipped"]["test_accuracy"]
    if not (c.budget.always_ship or accuracy > to_beat):
        return {"shipped": False, "reason": f"{accuracy:.4f} does not beat {to_beat:.4f}"}
    record = save_pretrained(
        c.runs / folder,
        name,
        folder=c.out / "weights",
        data_root=c.data_root,
        tolerance=c.budget.ship_tolerance,
    )
    return {
        "shipped": True,
        "folder": str(c.out / "weights"),
        "run": folder,
        "float16_test_accuracy": record["shipped"]["test_accuracy"],
    }


def _paper(c: Campaign) -> dict[str, Any]:
    tested_on_all = {"test_size": None}
    arms = [
        Arm(key, folder, "paper", c.budget.capsnet, {"weight_averaging": decay})
        for key, folder, decay in (
            ("no averaging", "plain", 0.0),
            ("averaging 0.9995", "ema", 0.9995),
        )
    ]
    runs = list(_runs(c, "paper", arms, tested_on_all))
    results = {}
    for arm in arms:
        histories = [run.history for run in runs if run.arm is arm]
        accuracies = [h["test_accuracy"] for h in histories]
        results[arm.key] = {
            "test_accuracies": accuracies,
            **_spread(accuracies),
            "wall_seconds": [h["wall_seconds"] for h in histories],
        }
    better = max(results, key=lambda v: results[v]["mean"])
    best = max(
        (run for run in runs if run.arm.key == better), key=lambda r: r.history["test_accuracy"]
    )
    best_accuracy = best.history["test_accuracy"]
    return {
        "variants": results,
        "better_variant": better,
        "best_run": best.folder,
        "best_test_accuracy": best_accuracy,
        "ship": _ship(c, "mnist", best.folder, best_accuracy),
    }


def _fashion(c: Campaign) -> dict[str, Any]:
    config = c.config("paper", c.budget.capsnet, dataset="fashion-mnist", test_size=None)
    history = c.train(config, "fashion/seed0")
    return {
        "test_accuracy": history["test_accuracy"],
        "epochs": len(history["epochs"]),
        "wall_seconds": history["wall_seconds"],
        "ship": _ship(c, "fashion-mnist", "fashion/seed0", history["test_accuracy"]),
    }


#: affNIST's rotation, shear and scale (TFF's approximation, as capsnotes.experiments.affine), with
#: translations across the 40×40 canvas (up to the ±6 pixels of the training placement).
AFFINE_40 = AffineRanges(translation_pixels=6.0)


def _affine40(c: Campaign) -> dict[str, Any]:
    canvas = {"canvas": 40, "max_shift": 6, "epochs": c.budget.affine40_epochs}
    test_set = load_dataset("mnist", False, c.data_root).subset(c.budget.affine40_test).padded(40)
    parameters = random_affine_parameters(len(test_set), AFFINE_40, seed=0)
    results = {}
    for kind, profile_name, sizes in (
        ("capsnet", "paper", c.budget.capsnet),
        ("cnn", "paper-cnn", c.budget.cnn),
    ):
        config = c.config(profile_name, sizes | {"image_size": 40}, **canvas)
        history = c.train(config, f"affine40/{kind}")
        model = c.load_model(f"affine40/{kind}", config)
        results[kind] = {
            "plain_accuracy": accuracy(model, test_set, AffineParameters.identity(len(test_set))),
            "affine_accuracy": accuracy(model, test_set, parameters),
            "train_test_accuracy": history["test_accuracy"],
            "wall_seconds": history["wall_seconds"],
        }
    return {
        "ranges": dataclasses.asdict(AFFINE_40),
        "seed": 0,
        "canvas": 40,
        "count": len(test_set),
        "models": results,
        "capsnet_accuracy": results["capsnet"]["affine_accuracy"],
        "cnn_accuracy": results["cnn"]["affine_accuracy"],
        "paper": {"capsnet_accuracy": 0.79, "cnn_accuracy": 0.66},
    }


def _speed(c: Campaign) -> dict[str, Any]:
    from benchmarks.compare import compare, matmul_peak

    smoke_run = c.budget.compare_steps is not None
    on_gpu = c.device.type == "cuda"
    rows = compare(
        c.device,
        batch_size=4 if smoke_run else 128,
        steps=c.budget.compare_steps or 100,
        rounds=1 if smoke_run else 3,
        warmup=1 if smoke_run else 20,
        root=data_root(c.data_root),
        ablation=not smoke_run,
        larger_batches=() if smoke_run or not on_gpu else (256, 512),
    )
    return {
        "rows": rows,
        "speedup_vs_baseline": rows["capsnotes"]["images_per_second"]
        / rows["baseline"]["images_per_second"],
        "matmul_peak": matmul_peak(c.device),
    }


@dataclass(frozen=True)
class Stage:
    """A row of :data:`STAGE_TABLE`: what the stage runs (its record is what ``run``
    returns), the datasets it reads, and the model it ships into ``OUT/weights``: always,
    or with ``if_better`` only when it beats the one that ships with the package."""

    name: str
    run: Callable[[Campaign], dict[str, Any]]
    about: str
    needs: tuple[str, ...] = ("mnist",)
    ships: str | None = None
    if_better: bool = False

    def __post_init__(self) -> None:
        if self.if_better and not self.ships:
            raise ValueError(f"stage {self.name} ships if better, but names no model")


#: The campaign's stages, in the order they run.
STAGE_TABLE = (
    Stage(
        "table1",
        _table1,
        "the paper's Table 1: CapsNet with 1 and 3 routing iterations, each with and without "
        "the reconstruction loss, and a baseline CNN, the same data, shifts and epoch budget, "
        "several seeds each, tested on all 10,000 test digits; with the coupling statistics "
        "of every trained CapsNet and a paired comparison of r = 1 and r = 3",
    ),
    Stage(
        "paper",
        _paper,
        "the paper profile over several seeds, with and without a moving average of the "
        "weights; the better variant's best run is shipped",
        ships="mnist",
        if_better=True,
    ),
    Stage(
        "multimnist",
        _multimnist,
        "two overlapping digits (capsnotes.experiments.multimnist), trained by the same "
        "trainer with fresh pairs every epoch and tested on one pair per test digit",
        ships="multimnist",
    ),
    Stage(
        "multimnist_controls",
        _multimnist_controls,
        "MultiMNIST with its controls: CapsNet with r = 1 and r = 3 (both with the "
        "reconstruction loss, as the paper's rows) and a baseline CNN, the same pairs, epochs "
        "and schedule, several seeds each (trained seed by seed), tested on the same pairs, "
        "with paired counts of the pairs one row reads and the other does not",
    ),
    Stage(
        "affine40",
        _affine40,
        "trained on MNIST placed at random on a 40x40 canvas, tested on affine-warped digits "
        "on that canvas (capsnotes.experiments.affine), CapsNet against the paper's baseline CNN",
    ),
    Stage(
        "fashion",
        _fashion,
        "the paper profile on Fashion-MNIST",
        needs=("fashion-mnist",),
        ships="fashion-mnist",
        if_better=True,
    ),
    Stage(
        "speed",
        _speed,
        "capsnotes against the straightforward baseline, timed by benchmarks.compare",
    ),
)
STAGES = tuple(stage.name for stage in STAGE_TABLE)
STAGE_BY_NAME = {stage.name: stage for stage in STAGE_TABLE}


FULL = Budget(
    name="full",
    stages=STAGES,
    reason="the paper's model, all 60,000 training digits, for a GPU",
)

#: The CPU scale, chosen by measurement on the 2-core AMD EPYC (Zen 5) that builds the
#: book (benchmarks/results/cpu-amd-zen5-2core-widths.json): see ``reason``.
CPU = Budget(
    name="cpu",
    stages=("table1", "multimnist", "multimnist_controls"),
    reason=(
        "the paper's model trains at 394 images/s on this 2-core CPU, 2.5 minutes an "
        "epoch: Table 1's 15 runs at the paper's width would take 9 hours for 15 epochs. "
        "With 64 first-layer channels and 8 primary capsule types (0.092 GFLOP per "
        "training image against 1.20) it trains at 3,108 images/s with r = 3 and 3,443 "
        "with r = 1, the CPU baseline CNN at 2,968: 15 epochs over all 60,000 digits, "
        "about 70 minutes for all 15 runs. MultiMNIST's 36x36 pairs need the width: with "
        "128 channels and 16 types (0.86 GFLOP) they train at 454 pairs/s, so 25 epochs "
        "of 60,000 fresh pairs take about an hour. Everything else is the paper's "
        "protocol (benchmarks/results/cpu-amd-zen5-2core-widths.json). MultiMNIST's "
        "controls ran on a 2-core AMD EPYC Zen 3 (family 25, model 1: AVX2, no bf16 "
        "units, so float32), one thread per run, where the 64/8 CapsNet trains at 103 "
        "pairs/s with r = 3 and 128 with r = 1 (0.23 GFLOP per pair, torch's FLOP "
        "counter) and the CNN of the "
        "cnn profile on the 36x36 canvas at 310 (0.16 GFLOP, 1.9M parameters against the "
        "CapsNet's 3.3M): 8 epochs of 30,000 fresh pairs, three seeds of each row, take "
        "about 4.1 hours of one core, plus the tests"
    ),
    capsnet={"conv_channels": 64, "primary_channels": 8},
    table1_cnn_profile="cnn",
    table1_run={"epochs": 15, "lr_decay": 0.85},
    multimnist_capsnet={"conv_channels": 128, "primary_channels": 16},
    multimnist_run={"epochs": 25, "train_size": 60_000, "lr_decay": 0.95},
    controls_capsnet={"conv_channels": 64, "primary_channels": 8},
    controls_run={"epochs": 8, "train_size": 30_000, "lr_decay": 0.95},
)

SCALES = {"full": FULL, "cpu": CPU}


def smoke(budget: Budget) -> Budget:
    """The stages of ``budget`` on tiny subsets with tiny models: a check, not a result."""
    tiny_capsnet = {"conv_channels": 8, "primary_channels": 2, "decoder_hidden": (16, 32)}
    return dataclasses.replace(
        budget,
        name=f"{budget.name}, smoke",
        seeds=(0,),
        capsnet=tiny_capsnet,
        cnn={"channels": (8, 8, 4), "hidden": (16, 8)},
        table1_run={"epochs": 1, "batch_size": 32, "train_size": 96, "test_size": 200},
        multimnist_capsnet=tiny_capsnet,
        multimnist_run={"epochs": 1, "batch_size": 32, "train_size": 96},
        controls_capsnet=tiny_capsnet,
        controls_cnn={"channels": (8, 8, 4), "hidden": (16, 8)},
        controls_run={"epochs": 1, "batch_size": 32, "train_size": 96},
        affine40_epochs=1,
        affine40_test=500,
        overrides={"epochs": 1, "batch_size": 32, "train_size": 96, "test_size": 200},
        ship_tolerance=0.2,
        always_ship=True,
        compare_steps=1,
    )


def preflight(stages: list[str], data_root: str | Path | None, out: Path) -> None:
    """Fail now, before any training, on what would fail later: a missing dataset, an
    output folder that cannot be written, a shipped model to beat that cannot be read."""
    rows = [STAGE_BY_NAME[name] for name in stages]
    for name in dict.fromkeys(need for row in rows for need in row.needs):
        load_dataset(name, True, data_root, download=False)
        load_dataset(name, False, data_root, download=False)
    out.mkdir(parents=True, exist_ok=True)
    probe = out / ".writable"
    probe.write_text("")
    probe.unlink()
    for row in rows:
        if row.if_better and row.ships:
            load_pretrained(row.ships)


def stages_to_run(scale: str, stages: list[str] | None) -> list[str]:
    """``stages`` (default: all of the scale's) in the campaign's order; raises if the
    scale does not run one of them."""
    budget = SCALES[scale]
    wanted = stages or budget.stages
    unknown = [s for s in wanted if s not in budget.stages]
    if unknown:
        raise ValueError(f"the {scale} scale has no stage {unknown}; it runs {budget.stages}")
    return [s for s in STAGES if s in wanted]


def run_campaign(
    out: str | Path,
    stages: list[str] | None = None,
    *,
    scale: str = "full",
    smoke_run: bool = False,
    device: torch.device | str | None = None,
    data_root: str | Path | None = None,
    runs: str | Path | None = None,
    command: str = "",
    progress: bool = False,
    seeds: tuple[int, ...] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run ``stages`` (default: all of the scale's, in order); returns the records
    written by this call. ``seeds`` replaces the scale's seeds: a second process given
    other seeds and the same ``runs`` trains them beside the first, whose records then
    find those runs finished."""
    budget = SCALES[scale]
    if smoke_run:
        budget = smoke(budget)
    if seeds is not None:
        budget = dataclasses.replace(budget, seeds=tuple(seeds))
    stages = stages_to_run(scale, stages)
    out = Path(out)
    preflight(stages, data_root, out)
    campaign = Campaign(
        out,
        Path(runs) if runs else out / "runs",
        budget,
        resolve_device(device),
        data_root,
        command,
        progress,
    )
    records = {}
    for stage in stages:
        if (out / f"{stage}.json").exists():
            continue
        started = time.perf_counter()
        values = STAGE_BY_NAME[stage].run(campaign)
        values["stage_seconds"] = time.perf_counter() - started
        values["smoke"] = smoke_run
        records[stage] = campaign.record(stage, values)
    return records


def _epilog() -> str:
    """``--help``'s list of the stages, from the table, and of the scales."""

    def item(text: str) -> str:
        return textwrap.fill(text, 88, initial_indent="  ", subsequent_indent="      ")

    lines = ["stages, in order (each writes OUT/<stage>.json):"]
    for stage in STAGE_TABLE:
        facts = ["reads " + ", ".join(stage.needs)]
        if stage.ships:
            better = " if it beats the package's" if stage.if_better else ""
            facts.append(f"ships OUT/weights/{stage.ships}{better}")
        scales = [name for name, budget in SCALES.items() if stage.name in budget.stages]
        facts.append("scales: " + ", ".join(scales))
        lines.append(item(f"{stage.name}: {stage.about} ({'; '.join(facts)})"))
    lines += ["", "scales:", *(item(f"{name}: {b.reason}") for name, b in SCALES.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.campaign",
        description=__doc__.split("\n\n")[0],
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="records and weights")
    parser.add_argument("--runs", metavar="DIR", help="training runs (default: OUT/runs)")
    parser.add_argument("--scale", choices=SCALES, default="full")
    parser.add_argument("--stages", nargs="+", choices=STAGES, metavar="STAGE")
    parser.add_argument("--smoke", action="store_true", help="tiny subsets and models")
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda")
    parser.add_argument("--data-root", metavar="PATH", help="data folder")
    parser.add_argument("--progress", action="store_true", help="report each epoch")
    parser.add_argument(
        "--seeds", nargs="+", type=int, metavar="SEED", help="these seeds instead of the scale's"
    )
    args = parser.parse_args(argv)
    try:
        stages_to_run(args.scale, args.stages)
        records = run_campaign(
            args.out,
            args.stages,
            scale=args.scale,
            smoke_run=args.smoke,
            device=args.device,
            data_root=args.data_root,
            runs=args.runs,
            command="python -m benchmarks.campaign " + shlex.join(argv),
            progress=args.progress,
            seeds=args.seeds,
        )
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for stage, record in records.items():
        print(f"{stage}: {record['stage_seconds']:.0f} s, wrote {args.out}/{stage}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
