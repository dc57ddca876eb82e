"""The reductions a statement may combine its terms with: one table, read by
the numpy reference, the search space (what overcomputed padding must hold)
and the code generator (initial value and combine of an accumulator).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from laytune.exceptions import StatementError

__all__ = ["REDUCTIONS", "Reduction", "reduction"]


@dataclass(frozen=True)
class Reduction:
    """How terms combine along the reduce axes.

    ``neutral`` is the value ``x`` with ``combine(acc, x) == acc`` for every
    ``acc``: the accumulator's initial value, and what padding must hold for
    a kernel to overcompute over it. ``c_combine`` is the OpenCL C update of
    an accumulator, a format string over ``acc`` and ``value`` (the value may
    be a scalar while the accumulator is a vector: ``max(gentype,
    sgentype)`` exists, ``+`` broadcasts). ``numpy`` combines arrays in
    place for the reference.

    ``max`` and ``min`` are OpenCL C's common functions, not ``fmax`` and
    ``fmin``: one vector instruction on a CPU (``vmaxps``), where ``fmax``
    adds the tests that make it return the number beside a NaN. A NaN
    among the terms gives an undefined result, as x86's ``maxps`` and ONNX
    Runtime's pooling do, where numpy's reference propagates it. On the
    3 x 3 max pool of ResNet-18's stem (1 x 64 x 112 x 112, 16-channel
    blocks) a hand kernel took 0.021 ms so and 0.051 with ``fmax``.
    """

    name: str
    neutral: float
    c_combine: str
    numpy: Callable[..., np.ndarray]

    def combine_c(self, acc: str, value: str) -> str:
        """The C statement that folds ``value`` into ``acc``."""
        return f"{acc} = {self.c_combine.format(acc=acc, value=value)};"


REDUCTIONS: dict[str, Reduction] = {
    "sum": Reduction("sum", 0.0, "{acc} + {value}", np.add),
    "max": Reduction("max", -math.inf, "max({acc}, {value})", np.maximum),
    "min": Reduction("min", math.inf, "min({acc}, {value})", np.minimum),
}
"""Every reduction a statement may use, by name: ``+=`` is ``sum``, and a
one-argument call of a name here (``Y[i] = min(X[i, j])``) reduces with it.
The statement parser reads this table, so an entry is the whole of a new
reduction."""


def reduction(name: str | None) -> Reduction | None:
    """The reduction called ``name``; None for an element-wise statement."""
    if name is None:
        return None
    try:
        return REDUCTIONS[name]
    except KeyError:
        raise StatementError(
            f"reduction {name!r} is not one of {sorted(REDUCTIONS)} (or None: element-wise)"
        ) from None
