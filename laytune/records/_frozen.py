"""Frozen layouts: the best verified record per (workload, device), replayable.

A frozen file is small, versioned, indented JSON that a person can read:
per entry the workload and device, the best time and its speed-ups (over
the baseline candidate, and over identity layouts with the same knobs), each
buffer's layout in canonical text, the candidate, and the generated program
(source, buffers, launches). Loading it needs
neither optuna nor a database: :func:`load_frozen` reads JSON, and
:meth:`FrozenLayouts.kernel` builds the recorded source with pyopencl.
:func:`laytune.records.export` writes the kernels for builds outside Python.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from laytune import __version__
from laytune._files import write_atomically
from laytune.codegen import KernelProgram
from laytune.device_info import DeviceInfo
from laytune.exceptions import FrozenFileError, FrozenFileNotFoundError, LaytuneError, excerpt
from laytune.layout import check_nesting
from laytune.runners import ProgramExecutor, as_context
from laytune.space import CONVERSION_OP, Candidate

__all__ = [
    "FROZEN_VERSION",
    "FrozenEntry",
    "FrozenLayouts",
    "candidate_record",
    "freeze",
    "load_frozen",
]

FROZEN_VERSION = 1
_FORMAT = "laytune-frozen"

#: The largest frozen file read (bytes); one entry is a few kilobytes.
MAX_FROZEN_BYTES = 64 << 20


@dataclass(frozen=True)
class FrozenEntry:
    """The frozen layouts of one workload on one device.

    ``time_s`` is the end-to-end time of one call under the workload's
    default boundary, or the one :func:`freeze` was given for it (the
    compute kernels plus the conversions it charges),
    ``kernel_s`` the compute kernels alone, ``boundary`` that boundary in
    words. ``speedup`` is the baseline candidate's time (identity layouts,
    baseline knobs) over ``time_s``, what the whole candidate bought;
    ``layout_speedup`` the time of identity layouts with the same knobs over
    ``time_s``, what the layouts bought. Either is None when its reference
    was not measured. ``conversions`` says what runs each pack and unpack
    launch of ``program``: ``(buffer, "pack" | "unpack", "conversion record
    N")`` for the device's best recorded conversion kernel, ``"generated"``
    for the kernel generated without knobs.
    """

    workload_key: str
    device_key: str
    device_name: str
    candidate: Candidate
    program: KernelProgram
    time_s: float
    speedup: float | None
    record_id: int | None
    layout_speedup: float | None = None
    kernel_s: float | None = None
    boundary: str = ""
    conversions: tuple[tuple[str, str, str], ...] = ()

    @property
    def layouts(self) -> dict[str, str]:
        """Buffer -> canonical index-map text."""
        return {name: str(layout.index_map) for name, layout in self.candidate.layouts}

    @property
    def source(self) -> str:
        return self.program.source

    def to_json(self) -> dict[str, Any]:
        return {
            "workload_key": self.workload_key,
            "device_key": self.device_key,
            "device_name": self.device_name,
            "time_s": self.time_s,
            "kernel_time_s": self.kernel_s,
            "boundary": self.boundary,
            "conversions": [
                {"buffer": b, "direction": d, "kernel": k} for b, d, k in self.conversions
            ],
            "speedup_over_baseline": self.speedup,
            "speedup_over_identity_layouts": self.layout_speedup,
            "record_id": self.record_id,
            "layouts": self.layouts,
            "knobs": dict(self.candidate.knobs),
            "candidate": self.candidate.to_json(),
            "program": self.program.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> FrozenEntry:
        try:
            candidate = Candidate.from_json(data["candidate"])
            program = KernelProgram.from_json(data["program"])
            # "speedup_over_identity": the name files of laytune 0.1.0 give it
            speedup = data.get("speedup_over_baseline", data.get("speedup_over_identity"))
            layout_speedup = data.get("speedup_over_identity_layouts")
            record_id = data.get("record_id")
            kernel_s = data.get("kernel_time_s")
            return cls(
                workload_key=str(data["workload_key"]),
                device_key=str(data["device_key"]),
                device_name=str(data.get("device_name", "")),
                candidate=candidate,
                program=program,
                time_s=float(data["time_s"]),
                speedup=None if speedup is None else float(speedup),
                record_id=None if record_id is None else int(record_id),
                layout_speedup=None if layout_speedup is None else float(layout_speedup),
                kernel_s=None if kernel_s is None else float(kernel_s),
                boundary=str(data.get("boundary", "")),
                conversions=tuple(
                    (str(c["buffer"]), str(c["direction"]), str(c["kernel"]))
                    for c in data.get("conversions", ())
                ),
            )
        except (KeyError, TypeError, ValueError, LaytuneError) as err:
            # one line: a layout's syntax error goes on with the text and a caret
            reason = excerpt(str(err).splitlines()[0] if str(err) else repr(err), 300)
            raise FrozenFileError(f"{where}: malformed entry ({reason})") from None


def _device_key(target: Any) -> str:
    """The device key of a key string, Device, DeviceInfo, cl.Device or cl.Context."""
    if isinstance(target, str):
        return target
    if isinstance(target, DeviceInfo):
        return target.key
    if hasattr(target, "info") and isinstance(target.info, DeviceInfo):
        return target.info.key
    import pyopencl as cl

    if isinstance(target, cl.Context):
        target = target.devices[0]
    if isinstance(target, cl.Device):
        return DeviceInfo.key_of(target)
    raise FrozenFileError(f"expected a device, device key or OpenCL context, got {target!r}")


class FrozenLayouts:
    """The entries of a frozen file, looked up by workload and device."""

    def __init__(self, entries: Iterable[FrozenEntry], path: str = "<memory>") -> None:
        self.path = path
        self.entries = tuple(entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.entries)

    def entry(self, workload: Any, device: Any) -> FrozenEntry:
        """The entry of ``workload`` (a Workload or its key) on ``device`` (a
        Device, DeviceInfo, ``cl.Device``, ``cl.Context`` or device key)."""
        key = workload if isinstance(workload, str) else workload.key
        device_key = _device_key(device)
        for entry in self.entries:
            if entry.workload_key == key and entry.device_key == device_key:
                return entry
        same_workload = [e for e in self.entries if e.workload_key == key]
        if same_workload:
            devices = ", ".join(f"{e.device_name} ({e.device_key})" for e in same_workload)
            raise FrozenFileError(
                f"{self.path} freezes {key} for another device: {devices}; "
                f"not for device {device_key} (tune on this device, then freeze again)"
            )
        known = ", ".join(sorted({e.workload_key for e in self.entries})) or "none"
        raise FrozenFileError(f"{self.path} has no layouts for {key} (it has: {known})")

    def best_candidate(self, workload_key: str, device_key: str) -> Candidate | None:
        """The frozen candidate of ``workload_key`` on ``device_key``, or None
        where the file freezes nothing for that workload: a frozen file is a
        layout source (:class:`laytune.plan.LayoutSource`), so a model plans
        from it as from the records it was frozen from. A workload frozen
        for another device only raises :class:`FrozenFileError`: planning
        it in logical layouts instead would hide that the file does not fit."""
        if not any(entry.workload_key == workload_key for entry in self.entries):
            return None
        return self.entry(workload_key, device_key).candidate

    def kernel(self, workload: Any, target: Any, *, queue: Any = None) -> ProgramExecutor:
        """A ready kernel for ``workload`` on ``target`` (a ``cl.Context``,
        ``cl.Device`` or laytune Device). Call it on logical numpy arrays (it
        packs and unpacks), or bind device buffers already in the physical
        layout with ``set_physical`` and call ``compute()``."""
        context = as_context(target)
        entry = self.entry(workload, context)
        return ProgramExecutor(context, entry.program, queue=queue)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "version": FROZEN_VERSION,
            "laytune_version": __version__,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "entries": [entry.to_json() for entry in self.entries],
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the frozen file at ``path`` whole, or raise
        :class:`FrozenFileError` naming why (a folder that does not exist, a
        full disk) and leave ``path`` as it was, with nothing beside it."""
        text = json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n"
        return write_atomically(
            path, lambda stream: stream.write(text.encode("utf-8")), error=FrozenFileError
        )


def load_frozen(path: str | os.PathLike[str]) -> FrozenLayouts:
    """Read a frozen file. A truncated file, one from a newer laytune, one that
    is not a frozen file, or one past the bounds (:data:`MAX_FROZEN_BYTES`,
    JSON nested more than 64 levels) raises :class:`FrozenFileError` saying which."""
    where = os.fspath(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_FROZEN_BYTES:
            raise FrozenFileError(
                f"{where} is {size} bytes, more than the {MAX_FROZEN_BYTES} of the largest "
                "frozen file laytune reads; it is not a frozen file"
            )
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FrozenFileNotFoundError(f"no frozen file at {where}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise FrozenFileError(f"cannot read {where}: {err}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise FrozenFileError(
            f"{where} is truncated or not JSON ({err.msg} at line {err.lineno}); "
            "freeze again from the records database"
        ) from None
    except (RecursionError, MemoryError):
        raise FrozenFileError(f"{where} nests JSON too deeply; it is not a frozen file") from None
    check_nesting(data, where, error=FrozenFileError)
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise FrozenFileError(f"{where} is not a laytune frozen-layouts file")
    version = data.get("version")
    if not isinstance(version, int) or version > FROZEN_VERSION:
        raise FrozenFileError(
            f"{where} is frozen-layouts format {version!r}, written by laytune "
            f"{data.get('laytune_version', '?')}; this laytune {__version__} reads format "
            f"{FROZEN_VERSION} (upgrade laytune)"
        )
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise FrozenFileError(f"{where}: 'entries' must be a list")
    return FrozenLayouts(
        (FrozenEntry.from_json(e, f"{where} entry {i}") for i, e in enumerate(entries)), where
    )


def _callers(boundaries: Mapping[Any, Any]) -> dict[str, Any]:
    """Workload key -> the :class:`~laytune.records.Boundary` its caller has."""
    from laytune.ops import from_key
    from laytune.records._boundary import Boundary

    callers = {}
    for workload, spec in boundaries.items():
        if isinstance(workload, str):
            workload = from_key(workload)
        callers[workload.key] = Boundary.of(workload, spec)
    return callers


def _priced(record: Any, boundary: Any, conversions: Any) -> Any:
    """``record`` priced under ``boundary`` (None when it cannot be)."""
    from laytune.records._price import price_record

    price = price_record(record, boundary, conversions)
    return None if price is None else record.priced(price)


def candidate_record(db: Any, workload_key: str, device_key: str, candidate: Candidate) -> Any:
    """The verified record of ``candidate`` for ``workload_key`` on
    ``device_key``, or None. A plan may ask for another value in the padding
    than the record's (its readers need it): a record of the same layouts and
    knobs is the same kernel, which the plan refines again."""
    record = db.lookup(workload_key, device_key, candidate.key)
    if record is not None and record.ok and record.value_s is not None:
        return record
    return next(
        (
            r
            for r in db.records(workload=workload_key, device=device_key, status="ok")
            if r.value_s is not None
            and r.candidate.layout_map == candidate.layout_map
            and r.candidate.knob_map == candidate.knob_map
        ),
        None,
    )


def _chosen(db: Any, candidates: Mapping[str, Candidate] | None, device_key: str | None) -> list:
    """The verified records of ``candidates`` (workload key -> candidate) on ``device_key``."""
    if candidates is None:
        return []
    if device_key is None:
        raise FrozenFileError("freezing chosen candidates needs the device they were chosen for")
    records = []
    for key, candidate in candidates.items():
        record = candidate_record(db, key, device_key, candidate)
        if record is None:
            raise FrozenFileError(
                f"{db.safe_url} has no verified record of the candidate chosen for {key} "
                f"on device {device_key} ({candidate.describe()})"
            )
        records.append(record)
    if not records:
        raise FrozenFileError("no candidates to freeze")
    return records


def freeze(
    database: Any,
    path: str | os.PathLike[str] = "laytune-frozen.json",
    *,
    workloads: Iterable[Any] | None = None,
    device: Any = None,
    boundaries: Mapping[Any, Any] | None = None,
    candidates: Mapping[str, Candidate] | None = None,
) -> Path:
    """Write the best verified record per (workload, device) of ``database`` (a
    Database or URL) to ``path``; optionally only some workloads (Workloads or
    keys) or one device. Raises FrozenFileError when nothing matches.

    "Best" is the least end-to-end time under each workload's default
    boundary (:meth:`laytune.records.Database.best`), or under the boundary
    its caller has where ``boundaries`` maps the workload (or its key) to
    one (a :class:`~laytune.records.Boundary` or a mapping, as
    ``TuneOptions.boundary`` takes it: ``{"A": "lambda i, j: [j, i]"}`` for a
    caller that holds ``A`` transposed); the entry's speed-ups are then
    priced under that boundary too. Each frozen program packs and unpacks
    with the device's best recorded conversion kernels where there are some
    (:attr:`FrozenEntry.conversions`).

    ``candidates`` (workload key -> candidate, with ``device``) freezes those
    candidates' records instead of each workload's best, and only those: what a
    model's plan chose (:func:`laytune.plan.freeze_model`). A candidate with
    no verified record on the device raises FrozenFileError naming it."""
    from laytune.records._database import open_database
    from laytune.records._frame import reference_times
    from laytune.records._price import RecordedConversions, own_times
    from laytune.records._tuned import with_tuned_conversions

    db = open_database(database)
    wanted = None if workloads is None else {w if isinstance(w, str) else w.key for w in workloads}
    device_key = None if device is None else _device_key(device)
    callers = _callers(boundaries or {})
    entries = []
    for best in _chosen(db, candidates, device_key) or db.best_records(device=device_key):
        if wanted is not None and best.workload_key not in wanted:
            continue
        if wanted is None and best.op == CONVERSION_OP:
            continue  # frozen into the entries that pack and unpack with it
        references = db.records(workload=best.workload_key, device=best.device_key, status="ok")
        caller = callers.get(best.workload_key)
        if caller is not None:
            recorded = RecordedConversions(db, best.device_key)
            if candidates is None:
                best = db.best(best.workload_key, best.device_key, boundary=caller) or best
            references = [_priced(r, caller, recorded) for r in references]
            references = [r for r in references if r is not None]
        baseline, twin = reference_times(references, best.candidate)
        assert best.value_s is not None
        program, conversions = with_tuned_conversions(
            best.kernel_program(),
            best.candidate,
            RecordedConversions(db, best.device_key),
            own_times(best),
        )
        price = best.objective
        entries.append(
            FrozenEntry(
                workload_key=best.workload_key,
                device_key=best.device_key,
                device_name=best.device_name,
                candidate=best.candidate,
                program=program,
                time_s=best.value_s,
                speedup=None if baseline is None else baseline.value_s / best.value_s,  # type: ignore[operator]
                record_id=best.id,
                layout_speedup=None if twin is None else twin.value_s / best.value_s,  # type: ignore[operator]
                kernel_s=best.compute_s,
                boundary="" if price is None else price.boundary.describe(),
                conversions=conversions,
            )
        )
    if not entries:
        raise FrozenFileError(
            f"{db.safe_url} has no verified record"
            + (f" for {sorted(wanted)}" if wanted else "")
            + (f" on device {device_key}" if device_key else "")
        )
    return FrozenLayouts(entries, os.fspath(path)).save(path)
