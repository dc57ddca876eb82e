"""Where a conversion's time goes: the NCHW16c -> NCHW unpack (or, with
``--transpose``, the 2-D transpose) against itself without its shuffles, and
against a tuned copy of the same bytes, in one run.

    python -m bench.nchw16c_profile [--shapes 1,64,224,224;1,64,448,448] [--repeats N]
        [--rounds N] [--out FILE]
    python -m bench.nchw16c_profile --transpose [--shapes 4096,4096] ...

On the default device (``LAYTUNE_DEVICE`` picks another). For each shape
(NCHW; with ``--transpose`` rows, columns: the transpose of a square matrix
is its own pack and unpack), each row taking turns with the tuned copy
(``bench.conversions.tuned_copy``):

* ``generic``: the kernel codegen emits without knobs;
* ``tile 16x16``: the conversion knob ``kernel=tile`` (16 vector loads of
  16 channels, a 64-shuffle network, 16 stores of 16 columns), with plain
  and nontemporal stores (where the device has the built-in);
* ``tile 16x16, no shuffles``: the same source with the shuffle network cut
  out (each loaded vector stored where the transposed one went): the same
  loads, stores and addresses, no transpose. Its output is wrong on purpose;
  it says what the memory traffic alone costs, so that the gap to the full
  tile is what the shuffles cost;
* with ``--transpose``, also ``local``: the first ``__local`` tile the
  conversion tunes start from (at 4096 x 4096: 64 x 64, 8-wide vectors, 8
  items, nontemporal stores, the kernel they picked in
  ``bench/results/conversions.md``).

Every kept variant's output is checked against numpy first (the ablation's
is not: it is not a conversion). Written to ``bench/results/nchw16c_profile.md``
(``transpose_profile.md`` with ``--transpose``).
"""

from __future__ import annotations

import argparse
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from bench import _report
from bench.conversions import _check, _time_pair, conversion_launch, tuned_copy
from laytune import layout as L
from laytune.codegen._convert import conversion_kernel
from laytune.runners import build_source, default_device
from laytune.search import conversion_starts
from laytune.space import Candidate, ConversionSpace, ConversionWorkload

TILE = {"kernel": "tile", "axis": 1, "items": 16, "vector": 16, "group": 0}


def without_shuffles(source: str) -> str:
    """The tile kernel's source with its shuffle network cut out: each store
    writes the loaded vector of the same index (``r<k>``) instead of the
    transposed one (``t<last>_<k>``)."""
    lines = [line for line in source.splitlines() if "shuffle2(" not in line]
    text = "\n".join(lines)
    return re.sub(r"\bt\d+_(\d+)\b", lambda m: f"r{m.group(1)}", text)


def _ablation_launch(
    context: Any, workload: ConversionWorkload, candidate: Candidate, like: tuple
) -> tuple:
    import pyopencl as cl

    kernel = conversion_kernel(workload, candidate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = build_source(context, without_shuffles(kernel.source))
    _, global_size, local_size, args = like
    return (cl.Kernel(built, kernel.name), global_size, local_size, args)


def _first_local(workload: ConversionWorkload, device: Any) -> Candidate:
    """The first ``__local`` tile a conversion tune starts from."""
    starts = conversion_starts(ConversionSpace(workload, device.info), 6)
    return next(c for c in starts if c.knob("kernel") == "local")


def main(argv: list[str] | None = None) -> None:
    import pyopencl as cl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes",
        default=None,
        type=lambda text: [tuple(int(v) for v in s.split(",")) for s in text.split(";")],
        help="NCHW shapes (1,64,224,224;1,64,448,448), or with --transpose rows,cols (4096,4096)",
    )
    parser.add_argument(
        "--transpose", action="store_true", help="profile the 2-D transpose instead"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="report file (default bench/results/...)")
    args = parser.parse_args(argv)
    device = default_device()
    context = cl.Context([device.open()])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    streaming = device.info.has_builtin("nontemporal_store")
    print(f"device: {device.name}")
    rows, notes = [], []
    default = [(4096, 4096)] if args.transpose else [(1, 64, 224, 224), (1, 64, 448, 448)]
    for shape in args.shapes or default:
        if args.transpose:
            workload = ConversionWorkload(L.identity(shape), L.permute(shape, (1, 0)))
            tile = {**TILE, "axis": 0}
        else:
            workload = ConversionWorkload(L.block(shape, 1, 16), L.identity(shape))
            tile = TILE
        floats = int(np.prod(shape))
        ceiling, what = tuned_copy(context, queue, floats, args.repeats, streaming)
        notes.append(f"copy of {floats} floats ({shape}): {what}")
        # (title, candidate, whether to time it without its shuffles as well)
        variants = [
            ("generic", Candidate.make({}), False),
            ("tile 16x16", Candidate.make({}, tile), True),
        ]
        if streaming and not device.info.holds(floats * 4):  # the space's rule (StoreStep)
            nontemporal = Candidate.make({}, {**tile, "store": "nontemporal"})
            variants.append(("tile 16x16, nontemporal stores", nontemporal, True))
        if args.transpose:
            local = _first_local(workload, device)
            store = local.knob("store", "plain")
            variants.append((f"local {local.knob('tile')}, {store} stores", local, False))
        launches = []
        for title, candidate, ablate in variants:
            launch = conversion_launch(context, workload, candidate, device)
            _check(queue, workload, launch)
            launches.append((title, launch))
            if ablate:
                ablated = _ablation_launch(context, workload, candidate, launch)
                launches.append((f"{title}, no shuffles (wrong output: timing only)", ablated))
        for title, launch in launches:
            copy_s, seconds = _time_pair(queue, ceiling, launch, args.repeats, args.rounds)
            gbs = workload.bytes / seconds / 1e9
            row = (
                f"{','.join(map(str, shape))}: {title}",
                f"{seconds * 1e3:.3f}",
                f"{gbs:.1f}",
                f"{100 * copy_s / seconds:.1f} %",
                f"{8 * floats / copy_s / 1e9:.1f}",
            )
            rows.append(row)
            print("  ".join(row), flush=True)
    text = "\n".join(
        [
            "# 2-D transpose: where its time goes"
            if args.transpose
            else "# NCHW16c -> NCHW: where the unpack's time goes",
            "",
            *_report.environment(device),
            f"- best event time over {args.rounds} rounds of {args.repeats} launches, each row "
            "taking turns with the tuned copy of the same size",
            *(f"- {note}" for note in notes),
            "",
            *_report.table(("case", "ms", "GB/s", "of copy", "copy GB/s"), rows, "lrrrr"),
            "",
        ]
    )
    name = "transpose_profile.md" if args.transpose else "nchw16c_profile.md"
    written = _report.write(name, text, args.out)
    print(f"written to {_report.shown(written)}")


if __name__ == "__main__":
    main()
