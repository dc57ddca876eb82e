"""In-register transposes of a square block of vectors, as ``shuffle2`` networks.

A work-item that reads ``n`` vectors of ``n`` elements along one axis and
needs ``n`` vectors along another (a transpose, NCHW <-> NCHWc, an operand
whose contiguous axis is not the kernel's vector axis) transposes the block
in registers. Building each output vector from components
(``(float8)(r0.s3, r1.s3, ...)``) makes compilers emit ``n * n`` element
inserts; the perfect-shuffle network below is ``log2(n)`` rounds of ``n``
two-input shuffles that map onto unpack/permute instructions (on Intel's CPU
runtime, 2.2x faster on an in-cache 1024^2 transpose, measured by
``bench.hand_transpose``).

The law: for rows ``r[0..n)`` the outputs ``t[0..n)`` satisfy
``t[a].s[b] == r[b].s[a]`` (tested over every width).
"""

from __future__ import annotations

from collections.abc import Sequence

from laytune.codegen._emit import unsigned_ctype
from laytune.space import TRANSPOSE_WIDTHS

__all__ = ["TRANSPOSE_WIDTHS", "chunk_lane", "transpose_lines"]


def _mask(indices: Sequence[int], width: int, ctype: str) -> str:
    """shuffle2's mask: unsigned integers as wide as the elements."""
    return f"({unsigned_ctype(ctype)}{width})({', '.join(str(i) for i in indices)})"


def transpose_lines(
    rows: Sequence[str], ctype: str, prefix: str, lanes: int | None = None
) -> tuple[list[str], list[str]]:
    """Declarations that transpose the ``n = len(rows)`` vectors named
    ``rows`` (each a ``ctype`` vector of ``lanes`` elements, ``n`` by
    default, a multiple of ``n``), and the names of the ``n`` results.
    Temporaries are named ``<prefix><round>_<k>``.

    One round interleaves row ``k`` with row ``k + n/2``: output ``2k`` takes
    their low halves, ``2k + 1`` their high halves. After ``log2(n)`` rounds
    element ``b`` of output ``a`` is element ``a`` of row ``b`` (square); with
    more lanes than rows, output ``a`` holds ``lanes / n`` chunks of ``n``
    elements, chunk ``h`` being lane :func:`chunk_lane` ``(a, h)`` of every
    row in order.
    """
    n = len(rows)
    width = n if lanes is None else lanes
    if n not in TRANSPOSE_WIDTHS or width not in TRANSPOSE_WIDTHS or width % n:
        raise ValueError(
            f"an in-register transpose takes {TRANSPOSE_WIDTHS} rows of as many lanes or a "
            f"multiple of them, not {n} rows of {width}"
        )
    half = width // 2
    low = _mask([x for k in range(half) for x in (k, k + width)], width, ctype)
    high = _mask([x for k in range(half, width) for x in (k, k + width)], width, ctype)
    vtype = f"{ctype}{width}"
    lines: list[str] = []
    current = list(rows)
    for round_ in range(n.bit_length() - 1):
        nxt = []
        for k in range(n // 2):
            a, b = current[k], current[k + n // 2]
            for m, mask in enumerate((low, high)):
                name = f"{prefix}{round_}_{2 * k + m}"
                lines.append(f"const {vtype} {name} = shuffle2({a}, {b}, {mask});")
                nxt.append(name)
        current = nxt
    return lines, current


def chunk_lane(output: int, chunk: int, rows: int, lanes: int) -> int:
    """The lane of the rows that chunk ``chunk`` of transposed output
    ``output`` holds (:func:`transpose_lines` with ``lanes`` > ``rows``)."""
    return output * (lanes // rows) + chunk
