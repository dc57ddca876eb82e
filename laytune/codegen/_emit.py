"""Emitting C: kernel variables with ranges, and buffer accesses through layouts.

Every index the generated code computes is a :class:`laytune.layout.Expr`
over the kernel's variables (a :class:`Scope`), simplified with their ranges
and printed by ``laytune.layout._expr.to_opencl``. A buffer access substitutes
the access's index expressions into the layout's flat offset expressions, so
an identity layout prints as ``A[i * K + k]`` (shifts for powers of two).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from laytune.dtypes import DTYPES, KERNEL_DTYPES, Dtype
from laytune.layout import (
    Const,
    Expr,
    Layout,
    Var,
    bounds,
    fits_int32,
    simplify,
    substitute,
    to_opencl,
)
from laytune.space import IMAGE_DTYPES

__all__ = [
    "BufferAccess",
    "Scope",
    "c_float",
    "c_ident",
    "compute_ctype",
    "ctype_of",
    "narrowed",
    "paren",
    "pointer",
    "unsigned_ctype",
    "vector_store",
    "widened",
]

_C_RESERVED = frozenset(
    [
        "auto",
        "break",
        "case",
        "char",
        "const",
        "continue",
        "default",
        "do",
        "double",
        "else",
        "enum",
        "extern",
        "float",
        "for",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "register",
        "restrict",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "struct",
        "switch",
        "typedef",
        "union",
        "unsigned",
        "void",
        "volatile",
        "while",
        "half",
        "bool",
        "kernel",
        "global",
        "local",
        "private",
        "constant",
        "image2d_t",
        "sampler_t",
        "read_only",
        "write_only",
        "uint",
        "ulong",
        "uchar",
        "ushort",
        "size_t",
        "smp",
    ]
)


def _emitted(dtype: str) -> Dtype:
    known = DTYPES.get(dtype)
    if known is None or known.ctype is None:
        raise ValueError(
            f"dtype {dtype!r} has no OpenCL type in this codegen ({', '.join(KERNEL_DTYPES)})"
        )
    return known


def ctype_of(dtype: str) -> str:
    """The OpenCL C type of ``dtype``'s elements in memory (``float``, ``half``)."""
    return _emitted(dtype).ctype  # type: ignore[return-value]


def compute_ctype(dtype: str) -> str:
    """The OpenCL C type kernels do ``dtype``'s arithmetic in: ``float`` for
    float16 too (``Dtype.compute``)."""
    return ctype_of(_emitted(dtype).computes_in)


def widened(dtype: str, value: str, width: int = 1) -> str:
    """``value``, an expression of ``width`` elements of ``dtype`` as memory
    holds them, in the type kernels compute ``dtype`` in."""
    return _converted(value, ctype_of(dtype), compute_ctype(dtype), width)


def narrowed(dtype: str, value: str, width: int = 1) -> str:
    """``value``, computed in ``dtype``'s compute type, rounded to ``dtype``
    to be stored (round to nearest even, OpenCL's default)."""
    return _converted(value, compute_ctype(dtype), ctype_of(dtype), width)


def _converted(value: str, source: str, target: str, width: int) -> str:
    """``value`` of ``width`` elements of C type ``source`` as ``target``."""
    if source == target:
        return value
    return f"convert_{target}{width if width > 1 else ''}({value})"


def storage_ctype(dtype: str) -> str:
    """The C type that moves ``dtype``'s bits without computing on them:
    ``float`` for float32, ``ushort`` for float16, so that a copy of halves
    (a conversion kernel, a padding fill) needs no ``cl_khr_fp16``."""
    return _emitted(dtype).storage_ctype or ctype_of(dtype)


_UNSIGNED = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
_WIDTHS = {c: d.bytes for d in DTYPES.values() for c in (d.ctype, d.storage_ctype) if c}


def unsigned_ctype(ctype: str) -> str:
    """The unsigned integer C type as wide as ``ctype``, the C type or the
    storage type of a dtype (``float``: ``uint``; ``half``, ``ushort``: ``ushort``)."""
    return _UNSIGNED[_WIDTHS[ctype]]


def c_bits(value: float, dtype: str) -> str:
    """A literal of ``value`` in :func:`storage_ctype` of ``dtype``: the
    float literal for float32, the half's bit pattern for float16 (NaN the
    quiet NaN 0x7e00, as numpy's)."""
    known = _emitted(dtype)
    if known.storage_ctype == known.ctype:
        return c_float(value, dtype)
    bits = np.array(value, dtype=dtype).view(f"u{known.bytes}").item()
    return f"({known.storage_ctype})0x{bits:0{2 * known.bytes}x}"


def c_ident(name: str) -> str:
    """``name`` as a C identifier: other characters become ``_`` (``"A.local"``: ``A_local``)."""
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


def c_float(value: float, dtype: str) -> str:
    """A C literal of ``value`` in ``dtype`` (infinities as ``INFINITY``, NaN as ``NAN``)."""
    if math.isnan(value):
        text = "NAN"
    elif math.isinf(value):
        text = "INFINITY" if value > 0 else "-INFINITY"
    else:
        text = repr(float(value)) + "f"
        if "e" in text and "." not in text.split("e")[0]:
            text = text.replace("e", ".0e", 1)
    ctype = compute_ctype(dtype)
    return text if ctype == "float" else f"({ctype})({text})"


class _Frozen:
    """A tuple hashed once: the key of the memos below, looked up many times
    per kernel with the same scope (a tuple rehashes its items every time)."""

    __slots__ = ("_hash", "value")

    def __init__(self, value: tuple[Any, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, _Frozen) and self._hash == other._hash and self.value == other.value
        )


class Scope:
    """The integer variables of a kernel: C name and inclusive range per ``Var``."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.ranges: list[tuple[int, int]] = []
        self._frozen: tuple[_Frozen, _Frozen] | None = None

    def var(self, name: str, lo: int, hi: int) -> Var:
        base = name if name.isidentifier() else "v"
        unique = base if base not in _C_RESERVED else f"{base}_"
        n = 1
        while unique in self.names:
            unique = f"{base}{n}"
            n += 1
        self.names.append(unique)
        self.ranges.append((lo, hi))
        self._frozen = None
        return Var(len(self.names) - 1, unique)

    def builtin(self, text: str, lo: int, hi: int) -> Var:
        """A variable that prints as ``text`` (``get_global_id(0)``) and is never declared."""
        self.names.append(text)
        self.ranges.append((lo, hi))
        self._frozen = None
        return Var(len(self.names) - 1, text)

    def name(self, v: Var) -> str:
        return self.names[v.index]

    def set_range(self, v: Var, lo: int, hi: int) -> None:
        self.ranges[v.index] = (lo, hi)
        self._frozen = None

    def _keys(self) -> tuple[_Frozen, _Frozen]:
        """(ranges, ranges and names), frozen until a variable is added or changed."""
        if self._frozen is None:
            ranges = tuple(self.ranges)
            self._frozen = (_Frozen(ranges), _Frozen((ranges, tuple(self.names))))
        return self._frozen

    def simplify(self, e: Expr) -> Expr:
        return _simplified(e, self._keys()[1])

    def c(self, e: Expr) -> str:
        return _c_text(e, self._keys()[1])

    def bounds(self, e: Expr) -> tuple[int, int]:
        return _bounds_in(e, self._keys()[0])

    def fits_int(self, e: Expr) -> bool:
        ranges, both = self._keys()
        return fits_int32(_simplified(e, both), ranges.value)


# The kernels of one space repeat a few hundred index expressions over
# thousands of candidates (a small conv2d space simplified each one about
# 140 times), so a scope's simplified expressions and their C text are kept
# by expression, ranges and names. The names are in the key because
# expressions equal by value may name their variables differently, and a
# result keeps the names of the expression it was made from.


@functools.lru_cache(maxsize=16384)
def _simplified(e: Expr, scope: _Frozen) -> Expr:
    return simplify(e, scope.value[0])


@functools.lru_cache(maxsize=16384)
def _bounds_in(e: Expr, ranges: _Frozen) -> tuple[int, int]:
    return bounds(e, ranges.value)


@functools.lru_cache(maxsize=16384)
def _c_text(e: Expr, scope: _Frozen) -> str:
    ranges, names = scope.value
    return to_opencl(_simplified(e, scope), names, ranges)


# A kernel reads one buffer at the same few index expressions in candidate
# after candidate (the knobs change, the layout and the block's points do
# not), and substituting them into a padded or blocked layout's offset is most
# of what lowering a load costs: the offset at those indices is kept. (A
# variable's display name is not in the key; C text names variables by index.)


@functools.lru_cache(maxsize=16384)
def _flat_offset_at(
    exprs: tuple[Expr, ...], flat_shape: tuple[int, ...], indices: tuple[Expr, ...]
) -> Expr:
    total: Expr = Const(0)
    for e, extent in zip(exprs, flat_shape, strict=True):
        total = total * extent + e
    return substitute(total, list(indices))


@dataclass(frozen=True)
class BufferAccess:
    """How a kernel reaches one buffer: its C name, layout on ``shape``, and
    whether it lives in an image (``image2d``), global or local memory."""

    name: str
    c_name: str
    layout: Layout
    dtype: str
    memory: str  # "global", "image2d" or "local"
    offset_shape: tuple[int, ...] | None = None  # shape whose ranges simplified the offsets
    # loads widen to the type kernels compute the dtype in and stores round
    # from it (``Dtype.compute``); False where a kernel moves the bits (a conversion)
    widen: bool = True

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape

    def offset_exprs(self) -> tuple[Expr, ...]:
        """Flat offset per physical axis, as expressions of the logical indices."""
        shape = self.offset_shape or self.layout.shape
        return self.layout.index_map.flat_offset_exprs(shape)

    def flat_offset(self, indices: Sequence[Expr]) -> Expr:
        """One flat offset (groups flattened row-major): global and local buffers."""
        return _flat_offset_at(self.offset_exprs(), self.layout.flat_shape, tuple(indices))

    def texel(self, indices: Sequence[Expr], scope: Scope) -> tuple[Expr, Expr, Expr]:
        """(x, y, component) of an image2d access: texel column, row, lane."""
        row, col = (substitute(e, list(indices)) for e in self.offset_exprs())
        return scope.simplify(col // 4), scope.simplify(row), scope.simplify(col % 4)

    def load(self, indices: Sequence[Expr], scope: Scope, width: int = 1) -> str:
        """C expression reading the element at logical ``indices`` (``width``
        consecutive elements along the physical innermost axis when > 1)."""
        if self.memory == "image2d":
            return self._image_load(indices, scope, width)
        offset = scope.c(self.flat_offset(indices))
        if width == 1:
            text = f"{self.c_name}[{offset}]"
        else:
            text = f"vload{width}(0, {pointer(self.c_name, offset)})"
        return widened(self.dtype, text, width) if self.widen else text

    def _image_load(self, indices: Sequence[Expr], scope: Scope, width: int) -> str:
        """Texels read in the compute type (``read_imagef`` of a half image)."""
        computes_in = DTYPES[self.dtype].computes_in if self.widen else self.dtype
        read = IMAGE_DTYPES[computes_in].read
        ctype = ctype_of(computes_in)
        x, y, comp = self.texel(indices, scope)

        def texel(dx: int) -> str:
            return f"{read}({self.c_name}, smp, (int2)({scope.c(x + dx)}, {scope.c(y)}))"

        if width >= 4:  # whole texels, consecutive along the row
            texels = [texel(t) for t in range(width // 4)]
            return texels[0] if width == 4 else f"({ctype}{width})({', '.join(texels)})"
        lo, hi = scope.bounds(comp)
        if width == 2:
            if lo == hi:
                return f"{texel(0)}.s{lo}{lo + 1}"
            return f"texel_pair_{ctype}({texel(0)}, {scope.c(comp)})"
        if lo == hi:
            return f"{texel(0)}.s{lo}"
        return f"texel_lane_{ctype}({texel(0)}, {scope.c(comp)})"

    def store(
        self,
        indices: Sequence[Expr],
        value: str,
        scope: Scope,
        width: int = 1,
        nontemporal: bool = False,
    ) -> str:
        """The store of ``value`` at logical ``indices`` (a vector of
        ``width`` along the physical innermost axis when > 1, ``nontemporal``
        with :func:`vector_store`)."""
        offset = scope.c(self.flat_offset(indices))
        if self.widen:
            value = narrowed(self.dtype, value, width)
        if width == 1:
            return f"{self.c_name}[{offset}] = {value};"
        address = pointer(self.c_name, offset)
        return vector_store(value, width, address, ctype_of(self.dtype), nontemporal)


def vector_store(value: str, width: int, address: str, ctype: str, nontemporal: bool) -> str:
    """The statement storing the ``ctype`` vector ``value`` of ``width`` at
    ``address`` (a pointer expression aligned to the vector where
    ``nontemporal``): ``vstoreN``, or clang's ``__builtin_nontemporal_store``,
    a store that bypasses the caches, so that a line written whole is not
    first read (where the device has it: ``DeviceInfo.builtins``)."""
    if nontemporal:
        return f"__builtin_nontemporal_store({value}, (__global {ctype}{width}*)({address}));"
    return f"vstore{width}({value}, 0, {address});"


def pointer(base: str, offset: str) -> str:
    """``base + offset`` as a pointer expression, parenthesised when the
    offset's top operator binds looser than ``+`` (shifts, masks, XOR)."""
    if offset == "0":
        return base
    loose = any(op in offset for op in ("<<", ">>", "&", "^", "|", "?"))
    return f"{base} + ({offset})" if loose else f"{base} + {offset}"


def paren(text: str) -> str:
    """``text`` ready to be an operand of a comparison or ``&&``."""
    return text if text.replace("_", "a").isalnum() else f"({text})"
