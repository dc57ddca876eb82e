"""Laws of the algebra, over random maps, random family compositions and shapes."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from laytune.exceptions import LayoutError
from laytune.layout import IndexMap, Layout, compose, pack, unpack
from laytune.layout import _expr as ex
from laytune.runners import build_source

from .strategies import family_layouts, maps_and_shapes, one_family

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def grid(shape: tuple[int, ...]) -> list[np.ndarray]:
    return [a.reshape(-1) for a in np.indices(shape)]


def outputs_on(m: IndexMap, shape: tuple[int, ...]) -> list[np.ndarray]:
    g = grid(shape)
    return [np.broadcast_to(np.asarray(o, dtype=np.int64), g[0].shape) for o in m._eval(g)]


@pytest.mark.slow
@PROPERTY
@given(maps_and_shapes())
def test_parse_of_str_is_identity(case: tuple[IndexMap, tuple[int, ...]]) -> None:
    m, _ = case
    assert IndexMap.parse(str(m)) == m
    assert IndexMap.from_json(m.to_json()) == m


@pytest.mark.slow
@PROPERTY
@given(maps_and_shapes())
def test_simplify_agrees_on_every_index(case: tuple[IndexMap, tuple[int, ...]]) -> None:
    m, shape = case
    simple = m.simplify(shape)
    for a, b in zip(outputs_on(m, shape), outputs_on(simple, shape), strict=True):
        assert np.array_equal(a, b), f"{m} simplified to {simple} on {shape}"


@PROPERTY
@given(family_layouts())
def test_pack_then_unpack_is_identity(layout: Layout) -> None:
    x = np.random.default_rng(0).standard_normal(layout.shape).astype(np.float32)
    physical = pack(x, layout.index_map, pad_value=-7.0)
    assert physical.shape == layout.physical_shape
    assert np.array_equal(unpack(physical, layout.index_map, layout.shape), x)
    mask = layout.index_map.padding_mask(layout.shape)
    assert np.all(physical[mask] == -7.0)
    assert int(mask.sum()) == layout.padding_count


@PROPERTY
@given(family_layouts(), st.data())
def test_compose_law_on_every_index(inner: Layout, data: st.DataObject) -> None:
    assume(len(inner.physical_shape) <= 4)
    try:
        outer = data.draw(one_family(inner.physical_shape))
        both = compose(outer, inner)
    except LayoutError:
        assume(False)
        raise
    g = grid(inner.shape)
    direct = both.index_map.map_indices(tuple(g))
    stepwise = outer.index_map.map_indices(inner.index_map.map_indices(tuple(g)))
    for a, b in zip(direct, stepwise, strict=True):
        assert np.array_equal(a, b)


@PROPERTY
@given(family_layouts())
def test_inverse_law_on_every_index(layout: Layout) -> None:
    inverse = layout.inverse()
    g = grid(layout.shape)
    physical = layout.index_map.map_indices(tuple(g))
    back = inverse.index_map.map_indices(tuple(np.asarray(p) for p in physical))
    for a, b in zip(back, g, strict=True):
        assert np.array_equal(np.broadcast_to(a, b.shape), b)
    pgrid = tuple(np.indices(layout.physical_shape))
    element = np.broadcast_to(inverse.is_element(pgrid), layout.physical_shape)
    assert np.array_equal(element, ~layout.index_map.padding_mask(layout.shape))


@PROPERTY
@given(family_layouts())
def test_derived_inverse_matches_the_family_inverse(layout: Layout) -> None:
    try:
        derived = layout.index_map.inverse(layout.shape)
    except LayoutError:
        # the flat CuTe swizzle is only invertible through its family
        assume(False)
        raise
    pgrid = tuple(a.reshape(-1) for a in np.indices(layout.physical_shape))
    mask = ~layout.index_map.padding_mask(layout.shape).reshape(-1)
    mine = derived.index_map.map_indices(pgrid)
    family = layout.inverse().index_map.map_indices(pgrid)
    for a, b in zip(mine, family, strict=True):
        a = np.broadcast_to(a, mask.shape)
        b = np.broadcast_to(b, mask.shape)
        assert np.array_equal(a[mask], b[mask])


# -- OpenCL emission, evaluated on the device --------------------------------

BATCH = 24


def _index_kernel(name: str, shape: tuple[int, ...], exprs: tuple[str, ...]) -> str:
    """A kernel with one work-item per logical index of ``shape`` (named x0, x1, ...)
    that stores each of ``exprs`` evaluated there."""
    lines = [f"__kernel void {name}(__global long *out) {{", "    const long g = get_global_id(0);"]
    rest = "g"
    for d in reversed(range(len(shape))):
        lines.append(f"    const long x{d} = {rest} % {shape[d]};")
        rest = f"({rest} / {shape[d]})"
    lines += [f"    out[g * {len(exprs)} + {t}] = {e};" for t, e in enumerate(exprs)]
    return "\n".join([*lines, "}"])


def _run_index_kernel(
    program: cl.Program, name: str, n: int, width: int, ctx: cl.Context, queue: cl.CommandQueue
) -> np.ndarray:
    out = np.empty(n * width, dtype=np.int64)
    buf = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, out.nbytes)
    getattr(program, name)(queue, (n,), None, buf)
    cl.enqueue_copy(queue, out, buf)
    return out


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases=st.lists(maps_and_shapes(), min_size=BATCH, max_size=BATCH))
def test_opencl_expression_agrees_on_every_index(
    cases: list[tuple[IndexMap, tuple[int, ...]]], cl_context: cl.Context, cl_queue: cl.CommandQueue
) -> None:
    # one program per example keeps compile time low; every map is checked on every index
    names = [f"x{d}" for d in range(3)]
    source = "\n\n".join(
        _index_kernel(f"map{k}", s, m.to_opencl(s, names[: len(s)], flat=False))
        for k, (m, s) in enumerate(cases)
    )
    program = build_source(cl_context, source)
    for k, (m, shape) in enumerate(cases):
        n = int(np.prod(shape))
        out = _run_index_kernel(program, f"map{k}", n, m.ndim_out, cl_context, cl_queue)
        expected = np.stack(outputs_on(m, shape), axis=1).reshape(-1)
        assert np.array_equal(out, expected), f"{m} on {shape}: {m.to_opencl(shape, flat=False)}"


def test_opencl_flat_offsets_of_families_on_device(
    cl_context: cl.Context, cl_queue: cl.CommandQueue
) -> None:
    from laytune.layout import block, pad_every, row_xor, swizzle, texture, tile

    layouts = [
        block((2, 12, 5, 7), 1, 4),
        texture((2, 8, 5, 6), 1),
        tile((33, 20), (8, 4)),
        pad_every((30, 16), 3, 5),
        row_xor((32, 64), 8, 8),
        swizzle((64, 64), 3, 3, 3),
    ]
    source = "\n\n".join(
        _index_kernel(
            f"f{k}",
            layout.shape,
            layout.index_map.to_opencl(layout.shape, [f"x{d}" for d in range(len(layout.shape))]),
        )
        for k, layout in enumerate(layouts)
    )
    program = build_source(cl_context, source)
    for k, layout in enumerate(layouts):
        shape = layout.shape
        groups = len(layout.flat_shape)
        n = int(np.prod(shape))
        out = _run_index_kernel(program, f"f{k}", n, groups, cl_context, cl_queue)
        expected = layout.index_map.flat_offset(tuple(grid(shape)), shape)
        expected = np.stack(expected if groups > 1 else (expected,), axis=1).reshape(-1)
        assert np.array_equal(out, expected), layout.describe()


def test_emitted_expressions_fit_the_chosen_integer_type() -> None:
    m = IndexMap.parse("lambda i, j: [i * 100000 + j]")
    assert m.index_ctype((50000, 100000)) == "long"
    assert ex.fits_int32(m.outputs[0], m.ranges((10, 10)))
