"""The element types laytune knows: one :class:`Dtype` per name in :data:`DTYPES`.

It lives outside the pipeline stages because every stage reads it: a
workload checks its dtype against it, the search space sizes buffers and
decides which dtypes an image holds, the emitters print its OpenCL C types,
literals and pragmas, and the runners allocate images and check results
with its tolerance. Adding a dtype is one entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from laytune.exceptions import LayoutError

__all__ = ["DTYPES", "KERNEL_DTYPES", "Dtype", "ImageDtype", "dtype_of"]


@dataclass(frozen=True)
class ImageDtype:
    """How an ``image2d`` of RGBA texels holds one dtype: the OpenCL channel
    type (the name of a ``pyopencl.channel_type`` member), the read and
    write built-ins and the texel type."""

    channel_type: str
    read: str
    write: str
    texel: str


@dataclass(frozen=True)
class Dtype:
    """One element type, by its numpy name.

    ``bytes``: the size of one element. ``ctype``: the OpenCL C type the
    kernels compute in, None where no emitter writes this dtype (a buffer of
    it may still be described and sized, but no workload computes in it).
    ``storage_ctype``: the C type that moves its bits without computing on
    them (``ushort`` for half: a copy of halves needs no extension).
    ``image``: how an ``image2d`` holds it, None where no image does.
    ``tolerance``: ``(rtol, atol)`` of one output element that is not a
    reduction (see ``laytune.runners.Tolerance``), None: exact. ``extension``:
    the OpenCL extension a kernel computing in it needs, "" for none.
    ``is_float``: a floating-point type. ``compute``: the dtype the kernels
    do arithmetic in where not this one ("" for itself): a float16 buffer's
    values are widened to float32 as they are loaded, accumulated in
    float32 and rounded as they are stored. A device without half
    arithmetic (a CPU) emulates each half operation: a 256^3 float16
    matmul ran in 2.69 ms with half accumulators on 2 Zen 5 cores and in
    0.27 ms with float ones, whose error was 15x smaller (3.9e-4 of the
    largest output against 5.8e-3).
    """

    name: str
    bytes: int
    ctype: str | None = None
    storage_ctype: str | None = None
    image: ImageDtype | None = None
    tolerance: tuple[float, float] | None = None
    extension: str = ""
    is_float: bool = False
    compute: str = ""

    @property
    def emitted(self) -> bool:
        """Whether the emitters write kernels computing in this dtype."""
        return self.ctype is not None

    @property
    def computes_in(self) -> str:
        """The name of the dtype the kernels do arithmetic in."""
        return self.compute or self.name


def _registry(*dtypes: Dtype) -> Mapping[str, Dtype]:
    return MappingProxyType({d.name: d for d in dtypes})


DTYPES: Mapping[str, Dtype] = _registry(
    Dtype(
        "float32",
        4,
        ctype="float",
        storage_ctype="float",
        image=ImageDtype("FLOAT", "read_imagef", "write_imagef", "float4"),
        tolerance=(1e-4, 1e-5),
        is_float=True,
    ),
    Dtype(
        "float16",
        2,
        ctype="half",
        storage_ctype="ushort",
        image=ImageDtype("HALF_FLOAT", "read_imageh", "write_imageh", "half4"),
        tolerance=(1e-2, 1e-3),
        extension="cl_khr_fp16",
        is_float=True,
        compute="float32",
    ),
    # no numpy dtype and no emitter: a buffer may be described and sized only
    Dtype("bfloat16", 2, is_float=True),
    Dtype("float64", 8, tolerance=(1e-9, 1e-12), extension="cl_khr_fp64", is_float=True),
    Dtype("int32", 4),
    Dtype("int8", 1),
    Dtype("uint8", 1),
)
"""Every dtype a buffer may carry, by name."""

KERNEL_DTYPES = tuple(name for name, d in DTYPES.items() if d.emitted)
"""The dtypes a workload may compute in: those an emitter writes."""


def dtype_of(name: str) -> Dtype:
    """The :class:`Dtype` named ``name``; a :class:`LayoutError` naming the
    known ones otherwise."""
    try:
        return DTYPES[name]
    except (KeyError, TypeError):
        raise LayoutError(f"dtype {name!r} is not one of {sorted(DTYPES)}") from None
