"""Integer index expressions: the terms index maps are made of.

An expression is an immutable tree of :class:`Const`, :class:`Var` (a logical
index, by position) and :class:`BinOp` over ``+ - * // % ^ & << >>``.
``//`` and ``%`` are floor division and floor modulo by positive constants
(Python's and numpy's semantics), shifts are by non-negative constants.

Besides building and printing, this module evaluates expressions (on Python
ints or vectorised on numpy arrays), bounds them with interval arithmetic,
simplifies them with those bounds, and emits them as OpenCL C.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from laytune.exceptions import LayoutError, LayoutSyntaxError

__all__ = [
    "MAX_CONSTANT",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_SHIFT",
    "BinOp",
    "Const",
    "Expr",
    "Range",
    "Var",
    "binary_op",
    "bounds",
    "evaluate",
    "simplify",
    "substitute",
    "to_opencl",
    "to_text",
]

Range = tuple[int, int]  # inclusive (lo, hi)

# Bounds on the arithmetic, so that no text, record or traced function can
# make laytune compute a value of millions of digits or walk a tree of
# billions of nodes: each is refused, before computing it, with a
# LayoutSyntaxError. The layouts laytune writes stay far below every one.

#: The largest magnitude of a constant, written or folded (``1 << 62`` is
#: one, ``1 << 63`` and ``2 * (1 << 62)`` are not): every index fits a
#: signed 64-bit integer with room for one addition.
MAX_CONSTANT = 1 << 62
#: The largest shift, ``<<`` or ``>>``, of anything.
MAX_SHIFT = 62
#: The most nodes (constants, indices, operations) of an index map's outputs
#: counted as trees, shared subexpressions once per use: what printing,
#: hashing and simplifying them walk. Text parses to at most a few thousand.
MAX_NODES = 10_000
#: The deepest expression tree of an index map (text nests at most 64; a
#: composition adds its parts' depths).
MAX_DEPTH = 256

ARITH_OPS = ("+", "-", "*", "//", "%")
BIT_OPS = ("^", "&", "<<", ">>")
OPS = ARITH_OPS + BIT_OPS

# Python's binding strength; C agrees on the relative order of these operators.
_PREC = {"^": 3, "&": 4, "<<": 5, ">>": 5, "+": 6, "-": 6, "*": 7, "//": 7, "%": 7}
_ATOM_PREC = 9
_UNARY_PREC = 8


class _ExprOps:
    """Operator overloading, so that ``IndexMap.from_func`` can trace a lambda."""

    __slots__ = ()

    def __add__(self, other: Any) -> Expr:
        return binary_op("+", self, other)

    def __radd__(self, other: Any) -> Expr:
        return binary_op("+", other, self)

    def __sub__(self, other: Any) -> Expr:
        return binary_op("-", self, other)

    def __rsub__(self, other: Any) -> Expr:
        return binary_op("-", other, self)

    def __mul__(self, other: Any) -> Expr:
        return binary_op("*", self, other)

    def __rmul__(self, other: Any) -> Expr:
        return binary_op("*", other, self)

    def __floordiv__(self, other: Any) -> Expr:
        return binary_op("//", self, other)

    def __rfloordiv__(self, other: Any) -> Expr:
        return binary_op("//", other, self)

    def __mod__(self, other: Any) -> Expr:
        return binary_op("%", self, other)

    def __rmod__(self, other: Any) -> Expr:
        return binary_op("%", other, self)

    def __xor__(self, other: Any) -> Expr:
        return binary_op("^", self, other)

    def __rxor__(self, other: Any) -> Expr:
        return binary_op("^", other, self)

    def __and__(self, other: Any) -> Expr:
        return binary_op("&", self, other)

    def __rand__(self, other: Any) -> Expr:
        return binary_op("&", other, self)

    def __lshift__(self, other: Any) -> Expr:
        return binary_op("<<", self, other)

    def __rshift__(self, other: Any) -> Expr:
        return binary_op(">>", self, other)

    def __neg__(self) -> Expr:
        return binary_op("*", Const(-1), self)

    def __pos__(self) -> Expr:
        return self  # type: ignore[return-value]

    def __truediv__(self, other: Any) -> Expr:
        raise LayoutError(
            f"'/' is true division and gives non-integers; use '//' (in {to_text(self)} / ...)"  # type: ignore[arg-type]
        )

    __rtruediv__ = __truediv__

    def __bool__(self) -> bool:
        raise LayoutError(
            "an index map cannot branch on a symbolic index "
            f"({to_text(self)} used as a truth value); write it with arithmetic"  # type: ignore[arg-type]
        )

    def __index__(self) -> int:
        raise LayoutError(
            f"symbolic index {to_text(self)} used where a concrete integer is needed"  # type: ignore[arg-type]
        )

    def __str__(self) -> str:
        return to_text(self)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Const(_ExprOps):
    value: int

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise LayoutError(f"index constants must be integers, got {self.value!r}")
        if not -MAX_CONSTANT <= self.value <= MAX_CONSTANT:
            raise LayoutSyntaxError(_too_large(self.value))


def _too_large(value: int) -> str:
    """What is wrong with a constant past MAX_CONSTANT, without printing it
    (a decimal of thousands of digits is what Python refuses to write)."""
    return (
        f"index constant of {value.bit_length()} bits is past 2^62 in magnitude "
        "(laytune's indices are 64-bit integers)"
    )


@dataclass(frozen=True, slots=True)
class Var(_ExprOps):
    """The logical index at position ``index``; ``name`` is only for display."""

    index: int
    name: str = ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Var) and other.index == self.index

    def __hash__(self) -> int:
        return hash(("Var", self.index))


@dataclass(frozen=True, slots=True)
class BinOp(_ExprOps):
    """``lhs op rhs``. Its hash is the one of ``(op, lhs, rhs)``, computed
    once when it is built: simplifying and emitting key memos by
    expressions, and a hash walked the whole tree at every lookup."""

    op: str
    lhs: Expr
    rhs: Expr
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.op, self.lhs, self.rhs)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt through __init__: a hash of ``op`` is valid only in the
        # process that computed it
        return (BinOp, (self.op, self.lhs, self.rhs))


Expr = Union[Const, Var, BinOp]  # noqa: UP007 - used at runtime in isinstance


def _as_expr(value: Any) -> Expr:
    if isinstance(value, (Const, Var, BinOp)):
        return value
    if isinstance(value, bool):
        raise LayoutError(f"booleans are not index expressions: {value!r}")
    if isinstance(value, int):
        return Const(int(value))
    if hasattr(value, "__index__") and not isinstance(value, float):
        return Const(int(value.__index__()))
    raise LayoutError(f"index expressions are built from integers, got {value!r}")


def binary_op(op: str, lhs: Any, rhs: Any) -> Expr:
    """``lhs op rhs`` (``op`` one of :data:`OPS`) as an index expression,
    constants folded, divisors and shifts checked: what the operators of
    :class:`Expr` build, for a caller that holds the operator as text."""
    a, b = _as_expr(lhs), _as_expr(rhs)
    if op in ("//", "%"):
        if not isinstance(b, Const):
            raise LayoutError(
                f"'{op}' needs a constant divisor, got {to_text(a)} {op} {to_text(b)}"
            )
        if b.value <= 0:
            raise LayoutError(f"'{op}' needs a positive divisor, got {op} {b.value}")
    if op in ("<<", ">>"):
        if not isinstance(b, Const):
            raise LayoutError(f"'{op}' needs a constant shift, got {op} {to_text(b)}")
        if b.value < 0:
            raise LayoutError(f"'{op}' needs a non-negative shift, got {op} {b.value}")
        if b.value > MAX_SHIFT:
            raise LayoutSyntaxError(
                f"'{op}' by {b.value} is past the largest shift, {MAX_SHIFT} "
                "(laytune's indices are 64-bit integers)"
            )
    if isinstance(a, Const) and isinstance(b, Const):
        # both operands are within MAX_CONSTANT and a shift within MAX_SHIFT,
        # so the value has at most 124 bits before Const checks it
        return Const(_apply(op, a.value, b.value))
    return BinOp(op, a, b)


def _apply(op: str, a: Any, b: Any) -> Any:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "//":
        return a // b
    if op == "%":
        return a % b
    if op == "^":
        return a ^ b
    if op == "&":
        return a & b
    if op == "<<":
        return a << b
    if op == ">>":
        return a >> b
    raise LayoutError(f"unknown operator {op!r}")


# ---------------------------------------------------------------------------
# size


def measure(e: Expr, leaves: Sequence[tuple[int, int]] | None = None) -> tuple[int, int]:
    """(nodes, depth) of ``e`` as a tree: a subexpression shared by several
    operations counts once per use. With ``leaves``, ``Var(k)`` stands for a
    tree of ``leaves[k]`` (nodes, depth): the size of ``substitute(e, ...)``
    before building it. Walks the shared graph once, without recursion, and
    stops counting past MAX_NODES (the size it gives is then past it too)."""
    sizes: dict[int, tuple[int, int]] = {}
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        node, ready = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        if isinstance(node, Const):
            sizes[key] = (1, 1)
        elif isinstance(node, Var):
            sizes[key] = (1, 1) if leaves is None else leaves[node.index]
        elif not ready:
            stack.append((node, True))
            stack.append((node.lhs, False))
            stack.append((node.rhs, False))
        else:
            (ln, ld), (rn, rd) = sizes[id(node.lhs)], sizes[id(node.rhs)]
            sizes[key] = (min(1 + ln + rn, MAX_NODES + 1), 1 + max(ld, rd))
    return sizes[id(e)]


def check_size(outputs: Sequence[Expr], what: str = "an index map") -> None:
    """Raise LayoutSyntaxError when ``outputs`` together are past MAX_NODES
    or one is deeper than MAX_DEPTH, or when one shifts by more than
    MAX_SHIFT (an expression built without :func:`binary_op`)."""
    nodes = 0
    for out in outputs:
        count, depth = measure(out)
        nodes += count
        if depth > MAX_DEPTH:
            raise LayoutSyntaxError(
                f"{what} nests operations {depth} deep, more than the {MAX_DEPTH} laytune takes"
            )
        if nodes > MAX_NODES:
            raise LayoutSyntaxError(
                f"{what} has more than {MAX_NODES} operations, constants and indices "
                "(counting each use of a shared part), more than laytune takes"
            )
    seen: set[int] = set()
    stack = list(outputs)
    while stack:
        node = stack.pop()
        if not isinstance(node, BinOp) or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op in ("<<", ">>") and not (
            isinstance(node.rhs, Const) and 0 <= node.rhs.value <= MAX_SHIFT
        ):
            by = node.rhs.value if isinstance(node.rhs, Const) else "an index"
            raise LayoutSyntaxError(f"'{node.op}' by {by} is not a shift from 0 to {MAX_SHIFT}")
        stack.extend((node.lhs, node.rhs))


# ---------------------------------------------------------------------------
# printing


def _prec(e: Expr) -> int:
    if isinstance(e, BinOp):
        return _PREC[e.op]
    if isinstance(e, Const) and e.value < 0:
        return _UNARY_PREC
    return _ATOM_PREC


def to_text(e: Expr, names: Sequence[str] | None = None) -> str:
    """Python text of ``e`` with the fewest parentheses; parses back to ``e``."""
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Var):
        if names is not None:
            return names[e.index]
        return e.name or f"x{e.index}"
    p = _PREC[e.op]
    left = to_text(e.lhs, names)
    right = to_text(e.rhs, names)
    # operands of a bit operation that are other operations get parentheses,
    # the way people write them: j ^ (i % 8), not j ^ i % 8
    # and so do mixed products: (i // 2) * 4, not i // 2 * 4
    bitwise = e.op in BIT_OPS
    mixed = p == _PREC["*"] and isinstance(e.lhs, BinOp) and _PREC[e.lhs.op] == p
    if (
        _prec(e.lhs) < p
        or (mixed and e.lhs.op != e.op)
        or (bitwise and isinstance(e.lhs, BinOp) and e.lhs.op != e.op)
    ):
        left = f"({left})"
    if _prec(e.rhs) <= p or (bitwise and isinstance(e.rhs, BinOp)):
        right = f"({right})"
    return f"{left} {e.op} {right}"


# ---------------------------------------------------------------------------
# traversal


def substitute(e: Expr, values: Sequence[Expr]) -> Expr:
    """Replace ``Var(k)`` by ``values[k]`` everywhere in ``e``."""
    if isinstance(e, Const):
        return e
    if isinstance(e, Var):
        return values[e.index]
    return binary_op(e.op, substitute(e.lhs, values), substitute(e.rhs, values))


def variables(e: Expr) -> frozenset[int]:
    if isinstance(e, Const):
        return frozenset()
    if isinstance(e, Var):
        return frozenset((e.index,))
    return variables(e.lhs) | variables(e.rhs)


def rename(e: Expr, names: Sequence[str]) -> Expr:
    """The same expression with display names taken from ``names``."""
    if isinstance(e, Const):
        return e
    if isinstance(e, Var):
        return Var(e.index, names[e.index])
    return BinOp(e.op, rename(e.lhs, names), rename(e.rhs, names))


def evaluate(e: Expr, args: Sequence[Any], memo: dict[Expr, Any] | None = None) -> Any:
    """Value of ``e`` with ``Var(k) = args[k]``; ints or broadcastable numpy arrays.

    Shared subexpressions are computed once (``memo``), which matters for maps
    such as swizzles that repeat the flat offset.
    """
    if memo is None:
        memo = {}
    return _evaluate(e, args, memo)


def _evaluate(e: Expr, args: Sequence[Any], memo: dict[Expr, Any]) -> Any:
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return args[e.index]
    hit = memo.get(e)
    if hit is not None:
        return hit
    value = _apply(e.op, _evaluate(e.lhs, args, memo), _evaluate(e.rhs, args, memo))
    memo[e] = value
    return value


# ---------------------------------------------------------------------------
# bounds (interval arithmetic, inclusive)


def bounds(e: Expr, ranges: Sequence[Range], memo: dict[Expr, Range] | None = None) -> Range:
    """Inclusive (lo, hi) that contains every value of ``e`` when each
    ``Var(k)`` ranges over ``ranges[k]``. Sound, not always tight."""
    if memo is None:
        memo = {}
    return _bounds(e, ranges, memo)


def _bit_span(lo: int, hi: int) -> int:
    return max(abs(lo), abs(hi)).bit_length()


def _bounds(e: Expr, ranges: Sequence[Range], memo: dict[Expr, Range]) -> Range:
    if isinstance(e, Const):
        return (e.value, e.value)
    if isinstance(e, Var):
        return ranges[e.index]
    hit = memo.get(e)
    if hit is not None:
        return hit
    alo, ahi = _bounds(e.lhs, ranges, memo)
    blo, bhi = _bounds(e.rhs, ranges, memo)
    op = e.op
    if op == "+":
        r = (alo + blo, ahi + bhi)
    elif op == "-":
        r = (alo - bhi, ahi - blo)
    elif op == "*":
        products = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        r = (min(products), max(products))
    elif op == "//":
        r = (alo // blo, ahi // blo)
    elif op == "%":
        c = blo
        r = (alo % c, ahi % c) if alo // c == ahi // c else (0, c - 1)
    elif op == "<<":
        r = (alo << blo, ahi << blo)
    elif op == ">>":
        r = (alo >> blo, ahi >> blo)
    elif op == "&":
        if alo >= 0 and blo >= 0:
            r = (0, min(ahi, bhi))
        elif alo >= 0:
            r = (0, ahi)
        elif blo >= 0:
            r = (0, bhi)
        else:
            span = 1 << max(_bit_span(alo, ahi), _bit_span(blo, bhi))
            r = (-span, span - 1)
    else:  # "^"
        span = 1 << max(_bit_span(alo, ahi), _bit_span(blo, bhi))
        r = (0, span - 1) if alo >= 0 and blo >= 0 else (-span, span - 1)
    memo[e] = r
    return r


# ---------------------------------------------------------------------------
# simplification
#
# Sums are handled in a linear normal form: a map from non-linear "atoms"
# (variables, quotients, remainders, bit operations, products of variables)
# to integer coefficients, plus a constant. Division and modulo by a constant
# pull out the terms whose coefficients the divisor divides, then use the
# bounds of what is left: (4 * i + j) // 4 becomes i + j // 4, and then i
# when 0 <= j < 4.


@dataclass
class _Linear:
    terms: dict[Expr, int]
    const: int = 0

    def copy(self) -> _Linear:
        return _Linear(dict(self.terms), self.const)

    def add(self, other: _Linear, scale: int = 1) -> _Linear:
        out = self.copy()
        for atom, coeff in other.terms.items():
            c = out.terms.get(atom, 0) + scale * coeff
            if c:
                out.terms[atom] = c
            else:
                out.terms.pop(atom, None)
        out.const += scale * other.const
        return out

    def scale(self, k: int) -> _Linear:
        if k == 0:
            return _Linear({}, 0)
        return _Linear({a: c * k for a, c in self.terms.items()}, self.const * k)

    @property
    def is_const(self) -> bool:
        return not self.terms


class _Simplifier:
    def __init__(self, ranges: Sequence[Range]):
        self.ranges = ranges
        self.bounds_memo: dict[Expr, Range] = {}
        self.cache: dict[Expr, _Linear] = {}

    def bounds(self, e: Expr) -> Range:
        return _bounds(e, self.ranges, self.bounds_memo)

    def lin_bounds(self, lin: _Linear) -> Range:
        lo = hi = lin.const
        for atom, coeff in lin.terms.items():
            a, b = self.bounds(atom)
            lo += min(coeff * a, coeff * b)
            hi += max(coeff * a, coeff * b)
        return (lo, hi)

    # -- expression <-> linear form -----------------------------------------
    def run(self, e: Expr) -> Expr:
        return self.from_linear(self.linear(e))

    def linear(self, e: Expr) -> _Linear:
        hit = self.cache.get(e)
        if hit is not None:
            return hit.copy()
        out = self._linear(e)
        self.cache[e] = out.copy()
        return out

    def _linear(self, e: Expr) -> _Linear:
        if isinstance(e, Const):
            return _Linear({}, e.value)
        if isinstance(e, Var):
            lo, hi = self.ranges[e.index]
            if lo == hi:
                return _Linear({}, lo)
            return _Linear({e: 1}, 0)
        op = e.op
        if op in ("+", "-"):
            out = self.linear(e.lhs).add(self.linear(e.rhs), 1 if op == "+" else -1)
            return self.merge_div_mod(out)
        if op == "*":
            a, b = self.linear(e.lhs), self.linear(e.rhs)
            if a.is_const:
                return b.scale(a.const)
            if b.is_const:
                return a.scale(b.const)
            return self.atom(BinOp("*", self.from_linear(a), self.from_linear(b)))
        if op == "<<":
            return self.linear(e.lhs).scale(1 << e.rhs.value)  # type: ignore[union-attr]
        if op == ">>":
            return self.div(self.linear(e.lhs), 1 << e.rhs.value)  # type: ignore[union-attr]
        if op == "//":
            return self.div(self.linear(e.lhs), e.rhs.value)  # type: ignore[union-attr]
        if op == "%":
            return self.mod(self.linear(e.lhs), e.rhs.value)  # type: ignore[union-attr]
        a = self.run(e.lhs)
        b = self.run(e.rhs)
        if isinstance(a, Const) and isinstance(b, Const):
            return _Linear({}, _apply(op, a.value, b.value))
        if op == "^":
            return self.xor(a, b)
        if op == "&" and (a == Const(0) or b == Const(0)):
            return _Linear({}, 0)
        return self.atom(BinOp(op, a, b))

    def xor(self, a: Expr, b: Expr) -> _Linear:
        """Flatten a chain of XORs, cancel operands that appear twice, fold constants."""
        counts: dict[Expr, int] = {}
        const = 0
        for operand in (*_xor_chain(a), *_xor_chain(b)):
            if isinstance(operand, Const):
                const ^= operand.value
            else:
                counts[operand] = counts.get(operand, 0) ^ 1
        kept = [x for x, odd in counts.items() if odd]
        if const:
            kept.append(Const(const))
        if not kept:
            return _Linear({}, 0)
        expr = kept[0]
        for x in kept[1:]:
            expr = BinOp("^", expr, x)
        return self.linear(expr) if len(kept) == 1 else self.atom(expr)

    def atom(self, e: Expr) -> _Linear:
        lo, hi = self.bounds(e)
        if lo == hi:
            return _Linear({}, lo)
        return _Linear({e: 1}, 0)

    def from_linear(self, lin: _Linear) -> Expr:
        positive = [(a, c) for a, c in lin.terms.items() if c > 0]
        negative = [(a, c) for a, c in lin.terms.items() if c < 0]
        expr: Expr | None = None
        for atom, coeff in positive:
            term = atom if coeff == 1 else BinOp("*", atom, Const(coeff))
            expr = term if expr is None else BinOp("+", expr, term)
        if expr is None and negative and lin.const > 0:
            expr = Const(lin.const)
            const = 0
        else:
            const = lin.const
        for atom, coeff in negative:
            if expr is None:
                expr = BinOp("*", atom, Const(coeff))
                continue
            term = atom if coeff == -1 else BinOp("*", atom, Const(-coeff))
            expr = BinOp("-", expr, term)
        if expr is None:
            return Const(const)
        if const > 0:
            expr = BinOp("+", expr, Const(const))
        elif const < 0:
            expr = BinOp("-", expr, Const(-const))
        return expr

    # -- rules ---------------------------------------------------------------
    def merge_div_mod(self, lin: _Linear) -> _Linear:
        """k*c*(x // c) + k*(x % c) is k*x."""
        changed = True
        while changed:
            changed = False
            for atom, coeff in list(lin.terms.items()):
                if not (isinstance(atom, BinOp) and atom.op == "//"):
                    continue
                c = atom.rhs.value  # type: ignore[union-attr]
                if coeff % c:
                    continue
                k = coeff // c
                rem = BinOp("%", atom.lhs, atom.rhs)
                if lin.terms.get(rem) != k:
                    continue
                del lin.terms[atom]
                del lin.terms[rem]
                lin = lin.add(self.linear(atom.lhs), k)
                changed = True
                break
        return lin

    def _common_factor(self, lin: _Linear, c: int) -> int:
        g = c
        for coeff in lin.terms.values():
            g = math.gcd(g, coeff)
        return math.gcd(g, lin.const)

    def div(self, lin: _Linear, c: int) -> _Linear:
        if c == 1:
            return lin
        if lin.is_const:
            return _Linear({}, lin.const // c)
        g = self._common_factor(lin, c)
        if g > 1:
            lin = _Linear({a: k // g for a, k in lin.terms.items()}, lin.const // g)
            c //= g
            if c == 1:
                return lin
        quotient = _Linear({}, lin.const // c)
        rest = _Linear({}, lin.const % c)
        for atom, coeff in lin.terms.items():
            if coeff % c == 0:
                quotient.terms[atom] = coeff // c
            else:
                rest.terms[atom] = coeff
        lo, hi = self.lin_bounds(rest)
        if lo // c == hi // c:
            return self.merge_div_mod(quotient.add(_Linear({}, lo // c)))
        if len(rest.terms) == 1 and rest.const == 0:
            ((atom, coeff),) = rest.terms.items()
            if coeff == 1 and isinstance(atom, BinOp) and atom.op == "//":
                inner = atom.rhs.value  # type: ignore[union-attr]
                merged = self.atom(BinOp("//", atom.lhs, Const(inner * c)))
                return self.merge_div_mod(quotient.add(merged))
        return self.merge_div_mod(
            quotient.add(self.atom(BinOp("//", self.from_linear(rest), Const(c))))
        )

    def mod(self, lin: _Linear, c: int) -> _Linear:
        if c == 1:
            return _Linear({}, 0)
        if lin.is_const:
            return _Linear({}, lin.const % c)
        rest = _Linear({a: k for a, k in lin.terms.items() if k % c}, lin.const % c)
        if rest.is_const:
            return _Linear({}, rest.const)
        g = self._common_factor(rest, c)
        if g > 1:
            reduced = _Linear({a: k // g for a, k in rest.terms.items()}, rest.const // g)
            return self.mod(reduced, c // g).scale(g)
        lo, hi = self.lin_bounds(rest)
        if lo // c == hi // c:
            return rest.add(_Linear({}, -(lo // c) * c))
        if len(rest.terms) == 1 and rest.const == 0:
            ((atom, coeff),) = rest.terms.items()
            if coeff == 1 and isinstance(atom, BinOp) and atom.op == "%":
                inner = atom.rhs.value  # type: ignore[union-attr]
                if inner % c == 0:
                    return self.mod(self.linear(atom.lhs), c)
        return self.atom(BinOp("%", self.from_linear(rest), Const(c)))


def _xor_chain(e: Expr) -> list[Expr]:
    if isinstance(e, BinOp) and e.op == "^":
        return _xor_chain(e.lhs) + _xor_chain(e.rhs)
    return [e]


def simplify(e: Expr, ranges: Sequence[Range]) -> Expr:
    """An expression equal to ``e`` wherever each ``Var(k)`` lies in ``ranges[k]``.

    Uses the ranges: ``(4 * i + j) // 4`` becomes ``i`` when ``0 <= j < 4``,
    ``(i % 8) % 4`` becomes ``i % 4``, ``(x // c) * c + x % c`` becomes ``x``.
    """
    return _Simplifier(ranges).run(e)


# ---------------------------------------------------------------------------
# OpenCL C emission

_C_PREC = {"^": 7, "&": 8, "<<": 11, ">>": 11, "+": 12, "-": 12, "*": 13, "/": 13, "%": 13}
_C_ATOM = 20
_C_UNARY = 15
_INT32_MAX = (1 << 31) - 1


def _is_pow2(c: int) -> bool:
    return c > 0 and (c & (c - 1)) == 0


@dataclass(frozen=True)
class _C:
    text: str
    prec: int


def fits_int32(e: Expr, ranges: Sequence[Range]) -> bool:
    """Whether every subexpression of ``e`` stays within a 32-bit int."""
    return fits(e, ranges, -_INT32_MAX - 1, _INT32_MAX)


def fits(e: Expr, ranges: Sequence[Range], low: int, high: int) -> bool:
    """Whether every subexpression of ``e`` stays within ``[low, high]`` when
    each ``Var(k)`` ranges over ``ranges[k]`` (by :func:`bounds`, so sound:
    True means it does). Visits each shared subexpression once."""
    memo = _IdMemo()
    seen: set[int] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        lo, hi = _bounds(x, ranges, memo)
        if lo < low or hi > high:
            return False
        if isinstance(x, BinOp):
            stack += (x.lhs, x.rhs)
    return True


class _IdMemo(dict):  # type: ignore[type-arg]
    """A memo for :func:`_bounds` keyed by identity: hashing an expression
    walks all of it, and the caller holds every subexpression alive."""

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(id(key), default)

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(id(key), value)


def to_opencl(
    e: Expr,
    names: Sequence[str] | Callable[[int], str],
    ranges: Sequence[Range],
) -> str:
    """OpenCL C for ``e``: floor semantics kept exactly, shifts and masks for
    powers of two where the operand is provably non-negative.

    ``names`` gives the C expression of each ``Var(k)``; ``ranges`` their
    inclusive bounds. The caller picks the integer type (see ``fits_int32``).
    """
    lookup: Callable[[int], str] = names if callable(names) else names.__getitem__
    memo: dict[Expr, Range] = {}
    return _emit(e, lookup, ranges, memo).text


def _wrap(c: _C, prec: int, right: bool = False) -> str:
    if c.prec < prec or (right and c.prec == prec):
        return f"({c.text})"
    return c.text


def _bin(op: str, a: _C, b: _C) -> _C:
    p = _C_PREC[op]
    bitwise = op in ("^", "&", "<<", ">>")
    left = f"({a.text})" if bitwise and a.prec < _C_ATOM else _wrap(a, p)
    right = f"({b.text})" if bitwise and b.prec < _C_ATOM else _wrap(b, p, right=True)
    return _C(f"{left} {op} {right}", p)


def _literal(v: int) -> _C:
    text = str(v) if -_INT32_MAX - 1 <= v <= _INT32_MAX else f"{v}L"
    return _C(text, _C_ATOM if v >= 0 else _C_UNARY)


def _emit(e: Expr, names: Callable[[int], str], ranges: Sequence[Range], memo: dict) -> _C:
    if isinstance(e, Const):
        return _literal(e.value)
    if isinstance(e, Var):
        return _C(names(e.index), _C_ATOM)
    a = _emit(e.lhs, names, ranges, memo)
    alo, _ = _bounds(e.lhs, ranges, memo)
    op = e.op
    if op in ("+", "-", "^", "&"):
        return _bin(op, a, _emit(e.rhs, names, ranges, memo))
    if op == "*":
        if isinstance(e.rhs, Const) and _is_pow2(e.rhs.value) and e.rhs.value > 1 and alo >= 0:
            return _bin("<<", a, _literal(e.rhs.value.bit_length() - 1))
        return _bin("*", a, _emit(e.rhs, names, ranges, memo))
    c = e.rhs.value  # type: ignore[union-attr]
    if op == "<<":
        if alo >= 0:
            return _bin("<<", a, _literal(c))
        return _bin("*", a, _literal(1 << c))
    if op == ">>":
        op, c = "//", 1 << c
    # floor division / modulo: shift a possibly negative dividend up by a
    # multiple of c so that C's truncating division agrees with floor.
    lift = 0 if alo >= 0 else -(alo // c)  # smallest K with alo + K*c >= 0
    if lift:
        a = _bin("+", a, _literal(lift * c))
    if op == "//":
        q = (
            _bin(">>", a, _literal(c.bit_length() - 1))
            if _is_pow2(c)
            else _bin("/", a, _literal(c))
        )
        return _bin("-", q, _literal(lift)) if lift else q
    if _is_pow2(c):
        return _bin("&", a, _literal(c - 1))
    return _bin("%", a, _literal(c))
