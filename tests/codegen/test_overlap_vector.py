"""Vectors along an axis whose extent they do not divide (issue 27, depthwise).

A vector of N along an axis of extent E that N does not divide is allowed
where every buffer indexed by the axis holds unaligned runs of N (unit
stride along it, output included): the register block's origin along the
axis is ``min(b * B, E - B)``, so the last block overlaps the one before it
and stores the same values again; nothing is read or written outside. The
space's ``vector_overlap`` rule refuses what that cannot serve."""

from __future__ import annotations

import numpy as np
import pytest

from laytune.codegen import lower
from laytune.layout import block, identity, pad_rows, permute
from laytune.ops import Workload
from laytune.search import standard_candidates
from laytune.search._starts import simd_lanes
from laytune.space import Candidate, SearchSpace
from tests.codegen.harness import Env, build, run

DEPTHWISE = "Y[n, c, oh, ow] += X[n, c, oh + kh, ow + kw] * W[c, kh, kw]"


def _depthwise(columns: int, rows: int = 3) -> Workload:
    return Workload.define(
        f"dw_overlap_{columns}_{rows}",
        DEPTHWISE,
        {"n": 1, "c": 2, "oh": rows, "ow": columns, "kh": 3, "kw": 3},
        {"X": (1, 2, rows + 2, columns + 2), "W": (2, 3, 3)},
        weights=("W",),
    )


def _window_1d(extent: int) -> Workload:
    return Workload.define(
        f"win_overlap_{extent}",
        "Y[i] += X[i + k] * W[k]",
        {"i": extent, "k": 3},
        {"X": (extent + 2,), "W": (3,)},
        weights=("W",),
    )


def _elementwise(columns: int) -> Workload:
    return Workload.define(
        f"ew_overlap_{columns}",
        "Y[i, j] = X[i, j] * S[j] + 1.0",
        {"i": 3, "j": columns},
        {"X": (3, columns), "S": (columns,)},
    )


def _inputs(workload: Workload) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(27)
    return {
        b.name: rng.standard_normal(b.shape).astype(np.float32)
        for b in workload.buffers
        if b.role == "input"
    }


def _candidate(space: SearchSpace, **knobs: object) -> Candidate:
    base = space.identity()
    return Candidate.make(dict(base.layouts), {**dict(base.knobs), **knobs})


def _exact(env: Env, workload: Workload, candidate: Candidate) -> str:
    """Run ``candidate`` and compare every output with numpy (the outputs
    start as NaN, so a point never stored fails); return the source."""
    program = lower(workload, candidate, env.info)
    inputs = _inputs(workload)
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_allclose(outputs["Y"], workload.reference(inputs)["Y"], rtol=1e-5, atol=1e-5)
    return program.source


@pytest.mark.parametrize(
    ("columns", "vector", "blocked"),
    [(54, 16, 16), (54, 16, 32), (54, 8, 16), (23, 16, 16), (23, 8, 16), (17, 16, 16), (17, 8, 8)],
)
def test_a_depthwise_kernel_with_overlapping_column_blocks_matches_numpy(
    env: Env, columns: int, vector: int, blocked: int
) -> None:
    workload = _depthwise(columns)
    space = SearchSpace(workload, env.info)
    candidate = _candidate(
        space, vector_axis="ow", vector=vector, **{"block.ow": blocked, "block.oh": 3}
    )
    assert space.check(candidate).ok
    source = _exact(env, workload, candidate)
    assert f"min(ow_blk * {blocked}, {columns - blocked})" in source
    assert f"vload{vector}(0, X" in source and f"vstore{vector}(" in source
    assert " < " not in source.split("for (")[0]  # no guard along ow before the loops


@pytest.mark.parametrize(("extent", "vector", "blocked"), [(23, 8, 16), (17, 16, 16), (54, 16, 48)])
def test_a_one_dimensional_window_with_an_overlapping_last_block_matches_numpy(
    env: Env, extent: int, vector: int, blocked: int
) -> None:
    workload = _window_1d(extent)
    space = SearchSpace(workload, env.info)
    candidate = _candidate(space, vector_axis="i", vector=vector, **{"block.i": blocked})
    assert space.check(candidate).ok
    assert "min(i_blk" in _exact(env, workload, candidate)


@pytest.mark.parametrize(("columns", "vector", "blocked"), [(23, 8, 8), (54, 16, 32)])
def test_an_elementwise_kernel_with_an_overlapping_last_block_matches_numpy(
    env: Env, columns: int, vector: int, blocked: int
) -> None:
    workload = _elementwise(columns)
    space = SearchSpace(workload, env.info)
    candidate = _candidate(space, vector_axis="j", vector=vector, **{"block.j": blocked})
    assert space.check(candidate).ok
    assert "min(j_blk" in _exact(env, workload, candidate)


def _refused(space: SearchSpace, candidate: Candidate) -> str:
    verdict = space.check(candidate)
    assert not verdict.ok
    text = " | ".join(verdict.reasons)
    assert "vector_overlap" in text, text
    return text


def test_the_rule_refuses_layouts_without_unit_stride_along_the_axis(env: Env) -> None:
    workload = _depthwise(23)
    space = SearchSpace(workload, env.info)
    knobs = {"vector_axis": "ow", "vector": 8, "block.ow": 8}
    x = (1, 2, 5, 25)
    accepted = _candidate(space, **knobs)
    assert space.check(accepted).ok
    padded = Candidate.make({**dict(accepted.layouts), "X": pad_rows(x, 7)}, accepted.knob_map)
    assert space.check(padded).ok  # rows padded: unit stride within each row still
    for name, layout in (
        ("X", block(x, 1, 4)),  # NCHW4c, channels padded 2 -> 4: ow at stride 4
        ("X", permute(x, (0, 1, 3, 2))),  # transposed: ow at the stride of a column
        ("Y", permute((1, 2, 3, 23), (0, 1, 3, 2))),  # the output too
    ):
        layouts = {**dict(accepted.layouts), name: layout}
        text = _refused(space, Candidate.make(layouts, accepted.knob_map))
        assert "does not divide the extent 23" in text and "unaligned runs" in text


def test_the_rule_refuses_what_overlapping_blocks_do_not_support(env: Env) -> None:
    workload = _depthwise(23)
    space = SearchSpace(workload, env.info)
    knobs = {"vector_axis": "ow", "vector": 8, "block.ow": 8}
    assert "transposed" in _refused(space, _candidate(space, vector_transpose="oh", **knobs))
    assert "nontemporal" in _refused(space, _candidate(space, store="nontemporal", **knobs))
    staged = _candidate(
        space, local_stage=True, **{**knobs, "group.ow": 1, "group.oh": 1, "group.c": 1}
    )
    assert "staged" in _refused(space, staged)
    longer = space.check(_candidate(space, **{**knobs, "block.ow": 32}))  # E 23 < B 32
    assert not longer.ok and "block.ow 32 is not one of" in " ".join(longer.reasons)


def test_the_rule_is_counted_in_the_rejections(env: Env) -> None:
    workload = _window_1d(23)
    space = SearchSpace(workload, env.info)
    found = {r.constraint: r for r in space.rejections()}
    assert found["vector_overlap"].removed > 0
    assert found["vector_overlap"].example.startswith("vector_overlap: ")
    assert any(
        c.knob("vector") in (8, 16) for c in space.enumerate() if c.knob("vector_axis") == "i"
    )
    assert space.check(_candidate(space, vector_axis="i", vector=16, **{"block.i": 16})).ok


def test_a_vector_wider_than_the_extent_stays_refused(env: Env) -> None:
    workload = _window_1d(6)
    space = SearchSpace(workload, env.info)
    verdict = space.check(_candidate(space, vector_axis="i", vector=8, **{"block.i": 8}))
    assert not verdict.ok


def test_the_depthwise_starts_take_the_full_lanes_first_with_a_tall_block(env: Env) -> None:
    """Where the device's lanes do not divide the output columns, the first
    derived start is the hand kernel's shape: identity layouts, one vector of
    the full lanes along ``ow`` (its last block overlapping), a tall block
    of output rows; it matches numpy."""
    workload = _depthwise(23, rows=8)
    space = SearchSpace(workload, env.info)
    first = standard_candidates(space, 4)[0]
    assert all(layout == identity(layout.shape) for _, layout in first.layouts)
    lanes = first.knob("vector")
    assert first.knob("vector_axis") == "ow" and lanes == simd_lanes(env.info) and 23 % lanes
    assert first.knob("block.ow") == lanes and first.knob("block.oh") == 6
    _exact(env, workload, first)
