"""A user's own module of operators, as tests write it, and a fixture that
keeps what importing it registers out of the other tests."""

from __future__ import annotations

import sys
import textwrap
import weakref
from collections.abc import Iterator

import pytest

from laytune.ops import _registry

#: A batched matmul registered as an operator, as the README defines it.
BMM_MODULE = textwrap.dedent(
    '''
    from laytune import ops
    from laytune.ops import Workload


    @ops.register(example={"batch": 2, "M": 8, "N": 8, "K": 8})
    def bmm(batch: int, M: int, N: int, K: int, dtype: str = "float32") -> Workload:
        """``C[b, i, j] += A[b, i, k] * B[b, k, j]``: a batch of matmuls."""
        return Workload.define(
            "bmm",
            "C[b, i, j] += A[b, i, k] * B[b, k, j]",
            {"b": batch, "i": M, "j": N, "k": K},
            {"A": (batch, M, K), "B": (batch, K, N)},
            dtype,
            params={"batch": batch, "M": M, "N": N, "K": K},
        )
    '''
)

#: A workload made by Workload.define alone, no constructor registered.
DEFINED_MODULE = textwrap.dedent(
    """
    from laytune.ops import Workload

    SCALE_ADD = Workload.define(
        "scale_add", "Y[i, j] = X[i, j] * 2.0 + Z[i, j]", {"i": 4, "j": 8}, {"X": (4, 8), "Z": (4, 8)}
    )
    """
)


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Operators registered, workloads defined, modules imported and folders
    put on ``sys.path`` during the test are forgotten after it."""
    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))
    monkeypatch.setattr(_registry, "_DEFINED", weakref.WeakValueDictionary(_registry._DEFINED))
    monkeypatch.setattr(sys, "path", list(sys.path))
    modules = set(sys.modules)
    yield
    for name in set(sys.modules) - modules:
        del sys.modules[name]
