"""What lower emits: plain indexing for identity layouts, refusals with reasons,
readable sources, output padding, fp16."""

from __future__ import annotations

import numpy as np
import pytest

from laytune import layout as L
from laytune import ops
from laytune.codegen import GENERIC_DEVICE, lower
from laytune.exceptions import LayoutRejectedError
from laytune.space import Candidate
from tests.codegen.harness import Env, run


def identity(workload: ops.Workload, **knobs: object) -> Candidate:
    return Candidate.make({b.name: L.identity(b.shape) for b in workload.buffers}, knobs)


def test_identity_layouts_give_the_indexing_a_person_writes() -> None:
    workload = ops.matmul(20, 24, 12)
    source = lower(workload, identity(workload)).source
    assert "A[i * 12 + k]" in source
    assert "B[k * 24 + j]" in source
    assert "C[i * 24 + j] = acc0;" in source
    conv = ops.conv2d(1, 3, 10, 10, 6, 3, stride=1, padding=1)
    text = lower(conv, identity(conv)).source
    assert "W[f * 27 + c * 9 + kh * 3 + kw]" in text
    # the convolution's zero padding: a one-point block reads no step outside it
    assert "for (int kh = max(0, 1 - oh); kh < min(3, 11 - oh); ++kh)" in text
    assert "for (int kw = max(0, 1 - ow); kw < min(3, 11 - ow); ++kw)" in text
    assert "? X[" not in text


def test_a_window_edge_that_every_point_shares_bounds_the_loop_and_the_rest_unroll() -> None:
    """A block of 5 columns: the rows' edge is the same for every point, so it
    bounds the kh loop; each column has its own edge, so the kw loop keeps
    its tests and is unrolled whole, where the compiler makes them constants."""
    conv = ops.conv2d(1, 3, 10, 10, 6, 3, stride=1, padding=1)
    text = lower(conv, identity(conv, **{"block.ow": 5})).source
    assert "for (int kh = max(0, 1 - oh); kh < min(3, 11 - oh); ++kh)" in text
    assert "#pragma unroll\n" in text and "for (int kw = 0; kw < 3; ++kw)" in text
    assert "(oh + kh - 1) >= 0" not in text  # the loads test only their columns
    assert "((ow_blk * 5 + kw - 1) >= 0) ? X[" in text


#: Windows (statement, output extent) over an 8 x 8 input with zero padding.
WINDOWS = {
    "padded": ("Y[n, f, oh, ow] += X[n, c, oh + kh - 1, ow + kw - 1] * W[f, c, kh, kw]", 8),
    "strided": (
        "Y[n, f, oh, ow] += X[n, c, oh * 2 + kh - 2, ow * 2 + kw - 2] * W[f, c, kh, kw]",
        4,
    ),
    "dilated": (
        "Y[n, f, oh, ow] += X[n, c, oh + kh * 2 - 2, ow + kw * 2 - 2] * W[f, c, kh, kw]",
        8,
    ),
    "flipped": ("Y[n, f, oh, ow] += X[n, c, oh - kh + 1, ow - kw + 1] * W[f, c, kh, kw]", 8),
}


@pytest.mark.parametrize("window", list(WINDOWS))
@pytest.mark.parametrize("blocks", [{}, {"block.ow": 4}, {"block.oh": 2, "block.f": 2}])
def test_windows_bounded_by_their_edges_compute_what_numpy_does(
    env: Env, window: str, blocks: dict[str, int]
) -> None:
    statement, out = WINDOWS[window]
    workload = ops.Workload.define(
        f"window_{window}",
        statement,
        {"n": 1, "f": 4, "oh": out, "ow": out, "c": 3, "kh": 3, "kw": 3},
        {"X": (1, 3, 8, 8), "W": (4, 3, 3, 3)},
    )
    program = lower(workload, identity(workload, **blocks), env.info)
    inputs = workload.make_inputs(0)
    outputs, _ = run(env, program, inputs)
    np.testing.assert_allclose(outputs["Y"], workload.reference(inputs)["Y"], rtol=1e-5, atol=1e-5)


def test_layouts_and_knobs_are_written_as_comments() -> None:
    workload = ops.transpose((16, 8), (1, 0))
    candidate = Candidate.make(
        {"X": L.block((16, 8), 0, 4), "Y": L.row_xor((8, 16), 8)}, {"block.j": 2}
    )
    source = lower(workload, candidate).source
    assert "X[16, 8]: lambda i, j: [i // 4, j, i % 4]" in source
    assert "Y[8, 16]: lambda i, j: [i, j ^ (i % 8)]" in source
    assert "block.j=2" in source
    assert "__kernel void transpose_compute(" in source
    assert "__kernel void X_pack(" in source and "__kernel void Y_unpack(" in source


def test_a_rejected_candidate_is_refused_with_the_reason() -> None:
    workload = ops.bias_add((2, 6, 4, 8), axis=1)
    layouts = {
        "X": L.block((2, 6, 4, 8), 3, 3),  # padded along the vector axis
        "B": L.identity((6,)),
        "Y": L.identity((2, 6, 4, 8)),
    }
    vector = {"vector_axis": "l", "vector": 4, "block.l": 4}
    with pytest.raises(LayoutRejectedError, match=r"'X'.*VectorAccess"):
        lower(workload, Candidate.make(layouts, vector))
    with pytest.raises(LayoutRejectedError, match=r"all 0 \(the driver's\) or all set"):
        lower(workload, identity(workload, **{"group.l": 3}))
    # a group that does not divide its 8 items lowers: the NDRange rounds up to 9
    rounded = lower(workload, identity(workload, **{"group.l": 3, "group.k": 1, "group.j": 1}))
    assert rounded.compute[0].global_size == (9, 4, 12)
    with pytest.raises(LayoutRejectedError, match=r"block\.l 7 is not a multiple of the vector 4"):
        lower(workload, identity(workload, **{**vector, "block.l": 7}))


def test_a_written_image_is_refused() -> None:
    workload = ops.copy((2, 8, 4, 4))
    layouts = {"X": L.identity((2, 8, 4, 4)), "Y": L.texture((2, 8, 4, 4), 1)}
    with pytest.raises(LayoutRejectedError, match="Y"):
        lower(workload, Candidate.make(layouts))


def test_missing_knobs_take_the_defaults(env: Env) -> None:
    workload = ops.relu((8, 12))
    program = lower(
        workload, Candidate.make({"X": L.identity((8, 12)), "Y": L.permute((8, 12), (1, 0))})
    )
    assert program.compute[0].local_size is None
    inputs = workload.make_inputs(0)
    outputs, _ = run(env, program, inputs)
    np.testing.assert_array_equal(outputs["Y"], workload.reference(inputs)["Y"])


@pytest.mark.parametrize("order", ["logical", "Y"])
def test_an_output_pad_value_is_written_into_its_padding(env: Env, order: str) -> None:
    workload = ops.relu((6, 10))
    layout = L.block((6, 10), 1, 4)
    candidate = Candidate.make(
        {"X": L.identity((6, 10)), "Y": layout}, {"order": order}, {"Y": -1.0}
    )
    program = lower(workload, candidate, env.info)
    inputs = workload.make_inputs(0)
    outputs, physical = run(env, program, inputs)
    np.testing.assert_array_equal(outputs["Y"], workload.reference(inputs)["Y"])
    mask = layout.index_map.padding_mask(layout.shape).reshape(-1)
    assert (physical["Y"][mask] == -1.0).all()


def test_float16_enables_the_extension_and_needs_it() -> None:
    workload = ops.matmul(8, 8, 8, dtype="float16")
    source = lower(workload, identity(workload), GENERIC_DEVICE).source
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in source
    assert "__global const half* restrict A" in source
    plain = GENERIC_DEVICE.__class__(platform_name="p", device_name="no fp16")
    with pytest.raises(LayoutRejectedError, match="cl_khr_fp16"):
        lower(workload, identity(workload), plain)
    assert "cl_khr_fp16" not in lower(ops.matmul(8, 8, 8), identity(ops.matmul(8, 8, 8))).source


@pytest.mark.parametrize("vector", [1, 16])
def test_float16_kernels_compute_in_float_and_round_as_they_store(env: Env, vector: int) -> None:
    """Loads widen to float, the sum runs in float accumulators, the store
    rounds: a half accumulator over K = 512 strays by about 6e-3 of the
    largest output, float ones by one rounding of the result (5e-4)."""
    workload = ops.matmul(16, 32, 512, dtype="float16")
    knobs = {"vector": vector, "vector_axis": "j", "block.j": vector} if vector > 1 else {}
    program = lower(workload, identity(workload, **knobs), env.info)
    kernel = program.source.split("__kernel", 1)[1]
    assert f"float{vector if vector > 1 else ''} acc0" in kernel
    assert "half acc" not in kernel
    assert ("convert_half(" if vector == 1 else f"convert_half{vector}(") in kernel
    rng = np.random.default_rng(0)
    inputs = {d.name: rng.standard_normal(d.shape).astype(np.float16) for d in workload.inputs}
    out, _ = run(env, program, inputs)
    exact = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    error = np.abs(out["C"].astype(np.float64) - exact).max() / np.abs(exact).max()
    assert error < 1e-3


def test_following_a_buffer_walks_its_physical_order(env: Env) -> None:
    workload = ops.transpose((12, 20), (1, 0))
    layout = L.tile((12, 20), (4, 8))  # padded: 20 -> 24
    candidate = Candidate.make({"X": layout, "Y": L.identity((20, 12))}, {"order": "X"})
    program = lower(workload, candidate, env.info)
    assert program.compute[0].global_size == (layout.physical_size,)
    assert "return;" in program.source
    inputs = workload.make_inputs(0)
    outputs, _ = run(env, program, inputs)
    np.testing.assert_array_equal(outputs["Y"], workload.reference(inputs)["Y"])
