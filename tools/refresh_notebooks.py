"""Regenerate the committed notebooks (book/*.ipynb) from their MyST sources (book/*.md).

Each chapter is read with jupytext, its Colab install cell pinned to the commit the
outputs come from (the repository's HEAD; the package must have no uncommitted
changes), executed top to bottom in book/ (as the book build and nbval run it), turned
into plain Markdown where Colab cannot render MyST (tools/colab.py), and written next to
its source with its outputs, which nbval then compares against. Run from the
repository root:

    python tools/refresh_notebooks.py            # every chapter
    python tools/refresh_notebooks.py 03 08      # chapters whose file names start so
    python tools/refresh_notebooks.py --text 09  # prose changed only: keep the outputs

``--text`` rewrites the markdown of a notebook whose code cells are exactly those of its
source, keeping its outputs and its pin (jupytext's sync puts them back); it refuses
when any code cell differs. Executing is nbclient's (papermill, which wraps it, would add
its parameters and its own records to every notebook, and the chapters take none).

It runs only in the pinned test environment (``constraints/test.txt``, which the README's
test command installs) and says what differs otherwise; it records the versions that
matter for the outputs in each notebook's metadata (``capsnotes.executed_with``), which
``pytest --nbval`` names when its own differ (book/conftest.py). Each chapter's kernel
runs with ATen's generic CPU kernels (``ATEN_CPU_CAPABILITY=default``, see
:data:`KERNELS`): the tests then compare every output across kernels on any machine,
since no CPU's default is the generic one, and an output that holds only on the CPU that
made it fails there rather than on a reader's machine.

Set CAPSNOTES_DATA if MNIST is not in the default data folder. Run it on a CPU, as CI
compares on a CPU.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated

import jupytext
import nbformat
import tyro
from jupytext.combine import combine_inputs_with_outputs
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colab import (  # noqa: E402
    References,
    chapter_sources,
    chapters,
    colab_cells,
    glued_values,
)

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"
#: The install cell's pin: ``COMMIT = "<sha>"``, installed as ``capsnotes @ git+...@{COMMIT}``.
PINNED = re.compile(r'^COMMIT = "[0-9a-f]*"', re.M)
#: What the package's code is made of, for the check that it is committed.
PACKAGE_PATHS = ("capsnotes", "book/capsbook", "pyproject.toml")
#: The pinned test environment (tools/pin_environment.py writes it).
CONSTRAINTS = REPO / "constraints" / "test.txt"
#: The environment of every chapter's kernel beyond the caller's: ATen's generic CPU
#: kernels, which no CPU uses by default (the tests compare across kernels so).
KERNELS = {"ATEN_CPU_CAPABILITY": "default"}
#: The packages whose versions shape the outputs, recorded in each notebook.
RECORDED = ("torch", "torchvision", "numpy", "matplotlib", "nbval")


def pinned_versions(constraints: Path = CONSTRAINTS) -> dict[str, str]:
    """``name -> version`` of every pin in ``constraints`` (``name==version`` lines)."""
    pins = {}
    for line in constraints.read_text().splitlines():
        name, _, pinned = line.partition("==")
        if pinned:
            pins[name.strip().lower()] = pinned.strip()
    return pins


def check_environment(constraints: Path = CONSTRAINTS) -> dict[str, str]:
    """The running versions of :data:`RECORDED`, after checking that every pinned package
    that is installed here has its pinned version (the chapters' outputs depend on them)."""
    wrong = []
    for name, pinned in pinned_versions(constraints).items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "not installed"
        if installed != pinned:
            wrong.append(f"{name} {installed} (pinned: {pinned})")
    if wrong:
        raise SystemExit(
            "the chapters are executed in the pinned test environment; here differ: "
            + ", ".join(wrong)
            + f"\ninstall it: uv pip install -e '.[test]' -c {constraints.relative_to(REPO)}"
        )
    return {"python": sys.version.split()[0]} | {name: version(name) for name in RECORDED}


def git(repo: Path, *args: str) -> str:
    """What ``git -C repo ARGS`` prints (raises if it fails)."""
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def package_commit() -> str:
    """HEAD, after checking that the package has no uncommitted changes."""
    changed = git(REPO, "status", "--porcelain", "--", *PACKAGE_PATHS)
    if changed.strip():
        raise SystemExit(
            "commit the package first: the notebooks pin the commit their outputs come from\n"
            + changed
        )
    return git(REPO, "rev-parse", "HEAD").strip()


def pin(source: Path, commit: str) -> None:
    """Point the chapter's install cell at ``commit``."""
    text = source.read_text()
    if not PINNED.search(text):
        raise SystemExit(f'{source.name} has no install cell with a line COMMIT = "..."')
    source.write_text(PINNED.sub(f'COMMIT = "{commit}"', text, count=1))


def write_notebook(notebook, cells: list, source: Path, book: dict, refs: References) -> None:
    """Write ``notebook`` with ``cells`` (the source's, executed) beside ``source``, as
    Colab reads it. Cell ids are derived from the chapter and the cell's place (jupytext
    draws random ones), so that refreshing an unchanged chapter changes nothing."""
    notebook.cells = colab_cells(cells, book[source.stem], book, refs, glued_values(cells))
    for index, cell in enumerate(notebook.cells):
        cell.id = hashlib.sha1(f"{source.stem}:{index}".encode()).hexdigest()[:8]
    nbformat.validate(notebook)
    jupytext.write(notebook, source.with_suffix(".ipynb"), fmt="ipynb")


#: The README's figure: the output of this chapter's cell of this name, kept as a file.
README_FIGURE = (
    "01_why_capsules",
    "fig-architecture",
    BOOK / "_static" / "capsnet-architecture.svg",
)


def figure_output(notebook, name: str) -> str:  # noqa: ANN001
    """The SVG the cell whose figure is named ``name`` shows."""
    for cell in notebook.cells:
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
        if cell.cell_type == "code" and figure.get("name") == name:
            for output in cell.get("outputs", []):
                if "image/svg+xml" in output.get("data", {}):
                    return output["data"]["image/svg+xml"]
    raise SystemExit(f"no SVG output in the cell of figure {name}")


def refresh(
    source: Path, commit: str, book: dict, refs: References, versions: dict[str, str]
) -> float:
    pin(source, commit)
    notebook = jupytext.read(source)
    notebook.metadata.get("jupytext", {}).pop("formats", None)
    kernels = " ".join(f"{name}={value}" for name, value in KERNELS.items())
    notebook.metadata["capsnotes"] = {"executed_with": versions, "kernels": kernels}
    started = time.perf_counter()
    NotebookClient(
        notebook,
        timeout=1800,
        kernel_name="python3",
        resources={"metadata": {"path": str(BOOK)}},
        record_timing=False,  # no timestamps in the cells' metadata
    ).execute(env=os.environ | KERNELS)
    seconds = time.perf_counter() - started
    notebook.metadata.pop("language_info", None)  # the files stay the same between runs
    notebook.metadata.pop("widgets", None)  # live widgets need a kernel, not saved state
    write_notebook(notebook, notebook.cells, source, book, refs)
    chapter, figure, path = README_FIGURE
    if source.stem == chapter:
        path.write_text(figure_output(notebook, figure))
    return seconds


def refresh_text(source: Path, book: dict, refs: References) -> None:
    """New markdown from the source, the committed outputs kept (code cells unchanged)."""
    committed = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    fresh = jupytext.read(source)
    code = [c for c in fresh.cells if c.cell_type == "code"]
    kept = [c for c in committed.cells if c.cell_type == "code"]

    def key(cell) -> tuple:  # noqa: ANN001 - the Colab form adds cellView to collapsed cells
        return cell.source, {k: v for k, v in cell.metadata.items() if k != "cellView"}

    if [key(c) for c in code] != [key(c) for c in kept]:
        raise SystemExit(f"{source.name}: code cells changed; refresh it without --text")
    # jupytext's sync (``jupytext --update``): the text from the source, each code cell's
    # outputs from the notebook
    synced = combine_inputs_with_outputs(fresh, committed)
    write_notebook(committed, synced.cells, source, book, refs)


@dataclass(frozen=True)
class Options:
    """Execute the book's chapters again and write their notebooks (see the module)."""

    chapters: Annotated[tuple[str, ...], tyro.conf.Positional, tyro.conf.arg(metavar="PREFIX")] = ()
    """file-name prefixes of the chapters (none: every chapter)"""
    text: bool = False
    """refresh the markdown only, keeping the committed outputs (executes nothing)"""


def main(argv: Sequence[str] | None = None) -> int:
    options = tyro.cli(
        Options,
        args=argv,
        prog="python tools/refresh_notebooks.py",
        config=(tyro.conf.FlagCreatePairsOff,),
    )
    selected = chapter_sources(options.chapters)
    if not selected:
        print("no chapter matches", list(options.chapters), file=sys.stderr)
        return 1
    book, refs = chapters(), References()
    if options.text:
        for source in selected:
            refresh_text(source, book, refs)
            print(f"{source.name}: markdown refreshed, outputs kept")
        return 0
    versions = check_environment()
    commit = package_commit()
    for source in selected:
        seconds = refresh(source, commit, book, refs, versions)
        print(f"{source.name}: executed in {seconds:.1f} s (capsnotes at {commit[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
