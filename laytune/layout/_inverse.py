"""Inverting an index map on a shape.

The inverse of an injective map on S sends each physical index that some
logical index reaches back to that logical index. For a padded map it comes
with a padding predicate: a physical index ``p`` holds a real element exactly
when ``inv(p)`` lies inside S and ``m(inv(p)) == p``. Both parts are
simplified with the physical index ranges, so for ``[i // 4, i % 4]`` on
``(14,)`` the inverse is ``[p0 * 4 + p1]`` and the predicate ``p0 * 4 + p1 <= 13``.

Derivation: every logical index is cut into mixed-radix digits at the
divisors the map uses (``i // 4`` and ``i % 4`` cut ``i`` at 4). Each physical
index is then a linear combination of digits (and of XOR terms of digits);
digits are read back from the physical indices by floor division and modulo,
largest coefficient first, provided the smaller terms cannot overflow into the
larger ones. XOR terms are read the same way and then un-XORed with their
other operand once that operand's digits are known. The result is checked
exactly on every index of S before it is returned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from laytune.exceptions import LayoutError
from laytune.layout import _expr as ex
from laytune.layout._expr import BinOp, Const, Expr, Var
from laytune.layout._periods import vanishes

if TYPE_CHECKING:
    from laytune.layout._index_map import IndexMap

__all__ = ["Condition", "Inverse", "inverse_from", "invert"]


@dataclass(frozen=True)
class Condition:
    """``lo <= expr <= hi`` over physical indices."""

    expr: Expr
    lo: int
    hi: int

    def holds(self, args: Sequence[Any], memo: dict | None = None) -> Any:
        value = ex.evaluate(self.expr, args, memo)
        if self.lo == self.hi:
            return value == self.lo
        return (value >= self.lo) & (value <= self.hi)

    def comparisons(self, lo: int, hi: int) -> list[tuple[str, int]]:
        """What decides the condition on an ``expr`` known to lie in
        ``[lo, hi]``: ``[("==", v)]``, or those of ``(">=", self.lo)`` and
        ``("<=", self.hi)`` that the range can fail (none: it always holds)."""
        if self.lo == self.hi:
            return [("==", self.lo)]
        return [
            *([(">=", self.lo)] if lo < self.lo else []),
            *([("<=", self.hi)] if hi > self.hi else []),
        ]


@dataclass(frozen=True)
class Inverse:
    """The inverse of an index map on one logical shape.

    ``index_map`` takes the physical indices (before separators) to logical
    indices; it is exact on every reached physical index. ``conditions``
    together say whether a physical index is reached (all hold) or is padding.
    Law: for every logical x of ``shape``, ``index_map(m(x)) == x`` and the
    conditions hold at ``m(x)``; at every padding position some condition fails.
    """

    index_map: IndexMap
    conditions: tuple[Condition, ...]
    shape: tuple[int, ...]
    physical_shape: tuple[int, ...]

    @property
    def has_padding(self) -> bool:
        return bool(self.conditions)

    def is_element(self, physical: Sequence[Any]) -> Any:
        """True where ``physical`` (ints or broadcastable arrays) holds a real element."""
        memo: dict = {}
        result: Any = True
        for condition in self.conditions:
            result = result & condition.holds(list(physical), memo)
        return result

    def predicate_opencl(self, names: Sequence[str]) -> str:
        """OpenCL C boolean for "this physical index holds a real element"."""
        if not self.conditions:
            return "1"
        ranges = [(0, e - 1) for e in self.physical_shape]
        parts = []
        for c in self.conditions:
            text = ex.to_opencl(c.expr, names, ranges)
            parts += [f"({text}) {op} {v}" for op, v in c.comparisons(*ex.bounds(c.expr, ranges))]
        return " && ".join(f"({p})" for p in parts) if parts else "1"

    def predicate_text(self) -> str:
        names = self.index_map.params
        parts = []
        for c in self.conditions:
            text = ex.to_text(c.expr, names)
            parts.append(f"{text} == {c.lo}" if c.lo == c.hi else f"{c.lo} <= {text} <= {c.hi}")
        return " and ".join(parts) if parts else "True"


@dataclass(frozen=True)
class _Digit:
    var: int
    factor: int  # the digit is (x // factor) % extent
    extent: int


@dataclass
class _Equation:
    """value == const + sum(coeff * item); items are digits or XOR atoms."""

    value: Expr
    const: int
    items: dict[Any, int]


def _fail(m: IndexMap, why: str) -> LayoutError:
    return LayoutError(f"cannot derive an inverse of {m} symbolically: {why}")


def _split(atom: Expr) -> tuple[int, int, int, int | None] | None:
    """(var, offset, lo, hi) when ``atom`` is ((x + offset) // lo) % (hi // lo)."""
    if isinstance(atom, Var):
        return (atom.index, 0, 1, None)
    if not isinstance(atom, BinOp) or not isinstance(atom.rhs, Const):
        return None
    c = atom.rhs.value
    if atom.op in ("+", "-") and isinstance(atom.lhs, Var):
        return (atom.lhs.index, c if atom.op == "+" else -c, 1, None)
    inner = _split(atom.lhs)
    if inner is None:
        return None
    var, offset, lo, hi = inner
    width = None if hi is None else hi // lo  # the split's values lie in [0, width)
    if atom.op == "//":
        if width is not None and width % c:
            return None
        return (var, offset, lo * c, hi)
    if atom.op == "%":
        if width is None or width % c == 0:
            return (var, offset, lo, lo * c)
        if c % width == 0:
            return (var, offset, lo, hi)
    return None


def invert(m: IndexMap, shape: Sequence[int]) -> Inverse:
    m.validate(shape)
    shape = tuple(int(s) for s in shape)
    lranges = m.ranges(shape)
    simp = ex._Simplifier(lranges)
    linears = [simp.linear(o) for o in m.outputs]

    # 1. cut every logical index (shifted by a constant where the map shifts
    # it: (i + 2) // 8 cuts y = i + 2) at the divisors the map uses
    cuts: dict[int, set[int]] = {k: {1} for k in range(m.ndim_in)}
    shifts: dict[int, int] = {}
    splits: dict[Expr, tuple[int, int, int, int | None]] = {}

    def collect(atom: Expr) -> None:
        if isinstance(atom, BinOp) and atom.op == "^":
            for side in (atom.lhs, atom.rhs):
                for sub in simp.linear(side).terms:
                    collect(sub)
            return
        s = _split(atom)
        if s is None:
            raise _fail(m, f"the term {ex.to_text(atom, m.params)} is not a digit of one index")
        splits[atom] = s
        var, offset, lo, hi = s
        if not isinstance(atom, Var) and shifts.setdefault(var, offset) != offset:
            raise _fail(m, f"index {m.params[var]} is shifted by both {shifts[var]} and {offset}")
        cuts[var].add(lo)
        if hi is not None:
            cuts[var].add(hi)

    for lin in linears:
        for atom in lin.terms:
            collect(atom)

    digits: dict[int, list[_Digit]] = {}
    for var, factors in cuts.items():
        top_value = shape[var] - 1 + shifts.get(var, 0)
        if shifts.get(var, 0) < 0:
            raise _fail(m, f"index {m.params[var]} is shifted below zero")
        ordered = sorted(f for f in factors if f <= top_value) or [1]
        for a, b in pairwise(ordered):
            if b % a:
                raise _fail(m, f"index {m.params[var]} is cut at {a} and {b}, which do not nest")
        tops = [*ordered[1:], None]
        digits[var] = [
            _Digit(var, f, (t // f) if t is not None else top_value // f + 1)
            for f, t in zip(ordered, tops, strict=True)
        ]

    def expand(atom: Expr) -> tuple[int, dict[Any, int]]:
        """An atom as a constant plus a combination of digits (XOR atoms stay whole)."""
        if isinstance(atom, BinOp) and atom.op == "^":
            return 0, {atom: 1}
        var, _, lo, hi = splits[atom]
        out: dict[Any, int] = {}
        for d in digits[var]:
            if d.factor >= lo and (hi is None or d.factor < hi):
                out[d] = d.factor // lo
        # a bare index of a shifted variable is y - shift
        return (-shifts.get(var, 0) if isinstance(atom, Var) else 0), out

    def expand_linear(lin: ex._Linear) -> tuple[int, dict[Any, int]]:
        const = lin.const
        items: dict[Any, int] = {}
        for atom, coeff in lin.terms.items():
            shift, parts = expand(atom)
            const += coeff * shift
            for item, k in parts.items():
                items[item] = items.get(item, 0) + coeff * k
        return const, {i: c for i, c in items.items() if c}

    # 2. read the digits back, equation by equation
    names = default_physical_names(m.ndim_out)
    known: dict[_Digit, Expr] = {}
    for ds in digits.values():
        for d in ds:
            if d.extent == 1:
                known[d] = Const(0)
    pending: list[_Equation] = []
    for t, lin in enumerate(linears):
        const, items = expand_linear(lin)
        pending.append(_Equation(Var(t, names[t]), const, items))

    def item_value(item: Any) -> Expr | None:
        if isinstance(item, _Digit):
            return known.get(item)
        return None

    def side_value(side: Expr) -> Expr | None:
        const, items = expand_linear(simp.linear(side))
        value: Expr = Const(const)
        for item, coeff in items.items():
            v = known.get(item) if isinstance(item, _Digit) else None
            if v is None:
                return None
            value = value + v * coeff
        return value

    def item_range(item: Any) -> tuple[int, int]:
        if isinstance(item, _Digit):
            return (0, item.extent - 1)
        return ex.bounds(item, lranges)

    progress = True
    while pending and progress:
        progress = False
        for eq in list(pending):
            value = eq.value - eq.const
            unknown: dict[Any, int] = {}
            for item, coeff in eq.items.items():
                v = item_value(item)
                if v is not None:
                    value = value - v * coeff
                else:
                    unknown[item] = coeff
            xors = [i for i in unknown if not isinstance(i, _Digit)]
            if any(side_value(x.lhs) is None and side_value(x.rhs) is None for x in xors):
                continue
            pending.remove(eq)
            progress = True
            if not unknown:
                continue
            # flip negative coefficients: c*d == |c|*(e-1-d) + c*(e-1)
            flipped: dict[Any, bool] = {}
            terms = []
            for item, coeff in unknown.items():
                lo, hi = item_range(item)
                if lo < 0:
                    raise _fail(m, f"the term {item} can be negative")
                if coeff < 0:
                    value = value - coeff * hi
                    flipped[item] = True
                    coeff = -coeff
                terms.append((coeff, hi, item))
            terms.sort(key=lambda t: t[0])
            below = 0
            for coeff, hi, _ in terms:
                if below >= coeff:
                    raise _fail(m, "two parts of one physical index overlap")
                below += coeff * hi
            remainder = value
            for position in range(len(terms) - 1, -1, -1):
                coeff, hi, item = terms[position]
                part = remainder // coeff if coeff > 1 else remainder
                if position:
                    remainder = remainder % coeff
                if flipped.get(item):
                    part = Const(hi) - part
                if isinstance(item, _Digit):
                    known[item] = part
                    continue
                lhs_v, rhs_v = side_value(item.lhs), side_value(item.rhs)
                # un-XOR the operand still unknown with the one already known
                target, other_v = (item.lhs, rhs_v) if rhs_v is not None else (item.rhs, lhs_v)
                const, items = expand_linear(simp.linear(target))
                pending.append(_Equation(part ^ other_v, const, items))  # type: ignore[operator]
    missing = [d for ds in digits.values() for d in ds if d not in known]
    if pending or missing:
        raise _fail(m, "some logical digits cannot be read from the physical indices")

    # 3. assemble
    logical = []
    for var in range(m.ndim_in):
        expr: Expr = Const(-shifts.get(var, 0))
        for d in digits[var]:  # prepend: the highest digit prints first
            expr = known[d] * d.factor + expr
        logical.append(expr)
    return inverse_from(m, shape, type(m)(names, tuple(logical)))


def inverse_from(m: IndexMap, shape: Sequence[int], inverse_map: IndexMap) -> Inverse:
    """Build (and verify exactly) the :class:`Inverse` of ``m`` on ``shape`` from a
    known physical -> logical map, such as the one a layout family provides.

    Maps are built as ``type(m)(...)``: this module never imports the
    :class:`~laytune.layout.IndexMap` it inverts (which imports it)."""
    shape = tuple(int(s) for s in shape)
    pshape = m.physical_shape(shape)
    pranges = [(0, e - 1) for e in pshape]
    names = default_physical_names(m.ndim_out)
    if inverse_map.ndim_in != m.ndim_out or inverse_map.ndim_out != m.ndim_in:
        raise _fail(m, f"{inverse_map} does not take {m.ndim_out} indices to {m.ndim_in}")
    logical = tuple(ex.simplify(e, pranges) for e in inverse_map.outputs)
    inverse_map = type(m)(names, logical)
    conditions = []
    if m.padding_count(shape) == 0:
        # every physical index is reached: nothing to test
        result = Inverse(inverse_map, (), shape, pshape)
        _verify(m, result)
        return result
    for var, expr in enumerate(logical):
        lo, hi = ex.bounds(expr, pranges)
        if lo < 0 or hi > shape[var] - 1:
            conditions.append(Condition(ex.rename(expr, names), 0, shape[var] - 1))
    for t, out in enumerate(m.outputs):
        roundtrip = ex.simplify(ex.substitute(out, logical) - Var(t, names[t]), pranges)
        if roundtrip != Const(0):
            conditions.append(Condition(ex.rename(roundtrip, names), 0, 0))
    result = Inverse(inverse_map, tuple(conditions), shape, pshape)
    _verify(m, result)
    return result


def default_physical_names(ndim: int) -> tuple[str, ...]:
    return tuple(f"p{k}" for k in range(ndim))


#: Shapes of at most this many elements are verified at every index and
#: position; larger ones on the periods of the round trip (see :func:`_verify`).
VERIFY_WHOLE = 1 << 16


def _verify(m: IndexMap, inv: Inverse) -> None:
    """Exact check of the law of :class:`Inverse`.

    On a small shape, at every logical index and every physical position. On
    a large one without an array of its size: the round trip
    ``inv(m(x))_k - x_k`` is shown to be 0 at every logical index on its
    quasi-periods (:func:`~laytune.layout._periods.vanishes`); the padding
    predicate then needs no look: its conditions say ``inv(p)`` lies in the
    shape and ``m(inv(p)) == p`` (each kept unless bounds or simplification,
    exact on the ranges, prove it), which holds exactly where some ``x``
    reaches ``p`` once the round trip holds."""
    if math.prod(inv.shape) > VERIFY_WHOLE or math.prod(inv.physical_shape) > VERIFY_WHOLE:
        for k, out in enumerate(inv.index_map.outputs):
            back = ex.substitute(out, m.outputs) - Var(k)
            if not vanishes(back, inv.shape):
                raise _fail(m, f"the derived inverse {inv.index_map} does not recover index {k}")
        return
    grid = m._grid(inv.shape)
    phys = [np.asarray(p, dtype=np.int64) for p in m._eval(grid)]
    back = inv.index_map._eval(phys)
    for k, (b, g) in enumerate(zip(back, grid, strict=True)):
        if not np.array_equal(*np.broadcast_arrays(b, g)):
            raise _fail(m, f"the derived inverse {inv.index_map} does not recover index {k}")
    pgrid = inv.index_map._grid(inv.physical_shape)
    element = np.broadcast_to(inv.is_element(pgrid), inv.physical_shape)
    if not np.array_equal(element, ~m.padding_mask(inv.shape)):
        raise _fail(m, f"the derived padding predicate {inv.predicate_text()} is wrong")
