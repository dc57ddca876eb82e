"""The record: one measured (or failed) candidate, self-describing JSON.

A record says what was measured (workload key, device key and name, the
candidate's layouts and knobs, the generated program), how (the statistic,
every repeat time, the verification error), with what outcome (``status``),
by which job (study, trial, strategy), and with which laytune. It is written
whole in one transaction and never updated.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from laytune import __version__
from laytune.codegen import KernelProgram
from laytune.exceptions import LaytuneError, RecordError, excerpt
from laytune.layout import load_versioned
from laytune.runners import RunResult
from laytune.space import Candidate

__all__ = ["SCHEMA_VERSION", "STATUSES", "Record"]

SCHEMA_VERSION = 1

#: ``ok`` (verified, timed); ``rejected`` (lowering refused the candidate);
#: the rest are :class:`laytune.runners.ErrorKind` values.
STATUSES = (
    "ok",
    "rejected",
    "build",
    "run",
    "timeout",
    "wrong_result",
    "device_lost",
    "crash",
)


@dataclass(frozen=True)
class Record:
    """One candidate of one workload on one device, measured once.

    ``compute_s`` is the compute kernels' time (``statistic`` over
    ``event_times_s`` or ``wall_times_s`` as ``result["clock"]`` says);
    ``price`` the objective the job that measured it ranked it by
    (:meth:`laytune.records.Price.to_json`: the boundary policy of every
    buffer, the compute time and each charged conversion's time), and
    ``value_s`` that objective's value: the end-to-end time of one call,
    compute plus the conversions the boundary charges (the compute time
    alone when nothing is charged, and for records written before
    boundaries existed, whose ``price`` is empty). Both times are ``None``
    unless ``status`` is ``"ok"``; rank records of other boundaries with
    :func:`laytune.records.price_record`, never by ``value_s`` across
    boundaries. ``abandoned`` is true when the measurement stopped early
    because the candidate was clearly slower than the best so far (its time
    is then from the repeats it had). ``result`` holds the runner's whole
    result (:meth:`laytune.runners.RunResult.to_json`) and ``program``
    the generated program (:meth:`laytune.codegen.KernelProgram.to_json`);
    either is empty when the candidate never got that far. ``run`` names the
    tuning job (one call of ``tune``) that wrote the record, so that a study
    resumed several times can be told apart by run. ``started_at`` is when
    the candidate's measurement began (``time.time()``; its compilation's
    start for a build failure; ``None`` when it never reached the compiler)
    and ``created_at`` when the record was made, for a measured candidate
    the end of its measurement. ``id`` is set by the database.
    """

    workload_key: str
    device_key: str
    candidate: Candidate
    status: str
    value_s: float | None = None
    compute_s: float | None = None
    price: Mapping[str, Any] = field(default_factory=dict, compare=False)
    statistic: str = "median"
    event_times_s: tuple[float, ...] = ()
    wall_times_s: tuple[float, ...] = ()
    max_error: float | None = None
    error_message: str = ""
    abandoned: bool = False
    source_hash: str = ""
    program: Mapping[str, Any] = field(default_factory=dict, compare=False)
    result: Mapping[str, Any] = field(default_factory=dict, compare=False)
    device_name: str = ""
    study: str = ""
    trial: int | None = None
    strategy: str = ""
    run: str = ""
    laytune_version: str = __version__
    started_at: float | None = None
    created_at: float = field(default_factory=time.time)
    schema_version: int = SCHEMA_VERSION
    id: int | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise RecordError(f"record status {self.status!r} is not one of {STATUSES}")
        if (self.status == "ok") != (self.value_s is not None):
            raise RecordError(
                f"record status {self.status!r} with time {self.value_s!r}: "
                "a time is given exactly when the status is 'ok'"
            )
        if self.compute_s is None and self.value_s is not None:
            object.__setattr__(self, "compute_s", self.value_s)  # nothing charged

    # -- building ---------------------------------------------------------------
    @classmethod
    def measured(
        cls,
        result: RunResult,
        candidate: Candidate,
        program: KernelProgram,
        *,
        device_name: str = "",
        study: str = "",
        trial: int | None = None,
        strategy: str = "",
        run: str = "",
        boundary: Any = None,
        conversions: Any = None,
    ) -> Record:
        """The record of a runner's result (any outcome), dated by the result's
        start and end when the runner gave them.

        ``boundary`` (a :class:`laytune.records.Boundary`) prices a verified
        result (:func:`laytune.records.price_record`, with the recorded
        conversion times of ``conversions`` where given): ``value_s`` is then
        the price's total and ``price`` says how it was reached. Without a
        boundary, or when a charged conversion has no time, ``value_s`` is
        the compute time and ``price`` holds only the reason.
        """
        from laytune.records._price import price_record

        finished = getattr(result, "finished_at", None)
        record = cls(
            workload_key=result.workload_key,
            device_key=result.device_key,
            candidate=candidate,
            status="ok" if result.ok else result.error_kind.value,
            value_s=result.value_s if result.ok else None,
            compute_s=result.value_s if result.ok else None,
            statistic=result.statistic,
            event_times_s=tuple(result.event_times_s),
            wall_times_s=tuple(result.wall_times_s),
            max_error=result.max_error,
            error_message=result.error_message,
            abandoned=bool(getattr(result, "abandoned", False)),
            source_hash=result.source_hash,
            program=program.to_json(),
            result=result.to_json(),
            device_name=device_name,
            study=study,
            trial=trial,
            strategy=strategy,
            run=run,
            started_at=getattr(result, "started_at", None),
            created_at=time.time() if finished is None else float(finished),
        )
        if boundary is None or not record.ok:
            return record
        price = price_record(record, boundary, conversions)
        if price is None:
            unpriced = {
                "boundary": boundary.to_json(),
                "unpriced": "a conversion the boundary charges has no measured time",
            }
            return replace(record, price=unpriced)
        return replace(record, value_s=price.total_s, price=price.to_json())

    @classmethod
    def rejected(
        cls,
        workload_key: str,
        device_key: str,
        candidate: Candidate,
        reason: str,
        **job: Any,
    ) -> Record:
        """The record of a candidate that lowering refused (``reason`` says why)."""
        return cls(workload_key, device_key, candidate, "rejected", error_message=reason, **job)

    def with_id(self, record_id: int) -> Record:
        return replace(self, id=record_id)

    def priced(self, price: Any) -> Record:
        """This record as ``price`` (a :class:`laytune.records.Price`, of
        another boundary) ranks it: ``value_s`` its total, ``price`` its JSON.
        What a query returns when asked for another boundary; the stored
        record is unchanged."""
        return replace(self, value_s=price.total_s, price=price.to_json())

    # -- queries ------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def objective(self) -> Any:
        """The :class:`laytune.records.Price` its job ranked it by; None for a
        record not verified, not priced, or written before boundaries."""
        from laytune.records._price import Price

        if not self.ok or "compute_s" not in self.price:
            return None
        return Price.from_json(self.price)

    @property
    def conversions_s(self) -> float | None:
        """Seconds of the conversions its objective charged (``value_s -
        compute_s``); None unless verified."""
        if self.value_s is None or self.compute_s is None:
            return None
        return max(0.0, self.value_s - self.compute_s)

    @property
    def op(self) -> str:
        """The operator name, the workload key up to its parameters."""
        return self.workload_key.split("(", 1)[0]

    @property
    def source(self) -> str:
        return str(self.program.get("source", ""))

    def kernel_program(self) -> KernelProgram:
        """The program this record measured."""
        if not self.program:
            raise RecordError(f"record {self.id} ({self.status}) holds no program")
        try:
            return KernelProgram.from_json(self.program)
        except ValueError as err:
            raise RecordError(f"record {self.id}: {err}") from None

    # -- persistence ---------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "id": self.id,
            "workload_key": self.workload_key,
            "device_key": self.device_key,
            "device_name": self.device_name,
            "candidate": self.candidate.to_json(),
            "candidate_key": self.candidate.key,
            "status": self.status,
            "value_s": self.value_s,
            "compute_s": self.compute_s,
            "price": dict(self.price),
            "statistic": self.statistic,
            "event_times_s": list(self.event_times_s),
            "wall_times_s": list(self.wall_times_s),
            "max_error": self.max_error,
            "error_message": self.error_message,
            "abandoned": self.abandoned,
            "source_hash": self.source_hash,
            "program": dict(self.program),
            "result": dict(self.result),
            "study": self.study,
            "trial": self.trial,
            "strategy": self.strategy,
            "run": self.run,
            "laytune_version": self.laytune_version,
            "started_at": self.started_at,
            "created_at": self.created_at,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> Record:
        """Read a record back; anything malformed raises :class:`RecordError`
        naming the field (never executes anything from the record), and so
        does JSON past the bounds of :mod:`laytune.layout._json` (16 MiB,
        64 levels of nesting)."""
        data = load_versioned(
            data, "record", SCHEMA_VERSION, error=RecordError, version_field="schema_version"
        )
        try:
            candidate = Candidate.from_json(data["candidate"])
            value = data.get("value_s")
            record = cls(
                workload_key=str(data["workload_key"]),
                device_key=str(data["device_key"]),
                candidate=candidate,
                status=str(data["status"]),
                value_s=None if value is None else float(value),
                compute_s=None if data.get("compute_s") is None else float(data["compute_s"]),
                price=dict(data.get("price") or {}),
                statistic=str(data.get("statistic", "median")),
                event_times_s=tuple(float(t) for t in data.get("event_times_s", ())),
                wall_times_s=tuple(float(t) for t in data.get("wall_times_s", ())),
                max_error=None if data.get("max_error") is None else float(data["max_error"]),
                error_message=str(data.get("error_message", "")),
                abandoned=bool(data.get("abandoned", False)),
                source_hash=str(data.get("source_hash", "")),
                program=dict(data.get("program") or {}),
                result=dict(data.get("result") or {}),
                device_name=str(data.get("device_name", "")),
                study=str(data.get("study", "")),
                trial=None if data.get("trial") is None else int(data["trial"]),
                strategy=str(data.get("strategy", "")),
                run=str(data.get("run", "")),
                laytune_version=str(data.get("laytune_version", "")),
                started_at=None if data.get("started_at") is None else float(data["started_at"]),
                created_at=float(data.get("created_at", 0.0)),
                id=None if data.get("id") is None else int(data["id"]),
            )
        except RecordError:
            raise
        except LaytuneError as err:
            # one line: a layout's syntax error goes on with the text and a caret
            reason = excerpt(str(err).splitlines()[0] if str(err) else repr(err), 300)
            raise RecordError(f"record holds a bad candidate: {reason}") from None
        except (KeyError, TypeError, ValueError) as err:
            raise RecordError(f"malformed record ({excerpt(repr(err), 300)})") from None
        key = data.get("candidate_key")
        if key is not None and key != candidate.key:
            raise RecordError(
                f"record's candidate_key {key!r} does not match its candidate ({candidate.key!r}): "
                "the record is corrupt"
            )
        return record
