"""Run a KernelProgram outside the measurement protocol: replay and graphs.

:class:`ProgramExecutor` builds a program for one context, owns its device
memory (a dense logical buffer and the physical storage per program buffer)
and runs its launch lists. The tuner's runner keeps its own protocol
(sentinels, timing, isolation); this is the plain path a production build
or a graph takes once the layouts are chosen.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from laytune._cl_build import build_binary, build_source
from laytune.codegen import ArgRef, BufferSpec, KernelProgram, Launch
from laytune.exceptions import ExecutionError
from laytune.space import IMAGE_DTYPES

__all__ = ["ExecutionError", "ProgramExecutor", "as_context"]


def image_format(dtype: str) -> cl.ImageFormat | None:
    """The RGBA image format that holds ``dtype`` (``IMAGE_DTYPES``); None
    when no image holds it."""
    image = IMAGE_DTYPES.get(np.dtype(dtype).name)
    if image is None:
        return None
    return cl.ImageFormat(cl.channel_order.RGBA, getattr(cl.channel_type, image.channel_type))


def _image_format(spec: BufferSpec) -> cl.ImageFormat:
    found = image_format(spec.dtype)
    if found is None:
        raise ExecutionError(f"image2d buffer {spec.name!r} has dtype {spec.dtype}")
    return found


class ProgramExecutor:
    """One built program with its device memory on one context.

    ``queue`` defaults to a new in-order queue on the context's first device.
    Buffers are allocated once; ``__call__`` uploads logical numpy inputs,
    packs them, computes, unpacks and returns the outputs. An aliased buffer
    (``BufferSpec.aliased``) is one device buffer for both views: uploads go
    into it, the kernels use it, downloads read it, and nothing copies it.
    For buffers that already hold the physical layout, bind them with
    :meth:`set_physical` and call :meth:`compute` alone.
    """

    def __init__(
        self,
        context: cl.Context,
        program: KernelProgram,
        *,
        queue: cl.CommandQueue | None = None,
        binary: bytes | None = None,
    ) -> None:
        self.context = context
        self.program = program
        self.device = context.devices[0]
        self.queue = queue if queue is not None else cl.CommandQueue(context, self.device)
        self._cl_program = self._build(binary)
        self.objects: dict[tuple[str, str], Any] = {}
        self._allocate()
        self._kernels = {
            id(launch): self._bind(launch)
            for launch in (*program.pack, *program.compute, *program.unpack)
        }

    # -- setup ----------------------------------------------------------------------
    def _build(self, binary: bytes | None) -> cl.Program:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                if binary is None:
                    return build_source(
                        self.context, self.program.source, self.program.build_options
                    )
                return build_binary(self.context, self.device, binary, self.program.build_options)
        except cl.Error as err:
            raise ExecutionError(
                f"program {self.program.name!r} does not build on {self.device.name.strip()}: "
                f"{str(err).strip().splitlines()[0]}"
            ) from None

    def _used_physical(self) -> set[str]:
        launches = (*self.program.pack, *self.program.compute, *self.program.unpack)
        return {ref.buffer for launch in launches for ref in launch.args if ref.view == "physical"}

    def _allocate(self) -> None:
        mf = cl.mem_flags
        physical = self._used_physical()
        for spec in self.program.buffers:
            itemsize = np.dtype(spec.dtype).itemsize
            self.objects[(spec.name, "logical")] = cl.Buffer(
                self.context, mf.READ_WRITE, max(1, int(np.prod(spec.shape)) * itemsize)
            )
            if spec.aliased:
                self.objects[(spec.name, "physical")] = self.objects[(spec.name, "logical")]
                continue
            if spec.name not in physical:
                continue
            if spec.memory == "image2d":
                self.objects[(spec.name, "physical")] = cl.Image(
                    self.context, mf.READ_WRITE, _image_format(spec), shape=spec.image_shape
                )
            else:
                size = max(1, int(np.prod(spec.physical_shape)) * itemsize)
                self.objects[(spec.name, "physical")] = cl.Buffer(self.context, mf.READ_WRITE, size)

    def _bind(self, launch: Launch) -> cl.Kernel:
        kernel = cl.Kernel(self._cl_program, launch.kernel)
        kernel.set_args(*(self._object(ref) for ref in launch.args))
        return kernel

    def _object(self, ref: ArgRef) -> Any:
        try:
            return self.objects[(ref.buffer, ref.view)]
        except KeyError:
            raise ExecutionError(
                f"kernel argument names buffer {ref.buffer!r} ({ref.view}), "
                f"which program {self.program.name!r} does not allocate"
            ) from None

    # -- memory ---------------------------------------------------------------------
    def physical(self, name: str) -> Any:
        """The physical storage of a buffer (a ``cl.Buffer`` or ``cl.Image``);
        the logical buffer when the program keeps it in its logical layout."""
        return self.objects.get((name, "physical"), self.objects.get((name, "logical")))

    def set_physical(self, name: str, memory: Any) -> None:
        """Use ``memory`` (already in the buffer's physical layout) as the buffer's
        storage for the compute launches (for an aliased buffer, its one storage)."""
        spec = self.program.buffer(name)  # raises KeyError naming an unknown buffer
        if spec.aliased:
            self.objects[(name, "logical")] = self.objects[(name, "physical")] = memory
        key = (name, "physical") if (name, "physical") in self.objects else (name, "logical")
        self.objects[key] = memory
        for launch in self.program.compute:
            self._kernels[id(launch)] = self._bind(launch)

    def upload(self, name: str, array: np.ndarray) -> None:
        """Copy a logical numpy array into the buffer's logical storage."""
        spec = self.program.buffer(name)
        data = np.ascontiguousarray(array, dtype=np.dtype(spec.dtype))
        if data.shape != spec.shape:
            raise ExecutionError(
                f"{name!r} must have shape {spec.shape}, got {np.shape(array)} "
                f"(program {self.program.name!r})"
            )
        logical = self.objects[(name, "logical")]
        cl.enqueue_copy(self.queue, logical, data)
        physical = self.objects.get((name, "physical"), logical)
        if physical is not logical and not self._packs(name):
            cl.enqueue_copy(self.queue, physical, data)

    def download(self, name: str) -> np.ndarray:
        """The buffer's logical contents as a numpy array (after unpacking)."""
        spec = self.program.buffer(name)
        out = np.empty(spec.shape, dtype=np.dtype(spec.dtype))
        source = self.objects[(name, "logical")]
        if (name, "physical") in self.objects and not self._unpacks(name):
            source = self.objects[(name, "physical")]
        cl.enqueue_copy(self.queue, out, source)
        return out

    def _packs(self, name: str) -> bool:
        return any(ref.buffer == name for launch in self.program.pack for ref in launch.args)

    def _unpacks(self, name: str) -> bool:
        return any(ref.buffer == name for launch in self.program.unpack for ref in launch.args)

    # -- launches -----------------------------------------------------------------------
    def _run(self, launches: Sequence[Launch]) -> list[cl.Event]:
        events = []
        for launch in launches:
            try:
                events.append(
                    cl.enqueue_nd_range_kernel(
                        self.queue,
                        self._kernels[id(launch)],
                        launch.global_size,
                        launch.local_size,
                    )
                )
            except cl.Error as err:
                raise ExecutionError(
                    f"launching {launch.kernel!r} failed: {str(err).strip().splitlines()[0]}"
                ) from None
        return events

    def pack(self) -> list[cl.Event]:
        return self._run(self.program.pack)

    def compute(self) -> list[cl.Event]:
        return self._run(self.program.compute)

    def unpack(self) -> list[cl.Event]:
        return self._run(self.program.unpack)

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.program.buffers if b.role in ("input", "inout"))

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.program.buffers if b.role in ("output", "inout"))

    def __call__(self, *args: np.ndarray, **kwargs: np.ndarray) -> Any:
        """Run on logical numpy inputs (positional in the program's input order,
        or by name); returns the output array (a dict when several)."""
        arrays = dict(zip(self.inputs, args, strict=False))
        if len(args) > len(self.inputs):
            raise ExecutionError(f"{len(args)} inputs given; the program takes {self.inputs}")
        arrays.update(kwargs)
        missing = [n for n in self.inputs if n not in arrays]
        unknown = sorted(set(arrays) - set(self.inputs))
        if missing or unknown:
            raise ExecutionError(
                f"program {self.program.name!r} takes inputs {list(self.inputs)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {unknown}" if unknown else "")
            )
        for name, array in arrays.items():
            self.upload(name, array)
        self.pack()
        self.compute()
        self.unpack()
        outputs = {name: self.download(name) for name in self.outputs}
        self.queue.finish()
        return next(iter(outputs.values())) if len(outputs) == 1 else outputs

    def release(self) -> None:
        released: set[int] = set()
        for memory in self.objects.values():
            if id(memory) not in released:  # an aliased buffer's two views are one
                released.add(id(memory))
                memory.release()
        self.objects.clear()


def as_context(target: Any) -> cl.Context:
    """A context from a ``cl.Context``, a ``cl.Device`` or a laytune Device."""
    if isinstance(target, cl.Context):
        return target
    if isinstance(target, cl.Device):
        return cl.Context([target])
    if hasattr(target, "open"):
        return cl.Context([target.open()])
    raise ExecutionError(f"expected an OpenCL context or device, got {type(target).__name__}")
