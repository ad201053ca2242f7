"""What the campaign (``benchmarks/campaign.py``) measures: of each finished training run
(:data:`MEASURES`, named by the stages' rows), of pairs of rows seed by seed, and of the
trainer's speed (:func:`speed`)."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from capsnotes.data import data_root, load_dataset
from capsnotes.experiments.affine import (
    AffineParameters,
    AffineRanges,
    accuracy,
    random_affine_parameters,
)
from capsnotes.experiments.multimnist import both_right
from capsnotes.training.checkpoint import load_checkpoint, load_model_state
from capsnotes.training.config import TrainConfig, build_model, load_run_data
from capsnotes.training.evaluation import evaluate, routing_statistics

#: affNIST's rotation, shear and scale (TFF's approximation, as capsnotes.experiments.affine),
#: with translations across the 40×40 canvas (up to the ±6 pixels of the training placement).
AFFINE_40 = AffineRanges(translation_pixels=6.0)


@dataclass(frozen=True)
class Run:
    """A finished run of a stage's arm ``arm`` (the scale's ``seed``, or None), trained
    in ``path`` as ``config``; ``rate`` names its mean training rate in the record,
    ``affine_test`` how many warped test digits it is tested on (None: all)."""

    arm: str
    seed: int | None
    folder: str
    path: Path
    config: TrainConfig
    history: dict[str, Any]
    device: torch.device
    data_root: str | Path | None
    rate: str = "images_per_second"
    affine_test: int | None = None

    def model(self) -> torch.nn.Module:
        """The trained model, with the reference implementations, on the run's device."""
        checkpoint = load_checkpoint(self.path / "checkpoint.safetensors")
        model = build_model(self.config)
        load_model_state(model, checkpoint.result_state, checkpoint.path)
        return model.to(self.device).eval()


def spread(values: list[float]) -> dict[str, float]:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std}


def _errors(run: Run, reading: dict[str, Any]) -> dict[str, Any]:
    """The test error, wall time and mean training rate, and what the trainer chose for
    the run (precision, convolution, ...) by timing."""
    h = run.history
    return {
        "test_error": 1 - h["test_accuracy"],
        "wall_seconds": h["wall_seconds"],
        run.rate: statistics.fmean(e["images_per_second"] for e in h["epochs"]),
        "implementation": h["session_details"][-1],
    }


def _routing(run: Run, reading: dict[str, Any]) -> dict[str, Any]:
    """How a trained CapsNet routes the digits it was tested on (chapter 5's measures)."""
    if run.config.architecture != "capsnet":
        return {}
    tested = load_dataset("mnist", False, run.data_root).subset(run.config.test_size, seed=0)
    stats = routing_statistics(run.model(), tested, iterations=(1, 2, 3))
    return {
        "routing": {
            "accuracy_by_iterations": {str(r): a for r, a in stats.accuracy.items()},
            "entropy": stats.entropy,
            "weighted_entropy": stats.weighted_entropy,
            "top_coupling": stats.top_coupling,
            "uniform_entropy": stats.uniform_entropy,
        }
    }


def _parameters(config: TrainConfig) -> int:
    return sum(p.numel() for p in build_model(config).parameters())


def _configs(run: Run, reading: dict[str, Any]) -> dict[str, Any]:
    """The model's fields and the training fields apart, and the parameter count."""
    train = {k: v for k, v in run.config.to_dict().items() if k != "model"}
    model = dataclasses.asdict(run.config.model)
    return {"model_config": model, "train_config": train, "parameters": _parameters(run.config)}


def _pairs(run: Run, reading: dict[str, Any]) -> dict[str, Any]:
    """Which test pairs the run reads right (both digits), by the paper's code: the
    error, and the pairs read wrong as a bit per pair (hex, pair 0 the lowest bit). The
    trainer tested with its fast code, whose rounding can flip a pair or two: its error
    is kept beside. ``_right`` (the pairs read right) is for the paired counts."""
    _, test_pairs = load_run_data(run.config, run.device, run.data_root)
    predictions = evaluate(run.model(), test_pairs, return_outputs=True)["predictions"]
    right = both_right(predictions, test_pairs.labels.cpu())
    return {
        "test_error": 1 - right.float().mean().item(),
        "trainer_test_error": reading["test_error"],
        "wrong_pairs_hex": hex(sum(1 << int(i) for i in (~right).nonzero())),
        "_right": right,
    }


def _affine(run: Run, reading: dict[str, Any]) -> dict[str, Any]:
    """Accuracy on the test digits on the 40×40 canvas, unwarped and warped (seed 0)."""
    test_set = load_dataset("mnist", False, run.data_root).subset(run.affine_test).padded(40)
    warps = random_affine_parameters(len(test_set), AFFINE_40, seed=0)
    model = run.model()
    return {
        "plain_accuracy": accuracy(model, test_set, AffineParameters.identity(len(test_set))),
        "affine_accuracy": accuracy(model, test_set, warps),
        "train_test_accuracy": run.history["test_accuracy"],
        "wall_seconds": run.history["wall_seconds"],
    }


#: What is measured of a finished run, by name: each adds keys to its reading.
MEASURES: dict[str, Callable[[Run, dict[str, Any]], dict[str, Any]]] = {
    "errors": _errors,
    "per_epoch": lambda run, _: {
        "test_error_per_epoch": [1 - e["test_accuracy"] for e in run.history["epochs"]]
    },
    "count": lambda run, _: {"test_count": run.history["epochs"][-1]["test_count"]},
    "architecture": lambda run, _: {"architecture": run.config.architecture},
    "configs": _configs,
    "config": lambda run, _: {
        "train_config": run.config.to_dict(),
        "parameters": _parameters(run.config),
    },
    "routing": _routing,
    "pairs": _pairs,
    "affine": _affine,
    "accuracy": lambda run, _: {
        "test_accuracy": run.history["test_accuracy"],
        "epochs": len(run.history["epochs"]),
        "wall_seconds": run.history["wall_seconds"],
    },
}


def paired_differences(first: list[float], second: list[float]) -> dict[str, Any]:
    """Seed by seed, the first row's test error minus the second's (r = 3 minus r = 1)."""
    differences = [a - b for a, b in zip(first, second, strict=True)]
    return {
        "r3_minus_r1_per_seed": differences,
        **spread(differences),
        "r3_better_in": sum(d < 0 for d in differences),
        "seeds": len(differences),
    }


def _counts(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    only_first, only_second = int((a & ~b).sum()), int((b & ~a).sum())
    return {
        "only_first": only_first,
        "only_second": only_second,
        "first_minus_second_error": (only_second - only_first) / len(a),
    }


def paired_counts(first: list[torch.Tensor], second: list[torch.Tensor]) -> dict[str, Any]:
    """Seed by seed, the test pairs the first row reads and the second does not, and the
    other way; and the spread of the difference in error they make."""
    per_seed = [_counts(a, b) for a, b in zip(first, second, strict=True)]
    errors = [p["first_minus_second_error"] for p in per_seed]
    return {"per_seed": per_seed, "first_minus_second_error": spread(errors)}


#: How rows are compared seed by seed: by their test errors, or by the pairs they read.
PAIRED = {"errors": paired_differences, "pairs": paired_counts}


def speed(device: torch.device, steps: int | None, root: str | Path | None) -> dict[str, Any]:
    """capsnotes against the straightforward baseline, timed by benchmarks.compare
    (``steps``: a smoke run's few steps; None: the full comparison)."""
    from benchmarks.compare import compare, matmul_peak

    smoke_run = steps is not None
    rows = compare(
        device,
        batch_size=4 if smoke_run else 128,
        steps=steps or 100,
        rounds=1 if smoke_run else 3,
        warmup=1 if smoke_run else 20,
        root=data_root(root),
        ablation=not smoke_run,
        larger_batches=() if smoke_run or device.type != "cuda" else (256, 512),
    )
    ours, baseline = rows["capsnotes"], rows["baseline"]
    return {
        "rows": rows,
        "speedup_vs_baseline": ours["images_per_second"] / baseline["images_per_second"],
        "matmul_peak": matmul_peak(device),
    }
