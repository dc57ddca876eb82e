"""The ``laytune`` command line.

Commands: ``devices``, ``tune``, ``records``, ``show``, ``freeze``,
``export``, ``plot``. Each is a thin shell over the Python API.

Exit codes scripts can rely on: 0 success; 1 the command ran but found
nothing (no verified candidate, no matching record); 2 a user mistake (bad
arguments, unknown device or record, unreadable database or file: one line
on stderr, no traceback); 130 interrupted (Ctrl-C; tuning keeps every
finished record).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from laytune.exceptions import LaytuneError

__all__ = ["main"]

EXIT_OK, EXIT_NO_RESULT, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _default_db() -> str:
    return os.environ.get("LAYTUNE_DB", "sqlite:///laytune.db")


def _workloads(args: argparse.Namespace) -> list[Any]:
    """The workloads ``tune`` was asked for: the registry's demo examples, a
    workload key, or an operator with ``--shape NAME=VALUE`` parameters."""
    from laytune import ops

    if args.demo:
        return [c.example_workload() for c in ops.constructors().values() if c.demo]
    if args.op is None:
        raise LaytuneError("tune needs an operator (or --demo); see laytune tune --help")
    if "(" in args.op:  # a whole workload key, as `laytune records` prints it
        if args.shape:
            raise LaytuneError(f"a workload key ({args.op}) takes no --shape")
        return [ops.from_key(args.op)]
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
    from laytune.search import tune

    jobs = _workloads(args)
    device = select_device(args.device) if args.device is not None else default_device()
    database = open_database(args.db)
    status = EXIT_OK
    for workload in jobs:
        result = tune(
            workload,
            device,
            trials=args.trials,
            timeout=args.timeout,
            strategy=args.strategy,
            database=database,
            seed=args.seed,
            batch=args.batch,
            patience=args.patience,
            warm_start=0 if args.no_warm_start else 4,
            progress=not args.quiet,
        )
        print(result.summary())
        if result.stop_reason.startswith("interrupted"):
            return EXIT_INTERRUPTED
        if result.best is None:
            status = EXIT_NO_RESULT
    print(f"records in {database.safe_url}; see `laytune records --best`")
    return status


_TABLE_COLUMNS = ("record_id", "op", "status", "time_ms", "speedup", "trial", "layouts")


def _cmd_records(args: argparse.Namespace) -> int:
    from laytune.records import open_database, records_dataframe

    db = open_database(args.db)
    filters = {"workload": args.workload, "device": args.device, "op": args.op}
    records = db.best_records(**filters) if args.best else db.records(**filters, status=args.status)
    if args.limit is not None:
        records = records[-args.limit :]
    if not records:
        print(f"no matching records in {db.safe_url}", file=sys.stderr)
        return EXIT_NO_RESULT
    if args.format == "json":
        for record in records:
            print(record.dumps())
        return EXIT_OK
    if args.best:  # speed-ups need each workload's baseline, which is not a best
        frame = db.to_dataframe(**filters)
        frame = frame[frame["record_id"].isin([r.id for r in records])]
    else:
        frame = records_dataframe(records)
    if args.format == "csv":
        frame.to_csv(sys.stdout, index=False)
        return EXIT_OK
    frame["time_ms"] = frame["time_s"] * 1e3
    layout_cols = [c for c in frame.columns if c.startswith("layout.")]
    frame["layouts"] = frame[layout_cols].apply(
        lambda row: "; ".join(
            f"{c[len('layout.') :]}: {v}" for c, v in row.items() if isinstance(v, str)
        ),
        axis=1,
    )
    with _pandas_display():
        print(frame[list(_TABLE_COLUMNS)].to_string(index=False, float_format="{:.4g}".format))
    return EXIT_OK


def _pandas_display() -> Any:
    import pandas as pd

    return pd.option_context("display.max_colwidth", 120, "display.width", 200)


def _cmd_show(args: argparse.Namespace) -> int:
    from laytune.records import open_database

    record = open_database(args.db).get(args.record)
    print(f"record {record.id}: {record.workload_key} on {record.device_name or record.device_key}")
    print(
        f"  status {record.status}" + (f": {record.error_message}" if record.error_message else "")
    )
    if record.value_s is not None:
        times = ", ".join(f"{t * 1e3:.4f}" for t in record.event_times_s)
        print(f"  {record.statistic} {record.value_s * 1e3:.4f} ms over repeats [{times}] ms")
        if record.abandoned:
            print("  abandoned after its first repeats: clearly slower than the best")
    if record.max_error is not None:
        print(f"  max error vs numpy {record.max_error:.3g}")
    print(f"  study {record.study!r}, trial {record.trial}, laytune {record.laytune_version}")
    print("  layouts:")
    for name, layout in record.candidate.layouts:
        pad = record.candidate.pad_value(name)
        print(f"    {name}: {layout.index_map}  ({layout.describe()}, pad {pad})")
    print("  knobs: " + ", ".join(f"{k}={v}" for k, v in record.candidate.knobs))
    if record.program and not args.no_source:
        print(f"  source ({record.source_hash}):")
        print(record.source)
    return EXIT_OK


def _cmd_freeze(args: argparse.Namespace) -> int:
    from laytune.records import freeze, load_frozen, open_database

    db = open_database(args.db)
    if not db.best_records(device=args.device):
        print(f"no verified record in {db.safe_url} to freeze", file=sys.stderr)
        return EXIT_NO_RESULT
    path = freeze(db, args.out, workloads=args.workload or None, device=args.device)
    frozen = load_frozen(path)
    print(f"froze {len(frozen)} workload(s) into {path}")
    for entry in frozen:
        ratio = f"{entry.speedup:.2f}x over identity" if entry.speedup else "no baseline"
        print(
            f"  {entry.workload_key} on {entry.device_name}: {entry.time_s * 1e3:.4f} ms ({ratio})"
        )
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from laytune.records import export

    written = export(args.frozen, args.out)
    for path in written:
        print(path)
    return EXIT_OK


def _cmd_plot(args: argparse.Namespace) -> int:
    from laytune import plots
    from laytune.records import open_database

    db = open_database(args.db)
    options: dict[str, Any] = {}
    if args.kind == "address-map":
        if args.record is None or args.buffer is None:
            raise LaytuneError("plot address-map needs --record ID and --buffer NAME")
        layout = db.get(args.record).candidate.layout(args.buffer)
        figure = plots.plot(args.kind, layout)
    else:
        frame = db.to_dataframe(workload=args.workload, op=args.op)
        if frame.empty:
            print(f"no matching records in {db.safe_url}", file=sys.stderr)
            return EXIT_NO_RESULT
        figure = plots.plot(args.kind, frame, **options)
    figure.savefig(args.out, dpi=120, bbox_inches="tight")
    print(args.out)
    return EXIT_OK


# -- parser -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    from laytune.ops import DTYPES
    from laytune.search import STRATEGIES

    parser = argparse.ArgumentParser(
        prog="laytune",
        description="Search memory layouts of OpenCL kernels, keep every measurement, "
        "freeze the best layouts.",
        epilog="exit codes: 0 ok, 1 nothing found, 2 user error, 130 interrupted. "
        "The database defaults to $LAYTUNE_DB or sqlite:///laytune.db.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def db_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--db", default=_default_db(), metavar="URL", help="records database")

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
        "--strategy", choices=sorted(STRATEGIES), default="tpe", help="search strategy (tpe)"
    )
    tune.add_argument("--patience", type=_positive, help="stop after K trials without a new best")
    tune.add_argument("--batch", type=_positive, default=8, help="candidates built per batch (8)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--device", help="index, platform:device, or name substring")
    tune.add_argument("--no-warm-start", action="store_true", help="do not try records first")
    tune.add_argument("--quiet", action="store_true", help="no progress lines")
    tune.add_argument(
        "--demo",
        action="store_true",
        help="the examples of the demo operators (a transpose, a matmul)",
    )
    db_option(tune)
    tune.set_defaults(run=_cmd_tune)

    records = commands.add_parser("records", help="list records")
    records.add_argument("--best", action="store_true", help="best per workload and device")
    records.add_argument("--workload", help="workload key")
    records.add_argument("--op", help="operator name")
    records.add_argument("--device", help="device key")
    records.add_argument("--status", help="ok, rejected, build, run, timeout, wrong_result, ...")
    records.add_argument("--limit", type=_positive, help="only the last N")
    records.add_argument("--format", choices=("table", "csv", "json"), default="table")
    db_option(records)
    records.set_defaults(run=_cmd_records)

    show = commands.add_parser("show", help="one record: layouts, knobs, times, source")
    show.add_argument("record", type=int, help="record id")
    show.add_argument("--no-source", action="store_true", help="leave out the OpenCL source")
    db_option(show)
    show.set_defaults(run=_cmd_show)

    freeze = commands.add_parser("freeze", help="write the best layouts to a frozen file")
    freeze.add_argument("--out", default="laytune-frozen.json", help="(laytune-frozen.json)")
    freeze.add_argument("--workload", action="append", help="only this workload key")
    freeze.add_argument("--device", help="only this device key")
    db_option(freeze)
    freeze.set_defaults(run=_cmd_freeze)

    export = commands.add_parser("export", help="OpenCL source + JSON of a frozen file")
    export.add_argument("frozen", help="frozen file")
    export.add_argument("--out", required=True, help="folder to write into")
    export.set_defaults(run=_cmd_export)

    plot = commands.add_parser("plot", help="write a figure of the records")
    plot.add_argument(
        "kind", choices=("convergence", "families", "speedup", "pareto", "address-map")
    )
    plot.add_argument("--out", required=True, help="image file (.png, .svg, .pdf)")
    plot.add_argument("--workload", help="workload key")
    plot.add_argument("--op", help="operator name")
    plot.add_argument("--record", type=int, help="address-map: the record")
    plot.add_argument("--buffer", help="address-map: the buffer")
    db_option(plot)
    plot.set_defaults(run=_cmd_plot)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except LaytuneError as err:
        print(f"laytune: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyError as err:  # a buffer or record name that does not exist
        print(f"laytune: error: {err.args[0] if err.args else err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("laytune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
