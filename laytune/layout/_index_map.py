"""IndexMap: a logical index -> physical index map, with axis separators.

Semantics (the ones DESIGN.md commits to):

- On a logical shape S, the physical shape has, per output, the maximum over
  every logical index of S plus one. An output that can be negative is an
  error naming the index (:class:`NegativeIndexError`).
- Axis separators group the physical indices; each group flattens row-major
  into one physical axis (``flat_shape``). No separator: a flat 1-D buffer.
- Padding: physical positions that no logical index reaches.
- The map is valid on S when it is injective there; otherwise
  :class:`NonInjectiveLayoutError` names two colliding logical indices.

What a shape tells is found without looking at every element where the
map's form allows it: an affine output is bounded by intervals, any other on
one quasi-period per axis where its extreme lies
(:mod:`laytune.layout._periods`); an affine map's injectivity has a closed
form; a layout built by a family or a composition of layouts is injective by
construction (it says so, :meth:`IndexMap._known_injective`); and once a
map's validity on a shape is known it is remembered by (map, shape) across
instances, so padding (the physical size less the logical one) follows.
What remains, a map written by hand, is looked at once, vectorised: logical
indices are broadcast index grids (``Var(k)`` is an array of shape
``(1, .., S[k], .., 1)``), so each subexpression is only as large as the
axes it depends on, and injectivity is one scatter into an occupancy array
of the physical size.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from inspect import Parameter, signature
from itertools import pairwise
from operator import mul
from typing import Any

import numpy as np

from laytune.exceptions import (
    ArgumentTypeError,
    LayoutError,
    LayoutSyntaxError,
    NegativeIndexError,
    NonInjectiveLayoutError,
    ShapeMismatchError,
    excerpt,
)
from laytune.layout import _expr as ex
from laytune.layout._expr import Const, Expr, Var
from laytune.layout._inverse import Inverse, invert
from laytune.layout._json import load_versioned
from laytune.layout._parse import MAX_INDICES, SEPARATOR_TOKEN, parse_index_map
from laytune.layout._periods import drift, vanishes, window

__all__ = ["AXIS_SEPARATOR", "IndexMap", "Shape", "compose"]

Shape = tuple[int, ...]

JSON_VERSION = 1

# The physical size up to which injectivity uses an occupancy array; larger
# sparse images fall back to sorting the offsets.
_DENSE_FACTOR = 64


class _AxisSeparator:
    """Marker placed in the list an index map returns, where physical axes split."""

    _instance: _AxisSeparator | None = None

    def __new__(cls) -> _AxisSeparator:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return SEPARATOR_TOKEN

    def __reduce__(self) -> str:
        return SEPARATOR_TOKEN


AXIS_SEPARATOR = _AxisSeparator()


def _prod(values: Sequence[int]) -> int:
    return reduce(mul, values, 1)


def _check_shape(shape: Sequence[int], ndim: int, what: str = "shape") -> Shape:
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise ShapeMismatchError(f"{what} must be a sequence of integers, got {shape!r}") from None
    if len(shape) != ndim:
        raise ShapeMismatchError(
            f"{what} {shape} has rank {len(shape)} but the index map takes {ndim} indices"
        )
    for extent in shape:
        if extent <= 0:
            raise ShapeMismatchError(f"{what} {shape} has a non-positive extent {extent}")
    return shape


#: Bytes of offsets and occupancy arrays that the shape facts of all maps
#: keep at once. Those arrays are as large as the buffers, and caches of
#: code generation keep many maps alive: past the budget, the least recently
#: used facts drop their arrays, to be computed again if asked for.
FACTS_BUDGET_BYTES = 1 << 28
#: At most this many facts keep arrays at once (and are kept alive for them).
FACTS_BUDGET_COUNT = 4096
_HELD: OrderedDict[int, tuple[_ShapeFacts, int]] = OrderedDict()  # facts, bytes counted
_HELD_BYTES = [0]
_HELD_LOCK = threading.Lock()


def _hold(facts: _ShapeFacts) -> None:
    """Count ``facts``' arrays as the most recently used; drop the arrays of
    the least recently used facts while over :data:`FACTS_BUDGET_BYTES` or
    :data:`FACTS_BUDGET_COUNT`."""
    with _HELD_LOCK:
        key = id(facts)
        held = _HELD.pop(key, None)
        if held is not None:
            _HELD_BYTES[0] -= held[1]
        size = facts.nbytes
        _HELD[key] = (facts, size)
        _HELD_BYTES[0] += size
        while len(_HELD) > 1 and (
            _HELD_BYTES[0] > FACTS_BUDGET_BYTES or len(_HELD) > FACTS_BUDGET_COUNT
        ):
            _, (oldest, counted) = _HELD.popitem(last=False)
            _HELD_BYTES[0] -= counted
            oldest.forget()


class _ShapeFacts:
    """What one shape tells about a map, computed lazily and cached (the
    arrays within a process-wide budget, see :func:`_hold`)."""

    def __init__(self, shape: Shape, physical_shape: Shape, index_map: IndexMap):
        self.shape = shape
        self.physical_shape = physical_shape
        self._map = index_map
        self._offsets: np.ndarray | None = None
        self._occupancy: np.ndarray | None = None
        self._collision: tuple[Shape, Shape] | None = None
        self._checked = False
        self._dense = False  # the check kept an occupancy array

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self._offsets, self._occupancy) if a is not None)

    def forget(self) -> None:
        """Drop the arrays (the collision found stays: it is small)."""
        self._offsets = None
        self._occupancy = None

    @property
    def offsets(self) -> np.ndarray:
        """Row-major flat physical offset of each logical element, in logical order."""
        flat = self._offsets
        if flat is None:
            pshape = self.physical_shape
            terms = []
            outputs = self._map._eval(self._map._grid(self.shape))
            for k, out in enumerate(outputs):
                stride = _prod(pshape[k + 1 :])
                terms.append(np.asarray(out, dtype=np.int64) * stride)
            # add the small broadcast terms first: only the last addition is full size
            terms.sort(key=lambda t: t.size)
            flat = terms[0]
            for term in terms[1:]:
                flat = flat + term
            flat = np.broadcast_to(flat, self.shape).reshape(-1)
            flat.flags.writeable = False
            self._offsets = flat
        _hold(self)
        return flat

    def check(self) -> None:
        if self._checked and (self._occupancy is not None or not self._dense):
            return
        offsets, shape = self.offsets, self.shape
        n = offsets.size
        size = _prod(self.physical_shape)
        collision = None
        if size <= _DENSE_FACTOR * n + (1 << 20):
            owner = np.full(size, -1, dtype=np.int64)
            order = np.arange(n, dtype=np.int64)
            owner[offsets] = order
            occupancy = owner >= 0
            if int(np.count_nonzero(occupancy)) != n:
                mine = owner[offsets]
                k = int(np.flatnonzero(mine != order)[0])
                collision = (_unravel(k, shape), _unravel(int(mine[k]), shape))
            self._occupancy, self._dense = occupancy, True
        else:
            order = np.argsort(offsets, kind="stable")
            ranked = offsets[order]
            dup = np.flatnonzero(ranked[1:] == ranked[:-1])
            if dup.size:
                collision = (
                    _unravel(int(order[dup[0]]), shape),
                    _unravel(int(order[dup[0] + 1]), shape),
                )
        self._collision, self._checked = collision, True
        _hold(self)

    @property
    def collision(self) -> tuple[Shape, Shape] | None:
        if not self._checked:
            self.check()
        return self._collision

    @property
    def occupancy(self) -> np.ndarray | None:
        self.check()
        return self._occupancy


_EVAL_LIMIT = 1 << 22  # elements evaluated at once when bounding an output
_WINDOW_FROM = 4096  # outputs over fewer indices than this are simply evaluated


def _output_range(expr: Expr, shape: Shape) -> tuple[int, int, Shape]:
    """Exact (min, max) of one output over every index of ``shape``, and an
    index where the min is reached. Evaluates only over the axes the output
    uses; an affine output is bounded exactly by intervals (its extremes lie at
    corners), anything else is evaluated in chunks of bounded memory."""
    used = sorted(ex.variables(expr))
    if not used:
        value = int(ex.evaluate(expr, [0] * len(shape)))
        return value, value, (0,) * len(shape)
    ranges = [(0, s - 1) for s in shape]
    simplifier = ex._Simplifier(ranges)
    linear = simplifier.linear(expr)
    if all(isinstance(atom, Var) for atom in linear.terms):
        low, high = simplifier.lin_bounds(linear)
        where = [0] * len(shape)
        for atom, coeff in linear.terms.items():
            where[atom.index] = shape[atom.index] - 1 if coeff < 0 else 0
        return low, high, tuple(where)
    windowed = _windowed_range(expr, shape, used, ranges)
    if windowed is not None:
        return windowed
    # evaluate over the used axes, the first one in chunks
    rest = _prod([shape[v] for v in used[1:]])
    step = max(1, _EVAL_LIMIT // rest)
    low = high = None
    where: Shape = (0,) * len(shape)
    first = used[0]
    for start in range(0, shape[first], step):
        stop = min(shape[first], start + step)
        args: list[Any] = [0] * len(shape)
        for position, v in enumerate(used):
            extent = stop - start if v == first else shape[v]
            axis = np.arange(start, stop) if v == first else np.arange(shape[v])
            args[v] = axis.astype(np.int64).reshape(
                [extent if p == position else 1 for p in range(len(used))]
            )
        arr = np.broadcast_to(
            np.asarray(ex.evaluate(expr, args), dtype=np.int64),
            [(stop - start) if v == first else shape[v] for v in used],
        )
        chunk_low, chunk_high = int(arr.min()), int(arr.max())
        if low is None or chunk_low < low:
            low = chunk_low
            local = np.unravel_index(int(arr.argmin()), arr.shape)
            full = [0] * len(shape)
            for position, v in enumerate(used):
                full[v] = int(local[position]) + (start if v == first else 0)
            where = tuple(full)
        high = chunk_high if high is None else max(high, chunk_high)
    assert low is not None and high is not None
    return low, high, where


def _windowed_range(
    expr: Expr, shape: Shape, used: list[int], ranges: list[ex.Range]
) -> tuple[int, int, Shape] | None:
    """:func:`_output_range` on the windows of :func:`~laytune.layout._periods.window`:
    per used axis one quasi-period at the end where the extreme lies (exact,
    see there); None when the windows are not much smaller than the axes."""
    periods = {v: drift(expr, v, ranges) for v in used}
    full = _prod([shape[v] for v in used])
    out: list[Any] = []
    for highest in (False, True):
        windows = {v: window(shape[v], periods[v], highest) for v in used}
        if full < _WINDOW_FROM or 2 * _prod([len(w) for w in windows.values()]) > full:
            return None
        args: list[Any] = [0] * len(shape)
        for position, v in enumerate(used):
            w = windows[v]
            args[v] = np.arange(w.start, w.stop, dtype=np.int64).reshape(
                [len(w) if p == position else 1 for p in range(len(used))]
            )
        arr = np.broadcast_to(
            np.asarray(ex.evaluate(expr, args), dtype=np.int64), [len(windows[v]) for v in used]
        )
        if highest:
            out.append(int(arr.max()))
        else:
            local = np.unravel_index(int(arr.argmin()), arr.shape)
            where = [0] * len(shape)
            for position, v in enumerate(used):
                where[v] = windows[v].start + int(local[position])
            out += [int(arr.min()), tuple(where)]
    return out[0], out[2], out[1]


#: Whether a map is injective on a shape, by (map, shape) across IndexMap
#: instances (the same layout is rebuilt for every candidate and record):
#: None or the colliding pair. A map is looked at once, then never again.
_VALIDITY: OrderedDict[tuple[IndexMap, Shape], tuple[Shape, Shape] | None] = OrderedDict()
_VALIDITY_LIMIT = 8192
_VALIDITY_LOCK = threading.Lock()
_UNKNOWN = object()


def _remember_validity(key: tuple[IndexMap, Shape], collision: tuple[Shape, Shape] | None) -> None:
    with _VALIDITY_LOCK:
        _VALIDITY[key] = collision
        _VALIDITY.move_to_end(key)
        while len(_VALIDITY) > _VALIDITY_LIMIT:
            _VALIDITY.popitem(last=False)


def _affine_collision(
    index_map: IndexMap, shape: Shape, pshape: Shape
) -> tuple[bool, tuple[Shape, Shape] | None]:
    """(decided, collision) for a map whose outputs are affine on ``shape``,
    without a pass: its flat offset is ``c + sum(s_k * i_k)``, injective
    unless some ``d != 0`` with ``|d_k| < S_k`` has ``sum(s_k * d_k) == 0``.
    Decided when a stride is 0 (a collision), when the strides nest (each
    larger than the reach of the smaller ones: injective), or with two axes
    of extent > 1 (the least such ``d`` is ``(s_1, -s_0) / gcd``)."""
    simplifier = ex._Simplifier([(0, s - 1) for s in shape])
    strides = [0] * len(shape)
    for k, out in enumerate(index_map.outputs):
        linear = simplifier.linear(out)
        if not all(isinstance(atom, Var) for atom in linear.terms):
            return False, None
        stride = _prod(pshape[k + 1 :])
        for atom, coeff in linear.terms.items():
            strides[atom.index] += coeff * stride  # type: ignore[union-attr]
    axes = [k for k, extent in enumerate(shape) if extent > 1]

    def pair(step: dict[int, int]) -> tuple[Shape, Shape]:
        a = tuple(max(step.get(k, 0), 0) for k in range(len(shape)))
        b = tuple(max(-step.get(k, 0), 0) for k in range(len(shape)))
        return a, b

    for k in axes:
        if strides[k] == 0:
            return True, pair({k: 1})
    reach = 0
    for k in sorted(axes, key=lambda k: abs(strides[k])):
        if abs(strides[k]) <= reach:
            break
        reach += abs(strides[k]) * (shape[k] - 1)
    else:
        return True, None
    if len(axes) == 2:
        a, b = axes
        g = math.gcd(strides[a], strides[b])
        step = {a: strides[b] // g, b: -strides[a] // g}
        if abs(step[a]) < shape[a] and abs(step[b]) < shape[b]:
            return True, pair(step)
        return True, None
    return False, None


def _unravel(k: int, shape: Shape) -> Shape:
    return tuple(int(v) for v in np.unravel_index(k, shape))


@dataclass(frozen=True, eq=False)
class IndexMap:
    """An immutable, hashable map from logical to physical indices.

    Build one with :meth:`from_func`, :meth:`parse` or the family
    constructors. Equality is structural: the same outputs and separators over
    the same number of indices (parameter names are for display only).
    ``str(m)`` is the canonical text and ``IndexMap.parse(str(m)) == m``.
    """

    params: tuple[str, ...]
    outputs: tuple[Expr, ...]
    separators: tuple[int, ...] = ()
    _facts: dict[Shape, _ShapeFacts] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )
    _hash: list[int] = field(default_factory=list, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.outputs:
            raise LayoutError("an index map needs at least one physical index")
        for count, what in ((len(self.params), "logical"), (len(self.outputs), "physical")):
            if count > MAX_INDICES:
                raise LayoutSyntaxError(
                    f"an index map of {count} {what} indices, more than the {MAX_INDICES} "
                    "laytune takes"
                )
        ex.check_size(self.outputs)
        if len(set(self.params)) != len(self.params):
            raise LayoutError(f"duplicate parameter names in {self.params}")
        seps = self.separators
        if list(seps) != sorted(set(seps)) or any(s <= 0 or s >= len(self.outputs) for s in seps):
            raise LayoutError(
                f"axis separators {seps} must be increasing positions between 1 and "
                f"{len(self.outputs) - 1}"
            )
        for out in self.outputs:
            for k in ex.variables(out):
                if k >= len(self.params):
                    raise LayoutError(
                        f"output {out} uses index {k} of a {len(self.params)}-index map"
                    )
        named = tuple(ex.rename(o, self.params) for o in self.outputs)
        object.__setattr__(self, "outputs", named)

    # -- construction ---------------------------------------------------------
    @classmethod
    def from_func(
        cls, func: Callable[..., Sequence[Any]], names: Sequence[str] | None = None
    ) -> IndexMap:
        """Trace ``func`` on symbolic indices: ``lambda i, j: [j, i]``.

        The returned list may hold ``AXIS_SEPARATOR`` and integer constants.
        """
        if names is None:
            params = []
            for p in signature(func).parameters.values():
                if p.kind not in (Parameter.POSITIONAL_ONLY, Parameter.POSITIONAL_OR_KEYWORD):
                    raise LayoutError(f"index map functions take plain positional indices, not {p}")
                params.append(p.name)
            names = params
        names = tuple(names)
        result = func(*(Var(k, n) for k, n in enumerate(names)))
        if isinstance(result, (Const, Var, ex.BinOp, int)):
            result = [result]
        outputs: list[Expr] = []
        separators: list[int] = []
        for item in result:
            if item is AXIS_SEPARATOR:
                if not outputs or (separators and separators[-1] == len(outputs)):
                    raise LayoutError("AXIS_SEPARATOR must stand between two physical indices")
                separators.append(len(outputs))
            else:
                outputs.append(ex._as_expr(item))
        if separators and separators[-1] == len(outputs):
            raise LayoutError("AXIS_SEPARATOR must stand between two physical indices")
        return cls(names, tuple(outputs), tuple(separators))

    @classmethod
    def parse(cls, text: str) -> IndexMap:
        """Parse the canonical text; never evaluates it."""
        params, outputs, separators = parse_index_map(text)
        return cls(params, outputs, separators)

    @classmethod
    def identity(cls, ndim: int, names: Sequence[str] | None = None) -> IndexMap:
        names = tuple(names) if names is not None else default_names(ndim)
        return cls(names, tuple(Var(k, n) for k, n in enumerate(names)))

    # -- text and JSON -------------------------------------------------------
    def __str__(self) -> str:
        items = [ex.to_text(o, self.params) for o in self.outputs]
        for position in reversed(self.separators):
            items.insert(position, SEPARATOR_TOKEN)
        return f"lambda {', '.join(self.params)}: [{', '.join(items)}]"

    def __repr__(self) -> str:
        return f"IndexMap({str(self)!r})"

    def to_json(self) -> dict[str, Any]:
        return {"version": JSON_VERSION, "index_map": str(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> IndexMap:
        data = load_versioned(data, "index map", JSON_VERSION, ("index_map",))
        return cls.parse(data["index_map"])

    # -- identity ------------------------------------------------------------
    def _key(self) -> tuple[int, tuple[Expr, ...], tuple[int, ...]]:
        return (len(self.params), self.outputs, self.separators)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IndexMap) and self._key() == other._key()

    def __hash__(self) -> int:
        # kept: the caches of facts by (map, shape) hash a map often, and
        # hashing its expression trees is as deep as they are
        if not self._hash:
            self._hash.append(hash(self._key()))
        return self._hash[0]

    def __getstate__(self) -> dict[str, Any]:
        # a hash of strings differs from process to process, and the facts'
        # arrays are as large as the buffer: neither travels
        return {**self.__dict__, "_hash": [], "_facts": {}}

    @property
    def ndim_in(self) -> int:
        return len(self.params)

    @property
    def ndim_out(self) -> int:
        return len(self.outputs)

    @property
    def groups(self) -> tuple[tuple[int, int], ...]:
        """(start, stop) of the outputs in each separator group."""
        bounds = (0, *self.separators, self.ndim_out)
        return tuple(pairwise(bounds))

    def is_identity(self) -> bool:
        return not self.separators and self.outputs == tuple(Var(k) for k in range(self.ndim_in))

    # -- evaluation ----------------------------------------------------------
    def map_indices(self, index: Any) -> Any:
        """Physical index of a logical index.

        ``index`` is a tuple of ints (gives a tuple of ints), a tuple of
        broadcastable integer arrays (gives a tuple of arrays), or one array
        whose last axis holds the indices (gives an array whose last axis holds
        the physical indices).
        """
        if isinstance(index, np.ndarray) and index.ndim >= 1 and index.dtype != object:
            if index.shape[-1] != self.ndim_in:
                raise ShapeMismatchError(
                    f"index array's last axis has {index.shape[-1]} entries, the map takes {self.ndim_in}"
                )
            cols = [index[..., k].astype(np.int64) for k in range(self.ndim_in)]
            out = self._eval(cols)
            return np.stack(np.broadcast_arrays(*out), axis=-1)
        index = tuple(index)
        if len(index) != self.ndim_in:
            raise ShapeMismatchError(
                f"index {index} has {len(index)} entries, the map takes {self.ndim_in}"
            )
        if all(isinstance(i, (int, np.integer)) for i in index):
            return tuple(int(v) for v in self._eval([int(i) for i in index]))
        cols = [np.asarray(i, dtype=np.int64) for i in index]
        return tuple(np.broadcast_arrays(*self._eval(cols)))

    __call__ = map_indices

    def _eval(self, args: Sequence[Any]) -> list[Any]:
        memo: dict[Expr, Any] = {}
        return [ex.evaluate(o, args, memo) for o in self.outputs]

    def flat_offset(self, index: Any, shape: Sequence[int]) -> Any:
        """Offset of a logical index after flattening on logical ``shape``.

        One int (or array) for a flat buffer; a tuple, one per physical axis,
        when the map has axis separators.
        """
        phys = self.map_indices(index)
        pshape = self.physical_shape(shape)
        if isinstance(phys, np.ndarray):
            cols = [phys[..., k] for k in range(self.ndim_out)]
        else:
            cols = list(phys)
        offsets = []
        for start, stop in self.groups:
            offset: Any = 0
            for k in range(start, stop):
                offset = offset * pshape[k] + cols[k]
            offsets.append(offset)
        return offsets[0] if len(offsets) == 1 else tuple(offsets)

    # -- queries on a shape --------------------------------------------------
    def _grid(self, shape: Shape) -> list[np.ndarray]:
        n = len(shape)
        return [
            np.arange(extent, dtype=np.int64).reshape([extent if k == d else 1 for d in range(n)])
            for k, extent in enumerate(shape)
        ]

    def _shape_facts(self, shape: Sequence[int]) -> _ShapeFacts:
        shape = _check_shape(shape, self.ndim_in)
        facts = self._facts.get(shape)
        if facts is not None:
            return facts
        pshape = []
        ranges = [(0, s - 1) for s in shape]
        for k, out in enumerate(self.outputs):
            # numpy evaluates in 64 bits: refuse what could wrap around
            if not ex.fits(out, ranges, -ex.MAX_CONSTANT, ex.MAX_CONSTANT):
                raise LayoutError(
                    f"{excerpt(self)}: physical index {k} on shape {shape} computes values "
                    "past 2^62 in magnitude (laytune's indices are 64-bit integers)"
                )
            low, high, where = _output_range(out, shape)
            if low < 0:
                raise NegativeIndexError(
                    f"{excerpt(self)}: logical index {where} of shape {shape} maps to physical index "
                    f"{self.map_indices(where)}, whose entry {k} is negative ({low})",
                    where,
                )
            pshape.append(high + 1)
        if _prod(pshape) > ex.MAX_CONSTANT:
            raise LayoutError(
                f"{excerpt(self)} on shape {shape} has a physical size past 2^62 elements "
                "(laytune's offsets are 64-bit integers)"
            )
        facts = _ShapeFacts(shape, tuple(pshape), self)
        if len(self._facts) >= 4:  # keep memory bounded on large buffers
            self._facts.pop(next(iter(self._facts)))
        self._facts[shape] = facts
        return facts

    def physical_shape(self, shape: Sequence[int]) -> Shape:
        """One extent per physical index (before separators): max + 1."""
        return self._shape_facts(shape).physical_shape

    def flat_shape(self, shape: Sequence[int]) -> Shape:
        """The physical shape after grouping by axis separators."""
        pshape = self.physical_shape(shape)
        return tuple(_prod(pshape[a:b]) for a, b in self.groups)

    def physical_size(self, shape: Sequence[int]) -> int:
        return _prod(self.physical_shape(shape))

    def _collision(self, shape: Sequence[int]) -> tuple[Shape, Shape] | None:
        """Two logical indices of ``shape`` that collide, or None. Known for a
        (map, shape) seen before (by any instance), closed-form for affine
        maps, else one vectorised pass, remembered."""
        facts = self._shape_facts(shape)
        key = (self, facts.shape)
        with _VALIDITY_LOCK:
            hit = _VALIDITY.get(key, _UNKNOWN)
            if hit is not _UNKNOWN:
                _VALIDITY.move_to_end(key)
                return hit  # type: ignore[return-value]
        decided, collision = _affine_collision(self, facts.shape, facts.physical_shape)
        if not decided:
            collision = facts.collision
        _remember_validity(key, collision)
        return collision

    def _known_injective(self, shape: Sequence[int]) -> None:
        """Record that the map is injective on ``shape`` because of how it was
        built (a family, a composition of valid layouts), so that no query
        ever looks at it element by element."""
        facts = self._shape_facts(shape)
        _remember_validity((self, facts.shape), None)

    def is_injective(self, shape: Sequence[int]) -> bool:
        return self._collision(shape) is None

    def validate(self, shape: Sequence[int]) -> IndexMap:
        """Raise unless the map is a valid layout on ``shape``; return self."""
        collision = self._collision(shape)
        if collision is not None:
            a, b = collision
            raise NonInjectiveLayoutError(
                f"{excerpt(self)} is not injective on shape {tuple(shape)}: logical indices {a} and {b} "
                f"both map to physical index {self.map_indices(a)}",
                a,
                b,
            )
        return self

    def padding_count(self, shape: Sequence[int]) -> int:
        """Physical positions that no logical index of ``shape`` reaches:
        the physical size less the logical one when the map is injective."""
        facts = self._shape_facts(shape)
        if self._collision(shape) is None:
            return _prod(facts.physical_shape) - _prod(facts.shape)
        if facts.occupancy is not None:
            return int(facts.occupancy.size - np.count_nonzero(facts.occupancy))
        return _prod(facts.physical_shape) - int(np.unique(facts.offsets).size)

    def padding_mask(self, shape: Sequence[int]) -> np.ndarray:
        """Boolean array over the physical shape, True at padding."""
        facts = self._shape_facts(shape)
        if facts.occupancy is not None:
            return ~facts.occupancy.reshape(facts.physical_shape)
        mask = np.ones(_prod(facts.physical_shape), dtype=bool)
        mask[facts.offsets] = False
        return mask.reshape(facts.physical_shape)

    def flat_offsets(self, shape: Sequence[int]) -> np.ndarray:
        """Flat physical offset of every logical element, in logical row-major order.

        Over the whole physical shape, so for a map with separators this is the
        row-major position in the ``flat_shape`` array. Read-only.
        """
        return self._shape_facts(shape).offsets

    # -- algebra -------------------------------------------------------------
    def ranges(self, shape: Sequence[int]) -> list[ex.Range]:
        shape = _check_shape(shape, self.ndim_in)
        return [(0, s - 1) for s in shape]

    def simplify(self, shape: Sequence[int]) -> IndexMap:
        """An equivalent map on ``shape`` with simpler outputs (uses index ranges)."""
        ranges = self.ranges(shape)
        outs = tuple(ex.simplify(o, ranges) for o in self.outputs)
        return IndexMap(self.params, outs, self.separators)

    def equivalent(self, other: IndexMap, shape: Sequence[int]) -> bool:
        """True when both maps give the same physical index (and the same
        separators) for every logical index of ``shape``.

        Decided without a pass over ``shape``: each output's difference is
        shown to vanish on its quasi-periods (:func:`~laytune.layout._periods.vanishes`),
        so pricing a record or matching a held layout costs the same on any extents."""
        if not isinstance(other, IndexMap):
            return False
        if self.ndim_in != other.ndim_in or self.ndim_out != other.ndim_out:
            return False
        if self.separators != other.separators:
            return False
        if self == other:
            return True
        shape = _check_shape(shape, self.ndim_in)
        return all(vanishes(a - b, shape) for a, b in zip(self.outputs, other.outputs, strict=True))

    def flat_offset_exprs(self, shape: Sequence[int], simplified: bool = True) -> tuple[Expr, ...]:
        """Symbolic flat offset per physical axis (one per separator group)."""
        return _flat_offset_exprs(self, tuple(shape), simplified)

    def _flat_offset_exprs(self, shape: tuple[int, ...], simplified: bool) -> tuple[Expr, ...]:
        pshape = self.physical_shape(shape)
        exprs = []
        for start, stop in self.groups:
            offset: Expr = Const(0)
            for k in range(start, stop):
                offset = offset * pshape[k] + self.outputs[k]
            exprs.append(offset)
        if simplified:
            ranges = self.ranges(shape)
            exprs = [ex.simplify(e, ranges) for e in exprs]
        return tuple(ex.rename(e, self.params) for e in exprs)

    def to_opencl(
        self,
        shape: Sequence[int],
        names: Sequence[str] | None = None,
        flat: bool = True,
    ) -> tuple[str, ...]:
        """OpenCL C expressions: the flat offset per physical axis (default), or
        each physical index when ``flat=False``. Simplified with the index
        ranges of ``shape``; ``names`` are the C names of the logical indices."""
        ranges = self.ranges(shape)
        names = tuple(names) if names is not None else self.params
        exprs = (
            self.flat_offset_exprs(shape)
            if flat
            else tuple(ex.simplify(o, ranges) for o in self.outputs)
        )
        return tuple(ex.to_opencl(e, names, ranges) for e in exprs)

    def index_ctype(self, shape: Sequence[int]) -> str:
        """``int`` when every intermediate of the flat offset fits 32 bits, else ``long``."""
        ranges = self.ranges(shape)
        exprs = self.flat_offset_exprs(shape) + self.outputs
        return "int" if all(ex.fits_int32(e, ranges) for e in exprs) else "long"

    def inverse(self, shape: Sequence[int]) -> Inverse:
        """The inverse on ``shape``: physical index -> logical index, and the
        padding predicate (see :class:`~laytune.layout.Inverse`)."""
        return invert(self, shape)


def default_names(ndim: int) -> tuple[str, ...]:
    letters = "ijklmnopqrstuvwxyz"
    if ndim <= len(letters):
        return tuple(letters[:ndim])
    return tuple(f"i{k}" for k in range(ndim))


def compose(g: IndexMap, f: IndexMap) -> IndexMap:
    """``g . f``: first ``f`` (logical -> intermediate), then ``g``.

    Law: for every index x, ``compose(g, f).map_indices(x) ==
    g.map_indices(f.map_indices(x))``. ``g`` takes as many indices as ``f``
    returns; ``f`` must not split axes (apply separators last), and the
    result keeps ``g``'s separators.
    """
    if not isinstance(g, IndexMap) or not isinstance(f, IndexMap):
        raise ArgumentTypeError(
            f"compose takes two IndexMaps, got {type(g).__name__} and {type(f).__name__} "
            "(use laytune.layout.compose for layouts)"
        )
    if g.ndim_in != f.ndim_out:
        raise ShapeMismatchError(
            f"cannot compose: {g} takes {g.ndim_in} indices but {f} returns {f.ndim_out}"
        )
    if f.separators:
        raise LayoutError(
            f"cannot compose after {f}: it has axis separators; apply separators in the outer map"
        )
    # substituting copies f's outputs into every use: bound the result first
    leaves = [ex.measure(o) for o in f.outputs]
    nodes = 0
    for out in g.outputs:
        count, depth = ex.measure(out, leaves)
        nodes += count
        if nodes > ex.MAX_NODES or depth > ex.MAX_DEPTH:
            raise LayoutSyntaxError(
                f"composing {excerpt(g)} after {excerpt(f)} gives a map of more than "
                f"{ex.MAX_NODES} nodes or deeper than {ex.MAX_DEPTH}, more than laytune takes"
            )
    outs = tuple(ex.substitute(o, f.outputs) for o in g.outputs)
    return IndexMap(f.params, outs, g.separators)


@functools.lru_cache(maxsize=4096)
def _flat_offset_exprs(
    index_map: IndexMap, shape: tuple[int, ...], simplified: bool
) -> tuple[Expr, ...]:
    """:meth:`IndexMap.flat_offset_exprs`, memoised: code generation asks it
    of the same few layouts for every candidate."""
    return index_map._flat_offset_exprs(shape, simplified)
