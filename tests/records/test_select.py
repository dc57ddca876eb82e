"""Workloads named the way people name them: operator, key prefix, short form, shape."""

from __future__ import annotations

import pytest

from laytune import ops
from laytune.exceptions import NotFoundError
from laytune.records import match_workloads, workload_matches

MATMUL = ops.matmul(256, 256, 128).key
TRANSPOSE = ops.transpose((64, 32), (1, 0)).key


@pytest.mark.parametrize(
    ("workload", "shape", "matmul", "transpose"),
    [
        (None, None, True, True),
        ("matmul", None, True, False),
        ("mat", None, True, False),  # a prefix of the key
        ("matmul(M=256,N=256", None, True, False),
        ("matmul 256x256", None, True, False),  # a prefix of the short form
        (MATMUL, None, True, False),
        ("matmul(M=512", None, False, False),
        (None, "256x256x128", True, False),
        (None, " 256x256x128 ", True, False),
        (None, "64x32", False, True),  # the extents alone
        (None, "64x32 perm=1x0", False, True),
        (None, "64x32 perm=0x1", False, False),
        ("transpose", "256x256x128", False, False),
        (None, "256x256", False, False),  # not a prefix of the shape
    ],
)
def test_workload_matches(workload, shape, matmul: bool, transpose: bool) -> None:
    assert workload_matches(MATMUL, workload, shape) is matmul
    assert workload_matches(TRANSPOSE, workload, shape) is transpose


def test_match_workloads_names_what_the_database_has() -> None:
    class Database:
        safe_url = "sqlite:///x.db"

        def workloads(self) -> list[tuple[str, str]]:
            return [(TRANSPOSE, "d0"), (MATMUL, "d0"), (MATMUL, "d1")]

    assert match_workloads(Database(), "matmul") == [MATMUL]
    assert match_workloads(Database()) == sorted([MATMUL, TRANSPOSE])
    with pytest.raises(NotFoundError, match=r"matches workload 'conv2d' \(it has: matmul"):
        match_workloads(Database(), "conv2d")
