"""Records: every measurement kept, queried, frozen and replayed.

- :class:`Record`: one measured or failed candidate, self-describing JSON
  with a schema version.
- :func:`open_database`: a SQLite file by default, or any SQLAlchemy URL
  (PostgreSQL) shared by several tuning hosts; optuna's study lives in the
  same database.
- :func:`freeze` / :func:`load_frozen` / :func:`export`: the best verified
  record per (workload, device) into a small file that a production build
  replays without optuna or a database.

The database half (SQLAlchemy) is imported only when used, so replaying a
frozen file imports neither SQLAlchemy nor optuna.
"""

from __future__ import annotations

from typing import Any

from laytune.records._frozen import (
    FROZEN_VERSION,
    FrozenEntry,
    FrozenLayouts,
    export,
    freeze,
    load_frozen,
)
from laytune.records._record import SCHEMA_VERSION, STATUSES, Record

__all__ = [
    "DEFAULT_URL",
    "FRAME_COLUMNS",
    "FROZEN_VERSION",
    "SCHEMA_VERSION",
    "STATUSES",
    "Database",
    "FrozenEntry",
    "FrozenLayouts",
    "Record",
    "export",
    "freeze",
    "is_baseline",
    "load_frozen",
    "open_database",
    "process_owner",
    "records_dataframe",
]

_LAZY = {
    "DEFAULT_URL": "laytune.records._database",
    "Database": "laytune.records._database",
    "open_database": "laytune.records._database",
    "process_owner": "laytune.records._database",
    "FRAME_COLUMNS": "laytune.records._frame",
    "is_baseline": "laytune.records._frame",
    "records_dataframe": "laytune.records._frame",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'laytune.records' has no attribute {name!r}")
