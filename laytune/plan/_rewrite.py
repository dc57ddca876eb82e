"""Layout rewrites: converting one tensor from one physical layout to another.

A :class:`Rewrite` of a tensor of logical shape S takes its physical copy in
layout ``src`` to a copy in layout ``dst`` whose padding holds ``dst_pad``.
As an index map it sends a physical index of ``src`` to one of ``dst``:
``dst . src^-1`` (:attr:`Rewrite.index_map`), exact on every position that
holds an element.

Folding and cancelling (the padding rules of DESIGN.md and RFC 77):

* Two adjacent rewrites fold into one, ``src`` of the first to ``dst`` of
  the second (:meth:`Rewrite.then`): the folded conversion reads only real
  elements and writes its own padding, so folding is always legal.
* A rewrite cancels (:attr:`Rewrite.is_identity`) when ``dst`` is equivalent
  to ``src`` on S and the padding already holds what ``dst`` promises. So a
  crop followed by a pad (``NCHW4c -> NCHW -> NCHW4c`` on a channel count
  that 4 does not divide) cancels only when the values cropped are the ones
  padded, or the reader never relies on them (``dst_pad`` None or UNDEF); a
  pad followed by a crop always cancels (no padding is left to disagree on).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from laytune.exceptions import LayoutError
from laytune.layout import UNDEF, IndexMap, Layout, compose
from laytune.space import PadValue

__all__ = [
    "Rewrite",
    "is_identity_layout",
    "pad_text",
    "pads_agree",
    "refinable",
    "same_layout",
]


@lru_cache(maxsize=4096)
def _equivalent(a: IndexMap, b: IndexMap, shape: tuple[int, ...]) -> bool:
    return a.equivalent(b, shape)


def same_layout(a: Layout, b: Layout) -> bool:
    """Whether two layouts of one shape put every element at the same physical
    index (with the same axis separators)."""
    return a.shape == b.shape and _equivalent(a.index_map, b.index_map, a.shape)


def is_identity_layout(layout: Layout) -> bool:
    """Whether ``layout`` is the dense row-major logical layout."""
    return _equivalent(layout.index_map, IndexMap.identity(len(layout.shape)), layout.shape)


def refinable(pad: PadValue) -> bool:
    """A producer's padding that promises nothing (None or UNDEF) may be given a constant."""
    return pad is None or pad is UNDEF


def pads_agree(have: PadValue, want: PadValue) -> bool:
    """Whether padding that holds ``have`` serves a reader that needs ``want``."""
    if refinable(want):
        return True
    return not refinable(have) and float(have) == float(want)


def pad_text(pad: PadValue) -> str:
    return "undef" if pad is UNDEF else repr(None if pad is None else float(pad))


@dataclass(frozen=True)
class Rewrite:
    """Tensor ``tensor`` (``dtype``) from layout ``src`` (padding holding
    ``src_pad``) to layout ``dst`` (padding to hold ``dst_pad``), read by
    ``consumers`` ("op.port" or "output")."""

    tensor: str
    dtype: str
    src: Layout
    dst: Layout
    src_pad: PadValue = None
    dst_pad: PadValue = None
    consumers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.src.shape != self.dst.shape:
            raise LayoutError(
                f"rewrite of {self.tensor!r} between shapes {self.src.shape} and {self.dst.shape}"
            )

    @property
    def shape(self) -> tuple[int, ...]:
        return self.src.shape

    @cached_property
    def index_map(self) -> IndexMap:
        """Physical index of ``src`` -> physical index of ``dst``: ``dst . src^-1``."""
        back = self.src.inverse().index_map
        if self.src.inverse_map is not None:
            back = self.src.inverse_map  # the family's own: verified by inverse(), unsimplified
        # simplified as if every extent were at least 2: still exact on the real
        # shape, and an extent-1 axis keeps its name instead of becoming 0
        grown = tuple(max(e, 2) for e in self.src.physical_shape)
        return compose(self.dst.index_map, back).simplify(grown)

    @property
    def is_identity(self) -> bool:
        """Whether the rewrite changes nothing a reader may look at (it cancels)."""
        if not same_layout(self.src, self.dst):
            return False
        return not self.dst.has_padding or pads_agree(self.src_pad, self.dst_pad)

    def then(self, other: Rewrite) -> Rewrite:
        """The one rewrite that does ``self`` and then ``other`` (``self.dst`` must
        be ``other.src``): from ``self.src`` to ``other.dst``. Law: its
        :attr:`index_map` equals ``compose(other.index_map, self.index_map)``
        on every position of ``self.src`` that holds an element."""
        if other.tensor != self.tensor or not same_layout(self.dst, other.src):
            raise LayoutError(
                f"cannot fold {other.describe()} after {self.describe()}: "
                "the second does not read what the first writes"
            )
        return Rewrite(
            self.tensor,
            self.dtype,
            self.src,
            other.dst,
            self.src_pad,
            other.dst_pad,
            other.consumers,
        )

    @property
    def nbytes(self) -> int:
        """Bytes a conversion kernel moves: the source read, the destination written."""
        itemsize = np.dtype(self.dtype).itemsize
        return (self.src.physical_size + self.dst.physical_size) * itemsize

    def describe(self) -> str:
        pad = f", padding {pad_text(self.dst_pad)}" if self.dst.has_padding else ""
        return f"{self.tensor}: {self.src.index_map} -> {self.dst.index_map}{pad}"

    def __str__(self) -> str:
        return self.describe()
