"""Pack and unpack kernels, generated from a layout's index map and inverse.

``pack``: logical (dense row-major) -> physical. The work-items walk the
physical buffer; each physical position reads its logical element through
the inverse map, or writes the pad value where the padding predicate fails.
``unpack``: physical -> logical, the work-items walk the logical buffer and
read through the forward map.

Both are one gather: ``dst[d] = src[f(d)]`` over a dense destination domain.
Two shapes of work-item:

* **tiled** (no padding, global memory): when stepping some destination axis
  ``q`` other than the innermost moves the source offset by exactly one (a
  transpose, NCHW -> NCHWc), a work-item moves a ``Va x Vb`` tile: ``Vb``
  vector loads of ``Va`` consecutive source elements, a register transpose,
  ``Va`` vector stores of ``Vb`` consecutive destination elements. Both sides
  then touch whole cache lines. Where both offsets are affine in the
  work-item's position (transposes, blocking), the work-item computes its
  first source and destination element from the global id alone (NCHW4c is
  read at ``32 * gid``), which keeps the addressing of a compiler that
  vectorises across work-items strided instead of gathered.
* **elementwise**: ``V`` consecutive destination elements per work-item,
  each with its own source offset and padding test (``V = 1`` is the naive
  one-element-per-work-item kernel; image destinations take one texel).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from laytune.codegen._emit import BufferAccess, Scope, c_ident, ctype_of, pointer, storage_ctype
from laytune.codegen._gather import (
    as_values,
    condition_c,
    contiguous_run_axis,
    pad_text,
    row_major,
    steps_by_one,
    texel_coords,
    unit_step_axis,
    vector_items,
    widest,
)
from laytune.codegen._source import indent
from laytune.codegen._transpose import generic_tile, register_tile, tile_attributes
from laytune.layout import Layout, Var, substitute
from laytune.space import IMAGE_DTYPES

__all__ = ["ConversionKernel", "pack_kernel", "unpack_kernel"]


@dataclass(frozen=True)
class ConversionKernel:
    """One conversion kernel: its name, source, and launch sizes (``local_size``
    None: the driver's work-group)."""

    name: str
    source: str
    global_size: int | tuple[int, ...]
    local_size: tuple[int, ...] | None = None

    @property
    def global_sizes(self) -> tuple[int, ...]:
        size = self.global_size
        return (size,) if isinstance(size, int) else tuple(size)


def _header(kind: str, name: str, layout: Layout, pad_value: object) -> list[str]:
    lines = [
        f"/* {kind} {name}: {layout.index_map}",
        f"   logical {layout.shape} -> physical {layout.flat_shape}",
    ]
    if layout.has_padding:
        lines.append(
            f"   padding holds {'NaN (pad_value None)' if pad_value is None else pad_value}"
        )
    lines[-1] += " */"
    return lines


@functools.lru_cache(maxsize=1024)
def pack_kernel(
    name: str,
    layout: Layout,
    dtype: str,
    pad_value: object = None,
    memory: str = "global",
    elements_per_item: int | None = None,
    kernel_name: str | None = None,
) -> ConversionKernel:
    """Kernel ``<name>_pack(src, dst)``: logical ``src`` -> physical ``dst``.

    ``elements_per_item=None`` picks the tiled kernel where it applies, else
    four elements per work-item along the physical innermost axis; an integer
    forces the elementwise kernel with that many (1: naive).
    """
    image = memory == "image2d"
    # a copy moves bits (halves as ushort: no cl_khr_fp16); an image write takes the type
    ctype = ctype_of(dtype) if image else storage_ctype(dtype)
    kname = kernel_name or f"{c_ident(name)}_pack"
    pshape = layout.physical_shape
    inverse = layout.inverse()
    scope = Scope()
    # physical index variables first: inverse expressions use Var(t) for them
    phys = [scope.var(f"p{t}", 0, e - 1) for t, e in enumerate(pshape)]
    logical = [substitute(e, phys) for e in inverse.index_map.outputs]
    src_offset = row_major(logical, layout.shape)
    conditions = [(substitute(c.expr, phys), c.lo, c.hi) for c in inverse.conditions]
    itype = (
        "int" if scope.fits_int(row_major(phys, pshape)) and scope.fits_int(src_offset) else "long"
    )
    pad = pad_text(pad_value, dtype, storage=not image)
    dst_param = "__write_only image2d_t dst" if image else f"__global {ctype}* restrict dst"
    signature = f"__kernel void {kname}(__global const {ctype}* restrict src, {dst_param})"

    tile_axis = None
    if not image and not conditions and elements_per_item is None and len(pshape) > 1:
        tile_axis = unit_step_axis(scope, src_offset, phys, pshape)

    body: list[str] = []
    gid_total: int
    if tile_axis is not None:
        va = widest(pshape[tile_axis], 16)
        vb = generic_tile(va, pshape[-1])
        tile_body, gid_total = register_tile(
            scope, itype, ctype, phys, pshape, tile_axis, va, vb, src_offset
        )
        body += tile_body
        signature = signature.replace("__kernel ", f"__kernel {tile_attributes(ctype, va, vb)}", 1)
        note = f"   tile {va} x {vb}: physical axes {tile_axis} and {len(pshape) - 1}"
    else:
        width = 4 if image else (elements_per_item or widest(pshape[-1], 4))
        prologue, base, gid, gid_total = vector_items(scope, itype, pshape, phys, width)
        body += prologue
        values = []
        contiguous = (
            not conditions and width > 1 and steps_by_one(scope, src_offset, phys, len(pshape) - 1)
        )
        if contiguous and not image:
            at = as_values(scope, [Var(v.index) for v in base])
            off = scope.c(substitute(src_offset, at))
            dst_off = scope.c(row_major([Var(v.index) for v in base], pshape))
            body.append(
                f"vstore{width}(vload{width}(0, {pointer('src', off)}), 0, {pointer('dst', dst_off)});"
            )
        for lane in range(0 if contiguous and not image else width):
            at = [Var(v.index) + (lane if t == len(pshape) - 1 else 0) for t, v in enumerate(base)]
            at_values = as_values(scope, at)
            read = f"src[{scope.c(substitute(src_offset, at_values))}]"
            tests = condition_c(scope, conditions, at_values)
            values.append(f"({tests}) ? {read} : {pad}" if tests else read)
        if width == 1:
            body.append(f"dst[{scope.name(gid)}] = {values[0]};")
        elif values:
            for lane, value in enumerate(values):
                body.append(f"const {ctype} v{lane} = {value};")
            vector = f"({ctype}{width})({', '.join(f'v{k}' for k in range(width))})"
            if image:
                x, y = texel_coords(layout, [Var(v.index) for v in base])
                write = IMAGE_DTYPES[dtype].write
                body.append(f"{write}(dst, (int2)({scope.c(x)}, {scope.c(y)}), {vector});")
            else:
                off = scope.c(row_major([Var(v.index) for v in base], pshape))
                body.append(f"vstore{width}({vector}, 0, {pointer('dst', off)});")
        note = f"   {width} element{'s' if width > 1 else ''} per work-item"
    head = _header("pack", name, layout, pad_value)
    head[-1] = head[-1][:-3]
    head += [note + " */"]
    text = "\n".join([*head, signature + " {", *indent(body), "}"])
    return ConversionKernel(kname, text, gid_total)


@functools.lru_cache(maxsize=1024)
def unpack_kernel(
    name: str,
    layout: Layout,
    dtype: str,
    memory: str = "global",
    elements_per_item: int | None = None,
    kernel_name: str | None = None,
) -> ConversionKernel:
    """Kernel ``<name>_unpack(src, dst)``: physical ``src`` -> logical ``dst``."""
    ctype = ctype_of(dtype) if memory == "image2d" else storage_ctype(dtype)
    kname = kernel_name or f"{c_ident(name)}_unpack"
    shape = layout.shape
    scope = Scope()
    xs = [scope.var(f"x{d}", 0, e - 1) for d, e in enumerate(shape)]
    access = BufferAccess(name, "src", layout, dtype, memory, widen=False)
    image = memory == "image2d"
    src_offset = None if image else access.flat_offset(xs)
    flat_phys = math.prod(layout.flat_shape)
    itype = "int" if max(flat_phys, math.prod(shape)) < 2**31 else "long"
    src_param = "__read_only image2d_t src" if image else f"__global const {ctype}* restrict src"
    signature = f"__kernel void {kname}({src_param}, __global {ctype}* restrict dst)"

    tile_axis, va = None, 1
    if not image and elements_per_item is None and len(shape) > 1:
        tile_axis = unit_step_axis(scope, src_offset, xs, shape)  # type: ignore[arg-type]
        va = widest(shape[tile_axis], 16) if tile_axis is not None else 1
        if tile_axis is None:  # runs of consecutive elements, as in a blocked axis (c % 4)
            tile_axis, va = contiguous_run_axis(layout)
    body: list[str] = []
    if tile_axis is not None:
        vb = generic_tile(va, shape[-1])
        signature = signature.replace("__kernel ", f"__kernel {tile_attributes(ctype, va, vb)}", 1)
        tile_body, gid_total = register_tile(
            scope,
            itype,
            ctype,
            xs,
            shape,
            tile_axis,
            va,
            vb,
            src_offset,  # type: ignore[arg-type]
        )
        body += tile_body
        note = f"tile {va} x {vb}: logical axes {tile_axis} and {len(shape) - 1}"
    else:
        width = elements_per_item or widest(shape[-1], 4)
        prologue, base, gid, gid_total = vector_items(scope, itype, shape, xs, width)
        body += prologue
        reads = []
        for lane in range(width):
            at = [Var(v.index) + (lane if d == len(shape) - 1 else 0) for d, v in enumerate(base)]
            reads.append(access.load(at, scope))
        contiguous = not image and width > 1 and steps_by_one(scope, src_offset, xs, len(shape) - 1)  # type: ignore[arg-type]
        if width == 1:
            body.append(f"dst[{scope.name(gid)}] = {reads[0]};")
        elif contiguous:
            at = [Var(v.index) for v in base]
            read = access.load(at, scope, width)
            off = scope.c(row_major(at, shape))
            body.append(f"vstore{width}({read}, 0, {pointer('dst', off)});")
        else:
            off = scope.c(row_major([Var(v.index) for v in base], shape))
            body.append(
                f"vstore{width}(({ctype}{width})({', '.join(reads)}), 0, {pointer('dst', off)});"
            )
        note = f"{width} element{'s' if width > 1 else ''} per work-item"
    head = _header("unpack", name, layout, None)
    head[-1] = head[-1][:-3] + f"\n   {note} */"
    text = "\n".join([*head, signature + " {", *indent(body), "}"])
    return ConversionKernel(kname, text, gid_total)
