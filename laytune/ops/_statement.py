"""One statement in index notation, parsed with :mod:`ast` (never evaluated).

Grammar (Python syntax, so ``ast.parse`` does the tokenising)::

    statement := target "=" value
               | target "+=" value            # sum over the reduce axes
               | target "=" REDUCE "(" value ")"   # one argument: over the reduce axes
               | target "=" epilogue          # one reduction inside an element-wise value
    target    := NAME "[" index ("," index)* "]"
    value     := value ("+" | "-" | "*" | "/") value | "-" value | NUMBER
               | NAME "[" index ("," index)* "]"     # a load
               | ("max" | "min") "(" value "," value ")"   # element-wise
               | ("exp" | "sqrt" | "rsqrt" | "tanh" | "erf") "(" value ")"
    index     := NAME | INTEGER | index ("+" | "-" | "*" | "//" | "%") index | "(" index ")"
    REDUCE    := a name of laytune.ops.REDUCTIONS: "sum", "max", "min"

An *epilogue* is an element-wise value around exactly one one-argument
reduction (``sum(...)``, ``max(...)``, ``min(...)``):
``Y[i, j] = max(sum(A[i, k] * B[k, j]) + C[j], 0.0)`` reduces first, then
applies the rest to each finished result before the store (a bias, a ReLU,
a residual add fused into the reduction). Its loads
outside the reduction are indexed by the target's axes only. The statement
keeps the reduced term as ``value`` and the rest as ``epilogue``, in which
:class:`Accumulator` stands for the finished reduction.

Index names are axis names; an index expression becomes a
:class:`laytune.layout.Expr` with ``Var(k)`` for the k-th axis. A load whose
index can leave the buffer's shape reads zero there (the zero padding of a
convolution).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from laytune.exceptions import LaytuneError, StatementError
from laytune.layout import Const, Expr, Var, binary_op, to_text
from laytune.ops._reductions import REDUCTIONS

__all__ = [
    "FUNCTIONS",
    "VALUE_OPS",
    "Accumulator",
    "BinaryOp",
    "Function",
    "Literal",
    "Load",
    "Negate",
    "Statement",
    "StatementError",
    "Value",
    "ValueFunction",
    "ValueOp",
    "loads",
    "parse_statement",
    "replace_loads",
    "statement_text",
    "value_text",
]


@dataclass(frozen=True)
class Load:
    """Read of ``buffer`` at ``indices`` (one index expression per dimension)."""

    buffer: str
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class Accumulator:
    """The finished reduction at the output element, inside an epilogue."""


@dataclass(frozen=True)
class Literal:
    value: float


@dataclass(frozen=True)
class BinaryOp:
    """``op`` is one of ``+ - * /`` or the element-wise functions ``max``, ``min``."""

    op: str
    lhs: Value
    rhs: Value


@dataclass(frozen=True)
class ValueOp:
    """A binary operator of statement values, in every form the stages need:
    ``compute`` element-wise on numpy arrays or floats (the reference, the
    analysis of padding), ``function`` the OpenCL C / statement function
    name for ``max`` and ``min``, None for an infix operator."""

    op: str
    compute: Callable[[Any, Any], Any]
    function: str | None = None

    def text(self, a: str, b: str) -> str:
        """``a op b`` as text: ``f(a, b)`` or ``(a op b)``."""
        return f"{self.function}({a}, {b})" if self.function else f"({a} {self.op} {b})"


#: The operators a statement's values combine with.
VALUE_OPS: dict[str, ValueOp] = {
    "+": ValueOp("+", np.add),
    "-": ValueOp("-", np.subtract),
    "*": ValueOp("*", np.multiply),
    "/": ValueOp("/", np.divide),
    "max": ValueOp("max", np.maximum, "max"),
    "min": ValueOp("min", np.minimum, "min"),
}


@dataclass(frozen=True)
class Negate:
    operand: Value


@dataclass(frozen=True)
class Function:
    """``name(operand)``: one of the unary functions of :data:`FUNCTIONS`."""

    name: str
    operand: Value


@dataclass(frozen=True)
class ValueFunction:
    """A unary function of statement values: ``compute`` element-wise on
    numpy arrays or floats (float64 in the reference), ``name`` as the
    statement and OpenCL C both write it (each is an OpenCL C built-in of
    every float and vector type)."""

    name: str
    compute: Callable[[Any], Any]


_erf = np.frompyfunc(math.erf, 1, 1)


def _erf_float(x: Any) -> Any:
    # numpy has no erf; math.erf is exact to the last bit of a double
    return np.asarray(_erf(np.asarray(x, dtype=np.float64)), dtype=np.float64)[()]


#: The unary functions a statement's values may call.
FUNCTIONS: dict[str, ValueFunction] = {
    "exp": ValueFunction("exp", np.exp),
    "sqrt": ValueFunction("sqrt", np.sqrt),
    "rsqrt": ValueFunction("rsqrt", lambda x: 1.0 / np.sqrt(x)),
    "tanh": ValueFunction("tanh", np.tanh),
    "erf": ValueFunction("erf", _erf_float),
}


Value = Union[Load, Literal, BinaryOp, Negate, Function, Accumulator]  # noqa: UP007 - used at runtime


@dataclass(frozen=True)
class Statement:
    """``target[target_indices] (=|reduce=) value``; ``reduction`` is None
    or a name of ``REDUCTIONS``.
    ``epilogue`` (with a reduction only): the element-wise value applied to
    each finished reduction, :class:`Accumulator` standing for it; None
    stores the reduction as it is."""

    target: str
    target_indices: tuple[Expr, ...]
    value: Value
    reduction: str | None
    text: str
    epilogue: Value | None = None


_VALUE_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_INDEX_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


def parse_statement(text: str, axes: Sequence[str]) -> Statement:
    """Parse ``text`` over the axis names ``axes`` (their order gives ``Var(k)``)."""
    try:
        tree = ast.parse(text.strip(), mode="exec")
    except SyntaxError as err:
        raise StatementError(f"statement {text!r} is not valid syntax: {err.msg}") from None
    if len(tree.body) != 1:
        raise StatementError(f"expected exactly one statement, got {len(tree.body)} in {text!r}")
    node = tree.body[0]
    parser = _Parser(text, tuple(axes))
    if isinstance(node, ast.AugAssign):
        if not isinstance(node.op, ast.Add):
            raise parser.error(node, "the only augmented assignment is '+=' (a sum)")
        target, value, reduction = node.target, node.value, "sum"
    elif isinstance(node, ast.Assign):
        if len(node.targets) != 1:
            raise parser.error(node, "assign to exactly one buffer")
        target, value, reduction = node.targets[0], node.value, None
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id in REDUCTIONS
            and len(value.args) == 1
            and not value.keywords
        ):
            reduction, value = value.func.id, value.args[0]
    else:
        raise parser.error(node, "expected 'Y[...] = value' or 'Y[...] += value'")
    if not isinstance(target, ast.Subscript) or not isinstance(target.value, ast.Name):
        raise parser.error(target, "the target must be a buffer access such as Y[i, j]")
    name = target.value.id
    indices = parser.indices(target)
    if reduction is not None:
        return Statement(name, indices, parser.value(value), reduction, text.strip())
    parser.reductions = []
    outer = parser.value(value)
    found, parser.reductions = parser.reductions, None
    if not found:
        return Statement(name, indices, outer, None, text.strip())
    if any(other != found[0] for other in found[1:]):  # one reduction, used as often as needed
        names = ", ".join(f"{r}(...)" for r in REDUCTIONS)
        raise parser.error(
            value, f"an epilogue wraps one reduction ({names}), the same at each use"
        )
    reduction, reduced = found[0]
    return Statement(name, indices, reduced, reduction, text.strip(), outer)


class _Parser:
    def __init__(self, text: str, axes: tuple[str, ...]):
        self.text = text
        self.axes = axes
        # while parsing a possible epilogue: the reductions met, (kind, reduced value)
        self.reductions: list[tuple[str, Value]] | None = None

    def error(self, node: ast.AST, why: str) -> StatementError:
        col = getattr(node, "col_offset", 0)
        return StatementError(f"{why}\n  {self.text.strip()}\n  {' ' * col}^")

    def indices(self, node: ast.Subscript) -> tuple[Expr, ...]:
        sl = node.slice
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        return tuple(self.index(item) for item in items)

    def index(self, node: ast.AST) -> Expr:
        if isinstance(node, ast.Name):
            if node.id not in self.axes:
                raise self.error(node, f"unknown axis {node.id!r} (axes: {', '.join(self.axes)})")
            k = self.axes.index(node.id)
            return Var(k, node.id)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int):
                raise self.error(node, f"index constants are integers, got {node.value!r}")
            return Const(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return Const(0) - self.index(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _INDEX_OPS:
            lhs, rhs = self.index(node.left), self.index(node.right)
            op = _INDEX_OPS[type(node.op)]
            try:
                return binary_op(op, lhs, rhs)
            except LaytuneError as err:
                raise self.error(node, str(err)) from None
        raise self.error(node, "an index is an axis name, an integer, or + - * // % of indices")

    def value(self, node: ast.AST) -> Value:
        if isinstance(node, ast.Subscript):
            if not isinstance(node.value, ast.Name):
                raise self.error(node, "a load reads a named buffer: X[i, j]")
            return Load(node.value.id, self.indices(node))
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise self.error(node, f"constants are numbers, got {node.value!r}")
            return Literal(float(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(node.operand)
            if isinstance(inner, Literal):
                return Literal(-inner.value)
            return Negate(inner)
        if isinstance(node, ast.BinOp) and type(node.op) in _VALUE_OPS:
            return BinaryOp(
                _VALUE_OPS[type(node.op)], self.value(node.left), self.value(node.right)
            )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn = node.func.id
            if fn in ("max", "min") and len(node.args) == 2 and not node.keywords:
                return BinaryOp(fn, self.value(node.args[0]), self.value(node.args[1]))
            if fn in FUNCTIONS and len(node.args) == 1 and not node.keywords:
                return Function(fn, self.value(node.args[0]))
            found = self.reductions
            if fn in REDUCTIONS and len(node.args) == 1 and found is not None:
                self.reductions = None  # a reduction inside a reduction is refused
                found.append((fn, self.value(node.args[0])))
                self.reductions = found
                return Accumulator()
            if fn in REDUCTIONS:
                raise self.error(node, f"a one-argument {fn}(...) must be the whole right side")
            if fn in FUNCTIONS:
                raise self.error(node, f"{fn}(...) takes one value")
            raise self.error(
                node,
                f"unknown function {fn!r} (element-wise: max(a, b), min(a, b), "
                f"{', '.join(f'{f}(a)' for f in FUNCTIONS)})",
            )
        if isinstance(node, ast.Name):
            raise self.error(
                node, f"{node.id!r} alone is not a value; read a buffer: {node.id}[...]"
            )
        raise self.error(
            node,
            "a value is a load, a number, + - * / of values, max(a, b), min(a, b) or "
            f"a function of one value ({', '.join(FUNCTIONS)})",
        )


def loads(value: Value) -> list[Load]:
    """Every load of ``value``, left to right."""
    if isinstance(value, Load):
        return [value]
    if isinstance(value, BinaryOp):
        return loads(value.lhs) + loads(value.rhs)
    if isinstance(value, (Negate, Function)):
        return loads(value.operand)
    return []


def replace_loads(value: Value, new: Callable[[Load], Value]) -> Value:
    """``value`` with every load ``x`` replaced by ``new(x)``."""
    if isinstance(value, Load):
        return new(value)
    if isinstance(value, BinaryOp):
        return BinaryOp(value.op, replace_loads(value.lhs, new), replace_loads(value.rhs, new))
    if isinstance(value, Negate):
        return Negate(replace_loads(value.operand, new))
    if isinstance(value, Function):
        return Function(value.name, replace_loads(value.operand, new))
    return value


def statement_text(stmt: Statement, names: Sequence[str]) -> str:
    """Text of ``stmt`` that :func:`parse_statement` reads back as ``stmt``
    (index expressions with the axis ``names``)."""
    target = f"{stmt.target}[{', '.join(to_text(i, names) for i in stmt.target_indices)}]"
    value = value_text(stmt.value, names)
    if stmt.reduction is None:
        return f"{target} = {value}"
    reduced = f"{stmt.reduction}({value})"
    if stmt.epilogue is None:
        return f"{target} = {reduced}"
    return f"{target} = {value_text(stmt.epilogue, names, reduced)}"


def value_text(value: Value, names: Sequence[str], accumulator: str = "acc") -> str:
    """Readable text of a value (index expressions with ``names``;
    :class:`Accumulator` written ``accumulator``)."""
    if isinstance(value, Accumulator):
        return accumulator
    if isinstance(value, Load):
        return f"{value.buffer}[{', '.join(to_text(i, names) for i in value.indices)}]"
    if isinstance(value, Literal):
        if math.isinf(value.value):  # a number the parser reads back as infinity
            return "1e999" if value.value > 0 else "-1e999"
        return repr(value.value)
    if isinstance(value, Negate):
        return f"-({value_text(value.operand, names, accumulator)})"
    if isinstance(value, Function):
        return f"{value.name}({value_text(value.operand, names, accumulator)})"
    return VALUE_OPS[value.op].text(
        value_text(value.lhs, names, accumulator), value_text(value.rhs, names, accumulator)
    )
