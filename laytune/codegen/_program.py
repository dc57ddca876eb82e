"""KernelProgram: what lowering hands to the runners.

A program is OpenCL source plus everything needed to run it without knowing
how it was generated: the buffers (each with a logical shape the user holds
and a physical storage the kernels use), and three ordered lists of launches:
``pack`` (logical -> physical, one per input), ``compute``, and ``unpack``
(physical -> logical, one per output).

Argument naming: a launch names its arguments with :class:`ArgRef`, a buffer
name and a view. ``view="logical"`` is a dense row-major device buffer of the
logical shape; ``view="physical"`` is the buffer's physical storage, a flat
global buffer or an ``image2d_t``.

An *aliased* buffer (:attr:`BufferSpec.aliased`) is held in its identity
layout in global memory: its physical storage is its logical array, element
for element, so both views are one device buffer and the program has no
pack or unpack launch for it. Whoever runs the program allocates that one
buffer, uploads into it and reads from it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ArgRef", "BufferSpec", "KernelProgram", "Launch"]

View = Literal["logical", "physical"]
Memory = Literal["global", "image2d"]
Role = Literal["input", "output", "inout"]


@dataclass(frozen=True)
class BufferSpec:
    """One buffer of a program.

    ``physical_shape`` is the flat physical shape after axis separators:
    ``(n,)`` elements for a global buffer, ``(height, width * 4)`` elements
    for an ``image2d`` buffer of RGBA float texels (so its image is
    ``width`` texels wide and ``height`` texels high).
    ``pad_value`` is what the physical padding holds: ``None`` (never read),
    or a float constant (written by whoever produces the buffer).
    ``aliased``: the physical storage is the logical array itself (an
    identity layout in global memory, no padding), so the logical and the
    physical view are one device buffer and nothing packs or unpacks it.
    A program JSON without the field (written before it existed) is not
    aliased.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    physical_shape: tuple[int, ...]
    role: Role
    memory: Memory = "global"
    pad_value: float | None = None
    aliased: bool = False

    def __post_init__(self) -> None:
        if self.aliased and (
            self.memory != "global" or math.prod(self.physical_shape) != math.prod(self.shape)
        ):
            raise ValueError(
                f"buffer {self.name!r} is aliased, so its physical storage must be its logical "
                f"array: {self.memory} {self.physical_shape} is not {math.prod(self.shape)} "
                f"elements of global memory"
            )

    @property
    def image_shape(self) -> tuple[int, int]:
        """(width, height) in texels, the order pyopencl's Image takes."""
        if self.memory != "image2d":
            raise ValueError(f"buffer {self.name!r} is not an image2d buffer")
        height, width_elems = self.physical_shape
        return (width_elems // 4, height)


@dataclass(frozen=True)
class ArgRef:
    buffer: str
    view: View = "physical"


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``local_size=None`` lets the driver choose."""

    kernel: str
    args: tuple[ArgRef, ...]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None = None


@dataclass(frozen=True)
class KernelProgram:
    name: str
    source: str
    buffers: tuple[BufferSpec, ...]
    compute: tuple[Launch, ...]
    pack: tuple[Launch, ...] = ()
    unpack: tuple[Launch, ...] = ()
    build_options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        aliased = {spec.name for spec in self.buffers if spec.aliased}
        for launch in (*self.pack, *self.unpack):
            converted = aliased.intersection(ref.buffer for ref in launch.args)
            if converted:
                raise ValueError(
                    f"{launch.kernel!r} converts buffer {sorted(converted)[0]!r}, which is "
                    f"aliased: its logical and physical views are one buffer"
                )

    def buffer(self, name: str) -> BufferSpec:
        for spec in self.buffers:
            if spec.name == name:
                return spec
        raise KeyError(f"program {self.name!r} has no buffer {name!r}")

    @property
    def source_hash(self) -> str:
        """Hash of what the compiler sees: source and options."""
        blob = self.source + "\0" + " ".join(self.build_options)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    # -- persistence ----------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Plain JSON values: everything needed to build and launch the program."""
        return {
            "name": self.name,
            "source": self.source,
            "build_options": list(self.build_options),
            "buffers": [
                {
                    "name": b.name,
                    "dtype": b.dtype,
                    "shape": list(b.shape),
                    "physical_shape": list(b.physical_shape),
                    "role": b.role,
                    "memory": b.memory,
                    "pad_value": b.pad_value,
                    "aliased": b.aliased,
                }
                for b in self.buffers
            ],
            "compute": [_launch_json(launch) for launch in self.compute],
            "pack": [_launch_json(launch) for launch in self.pack],
            "unpack": [_launch_json(launch) for launch in self.unpack],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelProgram:
        """Inverse of :meth:`to_json`; a malformed object raises ``ValueError``
        naming the missing or bad field."""
        try:
            return cls(
                name=str(data["name"]),
                source=str(data["source"]),
                build_options=tuple(str(o) for o in data.get("build_options", ())),
                buffers=tuple(
                    BufferSpec(
                        name=str(b["name"]),
                        dtype=str(b["dtype"]),
                        shape=tuple(int(s) for s in b["shape"]),
                        physical_shape=tuple(int(s) for s in b["physical_shape"]),
                        role=b["role"],
                        memory=b.get("memory", "global"),
                        pad_value=None if b.get("pad_value") is None else float(b["pad_value"]),
                        aliased=_flag(b.get("aliased", False), "aliased"),
                    )
                    for b in data["buffers"]
                ),
                compute=tuple(_launch_from_json(x) for x in data["compute"]),
                pack=tuple(_launch_from_json(x) for x in data.get("pack", ())),
                unpack=tuple(_launch_from_json(x) for x in data.get("unpack", ())),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"malformed kernel program JSON: {err!r}") from None


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def _launch_json(launch: Launch) -> dict[str, Any]:
    return {
        "kernel": launch.kernel,
        "args": [[ref.buffer, ref.view] for ref in launch.args],
        "global_size": list(launch.global_size),
        "local_size": None if launch.local_size is None else list(launch.local_size),
    }


def _launch_from_json(data: Mapping[str, Any]) -> Launch:
    local = data.get("local_size")
    return Launch(
        kernel=str(data["kernel"]),
        args=tuple(ArgRef(str(buffer), view) for buffer, view in data["args"]),
        global_size=tuple(int(s) for s in data["global_size"]),
        local_size=None if local is None else tuple(int(s) for s in local),
    )
