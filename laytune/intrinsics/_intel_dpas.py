"""``intel_dpas``: sub-group block reads and
``intel_sub_group_f16_f16_matrix_mad_k16`` (Intel)."""

from __future__ import annotations

from laytune.device_info import DeviceInfo
from laytune.intrinsics._intrinsic import FragmentLoad, MatrixIntrinsic, MatrixTiles

__all__ = ["INTEL_DPAS", "INTEL_MATRIX_EXTENSIONS", "INTEL_SUB_GROUP"]

INTEL_MATRIX_EXTENSIONS = (
    "cl_intel_subgroup_matrix_multiply_accumulate",
    "cl_intel_subgroups",
    "cl_intel_subgroups_short",
    "cl_intel_subgroup_local_block_io",
    "cl_khr_fp16",
)
"""What the Intel kernel uses: the multiply, sub-group block reads of
``__local`` halves, and half itself."""

INTEL_SUB_GROUP = 8
"""The sub-group size of ``intel_sub_group_f16_f16_matrix_mad_k16`` with an
``int8`` A operand (M = 8, N = 8, K = 16), as on DG2."""


def _lacks(device: DeviceInfo) -> str | None:
    if device.is_nvidia or not device.has_extension(INTEL_MATRIX_EXTENSIONS[0]):
        return None
    missing = [e for e in INTEL_MATRIX_EXTENSIONS[1:] if not device.has_extension(e)]
    if missing:
        return f"{device.name} lacks {', '.join(missing)}"
    if INTEL_SUB_GROUP not in device.sub_group_sizes:
        return (
            f"{device.name} has sub-group sizes {list(device.sub_group_sizes)}; the int8 form "
            f"of intel_sub_group_f16_f16_matrix_mad_k16 runs in sub-groups of {INTEL_SUB_GROUP}"
        )
    return ""


def _emit(t: MatrixTiles, name: str) -> str:
    """One sub-group of 8 per tile: per stage and per 8 rows of A an
    ``int8`` of block reads (row ``m``: lane ``l`` holds k = 2l, 2l + 1),
    per 8 columns of B an ``int8`` of pairs of rows read with
    ``intel_sub_group_block_read_us`` (lane ``l`` holds column ``l``), and
    four ``intel_sub_group_f16_f16_matrix_mad_k16``."""
    acc = [[f"acc{m}{n}" for n in range(2)] for m in range(2)]
    stages = []
    for m in range(2):
        rows = [
            f"as_int(intel_sub_group_block_read({t.pointer(t.a, m * 8 + q, 0, 'uint')}))"
            for q in range(8)
        ]
        stages.append(f"const int8 a{m} = (int8)({', '.join(rows)});")
    for n in range(2):
        pairs = []
        for q in range(8):
            lo, hi = (
                f"intel_sub_group_block_read_us({t.pointer(t.b, 2 * q + h, n * 8, 'ushort')})"
                for h in range(2)
            )
            pairs.append(f"as_int((ushort2)({lo}, {hi}))")
        stages.append(f"const int8 b{n} = (int8)({', '.join(pairs)});")
    for m in range(2):
        for n in range(2):
            stages.append(
                f"{acc[m][n]} = intel_sub_group_f16_f16_matrix_mad_k16(a{m}, b{n}, {acc[m][n]});"
            )
    init = "float8 " + ", ".join(f"{r} = 0.0f" for row in acc for r in row) + ";"
    stores = ["/* component q of acc<m><n>: row 8m + q, column 8n + lane */"]
    for m in range(2):
        for n in range(2):
            for q in range(8):
                i, j = t.i0 + m * 8 + q, t.j0 + n * 8 + t.lane
                stores.append(t.store(i, j, f"{acc[m][n]}.s{q}"))
    attributes = (
        f"__attribute__((intel_reqd_sub_group_size({INTEL_SUB_GROUP}))) "
        f"__attribute__((reqd_work_group_size({INTEL_SUB_GROUP}, 1, 1))) "
    )
    return t.kernel(name, attributes, init, stages, stores)


INTEL_DPAS = MatrixIntrinsic(
    "intel_dpas",
    # block reads of each fragment row (intel_sub_group_block_read, _us for B)
    instruction="intel_sub_group_f16_f16_matrix_mad_k16",
    requires=INTEL_MATRIX_EXTENSIONS[0],
    lacks=_lacks,
    shape=(8, 8, 16),
    lanes=INTEL_SUB_GROUP,
    lane_id="get_sub_group_local_id()",
    loads=(
        FragmentLoad(8, 16, 16),  # one block read of 16 halves per row of A
        FragmentLoad(16, 8, 16),  # one block read of 8 halves per row of B
    ),
    emit=_emit,
    aliases=("intel_mad",),
)
"""Intel's DPAS through ``cl_intel_subgroup_matrix_multiply_accumulate``:
one sub-group block read per fragment row, each row 16-byte aligned."""
