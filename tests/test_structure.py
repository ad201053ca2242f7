"""The package's shape: modules in ten layers (import-linter's contracts), the displayed
math free of validation, one home for the training loss, public torch APIs only, no
model edited after it is built, and a trainer that fits on a page."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import textwrap

import tomllib
from importlinter.cli import lint_imports

import capsnotes
import capsnotes.train as capsnotes_train
from tests.conftest import REPO

PACKAGE = REPO / "capsnotes"
MODULES = {path.stem: path for path in PACKAGE.glob("*.py")}


def contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_hold():
    """import-linter checks the layers and what the paper's layers may not import."""
    assert lint_imports(no_cache=True, no_logo=True) == 0


def test_every_module_is_in_a_layer_and_there_are_at_most_ten():
    (layers,) = [c["layers"] for c in contracts() if c["type"] == "layers"]
    assert len(layers) <= 10
    listed = {name.strip() for layer in layers for name in layer.split("|")}
    modules = {f"capsnotes.{stem}" for stem in MODULES if stem != "__init__"}
    assert listed == modules, f"not in a layer: {sorted(modules - listed)}"


#: What the chapters display as the math: the body of each is the equation, its
#: arguments declared with @checked above it.
DISPLAYED_MATH = [
    capsnotes.squash,
    capsnotes.dynamic_routing,
    capsnotes.margin_loss,
    capsnotes.reconstruction_loss,
    capsnotes.mask_capsules,
    capsnotes.PrimaryCapsules.forward,
    capsnotes.DigitCapsules.votes,
    capsnotes.CapsNet.forward,
]


def test_the_displayed_math_holds_no_validation():
    """No check_* call inside these bodies: each is declared validated (@checked), and a
    bad argument still gets its clear error (tests/test_bad_input.py)."""
    for function in DISPLAYED_MATH:
        assert inspect.unwrap(function) is not function, f"{function.__qualname__} is unchecked"
        calls = _calls_in_body(function)
        assert not [c for c in calls if c.startswith("check")], (function.__qualname__, calls)


def _calls_in_body(function) -> set[str]:
    """The names of the functions called in ``function``'s body (not its decorators)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(function))))
    (definition,) = tree.body
    names = set()
    for statement in definition.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Call):
                func = node.func
                names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def test_margin_and_reconstruction_loss_are_combined_in_one_function():
    """capsnet_loss is the one function that names both losses (as the terms it adds,
    which a comparison may replace): nothing else combines them."""
    combined = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                if {"margin_loss", "reconstruction_loss"} <= names:
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
    lines, _ = inspect.getsourcelines(capsnotes_train.train)
    assert len(lines) < 60, len(lines)


def test_the_installed_version_is_the_package_version():
    """pip's metadata reads the version from capsnotes/version.py (pyproject.toml)."""
    assert importlib.metadata.version("capsnotes") == capsnotes.__version__
