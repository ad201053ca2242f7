"""The package's shape: import-linter's contracts, which every module of the package is
under (the layers, the paper importing nothing of the other wings); how little the
paper's modules load; and the shapes declared in the paper's signatures holding at run
time (jaxtyping, checked with beartype)."""

from __future__ import annotations

import subprocess
import sys

import beartype
import pytest
import tomllib
import torch
from importlinter.cli import lint_imports
from jaxtyping import jaxtyped

from capsnotes import (
    CapsNet,
    Decoder,
    DigitCapsules,
    PrimaryCapsules,
    dynamic_routing,
    dynamic_routing_with_couplings,
    margin_loss,
    mask_capsules,
    reconstruction_loss,
    squash,
)
from tests.conftest import REPO, TINY


def test_the_import_contracts_hold():
    """import-linter checks the layers, the paper's imports and the wings apart; a layers
    contract says nothing of a module it does not list, so each of the package's top
    modules and wings is in one of its layers (import-linter's own ``exhaustive = true``
    would say so too, set in pyproject.toml)."""
    assert lint_imports(no_cache=True, no_logo=True) == 0
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    listed = {name.strip() for layer in layers for name in layer.split("|")}
    top = {p.stem for p in (REPO / "capsnotes").glob("*.py")} - {"__init__"}
    top |= {p.parent.name for p in (REPO / "capsnotes").glob("*/__init__.py")}
    assert top <= listed, f"in no layer of [tool.importlinter]: {sorted(top - listed)}"


def test_the_routing_module_loads_only_the_paper():
    """``import capsnotes.routing`` (which runs the package's __init__) loads the paper's
    modules and nothing of training, data or speed: at most 8 of the package's."""
    code = "import sys, capsnotes.routing; print(*sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = [m for m in run.stdout.split() if m.split(".")[0] == "capsnotes"]
    assert len(loaded) <= 8, loaded
    wings = (["fast"], ["training"], ["data"], ["experiments"])
    assert not [m for m in loaded if m.split(".")[1:2] in wings]


def checked(function):
    """``function`` with its jaxtyping annotations checked on every call (beartype)."""
    return jaxtyped(typechecker=beartype.beartype)(function)


def test_the_shapes_in_the_signatures_hold_at_run_time():
    """Every annotated layer of the paper, called with consistent shapes, passes the
    check of its annotations; a call that breaks one is caught."""
    torch.manual_seed(0)
    model = CapsNet(TINY)
    images, labels = torch.rand(3, 1, 28, 28), torch.tensor([1, 2, 3])
    u = checked(CapsNet.primary_capsules)(model, images)
    u_hat = checked(DigitCapsules.votes)(model.digits, u)
    v, c = checked(dynamic_routing_with_couplings)(u_hat, 3)
    checked(dynamic_routing)(u_hat, 3)
    checked(DigitCapsules.forward)(model.digits, u)
    checked(DigitCapsules.forward_with_couplings)(model.digits, u)
    checked(CapsNet.encode)(model, images)
    checked(squash)(u_hat)
    checked(mask_capsules)(v, labels)
    pixels = checked(Decoder.forward)(model.decoder, v, labels)
    checked(margin_loss)(v, labels)
    checked(reconstruction_loss)(pixels, images)
    out = checked(CapsNet.forward)(model, images, labels)
    checked(PrimaryCapsules.forward)(model.primary, torch.rand(2, 8, 20, 20))
    assert out.capsules.shape == v.shape
    # inside the model nothing checks at run time: the annotations are the contract,
    # and a call that breaks one is caught here
    broken = {
        "mask: labels of 2 images for capsules of 3": lambda: checked(mask_capsules)(v, labels[:2]),
        "routing: votes without a batch axis": lambda: checked(dynamic_routing)(u_hat[0]),
        "votes: capsules without their dimension axis": lambda: checked(DigitCapsules.votes)(
            model.digits, u[..., 0]
        ),
        "margin loss: lengths, not capsules": lambda: checked(margin_loss)(v.norm(dim=-1), labels),
        "squash: integers": lambda: checked(squash)(labels),
        "decoder: float labels": lambda: checked(Decoder.forward)(model.decoder, v, labels.float()),
    }
    for name, call in broken.items():
        with pytest.raises(Exception, match="Type-check error|type-check|jaxtyping"):
            call()
            pytest.fail(name)
