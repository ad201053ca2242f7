"""Pin the test environment: write ``constraints/test.txt`` and ``constraints/floor.txt``.

* ``constraints/test.txt`` — the exact version of everything the README's test command
  installs (``uv pip install -e '.[test]' -c constraints/test.txt``). The chapters'
  outputs are executed (``tools/refresh_notebooks.py``) and compared (``pytest --nbval``)
  in this environment.
* ``constraints/floor.txt`` — the same, except that each requirement of the package
  (``[project] dependencies`` in ``pyproject.toml``) is held at the lowest version it
  declares (``torch>=2.11`` becomes ``torch==2.11.0``): ``.ci/run`` runs the fast tests
  in it, so that the floors the package declares are floors the tests pass on.

Both are resolved by uv for CPython 3.11 on Linux (x86-64), the machines that execute
the chapters and run CI; a constraints file installs nothing by itself, so the same
files serve other platforms wherever these versions exist. Package names and versions
only: no index URLs, no hashes.

To move to a new PyTorch (or any new version): run this, install the new pins, run
``python tools/refresh_notebooks.py`` to re-execute every chapter, and commit the
constraints, the notebooks and pyproject.toml together::

    python tools/pin_environment.py            # latest versions the requirements allow
    python tools/pin_environment.py --keep     # add what is new, keep existing pins
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tyro

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO / "constraints"
#: Where the pins are resolved for (see the module's docstring).
TARGET = ["--python-version", "3.11", "--python-platform", "x86_64-unknown-linux-gnu"]
#: A requirement with a floor: ``name>=version`` (extras and other bounds allowed).
FLOOR = re.compile(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)")


def declared_floors(pyproject: Path = REPO / "pyproject.toml") -> dict[str, str]:
    """The lowest version of each requirement in ``[project] dependencies`` (read with a
    pattern: tomllib needs Python 3.11, the package runs on 3.10)."""
    table = re.search(
        r"^\[project\]$(.*?)^dependencies = \[(.*?)\]", pyproject.read_text(), re.M | re.S
    )
    if table is None:
        raise SystemExit(f"{pyproject}: no dependencies in its [project] table")
    requirements = re.findall(r'"([^"]+)"', table.group(2))
    floors = {}
    for requirement in requirements:
        match = FLOOR.match(requirement)
        if match is None:
            raise SystemExit(f"pyproject.toml: {requirement!r} declares no floor (>=)")
        floors[match.group(1)] = match.group(3)
    return floors


def compile_pins(output: Path, constraints: list[str], keep: bool) -> None:
    """Resolve pyproject.toml's ``test`` extra with uv into ``output``."""
    if not keep:
        output.unlink(missing_ok=True)  # uv keeps the pins of an existing output file
    with tempfile.TemporaryDirectory() as scratch:
        extra = []
        if constraints:
            extra_file = Path(scratch) / "floors.txt"
            extra_file.write_text("\n".join(constraints) + "\n")
            extra = ["--constraint", str(extra_file)]
        subprocess.run(
            [
                "uv",
                "pip",
                "compile",
                "pyproject.toml",
                "--extra",
                "test",
                *TARGET,
                "--no-header",
                "--no-annotate",
                "--quiet",
                *extra,
                "--output-file",
                str(output),
            ],
            cwd=REPO,
            check=True,
        )
    print(f"wrote {output.relative_to(REPO)}: {len(output.read_text().splitlines())} pins")


@dataclass(frozen=True)
class Options:
    """Resolve constraints/test.txt and constraints/floor.txt again (see the module)."""

    keep: bool = False
    """add what is new and keep the existing pins (default: the latest versions the
    requirements allow)"""


def main(argv: Sequence[str] | None = None) -> int:
    options = tyro.cli(
        Options,
        args=argv,
        prog="python tools/pin_environment.py",
        config=(tyro.conf.FlagCreatePairsOff,),
    )
    FOLDER.mkdir(exist_ok=True)
    compile_pins(FOLDER / "test.txt", [], options.keep)
    floors = [f"{name}=={version}" for name, version in declared_floors().items()]
    compile_pins(FOLDER / "floor.txt", floors, options.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
