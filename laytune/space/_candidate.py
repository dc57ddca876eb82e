"""Candidate: one point of a search space.

The chosen layout of every buffer, what each buffer's padding holds, and the
schedule knob values. Immutable, with a canonical JSON form and a stable hash:
the same candidate gives the same ``key`` in every process and run (it is a
SHA-256 of the canonical JSON, never Python's randomised ``hash``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from laytune.exceptions import LayoutSyntaxError
from laytune.layout import UNDEF, Layout, load_versioned

__all__ = ["Candidate", "PadValue"]

JSON_VERSION = 1

# What a buffer's padding holds: None (never read), a float constant, or UNDEF.
PadValue = Any


def _pad_to_json(value: PadValue) -> Any:
    if value is None:
        return None
    if value is UNDEF:
        return "undef"
    value = float(value)
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if math.isnan(value):
        raise ValueError("a pad_value cannot be NaN")
    return value


def _pad_from_json(value: Any) -> PadValue:
    if value is None:
        return None
    if value == "undef":
        return UNDEF
    if value in ("inf", "-inf"):
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise LayoutSyntaxError(
        f"unknown pad_value {value!r} (None, a number, 'inf', '-inf' or 'undef')"
    )


def _knob_value(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_knob_value(v) for v in value)
    if isinstance(value, tuple):
        return tuple(_knob_value(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"knob values must be JSON scalars or tuples of them, got {value!r}")


@dataclass(frozen=True)
class Candidate:
    """Layouts per buffer, pad values per buffer, knob values; all sorted by name."""

    layouts: tuple[tuple[str, Layout], ...]
    knobs: tuple[tuple[str, Any], ...] = ()
    pad_values: tuple[tuple[str, PadValue], ...] = ()

    @classmethod
    def make(
        cls,
        layouts: Mapping[str, Layout],
        knobs: Mapping[str, Any] | None = None,
        pad_values: Mapping[str, PadValue] | None = None,
    ) -> Candidate:
        return cls(
            tuple(sorted(layouts.items())),
            tuple(sorted((k, _knob_value(v)) for k, v in (knobs or {}).items())),
            tuple(sorted((pad_values or {}).items(), key=lambda kv: kv[0])),
        )

    def layout(self, buffer: str) -> Layout:
        for name, layout in self.layouts:
            if name == buffer:
                return layout
        raise KeyError(f"candidate has no layout for buffer {buffer!r}")

    def knob(self, name: str, default: Any = None) -> Any:
        return dict(self.knobs).get(name, default)

    def pad_value(self, buffer: str) -> PadValue:
        return dict(self.pad_values).get(buffer)

    @property
    def layout_map(self) -> dict[str, Layout]:
        return dict(self.layouts)

    @property
    def knob_map(self) -> dict[str, Any]:
        return dict(self.knobs)

    # -- persistence and identity -------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "version": JSON_VERSION,
            "layouts": {name: layout.to_json() for name, layout in self.layouts},
            "knobs": {k: list(v) if isinstance(v, tuple) else v for k, v in self.knobs},
            "pad_values": {k: _pad_to_json(v) for k, v in self.pad_values},
        }

    def canonical_json(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @functools.cached_property
    def key(self) -> str:
        """Stable across processes and runs (computed once per candidate)."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:20]

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> Candidate:
        data = load_versioned(data, "candidate", JSON_VERSION, ("layouts",))
        return cls.make(
            {name: Layout.from_json(layout) for name, layout in data["layouts"].items()},
            dict(data.get("knobs", {})),
            {k: _pad_from_json(v) for k, v in data.get("pad_values", {}).items()},
        )

    def describe(self) -> str:
        parts = [f"{name}: {layout.describe()}" for name, layout in self.layouts]
        parts += [f"{k}={v}" for k, v in self.knobs]
        return "; ".join(parts)
