"""Records as a pandas DataFrame, one column per buffer layout and knob."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from laytune.records._record import Record
from laytune.space import BASELINE_KNOBS

__all__ = ["FRAME_COLUMNS", "is_baseline", "records_dataframe"]

#: Columns every records DataFrame has, in order; then, per buffer B,
#: ``layout.B``, ``family.B``, ``pad.B``, and per knob K ``knob.K``.
FRAME_COLUMNS = (
    "record_id",
    "study",
    "strategy",
    "trial",
    "workload_key",
    "op",
    "device_key",
    "device_name",
    "status",
    "time_s",
    "statistic",
    "max_error",
    "abandoned",
    "created_at",
    "elapsed_s",
    "candidate_key",
    "is_identity",
    "logical_bytes",
    "physical_bytes",
    "padding_overhead",
    "speedup",
    "source_hash",
)


def is_baseline(record_or_candidate: Any) -> bool:
    """Identity layouts measured with the baseline knobs (what a person would write)."""
    candidate = getattr(record_or_candidate, "candidate", record_or_candidate)
    if not all(layout.is_identity for _, layout in candidate.layouts):
        return False
    knobs = candidate.knob_map
    return all(knobs.get(name, value) == value for name, value in BASELINE_KNOBS.items())


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


def _row(record: Record) -> dict[str, Any]:
    logical, physical = _bytes(record)
    row: dict[str, Any] = {
        "record_id": record.id,
        "study": record.study,
        "strategy": record.strategy,
        "trial": record.trial,
        "workload_key": record.workload_key,
        "op": record.op,
        "device_key": record.device_key,
        "device_name": record.device_name,
        "status": record.status,
        "time_s": np.nan if record.value_s is None else record.value_s,
        "statistic": record.statistic,
        "max_error": np.nan if record.max_error is None else record.max_error,
        "abandoned": record.abandoned,
        "created_at": pd.Timestamp(record.created_at, unit="s", tz="UTC"),
        "candidate_key": record.candidate.key,
        "is_identity": is_baseline(record),
        "logical_bytes": logical,
        "physical_bytes": physical,
        "padding_overhead": physical / logical - 1.0 if logical else 0.0,
        "source_hash": record.source_hash,
    }
    for name, layout in record.candidate.layouts:
        row[f"layout.{name}"] = str(layout.index_map)
        row[f"family.{name}"] = layout.family
        pad = record.candidate.pad_value(name)
        row[f"pad.{name}"] = None if pad is None else str(pad)
    for name, value in record.candidate.knobs:
        row[f"knob.{name}"] = value
    return row


def records_dataframe(records: Sequence[Record]) -> pd.DataFrame:
    """The DataFrame of ``records`` (columns: :data:`FRAME_COLUMNS`, then
    ``layout.*``, ``family.*``, ``pad.*``, ``knob.*``).

    ``elapsed_s`` counts from the first record of the same study;
    ``speedup`` is the baseline's time (:func:`is_baseline`) of the same
    workload and device over ``time_s`` (NaN when either is missing).
    """
    frame = pd.DataFrame([_row(r) for r in records])
    if frame.empty:
        return pd.DataFrame(columns=[*FRAME_COLUMNS])
    first = frame.groupby("study")["created_at"].transform("min")
    frame["elapsed_s"] = (frame["created_at"] - first).dt.total_seconds()
    baseline = (
        frame[frame["is_identity"] & (frame["status"] == "ok")]
        .groupby(["workload_key", "device_key"])["time_s"]
        .min()
        .rename("baseline_s")
    )
    frame = frame.join(baseline, on=["workload_key", "device_key"])
    frame["speedup"] = frame["baseline_s"] / frame["time_s"]
    frame = frame.drop(columns="baseline_s")
    extra = sorted(c for c in frame.columns if c not in FRAME_COLUMNS)
    ordered = [*FRAME_COLUMNS, *extra]
    return frame[ordered]
