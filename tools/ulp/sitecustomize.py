"""A rounding-level change to every model, standing in for another CPU's arithmetic.

``tools/measure_noise.py`` puts this folder first on ``PYTHONPATH`` for its ``ulp``
setting, so that Python imports this file at start-up in the notebook's kernel. Before
a module first runs, every floating-point parameter it holds moves to the next
representable number towards +inf (one unit in the last place): a freshly built
model starts its training one ulp away, a loaded one computes one ulp away. Nothing
else changes. A module-wide forward pre-hook (``torch.nn.modules.module``'s public
``register_module_forward_pre_hook``) sees every module of every model, whoever built
it; each parameter moves once.
"""

from __future__ import annotations

import weakref

import torch

#: id -> parameter, of those moved already (tensors compare by value, so not a WeakSet)
_moved: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _one_ulp_up(module: torch.nn.Module, args: object) -> None:
    with torch.no_grad():
        for parameter in module.parameters(recurse=False):
            if _moved.get(id(parameter)) is parameter or not parameter.is_floating_point():
                continue
            _moved[id(parameter)] = parameter
            if parameter.device.type != "meta":
                parameter.copy_(torch.nextafter(parameter, torch.full_like(parameter, torch.inf)))


torch.nn.modules.module.register_module_forward_pre_hook(_one_ulp_up)
