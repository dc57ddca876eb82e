"""Feeds laytune hostile layout text through every way it enters, in a
process of its own that a memory limit guards (see test_hostile_layouts).

Run as ``python -m tests.faults.hostile_probe FOLDER``: for each case of
:data:`CASES`, one JSON line on stdout, written as soon as the case ends,
with the error's class, the length and start of its message, and the
seconds it took; a case that does not raise says so. A case that kills the
process (memory) leaves the lines of the cases before it, and the test
names the first case missing.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from laytune import ops
from laytune.layout import IndexMap, Layout, custom
from laytune.records import Boundary, Record, open_database
from laytune.space import Candidate

WORKLOAD = ops.copy((16, 16))
#: A shift that folds to a number of 12.5 GB.
HUGE_SHIFT = "lambda i, j: [i + (1 << 99999999999), j]"
TEN_MB = "lambda i, j: [" + "i" * (10 << 20) + ", j]"


def _texts() -> dict[str, str]:
    return {
        "huge shift": HUGE_SHIFT,
        "shift of an index": "lambda i, j: [i << 99999999999, j]",
        "shift 20000": "lambda i, j: [i + (1 << 20000), j]",
        "huge right shift": "lambda i, j: [i >> 99999999999, j]",
        "huge power": "lambda i, j: [i + 2 ** 99999999999, j]",
        "folded product": "lambda i, j: [i + (1 << 62) * (1 << 62) * (1 << 62), j]",
        "4000-digit literal": "lambda i, j: [i + " + "7" * 4000 + ", j]",
        "5000-digit literal": "lambda i, j: [i + " + "7" * 5000 + ", j]",
        "hex literal": "lambda i, j: [i + 0x" + "f" * 9000 + ", j]",
        "3000 outputs": "lambda i, j: [" + ", ".join(["i"] * 2999) + ", j]",
        "10 MB text": TEN_MB,
    }


def _layout_json(text: str) -> dict[str, Any]:
    """A custom layout of a 16 x 16 buffer as a record stores it, with ``text``
    in place of its index map."""
    data = custom((16, 16), "lambda i, j: [j, i]").to_json()
    data["index_map"] = text
    return data


def _record_json(text: str) -> str:
    candidate = Candidate.make({"A": custom((16, 16), "lambda i, j: [j, i]")}, {})
    record = Record(WORKLOAD.key, "cpu0", candidate, "ok", value_s=1e-3)
    data = json.loads(record.dumps())
    data["candidate"]["layouts"]["A"] = _layout_json(text)
    data.pop("candidate_key", None)
    return json.dumps(data)


def _composition() -> None:
    """A layout of 40 parts that each triple the expression."""
    part = custom((4,), "lambda i: [i + i - i]").to_json()
    Layout.from_json({**part, "family": "custom", "parts": [part] * 40})


def _swizzle() -> None:
    data = {
        "version": 1,
        "family": "swizzle",
        "params": {"form": "flat", "bits": 99999999999, "base": 0, "shift": 99999999999},
        "shape": [16, 16],
        "index_map": "lambda i, j: [i * 16 + j]",
    }
    Layout.from_json(data)


def _boundary(text: str) -> None:
    Boundary.of(WORKLOAD, {WORKLOAD.buffers[0].name: text})


def _import(folder: Path, text: str) -> None:
    lines = folder / "hostile.jsonl"
    lines.write_text(_record_json(text) + "\n")
    with open_database(folder / "imported.db") as db:
        db.import_jsonl(lines)


def _stored(folder: Path, text: str) -> None:
    """A record whose body in the database was changed to carry ``text``."""
    path = folder / "stored.db"
    with open_database(path) as db:
        candidate = Candidate.make({"A": custom((16, 16), "lambda i, j: [j, i]")}, {})
        record_id = db.add(Record(WORKLOAD.key, "cpu0", candidate, "ok", value_s=1e-3)).id
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE laytune_records SET body = ?", (_record_json(text),))
    with open_database(path) as db:
        db.get(record_id)


def cases(folder: Path) -> dict[str, Callable[[], Any]]:
    found: dict[str, Callable[[], Any]] = {
        f"parse: {name}": (lambda t=text: IndexMap.parse(t)) for name, text in _texts().items()
    }
    found["layout JSON: huge shift"] = lambda: Layout.from_json(_layout_json(HUGE_SHIFT))
    found["layout JSON: swizzle by 99999999999 bits"] = _swizzle
    found["record: huge shift"] = lambda: Record.from_json(_record_json(HUGE_SHIFT))
    found["database import: huge shift"] = lambda: _import(folder, HUGE_SHIFT)
    found["database record: huge shift"] = lambda: _stored(folder, HUGE_SHIFT)
    found["boundary: huge shift"] = lambda: _boundary(HUGE_SHIFT)
    found["boundary: 10 MB text"] = lambda: _boundary(TEN_MB)
    found["layout JSON: 40 tripling parts"] = _composition  # last: unbounded, it never ends
    return found


def main(folder: Path) -> None:
    for name, case in cases(folder).items():
        start = time.perf_counter()
        try:
            case()
        except Exception as err:  # what the test judges
            message = str(err)
            line = {
                "case": name,
                "error": type(err).__name__,
                "classes": [c.__name__ for c in type(err).__mro__],
                "length": len(message),
                "message": message[:2000],
            }
        else:
            line = {"case": name, "error": None}
        line["seconds"] = time.perf_counter() - start
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
