"""The ``matrix`` knob: a matrix intrinsic computes the staged tiles' product.

A matmul-like workload (``C[i, j] += A[i, k] * B[k, j]`` on float16 inputs
with 16 x 16 staged tiles) may multiply its ``__local`` tiles with a matrix
instruction instead of one fma per point. Each instruction loads its
operands from the tiles in its own way, and that load decides which local
tile layouts it takes (the auto memory planning seed's problem 1):

============== ==================================================== ======================================
``matrix``     the fragment load                                    the local tile needs
============== ==================================================== ======================================
``none``       the plain fma loop of the nest (every other knob)    what the ``copy`` knob needs
``intel_dpas`` ``intel_sub_group_block_read`` of each fragment row, ``MatrixTileLoad("intel_dpas", op)``:
               ``intel_sub_group_f16_f16_matrix_mad_k16``           rows contiguous, 16-byte aligned
``nv_wmma``    PTX ``wmma.load.{a,b}.sync...m16n16k16.shared``      ``MatrixTileLoad("nv_wmma", op)``:
               ``(ptr, stride)``, ``wmma.mma.sync``                 one constant row stride
``nv_mma``     PTX ``ldmatrix.sync.aligned.m8n8.x4`` (``.trans`` B) ``MatrixTileLoad("nv_mma", op)``:
               of one row pointer per lane, ``mma.sync m16n8k16``   rows contiguous, 16-byte aligned
============== ==================================================== ======================================

Each intrinsic is one :class:`~laytune.intrinsics.MatrixIntrinsic` of
:data:`~laytune.intrinsics.MATRIX_INTRINSICS`, in a module of its own with
its kernel's emitter. The device decides which it has
(:func:`matrix_capability`): Intel's
``cl_intel_subgroup_matrix_multiply_accumulate`` with sub-groups of 8 (and
the block reads of ``__local`` memory), or an NVIDIA platform reporting
compute capability 8.0 or more (``cl_nv_device_attribute_query``), whose
OpenCL compiler takes inline PTX. A matrix kernel owns its schedule: one
sub-group (Intel, 8 lanes) or one warp (NVIDIA, 32 lanes) per 16 x 16 tile
of C, the tiles copied element by element, so every other schedule knob
stays at the value the staging plan needs (a structural rule: the space
holds one candidate per matrix kernel). The rule step is
:mod:`laytune.space._matrix_rules`.

The workload model has one dtype per workload: the inputs are float16, the
accumulators float32 (the instructions' ``.f32`` accumulation), and C is
stored as float16. The NVIDIA kernels move half only through storage
(``vload_half``, ``vstore_half`` and the instructions' own loads), so they run
where ``cl_khr_fp16`` is missing, as on NVIDIA's OpenCL platform: there a
float16 matmul's space holds only its matrix kernels
(:func:`half_storage_only`). bfloat16 has no numpy dtype and no emitter here, so no
intrinsic multiplies it.
"""

from __future__ import annotations

from collections.abc import Callable

from laytune.device_info import DeviceInfo
from laytune.intrinsics import MATRIX_INTRINSICS, MATRIX_TILE, OPERANDS
from laytune.layout import Layout, Var
from laytune.space._constraints import MATRIX_DTYPES, MatrixTileLoad, Verdict
from laytune.space._workload import WorkloadLike

__all__ = [
    "MATRIX_VARIANTS",
    "STORAGE_HALF_VARIANTS",
    "half_storage_only",
    "matrix_capability",
    "matrix_checks",
    "matrix_fact",
    "matrix_operands",
    "offers_matrix",
]

MATRIX_VARIANTS = ("none", *MATRIX_INTRINSICS)
"""The values of the ``matrix`` knob: the plain fma loop first, then each
intrinsic of :data:`~laytune.intrinsics.MATRIX_INTRINSICS`."""


def matrix_capability(device: DeviceInfo) -> tuple[frozenset[str], str]:
    """The matrix variants ``device`` can run and, when it has none, why: the
    first reason an intrinsic of the device's kind gives, else the
    conditions none of them meets."""
    lacks = {name: i.lacks(device) for name, i in MATRIX_INTRINSICS.items()}
    available = frozenset(name for name, why in lacks.items() if why == "")
    if available:
        return available, ""
    reasons = [why for why in lacks.values() if why]
    if reasons:
        return frozenset(), reasons[0]
    requires = dict.fromkeys(i.requires for i in MATRIX_INTRINSICS.values())
    return frozenset(), f"{device.name} has neither {' nor '.join(requires)}"


STORAGE_HALF_VARIANTS = frozenset(n for n, i in MATRIX_INTRINSICS.items() if i.storage_only)
"""The matrix variants whose kernels compute nothing in half: they need no
``cl_khr_fp16``."""


def half_storage_only(workload: WorkloadLike, device: DeviceInfo) -> bool:
    """Whether ``device`` runs the float16 ``workload`` only through the
    kernels that keep half as storage: it lacks ``cl_khr_fp16`` (so no
    kernel may compute in half) but has a matrix variant of
    :data:`STORAGE_HALF_VARIANTS`, and the workload offers the knob."""
    if device.supports_fp16 or "float16" not in {b.dtype for b in workload.buffers}:
        return False
    available, _ = matrix_capability(device)
    return bool(available & STORAGE_HALF_VARIANTS) and offers_matrix(workload)


def _product_of_loads(workload: WorkloadLike) -> bool:
    statement = getattr(workload, "statement", None)
    if statement is None:  # a hand-written description: its indices say it all
        return True
    value = statement.value
    return (
        getattr(value, "op", None) == "*"
        and type(value.lhs).__name__ == "Load"
        and type(value.rhs).__name__ == "Load"
    )


def matrix_operands(workload: WorkloadLike) -> tuple[tuple[str, str], str]:
    """``((a, b), "")``: the names of the left and right operands of a
    matmul-like workload, else ``(("", ""), why)``."""
    none = ("", "")
    axes = workload.axes
    spatial = [k for k, a in enumerate(axes) if a.kind == "spatial"]
    reduce = [k for k, a in enumerate(axes) if a.kind == "reduce"]
    inputs = [b for b in workload.buffers if b.role == "input"]
    outputs = [b for b in workload.buffers if b.role == "output"]
    if workload.reduction != "sum" or len(spatial) != 2 or len(reduce) != 1:
        return none, "not a sum over one reduce axis of a 2-D output"
    if len(inputs) != 2 or len(outputs) != 1 or not _product_of_loads(workload):
        return none, "not a product of two inputs"
    i, j, k = Var(spatial[0]), Var(spatial[1]), Var(reduce[0])
    by_index = {tuple(b.indices): b.name for b in inputs}
    a, b = by_index.get((i, k)), by_index.get((k, j))
    if a is None or b is None or tuple(outputs[0].indices) != (i, j):
        return none, "not C[i, j] += A[i, k] * B[k, j]"
    dtypes = {buf.dtype for buf in workload.buffers}
    if dtypes - set(MATRIX_DTYPES):
        return none, f"dtype {'/'.join(sorted(dtypes))}: the intrinsics multiply float16"
    tiles = dict(getattr(workload, "local_tiles", None) or {})
    want = (MATRIX_TILE, MATRIX_TILE)
    if tiles.get(a) != want or tiles.get(b) != want:
        return none, f"its staged tiles are {tiles}, not {MATRIX_TILE} x {MATRIX_TILE}"
    return (a, b), ""


def offers_matrix(workload: WorkloadLike) -> bool:
    """Whether ``workload`` has a ``matrix`` knob at all: matmul-like, float16."""
    return not matrix_operands(workload)[1]


def matrix_fact(variant: str, operand: str) -> str:
    """The key of a local tile's copy facts saying that ``variant`` loads it
    as ``operand``."""
    return f"matrix:{variant}:{operand}"


_ANY_DEVICE = DeviceInfo("any", "any")
"""The fragment loads' rules read nothing of the device."""


def matrix_checks(layout: Layout, dtype: str) -> dict[str, Callable[[], Verdict]]:
    """The fragment loads to judge on a local tile ``layout`` of ``dtype``
    (none outside :data:`MATRIX_DTYPES`), by the key of :func:`matrix_fact`."""
    if dtype not in MATRIX_DTYPES:
        return {}

    def judge(load: MatrixTileLoad) -> Callable[[], Verdict]:
        return lambda: load.check(layout, layout.shape, dtype, _ANY_DEVICE)

    return {
        matrix_fact(variant, op): judge(MatrixTileLoad(variant, op))
        for variant in MATRIX_INTRINSICS
        for op in OPERANDS
    }
