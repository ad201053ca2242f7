"""How a run computes, decided in one place: :func:`plan_run`, and for a real device
:func:`plan_for`.

Every choice the trainer makes about speed is a field of a :class:`Plan`.
:func:`plan_run` reads no device, so that a test can ask it what a T4 or an H100 would
do on a machine without either. What follows from an overridden choice follows (float16
brings its loss scaler, a CUDA graph a capturable Adam), and a combination that cannot
run, or has never run, is refused with a ``ValueError`` that says why.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from . import CONVOLUTIONS, ROUTINGS
from .graphs import SCALED_GRAPH_REFUSAL
from .precision import device_capability, resolve_device

#: The precisions by name, as the records write them, and the dtype each autocasts to
#: (None: float32 throughout).
DTYPES: dict[str, torch.dtype | None] = {
    "float32": None,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

#: bf16 candidates are timed on a CPU only where a bf16 matrix product runs at least
#: this many times as fast as a float32 one (measured: 2.4x on AMD Zen 4, 4.1x on Zen
#: 5; CPUs that emulate bf16 run it slower than float32: 0.01x on a Zen 3).
BF16_SPEEDUP = 1.5

#: The choices a plan makes, which can be overridden by name; the other fields follow.
CHOICES = (
    "routing",
    "convolution",
    "precision",
    "cuda_graph",
    "fused_adam",
    "compile",
    "keep_freed_memory",
)


class RunConfig(Protocol):
    """What a plan reads of a ``TrainConfig`` (which this wing does not import)."""

    @property
    def architecture(self) -> str: ...

    @property
    def mixed_precision(self) -> bool: ...

    def objective(self, output: Any, *batch: Tensor) -> Any: ...


def gpu_precision(capability: tuple[int, int]) -> str:
    """The format a CUDA GPU of compute capability ``capability`` trains in: bf16 where
    its tensor cores compute bf16 (8.0 and later: A100, L4, H100); float16, with loss
    scaling, where they compute float16 only (7.x: V100, T4); float32 on older cards
    (6.x: P100, GTX 10xx), which have no tensor cores to gain from 16 bits."""
    if capability >= (8, 0):
        return "bfloat16"
    if capability >= (7, 0):
        return "float16"
    return "float32"


def version_tuple(version: str) -> tuple[int, int]:
    """``"2.11.0+cu130"`` → ``(2, 11)``."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"torch_version must look like '2.11.0', got {version!r}")
    return int(found[1]), int(found[2])


@dataclass(frozen=True)
class Plan:
    """How a run computes. Made by :func:`plan_run`; read by
    :func:`capsnotes.training.train.build_run`, which builds exactly this."""

    #: the model (:data:`capsnotes.training.config.ARCHITECTURES`)
    architecture: str
    device_type: str
    #: the CUDA compute capability, None off CUDA
    capability: tuple[int, int] | None
    torch_version: str
    #: the paper's code only, in float32 (``--reference``)
    reference: bool
    #: ``"fused"`` or ``"reference"``; None for a model without routing (the CNN)
    routing: str | None
    #: ``"native"`` or ``"matmul"``; None for a model without CapsNet's layers
    convolution: str | None
    #: ``"float32"``, ``"bfloat16"`` or ``"float16"`` (the forward pass's autocast)
    precision: str
    #: a CUDA graph of the whole step, recorded once and replayed
    cuda_graph: bool
    fused_adam: bool
    #: ``torch.compile`` around the model
    compile: bool
    #: on a CPU, freed memory kept in the process for the next step
    #: (:func:`capsnotes.fast.memory.keep_freed_memory`)
    keep_freed_memory: bool = False
    #: the choices a CPU times on a real batch before the run is built
    timed: tuple[str, ...] = ()
    #: the CPU's timings that made the timed choices (None: none made)
    timings: dict[str, Any] | None = dataclasses.field(default=None, compare=False)

    @property
    def loss_scaling(self) -> bool:
        """float16 needs its loss scaled (``torch.amp.GradScaler``); the other two
        formats have float32's range."""
        return self.precision == "float16"

    @property
    def capturable_adam(self) -> bool:
        """Adam keeps its step count on the GPU, so that a graph can replay it."""
        return self.cuda_graph

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype the forward pass autocasts to (None: float32 throughout)."""
        return DTYPES[self.precision]

    def with_choices(self, **choices: Any) -> Plan:
        """This plan with some choices replaced (:data:`CHOICES`), checked; a replaced
        choice is no longer timed."""
        unknown = sorted(set(choices) - set(CHOICES))
        if unknown:
            raise ValueError(
                f"unknown choice {', '.join(unknown)}; a plan's choices are "
                f"{', '.join(CHOICES)}"
            )
        timed = tuple(name for name in self.timed if name not in choices)
        plan = dataclasses.replace(self, **choices, timed=timed)
        plan.check()
        return plan

    def check(self) -> None:
        """Raise a ``ValueError`` that says why if this plan cannot run."""
        device = self.device_type
        cuda, cpu = device == "cuda", device == "cpu"
        capsnet = self.architecture.startswith("capsnet")
        for name, value, known in (
            ("routing", self.routing, ROUTINGS),
            ("convolution", self.convolution, CONVOLUTIONS),
        ):
            if not capsnet and value is not None:
                raise ValueError(f"the CNN has no {name} to choose (it must be None)")
            if capsnet and value not in known:
                raise ValueError(f"{name} must be one of {known}, got {value!r}")
        if self.precision not in DTYPES:
            raise ValueError(
                f"precision must be one of {tuple(DTYPES)}, got {self.precision!r}"
            )
        if self.convolution not in (None, "native") and not cpu:
            raise ValueError(
                "convolutions as matrix products are a CPU technique; on "
                f"{device} the convolution is 'native'"
            )
        if self.precision == "float16" and not cuda:
            raise ValueError(
                "float16 with loss scaling is the format of GPUs without bf16; a "
                f"{device} trains in float32 or bfloat16"
            )
        if self.precision == "bfloat16" and cuda and self.capability < (8, 0):
            major, minor = self.capability
            raise ValueError(
                "bfloat16 needs compute capability 8.0 or later; this GPU has "
                f"{major}.{minor}"
            )
        if self.keep_freed_memory and not cpu:
            raise ValueError(
                "keeping freed memory is a CPU technique (a GPU's caching allocator "
                f"keeps its own); on {device} keep_freed_memory is False"
            )
        if self.cuda_graph and not cuda:
            raise ValueError(f"a CUDA graph needs a CUDA device, not {device}")
        if self.cuda_graph and self.loss_scaling:
            raise ValueError(
                f"{SCALED_GRAPH_REFUSAL}, so the trainer does not record one: leave "
                "the graph out (cuda_graph=False) or choose another precision"
            )
        if self.fused_adam and cpu and version_tuple(self.torch_version) < (2, 4):
            raise ValueError(
                f"torch {self.torch_version} has no fused Adam on a CPU (torch 2.4 "
                "added it)"
            )

    def to_dict(self) -> dict[str, Any]:
        """The plan as a run's history records it."""
        adam = (
            "Adam" + ", fused" * self.fused_adam + ", capturable" * self.capturable_adam
        )
        record: dict[str, Any] = {
            "fast_paths": not self.reference,
            "precision": self.precision,
            "loss_scaling": self.loss_scaling,
            "cuda_graphs": self.cuda_graph,
            "optimizer": adam,
            "compile": self.compile,
            "keep_freed_memory": self.keep_freed_memory,
        }
        if self.routing is not None:
            record |= {"routing": self.routing, "convolution": self.convolution}
        return record | (self.timings or {})


def plan_run(
    config: RunConfig,
    device_type: str,
    capability: tuple[int, int] | None = None,
    torch_version: str = torch.__version__,
    *,
    reference: bool = False,
    **choices: Any,
) -> Plan:
    """How a run of ``config`` (a :class:`~capsnotes.training.config.TrainConfig`: its
    ``architecture`` and ``mixed_precision``) computes on a device of type
    ``device_type`` (``"cpu"``, ``"cuda"``, ...) and, for CUDA, compute
    ``capability``, under torch ``torch_version``. ``reference``: the paper's code
    only, in float32. ``choices`` override single choices (:data:`CHOICES`)."""
    cuda = device_type == "cuda"
    if cuda and capability is None:
        raise ValueError("a CUDA plan needs the GPU's compute capability, e.g. (7, 5)")
    fast = not reference
    capsnet = config.architecture.startswith("capsnet")
    precision = "float32"
    if fast and config.mixed_precision and cuda:
        precision = gpu_precision(capability)
    # fused Adam: one kernel updates every parameter (on a CPU from torch 2.4)
    fused_adam = fast and (
        cuda or (device_type == "cpu" and version_tuple(torch_version) >= (2, 4))
    )
    timed: tuple[str, ...] = ()
    if fast and capsnet and device_type == "cpu":
        # which convolution (and whether bf16) trains faster depends on the CPU: timed
        timed = (
            ("convolution", "precision") if config.mixed_precision else ("convolution",)
        )
    plan = Plan(
        architecture=config.architecture,
        device_type=device_type,
        capability=tuple(capability) if cuda else None,
        torch_version=torch_version,
        reference=reference,
        routing=("fused" if fast else "reference") if capsnet else None,
        convolution="native" if capsnet else None,
        precision=precision,
        # one launch replays the whole step; float16's step, with its scaler, is eager
        cuda_graph=fast and cuda and precision != "float16",
        fused_adam=fused_adam,
        compile=False,
        # the step's large buffers come back from the heap, not the kernel
        keep_freed_memory=fast and device_type == "cpu",
        timed=timed,
    )
    return plan.with_choices(**choices)


def plan_for(
    config: RunConfig,
    device: torch.device | str | None = None,
    *,
    reference: bool = False,
    sample: Callable[[], Sequence[Tensor]] | None = None,
    make_model: Callable[[], nn.Module] | None = None,
    kept: dict[str, Any] | None = None,
    **choices: Any,
) -> Plan:
    """The plan a run of ``config`` computes with on ``device``: :func:`plan_run`'s,
    with the caller's ``choices`` beside those a resumed run ``kept`` from its last
    session on this device (one that contradicts a kept one is refused: it would change
    the run's results); then, on a CPU, the fastest of the choices still open, timed on
    a batch ``sample()`` with fresh models ``make_model()`` (without them: defaults)."""
    if (sample is None) != (make_model is None):
        raise ValueError(
            "a CPU times its open choices on a batch sample() with models "
            "make_model(): pass both, or neither"
        )
    device = resolve_device(device)
    plan = plan_run(config, device.type, device_capability(device), reference=reference)
    if kept and not reference:
        changed = {k: v for k, v in choices.items() if k in kept and kept[k] != v}
        if changed:
            asked = ", ".join(f"{k}={v!r}" for k, v in changed.items())
            before = ", ".join(f"{k}={kept[k]!r}" for k in changed)
            raise ValueError(
                f"the run being resumed computed with {before} on this device, and "
                f"{asked} would change its results: leave the choice out to keep it, "
                "or start over (resume=False, --no-resume) or in another folder"
            )
        choices = kept | choices
    plan = plan.with_choices(**choices)
    if not plan.timed or sample is None:
        return plan
    # imported here: the timing module reads this one's DTYPES
    from .cpu import choose_cpu_implementation, cpu_matmul_rates
    from .memory import keep_freed_memory

    if plan.keep_freed_memory:  # the candidates timed as the run will run
        keep_freed_memory()

    precisions, timings = [plan.precision], {}
    if "precision" in plan.timed:  # bf16 is timed only where its products are fast
        rates = cpu_matmul_rates()
        precisions = ["float32", "bfloat16"][: 1 + (rates.speedup >= BF16_SPEEDUP)]
        timings["matmul_gflops"] = dataclasses.asdict(rates)
    timed = "convolution" in plan.timed
    choice = choose_cpu_implementation(
        make_model,
        config.objective,
        sample(),
        convolutions=CONVOLUTIONS if timed else [plan.convolution],
        precisions=precisions,
    )
    made = {name: getattr(choice, name) for name in plan.timed}
    timings = {"step_seconds": choice.seconds} | timings
    return dataclasses.replace(plan.with_choices(**made), timings=timings)
