"""Standard starts follow from the statement's structure and the device, not
from an operator's name."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import replace

import pytest

from laytune import ops
from laytune.device_info import (
    DeviceInfo,
    accumulator_registers,
    block_registers,
    vector_registers,
)
from laytune.layout import block, identity, panel
from laytune.ops import Workload
from laytune.search import _starts, _structure, params_of, standard_candidates
from laytune.search._starts import (
    _block_cycles,
    _blocked_twice,
    contraction_blocks,
    simd_lanes,
)
from laytune.search._structure import Contraction, Window, classify
from laytune.space import SearchSpace
from tests.search.devices import written_cpu


def _bmm(b: int = 4, m: int = 32, n: int = 64, k: int = 16) -> Workload:
    return Workload.define(
        "bmm",
        "C[b, i, j] += A[b, i, k] * B[b, k, j]",
        {"b": b, "i": m, "j": n, "k": k},
        {"A": (b, m, k), "B": (b, k, n)},
    )


def _depthwise(c: int = 32, h: int = 18) -> Workload:
    return Workload.define(
        "depthwise",
        "Y[n, c, oh, ow] += X[n, c, oh + kh, ow + kw] * W[c, kh, kw]",
        {"n": 1, "c": c, "oh": h - 2, "ow": h - 2, "kh": 3, "kw": 3},
        {"X": (1, c, h, h), "W": (c, 3, 3)},
        weights=("W",),
    )


def test_classify_reads_the_form_off_the_index_expressions() -> None:
    matmul = ops.matmul(32, 64, 16)
    assert classify(matmul) == Contraction("A", "B", rows=0, columns=1, reduce=(2,))
    assert classify(_bmm()) == Contraction("A", "B", rows=1, columns=2, reduce=(3,))
    conv = ops.conv2d(1, 16, 10, 10, 8, 3, stride=2, padding=1)
    assert classify(conv) == Window("X", "W", "Y", 1, 4, None, 3, (5, 6))
    assert classify(_depthwise()) == Window("X", "W", "Y", None, None, 1, 3, (4, 5))
    pointwise = ops.conv2d(1, 16, 8, 8, 32, 1)
    assert classify(pointwise) == Contraction("W", "X", rows=1, columns=3, reduce=(4,))
    assert classify(pointwise, windows_of_one=True) == Window("X", "W", "Y", 1, 4, None, 3, (5, 6))
    for other in (
        ops.transpose((8, 16)),
        ops.bias_add((1, 8, 4, 4)),
        ops.relu((8, 8)),
        ops.max_pool2d(1, 8, 8, 8, 2, 2),
        ops.sum((8, 8), axes=(1,)),
    ):
        assert classify(other) is None, other.name
    added = Workload.define(
        "plus", "C[i, j] += A[i, k] + B[k, j]", {"i": 4, "j": 4, "k": 4}, {"A": (4, 4), "B": (4, 4)}
    )
    assert classify(added) is None  # a sum of a sum is no contraction


def test_a_defined_statement_gets_the_same_starts_as_the_named_operator() -> None:
    device = written_cpu()
    named = SearchSpace(ops.matmul(64, 64, 32), device)
    defined = SearchSpace(
        Workload.define(
            "my_gemm",
            "C[i, j] += A[i, k] * B[k, j]",
            {"i": 64, "j": 64, "k": 32},
            {"A": (64, 32), "B": (32, 64)},
        ),
        device,
    )
    starts = standard_candidates(named, 100)
    assert len(starts) > 6
    assert [c.key for c in standard_candidates(defined, 100)] == [c.key for c in starts]


def test_no_operator_name_appears_in_the_starts() -> None:
    source = inspect.getsource(_starts) + inspect.getsource(_structure)
    for name in set(ops.constructors()) - set(ops.REDUCTIONS):
        assert f'"{name}"' not in source and f"'{name}'" not in source, name


@pytest.mark.parametrize(
    ("device", "lanes", "points", "rows", "columns", "unroll"),
    [(written_cpu(16), 16, 480, 8, 32, 2), (written_cpu(8), 8, 112, 6, 16, 4)],
)
def test_register_blocks_follow_the_device_lanes(
    device: DeviceInfo, lanes: int, points: int, rows: int, columns: int, unroll: int
) -> None:
    """Two vectors of columns by the most rows whose accumulators, row of
    the right operand, broadcast and a spare the register file holds: 8 on
    AVX-512's 32 registers, 6 on AVX's 16 (BLIS's 6 x 16). The reduce loop
    is unrolled to 32 FMAs an iteration: twice for 16 accumulators, four
    times for 12. A GPU's contraction takes another form
    (``tests/codegen/test_lockstep_starts.py``)."""
    assert simd_lanes(device) == lanes
    # the space's register budget: 30 zmm (AVX-512) or 14 ymm (AVX) of accumulators
    assert device.register_block_points() == points
    space = SearchSpace(ops.matmul(64, 64, 32), device)
    first = standard_candidates(space, 1)[0]
    knobs = ("block.i", "block.j", "vector", "unroll")
    assert tuple(first.knob(k) for k in knobs) == (rows, columns, lanes, unroll)
    assert first.layout("A") == block((64, 32), 0, rows)
    assert first.layout("B") == panel((32, 64), 1, columns)


@pytest.mark.parametrize(
    ("lanes", "blocks"),
    [
        (16, [(8, 1, 1), (8, 2, 1), (8, 3, 1)]),
        (8, [(8, 1, 1), (6, 2, 1)]),
        (4, [(8, 1, 1), (6, 2, 1)]),
    ],
)
def test_contraction_blocks_follow_the_register_file(
    lanes: int, blocks: list[tuple[int, int, int]]
) -> None:
    """For each width of vectors the tallest block of 8, 6 or 4 rows whose
    registers fit: AVX-512 holds 8 rows at every width; AVX's 16 registers
    hold 6 x 2L (12 accumulators, 2 vectors of B, a broadcast, a spare) but
    not 4 x 3L (17 registers), and no 3L block at all. Then the narrow ones."""
    derived = contraction_blocks(lanes)
    assert derived[: len(blocks)] == blocks
    assert all(b[2] < 1 or b[0] < 8 for b in derived[len(blocks) :])


@pytest.mark.parametrize(("depth", "unroll"), [(24, 2), (509, 2), (6, 2), (32, 2), (1, 1)])
def test_the_reduce_loop_unrolls_to_32_fmas_an_iteration(depth: int, unroll: int) -> None:
    """8 x 3L's 24 FMAs a step reach 32 an iteration unrolled twice, a
    prime depth too (its last step left to a loop of single steps); a loop
    of one step is not unrolled."""
    space = SearchSpace(ops.matmul(40, 1000, depth), written_cpu(16))
    first = standard_candidates(space, 1)[0]
    assert (first.knob("block.j"), first.knob("unroll")) == (48, unroll)
    assert params_of(space, first) is not None


@pytest.mark.parametrize(
    ("device", "columns", "block"),
    [
        (written_cpu(16), 257, (8, 48)),
        (written_cpu(16), 1000, (8, 48)),
        (written_cpu(16), 768, (8, 48)),
        (written_cpu(16), 64, (8, 32)),
        (written_cpu(8), 1000, (6, 16)),
        (written_cpu(8), 8, (8, 8)),
    ],
)
def test_three_vectors_of_columns_lead_where_they_fit(
    device: DeviceInfo, columns: int, block: tuple[int, int]
) -> None:
    """8 x 3L (24 accumulators) first where the registers hold it and the
    width wastes little of it; 64 columns would compute 96 so (8 x 2L
    first). AVX's registers hold 6 x 2L at most; 8 columns would waste half
    of its 16, so 8 x L leads there."""
    space = SearchSpace(ops.matmul(40, columns, 24), device)
    first = standard_candidates(space, 1)[0]
    assert (first.knob("block.i"), first.knob("block.j")) == block
    assert params_of(space, first) is not None


def test_a_user_defined_batched_matmul_starts_from_packed_panels() -> None:
    space = SearchSpace(_bmm(), written_cpu())
    starts = standard_candidates(space, 8)
    assert all(params_of(space, c) is not None for c in starts)
    first = starts[0]
    assert first.layout("A") == block((4, 32, 16), 1, 8)
    assert first.layout("B") == panel((4, 16, 64), 2, 32)
    assert (first.knob("vector_axis"), first.knob("block.i"), first.knob("block.j")) == ("j", 8, 32)


def test_a_user_defined_depthwise_convolution_vectorises_its_channels() -> None:
    space = SearchSpace(_depthwise(), written_cpu())
    first = standard_candidates(space, 1)[0]
    assert first.layout("X") == block((1, 32, 18, 18), 1, 16)
    assert first.layout("W") == block((32, 3, 3), 0, 16)
    assert first.layout("Y") == block((1, 32, 16, 16), 1, 16)
    assert (first.knob("vector_axis"), first.knob("vector"), first.knob("block.c")) == ("c", 16, 16)


@pytest.mark.parametrize(
    ("lanes", "height", "filters", "columns"),
    [
        (16, 56, 64, 4),
        (16, 13, 32, 7),
        (16, 28, 64, 4),
        (16, 30, 64, 6),
        (8, 56, 32, 3),
        (8, 28, 32, 3),
        (8, 13, 32, 3),
        (8, 16, 32, 3),
    ],
)
def test_a_windows_block_takes_the_fewest_cycles_per_fma_the_registers_allow(
    lanes: int, height: int, filters: int, columns: int
) -> None:
    """The derived block: columns by vectors of filters with the fewest
    cycles per FMA (FMAs, operand loads, the filters' stream, the
    accumulators' latency), a column past the row's end counted against it,
    within the register block and with the step's operands in the register
    file. AVX2: 3 columns by 4 vectors, 12 accumulators (as ONNX Runtime
    blocks; measured faster than 4 x 2, which waits on its 8 accumulators,
    on the 56-, 28- and 33-wide rows); AVX-512: 4 by 4, bound by its FMAs
    with none wasted on 56- and 28-wide rows (measured faster there than
    the 6 x 4 that loads fewer operands), 6 by 4 on 30 columns, which 4
    would overrun by two, and 7 by 2 on 13, which wastes one column."""
    conv = ops.conv2d(1, 64, height, height, 64, 3, padding=1)
    first = standard_candidates(SearchSpace(conv, written_cpu(lanes)), 1)[0]
    assert (first.knob("block.f"), first.knob("block.ow"), first.knob("vector")) == (
        filters,
        columns,
        lanes,
    )
    vectors = filters // lanes
    assert columns * vectors <= block_registers(lanes)
    assert columns * vectors + min(columns, vectors) + 1 <= vector_registers(lanes)
    # the filters' layout runs over the work-item's filters at each channel
    assert first.layout("W") == _blocked_twice((64, 64, 3, 3), 1, lanes, 0, filters)
    held = [
        c
        for c in (1, 2, 3, 4, 6, 7, 8, 12, 14, 16)
        if c <= height
        and c * vectors <= block_registers(lanes)
        and c * vectors + min(c, vectors) + 1 <= vector_registers(lanes)
    ]
    assert columns in held

    def cycles(c: int) -> float:
        waste = -(-height // c) * c - height
        return _block_cycles(c, vectors, lanes) * (1 + 2 * waste / height)

    assert all(cycles(columns) <= cycles(c) for c in held)


def test_the_filters_run_only_where_they_tile_the_filters() -> None:
    """160 filters hold 20 vectors of AVX2's 8 lanes: 4 per work-item
    (32 filters) tile them; on AVX-512's 16 lanes 4 vectors (64) would not,
    so the block takes 2 (32)."""
    conv = ops.conv2d(1, 96, 33, 33, 160, 3, padding=1)
    avx2 = standard_candidates(SearchSpace(conv, written_cpu(8)), 1)[0]
    assert (avx2.knob("block.f"), avx2.knob("block.ow")) == (32, 3)
    avx512 = standard_candidates(SearchSpace(conv, written_cpu(16)), 1)[0]
    assert avx512.knob("block.f") == 32 and 160 % avx512.knob("block.f") == 0


@pytest.mark.parametrize(
    ("height", "stride", "filters", "columns", "then"),
    [
        (14, 1, 16, 14, (32, 14)),
        (7, 1, 32, 7, (16, 7)),
        (14, 2, 32, 7, (16, 7)),
        (16, 1, 16, 16, (64, 4)),
    ],
)
def test_a_padded_window_whose_row_fits_the_accumulators_leads_with_the_whole_row(
    height: int, stride: int, filters: int, columns: int, then: tuple[int, int]
) -> None:
    """ResNet's 14- and 7-wide stages: one block of columns covers the row,
    so the window's edge tests are on constant columns; the vectors of
    filters fill the rest of the 16 accumulators (14 x 1, 7 x 2). The
    derived block follows it (on 14 columns, two vectors of the whole row:
    16 loads per 28 FMAs); on 7, where the derived block is the whole row
    itself, the table's next block does (one vector by 7)."""
    conv = ops.conv2d(1, 64, height, height, 64, 3, stride=stride, padding=1)
    space = SearchSpace(conv, written_cpu())
    first, *rest = standard_candidates(space, 4)
    assert (first.knob("block.f"), first.knob("block.ow"), first.knob("vector")) == (
        filters,
        columns,
        16,
    )
    assert filters // 16 * columns <= 16
    assert (rest[1].knob("block.f"), rest[1].knob("block.ow")) == then  # after the twin
    unpadded = ops.conv2d(1, 64, height, height, 64, 3, stride=stride, padding=0)
    lead = standard_candidates(SearchSpace(unpadded, written_cpu()), 1)[0]
    assert lead.knob("block.f") >= 32  # no edges to fold: the derived block leads


@pytest.mark.parametrize(
    ("height", "columns"), [(14, 14), (7, 7), (16, 3), (28, 3)], ids=["14", "7", "16", "28"]
)
def test_on_avx2_a_whole_padded_row_may_take_all_but_two_registers(
    height: int, columns: int
) -> None:
    """AVX2's 16 registers hold a 14-wide row's accumulators beside the
    vector of filters and the broadcast (more than the 12 of a comfortable
    block): ResNet's 14-wide stage leads with one vector of filters by the
    whole row, where blocks of part of it test the edges at run time (on
    a Zen 3 host, warm: 1.92-2.07 ms, where 3 x 4 took 2.29-2.37). A
    16-wide row does not fit, and takes the derived 3 x 4 block."""
    device = written_cpu(8)
    assert accumulator_registers(8) == 14 and device.register_block_points() == 14 * 8
    conv = ops.conv2d(1, 64, height, height, 64, 3, padding=1)
    first = standard_candidates(SearchSpace(conv, device), 1)[0]
    filters = 8 if columns == height else 32
    assert (first.knob("block.f"), first.knob("block.ow"), first.knob("vector")) == (
        filters,
        columns,
        8,
    )


def test_on_avx2_an_unpadded_row_of_14_takes_the_derived_block() -> None:
    """A 1 x 1 window on 14-wide rows has no edges to fold: the whole row
    (one vector by 14, 15 loads per 14 FMAs) would load more per FMA than
    the derived 3 x 4 block, which leads (on a Zen 3 host, warm: 0.87-0.95
    ms where the whole row took 1.15)."""
    pointwise = ops.conv2d(1, 1024, 14, 14, 256, 1)
    lead = standard_candidates(SearchSpace(pointwise, written_cpu(8)), 1)[0]
    assert (lead.knob("block.f"), lead.knob("block.ow")) == (32, 3)
    assert lead.layout("W") == block((256, 1024, 1, 1), 0, 32)


@pytest.mark.parametrize(
    ("height", "padding", "peeled"),
    [(28, 1, True), (56, 1, True), (7, 1, False), (14, 1, False), (28, 0, False)],
)
def test_a_padded_window_peels_its_border_where_a_row_has_an_interior_block(
    height: int, padding: int, peeled: bool
) -> None:
    """The interior's blocks read without the zero padding's tests where a
    row holds a block that touches neither edge; a 7-wide row is one block,
    a 14-wide one two, and an unpadded window has no tests to peel."""
    conv = ops.conv2d(1, 64, height, height, 64, 3, padding=padding)
    starts = standard_candidates(SearchSpace(conv, written_cpu()), 2)
    assert starts and all(start.knob("peel") is peeled for start in starts)


def test_few_input_channels_stay_unblocked_with_their_loop_innermost() -> None:
    stem = ops.conv2d(1, 3, 32, 32, 32, 7, stride=2, padding=3)
    space = SearchSpace(stem, written_cpu())
    starts = standard_candidates(space, 4)
    assert starts, "an image stem gets derived starts"
    first = starts[0]
    assert first.layout("X") == identity((1, 3, 32, 32))
    assert first.knob("reduce_order") == "kh,kw,c"
    assert first.knob("vector_axis") == "f"


def test_a_pointwise_convolution_gets_the_blocked_outer_product() -> None:
    space = SearchSpace(ops.conv2d(1, 64, 16, 16, 64, 1), written_cpu())
    starts = standard_candidates(space, 4)
    assert len(starts) == 4
    first = starts[0]
    assert first.layout("X") == block((1, 64, 16, 16), 1, 16)
    assert (first.knob("vector_axis"), first.knob("vector"), first.knob("split")) == ("f", 16, 16)


def test_a_convolution_blocks_its_channels_and_its_filters_each_by_its_own_lanes() -> None:
    """MobileNet-v2's projection of 144 channels to 24 filters: the channels
    in blocks of 16 as the depthwise convolution before it stores them, the
    filters (and the output) in blocks of 8, the widest that divide 24; the
    expansion of 24 channels to 144 the other way round."""
    device = written_cpu()
    assert simd_lanes(device) == 16
    project = ops.conv2d(1, 144, 28, 28, 24, 1)
    first = standard_candidates(SearchSpace(project, device), 1)[0]
    assert first.layout("X") == block((1, 144, 28, 28), 1, 16)
    assert first.layout("Y") == block((1, 24, 28, 28), 1, 8)
    assert (first.knob("vector"), first.knob("split")) == (8, 16)
    expand = ops.conv2d(1, 24, 28, 28, 144, 1)
    first = standard_candidates(SearchSpace(expand, device), 1)[0]
    assert first.layout("X") == block((1, 24, 28, 28), 1, 8)
    assert first.layout("Y") == block((1, 144, 28, 28), 1, 16)
    assert (first.knob("vector"), first.knob("split")) == (16, 8)


def _cached_cpu(cache: int, own: int = 0) -> DeviceInfo:
    return replace(
        written_cpu(),
        device_name="Written CPU with a cache",
        last_level_cache_size=cache,
        cache_size=own,
    )


# workloads made in the test, not at collection: a defined workload held for
# the session would answer the CLI's lookups of its name in other tests
@pytest.mark.parametrize(
    ("make", "cache", "own"),
    [
        (lambda: ops.matmul(4096, 4096, 4096), 32 << 20, 0),
        (lambda: ops.matmul(4096, 4096, 4096), 32 << 20, 2 << 20),
        (lambda: ops.matmul(4096, 4096, 4096), 2 << 20, 0),
        (lambda: ops.matmul(1024, 1024, 1024), 32 << 20, 1 << 20),
        (lambda: ops.matmul(1000, 1000, 1000), 32 << 20, 0),
        (lambda: _bmm(4, 256, 256, 512), 8 << 20, 0),
    ],
)
def test_contraction_starts_take_work_groups_whose_left_panels_fit_the_cache(
    make: Callable[[], Workload], cache: int, own: int
) -> None:
    """A group takes one block of columns and as many blocks of rows as keep
    their left panels in the cache the device reports (half the last level
    per compute unit where it reports none), two groups per compute unit."""
    workload = make()
    space = SearchSpace(workload, _cached_cpu(cache, own))
    form = classify(workload)
    assert isinstance(form, Contraction)
    reduced = workload.axes[form.reduce[0]].extent
    rows, columns = (workload.axes[a].name for a in (form.rows, form.columns))
    starts = [
        c for c in standard_candidates(space, 6) if dict(c.knobs).get("vector_axis") == columns
    ]
    assert starts
    budget = own or cache // 4
    for start in starts:
        knobs = dict(start.knobs)
        mr, nr = knobs[f"block.{rows}"], knobs[f"block.{columns}"]
        blocks = (
            -(-workload.axes[form.rows].extent // mr),
            -(-workload.axes[form.columns].extent // nr),
        )
        group = knobs[f"group.{rows}"]
        assert knobs[f"group.{columns}"] == 1
        fits = functools.partial(_group_fits, mr=mr, blocks=blocks, k=reduced, budget=budget)
        assert fits(group) and not fits(2 * group)
        others = [v for k, v in knobs.items() if k.startswith("group.")][:-2]
        assert all(v == 1 for v in others)


def _group_fits(group: int, mr: int, blocks: tuple[int, int], k: int, budget: int) -> bool:
    """The group's float32 left panels within the budget, no more items than
    blocks of rows (a group need not divide them: the NDRange rounds up), two
    groups per compute unit, 256 items at most."""
    rows, columns = blocks
    return (
        group * mr * k * 4 <= budget
        and group <= rows
        and rows * columns >= 4 * group
        and group <= 256
    )


def test_contraction_starts_leave_the_work_group_to_the_driver_without_a_known_cache() -> None:
    space = SearchSpace(ops.matmul(1024, 1024, 1024), written_cpu())
    starts = standard_candidates(space, 6)
    assert starts
    assert all(
        all(v == 0 for k, v in dict(c.knobs).items() if k.startswith("group.")) for c in starts
    )


def test_a_fused_residual_is_laid_out_as_the_output_so_the_vector_starts_stay() -> None:
    """A convolution with its residual add fused reads R at the output's own
    indices: each start that blocks the output (NCHW16c) lays R out the
    same, so vectors along the filters serve R too; left in NCHW, R refused
    every vector start and the fused kernel ran scalar (ResNet-18's basic
    blocks, 10x slower than their unfused convolutions)."""
    fused = Workload.define(
        "conv_residual",
        "Y[n, f, oh, ow] = max(sum(X[n, c, oh + kh - 1, ow + kw - 1] * W[f, c, kh, kw])"
        " + R[n, f, oh, ow], 0.0)",
        {"n": 1, "f": 32, "oh": 8, "ow": 8, "c": 16, "kh": 3, "kw": 3},
        {"X": (1, 16, 8, 8), "W": (32, 16, 3, 3), "R": (1, 32, 8, 8)},
        weights=("W",),
    )
    starts = standard_candidates(SearchSpace(fused, written_cpu()), 8)
    vectors = [c for c in starts if dict(c.knobs).get("vector", 1) > 1]
    assert vectors
    for start in vectors:
        layouts = dict(start.layouts)
        assert layouts["R"] == layouts["Y"]


def test_a_block_of_rows_is_no_taller_than_the_rows() -> None:
    """A classifier's one row (``Y[n, o] += X[n, k] * W[o, k]``, ``n = 1``)
    gets the outer product's starts with blocks of one row; blocks of 8 rows
    are no values of the space there, and it got plain starts only."""
    classifier = Workload.define(
        "classifier",
        "Y[n, o] += X[n, k] * W[o, k]",
        {"n": 1, "o": 96, "k": 32},
        {"X": (1, 32), "W": (96, 32)},
        weights=("W",),
    )
    starts = standard_candidates(SearchSpace(classifier, written_cpu()), 4)
    first = starts[0]
    assert (first.knob("vector_axis"), first.knob("vector"), first.knob("block.n")) == ("o", 16, 1)
    assert first.knob("block.o") == 48  # one row: three vectors of columns, 96 = 2 x 48
    assert str(first.layout("W").index_map) == str(panel((96, 32), 0, 48).index_map)
    assert first.layout("X").is_identity


@pytest.mark.parametrize(("lanes", "channels"), [(16, 4), (8, 2)])
def test_a_depthwise_tall_start_fills_the_registers_with_channels(
    lanes: int, channels: int
) -> None:
    """Columns the lanes do not divide (54) start from one full vector by 6
    rows, and as many channels as the registers hold beside them: 4 of
    AVX-512's 28 block registers, 2 of AVX2's 12."""
    first = standard_candidates(SearchSpace(_depthwise(c=64, h=56), written_cpu(lanes)), 1)[0]
    assert (first.knob("vector_axis"), first.knob("vector")) == ("ow", lanes)
    assert (first.knob("block.oh"), first.knob("block.c")) == (6, channels)


def test_a_left_operand_along_the_reduction_is_read_as_it_comes_next() -> None:
    """After the packed panels, the same kernel reads ``A[i, k]`` as it comes
    (its rows run along ``k``) and keeps ``B``'s panels, saving ``A``'s pack
    per call; then both as they come. ``A^T[k, i]`` runs along the rows
    (its panel of 8 rows is itself as it comes): no such start between."""
    first, second, third = standard_candidates(
        SearchSpace(ops.matmul(512, 1024, 256), written_cpu()), 3
    )
    assert not first.layout("A").is_identity and not first.layout("B").is_identity
    assert second.layout("A").is_identity and second.layout("B") == first.layout("B")
    assert third.layout("A").is_identity and third.layout("B").is_identity
    assert first.knob_map == second.knob_map == third.knob_map
    transposed = Workload.define(
        "at_b",
        "C[i, j] += A[k, i] * B[k, j]",
        {"i": 64, "j": 64, "k": 32},
        {"A": (32, 64), "B": (32, 64)},
    )
    packed, twin = standard_candidates(SearchSpace(transposed, written_cpu()), 2)
    assert not packed.layout("B").is_identity
    assert twin.layout("A").is_identity and twin.layout("B").is_identity


def test_a_right_operand_without_runs_is_packed_alone_in_the_twin() -> None:
    """The twin of a packed contraction start reads its operands as they
    are, but attention's ``K[b, j, k]`` holds no runs along the columns
    ``j``: the twin packs it alone, as the start does, and reads ``Q`` as it
    comes (one pack per call where the start has two)."""
    scores = Workload.define(
        "scores",
        "S[b, i, j] += Q[b, i, k] * K[b, j, k]",
        {"b": 2, "i": 16, "j": 32, "k": 8},
        {"Q": (2, 16, 8), "K": (2, 32, 8)},
    )
    space = SearchSpace(scores, written_cpu())
    first, twin = standard_candidates(space, 2)
    assert not first.layout("Q").is_identity and not first.layout("K").is_identity
    assert twin.layout("Q").is_identity and twin.layout("K") == first.layout("K")
    assert twin.knob_map == first.knob_map


@pytest.mark.parametrize(("lanes", "rows"), [(16, 16), (8, 8)])
def test_an_elementwise_statement_starts_from_full_vectors_in_rows(lanes: int, rows: int) -> None:
    """GELU: the device's full vectors along the innermost axis, as many rows
    of them per work-item as fill the block registers (AVX-512's 28: 16;
    AVX2's 12: 8), every layout as it is."""
    gelu = Workload.define(
        "gelu",
        "Y[i, j] = X[i, j] * (1.0 + erf(X[i, j] * 0.7071067811865476)) * 0.5",
        {"i": 64, "j": 128},
        {"X": (64, 128)},
    )
    first = standard_candidates(SearchSpace(gelu, written_cpu(lanes)), 1)[0]
    assert (first.knob("vector_axis"), first.knob("vector"), first.knob("block.j")) == (
        "j",
        lanes,
        lanes,
    )
    assert first.knob("block.i") == rows
    assert all(layout.is_identity for _, layout in first.layouts)


@pytest.mark.parametrize(
    ("shape", "perm", "tiles", "group"),
    [
        ((256, 512), None, 4, {"group.j": 1, "group.i": 32}),
        ((2, 32, 64, 48), (0, 2, 3, 1), 2, None),
    ],
)
def test_a_transpose_starts_from_register_tiles_with_streaming_stores(
    shape: tuple[int, ...], perm: tuple[int, ...] | None, tiles: int, group: dict[str, int] | None
) -> None:
    """A statement whose input runs along another axis than its output: full
    square tiles read along the input's contiguous axis and transposed in
    registers, every layout as it is, first with nontemporal stores where the
    compiler has them. On a CPU each work-item stores runs of 4 cache lines
    of the output's rows (4 tiles of 16 floats side by side, 2 where the
    rows hold only 2), in work-groups of 32 along the other axis (the grid
    keeps two groups per core); the plain-store twin next."""
    device = replace(written_cpu(16), builtins=("nontemporal_store",), cacheline_size=64)
    workload = ops.transpose(shape, perm)
    first, twin = standard_candidates(SearchSpace(workload, device), 2)
    out = workload.output
    inner = workload.axes[out.indices[-1].index].name
    across = workload.axes[workload.inputs[0].indices[-1].index].name
    assert all(layout.is_identity for _, layout in first.layouts)
    assert (first.knob("vector_axis"), first.knob("vector_transpose")) == (inner, across)
    assert first.knob(f"block.{across}") == first.knob("vector") == 16
    assert first.knob(f"block.{inner}") == tiles * 16
    assert first.knob("store") == "nontemporal"
    if group is not None:
        assert {k: first.knob(k) for k in group} == group
    assert twin.knob("store") == "plain"
    assert {k: v for k, v in twin.knobs if k != "store"} == {
        k: v for k, v in first.knobs if k != "store"
    }


def test_a_transpose_without_streaming_stores_keeps_the_register_tile() -> None:
    """Where the compiler has no nontemporal store, or the device does not
    say its cache line, the tile stays the first start, plainly stored, the
    work-group left to the driver when no line size is known."""
    first = standard_candidates(SearchSpace(ops.transpose((256, 512)), written_cpu(8)), 1)[0]
    assert (first.knob("vector_transpose"), first.knob("vector"), first.knob("store")) == (
        "i",
        8,
        "plain",
    )
    assert first.knob("group.j") == first.knob("group.i") == 0


@pytest.mark.parametrize("lanes", [16, 8])
def test_a_sum_whose_input_holds_the_vector_axis_outside_is_blocked_by_the_lanes(
    lanes: int,
) -> None:
    """Winograd's input transform: ``c`` is the output's contiguous axis and
    ``X`` holds it outermost, so the first start blocks ``X`` along ``c`` by
    the device's lanes (NCHW -> NCHWc), runs its vectors along ``c`` and
    holds the axis only the table reads (``x``) in registers; the other
    operands keep their layouts."""
    workload = Workload.define(
        "transform",
        "V[x, th, tw, c] += T[x, a, b] * X[c, th * 2 + a - 1, tw * 2 + b - 1]",
        {"x": 16, "th": 4, "tw": 4, "c": 32, "a": 4, "b": 4},
        {"T": (16, 4, 4), "X": (32, 8, 8)},
        weights=("T",),
    )
    assert classify(workload) is None
    first = standard_candidates(SearchSpace(workload, written_cpu(lanes)), 1)[0]
    assert first.layout("X") == block((32, 8, 8), 0, lanes)
    assert first.layout("V") == identity((16, 4, 4, 32))
    assert first.layout("T") == identity((16, 4, 4))
    assert (first.knob("vector_axis"), first.knob("vector"), first.knob("block.c")) == (
        "c",
        lanes,
        lanes,
    )
    assert first.knob("block.x") > 1


def test_a_sum_whose_output_holds_an_inputs_contiguous_axis_outside_blocks_the_output() -> None:
    """Winograd's output transform: ``M`` holds ``f`` innermost, ``Y`` holds
    it outside, so the first start blocks ``Y`` along ``f`` (NCHW16c) and
    runs its vectors along ``f``; ``M`` is read at ``oh // 2, ow // 2``, so
    a work-item takes a 2 x 2 block of outputs, each vector of ``M`` read
    once. A plain row sum (no product) keeps its vectors along the summed axis."""
    workload = Workload.define(
        "transform",
        "Y[f, oh, ow] += A[oh % 2, ow % 2, x] * M[x, oh // 2, ow // 2, f]",
        {"f": 32, "oh": 8, "ow": 8, "x": 16},
        {"A": (2, 2, 16), "M": (16, 4, 4, 32)},
        weights=("A",),
    )
    first = standard_candidates(SearchSpace(workload, written_cpu(16)), 1)[0]
    assert first.layout("Y") == block((32, 8, 8), 0, 16)
    assert first.layout("M") == identity((16, 4, 4, 32))
    assert (first.knob("vector_axis"), first.knob("vector")) == ("f", 16)
    assert (first.knob("block.oh"), first.knob("block.ow")) == (2, 2)
    rows = Workload.define("rows", "Y[i] += X[i, j]", {"i": 64, "j": 128}, {"X": (64, 128)})
    first = standard_candidates(SearchSpace(rows, written_cpu(16)), 1)[0]
    assert first.layout("X") == identity((64, 128)) and first.knob("reduce_vector") == 16
