"""Quasi-periods of index expressions: where a fact of a large shape is
decided on a small one.

An expression ``e`` has the *quasi-period* ``(P, D)`` along logical index
``k`` on a box of index ranges when, for every ``x`` of the box with
``x + P * e_k`` also in it, ``e(x + P * e_k) == e(x) + D``. Every expression
the families build has one along every index: ``i // 4`` has ``(4, 1)``,
``i % 8`` has ``(8, 0)``, ``j ^ (i % 8)`` has ``(8, 8)`` along ``j`` and
``(8, 0)`` along ``i``, a flat swizzle ``Sw<B,M,S>`` has ``(2**(M+S+B), 2**(M+S+B))``
along its flat offset. :func:`drift` derives it from the expression's form
(never by evaluating it), or says there is none it can prove.

What that buys: a query whose answer is the same for ``x`` and for
``x + Q * e_k`` (a vector group, a tile, a run checked for contiguity and for
alignment to ``A`` elements, an extreme value) is decided exactly on the
indices ``0 .. min(S_k, Q) - 1`` of axis ``k``, with ``Q`` a multiple of
``P`` whose drift is a multiple of ``A`` (:func:`reduction`): every
index of the full axis is one of those plus a multiple of ``Q``, and the
flat offsets there differ by a multiple of ``A``. The reduced shape's size
depends on the periods, not on the extents.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from laytune.layout import _expr as ex
from laytune.layout._expr import BinOp, Const, Expr, Var

__all__ = ["Drift", "drift", "evaluate_box", "reduction", "vanishes", "window"]

Drift = tuple[int, int]  # (period, drift)


def _extend(p: int, d: int, modulus: int) -> Drift:
    """The least multiple of ``(p, d)`` whose drift is a multiple of ``modulus``."""
    times = modulus // math.gcd(d, modulus) if d else 1
    return p * times, d * times


def _at(p: int, d: int, period: int) -> int:
    """The drift of ``(p, d)`` over ``period``, a multiple of ``p``."""
    return d * (period // p)


def drift(e: Expr, var: int, ranges: Sequence[ex.Range]) -> Drift | None:
    """``(P, D)`` with ``e(x + P * e_var) == e(x) + D`` whenever both ``x`` and
    ``x + P * e_var`` lie in ``ranges`` (inclusive, one per index); None when
    no such pair can be proved from the form of ``e``."""
    return _drift(e, var, ranges, {}, {})


def _drift(
    e: Expr,
    var: int,
    ranges: Sequence[ex.Range],
    memo: dict[Expr, Drift | None],
    bounds_memo: dict[Expr, ex.Range],
) -> Drift | None:
    if isinstance(e, Const):
        return (1, 0)
    if isinstance(e, Var):
        return (1, 1) if e.index == var else (1, 0)
    if e in memo:
        return memo[e]
    a = _drift(e.lhs, var, ranges, memo, bounds_memo)
    b = _drift(e.rhs, var, ranges, memo, bounds_memo)
    out = _combine(e, a, b, ranges, bounds_memo)
    memo[e] = out
    return out


def _combine(
    e: BinOp,
    a: Drift | None,
    b: Drift | None,
    ranges: Sequence[ex.Range],
    bounds_memo: dict[Expr, ex.Range],
) -> Drift | None:
    if a is None or b is None:
        return None
    op = e.op
    if op in ("+", "-"):
        p = math.lcm(a[0], b[0])
        sign = 1 if op == "+" else -1
        return p, _at(*a, p) + sign * _at(*b, p)
    if op == "*":
        if isinstance(e.rhs, Const):
            return a[0], a[1] * e.rhs.value
        if isinstance(e.lhs, Const):
            return b[0], b[1] * e.lhs.value
        if a[1] == 0 and b[1] == 0:  # a product of two periodic terms
            return math.lcm(a[0], b[0]), 0
        return None
    if op == "<<":
        return a[0], a[1] << e.rhs.value  # type: ignore[union-attr]
    if op in ("//", ">>", "%"):
        c = e.rhs.value if op != ">>" else 1 << e.rhs.value  # type: ignore[union-attr]
        # (y + m * c) // c == y // c + m and (y + m * c) % c == y % c, for every integer y
        p, d = _extend(*a, c)
        return (p, 0) if op == "%" else (p, d // c)
    # "^" and "&": one side must not drift and lie in [0, 2**m); then adding a
    # multiple of 2**m to the other side passes through ("^") or vanishes ("&")
    p = math.lcm(a[0], b[0])
    da, db = _at(*a, p), _at(*b, p)
    if da == 0 and db == 0:
        return p, 0
    if da != 0 and db != 0:
        return None
    moving, still = (da, e.rhs) if db == 0 else (db, e.lhs)
    lo, hi = ex._bounds(still, ranges, bounds_memo)
    if lo < 0:
        return None
    q, d = _extend(p, moving, 1 << hi.bit_length())
    return (q, d) if op == "^" else (q, 0)


def reduction(extent: int, period: Drift | None, group: int = 1, modulus: int = 1) -> int:
    """The translation ``Q`` along an axis of ``extent`` under which a query
    is invariant when it is invariant under adding a multiple of ``modulus``
    to every flat offset and looks at groups of ``group`` consecutive indices
    starting at multiples of ``group``: a multiple of the period and of
    ``group`` whose drift is a multiple of ``modulus`` (the extent when there
    is no period). The query is decided on the indices ``0 .. min(extent, Q) - 1``."""
    if period is None:
        return extent
    p, d = period
    q = math.lcm(p, group)
    q, _ = _extend(q, _at(p, d, q), modulus)
    return q


def window(extent: int, period: Drift | None, highest: bool) -> range:
    """The indices of an axis on which ``e``'s maximum (``highest``) or minimum
    over the axis is reached for every value of the other indices: one period
    at the end the drift points to (the whole axis without a period)."""
    if period is None or period[0] >= extent:
        return range(extent)
    p, d = period
    if (d > 0) == highest and d != 0:
        return range(extent - p, extent)
    return range(p)


def evaluate_box(expr: Expr, box: Sequence[int]) -> np.ndarray:
    """``expr`` at every index of the box ``0 .. box_k - 1``: an array of shape ``box``."""
    n = len(box)
    grid = [
        np.arange(extent, dtype=np.int64).reshape([extent if k == d else 1 for d in range(n)])
        for k, extent in enumerate(box)
    ]
    values = np.asarray(ex.evaluate(expr, grid), dtype=np.int64)
    return np.broadcast_to(values, tuple(box)).copy()


def vanishes(expr: Expr, shape: Sequence[int]) -> bool:
    """Whether ``expr`` is 0 at every index of ``shape``: it drifts by 0 along
    every axis longer than its period, and is 0 on one period per axis."""
    shape = tuple(int(s) for s in shape)
    ranges = [(0, s - 1) for s in shape]
    box = []
    for k, extent in enumerate(shape):
        period = drift(expr, k, ranges)
        if period is None or period[0] >= extent:
            box.append(extent)
        elif period[1] != 0:
            return False  # expr(x + P) == expr(x) + D: not both 0
        else:
            box.append(period[0])
    return not np.any(evaluate_box(expr, box))
