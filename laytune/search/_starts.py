"""Standard starts: the candidates people write by hand, tried before a sampler.

A space of billions of candidates is searched from the kernels that experts
would write first, so that a sampler refines good points instead of hunting
for them:

* **register-blocked classics**: matmul with packed panels (A as
  ``[i // MR, k, i % MR]``, B as ``[j // NR, k, j % NR]``) and an MR x NR
  block of C per work-item with ``floatN`` accumulators (BLIS's micro-kernel
  shape, two vectors wide where the registers hold them), in work-groups that
  share one B panel and keep their A panels in the device's cache
  (:func:`_panel_group`), then with the left operand as it comes where it
  runs along the reduction (:func:`_reduce_innermost`), then on row-major
  operands; a direct conv2d on NCHW[x]c
  activations and OIHW[x]i[x]o weights, vectors along the output channels
  (one or two vectors of them per work-item), a block of output columns per
  work-item, and the input channels blocked
  around the kernel window (``c // x, kh, kw, c % x``), as oneDNN and MLAS do.
  Where the lanes do not divide the output's columns, a contraction keeps
  full vectors with an overlapping last block over operands that hold runs
  from any start; a window that reads inside its activations also runs
  vectors along the output's rows over every layout as it is; blocks fill
  the device's vector registers (:func:`_filling`). A contraction with
  too few output columns to fill a vector (a matrix-vector product) first
  computes a block of rows' dot products per work-item, in vectors along
  the reduce axis (``reduce_vector``), as a row reduction does. An element-wise
  statement runs full vectors along its innermost axis, rows of them per
  work-item; one whose input runs along another axis (a transpose) reads
  square tiles of full vectors, transposes them in registers and stores
  them with nontemporal stores, in work-groups sized by the cache line
  (:func:`_stream_group`).
* **plain layouts with common knobs**: identity, each 2-D operand
  transposed, NHWC and NCHW4c, each with a few register blocks and vectors
  along the innermost axis, and square blocks whose inputs that are not
  contiguous along it are transposed in registers (``vector_transpose``).

A start whose work-groups share a block of an input larger than the
device's cache (a matmul's groups walking down the rows under one panel of
its weights) prefetches the next group's block (the ``prefetch`` knob,
where the space offers it): on BERT's FFN matmul the generated kernel took
1.79 against 1.92 ms warm and 1.91 against 2.47 ms with its weights in
memory, as they are in a model.

A conversion's space (a few hundred kernels) starts from a few kernels of
each kind taking turns: a square register tile, a ``__local`` tile with as
many items per work-item as vector lanes, a gather, nontemporal stores before
plain ones, widest vectors first (:func:`conversion_starts`): on Intel's
CPU runtime the 16 x 16 tile with nontemporal stores is the fastest NCHW16c
unpack out of cache (``bench.nchw16c_profile``), and 24 TPE trials over 394
candidates missed it.

Only candidates the space holds are kept (they are replayed through
:func:`~laytune.search._strategies.params_of`, so the sampler learns from them).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from laytune.device_info import (
    DeviceInfo,
    accumulator_registers,
    block_registers,
    vector_registers,
)
from laytune.layout import BinOp, Const, Layout, Var, block, compose, panel, permute, variables
from laytune.search._strategies import params_of
from laytune.search._structure import Contraction, Window, classify, layout_critical
from laytune.space import (
    Candidate,
    SearchSpace,
    baseline_knobs,
    block_knob,
    dtype_bytes,
    grid_dims,
    group_knob,
    parse_reduce_order,
    prefetch_worth,
    reads_outside,
    reduce_order_text,
    walk_dims,
)

__all__ = ["conversion_starts", "standard_candidates"]

# Register blocks of a contraction, in units of the device's float lanes L
# (:func:`simd_lanes`): MR rows by NR columns, ``floatNR`` accumulators. Per
# step of k a block holds MR x NR / L accumulators, NR / L vectors of the right
# operand and one broadcast of the left in registers, and keeps one register
# spare (:func:`_held`). For each width of 1, 2 or 3 vectors the tallest block
# of 8, 6 or 4 rows that fits leads (:func:`contraction_blocks`), ranked by the
# loads each FMA takes (:func:`_contraction_order`). On AVX-512's 32 registers
# that is 8 x 3L, 8 x 2L, 8 x L. On 2 Xeon cores (two FMA units each, Intel's
# CPU runtime) 8 x 3L beat 8 x 2L at every size measured: over packed panels
# 327-332 against 307-321 GFLOP/s at 768^3 and 1536^3; on the operands as they
# are 281 against 245 at 1000^3 and 271 against 231 on 127 x 257 x 509, whose
# rows of 257 leave every vector of B straddling two cache lines (6 x 4L and 7
# x 4L were slower there: 218 and 192). 8 x 2L took 323 against 255 GFLOP/s
# for 8 x L at 2048^3, and 8 x L over packed panels was faster than 6 x L (0.71
# against 0.97 ms at 512^3). On AVX2's 16 registers the rule gives 6 x 2L
# (BLIS's block; 4 x 3L would take all 16) and 8 x L: on a Zen 3 host the
# BERT FFN's 128 x 3072 x 768 took 3.7-4.1 ms in 6 x 2L, 4.8-6.8 in 4 x 3L and
# 5.4-6.5 in 8 x L (each with its best unroll, :func:`_unroll`). Narrower
# blocks follow for outputs too small for these.
_BLOCK_ROWS = (8, 6, 4)
_BLOCK_VECTORS = (1, 2, 3)
_NARROW_BLOCKS = (
    (6, 1, 1),
    (4, 1, 1),
    (8, 0.5, 0.5),
    (6, 1, 0.5),
    (4, 0.5, 0.5),
)
# Vector FMAs per iteration of a contraction's unrolled reduce loop: the
# loop's own instructions (a compare, a branch, the operands' addresses) stay
# a small share of it. The Xeon's searches chose unroll 2 for 8 x 2L (16 FMAs
# a step); on Zen 3 the FFN's 6 x 2L (12) ran 2.0x faster unrolled 4 times
# than once (3.7-4.1 against 7.7-8.7 ms), and 8 x L (8) 1.2x unrolled 8 times.
_FMAS_PER_ITERATION = 32
# A window's (channel block, filters per work-item, output columns per
# work-item, vector), channel blocks, filters and vectors in lanes: first two
# vectors of filters by 4 columns (8 accumulators, the AVX-512 direct
# convolution's tile: 0.50 ms on the default conv2d (1,64,56,56) x 64 where the
# best one-vector start took 0.91). The columns are a target: the block
# taken is the one :func:`_columns` derives from the output's width.
_WINDOW_BLOCKS = (
    (1, 2, 4, 1),
    (1, 1, 4, 1),
    (1, 1, 4, 0.5),
    (1, 1, 6, 1),
    (0.5, 0.5, 8, 0.5),
    (1, 1, 7, 1),
    (0.5, 0.5, 4, 0.5),
)
# A reduction's (vector along the reduce axis, accumulators per point,
# points per work-item), vectors in lanes: each work-item reads its row in
# vectors, two or four independent accumulators (on the AVX-512 host a row
# max of 2048 x 1024 took 0.10-0.17 ms so, where one vector per point took
# 0.27 ms, and one row per vector lane, as the CPU runtime vectorises a
# scalar reduction across work-items, 3-14 ms)
_REDUCTION_BLOCKS = ((1, 2, 1), (1, 4, 1), (0.5, 4, 1), (0.5, 2, 1), (1, 2, 2), (1, 1, 1))
# The same for a contraction with too few columns to fill a vector (a
# matrix-vector product): each work-item takes a block of rows, whose dot
# products share each vector of the right operand (4096 x 4096 by a vector,
# 2 Zen 3 cores: 4 rows, two accumulators each, 1.65 ms; 8 rows of two-vector
# runs 1.70; one row per item 2.5-3.0; numpy 2.1-2.4)
_DOT_BLOCKS = ((1, 2, 4), (2, 1, 8), (1, 1, 4), (2, 2, 4), (1, 1, 8))
# knob settings tried with each plain layout, along the innermost spatial axis
# ("across": an N x N block whose inputs are read along the next axis out and
# transposed in registers, where some input is not contiguous along the innermost)
_PLAIN_PROFILES: tuple[dict[str, int], ...] = (
    {"block": 4},
    {"block": 8},
    {"block": 4, "vector": 4},
    {"block": 8, "vector": 8},
    {"block": 8, "vector": 8, "across": 8},
    {"block": 16, "vector": 16, "across": 16},
    {"block": 4, "vector": 4, "across": 4},
)
# the largest work-group extent the space offers along one NDRange dimension
_GROUP_LIMIT = 256


def simd_lanes(device: DeviceInfo) -> int:
    """Float lanes of one vector register of ``device`` (:meth:`DeviceInfo.float_lanes`)."""
    return device.float_lanes()


def _dividing(lanes: int, extent: int) -> int:
    """The widest of ``lanes``, ``lanes / 2``, ... (down to 4) that divides
    ``extent``: vectors must tile the axis they run along."""
    while lanes > 4 and extent % lanes:
        lanes //= 2
    return lanes


def _lanes(fraction: float, lanes: int) -> int:
    return max(1, int(fraction * lanes))


def _fits(accumulators: int, lanes: int) -> bool:
    return accumulators <= block_registers(lanes)


# What a column past the output's width costs against a block away from the
# target: a guarded, wasted column counts twice its share of the row (its
# loads, FMAs and the edge's branches), a factor of two off the target a
# quarter of the row.
_WASTE_WEIGHT = 2.0
_OFF_TARGET_WEIGHT = 0.25


def _wasted(width: int, columns: int) -> float:
    """The share of a row of ``width`` that blocks of ``columns`` compute
    past its end, weighed as :data:`_WASTE_WEIGHT` says."""
    return _WASTE_WEIGHT * (-(-width // columns) * columns - width) / width


def _columns(width: int, target: int, most: int, offered: Sequence[int]) -> int:
    """Output columns per work-item for a row of ``width``: one of the
    ``offered`` blocks (the space's values of the knob; a start with another
    would not be in the space), near ``target``, at most ``most`` (the
    register budget), weighing the columns the last block wastes past the
    row's end against the distance from the target (ties: the larger block).
    A 7-wide row of ResNet's last stage takes 7 (none wasted) where 4 would
    compute 8 with a guarded edge; a 56-wide one keeps 4; a 30-wide one 3,
    where 5, which no block value is, dropped the start."""

    def cost(c: int) -> tuple[float, int]:
        off = abs(math.log2(c / target))
        return _wasted(width, c) + _OFF_TARGET_WEIGHT * off, -c

    fitting = [c for c in offered if 1 <= c <= max(1, min(most, width))]
    return min(fitting or [1], key=cost)


def _named(workload: Any, axis: int) -> str:
    return str(workload.axes[axis].name)


def _dim(buffer: Any, axis: int) -> int:
    """The dimension of ``buffer`` whose index reads ``axis`` (the first one;
    :func:`classify` names only axes the buffer reads)."""
    return next(dim for dim, index in enumerate(buffer.indices) if axis in variables(index))


def _contraction(
    space: SearchSpace, form: Contraction
) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """The register-blocked outer product: an MR x NR block of the output per
    work-item, ``floatNR`` accumulators along its innermost axis, over packed
    panels (``left`` as ``[.., rows // MR, k, rows % MR]``, ``right`` as
    ``[columns // NR, .., k, columns % NR]``, BLIS's micro-kernel operands),
    then on the operands as they are.

    Where the device's lanes do not divide the columns (a 257-wide output),
    each block first runs at full width with its last block overlapping the
    one before it (the space's ``vector_overlap``), ``left`` packed, then as
    it is (no pack per call), and ``right`` read as unaligned runs along its
    rows (a panel holds no such runs): narrowing the vectors to a width
    that divides, down to 4 that does not, made a 127 x 257 x 509 matmul 7x
    slower (1.2 against 0.17 ms). A block of rows is at most as tall as the
    rows there are."""
    workload = space.workload
    base = dict(space.identity().layouts)
    left, right = workload.buffer(form.left), workload.buffer(form.right)
    full = simd_lanes(space.device)
    extent = workload.axes[form.columns].extent
    lanes = _dividing(full, extent)
    overlap = extent % full != 0 and full <= extent
    height = workload.axes[form.rows].extent
    runs = _runs(workload, form)
    for most, nr_lanes, vector_lanes in _contraction_order(extent, full):
        mr = min(most, height)  # a classifier's one row: blocks of 8 would pad it to 8
        packed_left = block(left.shape, _dim(left, form.rows), mr) if mr > 1 else base[form.left]
        if overlap:
            nr, vector = _lanes(nr_lanes, full), _lanes(vector_lanes, full)
            if _fits(mr * nr // vector, full):
                knobs = _blocks(space, form, mr, nr, vector)
                yield {**base, form.left: packed_left, **runs}, knobs
                yield {**base, **runs}, knobs  # no pack per call
        nr, vector = _lanes(nr_lanes, lanes), _lanes(vector_lanes, lanes)
        if mr < most:  # fewer rows than the block: their registers hold columns
            nr = _wider(space, nr * most // mr, mr, vector, lanes, extent, nr)
        if not _fits(mr * nr // vector, lanes):
            continue
        knobs = _blocks(space, form, mr, nr, vector)
        packed = {
            **base,
            form.left: packed_left,
            form.right: panel(right.shape, _dim(right, form.columns), nr),
        }
        if extent % vector == 0:
            yield packed, knobs
            if _reduce_innermost(left, form):  # left as it comes, right packed
                yield {**base, form.right: packed[form.right]}, knobs
            # as they are; a right operand that holds no runs along the
            # columns (attention's K[b, j, k]) packed alone
            yield {**base, **_runs(workload, form, packed[form.right])}, knobs
            across = _panel_axis(workload, form, vector)
            if across is not None:  # or held in a private panel: nothing packed per call
                unpacked = {k: v for k, v in knobs.items() if not k.startswith("group.")}
                yield base, {**unpacked, "vector_transpose": across}
        elif not overlap:  # narrower overlapping vectors than the full ones above
            yield base, knobs


def _wider(
    space: SearchSpace, target: int, rows: int, vector: int, lanes: int, width: int, nr: int
) -> int:
    """The columns of a block of ``rows``, fewer than the rows its ``nr``
    columns were sized for (a vector by a matrix has one): about ``target``
    columns, the accumulators the missing rows would have held, in whole
    vectors, within the register budget, one of the space's block values
    weighed against the columns a last block wastes past the output's
    ``width`` (:func:`_columns`); at least ``nr``. One row of a 1 x 4096 x
    4096 product by 64 columns took 3.09 ms, by 16 (8 x 2L's columns) 7.83;
    a 96-wide row keeps 2 x 48."""
    budget = block_registers(lanes) // rows * vector
    offered = [c for c in space.options.blocks if c % vector == 0 and c >= nr]
    return _columns(width, min(target, budget), budget, offered) if offered else nr


def _reduce_innermost(buffer: Any, form: Contraction) -> bool:
    """Whether ``buffer`` runs along a reduce axis innermost (``A[i, k]``): a
    block of MR of its rows is then read as MR streams of consecutive
    elements, each line once, as fast as its packed panel, so a start may
    leave it as it comes and save its pack per call. The right operand, read
    NR columns at a time down every row (``B[k, j]``: one row every ``N``
    elements, a new page at every step where ``N`` is 1024 floats or more),
    stays packed: matmul 4096^3 in 8 x 32 blocks took 438-440 ms with ``A``
    as it comes and ``B`` packed (6.3 ms of packing per call), 449-479 with
    both packed (11.4-12.3 ms) and 1546-1632 with ``B`` as it comes (2 Xeon
    cores, AVX-512, with the ``prefetch`` knob)."""
    inner = buffer.indices[-1]
    return isinstance(inner, Var) and inner.index in form.reduce


def _lockstep_blocks(points: int, vector: int) -> list[tuple[int, int]]:
    """Register blocks (rows MR, columns NR) of one lockstep work-item, in
    powers of two with NR a multiple of ``vector``, by area: a quarter of
    the ``points`` the device's registers hold (8 x 4 of 128), a half, all
    of them; at each area the block with twice as many rows as columns
    first (a row costs the lockstep group one broadcast load, a column a
    share of a vector load), ties to the wider. The first block of each
    area comes before the second of any. On an H100 (matmul 2048^3, best
    work-group each): 8 x 4 0.87 ms, 8 x 8 1.00, 16 x 8 1.12, 4 x 8 1.21,
    4 x 4 1.26, 8 x 16 1.40."""
    ranked: list[list[tuple[int, int]]] = []
    for area in (points // 4, points // 2, points):
        pairs = [
            (area // nr, nr)
            for nr in (1 << e for e in range(area.bit_length()))
            if nr >= vector and area % nr == 0 and nr % vector == 0
        ]
        pairs.sort(key=lambda b: (abs(math.log2(b[0] / b[1]) - 1), -b[1]))
        ranked.append(pairs[:2])
    found: list[tuple[int, int]] = []
    for rank in range(2):
        found += [pairs[rank] for pairs in ranked if len(pairs) > rank]
    return list(dict.fromkeys(found))


def _lockstep_contraction(
    space: SearchSpace, form: Contraction
) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """The contraction on a device whose consecutive work-items run each
    instruction together (a GPU's warp, :meth:`DeviceInfo.lockstep_items`):
    an MR x NR register block per work-item (:func:`_lockstep_blocks`),
    ``floatN`` along the columns, the work-items of one lockstep group
    consecutive along the columns (NDRange dimension 0): their loads of
    ``right`` are adjacent vectors (coalesced), their loads of ``left`` one
    address (a broadcast), their stores adjacent; the operands as they are
    (nothing to pack per call: ``left`` blocked by MR measured no faster,
    1.28 against 1.28 ms for 8 x 8 blocks, 1.60 against 1.36 for 16 x 8).
    The CPU's form, a work-group down the rows under one column panel, made
    each of a warp's loads and stores a separate access: on an H100
    (NVIDIA's OpenCL, matmul 2048^3) its 8 x 4 blocks took 8.8-12.6 ms where
    the naive kernel took 4.1 and this form's first start 0.87."""
    workload = space.workload
    device = space.device
    base = dict(space.identity().layouts)
    columns = workload.axes[form.columns].extent
    height = workload.axes[form.rows].extent
    vector = _dividing(device.float_lanes(), columns) if columns % 4 == 0 else 1
    runs = _runs(workload, form)
    for mr, nr in _lockstep_blocks(device.register_block_points(), vector):
        mr = min(mr, height)
        if nr > columns:
            continue
        knobs: dict[str, Any] = {
            f"block.{_named(workload, form.rows)}": mr,
            f"block.{_named(workload, form.columns)}": nr,
        }
        if vector > 1:
            knobs.update({"vector_axis": _named(workload, form.columns), "vector": vector})
        knobs.update(_lockstep_group(space, form, mr, nr, vector))
        yield {**base, **runs}, knobs


# Work-items of a lockstep contraction's work-group: four warps. On an H100
# (matmul 2048^3, 8 x 4 blocks) groups of 128 took 0.87-0.93 ms, of 256
# 0.93-0.98 (squarest tiles each).
_LOCKSTEP_GROUP = 128


def _lockstep_group(
    space: SearchSpace, form: Contraction, mr: int, nr: int, vector: int
) -> dict[str, int]:
    """Work-group extents for :func:`_lockstep_contraction`:
    :data:`_LOCKSTEP_GROUP` items (within the device's limit), at least as
    many along the columns as load one cache line of vectors per row
    (``cacheline_size / (vector x element)``, 8 float4 on 128-byte lines),
    the split whose output tile (``group_rows x MR`` by ``group_columns x
    NR``) is squarest (ties: wider), powers of two no longer than the blocks
    they cover rounded up to one (the NDRange rounds up to whole groups: 65
    blocks of columns in groups of 16 launch 80 items). On an H100, 8 x 4 blocks in 8 x 16 groups (a 64 x 64 tile)
    took 0.87 ms, in 16 x 16 0.97, in 2 x 64 0.93, in 8 x 32 0.98 and in
    64 x 1 (the CPU's form) 11.6 (:func:`_group_knobs`)."""
    device, workload = space.device, space.workload
    items = min(device.max_work_group_size, _LOCKSTEP_GROUP)
    rows = -(-workload.axes[form.rows].extent // mr)
    columns = -(-workload.axes[form.columns].extent // nr)
    element = dtype_bytes(workload.buffer(form.right).dtype)
    line = max(1, device.cacheline_size // (vector * element))
    splits = []
    across = 1
    while across <= items:
        if across <= _ceil_power(columns) and items // across <= _ceil_power(rows):
            splits.append((items // across, across))
        across *= 2
    if not splits:  # fewer blocks than a group's items: a group of them all
        across = min(items, _ceil_power(columns))
        splits = [(min(items // across, _ceil_power(rows)), across)]
    wide = [split for split in splits if split[1] >= line] or splits

    def skew(split: tuple[int, int]) -> tuple[float, int]:
        down, along = split
        return abs(math.log2(down * mr / (along * nr))), -along

    down, across = min(wide, key=skew)
    return _group_knobs(workload, form, down, across)


def _held(rows: int, vectors: int) -> int:
    """Vector registers an MR x NR block holds at a step of k: its
    accumulators, a row of the right operand, a broadcast of the left, and
    one spare (the compiler's own; 4 x 3L on AVX2 would fill all 16)."""
    return rows * vectors + vectors + 2


def contraction_blocks(lanes: int) -> list[tuple[int, float, float]]:
    """The register blocks (MR, NR and vector in lanes) a contraction's
    starts try on a device of ``lanes`` float lanes: for each width of
    :data:`_BLOCK_VECTORS` vectors the tallest of :data:`_BLOCK_ROWS` whose
    registers the file holds (:func:`_held`), then :data:`_NARROW_BLOCKS`."""
    file = vector_registers(lanes)
    lead = []
    for vectors in _BLOCK_VECTORS:
        rows = [r for r in _BLOCK_ROWS if _held(r, vectors) <= file and _fits(r * vectors, lanes)]
        if rows:
            lead.append((max(rows), vectors, 1))
    return lead + [b for b in _NARROW_BLOCKS if b not in lead]


def _contraction_order(columns: int, lanes: int) -> list[tuple[int, float, float]]:
    """:func:`contraction_blocks` for an output ``columns`` wide: the blocks
    of full vectors by the loads each FMA takes (``(MR + NR / L) / (MR * NR
    / L)``: 0.46 for 8 x 3L, 0.63 for 8 x 2L) times the columns computed
    per column stored (a last block overshooting or overlapping the width),
    ties widest first; then the narrower ones as they are. On 64 columns
    8 x 3L computes 96 and comes after 8 x 2L; on 257 or 1000 it leads."""

    def cost(entry: tuple[int, float, float]) -> float:
        mr, nr_lanes, _ = entry
        nr = int(nr_lanes * lanes)
        computed = -(-columns // nr) * nr / columns
        return computed * (mr + nr_lanes) / (mr * nr_lanes)

    blocks = contraction_blocks(lanes)
    full = sorted((entry for entry in blocks if entry[2] == 1), key=lambda e: -e[1])
    return sorted(full, key=cost) + [entry for entry in blocks if entry[2] != 1]


def _blocks(space: SearchSpace, form: Contraction, mr: int, nr: int, vector: int) -> dict[str, Any]:
    """The knobs of an MR x NR block with ``floatN`` vectors along the columns."""
    workload = space.workload
    rows, columns = _named(workload, form.rows), _named(workload, form.columns)
    knobs: dict[str, Any] = {"vector_axis": columns, "vector": vector, f"block.{rows}": mr}
    knobs[f"block.{columns}"] = nr
    knobs.update(_panel_group(space, form, mr, nr))
    unroll = _unroll(space, mr * nr // vector)
    if unroll > 1:
        knobs["unroll"] = unroll
    return knobs


def _unroll(space: SearchSpace, fmas: int) -> int:
    """How many times the innermost reduce loop is unrolled for ``fmas``
    vector FMAs a step: the fewest of the space's unrolls no longer than
    the loop that reach :data:`_FMAS_PER_ITERATION`, else the most. One that
    does not divide the loop leaves its last steps to single steps: on a
    Zen 3 host the 512 x 512 x 1021 matmul's first start (6 x 2L) took 3.25
    ms unrolled 4 times, 7.02 not unrolled (as no power of two divides 1021),
    and 196 x 256 x 1023's 0.68 against 1.29 (interleaved)."""
    workload = space.workload
    trips = workload.axes[parse_reduce_order(workload, "")[-1]].extent
    offered = [u for u in space.options.unrolls if u <= trips] or [1]
    enough = [u for u in offered if u * fmas >= _FMAS_PER_ITERATION]
    return min(enough) if enough else max(offered)


def _panel_axis(workload: Any, form: Contraction, vector: int) -> str | None:
    """The reduce axis along which ``right`` holds its runs where it holds
    none along the columns (attention's ``K[b, j, k]``: ``k``), for a start
    whose work-items transpose it into a private panel once and walk every
    block of rows over it (``vector_transpose`` along a reduce axis, one
    launch where packing ``right`` takes two: 0.079 ms against 0.085 for the
    kernel alone on a packed ``K``, ``bench.hand_scores``); None otherwise."""
    right = workload.buffer(form.right)
    if _dim(right, form.columns) == len(right.shape) - 1:
        return None
    innermost = right.indices[-1]
    if not isinstance(innermost, Var) or innermost.index not in form.reduce:
        return None
    if workload.axes[innermost.index].extent % vector:
        return None
    return _named(workload, innermost.index)


def _runs(workload: Any, form: Contraction, instead: Layout | None = None) -> dict[str, Layout]:
    """``right`` with its columns innermost, where they are not (``K[b, j,
    k]`` read at ``j``: ``instead``, or by default permuted to ``[b, k,
    j]``), so that it holds runs along them from any start."""
    right = workload.buffer(form.right)
    dim = _dim(right, form.columns)
    rank = len(right.shape)
    if dim == rank - 1:
        return {}
    order = (*(d for d in range(rank) if d != dim), dim)
    return {form.right: instead or permute(right.shape, order)}


def _ceil_power(count: int) -> int:
    """The smallest power of two at least ``count``."""
    return 1 << max(0, count - 1).bit_length()


def _power_at_most(most: int) -> int:
    """The largest power of two at most ``most`` (1 at least)."""
    return 1 << max(0, most.bit_length() - 1) if most > 0 else 1


def _widest(most: int, count: int) -> int:
    """The largest power of two at most ``most`` (1 at least) that divides
    ``count``: a work-group extent that tiles its NDRange dimension."""
    extent = 1
    while extent * 2 <= most and count % (extent * 2) == 0:
        extent *= 2
    return extent


def _panel_group(space: SearchSpace, form: Contraction, mr: int, nr: int) -> dict[str, int]:
    """Work-group extents for MR x NR blocks whose left panels stay cached.

    A work-group walks down the rows under one block of columns (one item
    along NDRange dimension 0), so its items share one ``right`` panel; it
    takes as many blocks of rows as keep their ``left`` panels (``gr * MR *
    K`` elements) within the cache the device reports
    (``DeviceInfo.cache_size``: one core's L2 on Intel's CPU runtime; half
    the last level per compute unit where it reports none), where the next
    group, the next block of columns, finds them again. Powers of two no
    more than the blocks of rows, within the work-group limit, while the
    grid still holds two groups per compute unit; they need not divide the
    blocks (the NDRange rounds up: a hand kernel of 8 x 48 blocks on 1000^3
    took 22.4 ms in groups of one block, the largest power of two dividing
    its 125 blocks of rows, and 16.2-16.5 ms in groups of 4 to 32, on 2 loaded
    Xeon cores; 274 against 168-198 ms on 2000^3). Left to the driver (``{}``)
    where the device says no cache. On matmul 4096^3 (2 Xeon cores with
    AVX-512, 2 MiB of L2 each) 8 x 32 blocks took 483-501 ms in groups of
    16 to 64 blocks of rows, 573 ms in groups of 8 and 784 ms in groups of
    16 x 16 (the previous rule's, which grew the columns first within half
    the last-level cache); the driver's own choice may make a group of a
    whole row of blocks that streams ``right`` from memory (131 GFLOP/s
    against 212-218 on 2 Zen 4 cores)."""
    device, workload = space.device, space.workload
    units = max(1, device.compute_units)
    budget = device.cache_size or device.last_level_cache_size // (2 * units)
    if not budget:
        return {}
    reduced = 1
    for axis in form.reduce:
        reduced *= workload.axes[axis].extent
    element = dtype_bytes(workload.buffer(form.left).dtype)
    limit = min(device.max_work_group_size, _GROUP_LIMIT)
    rows = -(-workload.axes[form.rows].extent // mr)
    columns = -(-workload.axes[form.columns].extent // nr)
    cached = budget // (mr * reduced * element)
    group = _power_at_most(min(limit, cached, rows * columns // (2 * units), rows))
    return _group_knobs(workload, form, group, 1)


def _group_knobs(workload: Any, form: Contraction, down: int, across: int) -> dict[str, int]:
    """Work-group knobs of ``down`` items along the rows and ``across`` along
    the columns, 1 along the other NDRange dimensions; ``{}`` (the driver's
    choice) where the rows and columns do not name NDRange dimensions of
    their own (only the output's last two axes do)."""
    knobs = {group_knob(workload, dim): 1 for dim in range(len(grid_dims(workload)))}
    knobs[f"group.{_named(workload, form.rows)}"] = down
    knobs[f"group.{_named(workload, form.columns)}"] = across
    return knobs if len(knobs) == len(grid_dims(workload)) else {}


def _blocked_twice(shape: tuple[int, ...], inner: int, x: int, outer: int, y: int) -> Layout:
    """Dimension ``inner`` blocked by ``x``, then ``outer`` by ``y``
    (OIHW[x]i[y]o for ``inner`` = 1, ``outer`` = 0)."""
    first = block(shape, inner, x)
    return compose(block(first.physical_shape, outer, y), first)


def _window(space: SearchSpace, form: Window) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """The direct convolution: vectors along the filters (or a depthwise
    convolution's channels), a block of output columns per work-item, the
    filters and the output blocked by ``cb`` along the filters, the
    activations and the filters' channels by ``cbi``, each from the widest
    lanes that divide its own axis, the input channels blocked around the
    window (``c // cbi, kh, kw, c % cbi``), each such start followed by its twin on the
    activations and the output as they are (no conversion per call); with
    fewer input channels than a block, the activations as they are and the
    channel loop innermost, unblocked. A padded window's interior blocks
    are peeled where a row holds one (:data:`_INTERIOR_BLOCKS`)."""
    workload = space.workload
    base = dict(space.identity().layouts)
    act = workload.buffer(form.activations)
    filt = workload.buffer(form.filters_buffer)
    out = workload.buffer(form.output)
    vector_axis = form.filters if form.filters is not None else form.depth
    assert vector_axis is not None  # classify() guarantees one of them
    lanes = _dividing(simd_lanes(space.device), workload.axes[vector_axis].extent)
    along = _named(workload, vector_axis)
    reduce = [k for k, a in enumerate(workload.axes) if a.kind == "reduce"]
    channels = 0 if form.channels is None else workload.axes[form.channels].extent
    # the input channels' own lanes: MobileNet-v2's 144 -> 24 projection
    # reads its 144 channels in blocks of 16 and stores its 24 filters in
    # blocks of 8, as its neighbours hold them (with one block for both, 8,
    # each of its 24-channel stage's tensors took a rewrite)
    channel_lanes = _dividing(simd_lanes(space.device), channels) if channels else lanes
    width = workload.axes[form.columns].extent
    padded = reads_outside(workload)
    for cb_lanes, filter_lanes, target, vector_lanes, exact in _window_blocks(space, form):
        cb, vector = _lanes(cb_lanes, lanes), _lanes(vector_lanes, lanes)
        cbi = _lanes(cb_lanes, channel_lanes)  # the input channels' block
        filters = cb if form.filters is None else _lanes(filter_lanes, lanes)
        groups = _groups(workload, form, filters)
        filters //= groups
        vectors = max(1, filters // vector) * groups
        # a whole row may take more of the register file (_window_blocks)
        most = accumulator_registers(lanes) if target == width else block_registers(lanes)
        if vectors * target > most:
            continue
        budget = most // vectors
        while budget > 1 and _step_registers(budget, vectors) > vector_registers(lanes):
            budget -= 1
        # a derived lead's columns already weigh the row's end
        columns = target if exact else _columns(width, target, budget, space.options.blocks)
        knobs: dict[str, Any] = {
            "vector_axis": along,
            "vector": vector,
            f"block.{along}": filters,
            f"block.{_named(workload, form.columns)}": columns,
        }
        if groups > 1:
            knobs[f"block.{_named(workload, form.depth)}"] = groups  # type: ignore[arg-type]
        if padded and width // columns >= _INTERIOR_BLOCKS:
            knobs["peel"] = True  # the interior's blocks read without the padding's tests
        layouts = {**base, form.output: block(out.shape, _dim(out, vector_axis), cb)}
        if form.channels is None:  # depthwise: the channels are the vector axis
            layouts[form.activations] = block(act.shape, _dim(act, vector_axis), cb)
            layouts[form.filters_buffer] = block(filt.shape, _dim(filt, vector_axis), cb)
        else:
            rest = [k for k in reduce if k != form.channels]
            if channels >= cbi:
                layouts[form.activations] = block(act.shape, _dim(act, form.channels), cbi)
                layouts[form.filters_buffer] = _blocked_twice(
                    filt.shape,
                    _dim(filt, form.channels),
                    cbi,
                    _dim(filt, vector_axis),
                    _filter_run(workload.axes[vector_axis].extent, filters, groups, cb),
                )
            else:  # few input channels: blocking them would pad the activations
                layouts[form.filters_buffer] = block(filt.shape, _dim(filt, vector_axis), cb)
            if channels > cbi:
                knobs["split"] = cbi  # c // cbi, kh, kw, c % cbi
                if reduce[0] != form.channels:
                    knobs["reduce_order"] = reduce_order_text(workload, [form.channels, *rest])
            else:
                knobs["reduce_order"] = reduce_order_text(workload, [*rest, form.channels])
        yield layouts, knobs
        converted = any(layouts[name] != base[name] for name in (form.activations, form.output))
        if form.channels is not None and converted:
            # The same kernel with no conversion per call: the activations
            # as they come (its reads of them are scalar broadcasts, which
            # any layout serves) and the output as it goes (the vectors of
            # filters transposed in registers into rows of output columns,
            # codegen's row stores). Blocking buys locality at the price of
            # a pack and an unpack per call: on a grouped convolution's 16
            # channels per group they took a third of the end-to-end time;
            # on the image stem of bench.user_ops (3 channels) the unpack
            # alone took 0.12 ms beside a 0.78 ms kernel, where the rows
            # stored as they go took 0.82 ms in all (interleaved)
            yield (
                {
                    **layouts,
                    form.activations: base[form.activations],
                    form.output: base[form.output],
                },
                knobs,
            )


def _filter_run(extent: int, filters: int, groups: int, cb: int) -> int:
    """The filters' block in their layout (``O / run, I / cb, kh, kw, cb,
    run``): a work-item's ``filters`` where they are whole blocks of ``cb``
    that tile the ``extent`` and one group holds them, so that each step
    of the channels reads all its vectors in one run; else ``cb``. On a Zen
    3 host the 3 x 4 block of conv2d (1, 128, 28, 28) x 128 3 x 3 took
    1.64 ms with runs of 32 filters where runs of 8 took 1.75."""
    if groups == 1 and filters % cb == 0 and extent % filters == 0:
        return filters
    return cb


def _groups(workload: Any, form: Window, filters: int) -> int:
    """Groups per work-item of a grouped window (one with ``filters`` and a
    ``depth`` axis, both kept by the output) whose vectors of filters want
    more filters than a group holds: the groups carry the rest, each its
    own vectors of accumulators over its own channels. On bench.user_ops'
    4 x (16 -> 16) conv the search's best held 2 groups of one vector by 4
    columns (0.071 ms) where the starts held one group (0.10-0.12)."""
    if form.filters is None or form.depth is None:
        return 1
    extent = workload.axes[form.filters].extent
    if filters <= extent:
        return 1
    return max(1, min(filters // extent, _power_at_most(workload.axes[form.depth].extent)))


def _operand_loads(columns: int, vectors: int, width: int) -> float:
    """Operand loads per FMA of a window's block of ``columns`` output
    columns by ``vectors`` vectors of filters (each step of the channels
    loads the vectors and broadcasts one activation per column), weighed
    by the columns its last block wastes past a row of ``width`` (guarded
    work, :data:`_WASTE_WEIGHT`)."""
    return (columns + vectors) / (columns * vectors) * (1 + _wasted(width, columns))


def _step_registers(columns: int, vectors: int) -> int:
    """Vector registers a window's step takes: its accumulators, the
    operands of one side held (the fewer of the broadcast columns and the
    vectors of filters) and one of the other's streamed through."""
    return columns * vectors + min(columns, vectors) + 1


# What one core issues a cycle behind a window's block, as x86 cores since
# Haswell do: two vector FMAs, about one and a half vector loads beside them
# (two load ports), 32 bytes from the cache level below the first (the
# filters of a step, streamed: a 3 x 3 window over 64 channels holds 147 KiB
# of them for 64 filters), and an FMA's result usable 5 cycles after it
# issues (4 on Zen and Skylake, plus the dependent add's forwarding).
_FMAS_PER_CYCLE = 2.0
_LOADS_PER_CYCLE = 1.5
_STREAM_BYTES_PER_CYCLE = 32.0
_FMA_LATENCY = 5.0


def _block_cycles(columns: int, vectors: int, lanes: int) -> float:
    """Cycles per FMA of a window's block of ``columns`` by ``vectors``
    vectors of ``lanes`` floats: the slowest of the FMAs' issue, the
    operand loads' (:func:`_operand_loads`), the filters' stream (a vector
    per vector of filters each step, read by ``columns`` FMAs) and the
    accumulators' latency (each waits for its own last FMA)."""
    fmas = columns * vectors
    return max(
        1 / _FMAS_PER_CYCLE,
        (columns + vectors) / fmas / _LOADS_PER_CYCLE,
        lanes * 4 / columns / _STREAM_BYTES_PER_CYCLE,
        _FMA_LATENCY / fmas,
    )


def _window_block(lanes: int, width: int, vectors: int, offered: Sequence[int]) -> tuple[int, int]:
    """The block of a window's derived start: (columns, vectors of filters)
    with the fewest cycles per FMA (:func:`_block_cycles`), weighed by the
    columns the last block wastes past the row's end (as in
    :func:`_operand_loads`), ties the fewest operand loads, then the more
    accumulators, among those whose accumulators the register block holds
    (:func:`~laytune.device_info.block_registers`) and whose step the
    register file holds (:func:`_step_registers`). Columns and filters
    (vectors by lanes) are values of the block knob, vectors powers of two
    up to ``vectors``.

    Once the FMAs bound a block, fewer loads buy nothing and a wasted
    column costs its share. AVX-512 on 56- and 28-wide rows: 4 columns by
    4 vectors. On 2 Zen 5 cores conv2d (1, 64, 56, 56) x 64 3 x 3 took
    0.478 ms so where the 6 x 4 the fewest loads chose (its last block 2
    of 6 columns) took 0.499; 2 x 4 took 0.92 and 3 x 4 0.64, bound by
    the filters' stream (32 and 21 bytes per FMA); 14 x 1 0.66, bound by
    its loads (15 per 14 FMAs); 7 x 2 and 8 x 2 0.50 (interleaved, cold).
    AVX2's 16 registers: 3 columns by 4 vectors, as ONNX Runtime's NCHWc
    kernels block; 4 x 2 waits on its 8 accumulators. On a Zen 3 host
    (warm, interleaved, 12 rounds) conv2d (1, 128, 28, 28) x 128 3 x 3
    took 1.82 ms in 3 x 4 where 4 x 2 took 2.19-2.57, (1, 64, 56, 56) x 64
    1.68 against 1.89-2.02, and the 33-wide (1, 96, 33, 33) x 160 2.16
    against 3.06-3.26."""
    file = vector_registers(lanes)
    best: tuple[float, float, int, int, int] | None = None
    v = 1
    while v <= vectors and v * lanes in offered:
        for c in offered:
            if not 1 <= c <= width or c * v > block_registers(lanes):
                continue
            if _step_registers(c, v) > file:
                continue
            cycles = _block_cycles(c, v, lanes) * (1 + _wasted(width, c))
            key = (cycles, _operand_loads(c, v, width), -c * v, c, v)
            best = key if best is None or key < best else best
        v *= 2
    return (1, 1) if best is None else (best[3], best[4])


def _window_blocks(space: SearchSpace, form: Window) -> list[tuple[float, float, int, float, bool]]:
    """The window starts' blocks (:data:`_WINDOW_BLOCKS`, each a target of
    columns that :func:`_columns` fits to the row), led by the one the
    device's registers derive (:func:`_window_block`, its columns exact).

    A padded window whose output row fits the register file as one vector
    of accumulators per column (:func:`~laytune.device_info.accumulator_registers`: AVX2's
    16 registers hold a row of 14, which a block of fewer columns would
    split in blocks that test the window's edges at run time) leads with the
    whole row in one block, as many vectors of filters as the largest power of
    two of accumulators the register block holds gives each column: with one
    block along the row, every test of the window's edges is on constant
    columns and folds away, where blocks of part of the row test them at run
    time in every load. On ResNet-18's conv2d (1, 256, 14, 14) x 256 3 x 3
    the 1 x 14 block took 0.68 ms where the 4 x 7 one took 0.88 and 1 x 7
    1.44 on the AVX-512 host (ONNX Runtime 0.72; interleaved, the same
    layouts), and 2.38-2.55 ms where the 2 x 3 block took 3.1-3.5 on a Zen
    3 host's AVX2 (1.92-2.07 warm where 3 x 4 took 2.29-2.37); on its
    7-wide last stage, 2 x 7 is what the search found best. An unpadded
    window's whole row leads so only where it loads fewer operands per FMA
    than the derived block: a 1 x 1 conv2d (1, 1024, 14, 14) x 256 took
    0.87-0.95 ms in 3 x 4 where the whole row, one vector by 14, took 1.15
    (Zen 3, warm)."""
    lanes = simd_lanes(space.device)
    table = [(*entry, False) for entry in _WINDOW_BLOCKS]
    if form.filters is None:
        return table
    workload = space.workload
    extent = workload.axes[form.filters].extent
    filters = _power_at_most(max(1, extent // lanes))
    while filters > 1 and extent % (filters * lanes):  # blocks of filters tile them
        filters //= 2
    if form.depth is not None:  # a grouped window: its groups hold more vectors (_groups)
        filters *= _power_at_most(workload.axes[form.depth].extent)
    width = workload.axes[form.columns].extent
    columns, vectors = _window_block(lanes, width, filters, space.options.blocks)
    leads = [(1.0, float(vectors), columns, 1.0, True)]
    whole = width <= accumulator_registers(lanes) and width in space.options.blocks
    if whole:
        accumulators = _power_at_most(block_registers(lanes))
        rows = min(filters, _power_at_most(max(1, accumulators // width)))
        fewer = _operand_loads(width, rows, width) < _operand_loads(columns, vectors, width)
        if reads_outside(workload) or fewer:
            leads.insert(0, (1.0, float(rows), width, 1.0, True))
    led = {entry[:4] for entry in leads}
    return [*leads, *(entry for entry in table if entry[:4] not in led)]


# Column blocks a row needs before a padded window's start peels its border:
# with three, one block touches neither edge (the grouped 3 x 3 conv of
# bench.user_ops, 7 blocks of 4: its first four starts took 0.080-0.095 ms
# peeled, 0.089-0.116 ms not, interleaved; ResNet's 7-wide rows, one block
# of 7, kept their tests in their tuned records)
_INTERIOR_BLOCKS = 3

# A depthwise window's (rows, vectors of columns) per work-item, with vectors
# along the output's contiguous axis: each reads the activations' rows as
# unaligned runs (``ow + kw``) that the neighbouring columns' windows share
_COLUMN_BLOCKS = ((4, 2), (2, 2), (4, 1), (2, 4), (8, 1))

# Rows of the depthwise start with one vector of the device's full lanes
# along output columns whose extent the lanes do not divide (the last block
# of columns overlaps the one before it): the hand kernel's shape
# (bench/hand_depthwise.py: float16 along ow, 6 output rows per work-item).
_TALL_ROWS = 6


def _vector_width(lanes: int, extent: int) -> int:
    """The widest of ``lanes``, ``lanes / 2``, ... (down to 2) that divides
    ``extent``; 1 where none does."""
    while lanes > 1 and extent % lanes:
        lanes //= 2
    return lanes


def _window_columns(
    space: SearchSpace, form: Window
) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """A window whose channels are not reduced (depthwise): every layout as
    it is, vectors along the output columns, a block of rows by vectors of
    columns per work-item; the activations' window reads are unaligned runs
    along their rows (the space allows them where the rows are contiguous
    and the window stays inside). Where the device's lanes do not divide the
    output columns, the first start still takes all of them, one vector by
    a tall block of rows and as many channels as fill the registers
    (:func:`_filling`), its last block of columns overlapping the one
    before it (the space's ``vector_overlap``)."""
    workload = space.workload
    act = workload.buffer(form.activations)
    windowed = [
        k
        for k, a in enumerate(workload.axes)
        if a.kind == "spatial"
        and k != form.columns
        and not any(isinstance(e, Var) and e.index == k for e in act.indices)
        and any(k in variables(e) for e in act.indices)
    ]
    lanes = simd_lanes(space.device)
    extent = workload.axes[form.columns].extent
    vector = _vector_width(lanes, extent)
    base = dict(space.identity().layouts)
    columns = _named(workload, form.columns)
    if vector < lanes <= extent and windowed:  # full lanes, the last block overlapping
        rows = min(_TALL_ROWS, workload.axes[windowed[-1]].extent)
        tall = {
            "vector_axis": columns,
            "vector": lanes,
            f"block.{columns}": lanes,
            f"block.{_named(workload, windowed[-1])}": rows,
        }
        if form.depth is not None:
            tall[f"block.{_named(workload, form.depth)}"] = _filling(space, form.depth, rows)
        yield base, tall
    if vector < 2:
        return
    for rows, vectors in _COLUMN_BLOCKS:
        if not _fits(rows * vectors, lanes):
            continue
        knobs: dict[str, Any] = {
            "vector_axis": columns,
            "vector": vector,
            f"block.{columns}": vector * vectors,
        }
        if windowed:
            knobs[f"block.{_named(workload, windowed[-1])}"] = rows
        yield base, knobs


def _filling(space: SearchSpace, axis: int, accumulators: int) -> int:
    """Points of ``axis`` per work-item, a power of two: as many as fill the
    register block beside ``accumulators`` vectors per point (AVX-512's 28
    block registers: 4 channels of the depthwise tall start's 6 rows, 8
    filters of two vectors of output columns). More independent
    accumulators per work-item hide the FMA latency: on the depthwise 3 x 3
    of ``bench.user_ops`` 6 rows took 0.044 ms with one channel, 0.040 with
    two, 0.038 with four (interleaved, 4 rounds)."""
    budget = block_registers(simd_lanes(space.device))
    extent = space.workload.axes[axis].extent
    points = 1
    while accumulators * points * 2 <= budget and points * 2 <= extent:
        points *= 2
    return points


def _window_runs(
    space: SearchSpace, form: Window
) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """A window over channels with every layout as it is and vectors along
    the output's rows: each step reads a run of the activations' row
    (``t + k``) and broadcasts one filter weight per filter of the block, two
    vectors then one by as many filters as fill the registers. Nothing is
    converted per call, and the stores are whole vectors of the logical
    output. The space holds it where the window reads inside the
    activations (an unpadded window): on the 1-D convolution of
    ``bench.user_ops`` (64 -> 64 channels, kernel 3, 1024 steps) it took
    0.116-0.123 ms, where the blocked start's 0.11-0.13 ms kernel paid 0.048
    ms of pack and unpack per call, and ONNX Runtime took 0.143 ms."""
    assert form.filters is not None and form.channels is not None
    workload = space.workload
    lanes = simd_lanes(space.device)
    width = workload.axes[form.columns].extent
    if lanes < 2 or lanes > width:
        return
    base = dict(space.identity().layouts)
    columns, filters = _named(workload, form.columns), _named(workload, form.filters)
    for vectors in (2, 1):
        if vectors * lanes > width:
            continue
        yield (
            base,
            {
                "vector_axis": columns,
                "vector": lanes,
                f"block.{columns}": vectors * lanes,
                f"block.{filters}": _filling(space, form.filters, vectors),
            },
        )


def _reduced_axis(workload: Any) -> int | None:
    """The reduce axis that every input reading it indexes as its innermost
    dimension, a bare index (a row's reduction ``Y[i] = max(X[i, j])``:
    ``j``); the last such one. None where there is none, or no reduction."""
    if workload.reduction is None:
        return None
    inputs = [b for b in workload.buffers if b.role == "input"]
    found = None
    for k, axis in enumerate(workload.axes):
        if axis.kind != "reduce":
            continue
        readers = [b for b in inputs if k in variables_of(b)]
        if readers and all(_innermost(b, k) for b in readers):
            found = k
    return found


def variables_of(buffer: Any) -> set[int]:
    out: set[int] = set()
    for index in buffer.indices:
        out |= set(variables(index))
    return out


def _innermost(buffer: Any, axis: int) -> bool:
    """Whether ``buffer`` holds ``axis`` contiguously: its last dimension
    wider than one (a matrix-vector product's ``B[k, 0]`` holds ``k`` as a
    row would) is indexed by ``axis`` bare, and no other index reads it."""
    wide = [d for d, extent in enumerate(buffer.shape) if extent > 1]
    if not wide:
        return False
    last = buffer.indices[wide[-1]]
    others = [e for d, e in enumerate(buffer.indices) if d != wide[-1]]
    return (
        isinstance(last, Var)
        and last.index == axis
        and all(axis not in variables(e) for e in others)
    )


def _reduction(
    space: SearchSpace, blocks: Sequence[tuple[float, int, int]] = _REDUCTION_BLOCKS
) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """A reduction along an axis its inputs hold contiguously: each
    work-item reads its rows in vectors along that axis, into one or more
    vector accumulators per point, combined across their lanes at the store
    (``reduce_vector``), the axis's loop innermost. ``blocks``: (vector in
    lanes, accumulators per point, points per work-item along the innermost
    spatial axis wider than one)."""
    workload = space.workload
    axis = _reduced_axis(workload)
    if axis is None:
        return
    base = dict(space.identity().layouts)
    lanes = _dividing(simd_lanes(space.device), workload.axes[axis].extent)
    rest = [k for k, a in enumerate(workload.axes) if a.kind == "reduce" and k != axis]
    order = reduce_order_text(workload, [*rest, axis])
    spatial = [a.name for a in workload.axes if a.kind == "spatial" and a.extent > 1]
    for vector_lanes, parts, points in blocks:
        knobs: dict[str, Any] = {
            "reduce_vector": _lanes(vector_lanes, lanes),
            "unroll": parts,
            "reduce_order": order,
        }
        if spatial:
            knobs[f"block.{spatial[-1]}"] = points
        yield base, knobs


def _lanes_inward(space: SearchSpace) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """A sum of products of neither form whose buffers disagree on their contiguous axis:
    the vectors run along the output's contiguous axis where an input reads
    it bare at an outer dimension (Winograd's input transform ``V[x, th, tw,
    c] += T[x, a, b] * X[c, 2 th + a - 1, 2 tw + b - 1]``: ``c``), else along
    an input's contiguous axis that the output holds outside (the output
    transform ``Y[f, oh, ow] += A[oh % 2, ow % 2, x] * M[x, oh // 2, ow //
    2, f]``: ``f``). Every buffer holding that axis outside is blocked along
    it by the device's lanes, the block innermost (NCHW -> NCHW16c), so that
    the vectors are loads and stores of it; the output axes the blocked
    inputs do not read (``x``, read only by the small table), else the
    output's contiguous one, are blocked in registers. The input transform's
    operands as they are (one vector along ``x``, the rest scalar) took
    0.43-0.50 ms where this took 0.10 (64 channels of 56 x 56; interleaved)."""
    workload = space.workload
    if not layout_critical(workload):  # a plain reduction keeps its vectors along its sum
        return
    out = workload.output
    axis = _disagreed_axis(workload)
    if axis is None:
        return
    extent = workload.axes[axis].extent
    lanes = _dividing(simd_lanes(space.device), extent)
    if lanes < 4 or extent % lanes:
        return
    layouts = dict(space.identity().layouts)
    moved: set[int] = set()
    for buffer in (*workload.inputs, out):
        dims = [d for d, e in enumerate(buffer.indices) if isinstance(e, Var) and e.index == axis]
        if not dims or _innermost(buffer, axis):
            continue
        if len(dims) > 1 or any(
            axis in variables(e) for d, e in enumerate(buffer.indices) if d != dims[0]
        ):
            return
        layouts[buffer.name] = block(buffer.shape, dims[0], lanes)
        if buffer is not out:
            moved |= variables_of(buffer)
    name = _named(workload, axis)
    knobs: dict[str, Any] = {"vector_axis": name, "vector": lanes, f"block.{name}": lanes}
    spatial = [
        k for k, a in enumerate(workload.axes) if a.kind == "spatial" and k != axis and a.extent > 1
    ]
    shared = _divided(workload, spatial)
    others = [k for k in spatial if k not in moved] or spatial[-1:]
    if shared:  # each load serves the points that divide down to it
        knobs.update({f"block.{_named(workload, k)}": d for k, d in shared.items()})
    elif others:
        knobs[f"block.{_named(workload, others[-1])}"] = _filling(space, others[-1], 1)
    yield layouts, knobs


def _divided(workload: Any, axes: Sequence[int]) -> dict[int, int]:
    """Of ``axes``, those every input reading them reads as ``axis // d``
    (one constant ``d`` each, dividing the axis's extent), with their ``d``:
    ``d`` consecutive points read one element (Winograd's output transform
    reads ``M[x, oh // 2, ow // 2, f]``, so a 2 x 2 block of outputs reads
    each vector of ``M`` once: 0.038 ms against 0.088 for 1 x 16 outputs,
    64 channels of 56 x 56, its unpack included)."""
    found: dict[int, int] = {}
    for k in axes:
        divisors = set()
        for buffer in workload.inputs:
            for index in buffer.indices:
                if k not in variables(index):
                    continue
                if (
                    isinstance(index, BinOp)
                    and index.op == "//"
                    and index.lhs == Var(k)
                    and isinstance(index.rhs, Const)
                ):
                    divisors.add(index.rhs.value)
                elif not (isinstance(index, BinOp) and index.op == "%"):
                    divisors.add(0)  # read otherwise: no block follows
        d = divisors.pop() if len(divisors) == 1 else 0
        if d > 1 and workload.axes[k].extent % d == 0:
            found[k] = d
    return found


def _disagreed_axis(workload: Any) -> int | None:
    """The axis :func:`_lanes_inward` runs its vectors along: the output's
    contiguous axis where an input holds it outside, else an input's
    contiguous axis that the output holds outside; None where the buffers
    agree (or hold no bare axis innermost)."""
    out = workload.output
    spatial = {k for k, a in enumerate(workload.axes) if a.kind == "spatial"}

    def last(buffer: Any) -> int | None:
        index = buffer.indices[-1]
        return index.index if isinstance(index, Var) and index.index in spatial else None

    def outside(buffer: Any, axis: int) -> bool:
        return any(isinstance(e, Var) and e.index == axis for e in buffer.indices[:-1])

    mine = last(out)
    if mine is not None and any(outside(b, mine) for b in workload.inputs):
        return mine
    for buffer in workload.inputs:
        theirs = last(buffer)
        if theirs is not None and theirs != mine and outside(out, theirs):
            return theirs
    return None


def _elementwise(space: SearchSpace) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """An element-wise or broadcast statement (no reduction): every layout as
    it is, the device's full vectors along the innermost spatial axis, and
    as many rows of them per work-item as fill the registers. Fewer vectors
    per work-item leave the runtime one work-item per vector: GELU over 2048
    x 1024 took 1.24-1.30 ms with one, as the scalar baseline did, and
    0.80-0.84 ms with 8 or 16 rows of one vector (interleaved, 3 rounds),
    where the plain starts' best (8 lanes) took 1.2 ms."""
    workload = space.workload
    if workload.reduction is not None:
        return
    spatial = [k for k, a in enumerate(workload.axes) if a.kind == "spatial"]
    inner = spatial[-1]
    extent = workload.axes[inner].extent
    lanes = _dividing(simd_lanes(space.device), extent)
    if lanes < 2 or extent % lanes:
        return
    across = _across(workload, inner)
    if across is not None:
        yield from _transposed(space, inner, across, lanes)
        return
    knobs: dict[str, Any] = {
        "vector_axis": _named(workload, inner),
        "vector": lanes,
        f"block.{_named(workload, inner)}": lanes,
    }
    if len(spatial) > 1:
        outer = spatial[-2]
        knobs[f"block.{_named(workload, outer)}"] = _filling(space, outer, 1)
    yield dict(space.identity().layouts), knobs


def _across(workload: Any, inner: int) -> int | None:
    """The spatial axis that every input reading ``inner`` at a dimension
    other than its innermost holds as its innermost instead (a transpose's
    ``X[j, i]`` under ``Y[i, j]``: ``i``); None where no input needs one, or
    where they disagree or hold no spatial axis innermost."""
    spatial = {k for k, a in enumerate(workload.axes) if a.kind == "spatial"}
    found: set[int] = set()
    for buffer in workload.inputs:
        if inner not in variables_of(buffer) or _innermost(buffer, inner):
            continue
        last = buffer.indices[-1]
        if not (isinstance(last, Var) and last.index in spatial and _innermost(buffer, last.index)):
            return None
        found.add(last.index)
    return found.pop() if len(found) == 1 else None


def _transposed(
    space: SearchSpace, inner: int, across: int, lanes: int
) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """An element-wise statement whose input runs along another axis than
    its output (a transpose): every layout as it is, square tiles of full
    vectors read along ``across``, transposed in registers and stored along
    ``inner``, so that the output's rows are stored in runs of whole lines
    (:data:`_RUN_LINES`): on a CPU each work-item stores its own runs (a
    block of that many tiles along ``inner``, stored tile by tile), where
    the work-items of a device's instruction run side by side, the run is a
    work-group's (:func:`_stream_group`); stored first with nontemporal
    stores (the space holds them where the device's compiler has them and
    the vectors are aligned), then plainly. On a 4096^2 transpose (Intel's
    CPU runtime, 2 Xeon cores with AVX-512) the 16 x 16 tile took 2.6-2.9
    ms with nontemporal stores in groups of 2-4 x 16-64 tiles, 3.5-3.8 ms in
    groups one tile wide, 7.2 ms left to the driver, and 9.4-14 ms with
    plain stores, against 1.9 ms for a copy of the same bytes. On 2 Zen 5
    cores the best such group took 1.6-1.7 ms, and a work-item of 4 tiles
    along the output's rows in groups of 128 along ``across`` 1.24 (a
    copy: 0.92-1.0)."""
    workload = space.workload
    if workload.axes[across].extent % lanes:
        return
    v, u = _named(workload, inner), _named(workload, across)
    run = 1
    line = space.device.cacheline_size
    if space.device.lockstep_items() == 1 and line:
        vector_bytes = lanes * dtype_bytes(workload.output.dtype)
        run = _widest(
            max(1, _RUN_LINES * line // vector_bytes), workload.axes[inner].extent // lanes
        )
    knobs: dict[str, Any] = {
        "vector_axis": v,
        "vector": lanes,
        "vector_transpose": u,
        f"block.{v}": lanes * run,
        f"block.{u}": lanes,
        **_stream_group(space, inner, across, lanes, run),
    }
    base = dict(space.identity().layouts)
    yield base, {**knobs, "store": "nontemporal"}
    yield base, knobs


# Lines per run of the output's rows stored together, by one work-item on a
# CPU or a work-group's side by side: groups one 16-float tile (one line) wide
# took 1.3x the time of groups 2 or 4 wide (2 Xeon cores); on 2 Zen 5 cores
# work-items of 4 tiles along the rows took 1.24 ms where 2 took 1.62 and
# groups of 4 one-tile items 1.6-1.7.
_RUN_LINES = 4


def _stream_group(
    space: SearchSpace, inner: int, across: int, lanes: int, run: int = 1
) -> dict[str, int]:
    """Work-group extents for work-items of ``run`` tiles of ``lanes`` x
    ``lanes`` along ``inner`` (NDRange dimension 0) and one along ``across``
    (dimension 1): along ``inner`` as many work-items as make runs of
    :data:`_RUN_LINES` cache lines of the output's rows, along ``across`` as
    many more as make a group of half the largest work-group the space
    offers, while the grid still holds two groups per compute unit; powers
    of two that divide the work-items. Left to the driver (``{}``) where the
    device does not say its cache line, or where the axes are not NDRange
    dimensions 0 and 1."""
    device, workload = space.device, space.workload
    dims = grid_dims(workload)
    if not device.cacheline_size or len(dims) < 2 or dims[0] != (inner,) or dims[1] != (across,):
        return {}
    vector_bytes = lanes * dtype_bytes(workload.output.dtype)
    tiles = {inner: workload.axes[inner].extent // (lanes * run)}
    tiles[across] = workload.axes[across].extent // lanes
    rest = math.prod(workload.axes[k].extent for k in (dims[2] if len(dims) > 2 else ()))
    items = min(device.max_work_group_size, _GROUP_LIMIT) // 2
    gv = _widest(max(1, _RUN_LINES * device.cacheline_size // (vector_bytes * run)), tiles[inner])
    groups = tiles[inner] // gv * tiles[across] * rest // (2 * device.compute_units)
    gu = _widest(min(items // gv, groups), tiles[across])
    knobs = {group_knob(workload, dim): 1 for dim in range(len(dims))}
    knobs[group_knob(workload, 0)] = gv
    knobs[group_knob(workload, 1)] = gu
    return knobs


def _derived(space: SearchSpace) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    """The classic kernels of the statement's form (:func:`classify`). A
    window of one point (a 1 x 1 convolution) keeps the window form: blocked
    along the filters, it is the contraction's outer product with vectors
    along the output's contiguous axis (the contraction's form would run
    its vectors along the output columns, reading the input at shifted
    indices ``ow + kw``). A depthwise window also gets vectors along its
    output columns, read from the activations as unaligned runs: first of
    all where the device's full lanes do not divide them (overlapping last
    blocks, the hand kernel's shape), else after the direct convolution's."""
    form = classify(space.workload, windows_of_one=True)
    if isinstance(form, Contraction) and space.device.lockstep_items() > 1:
        yield from _lockstep_contraction(space, form)
    elif isinstance(form, Contraction):
        if space.workload.axes[form.columns].extent < simd_lanes(space.device):
            # too few columns to fill a vector (a matrix-vector product): dot
            # products of a block of rows in vectors along the reduce axis,
            # where the inputs hold it contiguously, first (_DOT_BLOCKS)
            yield from _reduction(space, _DOT_BLOCKS)
        yield from _contraction(space, form)
    elif isinstance(form, Window):
        columns = _window_columns(space, form) if form.channels is None else iter(())
        first = next(columns, None)  # depthwise: vectors along the output columns too,
        along = space.workload.axes[form.columns].extent
        if first is not None and along % first[1]["vector"]:
            yield first  # the full lanes' overlapping start first
            first = None
        direct = _window(space, form)
        if form.channels is not None:  # the first start and its twin, then runs along rows
            yield from itertools.islice(direct, 2)
            yield from _window_runs(space, form)
        yield from direct
        if first is not None:
            yield first
        yield from columns
    else:
        yield from _lanes_inward(space)
        yield from _reduction(space)
        yield from _elementwise(space)


def _plain(space: SearchSpace) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    base = dict(space.identity().layouts)
    assignments: list[dict[str, Layout]] = [base]
    for name, layout in base.items():
        if len(layout.shape) == 2:
            assignments.append({**base, name: permute(layout.shape, (1, 0))})
    ranked4 = {n: lay.shape for n, lay in base.items() if len(lay.shape) == 4}
    if ranked4:
        assignments.append({**base, **{n: permute(s, (0, 2, 3, 1)) for n, s in ranked4.items()}})
        assignments.append(
            {**base, **{n: block(s, 1, 4) for n, s in ranked4.items() if s[1] % 4 == 0}}
        )
    workload = space.workload
    spatial_axes = [a for a in workload.axes if a.kind == "spatial"]
    spatial = [a.name for a in spatial_axes]
    extent = spatial_axes[-1].extent
    for layouts in assignments:
        seen: list[dict[str, Any]] = []
        for profile in _PLAIN_PROFILES:
            knobs = _plain_knobs(profile, spatial, extent, space.options.blocks)
            if knobs is not None and knobs not in seen:
                seen.append(knobs)
                yield layouts, knobs


def _plain_knobs(
    profile: Mapping[str, int], spatial: Sequence[str], extent: int, offered: Sequence[int]
) -> dict[str, Any] | None:
    """A plain profile's knobs along the innermost spatial axis (``extent``
    values), its block cut to the largest ``offered`` block the axis holds
    and scalar where the vector would no longer fit in it: an innermost axis
    shorter than every profile (an im2col's ``kw`` of 3) still gets starts,
    where it got none. None where the profile cannot apply."""
    inner = spatial[-1]
    size = profile["block"]
    if size > extent:
        size = max((b for b in offered if b <= extent), default=1)
    knobs: dict[str, Any] = {f"block.{inner}": size}
    vector = profile.get("vector", 1)
    if 1 < vector <= size:
        knobs.update(vector_axis=inner, vector=vector)
    if "across" in profile:
        if len(spatial) < 2 or vector > size:
            return None
        knobs.update({"vector_transpose": spatial[-2], f"block.{spatial[-2]}": profile["across"]})
    return knobs


def _with_output_twins(workload: Any, layouts: Mapping[str, Layout]) -> dict[str, Layout]:
    """``layouts`` with every input read at the output's own indices (a fused
    residual ``R[n, f, oh, ow]`` beside ``Y[n, f, oh, ow]``) laid out as the
    output: it is read where the output is stored, with the same vectors, so
    a start that blocks the output (NCHW16c) is valid for the fused workload
    too. Left as the recipe made it where the output keeps its identity; the
    derived starts only (the plain ones vary each operand's layout on purpose)."""
    out = workload.output
    mine = layouts.get(out.name)
    if mine is None or mine.is_identity:
        return dict(layouts)
    twins = {
        b.name: mine
        for b in workload.inputs
        if b.indices == out.indices and tuple(b.shape) == tuple(out.shape)
    }
    return {**layouts, **twins}


def standard_candidates(space: SearchSpace, limit: int) -> list[Candidate]:
    """Up to ``limit`` standard starts that ``space`` holds, in the order of
    the module docstring: the identity baseline's neighbours first for
    workloads without classics."""
    workload = space.workload
    derived = ((_with_output_twins(workload, lay), knobs) for lay, knobs in _derived(space))
    recipes: list[Iterator[tuple[Mapping[str, Layout], Mapping[str, Any]]]] = [
        derived,
        _plain(space),
    ]
    found: list[Candidate] = []
    baseline = baseline_knobs(workload)
    prefetching = "prefetch" in space.knobs
    for recipe in recipes:
        for layouts, knobs in recipe:
            candidate = Candidate.make(layouts, {**baseline, **knobs})
            replayed = None
            if prefetching and "prefetch" not in knobs:
                for ahead in _ahead(space, {**baseline, **knobs}):
                    replayed = params_of(space, Candidate.make(layouts, ahead))
                    if replayed is not None:
                        break
            if replayed is None:
                replayed = params_of(space, candidate)
            if replayed is not None and replayed[1] not in found:
                found.append(replayed[1])
            if len(found) >= limit:
                return found
    return found


def _ahead(space: SearchSpace, knobs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``knobs`` with ``prefetch``; where they leave the work-groups to the
    driver, also with work-groups that make the next group read the next
    block of an input the knob is offered for: one group across each
    dimension before the one whose innermost axis it indexes (powers of
    two), one item along the rest. A convolution's filters: a group holds a
    whole plane of output blocks, and the next group the next block of
    filters."""
    yield {**knobs, "prefetch": True}
    workload = space.workload
    dims = grid_dims(workload)
    if any(knobs.get(group_knob(workload, d)) for d in range(len(dims))):
        return
    items = [
        math.prod(
            -(-workload.axes[k].extent // int(knobs.get(block_knob(workload, k), 1))) for k in axes
        )
        for axes in dims
    ]
    for name in prefetch_worth(workload, space.device.cache_size):
        for walk in walk_dims(workload, name):
            groups = {
                group_knob(workload, d): _ceil_power(items[d]) if d < walk else 1
                for d in range(len(dims))
            }
            yield {**knobs, **groups, "prefetch": True}


_CONVERSION_KINDS = (
    ("tile", "nontemporal"),
    ("local", "nontemporal"),
    ("tile", "plain"),
    ("gather", "nontemporal"),
    ("local", "plain"),
    ("gather", "plain"),
)
"""The order a conversion's starts take turns in: kernel kind and stores."""


def _conversion_rank(candidate: Candidate) -> tuple[int, ...]:
    """Within a kind: as many items per work-item as vector lanes (square
    register tiles; the ``__local`` tiles the transposes' tunes found), then
    larger ``__local`` tiles, wider vectors, more items, the driver's
    work-group first (ties keep the space's order: identity local tiles first)."""
    knobs = candidate.knob_map
    vector, items = int(knobs.get("vector", 1)), int(knobs.get("items", 1))
    area = 1
    for extent in str(knobs.get("tile", "1")).split("x"):
        area *= int(extent)
    square = knobs.get("kernel") == "gather" or vector == items
    return (0 if square else 1, -area, -vector, -items, int(knobs.get("group", 0)))


def conversion_starts(space: Any, limit: int) -> list[Candidate]:
    """Up to ``limit`` starts of a conversion space (see the module
    docstring): the kinds of :data:`_CONVERSION_KINDS` take turns, each
    giving its next candidate in :func:`_conversion_rank`'s order at a vector
    width it has not given yet."""
    by_kind: dict[tuple[Any, str], list[Candidate]] = {kind: [] for kind in _CONVERSION_KINDS}
    for candidate in space.enumerate():
        kind = (candidate.knob("kernel"), candidate.knob("store") or "plain")
        if kind in by_kind:
            by_kind[kind].append(candidate)
    queues = [sorted(by_kind[kind], key=_conversion_rank) for kind in _CONVERSION_KINDS]
    found: list[Candidate] = []
    widths: list[set[Any]] = [set() for _ in queues]
    while len(found) < limit and any(queues):
        for queue, given in zip(queues, widths, strict=True):
            while queue and queue[0].knob("vector") in given:
                queue.pop(0)
            if queue and len(found) < limit:
                candidate = queue.pop(0)
                given.add(candidate.knob("vector"))
                found.append(candidate)
            if not queue:
                given.clear()
    return found
