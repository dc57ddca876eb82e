"""Runs of consecutive physical elements along a logical axis, decided without
a pass over the buffer.

Whether a layout stores aligned runs along an axis decides how a kernel
moves them (one vector, one block read); a lowering asks it for every
buffer of every candidate, so the answer must not cost a look at every
element of a large tensor. Both facts a run needs (its elements are
consecutive, its first offset is a multiple of its width) are unchanged
when a multiple of the width is added to all its offsets, so they are
decided on the layout's reduced box (:func:`~laytune.layout.reduced_box`),
an array the size of the layout's periods, never of the tensor.
"""

from __future__ import annotations

import numpy as np

from laytune.layout import Layout, offsets_on, reduced_box

__all__ = ["contiguous_along"]


def contiguous_along(layout: Layout, dim: int, width: int) -> str | None:
    """None when every run of ``width`` logical elements along ``dim`` that
    starts at a multiple of ``width`` is ``width`` consecutive physical
    elements starting at a multiple of ``width``; else why not."""
    if width == 1:
        return None
    shape = layout.shape
    if shape[dim] % width:
        return f"extent {shape[dim]} of dimension {dim} is not a multiple of {width}"
    groups = [1] * len(shape)
    groups[dim] = width
    box, _ = reduced_box(layout.index_map, shape, groups, width)
    offsets = offsets_on(layout.index_map, shape, box)
    runs = np.moveaxis(offsets, dim, -1).reshape(-1, box[dim] // width, width)
    first = runs[..., :1]
    if (runs != first + np.arange(width)).any():
        return f"{width} elements along dimension {dim} are not consecutive in {layout.index_map}"
    misaligned = np.flatnonzero((first % width).reshape(-1))
    if misaligned.size:
        start = int(first.reshape(-1)[misaligned[0]])
        return f"a run along dimension {dim} starts at offset {start}, not a multiple of {width}"
    return None
