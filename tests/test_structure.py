"""The package's shape: modules in layers (no import cycle, counting imports through the
package's __init__.py and inside functions), one home for the training loss, public
torch APIs only, no model edited after it is built, and a trainer that fits on a page."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import capsnotes
from tests.conftest import REPO

PACKAGE = REPO / "capsnotes"
MODULES = {path.stem: path for path in PACKAGE.glob("*.py")}


def imports_of(path: Path) -> set[str]:
    """The capsnotes modules ``path`` imports, anywhere in it: ``from .x import y`` gives
    ``x``; ``from . import y`` and ``import capsnotes`` give ``__init__``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            absolute = node.module or ""
            if node.level == 1 or absolute.startswith("capsnotes"):
                module = (
                    absolute.removeprefix("capsnotes").lstrip(".") if node.level == 0 else absolute
                )
                found.add(module.split(".")[0] if module else "__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "capsnotes":
                    found.add("__init__")
                elif alias.name.startswith("capsnotes."):
                    found.add(alias.name.split(".")[1])
    return found - {path.stem}


def test_the_modules_form_layers_without_a_cycle():
    graph = {name: imports_of(path) for name, path in MODULES.items()}
    assert all(target in MODULES for targets in graph.values() for target in targets)
    # importing any submodule runs __init__.py first; __init__ imports its names, so an
    # edge back to __init__ from anything it reaches would close a cycle
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        assert state.get(name) != "active", "import cycle: " + " -> ".join([*path, name])
        state[name] = "active"
        for target in sorted(graph[name]):
            visit(target, [*path, name])
        state[name] = "done"
        order.append(name)

    for name in sorted(graph):
        visit(name, [])
    assert "__init__" not in {t for n, ts in graph.items() if n != "__init__" for t in ts}


def test_margin_and_reconstruction_loss_are_combined_in_one_function():
    combined = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                calls = {
                    c.func.id
                    for c in ast.walk(node)
                    if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                }
                if {"margin_loss", "reconstruction_loss"} <= calls:
                    combined.append(f"{name}.{node.name}")
    assert combined == ["losses.capsnet_loss"]


def test_only_public_torch_apis_are_used():
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            private = (
                node.attr.startswith("_") and not node.attr.endswith("__")
                if isinstance(node, ast.Attribute)
                else False
            )
            if private:
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in ("torch", "F", "nn"):
                    raise AssertionError(f"{name}.py uses torch's private {node.attr}")


def test_no_module_edits_an_object_after_it_is_built():
    """No class swapped, no __dict__ copied, no setattr on other objects: a model is built
    with the implementation it uses."""
    for name, path in MODULES.items():
        source = path.read_text()
        for forbidden in ("__class__ =", "__dict__.update", "__new__(", "setattr("):
            assert forbidden not in source, f"{name}.py: {forbidden}"


def test_train_fits_on_a_page():
    trainer = importlib.import_module("capsnotes.train")
    lines, _ = inspect.getsourcelines(trainer.train)
    assert not callable(capsnotes.train), "capsnotes.train is the module, not a function"
    assert len(lines) < 60, len(lines)


def test_the_package_reports_its_version():
    from capsnotes.version import __version__

    assert capsnotes.__version__ == __version__
    assert (
        'version = { attr = "capsnotes.version.__version__" }'
        in (REPO / "pyproject.toml").read_text()
    )
