"""Lowering a conversion workload and a conversion candidate to a KernelProgram.

A :class:`~laytune.space.ConversionWorkload` converts a buffer from layout
``S`` to layout ``L``: one gather ``dst[q] = src[S(L^-1(q))]`` over the
physical positions ``q`` of ``L`` (padding gets the pad value). The
candidate's knobs (:data:`laytune.space.CONVERSION_KNOBS`) pick the kernel:

* none: the generic kernel, today's pack kernel from the logical layout,
  unpack kernel to it, or a gather between two other layouts;
* ``gather``: each work-item ``items`` runs of ``vector`` consecutive
  destination elements (vector loads where the source is consecutive too);
* ``tile``: a register tile of ``vector`` source elements along ``axis`` by
  ``items`` destination elements along the innermost axis
  (:func:`~laytune.codegen._transpose.register_tile`);
* ``local``: a work-group moves a ``tile`` through ``__local`` memory laid out
  as the candidate's ``tile.local`` layout
  (:func:`~laytune.codegen._transpose.local_tile`).

The program has two buffers, ``src`` and ``dst``, both flat physical arrays
(their logical view is the physical one), and one compute launch.
"""

from __future__ import annotations

from laytune.codegen._conversion import ConversionKernel, pack_kernel, unpack_kernel
from laytune.codegen._emit import Scope, pointer, storage_ctype, vector_store
from laytune.codegen._gather import (
    as_values,
    condition_c,
    pad_text,
    row_major,
    steps_by_one,
    work_items,
)
from laytune.codegen._program import ArgRef, BufferSpec, KernelProgram, Launch
from laytune.codegen._source import Source, indent
from laytune.codegen._transpose import local_tile, register_tile, tile_attributes
from laytune.device_info import DeviceInfo
from laytune.exceptions import LayoutRejectedError
from laytune.layout import UNDEF, Var, substitute
from laytune.space import Candidate, ConversionSpace, ConversionWorkload, source_offset

__all__ = ["conversion_kernel", "lower_conversion_workload"]


def _generic(workload: ConversionWorkload, name: str) -> ConversionKernel:
    src, dst = workload.src, workload.dst
    if src.is_identity:
        return pack_kernel("dst", dst, workload.dtype, workload.pad_value, kernel_name=name)
    if dst.is_identity:
        return unpack_kernel("src", src, workload.dtype, kernel_name=name)
    return _gather(workload, name, vector=1, items=4 if dst.physical_shape[-1] % 4 == 0 else 1)


def _gather(
    workload: ConversionWorkload,
    name: str,
    vector: int,
    items: int,
    group: int = 0,
    nontemporal: bool = False,
) -> ConversionKernel:
    """``items`` runs of ``vector`` consecutive destination elements per work-item."""
    ctype = storage_ctype(workload.dtype)
    domain, offset, conditions = source_offset(workload.src, workload.dst)
    scope = Scope()
    q = [scope.var(f"q{t}", 0, e - 1) for t, e in enumerate(domain)]
    tests = [(substitute(c.expr, q), c.lo, c.hi) for c in conditions]
    itype = "int" if scope.fits_int(row_major(q, domain)) and scope.fits_int(offset) else "long"
    steps = [1] * (len(domain) - 1) + [vector * items]
    body, base, _, count = work_items(scope, itype, domain, q, steps)
    inner = len(domain) - 1
    consecutive = vector > 1 and not tests and steps_by_one(scope, offset, q, inner)
    pad = pad_text(workload.pad_value, workload.dtype)
    for item in range(items):
        at = [Var(v.index) + (item * vector if t == inner else 0) for t, v in enumerate(base)]
        dst_at = pointer("dst", scope.c(row_major(at, domain)))
        if consecutive:
            src_at = pointer("src", scope.c(substitute(offset, as_values(scope, at))))
            value = f"vload{vector}(0, {src_at})"
            body.append(vector_store(value, vector, dst_at, ctype, nontemporal))
            continue
        values = []
        for lane in range(vector):
            point = as_values(scope, [a + (lane if t == inner else 0) for t, a in enumerate(at)])
            read = f"src[{scope.c(substitute(offset, point))}]"
            test = condition_c(scope, tests, point)
            values.append(f"({test}) ? {read} : {pad}" if test else read)
        if vector == 1:
            body.append(f"dst[{scope.c(row_major(at, domain))}] = {values[0]};")
        else:
            value = f"({ctype}{vector})({', '.join(values)})"
            body.append(vector_store(value, vector, dst_at, ctype, nontemporal))
    return _kernel(
        workload,
        name,
        f"gather: {items} x {vector} consecutive elements per work-item",
        body,
        (count,),
        (group,) if group else None,
    )


def _kernel(
    workload: ConversionWorkload,
    name: str,
    note: str,
    body: list[str],
    global_size: tuple[int, ...],
    local_size: tuple[int, ...] | None,
    attributes: str = "",
) -> ConversionKernel:
    ctype = storage_ctype(workload.dtype)
    head = [
        f"/* convert {workload.src.index_map} -> {workload.dst.index_map} on {workload.shape}",
        f"   {note} */",
        f"__kernel {attributes}void {name}(__global const {ctype}* restrict src, "
        f"__global {ctype}* restrict dst) {{",
    ]
    return ConversionKernel(name, "\n".join([*head, *indent(body), "}"]), global_size, local_size)


def conversion_kernel(
    workload: ConversionWorkload, candidate: Candidate, name: str = "convert"
) -> ConversionKernel:
    """The kernel ``name(src, dst)`` of ``candidate`` (see the module docstring).
    Knobs that do not fit the workload raise LayoutRejectedError."""
    knobs = candidate.knob_map
    kind = knobs.get("kernel")
    if kind is None:
        return _generic(workload, name)
    vector, items = int(knobs.get("vector", 1)), int(knobs.get("items", 1))
    group = int(knobs.get("group", 0))
    nontemporal = knobs.get("store") == "nontemporal"
    domain, offset, conditions = source_offset(workload.src, workload.dst)
    if kind == "gather":
        return _gather(workload, name, vector, items, group, nontemporal)
    if conditions:
        raise LayoutRejectedError(
            f"a {kind} kernel does not write padding; {workload.key} has some"
        )
    axis = int(knobs["axis"])
    ctype = storage_ctype(workload.dtype)
    scope = Scope()
    q = [scope.var(f"q{t}", 0, e - 1) for t, e in enumerate(domain)]
    itype = "int" if scope.fits_int(row_major(q, domain)) and scope.fits_int(offset) else "long"
    if kind == "tile":
        body, count = register_tile(
            scope, itype, ctype, q, domain, axis, vector, items, offset, nontemporal
        )
        note = f"register tile {vector} x {items}: axes {axis} and {len(domain) - 1}"
        local = (group,) if group else None
        attributes = tile_attributes(ctype, vector, items)
        return _kernel(workload, name, note, body, (count,), local, attributes)
    if kind == "local":
        ta, tz = (int(t) for t in str(knobs["tile"]).split("x"))
        tile_layout = candidate.layout("tile.local")
        body, global_size, local_size = local_tile(
            scope,
            itype,
            ctype,
            q,
            domain,
            axis,
            (ta, tz),
            tile_layout,
            vector,
            items,
            offset,
            nontemporal,
        )
        note = (
            f"local tile {ta} x {tz} ({tile_layout.describe()}): axes {axis} and "
            f"{len(domain) - 1}, {vector}-wide, {items} rows per work-item"
        )
        return _kernel(workload, name, note, body, global_size, local_size)
    raise LayoutRejectedError(f"unknown conversion kernel {kind!r}")


def lower_conversion_workload(
    workload: ConversionWorkload, candidate: Candidate, device: DeviceInfo | None = None
) -> KernelProgram:
    """The program of ``workload`` run by ``candidate``: buffers ``src`` and
    ``dst`` (flat physical arrays), one compute launch. With ``device``, a
    candidate its :class:`~laytune.space.ConversionSpace` does not hold is
    refused (LayoutRejectedError)."""
    if device is not None and not ConversionSpace(workload, device).check(candidate):
        raise LayoutRejectedError(
            f"candidate {candidate.describe() or '(generic)'} is not in the conversion space "
            f"of {workload.key} on {device.name}"
        )
    kernel = conversion_kernel(workload, candidate)
    source = Source(f"convert: {workload.describe()}")
    source.add(kernel.source, workload.dtype, computes=False)
    pad = workload.pad_value
    src, dst = workload.buffers
    specs = (
        BufferSpec("src", workload.dtype, src.shape, src.shape, "input"),
        BufferSpec(
            "dst",
            workload.dtype,
            dst.shape,
            dst.shape,
            "output",
            pad_value=None if pad is None or pad is UNDEF else float(pad),
        ),
    )
    launch = Launch(
        kernel.name,
        (ArgRef("src", "physical"), ArgRef("dst", "physical")),
        kernel.global_sizes,
        kernel.local_size,
    )
    return KernelProgram(
        name=f"convert_{candidate.key[:10]}",
        source=source.text(),
        buffers=specs,
        compute=(launch,),
    )
