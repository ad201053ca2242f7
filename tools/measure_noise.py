"""How far the chapters' outputs move under the noise any machine can make: the record
behind the tolerances of ``pytest --nbval``.

Every CPU rounds float arithmetic its own way (AVX2, AVX-512 and AMX kernels, the
generic ones, one thread or two), and a reader's machine is not the one that made the
outputs. This tool runs each chapter through the test command's own comparison (nbval's
for text, ``book/nbval_figures.py``'s for figures) under each of :data:`SETTINGS`:

* ``own-1``, ``own-2``: this CPU's own kernels, one thread (as the test command runs a
  chapter) and two;
* ``avx2-1``: AVX2's kernels (``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``), what
  a CPU without AVX-512 uses;
* ``default-1``, ``default-2``: ATen's generic kernels, with which the outputs were made;
* ``ulp-1``: this CPU's kernels, and every model's parameters moved by one unit in the
  last place before they first compute (``tools/ulp/sitecustomize.py``): a training run
  that starts one rounding away, as another CPU's first step would leave it.

For each it keeps what failed and, for every figure, its distance from the committed one
(PNG: RMS over the figure and over its worst tile; SVG: the largest difference of a
number), and writes ``book/results/noise.json``: per chapter and setting, with the
machine it ran on, and per chapter the largest distances and the margin each tolerance
keeps over them (tolerance / largest distance). Results of other machines already in the
record are kept beside this one's, so that the record grows with each CPU a session
gets. Run from the repository root in the pinned test environment::

    python tools/measure_noise.py                  # every chapter, every setting
    python tools/measure_noise.py 08 09 --settings ulp-1 avx2-1
    python tools/measure_noise.py --summary        # print the record's table only

Two runs go at a time, one per core. Each chapter-and-setting is written to the record
as it finishes, so an interrupted run resumes with ``--missing``.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"
RECORD = BOOK / "results" / "noise.json"
ULP = Path(__file__).resolve().parent / "ulp"

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
DEFAULT = {"ATEN_CPU_CAPABILITY": "default"}
#: setting -> (environment, threads, nudge the parameters by one ulp)
SETTINGS: dict[str, tuple[dict[str, str], int, bool]] = {
    "own-1": ({}, 1, False),
    "own-2": ({}, 2, False),
    "avx2-1": (AVX2, 1, False),
    "default-1": (DEFAULT, 1, False),
    "default-2": (DEFAULT, 2, False),
    "ulp-1": ({}, 1, True),
}


def machine() -> dict[str, Any]:
    """This CPU as /proc/cpuinfo names it (model, family, model number, the vector units
    that choose kernels), and the kernels ATen picks on it."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    units = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")
    import torch

    return {
        "cpu": info.get("model name", platform.processor() or platform.machine()),
        "family": info.get("cpu family"),
        "model": info.get("model"),
        "flags": [unit for unit in units if unit in flags],
        "cores": os.cpu_count(),
        "aten_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
    }


def machine_name(described: dict[str, Any]) -> str:
    """A short name for a machine: ``AMD EPYC family 26 model 2 (avx512f, ...)``."""
    return (
        f"{described['cpu']} family {described['family']} model {described['model']} "
        f"({', '.join(described['flags']) or 'no AVX2'})"
    )


def environment(setting: str) -> dict[str, str]:
    """The environment a chapter runs in under ``setting``."""
    extra, threads, nudge = SETTINGS[setting]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
    }
    env |= extra | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    # the repository (for -p book.nbval_figures), after the nudge where there is one
    paths = [str(ULP)] if nudge else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def failures(junit: Path) -> tuple[int, list[dict[str, Any]]]:
    """How many cells ran, and those that failed (cell number, the report's first line),
    from pytest's JUnit XML."""
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    ran, failed = 0, []
    for case in cases:
        ran += 1
        for problem in (*case.iter("failure"), *case.iter("error")):
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            failed.append({"cell": case.get("name"), "message": (message or [""])[0][:300]})
    return ran, failed


def measure(notebook: Path, setting: str, cwd: Path = REPO) -> dict[str, Any]:
    """Run ``notebook`` through ``pytest --nbval`` (text and figures compared with the
    committed outputs) under ``setting``: the cells that ran and failed, and the distance
    of every figure from the committed one."""
    with tempfile.TemporaryDirectory() as scratch:
        log, junit = Path(scratch) / "figures.jsonl", Path(scratch) / "cells.xml"
        started = time.perf_counter()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--nbval",
                "-o",
                "addopts=",
                "-p",
                "no:cacheprovider",
                "-p",
                "book.nbval_figures",
                "-q",
                f"--figure-log={log}",
                f"--junitxml={junit}",
                str(notebook),
            ],
            cwd=cwd,
            env=environment(setting),
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
        if not junit.exists():
            raise RuntimeError(
                f"{notebook.name} under {setting}: pytest ran nothing\n"
                f"{run.stdout[-3000:]}{run.stderr[-3000:]}"
            )
        ran, failed = failures(junit)
        figures = (
            [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        )
    for figure in figures:
        figure.pop("notebook", None)
    return {"cells": ran, "failed": failed, "figures": figures, "seconds": round(seconds, 1)}


#: Which distances each kind of figure has, and the tolerance each is held to.
def tolerances() -> dict[str, float]:
    sys.path.insert(0, str(REPO))
    from book import figure_compare

    return {
        "png_rms": figure_compare.PNG_RMS,
        "png_tile": figure_compare.TILE_RMS,
        "svg_number": figure_compare.SVG_ATOL,
    }


def summarise(chapter: dict[str, Any]) -> dict[str, Any]:
    """The largest distances of a chapter's figures under every setting and machine, the
    margin each tolerance keeps over them, and the cells that failed anywhere."""
    largest = {"png_rms": 0.0, "png_tile": 0.0, "svg_number": 0.0}
    failed = []
    for key, run in chapter["runs"].items():
        failed += [f"{key}: cell {f['cell']}: {f['message']}" for f in run["failed"]]
        for figure in run["figures"]:
            if figure["mime"] == "image/png":
                largest["png_rms"] = max(largest["png_rms"], figure.get("rms", float("inf")))
                largest["png_tile"] = max(largest["png_tile"], figure.get("tile", float("inf")))
            else:
                largest["svg_number"] = max(largest["svg_number"], figure["number"])
                largest["png_rms"] = max(largest["png_rms"], figure["rms"])
                largest["png_tile"] = max(largest["png_tile"], figure["tile"])
    limits = tolerances()
    margins = {
        key: (round(limits[key] / value, 1) if value else None) for key, value in largest.items()
    }
    return {"largest": largest, "margin": margins, "failed": failed}


def load(path: Path = RECORD) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"tolerances": tolerances(), "settings": {}, "chapters": {}}


def save(record: dict[str, Any], path: Path = RECORD) -> None:
    """Write the record whole (a temporary file renamed over it)."""
    for chapter in record["chapters"].values():
        chapter["summary"] = summarise(chapter)
    record["tolerances"] = tolerances()
    record["settings"] = {
        name: {"environment": env, "threads": threads, "one_ulp": nudge}
        for name, (env, threads, nudge) in SETTINGS.items()
    }
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    temporary.replace(path)


def table(record: dict[str, Any]) -> str:
    rows = [
        f"{'chapter':32s} {'runs':>4s} {'failed':>6s} {'PNG rms':>8s} {'tile':>6s} "
        f"{'SVG':>8s}   margins (rms, tile, svg)"
    ]
    for name, chapter in sorted(record["chapters"].items()):
        s = chapter["summary"]
        big, margin = s["largest"], s["margin"]
        rows.append(
            f"{name:32s} {len(chapter['runs']):4d} {len(s['failed']):6d} "
            f"{big['png_rms']:8.3f} {big['png_tile']:6.2f} {big['svg_number']:8.2g}   "
            f"{margin['png_rms']}, {margin['png_tile']}, {margin['svg_number']}"
        )
    return "\n".join(rows)


Setting = Literal[tuple(SETTINGS)]  # type: ignore[valid-type]


@dataclass(frozen=True)
class Options:
    """How far the chapters' outputs move under the noise any machine can make."""

    chapters: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="PREFIX")] = ()
    """file-name prefixes of the chapters (none: every chapter)"""
    settings: tuple[Setting, ...] = tuple(SETTINGS)
    """the settings to run each chapter under"""
    missing: bool = False
    """only what the record lacks for this machine"""
    jobs: int = 2
    """runs at a time"""
    record: Path = RECORD
    """the record to add to"""
    summary: bool = False
    """print the record's table only"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(
        Options,
        args=argv,
        prog="python tools/measure_noise.py",
        config=(tyro.conf.FlagCreatePairsOff,),
    )
    record = load(args.record)
    if args.summary:
        print(table(record))
        return 0
    here = machine()
    name = machine_name(here)
    notebooks = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
    if args.chapters:
        notebooks = [n for n in notebooks if any(n.name.startswith(p) for p in args.chapters)]
    jobs = [
        (notebook, setting)
        for notebook in notebooks
        for setting in args.settings
        if not (
            args.missing
            and f"{setting} @ {name}" in record["chapters"].get(notebook.stem, {}).get("runs", {})
        )
    ]
    print(f"{len(jobs)} runs on {name}, {args.jobs} at a time", flush=True)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(measure, n, s): (n, s) for n, s in jobs}
        for future in concurrent.futures.as_completed(futures):
            notebook, setting = futures[future]
            result = future.result() | {"machine": here}
            chapter = record["chapters"].setdefault(notebook.stem, {"runs": {}})
            chapter["runs"][f"{setting} @ {name}"] = result
            save(record, args.record)
            print(
                f"{notebook.stem} {setting}: {result['cells']} cells, "
                f"{len(result['failed'])} failed, {result['seconds']:.0f} s",
                flush=True,
            )
    print(table(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
