"""A records database for the figure tests, shaped like the databases people
plot: several workloads, two studies of the default boundary (one resumed),
a study of another boundary (``--free``), a conv2d whose layouts pad nothing
(every record at one memory), a local tile staged once, failures, and a
conversion workload whose study numbers its trials sparsely (optuna trials
that found their candidate recorded write no record)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator

import numpy as np

from laytune import ops
from laytune.layout import block, identity, pad_rows, permute, row_xor, swizzle, tile
from laytune.records import Boundary, Price, Record, open_database
from laytune.space import Candidate, ConversionWorkload, baseline_knobs

DEVICE_KEY = "5c3a9d7e1f2b4c6d"
DEVICE_NAME = "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz (Intel(R) OpenCL)"
MATMUL = ops.matmul(64, 64, 64)
CONV2D = ops.conv2d(1, 16, 14, 14, 16, 3, 1, 1)
TRANSPOSE = ops.transpose((128, 128), (1, 0))
CONVERSION = ConversionWorkload(identity((16, 24)), permute((16, 24), (1, 0)))
WORKLOADS = (MATMUL, CONV2D, TRANSPOSE)
FAILED = ("rejected", "build", "wrong_result", "timeout")
#: The free study: matmul with A free.
FREE = {"A": "free"}
#: Records of the conversion study, and the largest trial number it gives them.
CONVERSION_RECORDS, CONVERSION_LAST_TRIAL = 21, 190


@functools.cache  # each layout validates its map on construction: once per shape
def _choices(shape: tuple[int, ...]) -> tuple:
    if len(shape) == 2:
        return (
            identity(shape),
            permute(shape, (1, 0)),
            pad_rows(shape, 1),
            row_xor(shape, 8),
            swizzle(shape, 3, 0, 5),
            tile(shape, (16, 16)),
        )
    return (identity(shape), permute(shape, (0, 2, 3, 1)), block(shape, 1, 4), block(shape, 1, 8))


def study_name(workload, strategy: str, tag: str = "") -> str:
    """As ``laytune tune`` names a study."""
    name = f"{workload.key}@{DEVICE_KEY}/{strategy}"
    return f"{name}/{tag}" if tag else name


def _priced(record: Record, workload, boundary: Boundary) -> Record:
    if not record.ok:
        return record
    price = Price(float(record.value_s), (), boundary)  # type: ignore[arg-type]
    return record.priced(price)


def _records(workload, rng: np.random.Generator, clock: float) -> Iterator[Record]:
    shapes = {b.name: tuple(b.shape) for b in workload.buffers}
    studies = [("tpe", ("r1", "r2"), "", 1.0), ("random", ("r3",), "", 1.0)]
    if workload is MATMUL:
        studies.append(("model", ("r4",), "free=A", 0.6))  # no pack of A to pay: faster
    for strategy, runs, tag, scale in studies:
        boundary = Boundary.of(workload, FREE if tag else None)
        name = study_name(workload, strategy, tag)
        trial = itertools.count()
        for run in runs:
            clock += 3600.0
            for k in range(12):
                first = k == 0 and run != "r2"
                layouts = {
                    n: identity(s) if first else _choices(s)[rng.integers(len(_choices(s)))]
                    for n, s in shapes.items()
                }
                knobs = baseline_knobs(workload)
                if not first:
                    inner = workload.axes[workload.spatial_axes[-1]].name
                    knobs[f"block.{inner}"] = int(rng.choice([1, 2, 4]))
                if workload is MATMUL and k in (5, 6) and run == "r1":  # 4 panels: 2 rows
                    knobs["local_stage"] = True
                    layouts["A.local"] = identity((16, 16))
                status = FAILED[k % len(FAILED)] if k % 5 == 4 else "ok"
                value = float(rng.uniform(0.02, 0.3)) * (2.0 if first else 1.0) * scale
                times = tuple(value * (1 + rng.uniform(0, 0.05)) for _ in range(7))
                started = clock
                clock += float(rng.uniform(0.5, 2.0))
                record = Record(
                    workload.key,
                    DEVICE_KEY,
                    Candidate.make(layouts, knobs),
                    status,
                    value_s=float(np.median(times)) / 1e3 if status == "ok" else None,
                    event_times_s=tuple(t / 1e3 for t in times) if status == "ok" else (),
                    device_name=DEVICE_NAME,
                    study=name,
                    trial=next(trial),
                    strategy=strategy,
                    run=run,
                    started_at=started if status != "rejected" else None,
                    created_at=clock,
                )
                yield _priced(record, workload, boundary)


def _conversion_records(rng: np.random.Generator, clock: float) -> Iterator[Record]:
    trials = np.linspace(0, CONVERSION_LAST_TRIAL, CONVERSION_RECORDS).astype(int)
    kernels = itertools.product(("gather", "tile", "local"), (1, 4, 8, 16), (1, 2))
    for trial, (kernel, vector, items) in zip(trials, kernels, strict=False):
        knobs = {} if trial == 0 else {"kernel": kernel, "vector": vector, "items": items}
        value = float(rng.uniform(0.003, 0.02))
        clock += float(rng.uniform(0.2, 1.0))
        yield Record(
            CONVERSION.key,
            DEVICE_KEY,
            Candidate.make({}, knobs),
            "ok",
            value_s=value / 1e3,
            event_times_s=(value / 1e3,) * 3,
            device_name=DEVICE_NAME,
            study=study_name(CONVERSION, "tpe"),
            trial=int(trial),
            strategy="tpe",
            run="c1",
            started_at=clock - 0.1,
            created_at=clock,
        )


def build(path) -> object:
    """The database at ``path`` (a new SQLite file)."""
    db = open_database(path)
    rng = np.random.default_rng(7)
    for workload in WORKLOADS:
        for record in _records(workload, rng, 1_700_000_000.0):
            db.add(record)
    for record in _conversion_records(rng, 1_700_100_000.0):
        db.add(record)
    return db
