"""The jobs ``laytune tune --demo`` runs: where a layout wins, and where it does not.

The first is a transpose feeding a matmul: the caller holds ``A`` transposed
(it computes ``A.T @ B`` with ``A`` stored as a 256 x 256 row-major array,
so the kernel's ``A[i, k]`` lies at ``[k, i]``), and ``B`` is 16 columns. In
identity layouts every call first transposes ``A`` into row-major order; a
candidate that keeps ``A`` as the caller holds it converts nothing, and its
8 x 16 register block finds the 8 rows of ``A`` it needs at each ``k`` next
to each other, as in a packed panel. Measured on Intel's CPU runtime (2 Zen 5
cores), the 24-trial job's best is 4.5x faster end to end than identity
layouts with the same knobs (0.020 against 0.093 ms: the transpose costs 3.5
times the kernel), in every run; with the transpose tuned (``laytune
tune-conversions``) it still costs more than the kernel. The second job is
the same matmul with ``A`` held row-major: there identity layouts win, with
the same kernel time, since any other layout of ``A`` would now cost the
transpose. The demo prints why each result came out as it did, from the
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
