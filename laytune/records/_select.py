"""Finding workloads in a records database the way people name them.

A workload key (``matmul(M=256,N=256,K=256;float32)``) is exact but long;
people say ``matmul``, or ``matmul 256x256x256``. :func:`match_workloads`
resolves such a name and a shape to the keys a database holds, and
:func:`select_records` reads the records of those keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from laytune.exceptions import NotFoundError
from laytune.ops import shape_text, short_key
from laytune.records._record import Record

__all__ = ["match_workloads", "select_records", "workload_matches"]


def workload_matches(key: str, workload: str | None = None, shape: str | None = None) -> bool:
    """Whether ``key`` is named by ``workload`` and has ``shape`` (None: any).

    ``workload`` names a key when it is the key itself, its operator
    (``matmul``), a prefix of the key (``matmul(M=256``) or a prefix of its
    short form (``matmul 256x256``, see :func:`laytune.ops.short_key`).
    ``shape`` is the short shape (``256x256x256``, ``64x32 perm=1x0``, see
    :func:`laytune.ops.shape_text`) or its extents alone (``64x32``);
    spaces around it do not count.
    """
    if workload is not None:
        workload = workload.strip()
        op = key.split("(", 1)[0]
        if not (
            workload in (key, op) or key.startswith(workload) or short_key(key).startswith(workload)
        ):
            return False
    if shape is not None:
        text = shape_text(key)
        wanted = " ".join(shape.split())
        if wanted not in (text, text.split(" ", 1)[0]):
            return False
    return True


def match_workloads(
    database: Any, workload: str | None = None, shape: str | None = None
) -> list[str]:
    """The workload keys of ``database`` that :func:`workload_matches`, sorted.
    Raises :class:`~laytune.exceptions.NotFoundError` listing the workloads
    it has when none matches."""
    keys = sorted({key for key, _ in database.workloads()})
    found = [key for key in keys if workload_matches(key, workload, shape)]
    if not found:
        asked = " ".join(
            part
            for part in (
                f"workload {workload!r}" if workload else "",
                f"shape {shape!r}" if shape else "",
            )
            if part
        )
        known = "; ".join(short_key(key) for key in keys) or "none"
        raise NotFoundError(f"no workload in {database.safe_url} matches {asked} (it has: {known})")
    return found


def select_records(
    database: Any,
    keys: Iterable[str] | None,
    *,
    best: bool = False,
    device: str | None = None,
    status: str | None = None,
    op: str | None = None,
) -> list[Record]:
    """The records of the workloads ``keys`` (None: every workload) in the
    order they were written; with ``best``, the best verified record of each
    (workload, device) under each boundary it was tuned under instead, in key
    order (:meth:`laytune.records.RecordStore.best_by_boundary`)."""
    if keys is None:
        if best:
            return database.best_by_boundary(device=device, op=op)
        return database.records(device=device, status=status, op=op)
    found: list[Record] = []
    for key in keys:
        if best:
            found += database.best_by_boundary(workload=key, device=device, op=op)
        else:
            found += database.records(workload=key, device=device, status=status, op=op)
    return found if best else sorted(found, key=lambda r: r.id or 0)
