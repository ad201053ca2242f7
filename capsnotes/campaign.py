"""The paper's central experiments, run stage by stage: ``python -m capsnotes campaign``.

Stages, in order (each writes ``OUT/<stage>.json`` as soon as it finishes; a stage whose
record exists is skipped, so the same command resumes; every training run inside a stage
resumes from its own checkpoint too):

* ``table1`` — the paper's Table 1: CapsNet with 1 and 3 routing iterations, each with
  and without the reconstruction loss, and the paper's baseline CNN (three 5×5
  convolutions of 256, 256, 128 channels, fully connected 328 and 192, dropout; 35.4M
  parameters), the same data, shifts and epoch budget, several seeds each.
* ``paper`` — the ``paper`` profile over several seeds, with and without a moving
  average of the weights; the better variant's best run is shipped into ``OUT/weights``
  when it beats the model that ships with the package.
* ``multimnist`` — two overlapping digits (:mod:`capsnotes.multimnist`).
* ``affine40`` — trained on MNIST placed at random on a 40×40 canvas, tested on
  affine-warped digits on that canvas (:mod:`capsnotes.affine`), CapsNet against the
  paper's baseline CNN.
* ``fashion`` — the ``paper`` profile on Fashion-MNIST, shipped into ``OUT/weights``
  when it beats the CPU-trained model of the package.
* ``speed`` — capsnotes against the straightforward baseline, in one process
  (``benchmarks.compare``; needs the repository, as the baseline is not installed).

``--smoke`` runs every stage on tiny subsets, with small models and one short epoch, the
weight shipping included: on a CPU in minutes (the test suite runs it).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .affine import AffineParameters, AffineRanges, accuracy, random_affine_parameters
from .checkpoint import load_checkpoint, load_model_state
from .config import TrainConfig, profile
from .data import data_root, load_dataset
from .devices import autocast_dtype, device_name, resolve_device
from .files import write_json
from .multimnist import PairedCapsNet, both_right, make_pairs, pair_loss
from .pretrained import load_pretrained, save_pretrained
from .run import build_model, make_optimizer
from .step import training_step
from .train import train

__all__ = ["STAGES", "Budget", "GPU_PLAN", "run_campaign"]

STAGES = ("table1", "paper", "multimnist", "affine40", "fashion", "speed")

#: Seconds each stage is expected to take on one H100, from benchmarks/results/h100-paper.json
#: (the `paper` profile: 1.37 s of training and 0.09 s of testing per epoch, 160 s for a
#: whole 100-epoch run, about 10 s of it starting up). Marked "est." where nothing of the
#: kind has run on a GPU yet; those are estimates from the FLOP counts.
GPU_PLAN = """\
GPU plan (one H100; at most 25 minutes in 3 runs of under 10 minutes each):
  run 1  --stages table1      4 CapsNet variants x 3 seeds x 15 epochs: 12 x (15 x 1.46 s
                              + 10 s) = 380 s; the 35.4M-parameter CNN, 3 seeds x 15 epochs:
                              est. 150 s (11.8 GFLOP per image, 10x CapsNet's)      ~9 min
  run 2  --stages paper       the paper profile, seeds 0-2, no averaging: 3 x 160 s = 480 s;
                              the averaged variant resumes in run 3                  ~8 min
  run 3  --stages paper       seeds 0-2 with averaging (0.9995): 3 x 165 s = 495 s   ~8 min
  later  multimnist (est. 9 min: 36x36 inputs, 2.8x the primary capsules), affine40 (est.
         8 min), fashion (160 s), speed (about 4 min, from the last comparison)
Each stage's record is written when it finishes; a run cut off resumes where it stopped.
"""


@dataclass(frozen=True)
class Budget:
    """How much of each experiment to run."""

    seeds: tuple[int, ...] = (0, 1, 2)
    table1_epochs: int = 15
    multimnist_train: int = 240_000  #: generated training pairs
    multimnist_test: int = 10_000
    multimnist_epochs: int = 10
    affine40_epochs: int = 30
    affine40_test: int | None = None  #: warped test digits (None: all 10,000)
    #: the rest, for --smoke: fields of every TrainConfig, and the models' sizes
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    capsnet: dict[str, Any] = dataclasses.field(default_factory=dict)
    cnn: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: save_pretrained's tolerance between the float16 weights and the run
    ship_tolerance: float = 0.001
    #: ship whatever the accuracy (--smoke: to exercise the step)
    always_ship: bool = False
    compare_steps: int | None = None


SMOKE = Budget(
    seeds=(0,),
    table1_epochs=1,
    multimnist_train=96,
    multimnist_test=64,
    multimnist_epochs=1,
    affine40_epochs=1,
    affine40_test=500,
    overrides={"epochs": 1, "batch_size": 32, "train_size": 96, "test_size": 200},
    capsnet={"conv_channels": 8, "primary_channels": 2, "decoder_hidden": (16, 32)},
    cnn={"channels": (8, 8, 4), "hidden": (16, 8)},
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

    def config(self, name: str, **overrides: Any) -> TrainConfig:
        """Profile ``name`` with the budget's overrides and model sizes applied."""
        model = dict(overrides.pop("model", {}))
        model |= self.budget.cnn if "cnn" in name else self.budget.capsnet
        return profile(name, **(self.budget.overrides | overrides), model=model)

    def train(self, config: TrainConfig, folder: str) -> dict[str, Any]:
        result = train(
            config,
            self.runs / folder,
            device=self.device,
            data_root=self.data_root,
            progress=self.progress,
            checkpoint_every=25,
            provenance={"command": self.command, "campaign_run": folder},
        )
        return result.history

    def record(self, stage: str, values: dict[str, Any]) -> dict[str, Any]:
        values = {
            "stage": stage,
            "device": device_name(self.device),
            "command": self.command,
            "torch": torch.__version__,
        } | values
        write_json(self.out / f"{stage}.json", values)
        return values


def _table1(c: Campaign) -> dict[str, Any]:
    rows = []
    variants = [(r, recon) for r in (1, 3) for recon in (False, True)]
    for routing, reconstruction in variants:
        name = f"CapsNet, r={routing}, {'with' if reconstruction else 'no'} reconstruction"
        rows.append(
            (
                "capsnet",
                name,
                {
                    "model": {"routing_iterations": routing},
                    "reconstruction_weight": 0.0005 if reconstruction else 0.0,
                },
                routing,
                reconstruction,
            )
        )
    rows.append(("cnn", "baseline CNN (35.4M parameters)", {}, None, None))
    table = []
    for kind, name, changes, routing, reconstruction in rows:
        started = time.perf_counter()
        errors = []
        for seed in c.budget.seeds:
            profile_name = "paper-cnn" if kind == "cnn" else "paper"
            config = c.config(profile_name, epochs=c.budget.table1_epochs, seed=seed, **changes)
            slug = f"table1/{kind}-r{routing}-{'rec' if reconstruction else 'norec'}-seed{seed}"
            history = c.train(config, slug)
            errors.append(1 - history["test_accuracy"])
        table.append(
            {
                "name": name,
                "model": kind,
                "routing_iterations": routing,
                "reconstruction": reconstruction,
                "epochs": c.budget.table1_epochs,
                "test_errors": errors,
                "device": device_name(c.device),
                "wall_seconds": time.perf_counter() - started,
            }
        )
    return {
        "rows": table,
        "paper_test_errors_percent": {
            "baseline": 0.39,
            "r=1 no reconstruction": 0.34,
            "r=1 reconstruction": 0.29,
            "r=3 no reconstruction": 0.35,
            "r=3 reconstruction": 0.25,
        },
    }


def _summary(histories: list[dict[str, Any]]) -> dict[str, Any]:
    accuracies = [h["test_accuracy"] for h in histories]
    return {
        "test_accuracies": accuracies,
        "mean": statistics.fmean(accuracies),
        "std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
        "wall_seconds": [h["wall_seconds"] for h in histories],
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
            config = c.config("paper", seed=seed, weight_averaging=decay, test_size=None)
            histories.append(c.train(config, folder))
            runs[folder] = histories[-1]["test_accuracy"]
        results[variant] = _summary(histories)
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
        "goal": "mean >= 0.9965 (aim 0.9970), each run <= 180 s",
    }


def _multimnist(c: Campaign) -> dict[str, Any]:
    started = time.perf_counter()
    base = c.config("paper", model={"image_size": 36})
    train_pairs = make_pairs(
        load_dataset("mnist", True, c.data_root), c.budget.multimnist_train, seed=0
    )
    test_pairs = make_pairs(
        load_dataset("mnist", False, c.data_root), c.budget.multimnist_test, seed=1
    )
    train_pairs, test_pairs = train_pairs.to(c.device), test_pairs.to(c.device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(base.seed)
        model = PairedCapsNet(base.model, routing="fused").to(c.device)
    optimizer = make_optimizer(model, base.learning_rate)
    schedule = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=base.lr_decay)
    precision = autocast_dtype(c.device, base.mixed_precision)
    losses = []
    for epoch in range(c.budget.multimnist_epochs):
        generator = torch.Generator(device=c.device).manual_seed(epoch)
        for images, parts, labels in train_pairs.batches(base.batch_size, generator):

            def objective(output, _images, labels, parts=parts):
                return pair_loss(output, parts, labels, base.reconstruction_weight)

            stats = training_step(model, optimizer, objective, images, labels, precision=precision)
        losses.append(float(stats["margin_loss"]))
        schedule.step()
    model.eval()
    right, examples = 0, {}
    with torch.no_grad():
        for images, _parts, labels in test_pairs.batches(500):
            output = model(images)
            right += int(both_right(output.predictions, labels).sum())
            if not examples:  # the paper's Figure 5: each digit drawn from its own capsule
                examples = {
                    "images": images[:8, 0].cpu().mul(255).round().byte().tolist(),
                    "labels": labels[:8].cpu().tolist(),
                    "predictions": output.predictions[:8].cpu().tolist(),
                    "reconstructions": output.reconstructions[:8, :, 0]
                    .float()
                    .cpu()
                    .mul(255)
                    .round()
                    .byte()
                    .tolist(),
                }
    return {
        "test_error": 1 - right / len(test_pairs),
        "paper_test_error": 0.052,
        "budget": {
            "train_pairs": len(train_pairs),
            "test_pairs": len(test_pairs),
            "epochs": c.budget.multimnist_epochs,
            "batch_size": base.batch_size,
        },
        "last_margin_loss": losses,
        "wall_seconds": time.perf_counter() - started,
        "examples": examples,
    }


#: affNIST's rotation, shear and scale (TFF's approximation, as capsnotes.affine), with
#: translations across the 40×40 canvas (up to the ±6 pixels of the training placement).
AFFINE_40 = AffineRanges(translation_pixels=6.0)


def _affine40(c: Campaign) -> dict[str, Any]:
    canvas = {"canvas": 40, "max_shift": 6, "epochs": c.budget.affine40_epochs}
    test_set = load_dataset("mnist", False, c.data_root).subset(c.budget.affine40_test).padded(40)
    parameters = random_affine_parameters(len(test_set), AFFINE_40, seed=0)
    results = {}
    for kind, profile_name in (("capsnet", "paper"), ("cnn", "paper-cnn")):
        config = c.config(profile_name, **canvas, model={"image_size": 40})
        history = c.train(config, f"affine40/{kind}")
        model, _ = _load_run_model(c, f"affine40/{kind}", config)
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


def _load_run_model(c: Campaign, folder: str, config: TrainConfig) -> tuple[Any, Any]:
    checkpoint = load_checkpoint(c.runs / folder / "checkpoint.safetensors")
    model = build_model(config)
    load_model_state(model, checkpoint.result_state, checkpoint.path)
    return model.to(c.device).eval(), checkpoint


def _fashion(c: Campaign) -> dict[str, Any]:
    config = c.config("paper", dataset="fashion-mnist", test_size=None)
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
    try:
        from benchmarks.compare import compare, matmul_peak
    except ImportError:
        return {
            "skipped": "benchmarks/ is part of the repository, not the package: run "
            "the campaign from a checkout"
        }
    smoke = c.budget.compare_steps is not None
    on_gpu = c.device.type == "cuda"
    rows = compare(
        c.device,
        batch_size=4 if smoke else 128,
        steps=c.budget.compare_steps or 100,
        rounds=1 if smoke else 3,
        warmup=1 if smoke else 20,
        root=data_root(c.data_root),
        ablation=not smoke,
        larger_batches=() if smoke or not on_gpu else (256, 512),
    )
    return {
        "rows": rows,
        "speedup_vs_baseline": rows["capsnotes"]["images_per_second"]
        / rows["baseline"]["images_per_second"],
        "matmul_peak": matmul_peak(c.device),
        "goals": "speed-up >= 10x at batch 128; >= 15% of the bf16 matmul rate",
    }


STAGE_FUNCTIONS: dict[str, Callable[[Campaign], dict[str, Any]]] = {
    "table1": _table1,
    "paper": _paper,
    "multimnist": _multimnist,
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
    load_pretrained("mnist")
    if "fashion" in stages:
        load_pretrained("fashion-mnist")


def run_campaign(
    out: str | Path,
    stages: list[str] | None = None,
    *,
    smoke: bool = False,
    device: torch.device | str | None = None,
    data_root: str | Path | None = None,
    runs: str | Path | None = None,
    command: str = "",
    progress: bool = False,
) -> dict[str, dict[str, Any]]:
    """Run ``stages`` (default all, in order); returns every stage's record."""
    stages = list(STAGES) if not stages else [s for s in STAGES if s in stages]
    out = Path(out)
    preflight(stages, data_root, out)
    campaign = Campaign(
        out,
        Path(runs) if runs else out / "runs",
        SMOKE if smoke else Budget(),
        resolve_device(device),
        data_root,
        command,
        progress,
    )
    records = {}
    for stage in stages:
        path = out / f"{stage}.json"
        if path.exists():
            continue
        started = time.perf_counter()
        values = STAGE_FUNCTIONS[stage](campaign)
        values["stage_seconds"] = time.perf_counter() - started
        values["smoke"] = smoke
        records[stage] = campaign.record(stage, values)
    return records
