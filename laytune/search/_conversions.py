"""Tuning the conversion kernels that recorded candidates pay for.

Converting a buffer between two layouts is a workload of its own
(:class:`laytune.space.ConversionWorkload`), tuned by :func:`laytune.tune`
like any other and recorded in the same database. :func:`tune_conversions`
tunes the conversions that the best records of a database charge per call
(packing each fixed input from its logical layout, unpacking each fixed
output into it), so that prices, frozen kernels, exports and plans use tuned
kernels instead of the generated ones.

Like every conversion workload they are timed cold (a buffer larger than the
device's caches is written before every timed run, see
``ConversionWorkload.timed_cold``), because that is how a conversion meets
its data between other kernels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from laytune.records import default_boundary, open_database
from laytune.runners import local_workers, refuse_while_a_worker_starts
from laytune.space import CONVERSION_OP, ConversionWorkload

__all__ = ["conversions_of", "tune_conversions"]


def conversions_of(record: Any) -> list[ConversionWorkload]:
    """The conversions ``record`` (a verified record) pays per call under its
    workload's default boundary, between flat global buffers."""
    boundary = default_boundary(record.workload_key)
    layouts = record.candidate.layout_map
    found = []
    for spec in record.program.get("buffers", ()):
        name, role = str(spec["name"]), str(spec["role"])
        layout = layouts.get(name)
        policy = boundary.policy(name)
        if layout is None or policy.kind != "fixed" or layout.image_rank != 1:
            continue
        held = policy.held(layout.shape)
        if held.index_map.equivalent(layout.index_map, layout.shape):
            continue
        dtype = str(spec["dtype"])
        if role in ("input", "inout"):
            pad = record.candidate.pad_value(name)
            found.append(ConversionWorkload(held, layout, dtype, pad))
        if role in ("output", "inout"):
            found.append(ConversionWorkload(layout, held, dtype))
    return found


def tune_conversions(
    database: Any,
    device: Any = None,
    *,
    workloads: Iterable[str] | None = None,
    options: Any = None,
    progress: bool = True,
) -> list[Any]:
    """Tune every conversion the best record of each workload (of ``device``
    in ``database``; only ``workloads``, keys, when given) pays per call; one
    :class:`~laytune.search.TuneResult` per conversion, in order. Each
    conversion is a job of its own small space
    (:class:`laytune.space.ConversionSpace`) under ``options`` (a
    :class:`~laytune.search.TuneOptions`; default: 24 trials). The jobs share
    one builder and one runner, so their workers start once. Ctrl-C ends the
    job it lands in as :func:`tune` does and no later job starts: the last
    result's ``stop_reason`` then starts with "interrupted"."""
    from laytune.search._options import TuneOptions
    from laytune.search._tune import _resolve_device, tune

    refuse_while_a_worker_starts("laytune.tune_conversions")
    opts = options if options is not None else TuneOptions(trials=24)
    device = _resolve_device(device)
    db = open_database(database)
    wanted = None if workloads is None else set(workloads)
    jobs: dict[str, ConversionWorkload] = {}
    for best in db.best_records(device=device.key):
        if best.op == CONVERSION_OP or (wanted is not None and best.workload_key not in wanted):
            continue
        for workload in conversions_of(best):
            jobs.setdefault(workload.key, workload)
    results: list[Any] = []
    if not jobs:
        return results
    with local_workers(device, opts.measure) as (builder, runner):
        for workload in jobs.values():
            result = tune(
                workload,
                device,
                options=opts,
                database=db,
                progress=progress,
                builder=builder,
                runner=runner,
            )
            results.append(result)
            if result.stop_reason.startswith("interrupted"):
                break
    return results
