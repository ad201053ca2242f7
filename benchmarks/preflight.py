"""The first minute on a GPU machine: does the trainer run here? ``python -m benchmarks.preflight``

In seconds rather than after an hour, it checks what a GPU session needs and stops at
the first thing that fails, saying what it was:

1. the imports: torch, torchvision, the package and the book's helpers, tyro (the
   command line's) and pytest (the stages' GPU tests'); benchmarks/gpu_wheels.sh fetches
   the wheels of both where the image has none;
2. the device, and the plan the trainer makes for the paper's model on it
   (:func:`capsnotes.fast.plan.plan_for`), printed;
3. ``STEPS`` training steps of the paper's model with that plan, through
   :func:`capsnotes.training.train.train` (data on the device, the step, the CUDA graph where the
   plan records one, a test, the checkpoint and the history);
4. the record written and read back: ``OUT/preflight.json``, and the run's checkpoint
   loaded, its history the one returned and its weights the trained ones.

``benchmarks/gpu_session.sh preflight`` runs it first; the tests run it on a CPU with a
small model.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

#: training steps of the paper's model (``--steps``)
STEPS = 20
MODULES = (
    "torch",
    "torchvision",
    "safetensors",
    "tqdm",
    "jaxtyping",
    "tyro",
    "capsbook",
    "pytest",  # gpu_session.sh's measure, seeds and campaign run GPU tests with it
)


def check_imports(modules: tuple[str, ...] = MODULES) -> dict[str, str]:
    """Import each of ``modules``; raise naming the ones that are missing or broken (a
    broken install can raise anything at import, not only ImportError) and what to do."""
    versions, missing = {}, []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as error:  # a broken install: named below, whatever it raised
            missing.append(f"{name} ({type(error).__name__}: {error})")
            continue
        versions[name] = getattr(module, "__version__", "?")
    if missing:
        raise RuntimeError(
            f"cannot import {', '.join(missing)}. tyro, pytest and their needs: run "
            "`bash benchmarks/gpu_wheels.sh` where pip has a network and copy .whl/ "
            "(gpu_session.sh installs it); capsbook: PYTHONPATH must hold book/; "
            "anything else: the machine's install is broken or lacks it"
        )
    return versions


def preflight(
    out: Path,
    device: str = "auto",
    steps: int = STEPS,
    data_root: str | Path | None = None,
    config: Any = None,
    command: str = "python -m benchmarks.preflight",
) -> dict[str, Any]:
    """Run the checks (see the module's docstring) and return the record written to
    ``out/preflight.json``. ``config``: the model to train (default: the ``paper``
    profile); ``command``: the command the record names."""
    started = time.perf_counter()
    versions = check_imports()
    import torch

    from benchmarks.record import header
    from capsnotes.data.files import write_json
    from capsnotes.fast.plan import plan_for
    from capsnotes.fast.precision import device_name, resolve_device
    from capsnotes.training.checkpoint import load_checkpoint
    from capsnotes.training.config import profile
    from capsnotes.training.train import train

    resolved = resolve_device(device)
    config = config or profile("paper")
    # STEPS full batches and a test on 500 digits; nothing is shifted away from the paper
    config = dataclasses.replace(
        config, epochs=1, train_size=steps * config.batch_size, test_size=500
    )
    plan = plan_for(config, resolved)
    print(f"{device_name(resolved)}, torch {torch.__version__}: {plan.to_dict()}", flush=True)
    result = train(
        config, out / "run", device=resolved, data_root=data_root, resume=False, progress=False
    )
    history = result.history
    record = header(command, resolved) | {
        "versions": versions,
        "plan": history["session_details"][-1],
        "steps": steps,
        "batch_size": config.batch_size,
        "test_accuracy": history["test_accuracy"],
        "train_seconds": history["epochs"][0]["seconds"],
        "images_per_second": history["epochs"][0]["images_per_second"],
    }
    path = out / "preflight.json"
    write_json(path, record)
    if json.loads(path.read_text()) != json.loads(json.dumps(record)):  # tuples as lists
        raise RuntimeError(f"{path} does not read back as written")
    saved = load_checkpoint(out / "run")
    if saved.metadata["history"] != json.loads(json.dumps(history)):
        raise RuntimeError("the checkpoint's history is not the history the run returned")
    for name, value in result.model.state_dict().items():
        if not torch.equal(saved.result_state[name], value.cpu()):
            raise RuntimeError(f"the checkpoint's {name} is not the trained one")
    record["preflight_seconds"] = time.perf_counter() - started
    return record


def parse(argv: Sequence[str] | None = None) -> Any:
    """The options ``argv`` asks for (``--out``, ``--device``, ``--steps``,
    ``--data-root``). Made here rather than at import: this module imports nothing outside
    the standard library, so that :func:`check_imports` can name a missing tyro."""
    import tyro

    from capsnotes.training.options import DataRoot, Device, Out

    steps = Annotated[int, tyro.conf.arg(help="training steps of the paper's model")]
    options = dataclasses.make_dataclass(
        "Preflight",
        [
            ("out", Out, Path("runs/preflight")),
            ("device", Device, "auto"),
            ("steps", steps, STEPS),
            ("data_root", DataRoot, None),
        ],
        frozen=True,
    )
    options.__doc__ = "The first minute on a GPU machine: does the trainer run here?"
    return tyro.cli(options, args=argv, prog="python -m benchmarks.preflight")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        check_imports()
        args = parse(argv)
        from benchmarks.record import command_line

        command = command_line("benchmarks.preflight", argv)
        record = preflight(args.out, args.device, args.steps, args.data_root, command=command)
    except Exception as error:  # every failure ends the session's first minute clearly
        print(f"preflight failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(
        f"preflight passed in {record['preflight_seconds']:.1f} s: {record['steps']} steps "
        f"at {record['images_per_second']:.0f} images/s on {record['device']}; "
        f"wrote {args.out / 'preflight.json'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
