"""The ``prefetch`` knob: a work-group whose items share a block of an input
larger than the cache prefetches, item by item, the block the next
work-group reads. Offered by the statement's form and the device's cache,
refused where no next block or no shared block exists; the derived start
takes it; the prefetches cover the next block; the kernels match numpy.

The device's cache is set to 1 MiB here (a copy of the test device's
limits, in the CPU's form, with ``__builtin_prefetch``), so that small
workloads exceed it on any device. Only the kernels that keep their
prefetches need the device's own compiler to have the builtin (NVIDIA's
OpenCL has none); the others mark the prefetched addresses instead."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pyopencl as cl
import pytest

from laytune import ops
from laytune.codegen import _kernel as kernel_module
from laytune.codegen import lower
from laytune.codegen._loads import buffer_accesses
from laytune.codegen._nest import plan_nest
from laytune.codegen._prefetch import block_is_one_run
from laytune.device_info import DeviceInfo
from laytune.layout import panel as panel_layout
from laytune.layout import texture
from laytune.ops import Workload
from laytune.runners import build_source
from laytune.search import standard_candidates
from laytune.space import (
    Candidate,
    SearchSpace,
    check_candidate,
    complete_knobs,
    knob_names,
    prefetch_inputs,
    prefetch_worth,
)
from tests.codegen.harness import Env, build, cpu_form, run

CACHE = 1 << 20


def _info(env: Env) -> DeviceInfo:
    info = cpu_form(env.info)
    builtins = tuple(sorted({*info.builtins, "prefetch"}))
    return dataclasses.replace(info, cache_size=CACHE, builtins=builtins)


def _conv() -> Workload:
    """A convolution whose filters (64 -> 64, 3 x 3: 144 KiB here, 1.2 MiB
    at 192) a work-group's rows share: the next group reads the next block
    of filters, along NDRange dimension 2."""
    return ops.conv2d(1, 192, 7, 7, 192, 3, 1, 1)


def _two_reduce_axes() -> Workload:
    """A contraction over two reduce axes whose weights (2 MiB) the
    work-group's rows share."""
    return Workload.define(
        "two",
        "Y[i, j] += X[i, c, r] * W[c, r, j]",
        {"i": 40, "j": 1024, "c": 64, "r": 8},
        {"X": (40, 64, 8), "W": (64, 8, 1024)},
        weights=("W",),
    )


def test_the_form_says_which_inputs_a_work_group_shares() -> None:
    matmul = ops.matmul(64, 1024, 1024)
    # B where the groups walk along the columns (rows share it), A where
    # they walk down the rows (columns share it)
    assert prefetch_inputs(matmul) == ("A", "B")
    assert prefetch_worth(matmul, CACHE) == ("B",)  # 4 MiB; A's 256 KiB fit
    assert prefetch_worth(ops.matmul(64, 64, 64), CACHE) == ()  # 16 KiB: cached anyway
    assert prefetch_worth(matmul, 0) == ()  # a device that reports no cache
    assert prefetch_inputs(_two_reduce_axes()) == ("X", "W")
    assert prefetch_inputs(_conv()) == ("W",)  # X is read at oh + kh: not plain
    relu = Workload.define(
        "relu", "Y[i, j] = max(X[i, j], 0.0)", {"i": 64, "j": 64}, {"X": (64, 64)}
    )
    assert "prefetch" not in knob_names(relu)  # no reduction: no knob at all


def test_a_convolution_start_walks_its_groups_across_the_filters(env: Env) -> None:
    """The convolution's derived start leaves the work-groups to the driver;
    with the knob it takes one group over each output plane (7 rows: 8
    items, one block of columns), so that the next group computes the next
    block of filters and the plane's items share the filters' block."""
    workload = _conv()
    first = standard_candidates(SearchSpace(workload, _info(env)), 1)[0]
    assert first.knob("prefetch") is True
    assert (first.knob("group.ow"), first.knob("group.oh"), first.knob("group.f")) == (1, 8, 1)
    knobs = complete_knobs(workload, first.knob_map)
    (plan,) = plan_nest(workload, knobs, first.layout_map, {}, 64).prefetch
    assert workload.axes[plan.along].name == "f" and plan.shared == (0, 1)
    assert plan.ahead == first.knob("block.f")


def test_the_derived_start_prefetches_and_the_rules_refuse_what_cannot(env: Env) -> None:
    info = _info(env)
    # eight blocks of rows (8 x 8 on AVX-512, 8 x 6 on AVX2), one work-group tall
    probe = standard_candidates(SearchSpace(ops.matmul(64, 1024, 1024), info), 1)[0]
    workload = ops.matmul(8 * probe.knob("block.i"), 1024, 1024)
    first = standard_candidates(SearchSpace(workload, info), 2)[0]
    assert first.knob("prefetch") is True and first.knob("group.i") > 1

    def reasons(device: DeviceInfo, **knobs: object) -> str:
        changed = Candidate.make(first.layout_map, {**first.knob_map, **knobs})
        verdict = check_candidate(workload, changed, device)
        assert not verdict.ok
        return " ".join(verdict.reasons)

    assert "share" in reasons(info, **{"group.i": 1})
    assert "the driver's" in reasons(info, **{"group.i": 0, "group.j": 0})
    whole = -(-1024 // first.knob("block.j"))  # items along the columns (AVX-512's 48: 22)
    # one group covers the grid (its 8 blocks of rows too: a host of 16
    # cores splits them into two groups in the start)
    assert "no next one" in reasons(info, **{"group.j": whole, "group.i": 8})
    # the next group lies down the rows, and B's block is the same there
    assert "does not index" in reasons(info, **{"group.j": whole, "group.i": 1})
    assert "__builtin_prefetch" in reasons(dataclasses.replace(info, builtins=()))
    small = ops.matmul(64, 64, 64)
    assert standard_candidates(SearchSpace(small, info), 1)[0].knob("prefetch") is False


@pytest.mark.parametrize("workload", [ops.matmul(64, 1024, 1024), _two_reduce_axes(), _conv()])
def test_the_prefetches_cover_the_next_block(env: Env, workload: Workload) -> None:
    """Every line of the next work-group's block is prefetched by some item:
    the items' shares, taken ``per`` every ``every`` reduce steps, reach
    every prefetch index (two items over 512 steps of a block of 1536 lines,
    AVX-512's 48 columns: two a step)."""
    info = _info(env)
    for start in standard_candidates(SearchSpace(workload, info), 4):
        knobs = complete_knobs(workload, start.knob_map)
        nest = plan_nest(workload, knobs, start.layout_map, {}, 64)
        (plan,) = nest.prefetch
        steps = int(np.prod([loop.trips for loop in nest.loops]))
        items = int(np.prod([nest.grid[d].local for d in plan.shared]))
        taken = {
            min(rank * plan.share + s // plan.every * plan.per + r, plan.touches - 1)
            for rank in range(items)
            for s in range(0, steps, plan.every)
            for r in range(plan.per)
        }
        assert taken == set(range(plan.touches))
        assert plan.step * plan.touches == plan.block * steps  # the block over the whole reduction


@pytest.mark.parametrize(
    "workload",
    [ops.matmul(64, 1024, 1024), ops.matmul(64, 1536, 1024), _two_reduce_axes(), _conv()],
)
def test_a_block_is_walked_by_address_where_a_full_pass_finds_one_run(
    env: Env, workload: Workload
) -> None:
    """The symbolic test of the prefetched blocks agrees with the offsets of
    every element of every block a group may prefetch (each multiple of the
    register block, and the last group's own, clamped to the end): a packed
    panel whose columns split into whole blocks (1536) is one run per block,
    as are the convolution's blocked filters, and their prefetches add the
    line to the block's first offset with no division per line; 1024
    columns in blocks of 48 end in a block that straddles two panels."""
    info = _info(env)
    start = standard_candidates(SearchSpace(workload, info), 1)[0]
    nest = plan_nest(workload, complete_knobs(workload, start.knob_map), start.layout_map, {}, 64)
    (plan,) = nest.prefetch
    buf = workload.buffer(plan.buffer)
    layout = start.layout_map[plan.buffer]
    offsets = np.asarray(layout.index_map.flat_offsets(layout.shape)).reshape(buf.shape)
    along = [e.index for e in buf.indices].index(plan.along)  # type: ignore[attr-defined]
    extent = buf.shape[along]
    firsts = {*range(0, extent - plan.block + 1, plan.block), extent - plan.block}
    blocks = [np.take(offsets, range(f, f + plan.block), axis=along) for f in sorted(firsts)]
    runs = all(np.ptp(b) + 1 == b.size for b in blocks)
    assert block_is_one_run(workload, buffer_accesses(nest)[plan.buffer], plan) is runs
    compute = next(
        k for k in lower(workload, start, info).source.split("__kernel") if "_compute(" in k
    )
    assert "__builtin_prefetch(" in compute
    assert (f"{plan.buffer}_at % " not in compute) is runs
    if workload.key == ops.matmul(64, 1536, 1024).key or workload.name == "conv2d":
        assert runs  # what the address walk is for


@pytest.mark.parametrize("workload", [ops.matmul(64, 1024, 1024), _two_reduce_axes(), _conv()])
def test_prefetching_kernels_match_numpy(env: Env, workload: Workload) -> None:
    if not env.info.has_builtin("prefetch"):
        pytest.skip(f"{env.info.name}'s compiler has no __builtin_prefetch")
    info = _info(env)
    rng = np.random.default_rng(7)
    inputs = {
        b.name: rng.standard_normal(b.shape).astype(np.float32)
        for b in workload.buffers
        if b.role == "input"
    }
    expected = workload.reference(inputs)[workload.output.name]
    for start in standard_candidates(SearchSpace(workload, info), 3):  # packed, A as is, both
        assert start.knob("prefetch") is True
        program = lower(workload, start, info)
        # per plan once in the reduce loop's body (``per`` times), copied as
        # the loop is unrolled; or after the innermost loop, once per
        # ``every`` of its steps
        (plan,) = plan_nest(
            workload, complete_knobs(workload, start.knob_map), start.layout_map, {}, 64
        ).prefetch
        hoisted = re.search(r"ahead \+= (\d+);", program.source)
        per_pass = plan.per * (max(1, int(hoisted.group(1)) // plan.every) if hoisted else 1)
        assert program.source.count("__builtin_prefetch(") == start.knob("unroll") * per_pass
        outputs, _ = run(env, program, inputs, build(env, program))
        np.testing.assert_allclose(outputs[workload.output.name], expected, rtol=1e-4, atol=1e-3)


def _marks(env: Env, workload: Workload, start: Candidate, buffer: str) -> tuple[np.ndarray, int]:
    """The emitted addresses, not only the plan: each prefetch of ``buffer``
    in ``start``'s kernel turned into a store of 1 at its offset into an
    array shaped as the buffer's physical layout, and the whole grid run.
    (The offsets marked, the prefetches in the source.)"""
    program = lower(workload, start, _info(env))
    name = program.compute[0].kernel
    head, rest = program.source.split(f"void {name}(", 1)
    params, body = rest.split(") {", 1)
    body = body.split("\n}\n", 1)[0]
    marked, count = re.subn(
        rf"__builtin_prefetch\({buffer} \+ \(?(.*?)\)?\);", r"T[\1] = 1.0f;", body
    )
    source = f"{head}void {name}({params}, __global float* restrict T) {{{marked}\n}}\n"
    kernel = getattr(build_source(env.context, source), name)
    mf = cl.mem_flags
    names = [b.name for b in workload.buffers]
    buffers = [
        cl.Buffer(env.context, mf.READ_WRITE, size=4 * start.layout(n).physical_size) for n in names
    ]
    marks = np.zeros(start.layout(buffer).physical_size, np.float32)
    target = cl.Buffer(env.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=marks)
    launch = program.compute[0]
    kernel(env.queue, launch.global_size, launch.local_size, *buffers, target)
    cl.enqueue_copy(env.queue, marks, target)
    env.queue.finish()
    return np.flatnonzero(marks), count


def test_the_kernel_prefetches_every_line_of_every_next_panel(env: Env) -> None:
    """Over a packed ``B`` (panels of columns, 1024 x 1024), every
    work-group but the last marks the first element of every cache line of
    the next panel, the last its own panel again: so exactly the lines of
    every panel but the first (:func:`_marks`). The panels are as wide as
    the start's blocks of columns, which follow the device's lanes (32
    columns on AVX-512, 8 on AVX2), and the plan steps through a block by
    its rows where a row is shorter than a line (a panel's rows of 8
    floats: each line is prefetched twice, once per row). The columns are
    the first multiple of the block at or above 1024 (AVX-512's 48: 1056),
    so that no panel is padded."""
    info = _info(env)
    panels = standard_candidates(SearchSpace(ops.matmul(64, 1024, 1024), info), 4)
    wide = next(c for c in panels if not c.layout("B").is_identity).knob("block.j")
    columns = -(-1024 // wide) * wide
    workload = ops.matmul(64, columns, 1024)
    space = SearchSpace(workload, info)
    start = next(c for c in standard_candidates(space, 4) if not c.layout("B").is_identity)
    panel = start.knob("block.j")
    assert columns % panel == 0
    assert start.layout("B") == panel_layout((1024, columns), axis=1, factor=panel)
    touched, count = _marks(env, workload, start, "B")
    assert count == start.knob("unroll")  # one per copy of the unrolled body
    line = 16  # floats in a 64-byte line
    lines = np.unique(touched // line)
    # panel 1 on, every line of it, and no line of panel 0
    np.testing.assert_array_equal(lines, np.arange(1024 * panel // line, 1024 * columns // line))
    # one mark per line where a panel's row fills one (AVX-512's 32 columns),
    # one per row of the panel where a line holds several (AVX2's 8: two)
    per_line = np.bincount(touched // line)[lines]
    assert per_line.max() == max(1, line // panel)
    assert np.all(touched % min(panel, line) == 0)  # each at a row's start


def test_a_convolution_prefetches_after_its_channel_loop_the_same_lines(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A convolution's innermost reduce loop walks the 8 or 16 channels of
    a block: the prefetch's test goes after that loop, its counter stepping
    by the loop's length, not into each step (where it kept the loop from
    being unrolled). The lines prefetched (:func:`_marks`) are the same as
    step by step, all in the filters' blocks after the first work-group's
    (the filters are blocked outermost). Items on the plane's edge rows skip
    the window's steps outside it, so they take fewer of their shares."""
    workload = _conv()
    start = standard_candidates(SearchSpace(workload, _info(env)), 1)[0]
    split = start.knob("split")
    assert start.knob("prefetch") is True and split > 1
    program = lower(workload, start, _info(env))
    assert f"ahead += {split};" in program.source and "++ahead;" not in program.source
    after, _ = _marks(env, workload, start, "W")
    # every = 3: no loop's steps divide it, and it divides no power of two
    # (the 8 or 16 channels), so the test stays in each step
    monkeypatch.setattr(kernel_module, "prefetch_every", lambda w: 3 if w.nest.prefetch else 0)
    assert "++ahead;" in lower(workload, start, _info(env)).source
    each, _ = _marks(env, workload, start, "W")
    np.testing.assert_array_equal(after, each)
    first = start.knob("block.f") * 192 * 9  # the first group's filters, each over c, kh, kw
    assert after.size and after.min() >= first


def test_an_input_held_in_an_image_is_not_prefetched(env: Env) -> None:
    """An image is read through its sampler, not at an address: with ``B``
    as a texture the knob prefetches nothing, and the kernel builds and
    matches numpy (a tuning job drew such a candidate and failed to build it)."""
    info = _info(env)
    workload = ops.matmul(64, 1024, 1024)
    start = standard_candidates(SearchSpace(workload, info), 1)[0]
    layouts = {**start.layout_map, "B": texture((1024, 1024), axis=1, width_axis=0)}
    textured = Candidate.make(layouts, {**start.knob_map, "vector": 4, "block.j": 16})
    assert check_candidate(workload, textured, info).ok, check_candidate(workload, textured, info)
    program = lower(workload, textured, info)
    assert "__builtin_prefetch(" not in program.source
    rng = np.random.default_rng(8)
    inputs = {
        n: rng.standard_normal(s).astype(np.float32)
        for n, s in (("A", (64, 1024)), ("B", (1024, 1024)))
    }
    outputs, _ = run(env, program, inputs, build(env, program))
    np.testing.assert_allclose(outputs["C"], inputs["A"] @ inputs["B"], rtol=1e-4, atol=1e-3)
