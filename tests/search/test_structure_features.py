"""The cost model's features follow the statement's structure, not its names:
records of one contraction or convolution line up with the next."""

from __future__ import annotations

from laytune import ops
from laytune.layout import block, identity
from laytune.ops import Workload
from laytune.search import candidate_features
from laytune.space import Candidate, baseline_knobs
from tests.space.conftest import make_device


def _conv_as_a_user_writes_it() -> Workload:
    """conv2d's statement with other buffer and axis names, the activations
    named so that they sort before the weights (conv2d's sort after)."""
    return Workload.define(
        "my_conv",
        "Out[b, o, y, x] += Act[b, i, y + ky - 1, x + kx - 1] * Wt[o, i, ky, kx]",
        {"b": 1, "o": 16, "y": 8, "x": 8, "i": 8, "ky": 3, "kx": 3},
        {"Act": (1, 8, 8, 8), "Wt": (16, 8, 3, 3)},
        weights=("Wt",),
    )


def _structural(features: dict[str, float]) -> dict[str, float]:
    """Every feature that does not name an axis (``knob.block.f``)."""
    return {k: v for k, v in features.items() if not k.startswith(("knob.block.", "knob.group."))}


def test_a_renamed_convolution_has_the_features_of_conv2d() -> None:
    device = make_device()
    named = ops.conv2d(1, 8, 8, 8, 16, 3, padding=1)
    mine = _conv_as_a_user_writes_it()
    knobs = {"vector_axis": "f", "vector": 4, "block.f": 8, "block.ow": 4}
    ours = {"vector_axis": "o", "vector": 4, "block.o": 8, "block.x": 4}
    a = Candidate.make(
        {
            "X": block((1, 8, 8, 8), 1, 4),
            "W": block((16, 8, 3, 3), 0, 4),
            "Y": block((1, 16, 8, 8), 1, 4),
        },
        {**baseline_knobs(named), **knobs},
    )
    b = Candidate.make(
        {
            "Act": block((1, 8, 8, 8), 1, 4),
            "Wt": block((16, 8, 3, 3), 0, 4),
            "Out": block((1, 16, 8, 8), 1, 4),
        },
        {**baseline_knobs(mine), **ours},
    )
    fa, fb = candidate_features(named, device, a), candidate_features(mine, device, b)
    assert fa["form"] == 2.0 and fa["block.filters"] == fb["block.filters"] == 3.0
    assert fa["in0.bytes"] == fb["in0.bytes"]  # the activations, whatever they are called
    assert _structural(fa) == _structural(fb)


def _baseline(workload: Workload) -> Candidate:
    layouts = {b.name: identity(b.shape) for b in workload.buffers}
    return Candidate.make(layouts, baseline_knobs(workload))


def test_the_form_tells_a_contraction_from_an_element_wise_statement() -> None:
    device = make_device()
    matmul = ops.matmul(16, 16, 16)
    features = candidate_features(matmul, device, _baseline(matmul))
    assert features["form"] == 1.0 and features["block.rows"] == features["block.columns"] == 0.0
    relu = ops.relu((16, 16))
    assert candidate_features(relu, device, _baseline(relu))["form"] == 0.0
