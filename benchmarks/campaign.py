"""The paper's experiments, stage by stage: ``python -m benchmarks.campaign``.

A stage is a row of :data:`STAGE_TABLE`, in the order they run: its configurations (the
arms it trains), whether each trains once per seed of the scale, what is measured of
each run, the datasets it reads and the model it ships. One runner, :func:`run_stage`,
runs any row: it trains every arm (each run resumes from its own checkpoint in
``OUT/runs/<stage>/...``), measures the runs, and writes ``OUT/<stage>.json``, which
starts with :func:`benchmarks.record.header`. A stage whose record exists is skipped, so
the same command resumes.

Two scales (``--scale``): ``full``, the paper's model and data for a GPU, and ``cpu``,
``table1``, ``multimnist`` and ``multimnist_controls`` narrowed to fit the 2-core CPU that
builds the book (the reasons are in :data:`SCALES`). ``--smoke`` runs the chosen scale's
stages on tiny subsets with tiny models, in a minute or two on any machine (the tests run
it). Every run is trained by :func:`capsnotes.training.train.train`, which computes as
:func:`capsnotes.fast.plan.plan_for` decides for the device.
"""

from __future__ import annotations

import dataclasses
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

import torch
import tyro

from benchmarks.measures import MEASURES, PAIRED, Run, speed, spread
from benchmarks.record import command_line, header
from benchmarks.scales import CPU, FULL, SCALES, Budget, smoke
from benchmarks.stages import STAGE_BY_NAME, STAGE_TABLE, STAGES, Arm, Stage
from capsnotes.data import load_dataset
from capsnotes.data.files import write_json
from capsnotes.fast.plan import plan_for
from capsnotes.fast.precision import resolve_device
from capsnotes.training.config import profile
from capsnotes.training.options import DataRoot, Device, Out
from capsnotes.training.pretrained import load_pretrained, save_pretrained
from capsnotes.training.train import train

__all__ = ["CPU", "FULL", "SCALES", "STAGES", "STAGE_TABLE", "main", "run_campaign"]


@dataclass
class Campaign:
    out: Path
    runs: Path
    budget: Budget
    device: torch.device
    data_root: str | Path | None
    command: str
    progress: bool = False


def _train(c: Campaign, stage: Stage, arm: Arm, seed: int | None) -> Run:
    """Train (or resume) one run of ``arm``: with the scale's seed ``seed``, or the
    profile's (None)."""
    name = arm.folder + (f"-seed{seed}" if stage.seeded else "")
    folder = "/".join(filter(None, (stage.name, name)))
    seeded = {} if seed is None else {"seed": seed}
    fields = c.budget.overrides | stage.run(c.budget) | arm.changes | seeded
    config = profile(arm.profile, **fields, model=arm.model)

    def report(record: dict[str, Any]) -> None:
        accuracy, rate = record["test_accuracy"], record["images_per_second"]
        print(f"{folder} epoch {record['epoch']}: test accuracy {accuracy:.4f}, "
              f"{rate:.0f} images/s", flush=True)  # fmt: skip

    history = train(
        config,
        c.runs / folder,
        device=c.device,
        data_root=c.data_root,
        progress=False,
        on_epoch_end=report if c.progress else None,
        checkpoint_every=stage.checkpoint_every,
        provenance={"command": c.command, "campaign_run": folder},
    ).history
    place = dict(device=c.device, data_root=c.data_root, affine_test=c.budget.affine40_test)
    return Run(arm.key, seed, folder, c.runs / folder, config, history, rate=stage.rate, **place)


#: The record's name of a reading kept once per seed.
PLURAL = {
    "test_error": "test_errors",
    "trainer_test_error": "trainer_test_errors",
    "test_error_per_epoch": "test_errors_per_epoch",
    "test_accuracy": "test_accuracies",
    "implementation": "implementations",
}


def run_stage(c: Campaign, stage: Stage) -> dict[str, Any]:
    """Train and measure ``stage``'s arms (arm by arm, or seed by seed); what its record
    says after the header: its rows (the reading itself, for a single run), their
    paired comparisons, what shipped, and the row's notes."""
    if stage.times_speed:
        return speed(c.device, c.budget.compare_steps, c.data_root) | stage.notes(c.budget)
    arms, seeds = stage.arms(c.budget), c.budget.seeds if stage.seeded else (None,)
    order = [(a, s) for a in arms for s in seeds]
    if stage.seed_major:
        order = [(a, s) for s in seeds for a in arms]
    lists = {"seeds": []} | {PLURAL.get(n, n): [] for n in stage.per_seed}
    rows = {a.key: {"key": a.key} | a.described | (lists if stage.seeded else {}) for a in arms}
    rows = {key: {k: (list(v) if isinstance(v, list) else v) for k, v in row.items()}
            for key, row in rows.items()}  # fmt: skip
    runs, right = [], {}
    for arm, seed in order:
        run = _train(c, stage, arm, seed)
        runs.append(run)
        reading: dict[str, Any] = {}
        for name in stage.reads:
            reading |= MEASURES[name](run, reading)
        right.setdefault(arm.key, []).append(reading.pop("_right", None))
        row = rows[arm.key]
        if stage.seeded:
            row["seeds"].append(seed)
        for name, value in reading.items():
            if name in stage.per_seed:
                row[PLURAL.get(name, name)].append(value)
            else:
                row[name] = value
    for row in rows.values():
        for name in ("test_error", "test_accuracy"):
            if stage.seeded and PLURAL[name] in row:
                spreads = spread(row[PLURAL[name]])
                row |= spreads if stage.keyed else {name: spreads}
    if len(rows) == 1 and not stage.seeded:
        values = {k: v for k, v in next(iter(rows.values())).items() if k != "key"}
    elif stage.keyed:  # {key: row}
        values = {
            stage.keyed: {k: {n: v for n, v in r.items() if n != "key"} for k, r in rows.items()}
        }
    else:
        values = {"rows": list(rows.values())}
    by = {"errors": {k: row.get("test_errors") for k, row in rows.items()}, "pairs": right}
    if stage.paired:
        compare, series = PAIRED[stage.paired_by], by[stage.paired_by]
        values[stage.paired_key] = {n: compare(series[a], series[b]) for n, a, b in stage.paired}
    if stage.headline:
        values |= {f"{key}_accuracy": row[stage.headline] for key, row in rows.items()}
    if stage.ships:
        values |= _ship(c, stage, runs)
    return values | stage.notes(c.budget)


def _ship(c: Campaign, stage: Stage, runs: list[Run]) -> dict[str, Any]:
    """Ship the best run of the arm with the best mean test accuracy as
    ``OUT/weights/<ships>``. A stage that always ships records what shipped (``shipped``);
    one that ships ``if_better`` only if it beats the model the package ships (in --smoke
    always, to exercise the step) records the decision (``ship``), and with several arms
    which won (``better_variant``, ``best_run``, ``best_test_accuracy``)."""
    by_arm: dict[str, list[Run]] = {}
    for run in runs:
        by_arm.setdefault(run.arm, []).append(run)

    def mean(arm: str) -> float:
        return statistics.fmean(r.history["test_accuracy"] for r in by_arm[arm])

    better = max(by_arm, key=mean)
    best = max(by_arm[better], key=lambda r: r.history["test_accuracy"])
    accuracy = best.history["test_accuracy"]
    chosen = {}
    if len(by_arm) > 1:
        chosen = {"better_variant": better, "best_run": best.folder, "best_test_accuracy": accuracy}
    if stage.if_better and not c.budget.always_ship:
        to_beat = load_pretrained(stage.ships)[1]["shipped"]["test_accuracy"]
        if accuracy <= to_beat:
            reason = f"{accuracy:.4f} does not beat {to_beat:.4f}"
            return chosen | {"ship": {"shipped": False, "reason": reason}}
    weights = c.out / "weights"
    shipped = save_pretrained(
        best.path,
        stage.ships,
        folder=weights,
        data_root=c.data_root,
        tolerance=c.budget.ship_tolerance,
    )["shipped"]
    if not stage.if_better:
        return {"shipped": shipped}
    facts = {"folder": str(weights), "run": best.folder}
    return chosen | {
        "ship": {"shipped": True, **facts, "float16_test_accuracy": shipped["test_accuracy"]}
    }


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
    budget = smoke(SCALES[scale]) if smoke_run else SCALES[scale]
    if seeds is not None:
        budget = dataclasses.replace(budget, seeds=tuple(seeds))
    stages = stages_to_run(scale, stages)
    out = Path(out)
    preflight(stages, data_root, out)
    device = resolve_device(device)
    runs = Path(runs) if runs else out / "runs"
    campaign = Campaign(out, runs, budget, device, data_root, command, progress)
    records = {}
    for name in stages:
        if (out / f"{name}.json").exists():
            continue
        started = time.perf_counter()
        values = run_stage(campaign, STAGE_BY_NAME[name])
        record = header(command, device) | {
            "stage": name,
            "source_commit": source_commit(),
            "scale": budget.name,
            "scale_reason": budget.reason,
            # how the paper's model trains on this device (each run records its own)
            "plan": plan_for(profile("paper"), device).to_dict(),
        }
        record |= values | {"stage_seconds": time.perf_counter() - started, "smoke": smoke_run}
        write_json(out / f"{name}.json", record)
        records[name] = record
    return records


def _stage_list() -> str:
    """``--help``'s list of the stages, from the table, and of the scales."""
    lines = ["Stages, in order (each writes OUT/<stage>.json):"]
    for stage in STAGE_TABLE:
        facts = ["reads " + ", ".join(stage.needs)]
        if stage.ships:
            better = " if it beats the package's" if stage.if_better else ""
            facts.append(f"ships OUT/weights/{stage.ships}{better}")
        scales = [name for name, budget in SCALES.items() if stage.name in budget.stages]
        facts.append("scales: " + ", ".join(scales))
        lines.append(f"  {stage.name}: {stage.about} ({'; '.join(facts)})")
    lines += ["", "Scales:", *(f"  {name}: {b.reason}" for name, b in SCALES.items())]
    return "\n".join(lines)


StageName = Literal[STAGES]  # type: ignore[valid-type]


@dataclass
class Options:
    out: Out
    """records and weights"""
    runs: Optional[Path] = None  # noqa: UP045 (tyro reads it on Python 3.10)
    """training runs (default: OUT/runs)"""
    scale: Literal["full", "cpu"] = "full"
    stages: Optional[tuple[StageName, ...]] = None  # noqa: UP045
    """these stages of the scale (default: all of them)"""
    smoke: bool = False
    """tiny subsets and models"""
    device: Device = "auto"
    data_root: DataRoot = None
    progress: bool = False
    """report each epoch"""
    seeds: Optional[tuple[int, ...]] = None  # noqa: UP045
    """these seeds instead of the scale's"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    description = __doc__.split("\n\n")[0] + "\n\n" + _stage_list()
    options = tyro.cli(
        Options, args=argv, prog="python -m benchmarks.campaign", description=description
    )
    stages = list(options.stages) if options.stages else None
    try:
        stages_to_run(options.scale, stages)
        records = run_campaign(
            options.out,
            stages,
            scale=options.scale,
            smoke_run=options.smoke,
            device=options.device,
            data_root=options.data_root,
            runs=options.runs,
            command=command_line("benchmarks.campaign", argv),
            progress=options.progress,
            seeds=options.seeds,
        )
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for stage, record in records.items():
        print(f"{stage}: {record['stage_seconds']:.0f} s, wrote {options.out}/{stage}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
