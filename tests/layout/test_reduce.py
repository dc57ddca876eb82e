"""The facts decided without a pass over every element agree with that pass.

Quasi-periods (:mod:`laytune.layout._periods`), the windows the physical
shape is bounded on, injectivity and padding (closed form, by construction
or affine), and the reduced-shape equality of offsets are each compared with
a brute-force evaluation of the map at every logical index, over random maps,
every family and compositions of families, on shapes larger than the periods
(so that the reductions are exercised, not trivially the whole shape).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from laytune.exceptions import LayoutError, NegativeIndexError, NonInjectiveLayoutError
from laytune.layout import (
    IndexMap,
    Layout,
    block,
    compose,
    custom,
    identity,
    offsets_at,
    offsets_on,
    pad_every,
    probe_digest,
    reduced_box,
    row_major_offsets,
    row_xor,
    same_offsets,
    same_offsets_reshaped,
    swizzle,
    tile,
    translations,
)
from laytune.layout import _index_map as im
from laytune.layout import _inverse as inverse_module
from laytune.layout import _reduce as reduce_module
from laytune.layout._expr import Const, Expr, Var
from laytune.layout._periods import drift, window

from .strategies import every_family_layouts, exprs, maps_and_shapes, one_of_every_family

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def brute_outputs(m: IndexMap, shape: tuple[int, ...]) -> list[np.ndarray]:
    """Every output at every logical index (row-major), by plain evaluation."""
    grid = [a.reshape(-1) for a in np.indices(shape)]
    return [np.broadcast_to(np.asarray(o, dtype=np.int64), grid[0].shape) for o in m._eval(grid)]


def brute_offsets(m: IndexMap, shape: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """(flat offsets in logical order, physical shape), from the maxima."""
    outs = brute_outputs(m, shape)
    pshape = tuple(int(o.max()) + 1 for o in outs)
    flat = np.zeros(outs[0].shape, dtype=np.int64)
    for k, o in enumerate(outs):
        flat = flat * pshape[k] + o
    return flat, pshape


@st.composite
def large_maps(draw: st.DrawFn) -> tuple[IndexMap, tuple[int, ...]]:
    """Random maps on shapes larger than their periods."""
    shape = draw(st.lists(st.integers(1, 48), min_size=1, max_size=2).map(tuple))
    outputs = draw(st.lists(exprs(len(shape)), min_size=1, max_size=2))
    return IndexMap(tuple("ij"[: len(shape)]), tuple(outputs)), shape


@st.composite
def affine_maps(draw: st.DrawFn) -> tuple[IndexMap, tuple[int, ...]]:
    """Maps whose outputs are affine: ``c + sum(a_k * i_k)``."""
    shape = draw(st.lists(st.integers(1, 12), min_size=1, max_size=3).map(tuple))
    ndim = len(shape)
    outputs = []
    for _ in range(draw(st.integers(1, 3))):
        out: Expr = Const(draw(st.integers(0, 40)))
        for k in range(ndim):
            out = out + Var(k) * draw(st.integers(-3, 13))
        outputs.append(out)
    return IndexMap(tuple("ijk"[:ndim]), tuple(outputs)), shape


# -- quasi-periods -------------------------------------------------------------


@PROPERTY
@given(large_maps())
def test_drift_law_on_every_index(case: tuple[IndexMap, tuple[int, ...]]) -> None:
    """For every x with x + P e_k inside: e(x + P e_k) == e(x) + D."""
    m, shape = case
    ranges = [(0, s - 1) for s in shape]
    grid = np.indices(shape)
    for out in m.outputs:
        values = np.broadcast_to(np.asarray(_eval(out, grid)), shape)
        for k in range(len(shape)):
            period = drift(out, k, ranges)
            if period is None or period[0] >= shape[k]:
                continue
            p, d = period
            ahead = np.take(values, range(p, shape[k]), axis=k)
            here = np.take(values, range(0, shape[k] - p), axis=k)
            assert np.array_equal(ahead - here, np.full(here.shape, d)), (out, k, period)


def _eval(out: Expr, grid: np.ndarray) -> np.ndarray:
    from laytune.layout import evaluate

    return evaluate(out, [grid[k] for k in range(grid.shape[0])])


def test_drifts_of_the_family_forms() -> None:
    """The periods the families' outputs have, derived from their form."""
    ranges = [(0, 63), (0, 63)]
    i, j = Var(0), Var(1)
    assert drift(i // 4, 0, ranges) == (4, 1)
    assert drift(i % 8, 0, ranges) == (8, 0)
    assert drift(j ^ (i % 8), 1, ranges) == (8, 8)
    assert drift(j ^ (i % 8), 0, ranges) == (8, 0)
    assert drift(i * j, 0, ranges) is None  # the step along i depends on j
    flat = i * 64 + j
    sw = flat ^ (((flat >> 6) & 7) << 3)  # Sw<3,3,3>
    assert drift(sw, 1, ranges) == (512, 512)
    assert drift(sw, 0, ranges) == (8, 512)


def test_window_holds_one_period_where_the_extreme_lies() -> None:
    assert window(100, (8, 3), highest=True) == range(92, 100)
    assert window(100, (8, 3), highest=False) == range(8)
    assert window(100, (8, -3), highest=True) == range(8)
    assert window(100, None, highest=True) == range(100)
    assert window(5, (8, 1), highest=True) == range(5)


# -- physical shape, injectivity and padding -----------------------------------


@PROPERTY
@given(large_maps())
def test_physical_shape_on_windows_agrees_with_full_pass(
    case: tuple[IndexMap, tuple[int, ...]],
) -> None:
    """Every non-affine output bounded on its windows, however small the shape."""
    m, shape = case
    outs = brute_outputs(m, shape)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(im, "_WINDOW_FROM", 0)
        if min(int(o.min()) for o in outs) < 0:
            with pytest.raises(NegativeIndexError):
                m.physical_shape(shape)
            return
        assert m.physical_shape(shape) == tuple(int(o.max()) + 1 for o in outs)


@PROPERTY
@given(st.one_of(maps_and_shapes(), affine_maps()))
def test_injectivity_and_padding_agree_with_full_pass(
    case: tuple[IndexMap, tuple[int, ...]],
) -> None:
    m, shape = case
    outs = brute_outputs(m, shape)
    assume(min(int(o.min()) for o in outs) >= 0)
    flat, pshape = brute_offsets(m, shape)
    distinct = np.unique(flat).size
    assert m.is_injective(shape) == (distinct == flat.size)
    assert m.padding_count(shape) == int(np.prod(pshape)) - distinct
    if distinct < flat.size:
        with pytest.raises(NonInjectiveLayoutError) as err:
            m.validate(shape)
        a, b = err.value.first, err.value.second
        assert a != b and m.map_indices(a) == m.map_indices(b)


@PROPERTY
@given(affine_maps())
def test_affine_maps_are_decided_without_a_pass(case: tuple[IndexMap, tuple[int, ...]]) -> None:
    """Injectivity of an affine map with at most two axes longer than 1, or
    whose strides nest, needs no look at the elements."""
    m, shape = case
    outs = brute_outputs(m, shape)
    assume(min(int(o.min()) for o in outs) >= 0)
    decided, collision = im._affine_collision(m, shape, m.physical_shape(shape))
    if sum(s > 1 for s in shape) <= 2:
        assert decided
    if decided:
        flat, _ = brute_offsets(m, shape)
        assert (collision is None) == (np.unique(flat).size == flat.size)


@PROPERTY
@given(every_family_layouts())
def test_every_family_is_injective_and_padded_as_the_full_pass_says(layout: Layout) -> None:
    flat, pshape = brute_offsets(layout.index_map, layout.shape)
    assert np.unique(flat).size == flat.size  # injective by construction
    assert layout.physical_shape == pshape
    assert layout.padding_count == int(np.prod(pshape)) - flat.size
    assert layout.padding_fraction == layout.padding_count / int(np.prod(pshape))


def test_a_user_map_is_passed_over_once_per_map_and_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parsed map's validity is remembered by (map, shape), across instances."""
    text = "lambda i, j: [i // 3, j, i % 3]"
    shape = (30, 10)
    IndexMap.parse(text).validate(shape)
    passes = []
    check = im._ShapeFacts.check
    monkeypatch.setattr(im._ShapeFacts, "check", lambda self: passes.append(1) or check(self))
    for _ in range(3):
        layout = custom(shape, IndexMap.parse(text))
        assert layout.padding_count == 0
    assert passes == []


def test_a_family_layout_of_a_large_tensor_needs_no_array() -> None:
    """Validity, padding and the physical shape of family layouts on a
    16 M-element tensor are known without an array of its size."""
    shape = (4096, 4096)
    before = dict(im._HELD)
    for layout in (
        identity(shape),
        pad_every(shape, 8, 4),
        row_xor(shape, 8, 4),
        swizzle(shape, 3, 3, 9),
        compose(tile(block(shape, 1, 16).physical_shape, (8, 8)), block(shape, 1, 16)),
    ):
        assert layout.index_map.is_injective(shape)
        assert layout.padding_count >= 0
    assert dict(im._HELD) == before  # no offsets or occupancy array was made


# -- checks on reduced shapes --------------------------------------------------


@PROPERTY
@given(every_family_layouts())
def test_reduced_box_offsets_are_the_full_offsets_there(layout: Layout) -> None:
    flat, _ = brute_offsets(layout.index_map, layout.shape)
    full = flat.reshape(layout.shape)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reduce_module, "WHOLE_BELOW", 0)
        box, counts = reduced_box(layout.index_map, layout.shape, None, 4)
        moves = translations(layout.index_map, layout.shape, None, 4)
    assert counts is not None and moves is not None
    got = offsets_on(layout.index_map, layout.shape, box)
    assert np.array_equal(got, full[tuple(slice(0, b) for b in box)])
    for extent, b, c in zip(layout.shape, box, counts, strict=True):
        assert int(c.sum()) == extent and len(c) == b
    # every index is a box index plus multiples of the translations, offsets
    # moved by a multiple of the modulus
    index = np.indices(layout.shape)
    residue = tuple(
        index[k] % min(q, s) for k, (q, s) in enumerate(zip(moves, layout.shape, strict=True))
    )
    assert np.all((full - full[residue]) % 4 == 0)
    points = [index[k].reshape(-1) for k in range(len(layout.shape))]
    assert np.array_equal(offsets_at(layout.index_map, layout.shape, points), flat)


@PROPERTY
@given(every_family_layouts(), st.data())
def test_same_offsets_agrees_with_full_pass(layout: Layout, data: st.DataObject) -> None:
    other = data.draw(one_of_every_family(layout.shape))
    a, _ = brute_offsets(layout.index_map, layout.shape)
    b, _ = brute_offsets(other.index_map, other.shape)
    assert same_offsets(layout.index_map, other.index_map, layout.shape) == np.array_equal(a, b)
    assert same_offsets(layout.index_map, layout.index_map, layout.shape)
    if np.array_equal(a, b):
        assert probe_digest(layout.index_map, layout.shape) == probe_digest(
            other.index_map, other.shape
        )
    row_major = np.array_equal(a, np.arange(a.size))
    assert row_major_offsets(layout.index_map, layout.shape) == row_major


@st.composite
def _reshaped(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` with two neighbouring axes merged, one axis split by a
    divisor of its extent, or a unit axis put in front."""
    moves = ["front"] + (["merge"] if len(shape) > 1 else [])
    moves += ["split"] if any(e > 1 for e in shape) else []
    move = draw(st.sampled_from(moves))
    if move == "front":
        return (1, *shape)
    if move == "merge":
        k = draw(st.integers(0, len(shape) - 2))
        return (*shape[:k], shape[k] * shape[k + 1], *shape[k + 2 :])
    k = draw(st.sampled_from([k for k, e in enumerate(shape) if e > 1]))
    d = draw(st.sampled_from([d for d in range(1, shape[k] + 1) if shape[k] % d == 0]))
    return (*shape[:k], d, shape[k] // d, *shape[k + 1 :])


@PROPERTY
@given(every_family_layouts(max_extent=24), st.data())
def test_same_offsets_across_a_reshape_agrees_with_full_pass(
    layout: Layout, data: st.DataObject
) -> None:
    """A reshape keeps every element's place exactly when the flat offsets
    of both layouts, listed in each tensor's row-major order, are equal."""
    target = data.draw(_reshaped(layout.shape))
    other = data.draw(one_of_every_family(target))
    a, _ = brute_offsets(layout.index_map, layout.shape)
    b, _ = brute_offsets(other.index_map, other.shape)
    got = same_offsets_reshaped(layout.index_map, layout.shape, other.index_map, target)
    assert got == np.array_equal(a, b)


def test_same_offsets_across_a_reshape_holds_for_rows_blocked_alike() -> None:
    """BERT's 3-D activation blocked by 8 rows is its 2-D rows blocked by 8,
    on any extents, decided without a pass (8192^2 elements here)."""
    held = IndexMap.parse("lambda i, j, k: [i, j // 8, k, j % 8]")
    rows = IndexMap.parse("lambda j, k: [j // 8, k, j % 8]")
    plain = IndexMap.parse("lambda j, k: [j, k]")
    for batch, height, width in ((1, 128, 768), (2, 64, 768), (1, 8192, 8192)):
        shape = (batch, height, width)
        flat = (batch * height, width)
        assert same_offsets_reshaped(held, shape, rows, flat)
        assert not same_offsets_reshaped(held, shape, plain, flat)
    # 64 rows of 768 become 48 of 1024: a block of 8 rows is no longer one
    assert not same_offsets_reshaped(rows, (64, 768), rows, (48, 1024))
    assert not same_offsets_reshaped(rows, (64, 768), rows, (64, 769))  # not a reshape


def test_same_offsets_tells_apart_maps_that_differ_past_the_probe() -> None:
    """Two maps equal on the first indices of every axis but not after."""
    shape = (1, 64)
    plain = IndexMap.parse("lambda i, j: [i, j]")
    late = IndexMap.parse("lambda i, j: [i, j ^ ((j // 32) * (j % 2))]")
    assert probe_digest(plain, shape) == probe_digest(late, shape)
    assert not same_offsets(plain, late, shape)


# -- inverses verified on periods ----------------------------------------------


def _verdict(layout: Layout, inverse_map: IndexMap, whole: int) -> bool:
    """Whether ``inverse_from`` accepts ``inverse_map``, verifying shapes of
    more than ``whole`` elements on periods."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inverse_module, "VERIFY_WHOLE", whole)
        try:
            inverse_module.inverse_from(layout.index_map, layout.shape, inverse_map)
        except LayoutError:
            return False
        return True


@PROPERTY
@given(every_family_layouts(), st.integers(0, 3), st.integers(1, 9))
def test_inverse_verified_on_periods_agrees_with_every_index(
    layout: Layout, where: int, divisor: int
) -> None:
    """A family's inverse passes both ways; one made wrong at some indices
    fails both ways (or passes both, where the change vanishes on the shape)."""
    assert layout.inverse_map is not None
    assert _verdict(layout, layout.inverse_map, 0)
    outs = list(layout.inverse_map.outputs)
    k = where % len(outs)
    outs[k] = outs[k] + (Var(len(layout.inverse_map.params) - 1) // divisor) % 2
    wrong = IndexMap(layout.inverse_map.params, tuple(outs))
    assert _verdict(layout, wrong, 0) == _verdict(layout, wrong, 1 << 40)


def test_a_wrong_inverse_of_a_large_layout_is_refused_without_an_array() -> None:
    shape = (4096, 4096)
    layout = block(shape, 1, 16)
    before = dict(im._HELD)
    right = layout.inverse()  # verified on periods
    assert right.shape == shape and not right.has_padding
    wrong = IndexMap.parse("lambda p0, p1, p2: [p0, p1 * 16 + p2 + p1 // 200]")
    with pytest.raises(LayoutError, match="does not recover index 1"):
        inverse_module.inverse_from(layout.index_map, shape, wrong)
    assert dict(im._HELD) == before
