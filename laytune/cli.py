"""The ``laytune`` command line.

Commands: ``devices``, ``tune``, ``tune-conversions``, ``tune-model``,
``plan``, ``workloads``, ``records``, ``show``, ``freeze``, ``export``, ``plot``. Each is a thin shell over the Python API.

``--import MODULE`` (repeatable, before the command) and ``LAYTUNE_IMPORT``
(modules separated by commas) import a user's modules first
(:func:`laytune.ops.import_workloads`), so the operators they register and
the workloads they define join every command.

Exit codes scripts can rely on: 0 success; 1 the command ran but found
nothing (no verified candidate, no matching workload or record, no such
record id, no records database or frozen file at the path given: the
read-only commands never create one); 2 a user mistake (bad arguments,
unknown device or operator, a database or file that cannot be read: one
line on stderr, no traceback); 130 interrupted by SIGINT (Ctrl-C) and 143
by SIGTERM, at any moment, start-up included (no traceback; tuning stops its
workers and keeps every finished record).

Tables fit the terminal's width (``COLUMNS`` when set, else 80 columns when
the output is not a terminal); ``--format csv|json|jsonl`` give every column.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import math
import os
import shlex
import signal
import statistics
import sys
import textwrap
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from laytune._stop import EXIT_INTERRUPTED, EXIT_TERMINATED, STOP_GRACE_S, exit_now
from laytune._stop import StopSignals as _StopSignals
from laytune._table import Column as _Column
from laytune._table import missing as _missing
from laytune._table import ms as _ms
from laytune._table import print_table as _print_table
from laytune._table import times as _times
from laytune._table import write_json as _write_json
from laytune.exceptions import LaytuneError, NotFoundError, RecordWarning, excerpt

__all__ = ["main"]

EXIT_OK, EXIT_NO_RESULT, EXIT_USAGE = 0, 1, 2


def _default_db() -> str:
    return os.environ.get("LAYTUNE_DB", "sqlite:///laytune.db")


def _import_user_modules(modules: Sequence[str]) -> None:
    """Import ``$LAYTUNE_IMPORT``'s modules, then ``modules`` (``--import``),
    each once: the operators they register join the commands."""
    from laytune.ops import import_workloads

    listed = os.environ.get("LAYTUNE_IMPORT", "").split(",")
    for module in [m.strip() for m in listed if m.strip()] + list(modules):
        import_workloads(module)


def _imports_named(argv: Sequence[str]) -> list[str]:
    """The modules ``--import`` names before the command: imported before the
    parser is built, so that ``tune --help`` lists their operators."""
    modules = []
    words = list(argv)
    k = 0
    while k < len(words) and words[k].startswith("-"):
        if words[k] == "--import" and k + 1 < len(words):
            modules.append(words[k + 1])
            k += 1
        elif words[k].startswith("--import="):
            modules.append(words[k].partition("=")[2])
        k += 1
    return modules


def _workloads(args: argparse.Namespace) -> list[Any]:
    """The workloads ``tune`` was asked for: the demo jobs
    (:func:`laytune.search.demos`, each a workload with its boundary), a
    workload key, or an operator with ``--shape NAME=VALUE`` parameters."""
    from laytune import ops

    if args.demo:
        from laytune.search import demos

        return list(demos())
    if args.op is None:
        raise LaytuneError("tune needs an operator (or --demo); see laytune tune --help")
    if "(" in args.op:  # a whole workload key, as `laytune records` prints it
        if args.shape:
            raise LaytuneError(f"a workload key ({args.op}) takes no --shape")
        return [ops.from_key(args.op)]
    if args.op not in ops.constructors():
        defined = [w for w in ops.defined_workloads().values() if w.name == args.op]
        if len(defined) == 1 and not args.shape:  # Workload.define in a module of --import
            return defined
        if defined:
            keys = ", ".join(sorted(w.key for w in defined))
            raise LaytuneError(
                f"{args.op} is not a registered operator (no --shape); name one of its "
                f"workloads by key: {keys}"
            )
        raise ops.UnknownWorkloadError(
            f"unknown operator {args.op!r}; known: {', '.join(ops.constructors())}; "
            f"for one of your own, name the module that registers it: "
            f"laytune --import MODULE tune {args.op} ..."
        )
    constructor = ops.constructor(args.op)
    texts: dict[str, str] = {}
    for item in args.shape:
        texts.update(ops.parse_params(item, "--shape"))
    return [constructor.build(constructor.parse(texts), args.dtype)]


def _operators_help() -> str:
    from laytune import ops

    lines = ["operators (--shape NAME=VALUE,...; tuples as 4x8, as in workload keys):"]
    for name, c in ops.constructors().items():
        example = ",".join(f"{k}={ops.format_value(v)}" for k, v in c.example)
        lines.append(f"  {name} {c.usage()}: {c.summary.replace('``', '')}")
        lines.append(f"      e.g. laytune tune {name} --shape {example}")
    return "\n".join(lines)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive seconds, got {text}")
    return value


# -- commands -----------------------------------------------------------------


def _cmd_devices(args: argparse.Namespace) -> int:
    from laytune.runners import device_builds, list_devices

    devices = list_devices()
    if not devices:
        print("no OpenCL device found; install laytune with the 'pocl' or 'intel' extra")
        return EXIT_NO_RESULT
    for device in devices:
        why = device_builds(device)
        status = "builds kernels" if why is None else f"cannot build: {why}"
        info = device.info
        print(f"{device}  [{info.device_type}, {info.compute_units} CU, key {device.key}] {status}")
    return EXIT_OK


def _cmd_tune(args: argparse.Namespace) -> int:
    from laytune.records import open_database
    from laytune.runners import default_device, select_device
    from laytune.search import Demo, TuneOptions, tune

    jobs = _workloads(args)
    options = TuneOptions(
        trials=args.trials,
        timeout=args.timeout,
        strategy=args.strategy,
        seed=args.seed,
        batch=args.batch,
        patience=args.patience,
        warm_start=0 if args.no_warm_start else TuneOptions().warm_start,
    )
    device = select_device(args.device) if args.device is not None else default_device()
    database = open_database(args.db)
    status = EXIT_OK
    for job in jobs:
        demo = job if isinstance(job, Demo) else None
        workload = job.workload if demo is not None else job
        boundary = dict(demo.boundary) if demo is not None else {}
        boundary.update({name: "free" for name in _names(args.free, workload)})
        boundary.update({name: "constant" for name in _names(args.constant, workload)})
        if demo is not None:
            print(f"\n{demo.title}", flush=True)
        result = tune(
            workload,
            device,
            options=options.replace(boundary=boundary),
            database=database,
            progress=not args.quiet,
        )
        print(result.summary())
        if demo is not None:
            print(result.explain())
        if result.stop_reason.startswith("interrupted"):
            return EXIT_INTERRUPTED
        if result.best is None:
            status = EXIT_NO_RESULT
    hint = _db_option(args.db, database.safe_url)
    print(f"records in {database.safe_url}; see `laytune records --best{hint}`")
    return status


def _cmd_tune_conversions(args: argparse.Namespace) -> int:
    from laytune.runners import default_device, select_device
    from laytune.search import TuneOptions, tune_conversions

    database = _open_existing(args.db, read_only=False)
    device = select_device(args.device) if args.device is not None else default_device()
    keys = None
    if args.workload:
        keys = sorted({key for name in args.workload for key in _match(database, name)})
    results = tune_conversions(
        database,
        device,
        workloads=keys,
        options=TuneOptions(trials=args.trials, strategy=args.strategy),
        progress=not args.quiet,
    )
    if not results:
        print("the best records pay for no conversion on this device", file=sys.stderr)
        return EXIT_NO_RESULT
    for result in results:
        print(result.summary())
    if results[-1].stop_reason.startswith("interrupted"):
        return EXIT_INTERRUPTED
    print("prices, freeze, export and plans now use the fastest recorded conversion kernels")
    return EXIT_OK


def _cmd_tune_model(args: argparse.Namespace) -> int:
    from laytune.plan import from_onnx, tune_model
    from laytune.records import open_database
    from laytune.search import TuneOptions

    model = args.model if args.winograd else from_onnx(args.model)
    database = open_database(args.db)
    tuning = tune_model(
        model,
        args.device,
        options=TuneOptions(
            trials=args.trials, strategy=args.strategy, seed=args.seed, batch=args.batch
        ),
        database=database,
        progress=not args.quiet,
        winograd=args.winograd,
    )
    print(tuning.summary())
    if tuning.interrupted:
        return EXIT_INTERRUPTED
    if not tuning.jobs:
        print(f"{args.model} has no layout-critical operator to tune", file=sys.stderr)
        return EXIT_NO_RESULT
    hint = _db_option(args.db, database.safe_url)
    quoted = shlex.quote(args.model)
    print(
        f"records in {database.safe_url}; see `laytune plan {quoted}{hint}`, and "
        f"`laytune freeze --model {quoted}{hint} --measure` for a frozen file of the "
        "kernels that run fastest in the plan"
    )
    missing = [j for j in tuning.jobs if j.result is not None and j.result.best is None]
    return EXIT_NO_RESULT if missing else EXIT_OK


def _cmd_plan(args: argparse.Namespace) -> int:
    from laytune.plan import plan_model
    from laytune.records import load_frozen

    # a frozen file (``freeze --model``) plans the model without the records
    source = load_frozen(args.db) if args.db.endswith(".json") else _open_existing(args.db)
    print(plan_model(args.model, source, args.device, repeats=args.repeats))
    return EXIT_OK


def _names(texts: Sequence[str], workload: Any) -> list[str]:
    """Buffer names given as ``X,Y`` (repeatable); unknown names are an error."""
    names = [n.strip() for text in texts for n in text.split(",") if n.strip()]
    buffers = {b.name for b in workload.buffers}
    unknown = sorted(set(names) - buffers)
    if unknown:
        raise LaytuneError(
            f"{workload.key} has no buffer {excerpt(', '.join(unknown))} "
            f"(buffers: {', '.join(sorted(buffers))})"
        )
    return names


def _layouts_text(record: Any) -> str:
    """The buffers not in their identity layout, described briefly."""
    changed = [
        f"{name}: {layout.describe()}"
        for name, layout in record.candidate.layouts
        if not layout.is_identity
    ]
    return "; ".join(changed) or "identity"


def _open_existing(url: str, *, read_only: bool = True) -> Any:
    """The records database at ``url``; NotFoundError (exit 1) when there is none.
    Opened read-only unless asked: a command that only reads never changes
    the file (see :func:`laytune.records.open_database`)."""
    from laytune.records import open_database

    return open_database(url, create=False, read_only=read_only)


def _db_option(url: str, safe_url: str) -> str:
    """`` --db URL`` for a hint to print when the database ``url`` is not the
    default, as ``safe_url`` (a password shows as ``***``)."""
    return "" if url == _default_db() else f" --db {shlex.quote(safe_url)}"


def _workload_keys(db: Any, args: argparse.Namespace) -> list[str] | None:
    """The keys ``--workload`` and ``--shape`` select (None: no selection)."""
    from laytune.records import match_workloads

    if args.workload is None and args.shape is None:
        return None
    return match_workloads(db, args.workload, args.shape)


def _cmd_workloads(args: argparse.Namespace) -> int:
    from laytune.records import workloads_dataframe

    db = _open_existing(args.db)
    frame = workloads_dataframe(db)
    keys = _workload_keys(db, args)
    if keys is not None:
        frame = frame[frame["workload_key"].isin(keys)]
    if frame.empty:
        print(f"no records in {db.safe_url}", file=sys.stderr)
        return EXIT_NO_RESULT
    if args.format == "csv":
        frame.to_csv(sys.stdout, index=False)
    elif args.format in ("json", "jsonl"):
        items = [
            {k: None if _missing(v) else v for k, v in item.items()}  # JSON has no NaN
            for item in frame.to_dict(orient="records")
        ]
        _write_json(items, lines=args.format == "jsonl")
    else:
        rows = [
            {
                "op": row.op,
                "shape": row.shape,
                "device": row.device_name or row.device_key,
                "boundary": row.boundary,
                "counts": f"{row.ok}/{row.records}",
                "best": "-" if _missing(row.best_record_id) else str(int(row.best_record_id)),
                "time": _ms(row.best_time_s),
                "speedup": _times(row.speedup),
                "layout_speedup": _times(row.layout_speedup),
                "key": row.workload_key,
            }
            for row in frame.itertuples()
        ]
        _print_table(rows, _WORKLOAD_TABLE)
    return EXIT_OK


_WORKLOAD_TABLE = (
    _Column("workload", "op", shrink=8),
    _Column("shape", "shape", shrink=9),
    _Column("device", "device", shrink=8, drop=1),
    _Column("boundary", "boundary", shrink=8, drop=4),
    _Column("ok/all", "counts", numeric=True),
    _Column("best", "best", numeric=True),
    _Column("ms", "time", numeric=True),
    _Column("base", "speedup", numeric=True),
    _Column("layout", "layout_speedup", numeric=True),
    _Column("key", "key", shrink=8, wide=True, drop=2),
)

_RECORD_TABLE = (
    _Column("id", "id", numeric=True),
    _Column("workload", "op", shrink=8),
    _Column("shape", "shape", shrink=9),
    _Column("device", "device", shrink=8, drop=1),
    _Column("boundary", "boundary", shrink=8, drop=4),
    _Column("status", "status", shrink=6),
    _Column("kernel", "kernel", numeric=True, drop=3),
    _Column("ms", "time", numeric=True),
    _Column("base", "speedup", numeric=True),
    _Column("layout", "layout_speedup", numeric=True),
    _Column("buffers", "layouts", shrink=10, wide=True, drop=2),
)

#: What the columns of the tables mean.
_TABLE_EPILOG = (
    "ms: the end-to-end time in milliseconds (the compute kernels plus the conversions the "
    "boundary charges: with the default boundary, packing the inputs from and unpacking the "
    "outputs into their logical layouts; weights are packed once); kernel: the compute "
    "kernels alone; base: the speed-up over the baseline candidate "
    "(identity layouts, baseline knobs), what the whole candidate bought; layout: the "
    "speed-up over identity layouts with the same knobs, what the layouts alone bought; "
    "buffers: those not in their identity layout; ok/all: verified and all records; "
    "boundary: the buffers whose policy differs from the default (inputs and outputs fixed "
    "to their logical layouts, weights constant), as tune --free and --constant set them, "
    "'default' where none does ('-' for a record not priced): a study of another boundary "
    "has rows of its own, since it ranks by another objective. "
    "Tables fit the terminal width; csv and json give every column."
)


def _cmd_records(args: argparse.Namespace) -> int:
    from laytune.records import (
        boundary_text,
        records_dataframe,
        reference_records,
        select_records,
    )

    db = _open_existing(args.db)
    keys = _workload_keys(db, args)
    records = select_records(
        db, keys, best=args.best, device=args.device, status=args.status, op=args.op
    )
    if args.limit is not None:
        records = records[-args.limit :]
    if not records:
        print(f"no matching records in {db.safe_url}", file=sys.stderr)
        return EXIT_NO_RESULT
    if args.format in ("json", "jsonl"):
        _write_json([record.to_json() for record in records], lines=args.format == "jsonl")
        return EXIT_OK
    # speed-ups are against references the selection may have left out
    frame = records_dataframe(records, reference_records(db, records))
    if args.format == "csv":
        frame.to_csv(sys.stdout, index=False)
        return EXIT_OK
    rows = [
        {
            "id": str(record.id),
            "op": record.op,
            "shape": row.shape,
            "device": record.device_name or record.device_key,
            "boundary": boundary_text(
                None if record.objective is None else record.objective.boundary,
                record.workload_key,
            ),
            "status": record.status,
            "kernel": _ms(row.kernel_s),
            "time": _ms(row.time_s),
            "speedup": _times(row.speedup),
            "layout_speedup": _times(row.layout_speedup),
            "layouts": _layouts_text(record),
        }
        for record, row in zip(records, frame.itertuples(), strict=True)
    ]
    _print_table(rows, _RECORD_TABLE)
    return EXIT_OK


def _contended_words(times: list[float]) -> str:
    """What ``show`` says of a series timed again under load (none: nothing)."""
    if not times:
        return ""
    return f"; timed again, the series not kept had a median of {statistics.median(times) * 1e3:.4f} ms"


def _cmd_show(args: argparse.Namespace) -> int:
    import numpy as np

    from laytune.ops import short_key
    from laytune.records import layout_text, reference_times
    from laytune.search import speedup_text

    db = _open_existing(args.db)
    record = db.get(args.record)
    print(
        f"record {record.id}: {short_key(record.workload_key)} on "
        f"{record.device_name or record.device_key}"
    )
    print(f"  workload {record.workload_key}, device key {record.device_key}")
    print(
        f"  status {record.status}" + (f": {record.error_message}" if record.error_message else "")
    )
    if record.value_s is not None:
        times = np.asarray(record.event_times_s, dtype=float) * 1e3
        q1, q3 = np.percentile(times, [25, 75]) if len(times) else (math.nan, math.nan)
        price = record.objective
        if price is None:
            print(f"  end to end {record.value_s * 1e3:.4f} ms: the kernel alone (no boundary)")
        else:
            print(f"  end to end {price.describe()}")
            print(f"  boundary: {price.boundary}")
            for charge in price.charges:
                print(
                    f"    {charge.buffer} {charge.direction}: {charge.seconds * 1e3:.4f} ms "
                    f"({charge.source})"
                )
        print(
            f"  kernel {record.statistic} {record.compute_s * 1e3:.4f} ms, min {times.min():.4f} ms, "
            f"IQR {q3 - q1:.4f} ms over {len(times)} repeats"
        )
        print("  repeats [" + ", ".join(f"{t:.4f}" for t in times) + "] ms")
        result = record.result or {}
        if result.get("contention") is not None:
            print(
                f"  host CPU contention {result['contention']:.0%} of the series' time"
                + _contended_words(result.get("contended_event_times_s") or [])
            )
        if record.abandoned:
            print("  abandoned after its first repeats: clearly slower than the best")
        references = db.records(workload=record.workload_key, device=record.device_key, status="ok")
        baseline, twin = reference_times(references, record.candidate)
        for reference, what in ((baseline, "over the baseline"), (twin, "from the layouts")):
            ratio = None if reference is None else reference.value_s / record.value_s
            print("  " + speedup_text(ratio, reference, what))
    if record.max_error is not None:
        print(f"  max error vs numpy {record.max_error:.3g}")
    print(f"  study {record.study!r}, trial {record.trial}, laytune {record.laytune_version}")
    print("  layouts:")
    for name, layout in record.candidate.layouts:
        pad = record.candidate.pad_value(name)
        text = layout_text(record.workload_key, name, layout)
        print(f"    {name}: {text}  ({layout.describe()}, pad {pad})")
    print("  knobs: " + ", ".join(f"{k}={v}" for k, v in record.candidate.knobs))
    if record.program and not args.no_source:
        print(f"  source ({record.source_hash}):")
        print(record.source)
    return EXIT_OK


def _cmd_freeze(args: argparse.Namespace) -> int:
    from laytune.ops import short_key
    from laytune.plan import freeze_model
    from laytune.records import freeze, load_frozen

    if args.measure and not args.model:
        raise LaytuneError("freeze --measure times candidates in a model's plan: give --model")
    if args.model and (args.workload or args.device):
        raise LaytuneError(
            "freeze --model freezes what the model's plan runs on the default device "
            "(LAYTUNE_DEVICE picks another); drop --workload and --device"
        )
    db = _open_existing(args.db)
    if not db.best_records(device=args.device):
        print(f"no verified record in {db.safe_url} to freeze", file=sys.stderr)
        return EXIT_NO_RESULT
    if args.model:
        out = "laytune-model.json" if args.out is None else args.out
        path = freeze_model(args.model, db, out, fuse=not args.no_fuse, measure=args.measure)
    else:
        keys = None
        if args.workload:
            keys = sorted({key for name in args.workload for key in _match(db, name)})
        out = "laytune-frozen.json" if args.out is None else args.out
        path = freeze(db, out, workloads=keys, device=args.device)
    frozen = load_frozen(path)
    print(f"froze {len(frozen)} workload(s) into {path}")
    for entry in frozen:
        base = _times(entry.speedup)
        layouts = _times(entry.layout_speedup)
        kernel = "" if entry.kernel_s is None else f" (kernel {entry.kernel_s * 1e3:.4f} ms)"
        tuned = [
            f"{b} {d} by {k}"
            for b, d, k in entry.conversions
            if k.startswith(("conversion", "generated (faster"))
        ]
        print(
            f"  {short_key(entry.workload_key)} on {entry.device_name}: "
            f"{entry.time_s * 1e3:.4f} ms end to end{kernel}, {base} over the baseline, "
            f"{layouts} from the layouts" + (f"; {', '.join(tuned)}" if tuned else "")
        )
    return EXIT_OK


def _match(db: Any, name: str) -> list[str]:
    from laytune.records import match_workloads

    return match_workloads(db, name)


def _cmd_export(args: argparse.Namespace) -> int:
    from laytune.plan import export_model
    from laytune.records import export

    if args.no_fuse and not args.model:
        raise LaytuneError("export --no-fuse plans a model: give --model ONNX as well")
    if args.model:
        written = export_model(
            args.model, args.frozen, args.out, fuse=not args.no_fuse, reference=args.reference
        )
    else:
        written = export(args.frozen, args.out, reference=args.reference)
    for path in written:
        print(path)
    return EXIT_OK


#: What each kind of ``laytune plot`` draws (the functions of laytune.plots say more).
_PLOT_KINDS = {
    "convergence": "best verified time so far against candidates measured and against "
    "tuning time, one line per study (a study of another boundary is named by it), the "
    "baseline dashed",
    "families": "time of every verified record by the layout family of each buffer: a box "
    "(quartiles, whiskers at 1.5 IQR) and the records as points per family, the baseline "
    "dashed",
    "speedup": "as families, the speed-up over the baseline candidate instead of the time",
    "pareto": "time against padding overhead, every record grey, the Pareto front (no record "
    "both faster and smaller) joined in red and its members named by their layouts",
    "address-map": "one buffer's layout (--record ID --buffer NAME): the logical grid "
    "coloured by physical offset and by local-memory bank, with the worst bank conflict "
    "of 32 lanes",
}
_PLOT_KINDS_HELP = "kinds:\n" + "\n".join(
    textwrap.fill(f"{kind}: {text}", 78, initial_indent="  ", subsequent_indent="      ")
    for kind, text in _PLOT_KINDS.items()
)


def _cmd_plot(args: argparse.Namespace) -> int:
    from laytune import plots
    from laytune.records import records_dataframe, reference_records, select_records

    plots.check_image_path(args.out)  # before any work: a bad name is a usage mistake
    db = _open_existing(args.db)
    options: dict[str, Any] = {}
    if args.kind == "address-map":
        if args.record is None or args.buffer is None:
            raise LaytuneError("plot address-map needs --record ID and --buffer NAME")
        layout = db.get(args.record).candidate.layout(args.buffer)
        figure = plots.plot(args.kind, layout)
    else:
        records = select_records(db, _workload_keys(db, args), op=args.op)
        frame = records_dataframe(records, reference_records(db, records))
        if frame.empty:
            print(f"no matching records in {db.safe_url}", file=sys.stderr)
            return EXIT_NO_RESULT
        figure = plots.plot(args.kind, frame, **options)
    print(plots.save(figure, args.out))
    return EXIT_OK


# -- parser -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from laytune.ops import DTYPES
    from laytune.search import STRATEGIES

    parser = argparse.ArgumentParser(
        prog="laytune",
        description="Search memory layouts of OpenCL kernels, keep every measurement, "
        "freeze the best layouts.",
        epilog="exit codes: 0 ok, 1 nothing found (also: no such database, record or file), "
        "2 user error, 130 interrupted (SIGINT), 143 terminated (SIGTERM). "
        "The database defaults to $LAYTUNE_DB or sqlite:///laytune.db. "
        "$LAYTUNE_IMPORT: modules to import first, as --import, separated by commas.",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module of your own first (repeatable): a module name importable from "
        "the current directory, or a .py file; the operators it registers "
        "(@laytune.ops.register) and the workloads it defines (Workload.define) join every "
        "command",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def db_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--db", default=_default_db(), metavar="URL", help="records database")

    def device_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--device", help="index, platform:device, or name substring")

    def search_options(sub: argparse.ArgumentParser, per: str, strategy: str) -> None:
        sub.add_argument("--trials", type=_positive, default=24, help=f"candidates per {per} (24)")
        sub.add_argument(
            "--strategy",
            choices=sorted(STRATEGIES),
            default=strategy,
            help=f"search strategy ({strategy})",
        )

    devices = commands.add_parser("devices", help="list OpenCL devices and whether they build")
    devices.set_defaults(run=_cmd_devices)

    tune = commands.add_parser(
        "tune",
        help="search the layouts of one operator",
        epilog=_operators_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tune.add_argument("op", nargs="?", help="operator to tune, or a whole workload key")
    tune.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="the operator's parameters (see below); repeat or separate with commas",
    )
    tune.add_argument("--dtype", choices=DTYPES, default="float32", help="(float32)")
    tune.add_argument("--trials", type=_positive, default=24, help="candidates to measure (24)")
    tune.add_argument("--timeout", type=_seconds, help="stop proposing after this many seconds")
    tune.add_argument(
        "--strategy",
        choices=sorted(STRATEGIES),
        default="model",
        help="search strategy (model: a cost model trained on the records)",
    )
    tune.add_argument("--patience", type=_positive, help="stop after K trials without a new best")
    tune.add_argument("--batch", type=_positive, default=8, help="candidates built per batch (8)")
    tune.add_argument("--seed", type=int, default=0)
    device_option(tune)
    tune.add_argument("--no-warm-start", action="store_true", help="do not try records first")
    tune.add_argument(
        "--free",
        action="append",
        default=[],
        metavar="X,Y",
        help="buffers whose layout a producer or consumer adopts: their conversions are not "
        "charged (default: inputs and outputs are fixed to their logical layouts, and every "
        "call pays packing and unpacking them)",
    )
    tune.add_argument(
        "--constant",
        action="append",
        default=[],
        metavar="W",
        help="inputs converted once and reused by every call (weights; conv2d's W and "
        "bias_add's B are constant by default)",
    )
    tune.add_argument("--quiet", action="store_true", help="no progress lines")
    tune.add_argument(
        "--demo",
        action="store_true",
        help="the demo jobs: a matmul whose caller holds A transposed (the layouts win), "
        "then the same matmul with A row-major (identity layouts win); each result says why",
    )
    db_option(tune)
    tune.set_defaults(run=_cmd_tune)

    conversions = commands.add_parser(
        "tune-conversions",
        help="tune the conversion kernels the best records pay for (packing inputs, "
        "unpacking outputs)",
    )
    conversions.add_argument(
        "--workload", action="append", metavar="NAME", help="only this workload (repeatable)"
    )
    search_options(conversions, "conversion", "tpe")
    device_option(conversions)
    conversions.add_argument("--quiet", action="store_true", help="no progress lines")
    db_option(conversions)
    conversions.set_defaults(run=_cmd_tune_conversions)

    tune_model = commands.add_parser(
        "tune-model",
        help="tune each distinct layout-critical workload of an ONNX model once, then the "
        "conversions its plan runs",
        description=textwrap.fill(
            "Tune each distinct layout-critical workload of an ONNX model (a contraction or "
            "a sliding window, read off its statement) once, largest first, its weights "
            "constant; then the conversions the model's plan runs. A workload whose study "
            "holds the trial budget already is skipped: a second run resumes.",
            78,
        ),
    )
    tune_model.add_argument("model", help="ONNX model file")
    search_options(tune_model, "workload", "model")
    tune_model.add_argument("--batch", type=_positive, default=8, help="candidates per batch (8)")
    tune_model.add_argument("--seed", type=int, default=0)
    device_option(tune_model)
    tune_model.add_argument("--quiet", action="store_true", help="no progress lines")
    tune_model.add_argument(
        "--winograd",
        action="store_true",
        help="tune each 3 x 3 stride-1 convolution both directly and in Winograd's "
        "F(2x2, 3x3); plan, freeze, export and load_model then run the faster",
    )
    db_option(tune_model)
    tune_model.set_defaults(run=_cmd_tune_model)

    plan = commands.add_parser(
        "plan",
        help="plan an ONNX model's layouts from the records, run it, print the plan with "
        "predicted and measured times",
    )
    plan.add_argument("model", help="ONNX model file")
    plan.add_argument(
        "--repeats", type=_positive, default=10, help="timed runs on random inputs (10)"
    )
    device_option(plan)
    db_option(plan)
    plan.set_defaults(run=_cmd_plan)

    def workload_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--workload",
            metavar="NAME",
            help="operator (matmul), workload key or its prefix, or 'matmul 256x256x256'",
        )
        sub.add_argument("--shape", metavar="SHAPE", help="shape as listed: 256x256x256")

    formats = ("table", "csv", "json", "jsonl")
    format_help = "table (fits the terminal), csv, json (one array) or jsonl (JSON Lines)"

    workloads = commands.add_parser(
        "workloads",
        help="list the workloads with records: counts, best time, speed-ups",
        epilog=_TABLE_EPILOG,
    )
    workload_options(workloads)
    workloads.add_argument("--format", choices=formats, default="table", help=format_help)
    db_option(workloads)
    workloads.set_defaults(run=_cmd_workloads)

    records = commands.add_parser("records", help="list records", epilog=_TABLE_EPILOG)
    records.add_argument("--best", action="store_true", help="best per workload and device")
    workload_options(records)
    records.add_argument("--op", help="operator name")
    records.add_argument("--device", help="device key")
    records.add_argument("--status", help="ok, rejected, build, run, timeout, wrong_result, ...")
    records.add_argument("--limit", type=_positive, help="only the last N")
    records.add_argument("--format", choices=formats, default="table", help=format_help)
    db_option(records)
    records.set_defaults(run=_cmd_records)

    show = commands.add_parser("show", help="one record: layouts, knobs, times, source")
    show.add_argument("record", type=int, help="record id")
    show.add_argument("--no-source", action="store_true", help="leave out the OpenCL source")
    db_option(show)
    show.set_defaults(run=_cmd_show)

    freeze = commands.add_parser(
        "freeze",
        help="write the best layouts to a frozen file",
        epilog="With --model, the file holds the kernels the ONNX model's plan runs; "
        "`laytune plan MODEL --db FILE.json` and laytune.load_model(MODEL, database=FILE.json) "
        "plan the model from it without the records database.",
    )
    freeze.add_argument("--out", help="(laytune-frozen.json; with --model, laytune-model.json)")
    freeze.add_argument(
        "--workload", action="append", metavar="NAME", help="only this workload (repeatable)"
    )
    freeze.add_argument("--device", help="only this device key")
    freeze.add_argument(
        "--model", metavar="ONNX", help="freeze what this model's plan runs, as load_model plans it"
    )
    freeze.add_argument(
        "--no-fuse", action="store_true", help="with --model: the plan without epilogue fusion"
    )
    freeze.add_argument(
        "--measure",
        action="store_true",
        help="with --model: choose each workload's kernel by timing a few recorded candidates "
        "in the whole plan on the device (minutes), not by the records' times alone",
    )
    db_option(freeze)
    freeze.set_defaults(run=_cmd_freeze)

    export = commands.add_parser(
        "export",
        help="OpenCL source, JSON and a C header per kernel of a frozen file, and a manifest; "
        "with --model, the whole planned model",
        epilog="examples/opencl_host/host.c runs an exported kernel with the OpenCL C API, "
        "examples/opencl_host/model_host.c an exported model.",
    )
    export.add_argument("frozen", help="frozen file (with --model: the one freeze --model wrote)")
    export.add_argument(
        "--model",
        metavar="ONNX",
        help="write this model's whole plan as load_model plans it from the frozen file: every "
        "program, the constants packed in their layouts, every launch in order, a C header",
    )
    export.add_argument(
        "--no-fuse", action="store_true", help="with --model: the plan without epilogue fusion"
    )
    export.add_argument("--out", required=True, help="folder to write into")
    export.add_argument(
        "--reference",
        action="store_true",
        help="also the inputs and numpy's outputs as raw little-endian arrays, to check against "
        "(with --model: random inputs, seed 0, and the graph's numpy reference)",
    )
    export.set_defaults(run=_cmd_export)

    plot = commands.add_parser(
        "plot",
        help="write a figure of the records",
        description=textwrap.fill(
            "Write a figure of the records (one row of panels per workload and device) "
            "or of one record's layout.",
            78,
        ),
        epilog=_PLOT_KINDS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plot.add_argument("kind", choices=tuple(_PLOT_KINDS), help="the figure (see below)")
    plot.add_argument("--out", required=True, help="image file (.png, .svg, .pdf)")
    workload_options(plot)
    plot.add_argument("--op", help="operator name")
    plot.add_argument("--record", type=int, help="address-map: the record")
    plot.add_argument("--buffer", help="address-map: the buffer")
    db_option(plot)
    plot.set_defaults(run=_cmd_plot)
    return parser


def main(argv: Sequence[str] | None = None, *, held: Any = None) -> int:
    """Run one command and return its exit status.

    Called without ``argv`` (the ``laytune`` program), it owns the process:
    its SIGINT and SIGTERM handlers stay until the process ends, which it
    does, after the usual exit clean-up, with the status that the first
    signal decided, if any came (see :class:`_StopSignals`). Called with
    ``argv`` (tests, embedding), it restores the previous handlers and
    leaves the process alone. ``held`` is what held the stop signals while
    the program loaded (:mod:`laytune.__main__`): a signal it holds stops
    the program before the command runs.
    """
    if threading.current_thread() is not threading.main_thread():
        return _run(argv, None)  # signal handlers can only be set in the main thread
    program = argv is None
    signals = _StopSignals(STOP_GRACE_S if program else None)
    # What the process exits with unless a signal decides: an exception that
    # escapes (a bug) exits 1, as Python would; SystemExit its own code.
    status = [1]
    if program:  # registered before anything else registers, so it runs last
        atexit.register(lambda: exit_now(signals.status(status[0])))
        # one command per process: no later job would take warm workers
        from laytune.runners import keep_workers

        keep_workers(0)
    previous = signals.install()
    if held is not None and held.first is not None:  # a stop came while the program loaded
        signals.first = held.first
        signals.signalled.set()
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: signals.unraisable(u, previous_hook)
    try:
        status[0] = _run(argv, signals)
    except KeyboardInterrupt:  # a stop that came before _run's own handling
        status[0] = _stopped(signals)
    except Exception:
        if signals.first is None:
            raise
        # the stop's KeyboardInterrupt came inside an import or a C call that
        # turned it into another error (numpy's import: an ImportError)
        status[0] = _stopped(signals)
    except SystemExit as done:  # argparse: --help, a bad option
        status[0] = done.code if isinstance(done.code, int) else int(done.code is not None)
        raise
    finally:
        signals.finishing = True
        sys.unraisablehook = previous_hook
        if not program:
            signals.cancel()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signals.restore_database_logs()
    return signals.status(status[0])


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """laytune's own warnings (a record skipped as corrupt) as one line each
    on stderr, like its errors; other warnings as Python shows them."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", RecordWarning)  # each names another record
        shown = warnings.showwarning

        def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if issubclass(category, LaytuneError):
                print(f"laytune: warning: {message}", file=sys.stderr)
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


def _stopped(signals: _StopSignals | None) -> int:
    """Say that a stop signal ended the command; its exit status."""
    terminated = signals is not None and signals.first == signal.SIGTERM
    print(f"laytune: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def _run(argv: Sequence[str] | None, signals: _StopSignals | None) -> int:
    from laytune.ops import import_workloads

    try:
        if signals is not None and signals.first is not None:
            raise KeyboardInterrupt  # stopped before the command began: run nothing
        _import_user_modules(_imports_named(sys.argv[1:] if argv is None else argv))
        args = _parser().parse_args(argv)
        for module in args.imports:  # those the scan above missed (--imp abbreviated)
            import_workloads(module)
        with _warnings_as_lines():
            return int(args.run(args))
    except NotFoundError as err:  # nothing to read: no database, record or frozen file
        print(f"laytune: {err}", file=sys.stderr)
        return EXIT_NO_RESULT
    except LaytuneError as err:
        print(f"laytune: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyError as err:  # a buffer or record name that does not exist
        print(f"laytune: error: {err.args[0] if err.args else err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return _stopped(signals)
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
