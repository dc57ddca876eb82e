"""Parsing the canonical text of an index map, without ``eval``.

The grammar is a Python lambda whose body is a list::

    lambda n, h, w, c: [n, c // 4, h, AXIS_SEPARATOR, w, c % 4]

Python's own ``ast`` module tokenises and parses the text; this module walks
the tree and accepts only parameter names, integer literals, unary minus, the
operators of :mod:`laytune.layout._expr`, and ``AXIS_SEPARATOR`` as a list
element. Anything else is a :class:`LayoutSyntaxError` that says what and
where.

Text is bounded before it is parsed: at most :data:`MAX_TEXT_LENGTH`
characters and :data:`MAX_NESTING` levels of nested expressions; and while it
is read: at most :data:`MAX_INDICES` parameters and physical indices, and
constants, written or folded, within ``2^62`` in magnitude
(:data:`laytune.layout._expr.MAX_CONSTANT`; a shift past 62 is refused
before it is computed). The layouts laytune writes stay far below every
bound (a few hundred characters, a dozen levels, eight indices, small
constants); text past one is refused with a LayoutSyntaxError,
never a RecursionError, MemoryError, OverflowError or ValueError, and the
message quotes at most a short window of the text.
"""

from __future__ import annotations

import ast

from laytune.exceptions import LayoutError, LayoutSyntaxError, excerpt
from laytune.layout._expr import Const, Expr, Var, binary_op

__all__ = ["MAX_INDICES", "MAX_NESTING", "MAX_TEXT_LENGTH", "SEPARATOR_TOKEN", "parse_index_map"]

SEPARATOR_TOKEN = "AXIS_SEPARATOR"

#: The longest index-map text that is parsed (characters).
MAX_TEXT_LENGTH = 10_000
#: The deepest nesting of expressions inside one physical index.
MAX_NESTING = 64
#: The most logical indices (parameters) and the most physical indices
#: (outputs) of one map: numpy arrays have at most 64 axes, laytune's
#: layouts about ten.
MAX_INDICES = 32

_BINOPS: dict[type, str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.BitXor: "^",
    ast.BitAnd: "&",
    ast.LShift: "<<",
    ast.RShift: ">>",
}
_UNSUPPORTED = {
    ast.Div: "'/' (true division; use '//')",
    ast.Pow: "'**'",
    ast.BitOr: "'|' (not injective in general; use '^' or '+')",
    ast.MatMult: "'@'",
}


def parse_index_map(text: str) -> tuple[tuple[str, ...], tuple[Expr, ...], tuple[int, ...]]:
    """Parse ``text`` into (parameter names, physical outputs, separator positions).

    A separator position ``k`` means the physical axes split before output ``k``.
    """
    if not isinstance(text, str):
        raise LayoutSyntaxError(f"an index map's text must be a string, got {type(text).__name__}")
    source = text.strip()
    if len(source) > MAX_TEXT_LENGTH:
        raise LayoutSyntaxError(
            f"an index map's text is {len(source)} characters long, more than the "
            f"{MAX_TEXT_LENGTH} laytune parses (it starts {source[:40]!r})"
        )
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as err:
        column = max((err.offset or 1) - 1, 0)
        reason = err.msg
        if "integer string conversion" in reason:  # Python's advice is for programs
            reason = "an integer literal of thousands of digits (constants are within 2^62)"
        raise LayoutSyntaxError(
            f"not a valid lambda: {reason} at column {column + 1}", source, column
        ) from None
    except (RecursionError, MemoryError):  # Python's parser gives up on deep nesting
        raise LayoutSyntaxError(_too_deep(source)) from None
    _check_nesting(tree, source)
    return _Parser(source).lambda_(tree.body)


def _too_deep(source: str) -> str:
    return (
        f"an index map nests expressions more than {MAX_NESTING} levels deep "
        f"(it starts {source[:40]!r})"
    )


def _check_nesting(tree: ast.Expression, source: str) -> None:
    """Refuse a physical index that nests more than MAX_NESTING expressions
    (``i`` is one, ``i + 1`` two), walking without recursion: the walker
    below recurses."""
    stack: list[tuple[ast.AST, int]] = [(tree.body, -2)]  # the lambda and its list count 0
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.expr):
            depth += 1
            if depth > MAX_NESTING:
                raise LayoutSyntaxError(_too_deep(source))
        stack.extend((child, depth) for child in ast.iter_child_nodes(node))


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.params: dict[str, int] = {}

    def fail(self, what: str, node: ast.AST) -> LayoutSyntaxError:
        column = getattr(node, "col_offset", 0)
        return LayoutSyntaxError(f"{what} at column {column + 1}", self.text, column)

    def lambda_(self, node: ast.expr) -> tuple[tuple[str, ...], tuple[Expr, ...], tuple[int, ...]]:
        if not isinstance(node, ast.Lambda):
            raise self.fail("expected 'lambda <indices>: [<physical indices>]'", node)
        args = node.args
        if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults:
            raise self.fail("only plain positional parameters are allowed", node)
        names = [a.arg for a in args.args]
        if len(names) > MAX_INDICES:
            raise self.fail(
                f"{len(names)} parameters, more than the {MAX_INDICES} indices laytune takes", node
            )
        for position, name in enumerate(names):
            if name == SEPARATOR_TOKEN:
                raise self.fail(
                    f"{SEPARATOR_TOKEN} cannot be a parameter name", args.args[position]
                )
            if name in self.params:
                raise self.fail(f"parameter {excerpt(name)!r} appears twice", args.args[position])
            self.params[name] = position
        body = node.body
        if not isinstance(body, (ast.List, ast.Tuple)):
            raise self.fail("the lambda must return a list of physical indices", body)
        count = sum(not (isinstance(e, ast.Name) and e.id == SEPARATOR_TOKEN) for e in body.elts)
        if count > MAX_INDICES:
            raise self.fail(
                f"{count} physical indices, more than the {MAX_INDICES} laytune takes", body
            )
        outputs: list[Expr] = []
        separators: list[int] = []
        for element in body.elts:
            if isinstance(element, ast.Name) and element.id == SEPARATOR_TOKEN:
                if not outputs or (separators and separators[-1] == len(outputs)):
                    raise self.fail(
                        f"{SEPARATOR_TOKEN} must stand between two physical indices", element
                    )
                separators.append(len(outputs))
                continue
            outputs.append(self.expr(element))
        if not outputs:
            raise self.fail("the lambda returns no physical index", body)
        if separators and separators[-1] == len(outputs):
            raise self.fail(f"{SEPARATOR_TOKEN} must stand between two physical indices", body)
        return tuple(names), tuple(outputs), tuple(separators)

    def expr(self, node: ast.expr) -> Expr:
        if isinstance(node, ast.Name):
            if node.id == SEPARATOR_TOKEN:
                raise self.fail(f"{SEPARATOR_TOKEN} may only be an element of the list", node)
            if node.id not in self.params:
                known = ", ".join(self.params) or "none"
                known = known if len(known) <= 60 else f"{known[:60]}..."
                raise self.fail(f"unknown name {excerpt(node.id)!r} (parameters: {known})", node)
            return Var(self.params[node.id], node.id)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int):
                raise self.fail(
                    f"only integer constants are allowed, got {excerpt(repr(node.value))}", node
                )
            try:
                return Const(node.value)
            except LayoutError as err:
                raise self.fail(str(err), node) from None
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                if isinstance(node.operand, ast.Constant):
                    # within MAX_CONSTANT either way: the bound is symmetric
                    return Const(-self.expr(node.operand).value)  # type: ignore[union-attr]
                return binary_op("*", Const(-1), self.expr(node.operand))
            if isinstance(node.op, ast.UAdd):
                return self.expr(node.operand)
            raise self.fail(f"unsupported unary operator {type(node.op).__name__}", node)
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                label = _UNSUPPORTED.get(type(node.op), type(node.op).__name__)
                raise self.fail(f"unsupported operator {label}", node)
            lhs, rhs = self.expr(node.left), self.expr(node.right)
            try:
                return binary_op(op, lhs, rhs)
            except LayoutError as err:
                raise self.fail(str(err), node) from None
        if isinstance(node, ast.Call):
            raise self.fail("function calls are not allowed in an index map", node)
        raise self.fail(f"unsupported syntax {type(node).__name__}", node)
