"""Records as a pandas DataFrame, one column per buffer layout and knob.

Two speed-ups answer two questions about a candidate (see
:func:`records_dataframe`): ``speedup``, over the baseline candidate
(identity layouts, baseline knobs), is what the whole candidate bought;
``layout_speedup``, over the identity layouts with the candidate's own knobs
(:func:`identity_twin`), is what its layouts bought.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from laytune.layout import identity
from laytune.ops import shape_text
from laytune.records._record import Record
from laytune.space import ORDER_LOGICAL, Candidate, is_default, knob_default

if TYPE_CHECKING:  # pandas is imported where a frame is made: the search's jobs need none
    import pandas as pd

__all__ = [
    "FRAME_COLUMNS",
    "WORKLOAD_COLUMNS",
    "has_identity_layouts",
    "identity_twin",
    "identity_twins",
    "is_baseline",
    "records_dataframe",
    "reference_records",
    "reference_times",
    "workloads_dataframe",
]

#: Columns every records DataFrame has, in order; then, per buffer B,
#: ``layout.B``, ``family.B``, ``pad.B``, and per knob K ``knob.K``.
FRAME_COLUMNS = (
    "record_id",
    "study",
    "strategy",
    "run",
    "trial",
    "workload_key",
    "op",
    "shape",
    "device_key",
    "device_name",
    "status",
    "time_s",
    "kernel_s",
    "conversions_s",
    "objective",
    "time_min_s",
    "time_iqr_s",
    "repeats",
    "statistic",
    "max_error",
    "abandoned",
    "created_at",
    "datetime_start",
    "datetime_complete",
    "duration",
    "elapsed_s",
    "candidate_key",
    "is_identity",
    "identity_layouts",
    "logical_bytes",
    "physical_bytes",
    "padding_overhead",
    "speedup",
    "layout_speedup",
    "source_hash",
)


def _candidate(record_or_candidate: Any) -> Candidate:
    return getattr(record_or_candidate, "candidate", record_or_candidate)


def has_identity_layouts(record_or_candidate: Any) -> bool:
    """Every buffer (local tiles included) in its identity layout."""
    return all(layout.is_identity for _, layout in _candidate(record_or_candidate).layouts)


def is_baseline(record_or_candidate: Any) -> bool:
    """Identity layouts measured with the baseline knobs (what a person would write)."""
    candidate = _candidate(record_or_candidate)
    if not has_identity_layouts(candidate):
        return False
    return all(is_default(name, value) for name, value in candidate.knobs)


def _identity_knobs(candidate: Candidate) -> dict[str, Any]:
    """The candidate's knobs as they read on identity layouts: following a
    buffer's physical order is the logical order, and with no padding the
    pad mode is the guard."""
    knobs = candidate.knob_map
    if "order" in knobs:
        knobs["order"] = ORDER_LOGICAL
    if "pad_mode" in knobs:
        knobs["pad_mode"] = knob_default("pad_mode")
    return knobs


def identity_twin(candidate: Candidate) -> Candidate:
    """The same knobs on identity layouts (every buffer, local tiles included):
    the candidate that :data:`layout_speedup <records_dataframe>` compares
    with. Knobs that only mean something beside a non-identity layout read
    as on identity layouts (``order`` logical, ``pad_mode`` guard)."""
    layouts = {name: identity(layout.shape) for name, layout in candidate.layouts}
    return Candidate.make(layouts, _identity_knobs(candidate))


def identity_twins(candidate: Candidate) -> list[Candidate]:
    """:func:`identity_twin`, then (for a candidate that transposes vectors in
    registers) the same without the transpose: identity layouts may serve the
    vector directly, and a space then refuses a transpose. The first that a
    space holds is the layout reference; the records match either."""
    twins = [identity_twin(candidate)]
    knobs = twins[0].knob_map
    if knobs.get("vector_transpose"):
        knobs["vector_transpose"] = ""
        twins.append(Candidate.make(dict(twins[0].layouts), knobs))
    return twins


def _knob_signature(candidate: Candidate) -> str:
    # vector_transpose follows from the layouts: whether identity layouts need it
    knobs = _identity_knobs(candidate)
    knobs.pop("vector_transpose", None)
    return json.dumps(
        {k: list(v) if isinstance(v, tuple) else v for k, v in knobs.items()}, sort_keys=True
    )


def _bytes(record: Record) -> tuple[int, int]:
    itemsize = 4
    if record.program:
        sizes = {b["name"]: np.dtype(b["dtype"]).itemsize for b in record.program["buffers"]}
    else:
        sizes = {}
    logical = physical = 0
    for name, layout in record.candidate.layouts:
        if name.endswith(".local"):
            continue
        size = sizes.get(name, itemsize)
        logical += int(np.prod(layout.shape)) * size
        physical += layout.physical_size * size
    return logical, physical


def _repeats(record: Record) -> tuple[float, ...]:
    clock = record.result.get("clock", "event") if record.result else "event"
    return record.wall_times_s if clock == "wall" else record.event_times_s


def _timestamp(seconds: float | None) -> pd.Timestamp:
    import pandas as pd

    return pd.NaT if seconds is None else pd.Timestamp(seconds, unit="s", tz="UTC")


def _number(value: Any) -> Any:
    return np.nan if value is None else value


def _row(record: Record) -> dict[str, Any]:
    logical, physical = _bytes(record)
    repeats = np.asarray(_repeats(record), dtype=float)
    if record.ok and len(repeats):
        low, q1, q3 = repeats.min(), *np.percentile(repeats, [25, 75])
        time_min, time_iqr = float(low), float(q3 - q1)
    else:
        time_min = time_iqr = np.nan
    start, complete = _timestamp(record.started_at), _timestamp(record.created_at)
    row: dict[str, Any] = {
        "record_id": _number(record.id),
        "study": record.study,
        "strategy": record.strategy,
        "run": record.run,
        "trial": _number(record.trial),
        "workload_key": record.workload_key,
        "op": record.op,
        "shape": shape_text(record.workload_key),
        "device_key": record.device_key,
        "device_name": record.device_name,
        "status": record.status,
        "time_s": _number(record.value_s),
        "kernel_s": _number(record.compute_s),
        "conversions_s": _number(record.conversions_s),
        "objective": _objective_text(record),
        "time_min_s": time_min,
        "time_iqr_s": time_iqr,
        "repeats": len(repeats),
        "statistic": record.statistic,
        "max_error": _number(record.max_error),
        "abandoned": record.abandoned,
        "created_at": complete,
        "datetime_start": start,
        "datetime_complete": complete,
        "candidate_key": record.candidate.key,
        "is_identity": is_baseline(record),
        "identity_layouts": has_identity_layouts(record),
        "logical_bytes": logical,
        "physical_bytes": physical,
        "padding_overhead": physical / logical - 1.0 if logical else 0.0,
        "source_hash": record.source_hash,
        "_knobs": _knob_signature(record.candidate),
    }
    for name, layout in record.candidate.layouts:
        row[f"layout.{name}"] = str(layout.index_map)
        row[f"family.{name}"] = layout.family
        pad = record.candidate.pad_value(name)
        row[f"pad.{name}"] = np.nan if pad is None else str(pad)
    for name, value in record.candidate.knobs:
        row[f"knob.{name}"] = _number(value)
    return row


def _objective_text(record: Record) -> str:
    """What ``time_s`` is: the boundary it priced, or ``"kernel"`` for a
    record of no boundary (written before boundaries, or not verified)."""
    boundary = record.price.get("boundary") if record.price else None
    if boundary is None:
        return "kernel"
    from laytune.records._boundary import Boundary

    text = Boundary.from_json(boundary).describe()
    return text if "unpriced" not in record.price else f"{text} (unpriced)"


def _reference_row(record: Record) -> dict[str, Any]:
    """The columns of a record that speed-ups are computed from."""
    return {
        "workload_key": record.workload_key,
        "device_key": record.device_key,
        "status": record.status,
        "time_s": _number(record.value_s),
        "is_identity": is_baseline(record),
        "identity_layouts": has_identity_layouts(record),
        "_knobs": _knob_signature(record.candidate),
    }


def _elapsed(frame: pd.DataFrame) -> pd.Series:
    """Seconds of tuning per study: within a run from the run's first start,
    runs laid end to end in the order they began (the idle time between the
    runs of a resumed study left out)."""
    import pandas as pd

    begun = frame["datetime_start"].fillna(frame["created_at"])
    begun = begun.where(begun <= frame["created_at"], frame["created_at"])
    elapsed = pd.Series(np.nan, index=frame.index)
    for _, rows in frame.groupby("study", sort=False):
        runs = begun[rows.index].groupby(rows["run"]).min().sort_values()
        offset = 0.0
        for run, first in runs.items():
            members = rows.index[rows["run"] == run]
            since = (frame.loc[members, "created_at"] - first).dt.total_seconds()
            elapsed[members] = offset + since
            offset += float(since.max())
    return elapsed


def records_dataframe(records: Sequence[Record], references: Iterable[Record] = ()) -> pd.DataFrame:
    """The DataFrame of ``records`` (columns: :data:`FRAME_COLUMNS`, then
    ``layout.*``, ``family.*``, ``pad.*``, ``knob.*``), one row per record
    in the given order.

    - ``shape``: the workload's shape in short form
      (:func:`laytune.ops.shape_text`); ``op`` and ``shape`` name a workload
      the way a person does.
    - ``time_s`` is the end-to-end time the record was ranked by: the
      compute kernels (``kernel_s``, the ranking statistic of the timed
      repeats) plus the conversions its boundary charged
      (``conversions_s``); ``objective`` names that boundary (``"X fixed,
      Y fixed"``; ``"kernel"`` for records written before boundaries,
      ranked by the kernel alone). ``time_min_s``, ``time_iqr_s`` (the
      interquartile range) and ``repeats`` (their count) describe the
      kernel's repeats.
    - ``datetime_start`` / ``datetime_complete``: when the candidate's
      measurement began and ended (UTC; for a failed build its compilation);
      ``duration`` the difference. ``created_at`` equals
      ``datetime_complete``. ``elapsed_s``: seconds of tuning in the study
      up to the record, counted within each run (one ``tune`` call) with
      the runs laid end to end, so a study resumed after a pause has no gap.
    - ``is_identity``: the baseline candidate (:func:`is_baseline`);
      ``identity_layouts``: every buffer in its identity layout, any knobs.
    - ``speedup``: the baseline's time over ``time_s`` (what the whole
      candidate bought, knobs included); ``layout_speedup``: the time of
      the identity layouts with this record's knobs (:func:`identity_twin`)
      over ``time_s`` (what its layouts bought). Both per workload and
      device, from the least time of the ok records that qualify among
      ``records`` and ``references``; NaN when either time is missing.

    Missing numbers are NaN (missing times NaT), never None. ``references``
    are records that only serve as speed-up references (see
    :func:`reference_records`), so that a filtered selection still has them.
    """
    import pandas as pd

    rows = [_row(r) for r in records]
    if not rows:
        return pd.DataFrame(columns=[*FRAME_COLUMNS])
    frame = pd.DataFrame(rows)
    for column in ("created_at", "datetime_start", "datetime_complete"):
        frame[column] = pd.to_datetime(frame[column], utc=True).astype("datetime64[ns, UTC]")
    frame["duration"] = frame["datetime_complete"] - frame["datetime_start"]
    frame["elapsed_s"] = _elapsed(frame)
    candidates = pd.DataFrame([_reference_row(r) for r in references] + rows)
    ok = candidates[(candidates["status"] == "ok") & candidates["identity_layouts"]]
    place = ["workload_key", "device_key"]
    baseline = ok[ok["is_identity"]].groupby(place)["time_s"].min().rename("_baseline_s")
    twins = ok.groupby([*place, "_knobs"])["time_s"].min().rename("_twin_s")
    frame = frame.join(baseline, on=place).join(twins, on=[*place, "_knobs"])
    frame["speedup"] = frame["_baseline_s"] / frame["time_s"]
    frame["layout_speedup"] = frame["_twin_s"] / frame["time_s"]
    frame = frame.drop(columns=["_baseline_s", "_twin_s", "_knobs"])
    extra = sorted(c for c in frame.columns if c not in FRAME_COLUMNS)
    return frame[[*FRAME_COLUMNS, *extra]]


def reference_records(database: Any, records: Iterable[Record]) -> list[Record]:
    """The verified identity-layout records (any knobs) of the workloads and
    devices of ``records`` in ``database``: what their speed-ups are
    measured against."""
    places = sorted({(r.workload_key, r.device_key) for r in records})
    return [
        reference
        for workload_key, device_key in places
        for reference in database.records(workload=workload_key, device=device_key, status="ok")
        if has_identity_layouts(reference)
    ]


def reference_times(
    references: Iterable[Record], candidate: Candidate
) -> tuple[Record | None, Record | None]:
    """Among ``references`` (records of one workload and device), the fastest
    verified baseline (:func:`is_baseline`) and the fastest verified identity
    layouts with ``candidate``'s knobs (:func:`identity_twin`): the two
    references of its speed-ups; None where there is none."""
    signature = _knob_signature(candidate)
    baseline: Record | None = None
    twin: Record | None = None
    for record in references:
        if not record.ok or not has_identity_layouts(record):
            continue
        if is_baseline(record) and (baseline is None or record.value_s < baseline.value_s):  # type: ignore[operator]
            baseline = record
        if _knob_signature(record.candidate) == signature and (
            twin is None or record.value_s < twin.value_s  # type: ignore[operator]
        ):
            twin = record
    return baseline, twin


#: Columns of :func:`workloads_dataframe`, in order.
WORKLOAD_COLUMNS = (
    "workload_key",
    "op",
    "shape",
    "device_key",
    "device_name",
    "boundary",
    "records",
    "ok",
    "best_record_id",
    "best_time_s",
    "speedup",
    "layout_speedup",
)


def _study_boundaries(records: Iterable[Record]) -> dict[str, str]:
    """study -> the words (:func:`boundary_text`) of the boundary its
    priced records were ranked under."""
    from laytune.records._boundary import Boundary, boundary_text

    found: dict[str, str] = {}
    for record in records:
        stored = record.price.get("boundary") if record.price else None
        if stored is not None and record.study not in found:
            found[record.study] = boundary_text(Boundary.from_json(stored), record.workload_key)
    return found


def workloads_dataframe(database: Any) -> pd.DataFrame:
    """One row per (workload, device, boundary) with records in
    ``database``: the columns :data:`WORKLOAD_COLUMNS`, sorted by workload
    key and device, the default boundary first. ``boundary`` names the
    buffers whose policy differs from the workload's default
    (:func:`laytune.records.boundary_text`: ``"default"``, ``"A free"``);
    a study tuned under another boundary (``tune --free A``) gets a row of
    its own. ``records`` and ``ok`` count the records of the studies of
    that boundary (all and verified); the best verified record is the
    fastest of all the pair's records under that boundary
    (:meth:`~laytune.records.RecordStore.best_by_boundary`), with its two
    speed-ups, NaN where there is none."""
    import pandas as pd

    from laytune.records._boundary import boundary_text

    bests: dict[tuple[str, str], list[Record]] = {}
    for record in database.best_by_boundary():
        bests.setdefault((record.workload_key, record.device_key), []).append(record)
    rows = []
    for workload_key, device_key in database.workloads():
        every = database.records(workload=workload_key, device=device_key)
        by_study = _study_boundaries(every)
        counts: dict[str, list[int]] = {}
        for record in every:
            counts.setdefault(by_study.get(record.study, "default"), [0, 0])
            counts[by_study.get(record.study, "default")][0] += 1
            counts[by_study.get(record.study, "default")][1] += record.ok
        tops = bests.get((workload_key, device_key), [])
        texts = [boundary_text(top.objective.boundary, workload_key) for top in tops]
        some = every[:1]
        shown = list(dict.fromkeys([*texts, *counts]))
        for text in shown:
            top = tops[texts.index(text)] if text in texts else None
            speedup = layout_speedup = np.nan
            if top is not None:
                references = [r for r in every if r.ok]
                baseline, twin = reference_times(references, top.candidate)
                if baseline is not None:
                    speedup = baseline.value_s / top.value_s  # type: ignore[operator]
                if twin is not None:
                    layout_speedup = twin.value_s / top.value_s  # type: ignore[operator]
            all_records, ok = counts.get(text, [0, 0])
            rows.append(
                {
                    "workload_key": workload_key,
                    "op": workload_key.split("(", 1)[0],
                    "shape": shape_text(workload_key),
                    "device_key": device_key,
                    "device_name": (top or some[0]).device_name if (top or some) else "",
                    "boundary": text,
                    "records": all_records,
                    "ok": ok,
                    "best_record_id": np.nan if top is None else top.id,
                    "best_time_s": np.nan if top is None else top.value_s,
                    "speedup": speedup,
                    "layout_speedup": layout_speedup,
                }
            )
    return pd.DataFrame(rows, columns=list(WORKLOAD_COLUMNS))
