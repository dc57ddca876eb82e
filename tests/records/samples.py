"""Small records for the records tests: one 8 x 8 transpose, a few candidates."""

from __future__ import annotations

from laytune import ops
from laytune.layout import identity, pad_rows, permute
from laytune.records import Record
from laytune.space import Candidate, baseline_knobs

WORKLOAD = ops.transpose((8, 8), (1, 0))
OTHER = ops.transpose((8, 16), (1, 0))
DEVICE = "dev0"
BASE_KNOBS = baseline_knobs(WORKLOAD)


def candidate(x: str = "identity", block: int = 1) -> Candidate:
    layouts = {
        "identity": identity((8, 8)),
        "permute": permute((8, 8), (1, 0)),
        "pad": pad_rows((8, 8), 4),
    }
    return Candidate.make(
        {"X": layouts[x], "Y": identity((8, 8))}, {**BASE_KNOBS, "block.j": block}
    )


def record(c: Candidate, value: float | None, status: str = "ok", **kw: object) -> Record:
    return Record(
        kw.pop("workload", WORKLOAD.key),
        kw.pop("device", DEVICE),
        c,
        status,
        value_s=value,
        event_times_s=(value,) * 3 if value else (),
        study=kw.pop("study", "s"),
        **kw,
    )  # type: ignore[arg-type]
