"""The campaign's stages as data (``python -m benchmarks.campaign --help`` lists them): one
row each, in the order they run, for :func:`benchmarks.campaign.run_stage` to run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.measures import AFFINE_40
from benchmarks.scales import PAPER_TABLE1, Budget
from capsnotes.experiments.multimnist import CANVAS, MAX_SHIFT
from capsnotes.training.config import TEST_PAIRS_SEED


@dataclass(frozen=True)
class Arm:
    """A configuration a stage trains: profile ``profile`` with the model fields ``model``
    and the training fields ``changes`` (on top of the stage's ``run``), its runs in
    ``OUT/runs/<stage>/<folder>[-seed<N>]``, and the fields that describe it in the record."""

    key: str
    folder: str
    profile: str
    model: dict[str, Any]
    changes: dict[str, Any] = dataclasses.field(default_factory=dict)
    described: dict[str, Any] = dataclasses.field(default_factory=dict)


def _table1_arm(routing: int, reconstruction: bool, b: Budget) -> Arm:
    key = f"r={routing}, {'reconstruction' if reconstruction else 'no reconstruction'}"
    changes = {"reconstruction_weight": 0.0005 if reconstruction else 0.0}
    model = b.capsnet | {"routing_iterations": routing}
    folder = key.replace(", ", "-").replace("=", "").replace(" ", "-")
    described = dict(model="capsnet", routing_iterations=routing, reconstruction=reconstruction)
    described |= dict(profile="paper", changes=changes, model_changes=model)
    return Arm(key, folder, "paper", model, changes, described)


def _cnn_arm(b: Budget) -> Arm:
    described = dict(model="cnn", routing_iterations=None, reconstruction=None)
    described |= dict(profile=b.table1_cnn_profile, changes={}, model_changes=b.cnn)
    return Arm("baseline", "baseline", b.table1_cnn_profile, b.cnn, {}, described)


@dataclass(frozen=True)
class Stage:
    """A row of :data:`STAGE_TABLE`. ``arms`` and ``run`` (training fields every arm
    shares) come from the scale; with ``seeded`` each arm trains once per seed of the
    scale (``seed_major``: seed by seed) and its record row keeps a list per name in
    ``per_seed``, otherwise once with its profile's seed. ``reads`` names what
    :data:`benchmarks.measures.MEASURES` measures of each run; ``paired`` names the
    pairs of rows compared seed by seed (:data:`benchmarks.measures.PAIRED`'s
    ``paired_by``), into ``paired_key``; ``headline`` lifts a reading of every row to
    ``<row>_accuracy``; ``keyed`` names a mapping of the rows by key (with their
    spread beside their lists) to write instead of a list; ``times_speed`` times the
    trainer (:func:`speed`) instead of training; ``notes`` adds fixed keys to the record. The
    model trained is shipped into ``OUT/weights/<ships>``: always, or with ``if_better``
    only when it beats the one that ships with the package."""

    name: str
    about: str
    arms: Callable[[Budget], list[Arm]] = lambda b: []
    run: Callable[[Budget], dict[str, Any]] = lambda b: {}
    reads: tuple[str, ...] = ("errors",)
    seeded: bool = True
    seed_major: bool = False
    checkpoint_every: int = 25
    per_seed: tuple[str, ...] = ()
    rate: str = "images_per_second"
    paired: tuple[tuple[str, str, str], ...] = ()
    paired_by: str = "errors"
    paired_key: str = "paired"
    headline: str | None = None
    keyed: str | None = None
    times_speed: bool = False
    notes: Callable[[Budget], dict[str, Any]] = lambda b: {}
    needs: tuple[str, ...] = ("mnist",)
    ships: str | None = None
    if_better: bool = False


def _pairs(**facts: Any) -> dict[str, Any]:
    """What a MultiMNIST record says of its pairs."""
    return {"canvas": CANVAS, "max_shift": MAX_SHIFT, **facts, "test_seed": TEST_PAIRS_SEED}


#: The campaign's stages, in the order they run.
STAGE_TABLE = (
    Stage(
        "table1",
        "the paper's Table 1: CapsNet with 1 and 3 routing iterations, each with and without "
        "the reconstruction loss, and a baseline CNN, the same data, shifts and epoch budget, "
        "several seeds each, tested on all 10,000 test digits; with the coupling statistics "
        "of every trained CapsNet and a paired comparison of r = 1 and r = 3",
        arms=lambda b: (
            [_table1_arm(r, x, b) for r in (1, 3) for x in (False, True)] + [_cnn_arm(b)]
        ),
        run=lambda b: b.table1_run,
        reads=("errors", "routing", "configs", "count"),
        per_seed=("test_error", "wall_seconds", "images_per_second", "routing", "implementation"),
        paired=tuple(
            (x, f"r=3, {x}", f"r=1, {x}") for x in ("no reconstruction", "reconstruction")
        ),
        paired_key="paired_r3_minus_r1",
        notes=lambda b: {"paper_test_errors_percent": PAPER_TABLE1},
    ),
    Stage(
        "paper",
        "the paper profile over several seeds, with and without a moving average of the "
        "weights; the better variant's best run is shipped",
        arms=lambda b: [
            Arm(key, folder, "paper", b.capsnet, {"weight_averaging": decay})
            for key, folder, decay in (
                ("no averaging", "plain", 0.0),
                ("averaging 0.9995", "ema", 0.9995),
            )
        ],
        run=lambda b: {"test_size": None},
        reads=("accuracy",),
        per_seed=("test_accuracy", "wall_seconds"),
        keyed="variants",
        ships="mnist",
        if_better=True,
    ),
    Stage(
        "multimnist",
        "two overlapping digits (capsnotes.experiments.multimnist), trained by the same "
        "trainer with fresh pairs every epoch and tested on one pair per test digit",
        arms=lambda b: [Arm("", "", "multimnist", b.multimnist_capsnet | {"image_size": CANVAS})],
        run=lambda b: (
            {"max_shift": MAX_SHIFT} | b.multimnist_run | {"test_size": b.multimnist_test}
        ),
        reads=("errors", "count", "per_epoch", "config"),
        seeded=False,
        notes=lambda b: {
            "paper_test_error_percent": {
                "capsnet": PAPER_TABLE1["r=3, reconstruction"]["multimnist"],
                "baseline": PAPER_TABLE1["baseline"]["multimnist"],
            },
            "pairs": _pairs(
                train_pairs_per_epoch=b.multimnist_run["train_size"],
                test_pairs="one per test digit" if b.multimnist_test is None else None,
            ),
        },
        ships="multimnist",
    ),
    Stage(
        "multimnist_controls",
        "MultiMNIST with its controls: CapsNet with r = 1 and r = 3 (both with the "
        "reconstruction loss, as the paper's rows) and a baseline CNN, the same pairs, epochs "
        "and schedule, several seeds each (trained seed by seed), tested on the same pairs, "
        "with paired counts of the pairs one row reads and the other does not",
        arms=lambda b: (
            [
                Arm(
                    f"r={r}",
                    f"r{r}",
                    "multimnist",
                    b.controls_capsnet | {"routing_iterations": r, "image_size": CANVAS},
                )
                for r in (3, 1)
            ]
            + [Arm("baseline", "cnn", "multimnist-cnn", b.controls_cnn | {"image_size": CANVAS})]
        ),
        run=lambda b: {"max_shift": MAX_SHIFT, "test_size": None} | b.controls_run,
        reads=("errors", "per_epoch", "pairs", "architecture", "configs", "count"),
        # seed by seed, so that a partial campaign has whole seeds; resumable epoch by epoch
        seed_major=True,
        checkpoint_every=1,
        per_seed=(
            "test_error",
            "trainer_test_error",
            "test_error_per_epoch",
            "wall_seconds",
            "pairs_per_second",
            "implementation",
            "wrong_pairs_hex",
        ),
        rate="pairs_per_second",
        paired_by="pairs",
        paired=(
            ("r=3 vs r=1", "r=3", "r=1"),
            ("r=3 vs baseline", "r=3", "baseline"),
            ("r=1 vs baseline", "r=1", "baseline"),
        ),
        notes=lambda b: {
            "pairs": _pairs(test_pairs="one per test digit"),
            "paper_test_error_percent": {"r=3": 5.2, "r=1": 7.5, "baseline": 8.1},
        },
    ),
    Stage(
        "affine40",
        "trained on MNIST placed at random on a 40x40 canvas, tested on affine-warped digits "
        "on that canvas (capsnotes.experiments.affine), CapsNet against the paper's baseline CNN",
        arms=lambda b: [
            Arm("capsnet", "capsnet", "paper", b.capsnet | {"image_size": 40}),
            Arm("cnn", "cnn", "paper-cnn", b.cnn | {"image_size": 40}),
        ],
        run=lambda b: {"canvas": 40, "max_shift": 6, "epochs": b.affine40_epochs},
        reads=("affine",),
        seeded=False,
        headline="affine_accuracy",
        keyed="models",
        notes=lambda b: {
            "ranges": dataclasses.asdict(AFFINE_40),
            "seed": 0,
            "canvas": 40,
            "count": b.affine40_test or 10_000,
            "paper": {"capsnet_accuracy": 0.79, "cnn_accuracy": 0.66},
        },
    ),
    Stage(
        "fashion",
        "the paper profile on Fashion-MNIST",
        arms=lambda b: [Arm("", "seed0", "paper", b.capsnet)],
        run=lambda b: {"dataset": "fashion-mnist", "test_size": None},
        reads=("accuracy",),
        seeded=False,
        needs=("fashion-mnist",),
        ships="fashion-mnist",
        if_better=True,
    ),
    Stage(
        "speed",
        "capsnotes against the straightforward baseline, timed by benchmarks.compare",
        reads=(),
        times_speed=True,
    ),
)
STAGES = tuple(stage.name for stage in STAGE_TABLE)
STAGE_BY_NAME = {stage.name: stage for stage in STAGE_TABLE}
