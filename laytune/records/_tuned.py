"""Frozen programs with the device's best recorded conversion kernels.

A candidate's program packs its inputs and unpacks its outputs with the
kernels ``laytune.codegen`` generates without knobs. Where the records of a
device hold a tuned kernel for the same conversion (a conversion workload,
:class:`laytune.space.ConversionWorkload`), a frozen program uses that one
instead, unless the candidate's own kernel was measured faster; everywhere
else it keeps the generated kernel. That is the choice
:func:`laytune.records.price_record` makes, so a frozen entry's time is the
time of the kernels it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from laytune.codegen import KernelProgram, Launch, conversion_kernel
from laytune.layout import identity
from laytune.space import Candidate, ConversionWorkload

__all__ = ["with_tuned_conversions"]


def with_tuned_conversions(
    program: KernelProgram,
    candidate: Candidate,
    conversions: Any,
    own: Mapping[tuple[str, str], float] | None = None,
) -> tuple[KernelProgram, tuple[tuple[str, str, str], ...]]:
    """``program`` with each pack and unpack launch of a global buffer run by
    the best conversion kernel ``conversions`` (a
    :class:`laytune.records.RecordedConversions`) records for its layouts, and
    what each launch runs now: ``(buffer, "pack" | "unpack", "conversion
    record N" | "generated" | "generated (the logical layout)" | "generated
    (faster than conversion record N)")``, and ``"none (aliased)"`` for an
    aliased buffer (``BufferSpec.aliased``), which has no launch: the
    kernels use the caller's array itself. ``own`` holds the times measured
    with the candidate of its generated kernels, ``(direction, buffer) ->
    seconds``: a recorded kernel replaces one only when it is no slower, as
    the candidate's price chose. With no conversion recorded the program is
    ``program`` unchanged; else the tuned kernels are added to its source
    (the generated ones stay, unused)."""
    own = own or {}
    source = program.source
    notes = []
    launches: dict[str, list[Launch]] = {"pack": [], "unpack": []}
    for direction, roles in (("pack", ("input", "inout")), ("unpack", ("output", "inout"))):
        notes += [
            (spec.name, direction, "none (aliased)")
            for spec in program.buffers
            if spec.aliased and spec.role in roles
        ]
    for direction in ("pack", "unpack"):
        for launch in getattr(program, direction):
            buffer = launch.args[0].buffer
            spec = program.buffer(buffer)
            found = None
            layouts = candidate.layout_map
            if spec.memory == "global" and buffer in layouts and layouts[buffer].is_identity:
                # a copy of the caller's array, as the candidate was measured with
                launches[direction].append(launch)
                notes.append((buffer, direction, "generated (the logical layout)"))
                continue
            if spec.memory == "global" and buffer in layouts:
                layout, logical = layouts[buffer], identity(spec.shape)
                pad = candidate.pad_value(buffer) if direction == "pack" else None
                src, dst = (logical, layout) if direction == "pack" else (layout, logical)
                found = conversions.best(src, dst, spec.dtype, pad)
            if found is None:
                launches[direction].append(launch)
                notes.append((buffer, direction, "generated"))
                continue
            measured = own.get((direction, buffer))
            if measured is not None and measured < float(found.value_s):
                launches[direction].append(launch)
                notes.append(
                    (buffer, direction, f"generated (faster than conversion record {found.id})")
                )
                continue
            name = f"{launch.kernel}_tuned"
            workload = ConversionWorkload(src, dst, spec.dtype, pad)
            kernel = conversion_kernel(workload, found.candidate, name)
            source = source.rstrip("\n") + "\n\n" + kernel.source + "\n"
            launches[direction].append(
                Launch(name, launch.args, kernel.global_sizes, kernel.local_size)
            )
            notes.append((buffer, direction, f"conversion record {found.id}"))
    tuned = replace(
        program, source=source, pack=tuple(launches["pack"]), unpack=tuple(launches["unpack"])
    )
    return tuned, tuple(notes)
