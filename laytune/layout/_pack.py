"""numpy conversion between a logical array and its physical layout."""

from __future__ import annotations

from typing import Any

import numpy as np

from laytune.exceptions import ShapeMismatchError
from laytune.layout._index_map import IndexMap

__all__ = ["UNDEF", "pack", "unpack"]


class _Undef:
    """``pad_value=UNDEF``: padding holds anything (only element-wise overcompute is legal)."""

    def __repr__(self) -> str:
        return "UNDEF"


UNDEF = _Undef()


def _poison(dtype: np.dtype) -> Any:
    # padding that must never be read: NaN makes a reader that forgot its guard visible
    if np.issubdtype(dtype, np.floating):
        return np.nan
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).min
    return 0


def pack(array: np.ndarray, index_map: IndexMap, pad_value: Any = None) -> np.ndarray:
    """The physical array (shape ``index_map.physical_shape``) of a logical array.

    Padding holds ``pad_value`` when it is a number; with ``None`` (never
    read) or ``UNDEF`` it holds a poison value (NaN for floats), so that a
    kernel which reads it by mistake is caught. Reshape the result to
    ``index_map.flat_shape(array.shape)`` for the flattened buffer.
    Law: ``unpack(pack(x, m), m, x.shape) == x`` for every array x.
    """
    array = np.asarray(array)
    index_map.validate(array.shape)
    pshape = index_map.physical_shape(array.shape)
    fill = _poison(array.dtype) if pad_value is None or pad_value is UNDEF else pad_value
    physical = np.full(int(np.prod(pshape, dtype=np.int64)), fill, dtype=array.dtype)
    physical[index_map.flat_offsets(array.shape)] = array.reshape(-1)
    return physical.reshape(pshape)


def unpack(physical: np.ndarray, index_map: IndexMap, logical_shape: tuple[int, ...]) -> np.ndarray:
    """The logical array held by a physical array (any reshape of the physical shape)."""
    physical = np.asarray(physical)
    logical_shape = tuple(int(s) for s in logical_shape)
    size = index_map.physical_size(logical_shape)
    if physical.size != size:
        raise ShapeMismatchError(
            f"physical array has {physical.size} elements but {index_map} on {logical_shape} "
            f"needs {size} (physical shape {index_map.physical_shape(logical_shape)})"
        )
    index_map.validate(logical_shape)
    return physical.reshape(-1)[index_map.flat_offsets(logical_shape)].reshape(logical_shape)
