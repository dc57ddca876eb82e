"""Running a plan on one OpenCL device.

Every tensor copy of the plan (:class:`~laytune.plan.Version`) is one device
buffer (an ``image2d_t`` when its layout has an axis separator), allocated
once and filled with NaN so that a read of padding nobody wrote shows. A run
uploads the graph inputs in their logical layout, launches in graph order each
operator's compute kernels (from :func:`laytune.codegen.lower`) and, after
each producer, the rewrites of its result (from
:func:`laytune.codegen.lower_conversion`), and reads the graph outputs back
in their logical layout. Nothing else crosses to the host; constants are
packed on the host once, when the plan is compiled.

A rewrite between flat global buffers runs the device's best recorded
conversion kernel for its two layouts when the plan was made from a records
database that holds one (a tuned :class:`~laytune.space.ConversionWorkload`).
Else a rewrite from the logical layout is one pack kernel, one to it one
unpack kernel; between two other layouts it is one pack kernel of the
composed map ``dst . src^-1`` when the source is a flat buffer without
padding, else an unpack into a scratch buffer followed by a pack.

An operator that copies its one input element for element in row-major
order (a reshape or flatten, :func:`row_major_view`) launches nothing where
it reads and writes logical layouts: its result is its input's buffer, a
view (``CompiledPlan.views`` names them). Every buffer is written once per
run, by its producer, so the two names never disagree.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyopencl as cl

from laytune._cl_build import build_source
from laytune.codegen import KernelProgram, Launch, lower, lower_conversion
from laytune.device_info import DeviceInfo
from laytune.exceptions import ConfigError, LaytuneError, PlanError
from laytune.layout import Layout, custom, pack
from laytune.plan._rewrite import Rewrite, is_identity_layout
from laytune.plan._sink import row_major_view
from laytune.runners import image_format
from laytune.space import ConversionWorkload

if TYPE_CHECKING:  # the planner compiles through this module
    from laytune.plan._planner import Plan, Version

__all__ = ["CompiledPlan", "PlanTiming", "Step", "row_major_view"]


@dataclass(frozen=True)
class Step:
    """One kernel launch of a run: an operator's compute kernel or a rewrite."""

    label: str
    kind: str  # "compute" or "rewrite"
    kernel: cl.Kernel
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None


@dataclass(frozen=True)
class PlanTiming:
    """Per timed run: the sum of the launches' profiling-event times
    (``device_seconds``) and the wall time from the first enqueue to the end
    of the queue (``wall_seconds``); ``per_step`` is the median event time
    of each launch. Input upload and output read-back are not timed."""

    device_seconds: tuple[float, ...]
    wall_seconds: tuple[float, ...]
    per_step: tuple[tuple[str, float], ...]

    @property
    def device_median(self) -> float:
        return statistics.median(self.device_seconds)

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall_seconds)


def _memory(layout: Layout) -> str:
    return "image2d" if layout.image_rank == 2 else "global"


def _direct_layout(rewrite: Rewrite) -> Layout | None:
    """``dst . src^-1`` as a layout of ``src``'s physical array, so that one pack
    kernel gathers ``dst`` straight from ``src``; None where that is not exact."""
    if rewrite.src.has_padding or rewrite.src.image_rank != 1:
        return None
    try:
        direct = custom(rewrite.src.physical_shape, rewrite.index_map)
        direct.inverse()
    except LaytuneError:
        return None
    return direct


class CompiledPlan:
    """A plan built for one device: ``run`` it, or ``profile`` it.

    Not thread-safe: runs share the device buffers. ``release`` (or a
    ``with`` block) frees them.
    """

    def __init__(
        self, plan: Plan, context: cl.Context | None = None, conversions: Any = None
    ) -> None:
        if context is None:
            from laytune.runners import default_device

            context = cl.Context([default_device().open()])
        self.plan = plan
        self.context = context
        self.info = DeviceInfo.from_cl_device(context.devices[0])
        if conversions is None and plan.device.key == self.info.key:
            conversions = plan.conversions
        self.conversions = conversions
        self.tuned: list[str] = []  # labels of the rewrites a recorded conversion kernel runs
        self.views: list[str] = []  # operators whose result is their input's buffer
        self.queue = cl.CommandQueue(
            context, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        self._programs: dict[str, cl.Program] = {}
        self._scratch: list[cl.MemoryObject] = []
        self.steps: list[Step] = []
        graph = plan.graph
        self._mem = [self._allocate(v) for v in plan.versions]
        self._storage = {
            v.tensor: i for i, v in enumerate(plan.versions) if v.origin in ("input", "operator")
        }
        for i, v in enumerate(plan.versions):
            if v.origin == "constant":
                self._upload(i, pack(graph.constants[v.tensor], v.layout.index_map, v.pad))
        for name, tensor in graph.tensors.items():
            if tensor.kind == "input":
                self._add_rewrites(name)
        for op in graph.ops:
            self._add_operator(op.name)
            self._add_rewrites(op.output)
        self.queue.finish()

    # -- building -----------------------------------------------------------------
    def _dtype(self, v: Version) -> np.dtype:
        return np.dtype(self.plan.graph.tensors[v.tensor].dtype)

    def _allocate(self, v: Version) -> cl.MemoryObject:
        mf = cl.mem_flags
        dtype = self._dtype(v)
        nan = np.full(1, np.nan, dtype=dtype)
        if _memory(v.layout) == "image2d":
            height, width = v.layout.flat_shape
            image = cl.create_image(
                self.context,
                mf.READ_WRITE,
                image_format(dtype.name),
                shape=(width // 4, height),
            )
            color = np.full(4, np.nan, dtype=np.float32)
            cl.enqueue_fill_image(
                self.queue, image, color, origin=(0, 0), region=(width // 4, height)
            )
            return image
        return self._buffer(v.layout.physical_size * dtype.itemsize, nan)

    def _buffer(self, nbytes: int, fill: np.ndarray) -> cl.Buffer:
        nbytes = max(nbytes, fill.nbytes)
        buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
        cl.enqueue_fill_buffer(self.queue, buffer, fill, 0, nbytes)
        return buffer

    def _upload(self, i: int, physical: np.ndarray) -> None:
        v = self.plan.versions[i]
        if _memory(v.layout) == "image2d":
            height, width = v.layout.flat_shape
            host = np.ascontiguousarray(physical.reshape(height, width // 4, 4))
            cl.enqueue_copy(
                self.queue, self._mem[i], host, origin=(0, 0), region=(width // 4, height)
            )
        else:
            cl.enqueue_copy(self.queue, self._mem[i], np.ascontiguousarray(physical).reshape(-1))

    def _build(self, program: KernelProgram) -> cl.Program:
        key = program.source_hash
        if key not in self._programs:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pyopencl warns about any non-empty build log
                try:
                    built = build_source(self.context, program.source, program.build_options)
                except cl.Error as err:
                    raise PlanError(f"building {program.name} failed: {err}") from None
            self._programs[key] = built
        return self._programs[key]

    def _step(
        self,
        label: str,
        kind: str,
        program: KernelProgram,
        launch: Launch,
        memory: Mapping[tuple[str, str], cl.MemoryObject],
    ) -> None:
        kernel = cl.Kernel(self._build(program), launch.kernel)
        kernel.set_args(*(memory[(arg.buffer, arg.view)] for arg in launch.args))
        self.steps.append(Step(label, kind, kernel, launch.global_size, launch.local_size))

    def _add_operator(self, name: str) -> None:
        plan = self.plan
        op = plan.graph.op(name)
        try:
            program = lower(op.workload, plan.candidate(name), self.info)
        except LaytuneError as err:
            raise PlanError(f"operator {name} cannot run on {self.info.name}: {err}") from None
        out = self._storage[op.output]
        if len(op.inputs) == 1:
            read = plan.read_index(name, op.inputs[0][0])
            layouts = (plan.versions[read].layout, plan.versions[out].layout)
            if all(is_identity_layout(x) for x in layouts) and row_major_view(op.workload):
                self._mem[out].release()
                self._mem[out] = self._mem[read]
                self.views.append(name)
                return
        memory = {
            (port, "physical"): self._mem[plan.read_index(name, port)] for port, _ in op.inputs
        }
        memory[(op.output_port, "physical")] = self._mem[out]
        for launch in program.compute:
            self._step(name, "compute", program, launch, memory)

    def _convert(
        self, label: str, kind: str, tensor: str, layout: Layout, pad: object, src: Any, dst: Any
    ) -> None:
        """One pack (logical ``src`` -> ``layout``) or unpack (``layout`` -> logical ``dst``)."""
        dtype = self.plan.graph.tensors[tensor].dtype
        program = lower_conversion(tensor, layout, dtype, pad, _memory(layout))
        if kind == "pack":
            memory = {(tensor, "logical"): src, (tensor, "physical"): dst}
            self._step(label, "rewrite", program, program.pack[0], memory)
        else:
            memory = {(tensor, "physical"): src, (tensor, "logical"): dst}
            self._step(label, "rewrite", program, program.unpack[0], memory)

    def _add_rewrites(self, tensor: str) -> None:
        plan = self.plan
        for i, v in enumerate(plan.versions):
            if v.tensor != tensor or v.origin != "rewrite":
                continue
            assert v.source is not None
            src, dtype = plan.versions[v.source], self._dtype(v)
            label = f"{tensor} -> {', '.join(v.consumers) or 'rewrite'}"
            src_mem, dst_mem = self._mem[v.source], self._mem[i]
            if self._tuned(label, src.layout, v.layout, dtype.name, v.pad, src_mem, dst_mem):
                continue
            if is_identity_layout(src.layout):
                self._convert(label, "pack", tensor, v.layout, v.pad, src_mem, dst_mem)
                continue
            if is_identity_layout(v.layout):
                self._convert(label, "unpack", tensor, src.layout, None, src_mem, dst_mem)
                continue
            rewrite = Rewrite(tensor, dtype.name, src.layout, v.layout, src.pad, v.pad)
            direct = _direct_layout(rewrite)
            if direct is not None:
                self._convert(label, "pack", tensor, direct, v.pad, src_mem, dst_mem)
                continue
            nbytes = int(np.prod(v.layout.shape)) * dtype.itemsize
            scratch = self._buffer(nbytes, np.full(1, np.nan, dtype=dtype))
            self._scratch.append(scratch)
            self._convert(label, "unpack", tensor, src.layout, None, src_mem, scratch)
            self._convert(label, "pack", tensor, v.layout, v.pad, scratch, dst_mem)

    def _tuned(
        self,
        label: str,
        src: Layout,
        dst: Layout,
        dtype: str,
        pad: object,
        src_mem: Any,
        dst_mem: Any,
    ) -> bool:
        """Run a rewrite with the best recorded conversion kernel, if there is one."""
        if self.conversions is None or src.image_rank != 1 or dst.image_rank != 1:
            return False
        found = self.conversions.best(src, dst, dtype, pad)
        if found is None:
            return False
        workload = ConversionWorkload(src, dst, dtype, pad)
        program = lower(workload, found.candidate, self.info)
        memory = {("src", "physical"): src_mem, ("dst", "physical"): dst_mem}
        self._step(label, "rewrite", program, program.compute[0], memory)
        self.tuned.append(label)
        return True

    # -- running --------------------------------------------------------------------
    def _enqueue(self) -> list[cl.Event]:
        return [
            cl.enqueue_nd_range_kernel(self.queue, s.kernel, s.global_size, s.local_size)
            for s in self.steps
        ]

    def _upload_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        for name, array in self.plan.graph.check_inputs(inputs).items():
            cl.enqueue_copy(self.queue, self._mem[self._storage[name]], array)

    def _read_outputs(self) -> dict[str, np.ndarray]:
        outputs = {}
        for name, i in self.plan.outputs:
            tensor = self.plan.graph.tensors[name]
            out = np.empty(tensor.shape, dtype=tensor.dtype)
            cl.enqueue_copy(self.queue, out, self._mem[i])
            outputs[name] = out
        self.queue.finish()
        return outputs

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph outputs (logical arrays) for the graph inputs ``inputs``."""
        self._upload_inputs(inputs)
        self._enqueue()
        return self._read_outputs()

    def profile(
        self, inputs: Mapping[str, np.ndarray], repeats: int = 10, warmup: int = 2
    ) -> PlanTiming:
        """``warmup`` untimed runs, then ``repeats`` timed ones (see :class:`PlanTiming`)."""
        if repeats < 1 or warmup < 0:
            raise ConfigError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
        self._upload_inputs(inputs)
        for _ in range(warmup):
            self._enqueue()
        self.queue.finish()
        device, wall, steps = [], [], []
        for _ in range(repeats):
            start = time.perf_counter()
            events = self._enqueue()
            self.queue.finish()
            wall.append(time.perf_counter() - start)
            times = [(e.profile.end - e.profile.start) * 1e-9 for e in events]
            device.append(sum(times))
            steps.append(times)
        per_step = tuple(
            (s.label, statistics.median(run[k] for run in steps)) for k, s in enumerate(self.steps)
        )
        return PlanTiming(tuple(device), tuple(wall), per_step)

    def release(self) -> None:
        released = set()
        for mem in (*self._mem, *self._scratch):
            if id(mem) not in released:  # a view shares its input's buffer
                released.add(id(mem))
                mem.release()
        self._mem, self._scratch = [], []

    def __enter__(self) -> CompiledPlan:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
