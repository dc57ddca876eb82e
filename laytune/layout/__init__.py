"""The algebra of memory layouts: index maps, their queries and the layout families.

An :class:`IndexMap` sends logical indices to physical indices; a
:class:`Layout` is an index map on one buffer shape with the family that made
it. Nothing here touches a device: OpenCL appears only as emitted C text.

Index expressions (:class:`Expr`) come with the functions the later stages
read them with: :func:`to_text`, :func:`evaluate`, :func:`bounds`,
:func:`substitute`, :func:`variables`, :func:`simplify`, :func:`fits_int32`
and :func:`to_opencl`.
"""

from __future__ import annotations

from laytune.exceptions import (
    LayoutError,
    LayoutSyntaxError,
    NegativeIndexError,
    NonInjectiveLayoutError,
    ShapeMismatchError,
)
from laytune.layout._expr import (
    BinOp,
    Const,
    Expr,
    Var,
    binary_op,
    bounds,
    evaluate,
    fits_int32,
    simplify,
    substitute,
    to_opencl,
    to_text,
    variables,
)
from laytune.layout._families import (
    FAMILIES,
    LAYOUT_FAMILIES,
    SCOPES,
    Layout,
    LayoutFamily,
    block,
    compose,
    custom,
    identity,
    pad_every,
    pad_rows,
    panel,
    permute,
    row_xor,
    swizzle,
    texture,
    tile,
)
from laytune.layout._index_map import AXIS_SEPARATOR, IndexMap, Shape, default_names
from laytune.layout._inverse import Condition, Inverse
from laytune.layout._json import MAX_JSON_LENGTH, MAX_JSON_NESTING, check_nesting, load_versioned
from laytune.layout._pack import UNDEF, pack, unpack
from laytune.layout._reduce import (
    offset_periods,
    offsets_at,
    offsets_on,
    probe_digest,
    reduced_box,
    row_major_offsets,
    same_offsets,
    same_offsets_reshaped,
    translations,
)

__all__ = [
    "AXIS_SEPARATOR",
    "FAMILIES",
    "LAYOUT_FAMILIES",
    "MAX_JSON_LENGTH",
    "MAX_JSON_NESTING",
    "SCOPES",
    "UNDEF",
    "BinOp",
    "Condition",
    "Const",
    "Expr",
    "IndexMap",
    "Inverse",
    "Layout",
    "LayoutError",
    "LayoutFamily",
    "LayoutSyntaxError",
    "NegativeIndexError",
    "NonInjectiveLayoutError",
    "Shape",
    "ShapeMismatchError",
    "Var",
    "binary_op",
    "block",
    "bounds",
    "check_nesting",
    "compose",
    "custom",
    "default_names",
    "evaluate",
    "fits_int32",
    "identity",
    "load_versioned",
    "offset_periods",
    "offsets_at",
    "offsets_on",
    "pack",
    "pad_every",
    "pad_rows",
    "panel",
    "permute",
    "probe_digest",
    "reduced_box",
    "row_major_offsets",
    "row_xor",
    "same_offsets",
    "same_offsets_reshaped",
    "simplify",
    "substitute",
    "swizzle",
    "texture",
    "tile",
    "to_opencl",
    "to_text",
    "translations",
    "unpack",
    "variables",
]
