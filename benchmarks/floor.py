"""The floor under a training step: the matrix products and convolutions it runs, each
timed alone. ``python -m benchmarks.floor --batch-sizes 64 128 --record NAME``

A training step of the trainer's chosen plan (``plan_for`` on this CPU, timed on a real
batch, as a run chooses) is recorded once with PyTorch's profiler, shapes and dtypes
kept. Every product it ran (``aten::mm``, ``bmm``, ``addmm``, ``baddbmm`` and the native
convolutions forward and backward) is then timed alone on fresh tensors of the same
shapes and dtype, with ``torch.utils.benchmark`` at the same number of threads. Each is
timed in every layout that could make it faster (:meth:`Product.layouts`), and the
layout fastest over all rounds counts. Their sum is the step's floor: what the step
would take if it did nothing but its products, each at the speed it has alone. Where
the step hands a product a slower layout, or copies to make one, that cost belongs to
the step, not the floor.

Beside the floor: the step itself (over the rounds, the median of each round's median
step, after warm-up steps once; with
``--no-keep-freed-memory`` as the step runs with glibc's own allocator settings:
:func:`capsnotes.fast.memory.keep_freed_memory`), its arithmetic rate, and a reference
rate, a large square product's in the step's precision
(:func:`capsnotes.fast.cpu.cpu_matmul_rates` at 2048 and 4096). The record goes to
``benchmarks/results/NAME-floor.json`` and names the CPU.

The step and the products are timed in rounds, one after the other, and the record
keeps every round. A 2-core cloud machine's speed moves from minute to minute, so the
rounds' spread says how far one measurement of the step or its floor can be trusted
(:func:`summarize`).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Any

import torch
import tyro
from torch.profiler import ProfilerActivity, profile
from torch.utils import benchmark

from benchmarks.record import RESULTS, command_line, header
from capsnotes.data import load_dataset
from capsnotes.data.files import write_json
from capsnotes.fast.cpu import cpu_matmul_rates
from capsnotes.fast.plan import plan_for
from capsnotes.training.config import build_model
from capsnotes.training.config import profile as training_profile
from capsnotes.training.train import build_run

#: The product kernels a CPU step runs (the wrappers above them, matmul, linear,
#: einsum, conv2d, call these).
PRODUCTS = (
    "aten::mm",
    "aten::bmm",
    "aten::addmm",
    "aten::baddbmm",
    "aten::mkldnn_convolution",
    "aten::convolution_backward",
)
DTYPE_NAMES = {"float": torch.float32, "c10::BFloat16": torch.bfloat16, "c10::Half": torch.float16}


@dataclasses.dataclass(frozen=True)
class Product:
    """One kind of product a step ran: the kernel, its tensors' shapes and dtype, its
    other arguments as the profiler saw them."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    arguments: tuple[Any, ...]

    def flops(self) -> int:
        """Floating-point operations (a multiply and an add count two)."""
        s = self.shapes
        if self.name == "aten::mm":
            (m, k), (_, n) = s[0], s[1]
            return 2 * m * k * n
        if self.name == "aten::addmm":
            (m, k), (_, n) = s[1], s[2]
            return 2 * m * k * n
        if self.name in ("aten::bmm", "aten::baddbmm"):
            first, second = (s[0], s[1]) if self.name == "aten::bmm" else (s[1], s[2])
            (b, m, k), (_, _, n) = first, second
            return 2 * b * m * k * n
        if self.name == "aten::mkldnn_convolution":
            (batch, channels, _, _), (out, per_group, kh, kw) = s[0], s[1]
            stride = self.arguments[4]
            height = (s[0][2] - kh) // stride[0] + 1
            width = (s[0][3] - kw) // stride[1] + 1
            return 2 * batch * out * height * width * per_group * kh * kw
        if self.name == "aten::convolution_backward":
            (batch, out, height, width), (_, channels, _, _), (_, per_group, kh, kw) = s[:3]
            mask = self.arguments[-1]
            return 2 * batch * out * height * width * per_group * kh * kw * sum(mask[:2])
        raise ValueError(f"no FLOP count for {self.name}")

    def layouts(self) -> tuple[str, ...]:
        """The memory layouts this product is timed in. The profiler's events, as
        :func:`products_of` reads them, carry shapes and not strides. A product can
        also run faster on another layout than the row-major one: oneDNN's
        convolutions on channels-last tensors, a matrix product on a factor stored
        column-major (the step hands the primary convolution's weights over so)."""
        if any(len(shape) == 4 for shape in self.shapes):
            return ("contiguous", "channels_last")
        if self.name in MATRIX_OPERANDS:
            return tuple(MATRIX_LAYOUTS)
        return ("contiguous",)

    def runner(self, layout: str = "contiguous") -> tuple[str, dict[str, Any]]:
        """A statement and its globals that run this product alone, its tensors laid
        out as ``layout`` (one of :meth:`layouts`) names."""
        dtype = DTYPE_NAMES[self.dtype]
        generator = torch.Generator().manual_seed(0)
        tensors = [
            torch.randn(shape, generator=generator).to(dtype) if shape else None
            for shape in self.shapes
        ]
        if layout == "channels_last":
            tensors = [
                t.contiguous(memory_format=torch.channels_last)
                if t is not None and t.dim() == 4
                else t
                for t in tensors
            ]
        for index in MATRIX_LAYOUTS.get(layout, ()):
            operand = MATRIX_OPERANDS[self.name][index]
            tensors[operand] = tensors[operand].mT.contiguous().mT  # column-major
        op = getattr(torch.ops.aten, self.name.split("::")[1])
        if self.name == "aten::mkldnn_convolution":
            # (input, weight, bias, padding, stride, dilation, groups)
            args = [*tensors[:3], *self.arguments[3:]]
        elif self.name == "aten::convolution_backward":
            # (grad_output, input, weight, bias_sizes, stride, padding, dilation,
            # transposed, output_padding, groups, output_mask)
            args = [*tensors[:3], *self.arguments[3:]]
        else:  # the products' tensors; beta and alpha at their defaults, 1
            args = [t for t in tensors if t is not None]
        return "op(*args)", {"op": op, "args": args}


#: Where a matrix product's two factors are among its tensors.
MATRIX_OPERANDS = {
    "aten::mm": (0, 1),
    "aten::bmm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::baddbmm": (1, 2),
}
#: A matrix product's layouts: which of its two factors is stored column-major.
MATRIX_LAYOUTS = {
    "contiguous": (),
    "first column-major": (0,),
    "second column-major": (1,),
    "both column-major": (0, 1),
}


def products_of(step: Any, batch: tuple[torch.Tensor, ...]) -> Counter:
    """The products one call of ``step(batch)`` runs, counted.

    Read from the profiler's recorded operator events (``kineto_results``), which carry
    each input's shape, dtype and scalar arguments on every torch the package supports;
    the higher-level ``FunctionEvent`` gained ``input_dtypes`` only after torch 2.11."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as recorded:
        step(batch)
    found: Counter = Counter()
    for event in recorded.profiler.kineto_results.events():
        if event.name() not in PRODUCTS:
            continue
        shapes = tuple(tuple(shape) for shape in event.shapes())
        dtypes = [d for d in event.dtypes() if d in DTYPE_NAMES]
        arguments = tuple(
            tuple(c) if isinstance(c, list) else c for c in (event.concrete_inputs() or [])
        )
        found[Product(event.name(), shapes, dtypes[0], arguments)] += 1
    return found


def time_layouts(product: Product, threads: int, min_run_time: float) -> dict[str, float]:
    """The median seconds of ``product`` run alone in each of its
    :meth:`~Product.layouts`, by layout."""
    timed = {}
    for layout in product.layouts():
        statement, scope = product.runner(layout)
        timer = benchmark.Timer(statement, globals=scope, num_threads=threads)
        timed[layout] = timer.blocked_autorange(min_run_time=min_run_time).median
    return timed


def fastest_layout(timings: Sequence[dict[str, float]]) -> str:
    """The layout whose median over the rounds' ``timings`` (each ``{layout: seconds}``)
    is the lowest: chosen once from all rounds, not round by round, so that a round's
    noise cannot pick its floor's layouts."""
    return min(timings[0], key=lambda layout: statistics.median(t[layout] for t in timings))


def summarize(rounds: Sequence[dict[str, float]]) -> dict[str, Any]:
    """The step against its floor over ``rounds`` (each ``{"step_seconds": ...,
    "floor_seconds": ...}``): the medians of the steps and of the floors, their ratio,
    and each round's own ratio with their range."""
    if not rounds:
        raise ValueError("summarize() needs at least one round")
    ratios = [one["step_seconds"] / one["floor_seconds"] for one in rounds]
    step = statistics.median(one["step_seconds"] for one in rounds)
    floor = statistics.median(one["floor_seconds"] for one in rounds)
    return {
        "step_seconds": step,
        "floor_seconds": floor,
        "step_over_floor": step / floor,
        "step_over_floor_range": [min(ratios), max(ratios)],
        "rounds": [dict(one, step_over_floor=ratio) for one, ratio in zip(rounds, ratios)],
    }


def measure(
    batch_size: int,
    repeats: int,
    threads: int,
    warmup: int,
    keep: bool,
    rounds: int,
    min_run_time: float,
) -> dict[str, Any]:
    """The floor and the step at ``batch_size`` (see the module): ``warmup`` steps, one
    step under the profiler to find the products, then ``rounds`` rounds, each
    ``repeats`` timed steps and then every product alone in each of its layouts."""
    config = dataclasses.replace(training_profile("paper"), batch_size=batch_size)
    data = load_dataset("mnist", train=True).subset(batch_size * (warmup + repeats + 1), seed=0)
    batches = list(
        data.batches(
            batch_size,
            shuffle=True,
            max_shift=config.max_shift,
            generator=torch.Generator().manual_seed(0),
        )
    )
    plan = plan_for(
        config,
        "cpu",
        sample=lambda: batches[0],
        make_model=lambda: build_model(config),
        keep_freed_memory=keep,
    )
    run = build_run(config, "cpu", plan)
    for batch in batches[:warmup]:  # Adam makes its state, the allocator its heap
        run.step(batch)
    found = products_of(run.step, batches[-1])
    steps, timings = [], {product: [] for product in found}
    for _ in range(rounds):
        seconds = []
        for batch in batches[warmup : warmup + repeats]:
            started = time.perf_counter()
            run.step(batch)
            seconds.append(time.perf_counter() - started)
        steps.append(statistics.median(seconds))
        for product in found:
            timings[product].append(time_layouts(product, threads, min_run_time))
    layouts = {product: fastest_layout(timings[product]) for product in found}
    measured = [
        {
            "step_seconds": step,
            "floor_seconds": sum(
                count * timings[product][n][layouts[product]] for product, count in found.items()
            ),
        }
        for n, step in enumerate(steps)
    ]
    rows, flops = [], 0
    for product, count in found.most_common():
        each = statistics.median(t[layouts[product]] for t in timings[product])
        flops += count * product.flops()
        rows.append(
            {
                "kernel": product.name,
                "shapes": product.shapes,
                "dtype": product.dtype,
                "count": count,
                "seconds_each": each,
                "layout": layouts[product],
                "seconds_by_layout": {
                    layout: statistics.median(t[layout] for t in timings[product])
                    for layout in product.layouts()
                },
                "gflops_each": product.flops() / 1e9,
                "gflop_per_s": product.flops() / each / 1e9,
            }
        )
    rows.sort(key=lambda row: -row["count"] * row["seconds_each"])
    summary = summarize(measured)
    return {
        "batch_size": batch_size,
        "plan": plan.to_dict(),
        "warmup_steps": warmup,
        "steps_per_round": repeats,
        **summary,
        "product_gflop": flops / 1e9,
        "step_gflop_per_s": flops / summary["step_seconds"] / 1e9,
        "floor_gflop_per_s": flops / summary["floor_seconds"] / 1e9,
        "products": rows,
    }


@dataclasses.dataclass(frozen=True)
class Options:
    """The floor under a training step: the matrix products and convolutions it runs,
    each timed alone."""

    batch_sizes: tuple[int, ...] = (64, 128)
    """the batch sizes whose steps are measured"""
    repeats: int = 9
    """timed steps per round (their median is the round's step)"""
    rounds: int = 8
    """rounds per batch size, each the steps then every product alone (the medians
    count)"""
    min_run_time: float = 0.25
    """seconds each product runs per layout and round (torch.utils.benchmark's
    blocked_autorange; the median of its blocks counts)"""
    warmup: int = 5
    """untimed steps first (Adam's state, the allocator's heap)"""
    keep_freed_memory: bool = True
    """keep freed memory in the process, as the trainer does; --no-keep-freed-memory:
    glibc's own settings, for comparison (the record: NAME-floor-released.json; a process
    of its own: once the heap holds the step's blocks, malloc reuses them whatever the
    settings say)"""
    record: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """write benchmarks/results/NAME-floor.json (None: print only)"""


def main(argv: Sequence[str] | None = None) -> int:
    args = tyro.cli(Options, args=argv, prog="python -m benchmarks.floor")
    threads = torch.get_num_threads()
    rates = cpu_matmul_rates(sizes=(2048, 4096), repeats=5)
    record: dict[str, Any] = header(command_line("benchmarks.floor", argv), "cpu")
    if args.keep_freed_memory:  # the setting the run makes itself, beside the process's
        record["allocator"] += "; freed memory kept by the run (capsnotes.fast.memory)"
    record |= {
        "threads": threads,
        "matmul_gflop_per_s": {
            "float32": rates.float32,
            "bfloat16": rates.bfloat16,
            "sizes": rates.sizes,
        },
        "steps": [
            measure(
                size,
                args.repeats,
                threads,
                args.warmup,
                args.keep_freed_memory,
                args.rounds,
                args.min_run_time,
            )
            for size in args.batch_sizes
        ],
    }
    for step in record["steps"]:
        precision = step["plan"]["precision"]
        best = record["matmul_gflop_per_s"]["bfloat16" if precision == "bfloat16" else "float32"]
        step["share_of_best_product_rate"] = step["step_gflop_per_s"] / best
        low, high = step["step_over_floor_range"]
        print(
            f"batch {step['batch_size']} ({precision}, {step['plan']['convolution']} "
            f"convolution): step {1e3 * step['step_seconds']:.0f} ms, floor "
            f"{1e3 * step['floor_seconds']:.0f} ms ({step['step_over_floor']:.2f}x, "
            f"{low:.2f}-{high:.2f} over {len(step['rounds'])} rounds), "
            f"{step['step_gflop_per_s']:.0f} GFLOP/s = "
            f"{step['share_of_best_product_rate']:.0%} of the reference {precision} product rate"
        )
    if args.record:
        kept = "" if args.keep_freed_memory else "-released"
        path = RESULTS / f"{args.record}-floor{kept}.json"
        write_json(path, record)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
