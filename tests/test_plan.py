"""How a run computes, decided by one pure function (capsnotes.fast.plan.plan_run): the
table of what it decides on a CPU and on four GPUs, for the trainer, --reference and a
compiled run; the format of every compute capability, present and future, against what
the cards compute natively; single choices overridden with the rest kept consistent, and
the combinations that cannot run refused with the reason."""

from __future__ import annotations

import pytest

from capsnotes.fast.plan import CHOICES, plan_run, version_tuple
from capsnotes.training.config import PROFILES, TrainConfig, profile

PAPER = PROFILES["paper"]
TORCH = "2.11.0+cu130"  # the GPU machine's torch, and the package's floor

CPU, P100, T4, A100, H100 = "cpu", (6, 1), (7, 5), (8, 0), (9, 0)

#: (device, variant) -> routing, convolution, precision, loss scaling, CUDA graph, fused
#: Adam, capturable Adam, compiled, timed on the CPU
TABLE = {
    (CPU, "trainer"): (
        "fused", "native", "float32", False, False, True, False, False,
        ("convolution", "precision"),
    ),
    (P100, "trainer"): ("fused", "native", "float32", False, True, True, True, False, ()),
    (T4, "trainer"): ("fused", "native", "float16", True, False, True, False, False, ()),
    (A100, "trainer"): ("fused", "native", "bfloat16", False, True, True, True, False, ()),
    (H100, "trainer"): ("fused", "native", "bfloat16", False, True, True, True, False, ()),
    (CPU, "reference"): (
        "reference", "native", "float32", False, False, False, False, False, (),
    ),
    (P100, "reference"): (
        "reference", "native", "float32", False, False, False, False, False, (),
    ),
    (T4, "reference"): (
        "reference", "native", "float32", False, False, False, False, False, (),
    ),
    (A100, "reference"): (
        "reference", "native", "float32", False, False, False, False, False, (),
    ),
    (H100, "reference"): (
        "reference", "native", "float32", False, False, False, False, False, (),
    ),
    (CPU, "compile"): (
        "fused", "native", "float32", False, False, True, False, True,
        ("convolution", "precision"),
    ),
    (P100, "compile"): ("fused", "native", "float32", False, True, True, True, True, ()),
    (T4, "compile"): ("fused", "native", "float16", True, False, True, False, True, ()),
    (A100, "compile"): ("fused", "native", "bfloat16", False, True, True, True, True, ()),
    (H100, "compile"): ("fused", "native", "bfloat16", False, True, True, True, True, ()),
}  # fmt: skip


def plan(device, variant="trainer", config=PAPER, **choices):
    device_type, capability = ("cpu", None) if device == CPU else ("cuda", device)
    if variant == "compile":
        choices["compile"] = True
    return plan_run(
        config, device_type, capability, TORCH, reference=variant == "reference", **choices
    )


@pytest.mark.parametrize(("device", "variant"), list(TABLE), ids=str)
def test_the_plan_of_each_device(device, variant):
    made = plan(device, variant)
    fields = (
        made.routing,
        made.convolution,
        made.precision,
        made.loss_scaling,
        made.cuda_graph,
        made.fused_adam,
        made.capturable_adam,
        made.compile,
        made.timed,
    )
    assert fields == TABLE[device, variant]
    # what the history records says the same
    record = made.to_dict()
    assert record["fast_paths"] is (variant != "reference")
    assert record["cuda_graphs"] is made.cuda_graph
    assert record["optimizer"].startswith("Adam, fused" if made.fused_adam else "Adam")
    assert ("capturable" in record["optimizer"]) is made.cuda_graph
    # freed memory is kept by a CPU's fast runs only (a GPU's allocator keeps its own)
    kept = device == CPU and variant != "reference"
    assert made.keep_freed_memory is kept and record["keep_freed_memory"] is kept


#: What a CUDA card computes natively, from NVIDIA's documentation rather than from the
#: code under test: bf16 arithmetic from compute capability 8.0 (Ampere; also the
#: threshold of ``torch.cuda.is_bf16_supported``), float16 tensor cores from 7.0 (Volta).
BF16_NATIVE, FP16_TENSOR_CORES = (8, 0), (7, 0)

#: Compute capabilities from Kepler to cards newer than any the code names: each side of
#: both thresholds, and unknown future majors.
CAPABILITIES = [
    (3, 7), (5, 2), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5), (8, 0), (8, 6), (8, 7),
    (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1),
]  # fmt: skip


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda c: f"{c[0]}.{c[1]}")
def test_a_gpu_trains_in_the_best_format_it_computes_natively(capability):
    """The trainer's plan for a card: a 16-bit format only where the card computes it
    natively; 16 bits wherever it has tensor cores (mixed precision is what they are
    for); and there bf16 rather than float16 wherever it has bf16 (float16 needs a loss
    scaler and is not graphed). Future cards count as having what 8.0 has."""
    made = plan(capability)
    if made.precision == "bfloat16":
        assert capability >= BF16_NATIVE
    if made.precision == "float16":
        assert capability >= FP16_TENSOR_CORES
    if capability >= FP16_TENSOR_CORES:
        assert made.precision != "float32"
    if capability >= BF16_NATIVE:
        assert made.precision == "bfloat16" and made.cuda_graph and not made.loss_scaling
    assert made.loss_scaling is (made.precision == "float16")


def test_without_mixed_precision_every_card_trains_in_float32_and_is_graphed():
    config = profile("paper", mixed_precision=False)
    for card in (P100, T4, A100, H100):
        made = plan(card, config=config)
        assert made.precision == "float32" and made.cuda_graph and not made.loss_scaling
    assert plan(CPU, config=config).timed == ("convolution",)  # bf16 is not even timed


def test_the_cnn_has_no_capsnet_layers_to_choose():
    cnn = PROFILES["cnn"]
    for device in (CPU, T4, H100):
        made = plan(device, config=cnn)
        assert made.routing is None and made.convolution is None and made.timed == ()
        assert "routing" not in made.to_dict()
    with pytest.raises(ValueError, match="the CNN has no routing to choose"):
        plan(H100, config=cnn, routing="fused")


def test_an_override_changes_one_choice_and_what_follows_from_it():
    """A benchmark row names one choice; the others stay the trainer's, and what follows
    from it follows: float32 on a T4 drops the loss scaler (and stays ungraphed, as the
    trainer there is); no graph on an H100 drops Adam's capturable state."""
    t4 = plan(T4, precision="float32")
    assert (t4.precision, t4.loss_scaling, t4.cuda_graph) == ("float32", False, False)
    h100 = plan(H100, cuda_graph=False)
    assert not h100.capturable_adam and h100.precision == "bfloat16"
    assert plan(H100, fused_adam=False).capturable_adam  # a graph needs it, fused or not
    cpu = plan(CPU, convolution="matmul")
    assert cpu.timed == ("precision",)  # what is given is no longer timed
    assert plan(CPU, precision="bfloat16", convolution="native").timed == ()
    chosen = plan(CPU, convolution="matmul-native-input")
    assert chosen.to_dict()["convolution"] == "matmul-native-input"


@pytest.mark.parametrize(
    ("device", "choices", "message"),
    [
        (T4, {"cuda_graph": True}, "float16 step with its loss scaler has not been run"),
        (H100, {"precision": "float16"}, "float16 step with its loss scaler"),
        (T4, {"compile": True, "cuda_graph": True}, "has not been run on a GPU yet"),
        (T4, {"precision": "bfloat16"}, "needs compute capability 8.0 or later; this GPU has 7.5"),
        (CPU, {"cuda_graph": True}, "a CUDA graph needs a CUDA device, not cpu"),
        (CPU, {"precision": "float16"}, "a cpu trains in float32 or bfloat16"),
        (H100, {"convolution": "matmul"}, "convolutions as matrix products are a CPU"),
        (H100, {"convolution": "matmul-native-input"}, "matrix products are a CPU"),
        (CPU, {"convolution": "im2col"}, "convolution must be one of"),
        (H100, {"keep_freed_memory": True}, "keeping freed memory is a CPU technique"),
        (H100, {"routing": "magic"}, "routing must be one of"),
        (H100, {"precision": "float8"}, "precision must be one of"),
        (H100, {"graph": False}, "unknown choice graph; a plan's choices are routing"),
    ],
    ids=lambda value: str(value)[:30],
)
def test_a_plan_that_cannot_run_is_refused_with_the_reason(device, choices, message):
    with pytest.raises(ValueError, match=message):
        plan(device, **choices)


def test_the_torch_version_decides_fused_adam_on_a_cpu():
    old = plan_run(PAPER, "cpu", None, "2.3.1")
    assert not old.fused_adam and plan_run(PAPER, "cpu", None, "2.4.0").fused_adam
    with pytest.raises(ValueError, match="torch 2.3.1 has no fused Adam on a CPU"):
        plan_run(PAPER, "cpu", None, "2.3.1", fused_adam=True)
    assert version_tuple("2.11.0+cu130") == (2, 11)
    with pytest.raises(ValueError, match="torch_version must look like"):
        version_tuple("latest")


def test_a_cuda_plan_needs_the_capability():
    with pytest.raises(ValueError, match="compute capability"):
        plan_run(TrainConfig(), "cuda")


#: For each choice a benchmark row may name: a device whose trainer's plan chooses
#: otherwise, and the value given instead.
GIVEN = {
    "routing": (H100, "reference"),
    "convolution": (CPU, "matmul"),
    "precision": (CPU, "bfloat16"),
    "cuda_graph": (H100, False),
    "fused_adam": (H100, False),
    "compile": (H100, True),
    "keep_freed_memory": (CPU, False),
}


@pytest.mark.parametrize("name", list(GIVEN))
def test_each_choice_given_is_what_the_plan_holds(name):
    """Every choice the plan names (CHOICES) can be given by name: the plan then holds
    the value given, not the one it would have chosen, and no longer times it."""
    assert set(GIVEN) == set(CHOICES)  # each named choice is tried here
    device, value = GIVEN[name]
    assert getattr(plan(device), name) != value
    made = plan(device, **{name: value})
    assert getattr(made, name) == value and name not in made.timed
