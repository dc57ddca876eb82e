"""The jobs ``laytune tune --demo`` runs: where a layout wins, and where it does not.

The first is a transpose feeding a matmul: the caller holds ``A`` transposed
(it computes ``A.T @ B`` with ``A`` stored as a 256 x 256 row-major array,
so the kernel's ``A[i, k]`` lies at ``[k, i]``), and ``B`` is 16 columns. In
identity layouts every call first transposes ``A`` into row-major order; a
candidate that keeps ``A`` as the caller holds it converts nothing, and its
8 x 16 register block finds the 8 rows of ``A`` it needs at each ``k`` next
to each other, as in a packed panel. Measured with Intel's CPU runtime on 2
cores of an AMD EPYC (family 25, AVX-512), the 24-trial job's best was 4.4
to 4.5x faster end to end than identity layouts with the same knobs in 4 of
4 runs (0.020 against 0.09 ms: the kernel, and the transpose of ``A``
priced as conversion records are, timed cold, 0.07 ms; a candidate's own
pack kernel for the same transpose, timed warm, took 0.008 ms). At 512 x 16
x 512 the transpose tuned by ``laytune tune-conversions`` (0.17 ms cold)
still cost four times the kernel. The second job is the same matmul with
``A`` held row-major: there any other layout of ``A`` costs the transpose
every call, so a layout wins only where its kernel saves more than that
(1.00 to 1.02x from the layouts in the runs here). The demo prints why each result came out as it did, from the
figures of its records (:func:`~laytune.search._explain.explain_layouts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from laytune import ops

__all__ = ["Demo", "demos"]


@dataclass(frozen=True)
class Demo:
    """One demo job: a workload, the boundary its caller sets, and what that
    boundary means in words."""

    title: str
    workload: Any
    boundary: Mapping[str, str] = field(default_factory=dict)


def demos() -> tuple[Demo, ...]:
    """The demo jobs, in the order ``laytune tune --demo`` runs them."""
    matmul = ops.matmul(256, 16, 256)
    return (
        Demo(
            "A matmul whose caller holds A transposed (A.T @ B, A stored 256 x 256 "
            "row-major): each call with identity layouts transposes A first",
            matmul,
            {"A": "lambda i, j: [j, i]"},
        ),
        Demo("The same matmul, A held row-major: no transpose to save", matmul),
    )
