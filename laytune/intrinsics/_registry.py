"""The registry of matrix intrinsics, in the order of the ``matrix`` knob's values."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from laytune.exceptions import LayoutError
from laytune.intrinsics._intel_dpas import INTEL_DPAS
from laytune.intrinsics._intrinsic import MatrixIntrinsic
from laytune.intrinsics._nv_mma import NV_MMA
from laytune.intrinsics._nv_wmma import NV_WMMA

__all__ = ["MATRIX_INTRINSICS", "matrix_intrinsic"]


def _registry(*intrinsics: MatrixIntrinsic) -> Mapping[str, MatrixIntrinsic]:
    return MappingProxyType({i.name: i for i in intrinsics})


MATRIX_INTRINSICS: Mapping[str, MatrixIntrinsic] = _registry(INTEL_DPAS, NV_WMMA, NV_MMA)
"""Every matrix intrinsic, by name, in the order of the ``matrix`` knob's values."""

_BY_ALIAS = {alias: i for i in MATRIX_INTRINSICS.values() for alias in i.aliases}


def matrix_intrinsic(name: str) -> MatrixIntrinsic:
    """The intrinsic ``name`` (or an older name of it); a :class:`LayoutError`
    naming the known ones otherwise."""
    found = MATRIX_INTRINSICS.get(name) or _BY_ALIAS.get(name)
    if found is None:
        raise LayoutError(f"matrix intrinsic {name!r} is not one of {tuple(MATRIX_INTRINSICS)}")
    return found
