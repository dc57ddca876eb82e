"""The seam of the records stage: where records live.

:class:`RecordStore` is what the tuning loop, freezing, planning and the
command line need from a records database. :class:`laytune.records.Database`
(SQLAlchemy: a SQLite file, in-memory SQLite, PostgreSQL) implements it;
another store implements the primitives and inherits the rest.
"""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import IO, Any, Self

from laytune.records._record import Record

__all__ = ["RecordStore", "key_of"]


def key_of(obj: Any) -> str:
    """The key of a workload or device given as itself or as its key."""
    return obj if isinstance(obj, str) else str(obj.key)


class RecordStore(abc.ABC):
    """Where records live, addressed by (workload key, device key, candidate key).

    Contract every implementation keeps (the contract tests in
    ``tests/records/test_store.py`` run over each):

    - A record is written whole or not at all. :meth:`add` returns it with its
      id (ids grow in write order); a candidate already recorded for the same
      workload and device is never recorded twice: ``add`` returns the stored
      record and writes nothing.
    - Claims: :meth:`claim` reserves a candidate for one owner (``host:pid``,
      default this process) until its record is added or :meth:`release` is
      called. It is False when the candidate is recorded or a live owner
      holds it; a dead owner's claim (or one past its lease) is taken over.
      Several processes (and hosts, where the store is shared) may claim and
      add at once; each candidate is measured once.
    - Reads return :class:`Record` objects in write order; filters take a
      workload or device as itself or by key. A stored record that cannot be
      read back is left out of :meth:`records` with a
      :class:`~laytune.exceptions.RecordWarning` naming its id; :meth:`get`
      of it raises :class:`~laytune.exceptions.RecordError` naming its id.
    - :attr:`safe_url` says where the records are without any password; no
      error message shows more.
    - Thread safety: one store may be used from several threads.
    - The optuna study of a tuning job lives beside the records
      (:meth:`optuna_storage`), so a job and its study resume together.

    The primitives are abstract; the queries after them are built on
    :meth:`records` and a backend may answer them more directly.
    """

    #: Where the records are, without password (set by every implementation).
    safe_url: str

    # -- primitives ---------------------------------------------------------------
    @abc.abstractmethod
    def add(self, record: Record) -> Record:
        """Store ``record`` whole and drop its claim; returns it with its id, or
        the record stored before for the same candidate (then nothing is written)."""

    @abc.abstractmethod
    def claim(
        self, workload_key: str, device_key: str, candidate_key: str, owner: str | None = None
    ) -> bool:
        """Reserve a candidate for measuring (see the class contract)."""

    @abc.abstractmethod
    def release(
        self, workload_key: str, device_key: str, candidate_key: str, owner: str | None = None
    ) -> None:
        """Drop ``owner``'s claim of a candidate that will not be measured."""

    @abc.abstractmethod
    def records(
        self,
        *,
        workload: Any = None,
        device: Any = None,
        status: str | Iterable[str] | None = None,
        study: str | None = None,
        op: str | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Records in write order, filtered by workload, device, status (one or
        several), study and operator name; the first ``limit`` of them."""

    @abc.abstractmethod
    def get(self, record_id: int) -> Record:
        """The record with id ``record_id``; :class:`RecordError` if there is none."""

    @abc.abstractmethod
    def optuna_storage(self) -> Any:
        """An optuna storage that keeps studies beside these records (one per store)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the store is not used afterwards."""

    # -- queries built on the primitives ----------------------------------------------
    def lookup(self, workload_key: str, device_key: str, candidate_key: str) -> Record | None:
        """The record of one candidate, if measured."""
        found = self.records(workload=workload_key, device=device_key)
        return next((r for r in found if r.candidate.key == candidate_key), None)

    def measured(self, workload: Any, device: Any) -> dict[str, float | None]:
        """candidate key -> time (None for failures) of every recorded candidate."""
        return {r.candidate.key: r.value_s for r in self.records(workload=workload, device=device)}

    def best(self, workload: Any, device: Any, *, boundary: Any = None) -> Record | None:
        """The verified record of a workload on a device of least price under
        ``boundary`` (a :class:`laytune.records.Boundary`; default: the
        workload's, inputs and outputs fixed to their logical layouts and
        weights constant), priced with the device's recorded conversions:
        its ``value_s`` is the end-to-end time under that boundary (the first
        written among equal prices; see :func:`laytune.records.best_priced`).
        None if no verified record can be priced."""
        from laytune.records._boundary import default_boundary
        from laytune.records._price import RecordedConversions, best_priced

        records = self.records(workload=workload, device=device, status="ok")
        if boundary is None and not isinstance(workload, str):
            boundary = default_boundary(workload)
        return best_priced(records, boundary, RecordedConversions(self, key_of(device)))

    def best_candidate(self, workload_key: str, device_key: str) -> Any:
        """The best record's candidate (what graph planning freezes), or None."""
        best = self.best(workload_key, device_key)
        return None if best is None else best.candidate

    def best_records(
        self, *, workload: Any = None, device: Any = None, op: str | None = None
    ) -> list[Record]:
        """The best verified record of every (workload, device) pair that
        matches, each priced under its workload's default boundary
        (:meth:`best`), ordered by workload key, then device key."""
        from laytune.records._price import RecordedConversions, best_priced

        groups: dict[tuple[str, str], list[Record]] = {}
        for record in self.records(workload=workload, device=device, op=op, status="ok"):
            groups.setdefault((record.workload_key, record.device_key), []).append(record)
        conversions: dict[str, RecordedConversions] = {}
        found = []
        for (_, device_key), records in sorted(groups.items()):
            times = conversions.setdefault(device_key, RecordedConversions(self, device_key))
            best = best_priced(records, None, times)
            if best is not None:
                found.append(best)
        return found

    def best_by_boundary(
        self, *, workload: Any = None, device: Any = None, op: str | None = None
    ) -> list[Record]:
        """The best verified record of every (workload, device) pair that
        matches under each boundary its records were tuned under (a
        ``--free X`` study has its own objective): the workload's default
        boundary first, then the others in the order of their words, each
        priced under its boundary (:func:`laytune.records.best_priced` over
        all the pair's records: a record of one study may be the best of
        another). Ordered by workload key, then device key."""
        from laytune.records._boundary import Boundary, default_boundary
        from laytune.records._price import RecordedConversions, best_priced

        groups: dict[tuple[str, str], list[Record]] = {}
        for record in self.records(workload=workload, device=device, op=op, status="ok"):
            groups.setdefault((record.workload_key, record.device_key), []).append(record)
        conversions: dict[str, RecordedConversions] = {}
        found = []
        for (workload_key, device_key), records in sorted(groups.items()):
            times = conversions.setdefault(device_key, RecordedConversions(self, device_key))
            default = default_boundary(workload_key)
            tuned: dict[str, Boundary] = {}
            for record in records:
                stored = record.price.get("boundary") if record.price else None
                if stored is not None:
                    boundary = Boundary.from_json(stored)
                    if boundary != default:
                        tuned.setdefault(boundary.describe(), boundary)
            for boundary in [default, *(tuned[k] for k in sorted(tuned))]:
                best = best_priced(records, boundary, times)
                if best is not None:
                    found.append(best)
        return found

    def workloads(self) -> list[tuple[str, str]]:
        """Every (workload key, device key) pair with records, sorted."""
        return sorted({(r.workload_key, r.device_key) for r in self.records()})

    def __len__(self) -> int:
        return len(self.records())

    def to_dataframe(self, **filters: Any) -> Any:
        """One row per record (filters as :meth:`records`); see
        :func:`laytune.records.records_dataframe` for the columns. Speed-ups
        are against the reference records of the whole store, also when the
        filters leave them out (a study, a status, a limit)."""
        from laytune.records._frame import records_dataframe, reference_records

        records = self.records(**filters)
        narrowed = set(filters) - {"workload", "device", "op"}
        references = reference_records(self, records) if narrowed else ()
        return records_dataframe(records, references)

    def export_jsonl(self, out: str | os.PathLike[str] | IO[str], **filters: Any) -> int:
        """Write records (filters as :meth:`records`) as JSON Lines; returns the count."""
        records = self.records(**filters)
        with _text_out(out) as stream:
            for record in records:
                stream.write(record.dumps() + "\n")
        return len(records)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextlib.contextmanager
def _text_out(out: str | os.PathLike[str] | IO[str]) -> Iterator[IO[str]]:
    if hasattr(out, "write"):
        yield out  # type: ignore[misc]
    else:
        with open(out, "w", encoding="utf-8") as stream:
            yield stream
