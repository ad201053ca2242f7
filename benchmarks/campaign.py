"""The paper's experiments, stage by stage: ``python -m benchmarks.campaign``.

Stages, in order (each writes ``OUT/<stage>.json`` as soon as it finishes; a stage whose
record exists is skipped, so the same command resumes; every training run inside a stage
resumes from its own checkpoint too):

* ``table1`` — the paper's Table 1: CapsNet with 1 and 3 routing iterations, each with
  and without the reconstruction loss, and a baseline CNN, the same data, shifts and
  epoch budget, several seeds each, tested on all 10,000 test digits; with the coupling
  statistics of every trained CapsNet and a paired comparison of r = 1 and r = 3.
* ``paper`` — the ``paper`` profile over several seeds, with and without a moving
  average of the weights; the better variant's best run is shipped into ``OUT/weights``
  when it beats the model that ships with the package.
* ``multimnist`` — two overlapping digits (:mod:`capsnotes.experiments.multimnist`), trained by the
  same trainer with fresh pairs every epoch and tested on one pair per test digit; the
  model is shipped into ``OUT/weights``.
* ``multimnist_controls`` — MultiMNIST with its controls: CapsNet with r = 1 and r = 3
  (both with the reconstruction loss, as the paper's rows) and a baseline CNN, the same
  pairs, epochs and schedule, several seeds each, tested on the same pairs, with paired
  counts of the pairs one row reads and the other does not.
* ``affine40`` — trained on MNIST placed at random on a 40×40 canvas, tested on
  affine-warped digits on that canvas (:mod:`capsnotes.experiments.affine`), CapsNet against the
  paper's baseline CNN.
* ``fashion`` — the ``paper`` profile on Fashion-MNIST, shipped into ``OUT/weights``
  when it beats the CPU-trained model of the package.
* ``speed`` — capsnotes against the straightforward baseline (:mod:`benchmarks.compare`).

Two scales (``--scale``): ``full``, the paper's model and data for a GPU, and ``cpu``,
``table1`` and ``multimnist`` narrowed to fit the 2-core CPU that builds the book (the
reasons are in :data:`SCALES`). ``--smoke`` runs the chosen scale's stages on tiny
subsets with tiny models, in a minute or two on any machine (the tests run it).

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
import time
from collections.abc import Callable
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

STAGES = (
    "table1",
    "paper",
    "multimnist",
    "multimnist_controls",
    "affine40",
    "fashion",
    "speed",
)

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
        "pairs/s with r = 3 and 128 with r = 1 (0.25 GFLOP per pair) and the CNN of the "
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


def _table1(c: Campaign) -> dict[str, Any]:
    test_set = load_dataset("mnist", False, c.data_root)
    variants = [(r, recon) for r in (1, 3) for recon in (False, True)]
    rows: list[dict[str, Any]] = []
    for routing, reconstruction in variants:
        key = f"r={routing}, {'reconstruction' if reconstruction else 'no reconstruction'}"
        rows.append(
            {
                "key": key,
                "model": "capsnet",
                "routing_iterations": routing,
                "reconstruction": reconstruction,
                "profile": "paper",
                "changes": {"reconstruction_weight": 0.0005 if reconstruction else 0.0},
                "model_changes": c.budget.capsnet | {"routing_iterations": routing},
            }
        )
    rows.append(
        {
            "key": "baseline",
            "model": "cnn",
            "routing_iterations": None,
            "reconstruction": None,
            "profile": c.budget.table1_cnn_profile,
            "changes": {},
            "model_changes": c.budget.cnn,
        }
    )
    for row in rows:
        row["seeds"], row["test_errors"], row["wall_seconds"] = [], [], []
        row["images_per_second"], row["routing"], row["implementations"] = [], [], []
        for seed in c.budget.seeds:
            config = c.config(
                row["profile"],
                row["model_changes"],
                seed=seed,
                **(c.budget.table1_run | row["changes"]),
            )
            tested = test_set.subset(config.test_size, seed=0)  # as the trainer tests
            row["model_config"] = dataclasses.asdict(config.model)
            slug = row["key"].replace(", ", "-").replace("=", "").replace(" ", "-")
            folder = f"table1/{slug}-seed{seed}"
            history = c.train(config, folder)
            row["seeds"].append(seed)
            row["test_errors"].append(1 - history["test_accuracy"])
            row["wall_seconds"].append(history["wall_seconds"])
            row["images_per_second"].append(
                statistics.fmean(e["images_per_second"] for e in history["epochs"])
            )
            # what the trainer chose for this run (precision, convolution, ...), by timing
            row["implementations"].append(history["session_details"][-1])
            row["test_count"] = len(tested)
            row["train_config"] = {k: v for k, v in config.to_dict().items() if k != "model"}
            model = c.load_model(folder, config)
            row["parameters"] = sum(p.numel() for p in model.parameters())
            if row["model"] == "capsnet":
                row["routing"].append(_routing(model, tested))
        row |= {"test_error": _spread(row["test_errors"])}
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


#: MultiMNIST's rows: the profile, the model's changes and the folder name of each
CONTROL_ROWS = {
    "r=3": ("multimnist", {"routing_iterations": 3}, "r3"),
    "r=1": ("multimnist", {"routing_iterations": 1}, "r1"),
    "baseline": ("multimnist-cnn", {}, "cnn"),
}


def _pairs_read(c: Campaign, folder: str, config: TrainConfig) -> torch.Tensor:
    """Which of the test pairs the trained run in ``folder`` reads right (both digits)."""
    _, test_pairs = load_run_data(config, c.device, c.data_root)
    model = c.load_model(folder, config)
    predictions = evaluate(model, test_pairs, return_outputs=True)["predictions"]
    return both_right(predictions, test_pairs.labels.cpu())


def _multimnist_controls(c: Campaign) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {key: {"key": key, "seeds": []} for key in CONTROL_ROWS}
    read: dict[str, list[torch.Tensor]] = {key: [] for key in CONTROL_ROWS}
    for seed in c.budget.seeds:  # seed by seed, so that a partial campaign has whole seeds
        for key, (name, changes, slug) in CONTROL_ROWS.items():
            sizes = c.budget.controls_cnn if name == "multimnist-cnn" else c.budget.controls_capsnet
            config = c.config(
                name,
                sizes | changes | {"image_size": CANVAS},
                max_shift=MAX_SHIFT,
                test_size=None,
                seed=seed,
                **c.budget.controls_run,
            )
            folder = f"multimnist_controls/{slug}-seed{seed}"
            history = c.train(config, folder, checkpoint_every=1)  # resumable epoch by epoch
            right = _pairs_read(c, folder, config)
            read[key].append(right)
            row = rows[key]
            row["seeds"].append(seed)
            for field_name, value in (
                ("test_errors", 1 - history["test_accuracy"]),
                ("test_errors_per_epoch", [1 - e["test_accuracy"] for e in history["epochs"]]),
                ("wall_seconds", history["wall_seconds"]),
                (
                    "pairs_per_second",
                    statistics.fmean(e["images_per_second"] for e in history["epochs"]),
                ),
                ("implementations", history["session_details"][-1]),
                # the pairs read wrong, as a bit per pair (hex, pair 0 the lowest bit)
                ("wrong_pairs_hex", hex(sum(1 << int(i) for i in (~right).nonzero()))),
            ):
                row.setdefault(field_name, []).append(value)
            row["architecture"] = config.architecture
            row["model_config"] = dataclasses.asdict(config.model)
            row["train_config"] = {k: v for k, v in config.to_dict().items() if k != "model"}
            row["parameters"] = sum(p.numel() for p in build_model(config).parameters())
            row["test_count"] = len(right)
            # the trainer's count and this one's agree (both digits right)
            assert abs((1 - right.float().mean().item()) - row["test_errors"][-1]) < 1e-9
    for row in rows.values():
        row["test_error"] = _spread(row["test_errors"])
    paired = {}
    for first, second in (("r=3", "r=1"), ("r=3", "baseline"), ("r=1", "baseline")):
        per_seed = [
            {
                # pairs the first row reads and the second does not, and the other way
                "only_first": int((a & ~b).sum()),
                "only_second": int((b & ~a).sum()),
                "first_minus_second_error": int((b & ~a).sum() - (a & ~b).sum()) / len(a),
            }
            for a, b in zip(read[first], read[second], strict=True)
        ]
        paired[f"{first} vs {second}"] = {
            "per_seed": per_seed,
            "first_minus_second_error": _spread([p["first_minus_second_error"] for p in per_seed]),
        }
    return {
        "rows": list(rows.values()),
        "paired": paired,
        "pairs": {
            "canvas": CANVAS,
            "max_shift": MAX_SHIFT,
            "test_pairs": "one per test digit",
            "test_seed": TEST_PAIRS_SEED,
        },
        "paper_test_error_percent": {
            key: PAPER_TABLE1[paper_key]["multimnist"]
            for key, paper_key in (
                ("r=3", "r=3, reconstruction"),
                ("r=1", "r=1, reconstruction"),
                ("baseline", "baseline"),
            )
        },
    }


def _ship(c: Campaign, name: str, folder: str, accuracy_to_beat: float, best: float) -> dict:
    """Ship the run in ``folder`` as ``OUT/weights/<name>`` if it beats the shipped one
    (in --smoke always, to exercise the step)."""
    if not (c.budget.always_ship or best > accuracy_to_beat):
        return {"shipped": False, "reason": f"{best:.4f} does not beat {accuracy_to_beat:.4f}"}
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
    variants = {"no averaging": 0.0, "averaging 0.9995": 0.9995}
    results, runs = {}, {}
    for variant, decay in variants.items():
        histories = []
        for seed in c.budget.seeds:
            folder = f"paper/{'ema' if decay else 'plain'}-seed{seed}"
            config = c.config(
                "paper", c.budget.capsnet, seed=seed, weight_averaging=decay, test_size=None
            )
            histories.append(c.train(config, folder))
            runs[folder] = histories[-1]["test_accuracy"]
        accuracies = [h["test_accuracy"] for h in histories]
        results[variant] = {
            "test_accuracies": accuracies,
            **_spread(accuracies),
            "wall_seconds": [h["wall_seconds"] for h in histories],
        }
    better = max(results, key=lambda v: results[v]["mean"])
    prefix = f"paper/{'ema' if variants[better] else 'plain'}-"
    best_run = max((f for f in runs if f.startswith(prefix)), key=runs.get)
    _, shipped = load_pretrained("mnist")
    ship = _ship(c, "mnist", best_run, shipped["shipped"]["test_accuracy"], runs[best_run])
    return {
        "variants": results,
        "better_variant": better,
        "best_run": best_run,
        "best_test_accuracy": runs[best_run],
        "ship": ship,
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


def _fashion(c: Campaign) -> dict[str, Any]:
    config = c.config("paper", c.budget.capsnet, dataset="fashion-mnist", test_size=None)
    history = c.train(config, "fashion/seed0")
    _, shipped = load_pretrained("fashion-mnist")
    ship = _ship(
        c,
        "fashion-mnist",
        "fashion/seed0",
        shipped["shipped"]["test_accuracy"],
        history["test_accuracy"],
    )
    return {
        "test_accuracy": history["test_accuracy"],
        "epochs": len(history["epochs"]),
        "wall_seconds": history["wall_seconds"],
        "ship": ship,
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


STAGE_FUNCTIONS: dict[str, Callable[[Campaign], dict[str, Any]]] = {
    "table1": _table1,
    "paper": _paper,
    "multimnist": _multimnist,
    "multimnist_controls": _multimnist_controls,
    "affine40": _affine40,
    "fashion": _fashion,
    "speed": _speed,
}
#: the datasets each stage reads
NEEDS = {"fashion": ("fashion-mnist",)}


def preflight(stages: list[str], data_root: str | Path | None, out: Path) -> None:
    """Fail now, before any training, on what would fail later: a missing dataset, an
    output folder that cannot be written, a shipped model that cannot be read."""
    for stage in stages:
        for name in ("mnist", *NEEDS.get(stage, ())):
            load_dataset(name, True, data_root, download=False)
            load_dataset(name, False, data_root, download=False)
    out.mkdir(parents=True, exist_ok=True)
    probe = out / ".writable"
    probe.write_text("")
    probe.unlink()
    if "paper" in stages:
        load_pretrained("mnist")
    if "fashion" in stages:
        load_pretrained("fashion-mnist")


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
        values = STAGE_FUNCTIONS[stage](campaign)
        values["stage_seconds"] = time.perf_counter() - started
        values["smoke"] = smoke_run
        records[stage] = campaign.record(stage, values)
    return records


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.campaign",
        description=__doc__.split("\n\n")[0],
        epilog="scales:\n" + "\n".join(f"  {name}: {b.reason}" for name, b in SCALES.items()),
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
