"""Running KernelPrograms on the test device, and drawing random candidates."""

from __future__ import annotations

import dataclasses
import os
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from laytune.codegen import KernelProgram
from laytune.device_info import DeviceInfo
from laytune.runners import build_source, default_device
from laytune.space import Candidate


@dataclass
class Env:
    device: cl.Device
    context: cl.Context
    queue: cl.CommandQueue
    info: DeviceInfo


def open_env() -> Env:
    """The device laytune picks by default (``LAYTUNE_DEVICE`` selects another):
    the first here that builds a kernel, Intel's CPU runtime on x86 machines.
    PoCL 3.0-rc2 from PyPI builds kernels on some of these machines but
    miscompiles float16 component access (``r.s9``, ``r.sa``), so the tests
    run where users run."""
    device = default_device().open()
    context = cl.Context([device])
    return Env(device, context, cl.CommandQueue(context), DeviceInfo.from_cl_device(device))


def cpu_form(info: DeviceInfo) -> DeviceInfo:
    """``info`` where the device is a CPU; on another device (a GPU), its
    limits described as a CPU's, the host's SIMD as its lanes. The tests
    that pin the CPU's form of a derived start (vectors along the columns,
    panels, dot products along ``k``) derive it from this on any device, and
    its kernels still build and run there; a GPU's own form, warps along the
    columns, is pinned in ``test_lockstep_starts``. Its compute units are
    the host's cores (a CPU runtime's), its work-group limits the device's,
    so that the kernels launch there."""
    if info.is_cpu:
        return info
    return dataclasses.replace(
        info,
        device_type="CPU",
        compute_units=os.cpu_count() or 1,
        lockstep_width=0,
        preferred_vector_widths=(),
        sub_group_sizes=(),
    )


#: The build option that turns the device compiler's optimisations off: a
#: conv's kernel then builds in an eighth of the time (Intel's CPU runtime),
#: and runs what the source says, which is what a test of the generated
#: source checks. Jobs never build with it.
UNOPTIMISED = "-cl-opt-disable"


def build(env: Env, program: KernelProgram, *, optimise: bool = True) -> cl.Program:
    """``program`` built on the test device as a job builds it, or with the
    compiler's optimisations off (``optimise=False``, :data:`UNOPTIMISED`)."""
    options = [*program.build_options, *(() if optimise else (UNOPTIMISED,))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return build_source(env.context, program.source, options)
        except cl.Error as err:
            raise AssertionError(f"build failed: {err}\n{program.source}") from None


#: Of a series of candidates a test runs against its reference, one in this
#: many is built as a job builds it (the first, then every fourth); the
#: others with the compiler's optimisations off, an eighth of a conv
#: kernel's build time. Both run the generated source; the optimised builds
#: also catch source whose meaning the optimiser may change (a ``restrict``
#: that an aliased buffer breaks).
OPTIMISED_EVERY = 4


def build_in_series(env: Env, program: KernelProgram, index: int) -> cl.Program:
    """The ``index``-th program of a series built: optimised for one in
    :data:`OPTIMISED_EVERY`, unoptimised otherwise."""
    return build(env, program, optimise=index % OPTIMISED_EVERY == 0)


def run_one_item(env: Env, source: str, data: np.ndarray) -> np.ndarray:
    """What the kernel ``t(src, dst)`` of ``source``, run by one work-item,
    writes into ``dst`` (as large as ``data``) from ``src`` holding ``data``."""
    program = build_source(env.context, source)
    mf = cl.mem_flags
    src = cl.Buffer(env.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data)
    dst = cl.Buffer(env.context, mf.READ_WRITE, size=data.nbytes)
    program.t(env.queue, (1,), None, src, dst)
    out = np.empty_like(data)
    cl.enqueue_copy(env.queue, out, dst)
    env.queue.finish()
    return out


def _physical(env: Env, spec: Any, fill: float = np.nan) -> Any:
    mf = cl.mem_flags
    dtype = np.dtype(spec.dtype)
    if spec.memory == "image2d":
        fmt = cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT)
        return cl.create_image(env.context, mf.READ_WRITE, fmt, shape=spec.image_shape)
    host = np.full(int(np.prod(spec.physical_shape)), fill, dtype=dtype)
    return cl.Buffer(env.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)


def read_physical(env: Env, spec: Any, mem: Any) -> np.ndarray:
    if spec.memory == "image2d":
        width, height = spec.image_shape
        out = np.empty((height, width, 4), np.float32)
        cl.enqueue_copy(env.queue, out, mem, origin=(0, 0), region=(width, height))
        return out.reshape(-1)
    out = np.empty(int(np.prod(spec.physical_shape)), np.dtype(spec.dtype))
    cl.enqueue_copy(env.queue, out, mem)
    return out


def run(
    env: Env, program: KernelProgram, inputs: dict[str, np.ndarray], built: cl.Program | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Pack the inputs, run compute, unpack the outputs: (logical outputs, physical of all).
    An aliased buffer is one device buffer for both views (an input's holds
    the input, an output's starts as NaN)."""
    prg = built or build(env, program)
    mf = cl.mem_flags
    logical: dict[str, Any] = {}
    physical: dict[str, Any] = {}
    for spec in program.buffers:
        if spec.role == "input":
            data = np.ascontiguousarray(inputs[spec.name], dtype=spec.dtype)
            logical[spec.name] = cl.Buffer(
                env.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data
            )
        elif spec.aliased:
            logical[spec.name] = _physical(env, spec)
        else:
            size = int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize
            logical[spec.name] = cl.Buffer(env.context, mf.READ_WRITE, size=size)
        physical[spec.name] = logical[spec.name] if spec.aliased else _physical(env, spec)
    views = {"logical": logical, "physical": physical}
    for launch in (*program.pack, *program.compute, *program.unpack):
        kernel = getattr(prg, launch.kernel)
        args = [views[a.view][a.buffer] for a in launch.args]
        kernel(env.queue, launch.global_size, launch.local_size, *args)
    outputs = {}
    for spec in program.buffers:
        if spec.role == "output":
            out = np.empty(spec.shape, np.dtype(spec.dtype))
            cl.enqueue_copy(env.queue, out, logical[spec.name])
            outputs[spec.name] = out
    phys = {s.name: read_physical(env, s, physical[s.name]) for s in program.buffers}
    env.queue.finish()
    return outputs, phys


class RandomTrial:
    """An optuna-like trial that picks every categorical at random."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        return self.rng.choice(list(choices))


class StagingTrial(RandomTrial):
    """A random trial steered to local staging: the logical order and
    ``local_stage=True`` wherever they are offered; the rules then narrow the
    work-group to what covers the staging block."""

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        choices = list(choices)
        knob = name.split("|")[0]
        if knob == "order" and "logical" in choices:
            return "logical"
        if knob == "local_stage" and True in choices:
            return True
        return super().suggest_categorical(name, choices)


class VectorTrial(RandomTrial):
    """A random trial steered to vectors: layouts that move or block an axis
    (permute, block, panel) and a vector axis other than the innermost
    spatial one wherever they are offered."""

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        choices = list(choices)
        knob = name.split("|")[0]
        if knob.startswith("layout:") and not knob.endswith(".local"):
            moved = [c for c in choices if c.startswith(("permute", "block", "panel"))]
            return self.rng.choice(moved or choices)
        if knob == "vector_axis":
            axes = [c for c in choices if c]
            outer = axes[:-1] if len(axes) > 1 else axes
            return self.rng.choice(outer or choices)
        return super().suggest_categorical(name, choices)


_ABSENT = object()  # a slot a candidate lacks: equal only to itself


def _slots_and_choices(candidate: Candidate) -> tuple[tuple[tuple[str, ...], ...], tuple]:
    """What a candidate chose, one choice per buffer's layout, knob and pad
    value, in the candidate's order: ((layout names, knob names, pad
    names), the choices in that order)."""
    parts = [
        tuple(zip(*pairs, strict=True)) or ((), ())
        for pairs in (candidate.layouts, candidate.knobs, candidate.pad_values)
    ]
    return tuple(names for names, _ in parts), sum((values for _, values in parts), ())


def _slot_names(names: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    return tuple(
        f"{kind}:{name}" for kind, part in zip(_KINDS, names, strict=True) for name in part
    )


_KINDS = ("layout", "knob", "pad")


def choice_pairs(candidates: Sequence[Candidate]) -> np.ndarray:
    """Per candidate (a row), an id of every pair of its choices
    (:func:`_slots_and_choices`; a slot another candidate has and this one lacks,
    a local tile or a knob, counts as the choice "absent"); equal ids,
    equal pairs."""
    # Candidates that fill the same slots (most of a space) are read as one
    # table: their choices in slot order, numbered per slot.
    by_slots: dict[tuple, tuple[list[int], list[tuple]]] = {}
    for row, candidate in enumerate(candidates):
        names, choices = _slots_and_choices(candidate)
        rows, table = by_slots.setdefault(names, ([], []))
        rows.append(row)
        table.append(choices)
    slots = sorted({slot for names in by_slots for slot in _slot_names(names)})
    column = {slot: index for index, slot in enumerate(slots)}
    numbers: list[dict[Any, int]] = [{} for _ in slots]
    count = 0
    ids = np.empty((len(candidates), len(slots)), dtype=np.int64)
    for names, (rows, table) in by_slots.items():
        named = _slot_names(names)
        for slot, choices in zip(named, zip(*table, strict=True), strict=True):
            seen = numbers[column[slot]]
            for choice in dict.fromkeys(choices):  # numbered in order of appearance
                if choice not in seen:
                    seen[choice] = count
                    count += 1
            ids[rows, column[slot]] = [seen[choice] for choice in choices]
        for slot in [s for s in slots if s not in named]:  # lacked: "absent"
            seen = numbers[column[slot]]
            if _ABSENT not in seen:
                seen[_ABSENT] = count
                count += 1
            ids[rows, column[slot]] = seen[_ABSENT]
    first, second = np.triu_indices(len(slots), 1)
    return ids[:, first] * count + ids[:, second]


def pairwise_cover(
    candidates: Sequence[Candidate], pairs: np.ndarray | None = None
) -> list[Candidate]:
    """Candidates of ``candidates`` that hold, among them, every pair of
    choices (:func:`_slots_and_choices`: two buffers' layouts, a layout and a knob,
    two knobs) that any candidate of ``candidates`` holds together, in their
    order: a covering array of strength two, picked greedily (first the
    candidates that bring many pairs not yet held, then those that bring
    fewer, down to one). ``pairs``: their :func:`choice_pairs`, when the
    caller has them."""
    if not candidates:
        return []
    if pairs is None:
        pairs = choice_pairs(candidates)
    held = np.ones(int(pairs.max()) + 1, dtype=bool)
    held[pairs.ravel()] = False  # ids no candidate holds count as held
    picked: list[int] = []
    threshold = pairs.shape[1]
    while not held.all():
        threshold = max(1, threshold // 2)
        # a row's count of new pairs only falls as pairs are held: rows
        # below the threshold now stay below it in this pass
        rows = np.flatnonzero(np.count_nonzero(~held[pairs], axis=1) >= threshold)
        for k in rows:
            if np.count_nonzero(~held[pairs[k]]) >= threshold:
                picked.append(int(k))
                held[pairs[k]] = True
    return [candidates[k] for k in sorted(picked)]
