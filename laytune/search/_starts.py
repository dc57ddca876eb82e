"""Standard starts: the candidates people write by hand, tried before a sampler.

A space of billions of candidates is searched from the kernels that experts
would write first, so that a sampler refines good points instead of hunting
for them:

* **register-blocked classics**: matmul with packed panels (A as
  ``[i // MR, k, i % MR]``, B as ``[j // NR, k, j % NR]``) and an MR x NR
  block of C per work-item with ``floatNR`` accumulators (BLIS's micro-kernel
  shape), also on row-major operands; a direct conv2d on NCHW[x]c
  activations and OIHW[x]i[x]o weights, vectors along the output channels
  (one or two vectors of them per work-item), a block of output columns per
  work-item, and the input channels blocked
  around the kernel window (``c // x, kh, kw, c % x``), as oneDNN and MLAS do.
* **plain layouts with common knobs**: identity, each 2-D operand
  transposed, NHWC and NCHW4c, each with a few register blocks and vectors
  along the innermost axis, and square blocks whose inputs that are not
  contiguous along it are transposed in registers (``vector_transpose``).

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

from collections.abc import Iterator, Mapping
from typing import Any

from laytune.layout import Layout, block, compose, panel, permute
from laytune.search._strategies import params_of
from laytune.space import Candidate, SearchSpace, baseline_knobs

__all__ = ["conversion_starts", "standard_candidates"]

# (MR, NR, vector): register blocks of C per work-item. 8 x 16 first: over
# packed panels it was the fastest start at every size measured on the AVX-512
# host (Intel's CPU runtime), end to end with its packing, where 6 x 16 (BLIS's
# AVX2 shape, first until now) took 1.1-1.4x longer: 0.71 against 0.97 ms at
# 512^3, 5.6 against 7.6 ms at 1024^3, 2.05 against 2.36 ms at 64 x 4096 x
# 1024; and jobs of 24 trials try only the first six starts
_MATMUL_BLOCKS = ((8, 16, 16), (6, 16, 16), (4, 16, 16), (8, 8, 8), (6, 16, 8), (4, 8, 8))
# (channel block of the layouts, output channels per work-item, output columns
# per work-item, vector): first two vectors of filters by 4 columns (8
# accumulators, the AVX-512 direct convolution's tile: 0.50 ms on the default
# conv2d (1,64,56,56) x 64 where the best one-vector start took 0.91)
_CONV_BLOCKS = (
    (16, 32, 4, 16),
    (16, 16, 4, 16),
    (16, 16, 4, 8),
    (16, 16, 6, 16),
    (8, 8, 8, 8),
    (16, 16, 7, 16),
    (8, 8, 4, 8),
)
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


def _oihw_blocked(shape: tuple[int, ...], x: int, y: int) -> Layout:
    inner = block(shape, 1, x)
    return compose(block(inner.physical_shape, 0, y), inner)


def _matmul(space: SearchSpace) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    base = dict(space.identity().layouts)
    a, b = base["A"].shape, base["B"].shape
    for mr, nr, vector in _MATMUL_BLOCKS:
        knobs = {"vector_axis": "j", "vector": vector, "block.i": mr, "block.j": nr}
        yield {**base, "A": block(a, 0, mr), "B": panel(b, 1, nr)}, knobs
        yield base, knobs


def _conv2d(space: SearchSpace) -> Iterator[tuple[dict[str, Layout], dict[str, Any]]]:
    base = dict(space.identity().layouts)
    x, w, y = base["X"].shape, base["W"].shape, base["Y"].shape
    channels = x[1]
    for cb, filters, columns, vector in _CONV_BLOCKS:
        layouts = {
            **base,
            "X": block(x, 1, cb),
            "W": _oihw_blocked(w, cb, cb),
            "Y": block(y, 1, cb),
        }
        knobs: dict[str, Any] = {
            "vector_axis": "f",
            "vector": vector,
            "block.f": filters,
            "block.ow": columns,
        }
        if channels > cb:
            knobs["split"] = cb  # c // cb, kh, kw, c % cb
        else:
            knobs["reduce_order"] = "kh,kw,c"
        yield layouts, knobs


_CLASSICS = {"matmul": _matmul, "conv2d": _conv2d}


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
    spatial = [a.name for a in workload.axes if a.kind == "spatial"]
    inner = spatial[-1]
    for layouts in assignments:
        for profile in _PLAIN_PROFILES:
            knobs: dict[str, Any] = {f"block.{inner}": profile["block"]}
            if "vector" in profile:
                knobs.update(vector_axis=inner, vector=profile["vector"])
            if "across" in profile:
                if len(spatial) < 2:
                    continue
                knobs.update(
                    {"vector_transpose": spatial[-2], f"block.{spatial[-2]}": profile["across"]}
                )
            yield layouts, knobs


def standard_candidates(space: SearchSpace, limit: int) -> list[Candidate]:
    """Up to ``limit`` standard starts that ``space`` holds, in the order of
    the module docstring: the identity baseline's neighbours first for
    workloads without classics."""
    workload = space.workload
    recipes: list[Iterator[tuple[Mapping[str, Layout], Mapping[str, Any]]]] = []
    classics = _CLASSICS.get(workload.name)
    if classics is not None:
        recipes.append(classics(space))
    recipes.append(_plain(space))
    found: list[Candidate] = []
    baseline = baseline_knobs(workload)
    for recipe in recipes:
        for layouts, knobs in recipe:
            candidate = Candidate.make(layouts, {**baseline, **knobs})
            replayed = params_of(space, candidate)
            if replayed is not None and replayed[1] not in found:
                found.append(replayed[1])
            if len(found) >= limit:
                return found
    return found


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
