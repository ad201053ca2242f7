"""The campaign's scales (``python -m benchmarks.campaign --scale``): how much of each
experiment a scale runs, and why; and the paper's numbers the records quote."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

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
    stages=("table1", "paper", "multimnist", "multimnist_controls", "affine40", "fashion", "speed"),
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
