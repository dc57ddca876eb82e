"""Records: every measurement kept, queried, frozen and replayed.

- :class:`Record`: one measured or failed candidate, self-describing JSON
  with a schema version: the compute time, each conversion's time and the
  objective (:class:`Price` under a :class:`Boundary`) its job ranked it by.
- :func:`price_record`: what a record costs under a boundary policy, with
  the recorded conversion kernels of its device (:class:`RecordedConversions`).
- :class:`RecordStore`: where records live, the seam the tuning loop,
  freezing, planning and the CLI use; :func:`open_database` gives the
  :class:`Database` implementation: a SQLite file by default, or any
  SQLAlchemy URL (PostgreSQL) shared by several tuning hosts; optuna's study
  lives in the same database.
- :func:`freeze` / :func:`load_frozen`: the best verified record per
  (workload, device) into a small file that a production build replays
  without optuna or a database; :func:`export`: its kernels as OpenCL
  source, JSON and C headers with a manifest, for builds outside Python.

The database half (SQLAlchemy) is imported only when used, so replaying a
frozen file imports neither SQLAlchemy nor optuna.
"""

from __future__ import annotations

from typing import Any

from laytune.records._boundary import (
    POLICIES,
    Boundary,
    BufferPolicy,
    boundary_text,
    default_boundary,
)
from laytune.records._export import (
    MANIFEST,
    c_sizes,
    c_stem,
    c_string,
    data_file,
    export,
    export_stem,
    raw_bytes,
)
from laytune.records._frozen import (
    FROZEN_VERSION,
    FrozenEntry,
    FrozenLayouts,
    candidate_record,
    freeze,
    load_frozen,
)
from laytune.records._names import buffer_axis_names, layout_text
from laytune.records._price import (
    Charge,
    ConversionTimes,
    Price,
    RecordedConversions,
    best_priced,
    conversion_seconds,
    measured_cold,
    model_seconds,
    price_record,
)
from laytune.records._record import SCHEMA_VERSION, STATUSES, Record
from laytune.records._store import RecordStore

__all__ = [
    "DEFAULT_URL",
    "FRAME_COLUMNS",
    "FROZEN_VERSION",
    "MANIFEST",
    "POLICIES",
    "SCHEMA_VERSION",
    "STATUSES",
    "WORKLOAD_COLUMNS",
    "Boundary",
    "BufferPolicy",
    "Charge",
    "ConversionTimes",
    "Database",
    "FrozenEntry",
    "FrozenLayouts",
    "Price",
    "Record",
    "RecordStore",
    "RecordedConversions",
    "best_priced",
    "boundary_text",
    "buffer_axis_names",
    "c_sizes",
    "c_stem",
    "c_string",
    "candidate_record",
    "conversion_seconds",
    "data_file",
    "default_boundary",
    "error_reason",
    "export",
    "export_stem",
    "freeze",
    "has_identity_layouts",
    "identity_twin",
    "identity_twins",
    "is_baseline",
    "layout_text",
    "load_frozen",
    "match_workloads",
    "measured_cold",
    "model_seconds",
    "open_database",
    "owner_alive",
    "price_record",
    "process_owner",
    "raw_bytes",
    "records_dataframe",
    "reference_records",
    "reference_times",
    "select_records",
    "workload_matches",
    "workloads_dataframe",
]

_LAZY = {
    "DEFAULT_URL": "laytune.records._database",
    "Database": "laytune.records._database",
    "open_database": "laytune.records._database",
    "error_reason": "laytune.records._database",
    "owner_alive": "laytune.records._database",
    "process_owner": "laytune.records._database",
    "FRAME_COLUMNS": "laytune.records._frame",
    "has_identity_layouts": "laytune.records._frame",
    "identity_twin": "laytune.records._frame",
    "identity_twins": "laytune.records._frame",
    "is_baseline": "laytune.records._frame",
    "records_dataframe": "laytune.records._frame",
    "reference_records": "laytune.records._frame",
    "reference_times": "laytune.records._frame",
    "WORKLOAD_COLUMNS": "laytune.records._frame",
    "workloads_dataframe": "laytune.records._frame",
    "match_workloads": "laytune.records._select",
    "select_records": "laytune.records._select",
    "workload_matches": "laytune.records._select",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'laytune.records' has no attribute {name!r}")
