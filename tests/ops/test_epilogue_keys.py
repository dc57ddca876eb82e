"""A fused operator's key (a reduction's key and its epilogue) gives its
workload back with from_key, in a process that never made it: records and
frozen files name workloads by key."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from laytune import ops
from laytune.exceptions import UnknownWorkloadError
from laytune.ops import defined_workloads, from_key

CONV = ops.conv2d(1, 4, 5, 5, 8, 3, stride=1, padding=1)
BIAS_RELU = "+epilogue[max((acc + B[f]), 0.0)]"


def test_a_key_with_an_epilogue_rebuilds_its_workload_from_the_text() -> None:
    key = CONV.key + BIAS_RELU
    gc.collect()
    assert key not in defined_workloads()  # nothing holds one: it is rebuilt
    workload = from_key(key)
    assert workload.key == key
    assert [(b.name, b.shape) for b in workload.inputs] == [
        ("X", (1, 4, 5, 5)),
        ("W", (8, 4, 3, 3)),
        ("B", (8,)),
    ]
    inputs = workload.make_inputs(0)
    conv = CONV.reference({n: inputs[n] for n in ("X", "W")})["Y"].astype(np.float64)
    want = np.maximum(conv + inputs["B"][None, :, None, None], 0.0)
    np.testing.assert_allclose(workload.reference(inputs)["Y"], want, rtol=1e-5, atol=1e-6)
    # a residual read at every axis and a broadcast read at index 0
    residual = from_key(CONV.key + "+epilogue[((acc * S[0]) + R[n, f, oh, ow])]")
    assert residual.buffer("S").shape == (1,) and residual.buffer("R").shape == (1, 8, 5, 5)


@pytest.mark.parametrize(
    ("suffix", "why"),
    [
        ("+epilogue[(acc + B[f + 1])]", "shape of B is not known from its index f \\+ 1"),
        ("+epilogue[(acc + B[kh])]", "reduce axes"),
        ("+epilogue[(acc + B[f])", "not a reduction's key and an epilogue"),
    ],
)
def test_a_key_whose_epilogue_does_not_say_its_shapes_is_refused(suffix: str, why: str) -> None:
    with pytest.raises(UnknownWorkloadError, match=why):
        from_key(CONV.key + suffix)
    with pytest.raises(UnknownWorkloadError, match="not a reduction's key"):
        from_key(ops.relu((2, 3)).key + BIAS_RELU)
