"""Layouts written with the operator's own names for a buffer's axes.

An index map's canonical text names its logical indices ``i, j, k, l``
whatever the buffer; a person reading conv2d's input thinks ``n, c, h, w``,
and matmul's ``A`` is indexed ``i, k``. :func:`buffer_axis_names` reads the
names from the workload's access of the buffer, and :func:`layout_text`
writes a layout with them. The text parses back to the same map: parameter
names are for display only.
"""

from __future__ import annotations

from typing import Any

from laytune.layout import IndexMap, Layout

__all__ = ["buffer_axis_names", "layout_text"]


def _axis_name(index: Any) -> str | None:
    """The name of one logical index of a buffer: the workload's variable
    when the buffer is indexed by one, else its first variable's, an output
    coordinate's leading ``o`` dropped (conv2d reads X at ``oh + kh - 1``:
    the ``h`` axis)."""
    if hasattr(index, "name") and hasattr(index, "index"):
        return str(index.name)
    names = []
    for part in ("lhs", "rhs"):
        found = _axis_name(getattr(index, part, None)) if hasattr(index, part) else None
        if found is not None:
            names.append(found)
    if not names:
        return None
    name = names[0]
    return name[1:] if name.startswith("o") and len(name) > 1 else name


def buffer_axis_names(workload: Any, buffer: str) -> tuple[str, ...] | None:
    """The names of ``buffer``'s logical axes in ``workload`` (a workload or
    its key), or None when they cannot serve as index-map parameters (the
    buffer is not the workload's, an index is a constant, or two names
    coincide)."""
    if isinstance(workload, str):
        from laytune.exceptions import LaytuneError
        from laytune.ops import from_key

        try:
            workload = from_key(workload)
        except LaytuneError:
            return None
    declared = {b.name: b for b in getattr(workload, "buffers", ())}
    if buffer not in declared or not hasattr(declared[buffer], "indices"):
        return None
    names = tuple(_axis_name(index) for index in declared[buffer].indices)
    usable = all(n is not None and n.isidentifier() and n != "lambda" for n in names)
    if not usable or len(set(names)) != len(names):
        return None
    return names  # type: ignore[return-value]


def layout_text(workload: Any, buffer: str, layout: Layout | IndexMap) -> str:
    """``layout``'s index map as text with ``buffer``'s axis names in
    ``workload`` (:func:`buffer_axis_names`): ``lambda n, c, h, w: [n, c //
    8, h, w, c % 8]``; the canonical text where there are none.
    ``IndexMap.parse`` of either gives the same map."""
    index_map = layout.index_map if isinstance(layout, Layout) else layout
    names = buffer_axis_names(workload, buffer)
    if names is None or len(names) != len(index_map.params):
        return str(index_map)
    return str(IndexMap(names, index_map.outputs, index_map.separators))
