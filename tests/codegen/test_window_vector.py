"""Vectors along a windowed axis (issue 27): a vector of outputs along ``ow``
reads ``X[.., ow + kw]`` as one unaligned run, which the space allows where
X's layout has unit stride along that dimension (``UnalignedVectorAccess``)
and the window stays inside X; the kernels match numpy."""

from __future__ import annotations

import numpy as np
import pytest

from laytune.codegen import lower
from laytune.layout import block, identity, offsets_on, pad_rows
from laytune.ops import Workload
from laytune.search import standard_candidates
from laytune.space import Candidate, SearchSpace, UnalignedVectorAccess, window_vector_dim
from tests.codegen.harness import Env, build, run

STATEMENT = "Y[n, c, oh, ow] += X[n, c, oh + kh, ow + kw] * W[c, kh, kw]"


def _depthwise() -> Workload:
    return Workload.define(
        "dw_window",
        STATEMENT,
        {"n": 1, "c": 4, "oh": 6, "ow": 8, "kh": 3, "kw": 3},
        {"X": (1, 4, 8, 10), "W": (4, 3, 3)},
        weights=("W",),
    )


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(27)
    return {
        "X": rng.standard_normal((1, 4, 8, 10)).astype(np.float32),
        "W": rng.standard_normal((4, 3, 3)).astype(np.float32),
    }


def _vector_knobs(space: SearchSpace, **more: object) -> tuple[dict, dict]:
    base = space.identity()
    knobs = dict(base.knobs)
    knobs.update({"vector": 4, "vector_axis": "ow", "block.ow": 8, "block.oh": 2, **more})
    return dict(base.layouts), knobs


def test_the_unaligned_check_wants_unit_stride_along_the_axis() -> None:
    shape = (1, 4, 8, 10)
    assert UnalignedVectorAccess(3, 4).check_layout(identity(shape)).ok
    assert UnalignedVectorAccess(3, 8).check_layout(pad_rows(shape, 6)).ok  # rows padded: still
    split = UnalignedVectorAccess(3, 2).check_layout(block(shape, 1, 2))  # NCHW2c: w at stride 2
    assert not split.ok and "not 1" in split.reasons[0]
    assert not UnalignedVectorAccess(2, 4).check_layout(identity(shape)).ok  # stride 10 along h


def test_a_window_index_takes_an_unaligned_vector_and_others_do_not() -> None:
    workload = _depthwise()
    x = workload.buffer("X")
    assert window_vector_dim(workload, x, 3) == 3  # ow + kw
    assert window_vector_dim(workload, workload.buffer("Y"), 3) == 3  # bare
    assert window_vector_dim(workload, workload.buffer("W"), 3) is None
    assert isinstance(window_vector_dim(workload, x, 5), str)  # along kw: ow is no reduce axis
    mirrored = Workload.define(
        "dw_mirrored",
        "Y[n, c, oh, ow] += X[n, c, oh + kh, 7 + kw - ow] * W[c, kh, kw]",
        {"n": 1, "c": 4, "oh": 6, "ow": 8, "kh": 3, "kw": 3},
        {"X": (1, 4, 8, 10), "W": (4, 3, 3)},
        weights=("W",),
    )
    assert isinstance(window_vector_dim(mirrored, mirrored.buffer("X"), 3), str)  # runs back
    strided = Workload.define(
        "dw_stride2",
        "Y[n, c, oh, ow] += X[n, c, 2 * oh + kh, 2 * ow + kw] * W[c, kh, kw]",
        {"n": 1, "c": 4, "oh": 4, "ow": 4, "kh": 3, "kw": 3},
        {"X": (1, 4, 9, 9), "W": (4, 3, 3)},
        weights=("W",),
    )
    assert isinstance(window_vector_dim(strided, strided.buffer("X"), 3), str)
    padded = Workload.define(
        "dw_padded",
        "Y[n, c, oh, ow] += X[n, c, oh + kh - 1, ow + kw - 1] * W[c, kh, kw]",
        {"n": 1, "c": 4, "oh": 8, "ow": 8, "kh": 3, "kw": 3},
        {"X": (1, 4, 8, 8), "W": (4, 3, 3)},
        weights=("W",),
    )
    reason = window_vector_dim(padded, padded.buffer("X"), 3)
    assert isinstance(reason, str) and "outside its extent" in reason


def test_the_space_allows_vectors_along_ow_where_x_is_contiguous(env: Env) -> None:
    workload = _depthwise()
    space = SearchSpace(workload, env.info)
    layouts, knobs = _vector_knobs(space)
    assert space.check(Candidate.make(layouts, knobs)).ok
    layouts["X"] = block((1, 4, 8, 10), 1, 2)  # NCHW2c
    verdict = space.check(Candidate.make(layouts, knobs))
    assert not verdict.ok
    assert any("UnalignedVectorAccess" in r or "not 1" in r for r in verdict.reasons)


@pytest.mark.parametrize("staged", [False, True])
def test_a_window_vector_kernel_matches_numpy(env: Env, staged: bool) -> None:
    workload = _depthwise()
    space = SearchSpace(workload, env.info)
    more = {"local_stage": True, "group.ow": 1, "group.oh": 4, "group.c": 1} if staged else {}
    layouts, knobs = _vector_knobs(space, **more)
    if staged:
        layouts["X.local"] = space.layouts("X.local")[0]
        layouts["W.local"] = space.layouts("W.local")[0]
    candidate = Candidate.make(layouts, knobs)
    assert space.check(candidate).ok
    program = lower(workload, candidate, env.info)
    assert "vload4(0, X" in program.source  # one unaligned vector load per run
    inputs = _inputs()
    outputs, _ = run(env, program, inputs, build(env, program))
    expected = workload.reference(inputs)["Y"]
    np.testing.assert_allclose(outputs["Y"], expected, rtol=1e-4, atol=1e-4)


def test_a_local_tile_that_breaks_runs_refuses_the_window_vector(env: Env) -> None:
    workload = _depthwise()
    space = SearchSpace(workload, env.info)
    layouts, knobs = _vector_knobs(
        space, local_stage=True, **{"group.ow": 1, "group.oh": 4, "group.c": 1}
    )
    xor = next(lay for lay in space.layouts("X.local") if lay.family == "row_xor")
    layouts["X.local"] = xor
    layouts["W.local"] = space.layouts("W.local")[0]
    verdict = space.check(Candidate.make(layouts, knobs))
    assert not verdict.ok
    assert any("UnalignedVectorAccess" in r for r in verdict.reasons)


def test_a_depthwise_window_starts_with_vectors_along_its_output_columns(env: Env) -> None:
    """The derived starts of a window whose channels are not reduced include
    vectors along ``ow`` over the layouts as they are, with a block of rows
    and columns per work-item; the space holds them and they match numpy."""
    workload = _depthwise()
    space = SearchSpace(workload, env.info)
    starts = standard_candidates(space, 16)
    along = [c for c in starts if c.knob("vector_axis") == "ow" and c.knob("block.oh") > 1]
    assert along, [c.knob_map for c in starts]
    first = along[0]
    assert all(layout.is_identity for _, layout in first.layouts)
    assert first.knob("block.ow") % first.knob("vector") == 0
    assert space.check(first).ok
    program = lower(workload, first, env.info)
    inputs = _inputs()
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_allclose(outputs["Y"], workload.reference(inputs)["Y"], rtol=1e-4, atol=1e-4)


def test_the_unaligned_check_on_the_reduced_box_agrees_with_every_element(env: Env) -> None:
    """Decided on the layout's reduced box, the check agrees with the steps
    between neighbours over the whole shape, for every layout the space
    offers X (some keep rows contiguous, some break them)."""
    workload = Workload.define(
        "dw_agree",
        STATEMENT,
        {"n": 1, "c": 8, "oh": 24, "ow": 24, "kh": 3, "kw": 3},
        {"X": (1, 8, 26, 26), "W": (8, 3, 3)},
        weights=("W",),
    )
    verdicts = set()
    for layout in SearchSpace(workload, env.info).layouts("X"):
        if layout.image_rank == 2:
            continue
        offsets = offsets_on(layout.index_map, layout.shape, layout.shape)
        for axis in (1, 2, 3):  # axis 0 has extent 1, under any width
            whole = bool(np.all(np.diff(offsets, axis=axis) == 1))
            assert UnalignedVectorAccess(axis, 4).check_layout(layout).ok == whole, (
                layout.describe(),
                axis,
            )
            verdicts.add((axis, whole))
    assert (3, True) in verdicts and (3, False) in verdicts
