"""How `pytest --nbval` compares the chapters: their figures as pictures within a
tolerance (``nbval_figures.py``, registered here), everything else exactly as nbval
compares it (a chapter prints only the digits its computation guarantees on any CPU);
and saying first, in one line, whether this
run has the versions of torch, torchvision, numpy, matplotlib and nbval that made the
committed outputs (``tools/refresh_notebooks.py`` records them in each notebook's
metadata)."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from book import nbval_figures

BOOK = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    # a plugin, not hooks of this conftest: those would reach only files under book/, and a
    # run elsewhere (tests/test_figures.py's) names the same module with -p
    if not config.pluginmanager.is_registered(nbval_figures):
        config.pluginmanager.register(nbval_figures, "book.nbval_figures")


def executed_with() -> dict[str, set[str]]:
    """package -> the versions the committed notebooks were executed with."""
    made: dict[str, set[str]] = {}
    for path in sorted(BOOK.glob("*.ipynb")):
        metadata = json.loads(path.read_text()).get("metadata", {})
        for name, made_with in metadata.get("capsnotes", {}).get("executed_with", {}).items():
            made.setdefault(name, set()).add(made_with)
    return made


def running(name: str) -> str:
    if name == "python":
        import platform

        return platform.python_version()
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def versions_line() -> str:
    """One line: the versions that differ from those that made the outputs, or that
    none does."""
    made = executed_with()
    if not made:
        return "capsnotes: the notebooks record no versions (run tools/refresh_notebooks.py)"
    differ = [
        f"{name} {running(name)} (outputs made with {', '.join(sorted(versions))})"
        for name, versions in made.items()
        if versions != {running(name)}
    ]
    if not differ:
        same = ", ".join(f"{name} {running(name)}" for name in made)
        return f"capsnotes: the chapters' outputs were made with this run's {same}"
    return (
        "capsnotes: VERSIONS DIFFER, notebook outputs may differ for that alone: this run has "
        + "; ".join(differ)
        + ". Install the pinned ones: uv pip install -e '.[test]' -c constraints/test.txt"
    )


def pytest_report_header(config: pytest.Config) -> str:
    return versions_line()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    line = versions_line()
    if "DIFFER" in line:
        terminalreporter.write_line(line, yellow=True, bold=True)
