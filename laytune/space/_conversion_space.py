"""The ways to run one conversion workload: a small space of its own.

:class:`ConversionSpace` holds the candidates of a
:class:`~laytune.space.ConversionWorkload` (knobs, see
:data:`CONVERSION_KNOBS`); the empty candidate is the generic kernel
``laytune.codegen`` generates without knobs (the baseline, and the fallback
wherever nothing is recorded). Tiled kernels need a source read in runs
(:func:`~laytune.space.conversion_geometry`).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterator
from typing import Any

from laytune.device_info import DeviceInfo
from laytune.layout import Layout, identity, pad_rows, row_xor
from laytune.space._candidate import Candidate
from laytune.space._conversion import ConversionWorkload, conversion_geometry
from laytune.space._space import layout_keys
from laytune.space._workload import dtype_bytes

__all__ = ["CONVERSION_KNOBS", "ConversionSpace"]

#: Knobs of a conversion candidate (none: the generic kernel):
#:
#: - ``kernel``: ``"gather"`` (each work-item ``items`` runs of ``vector``
#:   consecutive destination elements), ``"tile"`` (a register tile: ``vector``
#:   source elements along ``axis`` by ``items`` destination elements along the
#:   innermost axis, transposed in registers) or ``"local"`` (a work-group
#:   moves a ``tile`` of the destination through a ``__local`` tile whose
#:   layout, the buffer ``tile.local``, is searched: identity, padded rows or
#:   an XOR swizzle);
#: - ``axis``: the destination axis the source is read along (tile, local);
#: - ``tile``: the extents a work-group moves, ``"<along axis>x<innermost>"`` (local);
#: - ``vector``: elements per vector load or store;
#: - ``items``: runs (gather), rows (local) or tile width (tile) per work-item;
#: - ``group``: work-items per work-group (gather, tile; 0: the driver's);
#: - ``store``: ``"nontemporal"`` where the vector stores bypass the caches
#:   (``__builtin_nontemporal_store``, on devices whose compiler has it:
#:   ``DeviceInfo.builtins``), absent for plain ``vstoreN``.
CONVERSION_KNOBS = ("kernel", "axis", "tile", "vector", "items", "group", "store")

_NONTEMPORAL = "nontemporal_store"

_VECTORS = (1, 2, 4, 8, 16)
_ITEMS = (1, 2, 4, 8, 16)
_GROUPS = (0, 64, 256)
_TILE_EXTENTS = (16, 32, 64)
_LOCAL_ITEMS = (1, 4, 8, 16)
_LOCAL_VECTORS = (1, 4, 8)
_TILE = "tile.local"


def _tile_layouts(shape: tuple[int, int]) -> list[Layout]:
    """The layouts a ``__local`` tile may take: identity, rows padded by one
    element, rows XOR-swizzled in chunks of one element."""
    rows = shape[0]
    period = 1 << int(math.log2(min(rows, shape[1], 32)))
    return [identity(shape), pad_rows(shape, 1), row_xor(shape, period=period, chunk=1)]


class ConversionSpace:
    """Every valid way to run one :class:`ConversionWorkload` on a device.

    ``enumerate()`` lists them (the generic kernel first), ``suggest(trial)``
    picks one from an optuna trial knob by knob (``kernel`` first, then each
    knob's choices those valid after the earlier ones, always asked under
    ``"<knob>|<choices>"``, a digest past 60 characters: the same knob offers
    other values under another kernel kind, and optuna holds one fixed choice
    list per parameter name in a study), and
    ``identity()`` is the generic kernel. The local tile layouts are the
    buffer ``tile.local`` (:meth:`layouts`).
    """

    def __init__(self, workload: ConversionWorkload, device: DeviceInfo) -> None:
        self.workload = workload
        self.device = device
        self.geometry = conversion_geometry(workload.src, workload.dst)
        self._tiles: list[Layout] = []
        self._candidates = list(self._generate())

    # -- what the space holds ------------------------------------------------------
    def _generate(self) -> Iterator[Candidate]:
        """Every candidate of :meth:`_kernels`, and where the device has
        nontemporal stores, each one that stores vectors again with them."""
        # streamed past the cache only where the output would not stay in it (StoreStep)
        written = math.prod(self.workload.dst.flat_shape) * dtype_bytes(self.workload.dtype)
        streaming = self.device.has_builtin(_NONTEMPORAL) and not self.device.holds(written)
        for candidate in self._kernels():
            yield candidate
            knobs = candidate.knob_map
            stores = knobs.get("items" if knobs.get("kernel") == "tile" else "vector", 1)
            if streaming and knobs and int(stores) > 1:
                yield Candidate.make(candidate.layout_map, {**knobs, "store": "nontemporal"})

    def _kernels(self) -> Iterator[Candidate]:
        geo, device = self.geometry, self.device
        inner = geo.domain[-1]
        yield Candidate.make({})
        groups = [g for g in _GROUPS if g <= device.max_work_group_size]
        for vector, items, group in itertools.product(_VECTORS, _ITEMS, groups):
            if inner % (vector * items) or (vector > 1 and geo.padding):
                continue
            if group and (math.prod(geo.domain) // (vector * items)) % group:
                continue
            yield Candidate.make(
                {}, {"kernel": "gather", "vector": vector, "items": items, "group": group}
            )
        if geo.padding:
            return
        for axis in geo.tile_axes():
            run = geo.runs[axis]
            for vector, items, group in itertools.product(_VECTORS[1:], _VECTORS[1:], groups):
                if vector > run or inner % items or geo.domain[axis] % vector:
                    continue
                count = math.prod(geo.domain) // (vector * items)
                if group and count % group:
                    continue
                knobs = {"kernel": "tile", "axis": axis, "vector": vector, "items": items}
                yield Candidate.make({}, {**knobs, "group": group})
            for ta, tz in itertools.product(_TILE_EXTENTS, _TILE_EXTENTS):
                if ta > run or geo.domain[axis] % ta or inner % tz:
                    continue
                for vector, items in itertools.product(_LOCAL_VECTORS, _LOCAL_ITEMS):
                    if ta % vector or tz % vector or tz % items or ta % items:
                        continue
                    size = (ta // vector) * (tz // items)
                    if size > device.max_work_group_size:
                        continue
                    for layout in _tile_layouts((tz, ta)):
                        if layout.physical_size * 4 > device.local_mem_size:
                            continue
                        if layout not in self._tiles:
                            self._tiles.append(layout)
                        knobs = {"kernel": "local", "axis": axis, "tile": f"{ta}x{tz}"}
                        yield Candidate.make(
                            {_TILE: layout}, {**knobs, "vector": vector, "items": items}
                        )

    def __len__(self) -> int:
        return len(self._candidates)

    def size_up_to(self, cap: int) -> int:
        """``min(len(space), cap)``, as :meth:`SearchSpace.size_up_to`."""
        return min(len(self._candidates), cap)

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self._candidates)

    def enumerate(self) -> Iterator[Candidate]:
        """Every valid candidate once, the generic kernel first."""
        return iter(self._candidates)

    def identity(self) -> Candidate:
        """The generic kernel (no knobs): the baseline."""
        return self._candidates[0]

    def layouts(self, buffer: str) -> tuple[Layout, ...]:
        """The layouts of the ``__local`` tile over every tile shape."""
        if buffer != _TILE:
            raise KeyError(f"a conversion space has no buffer {buffer!r} (only {_TILE!r})")
        return tuple(self._tiles)

    def check(self, candidate: Candidate) -> bool:
        return candidate in self._candidates

    # -- optuna -------------------------------------------------------------------------
    def suggest(self, trial: Any) -> Candidate:
        """One valid candidate from an optuna trial (see the class docstring)."""
        remaining = self._candidates
        present = {c.knob("kernel") for c in remaining}
        kinds = [k for k in (None, "gather", "tile", "local") if k in present]  # None: generic
        kernel = trial.suggest_categorical("kernel", kinds)
        remaining = [c for c in remaining if c.knob("kernel") == kernel]
        for knob in CONVERSION_KNOBS[1:]:
            present = {c.knob(knob) for c in remaining}
            values: list[Any] = sorted(v for v in present if v is not None)
            if not values:
                continue
            if None in present:  # an optional knob (store): absent is a choice too
                values = [None, *values]
            # the choices are part of the name, even a single one: a knob
            # offers other values after another kernel kind, and optuna
            # holds one choice list per name in a study
            param = f"{knob}|{','.join(map(str, values))}"
            if len(param) > 60:
                param = f"{knob}|{hashlib.sha1(param.encode()).hexdigest()[:10]}"
            value = trial.suggest_categorical(param, values)
            remaining = [c for c in remaining if c.knob(knob) == value]
        if kernel == "local":
            keys = dict(zip(self._tiles, layout_keys(self._tiles), strict=True))
            names = [keys[c.layout(_TILE)] for c in remaining]
            digest = hashlib.sha1(",".join(names).encode()).hexdigest()[:10]
            name = trial.suggest_categorical(f"layout:{_TILE}|{digest}", names)
            remaining = [remaining[names.index(name)]]
        candidate = remaining[0]
        if hasattr(trial, "set_user_attr"):
            trial.set_user_attr("candidate", candidate.canonical_json())
        return candidate
