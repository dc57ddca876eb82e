"""A matmul whose weights come from memory: reading the next panel ahead, by hand.

    python -m bench.hand_stream [--shape M,N,K] [--rounds N] [--repeats N]

In a model, a matmul's weights (BERT's FFN: 768 x 3072, 9.4 MiB) were last
read a whole inference ago, and on a host whose L3 other tenants share they
come back partly from memory: BERT's FFN matmul took 2.33-2.39 ms in the
plan where its record took 1.94 ms alone. The generator's kernel for it is
the 8 x 2L outer product over packed panels (``A`` as ``[i // 8, k, i % 8]``,
``B`` as ``[j // 2L, k, j % 2L]``) in work-groups that walk down the rows
under one ``B`` panel: the group's first row block reads the panel from
memory while it computes a sixteenth of the group's work, faster than one
core draws from memory, and the other row blocks find it in L2.

Variants, the same kernel with one line added to its reduce loop (its
source edited here), and the generator's own:

- ``plain``: the generator's kernel;
- ``touch next panel``: every 8 steps of ``k`` each work-item loads one
  cache line of the panel the next work-group along the columns reads, its
  own share of it, so that the group's items together pull the whole next
  panel while they compute (the value is used as ``dummy * 0``, which the
  compiler keeps: a load, not a prefetch hint);
- ``prefetch() next panel``: the same lines through OpenCL's ``prefetch``;
- ``generated prefetch``: what the lessons of the two above became, the
  generator's kernel with its ``prefetch`` knob: the same lines through
  clang's ``__builtin_prefetch``, a hint that does not wait for its line
  (where the space offers the knob: the weights outgrow the device's cache).

Each is measured by laytune's runner (verified against numpy), warm (its
repeats back to back) and cold (a 64 MiB fill before every repeat, so the
panels come from memory), in interleaved rounds; the kernel's median time.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
from collections.abc import Sequence
from typing import Any

from laytune import layout as L
from laytune import ops
from laytune.codegen import KernelProgram, lower
from laytune.device_info import DeviceInfo
from laytune.runners import Builder, MeasureConfig, RunInput, Runner, default_device
from laytune.space import Candidate, baseline_knobs, check_candidate

#: steps of ``k`` between two touches of the next panel: one cache line of
#: 16 floats each time
EVERY = 8
LINE = 16
COLD_BYTES = 64 << 20


def panel_candidate(workload: Any, lanes: int, group: int) -> Candidate:
    """The generator's 8 x 2L panel kernel for ``C[i, j] += A[i, k] * B[k, j]``."""
    m, k = workload.buffer("A").shape
    n = workload.buffer("B").shape[1]
    layouts = {
        "A": L.custom((m, k), "lambda i, j: [i // 8, j, i % 8]"),
        "B": L.custom((k, n), f"lambda i, j: [j // {2 * lanes}, i, j % {2 * lanes}]"),
        "C": L.identity((m, n)),
    }
    knobs = {
        **baseline_knobs(workload),
        "block.i": 8,
        "block.j": 2 * lanes,
        "group.i": group,
        "group.j": 1,
        "vector": lanes,
        "vector_axis": "j",
    }
    return Candidate.make(layouts, knobs)


def variants(program: KernelProgram, workload: Any, lanes: int, group: int) -> dict:
    """The generator's kernel for :func:`panel_candidate` and its two edited
    twins (see the module docstring)."""
    k, n = workload.buffer("B").shape
    panel, panels = k * 2 * lanes, n // (2 * lanes)  # floats per panel of B, panels
    source = program.source
    header = f"for (int k = 0; k < {k}; ++k) {{\n"
    if source.count(header) != 1:
        raise SystemExit(f"the generated kernel's reduce loop is not one {header.strip()!r}")
    share = panel // group  # floats of the next panel per work-item
    if share < (k // EVERY) * LINE:
        raise SystemExit(f"{k // EVERY} lines per work-item would run past its {share} floats")
    at = (
        f"B + (min(j_blk + 1, {panels - 1}) * {panel} + (int)get_local_id(1) * {share}"
        f" + (k / {EVERY}) * {LINE})"
    )
    touch = f"if (k % {EVERY} == 0) dummy += *({at});"
    hint = f"if (k % {EVERY} == 0) prefetch({at}, {LINE});"
    first_store = re.search(r"\n(\s*)vstore\d+\(acc0, ", source)
    if first_store is None:
        raise SystemExit("the generated kernel does not store acc0 with a vstore")
    indent = first_store.group(1)

    def edited(line: str, dummy: bool) -> KernelProgram:
        text = source.replace(header, header + f"        {line}\n")
        if dummy:
            text = text.replace(header, f"float dummy = 0.0f;\n{indent}{header}", 1)
            text = text.replace(
                first_store.group(0), f"\n{indent}acc0 += dummy * 0.0f;{first_store.group(0)}", 1
            )
        return dataclasses.replace(program, source=text)

    return {
        "plain": program,
        "touch next panel": edited(touch, dummy=True),
        "prefetch() next panel": edited(hint, dummy=False),
    }


def generated(workload: Any, candidate: Candidate, device: DeviceInfo) -> dict:
    """The generator's kernel of ``candidate`` with the ``prefetch`` knob, as
    ``{"generated prefetch": program}``; empty where the space refuses the
    knob there (the weights fit the cache, or no ``__builtin_prefetch``)."""
    ahead = Candidate.make(candidate.layout_map, {**candidate.knob_map, "prefetch": True})
    if not check_candidate(workload, ahead, device).ok:
        return {}
    return {"generated prefetch": lower(workload, ahead, device)}


def measure(
    device: Any, workload: Any, programs: dict, rounds: int, repeats: int
) -> dict[str, dict[str, list[float]]]:
    """Per mode (warm, cold) and variant, the kernel's median time of each round."""
    names = list(programs)
    with Builder(device) as builder:
        builds = builder.build([programs[n] for n in names])
    modes = {
        "warm": MeasureConfig(warmup=3, repeats=repeats, measure_conversions=False),
        "cold": MeasureConfig(
            warmup=3,
            repeats=repeats,
            measure_conversions=False,
            flush_cache=True,
            flush_bytes=COLD_BYTES,
        ),
    }
    out: dict[str, dict[str, list[float]]] = {}
    for mode, config in modes.items():
        times: dict[str, list[float]] = {n: [] for n in names}
        with Runner(device, config) as runner:
            for _ in range(rounds):
                runs = runner.run([RunInput(b, workload) for b in builds])
                for name, run in zip(names, runs, strict=True):
                    if not run.ok:
                        raise SystemExit(f"{name} ({mode}): {run.error_kind}: {run.error_message}")
                    times[name].append(run.value_s)
        out[mode] = times
    return out


def report(
    results: dict[str, dict[str, list[float]]], flops: int, case: str, device: str
) -> list[str]:
    """A markdown table: each variant's median over the rounds, warm and
    cold, its rate, and the plain kernel's time over it."""
    lines = [
        f"# {case} on {device}: kernel medians",
        "",
        "| variant | warm (ms) | GFLOP/s | plain / it | cold (ms) | GFLOP/s | plain / it |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    med = {
        mode: {n: statistics.median(t) for n, t in times.items()} for mode, times in results.items()
    }
    for name in med["warm"]:
        cells = []
        for mode in ("warm", "cold"):
            t = med[mode][name]
            cells += [f"{t * 1e3:.3f}", f"{flops / t / 1e9:.0f}", f"{med[mode]['plain'] / t:.2f}x"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="128,3072,768", help="M,N,K (BERT's FFN)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    m, n, k = (int(x) for x in args.shape.split(","))
    device = default_device()
    lanes = device.info.float_lanes()
    workload = ops.matmul(m, n, k)
    group = max(1, min(16, m // 8))
    candidate = panel_candidate(workload, lanes, group)
    verdict = check_candidate(workload, candidate, device.info)
    if not verdict.ok:
        raise SystemExit(f"the panel kernel does not fit {args.shape}: {verdict.reasons[0]}")
    programs = variants(lower(workload, candidate, device.info), workload, lanes, group)
    programs.update(generated(workload, candidate, device.info))
    results = measure(device, workload, programs, args.rounds, args.repeats)
    print("\n".join(report(results, 2 * m * n * k, f"matmul {m} x {n} x {k}", device.info.name)))


if __name__ == "__main__":
    main()
