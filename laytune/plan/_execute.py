"""Running a plan on one OpenCL device.

Every tensor copy of the plan (:class:`~laytune.plan.Version`) is one device
buffer (an ``image2d_t`` when its layout has an axis separator), allocated
once and filled with NaN so that a read of padding nobody wrote shows; an
intermediate whose life (its first launch to its last) begins after
another's ended uses that one's memory (:func:`share_storage`). A run
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
its input's and output's layouts put every element at the same place
(:func:`same_order`: logical layouts, or a blocked tensor and the rows of a
MatMul blocked alike): its result is its input's buffer, a view
(``CompiledPlan.views`` names them). So does a rewrite between two such
layouts of one tensor (a pooled ``[1, 512, 1, 1]`` blocked by 16 channels
is stored as the logical one its flatten reads). Every buffer is written
once per run, by its producer, so the two names never disagree.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyopencl as cl

from laytune._cl_build import build_source
from laytune.codegen import KernelProgram, Launch, lower, lower_conversion
from laytune.device_info import DeviceInfo
from laytune.exceptions import ConfigError, LaytuneError, PlanError
from laytune.layout import Layout, custom, identity, pack, same_offsets_reshaped
from laytune.ops import Workload
from laytune.plan._rewrite import Rewrite, is_identity_layout
from laytune.plan._sink import row_major_view
from laytune.runners import image_format
from laytune.space import ConversionWorkload

if TYPE_CHECKING:  # the planner compiles through this module
    from laytune.plan._planner import Plan

__all__ = [
    "CompiledPlan",
    "LoweredPlan",
    "PlanBuffer",
    "PlanLaunch",
    "PlanTiming",
    "Step",
    "lower_plan",
    "row_major_view",
    "share_storage",
]


@dataclass(frozen=True)
class Step:
    """One kernel launch of a run: an operator's compute kernel or a rewrite."""

    label: str
    kind: str  # "compute" or "rewrite"
    kernel: cl.Kernel
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    #: the kernel's program (source and build options), so that two plans
    #: can tell the launches they share
    source_hash: str = ""

    @property
    def work(self) -> tuple[str, str, tuple[int, ...], tuple[int, ...] | None]:
        """What the launch does: two plans' launches with equal ``work`` run
        the same kernel over the same range, under the same label."""
        return (self.label, self.source_hash, self.global_size, self.local_size)


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


def same_order(src: Layout, dst: Layout) -> bool:
    """Whether a row-major view (a reshape: element ``n`` of ``dst``'s tensor
    in row-major order is element ``n`` of ``src``'s) finds every element at
    the same place of one buffer: both layouts identity, or both without
    padding, in buffers of one flat shape, with the same physical offset for
    each element in row-major order. A 3-D ``[1, 128, 768]`` as ``[i, j //
    8, k, j % 8]`` is so the rows ``[128, 768]`` as ``[j // 8, k, j % 8]``
    that BERT's MatMul reads: its reshape launches nothing."""
    if is_identity_layout(src) and is_identity_layout(dst):
        return True
    if src.has_padding or dst.has_padding or src.flat_shape != dst.flat_shape:
        return False
    if _memory(src) != "global" or _memory(dst) != "global":
        return False
    return same_offsets_reshaped(src.index_map, src.shape, dst.index_map, dst.shape)


def runs_as_view(workload: Workload, src: Layout, dst: Layout) -> bool:
    """Whether an operator of ``workload`` reading its one input in ``src``
    and writing in ``dst`` launches nothing: a row-major copy
    (:func:`~laytune.plan._sink.row_major_view`) between layouts that store
    its tensor alike (:func:`same_order`), whose result is its input's memory."""
    return row_major_view(workload) and same_order(src, dst)


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


@dataclass(frozen=True)
class PlanBuffer:
    """One device buffer of a lowered plan: a tensor copy (:class:`Version`), or
    scratch that a two-step rewrite goes through. ``elements`` counts its
    physical elements; an ``image2d`` holds them as ``image_shape`` = (width,
    height) RGBA texels. ``role``: ``input`` (uploaded in its logical layout),
    ``constant`` (packed on the host, ``LoweredPlan.constants``), ``output``
    (read back in its logical layout), ``intermediate`` or ``scratch``."""

    name: str
    tensor: str
    dtype: str
    elements: int
    memory: str
    image_shape: tuple[int, int] | None
    role: str
    layout: str

    @property
    def nbytes(self) -> int:
        return self.elements * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class PlanLaunch:
    """One kernel launch of a lowered plan, in run order: kernel ``kernel`` of
    ``LoweredPlan.programs[program]``, its arguments buffer indices."""

    label: str
    kind: str  # "compute" or "rewrite"
    program: int
    kernel: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    args: tuple[int, ...]


@dataclass(frozen=True)
class LoweredPlan:
    """A plan as data for one device: every buffer, every distinct program,
    every launch in order, each constant's packed physical array, and which
    buffers take the graph inputs and give its outputs. :class:`CompiledPlan`
    builds it with pyopencl; :func:`laytune.plan.export_model` writes it
    for a build outside Python. ``views`` names the operators and rewrites
    that launch nothing (their result is their input's buffer), ``tuned`` the rewrites
    that run a recorded conversion kernel."""

    buffers: tuple[PlanBuffer, ...]
    programs: tuple[KernelProgram, ...]
    launches: tuple[PlanLaunch, ...]
    constants: tuple[tuple[int, np.ndarray], ...]
    inputs: tuple[tuple[str, int], ...]
    outputs: tuple[tuple[str, int], ...]
    views: tuple[str, ...]
    tuned: tuple[str, ...]
    storage: tuple[int, ...]

    def owner(self, buffer: int) -> int:
        """The buffer whose memory ``buffer`` uses (:func:`share_storage`):
        itself, or an earlier one whose last launch comes before its first."""
        return self.storage[buffer]

    def storage_nbytes(self, owner: int) -> int:
        """Bytes of the memory ``owner`` allocates: the most any buffer it
        lends its memory to needs."""
        return max(
            (b.nbytes for k, b in enumerate(self.buffers) if self.owner(k) == owner),
            default=self.buffers[owner].nbytes,
        )


def share_storage(
    buffers: Sequence[PlanBuffer],
    launches: Sequence[PlanLaunch],
    keep: Iterable[int],
    padded: Sequence[bool],
) -> tuple[int, ...]:
    """Which buffer's memory each buffer uses: memory planning over the
    launches' order. A buffer lives from the first launch that names it to
    the last; one whose life ended lends its memory to the next that starts
    after it, the latest freed first (its lines are the likeliest still in
    the cache), the widest grown where none is large enough. Only global
    buffers of intermediates and scratch share, without padding (a pad
    value some reader relies on is written once, when allocated). The
    buffers of the graph's inputs and outputs (``keep``) keep their own
    memory, also where a view makes an output an intermediate's buffer.

    A network's tensors then take the memory of a few of them, as an
    inference runtime's arena does, and stay in the cache: MobileNet-v2's 60
    intermediates took 32.4 MiB, more than the 32 MiB L3 of the Zen 5 host
    that ran it in 4.2 ms, and share 7.8 MiB in 3.0 ms."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, launch in enumerate(launches):
        for a in launch.args:
            first.setdefault(a, i)
            last[a] = i
    kept = set(keep)
    storage = list(range(len(buffers)))
    shared = sorted(
        (
            k
            for k, b in enumerate(buffers)
            if k in first
            and k not in kept
            and b.role in ("intermediate", "scratch")
            and b.memory == "global"
            and not padded[k]
        ),
        key=lambda k: first[k],
    )
    owners: list[list[int]] = []  # [owner buffer, bytes, last launch]
    for k in shared:
        need = buffers[k].nbytes
        free = [o for o in owners if o[2] < first[k]]
        fits = [o for o in free if o[1] >= need]
        found = max(fits or free, key=lambda o: o[2], default=None)
        if found is None:
            owners.append([k, need, last[k]])
            continue
        storage[k] = found[0]
        found[1], found[2] = max(found[1], need), last[k]
    return tuple(storage)


class _Lowering:
    """The steps of :func:`lower_plan`: one buffer per version (a view's is its
    input's), then each operator's launches and each tensor's rewrites in graph
    order."""

    def __init__(self, plan: Plan, info: DeviceInfo, conversions: Any) -> None:
        self.plan, self.info, self.conversions = plan, info, conversions
        graph = plan.graph
        outputs = {i for _, i in plan.outputs}
        self.buffers: list[PlanBuffer] = []
        self.padded: list[bool] = []  # by buffer, as self.buffers
        for i, v in enumerate(plan.versions):
            role = {"input": "input", "constant": "constant"}.get(v.origin, "intermediate")
            name = v.tensor if v.origin != "rewrite" else f"{v.tensor} -> {', '.join(v.consumers)}"
            self.buffers.append(
                self._buffer(name, v.tensor, v.layout, "output" if i in outputs else role)
            )
        self.slot = list(range(len(plan.versions)))  # version -> buffer
        # the version each operator writes its result into
        self.written = {v.tensor: i for i, v in enumerate(plan.versions) if v.origin == "operator"}
        self.programs: dict[str, int] = {}
        self.program_list: list[KernelProgram] = []
        self.launches: list[PlanLaunch] = []
        self.views: list[str] = []
        self.tuned: list[str] = []
        for name, tensor in graph.tensors.items():
            if tensor.kind == "input":
                self.rewrites(name)
        for op in graph.ops:
            self.operator(op.name)
            self.rewrites(op.output)

    def _buffer(self, name: str, tensor: str, layout: Layout, role: str) -> PlanBuffer:
        dtype = self.plan.graph.tensors[tensor].dtype
        image = None
        if _memory(layout) == "image2d":
            height, width = layout.flat_shape
            image = (width // 4, height)
        self.padded.append(layout.has_padding)
        return PlanBuffer(
            name,
            tensor,
            dtype,
            layout.physical_size,
            _memory(layout),
            image,
            role,
            str(layout.index_map),
        )

    def result(self) -> LoweredPlan:
        plan = self.plan
        # the buffers left once views share their inputs', then the scratch ones
        used = [*dict.fromkeys(self.slot), *range(len(plan.versions), len(self.buffers))]
        number = {b: k for k, b in enumerate(used)}
        slot = [number[s] for s in self.slot]
        buffers = tuple(self.buffers[b] for b in used)
        constants = tuple(
            (slot[i], pack(plan.graph.constants[v.tensor], v.layout.index_map, v.pad))
            for i, v in enumerate(plan.versions)
            if v.origin == "constant"
        )
        stored = {v.tensor: i for i, v in enumerate(plan.versions) if v.origin == "input"}
        launches = tuple(
            replace(launch, args=tuple(number[a] for a in launch.args)) for launch in self.launches
        )
        inputs = tuple((name, slot[i]) for name, i in stored.items())
        outputs = tuple((name, slot[i]) for name, i in plan.outputs)
        keep = [b for _, b in inputs + outputs]
        return LoweredPlan(
            buffers=buffers,
            programs=tuple(self.program_list),
            launches=launches,
            constants=constants,
            inputs=inputs,
            outputs=outputs,
            views=tuple(self.views),
            tuned=tuple(self.tuned),
            storage=share_storage(buffers, launches, keep, [self.padded[b] for b in used]),
        )

    def launch(
        self,
        label: str,
        kind: str,
        program: KernelProgram,
        launch: Launch,
        memory: Mapping[tuple[str, str], int],
    ) -> None:
        index = self.programs.get(program.source_hash)
        if index is None:
            index = self.programs[program.source_hash] = len(self.program_list)
            self.program_list.append(program)
        args = tuple(memory[(arg.buffer, arg.view)] for arg in launch.args)
        self.launches.append(
            PlanLaunch(
                label, kind, index, launch.kernel, launch.global_size, launch.local_size, args
            )
        )

    def operator(self, name: str) -> None:
        plan = self.plan
        op = plan.graph.op(name)
        try:
            program = lower(op.workload, plan.candidate(name), self.info)
        except LaytuneError as err:
            raise PlanError(f"operator {name} cannot run on {self.info.name}: {err}") from None
        out = self.written[op.output]
        if len(op.inputs) == 1:
            read = plan.read_index(name, op.inputs[0][0])
            src, dst = plan.versions[read].layout, plan.versions[out].layout
            if runs_as_view(op.workload, src, dst):
                self.slot[out] = self.slot[read]
                self.views.append(name)
                return
        memory = {
            (port, "physical"): self.slot[plan.read_index(name, port)] for port, _ in op.inputs
        }
        memory[(op.output_port, "physical")] = self.slot[out]
        for launch in program.compute:
            self.launch(name, "compute", program, launch, memory)

    def convert(
        self, label: str, kind: str, tensor: str, layout: Layout, pad: object, src: int, dst: int
    ) -> None:
        """One pack (logical ``src`` -> ``layout``) or unpack (``layout`` -> logical ``dst``)."""
        dtype = self.plan.graph.tensors[tensor].dtype
        program = lower_conversion(tensor, layout, dtype, pad, _memory(layout))
        if kind == "pack":
            memory = {(tensor, "logical"): src, (tensor, "physical"): dst}
            self.launch(label, "rewrite", program, program.pack[0], memory)
        else:
            memory = {(tensor, "physical"): src, (tensor, "logical"): dst}
            self.launch(label, "rewrite", program, program.unpack[0], memory)

    def rewrites(self, tensor: str) -> None:
        plan = self.plan
        for i, v in enumerate(plan.versions):
            if v.tensor != tensor or v.origin != "rewrite":
                continue
            assert v.source is not None
            src = plan.versions[v.source]
            dtype = np.dtype(plan.graph.tensors[tensor].dtype)
            label = f"{tensor} -> {', '.join(v.consumers) or 'rewrite'}"
            if same_order(src.layout, v.layout):  # the same offsets: read as it is
                self.slot[i] = self.slot[v.source]
                self.views.append(label)
                continue
            src_mem, dst_mem = self.slot[v.source], self.slot[i]
            if self.recorded(label, src.layout, v.layout, dtype.name, v.pad, src_mem, dst_mem):
                continue
            if is_identity_layout(src.layout):
                self.convert(label, "pack", tensor, v.layout, v.pad, src_mem, dst_mem)
                continue
            if is_identity_layout(v.layout):
                self.convert(label, "unpack", tensor, src.layout, None, src_mem, dst_mem)
                continue
            rewrite = Rewrite(tensor, dtype.name, src.layout, v.layout, src.pad, v.pad)
            direct = _direct_layout(rewrite)
            if direct is not None:
                self.convert(label, "pack", tensor, direct, v.pad, src_mem, dst_mem)
                continue
            scratch = len(self.buffers)
            self.buffers.append(
                self._buffer(f"{label} (scratch)", tensor, identity(v.layout.shape), "scratch")
            )
            self.convert(label, "unpack", tensor, src.layout, None, src_mem, scratch)
            self.convert(label, "pack", tensor, v.layout, v.pad, scratch, dst_mem)

    def recorded(
        self,
        label: str,
        src: Layout,
        dst: Layout,
        dtype: str,
        pad: object,
        src_mem: int,
        dst_mem: int,
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
        self.launch(label, "rewrite", program, program.compute[0], memory)
        self.tuned.append(label)
        return True


def lower_plan(plan: Plan, info: DeviceInfo, conversions: Any = None) -> LoweredPlan:
    """``plan`` as data for the device ``info`` (:class:`LoweredPlan`): every
    operator lowered with its candidate (:func:`laytune.codegen.lower`), every
    rewrite with the best recorded conversion kernel of ``conversions`` (a
    :class:`laytune.records.RecordedConversions`) or a generated one, and
    each constant packed into its layout."""
    return _Lowering(plan, info, conversions).result()


class CompiledPlan:
    """A plan built for one device: ``run`` it, or ``profile`` it.

    Not thread-safe: runs share the device buffers. ``release`` (or a
    ``with`` block) frees them. ``lowered`` is what it built
    (:func:`lower_plan`).
    """

    def __init__(
        self,
        plan: Plan,
        context: cl.Context | None = None,
        conversions: Any = None,
        programs: dict[str, cl.Program] | None = None,
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
        self._programs = {} if programs is None else programs
        self.lowered = lowered = lower_plan(plan, self.info, conversions)
        self.tuned: list[str] = list(lowered.tuned)  # rewrites a recorded conversion kernel runs
        self.views: list[str] = list(
            lowered.views
        )  # operators whose result is their input's buffer
        self.queue = cl.CommandQueue(
            context, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        self._mem: list[cl.MemoryObject] = []
        for k, buffer in enumerate(lowered.buffers):
            owner = lowered.owner(k)
            shared = owner != k
            self._mem.append(
                self._mem[owner] if shared else self._allocate(buffer, lowered.storage_nbytes(k))
            )
        self._storage = dict(lowered.inputs)
        for i, physical in lowered.constants:
            self._upload(i, physical)
        built = [self._build(program) for program in lowered.programs]
        self.steps: list[Step] = []
        for launch in lowered.launches:
            kernel = cl.Kernel(built[launch.program], launch.kernel)
            kernel.set_args(*(self._mem[a] for a in launch.args))
            self.steps.append(
                Step(
                    launch.label,
                    launch.kind,
                    kernel,
                    launch.global_size,
                    launch.local_size,
                    lowered.programs[launch.program].source_hash,
                )
            )
        self.queue.finish()
        self._prepare_run()

    # -- building -----------------------------------------------------------------
    def _allocate(self, buffer: PlanBuffer, nbytes: int) -> cl.MemoryObject:
        dtype = np.dtype(buffer.dtype)
        if buffer.image_shape is not None:
            width, height = buffer.image_shape
            image = cl.create_image(
                self.context,
                cl.mem_flags.READ_WRITE,
                image_format(dtype.name),
                shape=(width, height),
            )
            color = np.full(4, np.nan, dtype=np.float32)
            cl.enqueue_fill_image(self.queue, image, color, origin=(0, 0), region=(width, height))
            return image
        nan = np.full(1, np.nan, dtype=dtype)
        nbytes = max(nbytes, nan.nbytes)
        memory = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
        cl.enqueue_fill_buffer(self.queue, memory, nan, 0, nbytes)
        return memory

    def _upload(self, i: int, physical: np.ndarray) -> None:
        buffer = self.lowered.buffers[i]
        if buffer.image_shape is not None:
            width, height = buffer.image_shape
            host = np.ascontiguousarray(physical.reshape(height, width, 4))
            cl.enqueue_copy(self.queue, self._mem[i], host, origin=(0, 0), region=(width, height))
        else:
            cl.enqueue_copy(self.queue, self._mem[i], np.ascontiguousarray(physical).reshape(-1))

    def _build(self, program: KernelProgram) -> cl.Program:
        key = program.source_hash  # what the compiler sees: source and options
        built = self._programs.get(key)
        if built is not None:
            return built
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyopencl warns about any non-empty build log
            try:
                built = build_source(self.context, program.source, program.build_options)
            except cl.Error as err:
                raise PlanError(f"building {program.name} failed: {err}") from None
        self._programs[key] = built
        return built

    # -- running --------------------------------------------------------------------
    # A run starts on caches the previous run filled with its weights (a
    # ResNet-18 streams 45 MiB through them), so the host's part of it runs
    # on cold memory: looking the graph's inputs up among its 150 tensors
    # took 48 us there against 3 us warm, and the device waits for it. The
    # running path touches only what _prepare_run laid out.
    def _prepare_run(self) -> None:
        tensors = self.plan.graph.tensors
        self._launches = tuple((s.kernel, s.global_size, s.local_size) for s in self.steps)
        self._inputs = tuple(
            (name, tensors[name].shape, np.dtype(tensors[name].dtype), self._mem[i])
            for name, i in self._storage.items()
        )
        self._outputs = tuple(
            (name, tensors[name].shape, np.dtype(tensors[name].dtype), self._mem[i])
            for name, i in self.lowered.outputs
        )

    def _enqueue(self) -> list[cl.Event]:
        enqueue, queue = cl.enqueue_nd_range_kernel, self.queue
        return [enqueue(queue, kernel, size, local) for kernel, size, local in self._launches]

    def _host_inputs(self, inputs: Mapping[str, np.ndarray]) -> list[tuple[Any, np.ndarray]]:
        """(device buffer, host array) of each graph input: ``inputs`` as
        they are where each already is a contiguous array of its tensor's
        shape and dtype, else as :meth:`Graph.check_inputs` makes them (or
        refuses them)."""
        if len(inputs) == len(self._inputs):
            ready = []
            for name, shape, dtype, memory in self._inputs:
                array = inputs.get(name)
                if not (
                    isinstance(array, np.ndarray)
                    and array.dtype == dtype
                    and array.shape == shape
                    and array.flags.c_contiguous
                ):
                    break
                ready.append((memory, array))
            else:
                return ready
        checked = self.plan.graph.check_inputs(inputs)
        return [(memory, checked[name]) for name, _, _, memory in self._inputs]

    def _upload_inputs(self, inputs: Mapping[str, np.ndarray]) -> list[cl.Event]:
        """Enqueue the copies of ``inputs`` without waiting for them, so that
        the host enqueues the launches while they run (a blocking copy left
        that work to overlap the first kernel, on a CPU device taking one of
        its cores). Keep the events returned until the launches are enqueued:
        dropping one waits for its copy (pyopencl's ``NannyEvent``, which
        holds the host array until then)."""
        return [
            cl.enqueue_copy(self.queue, memory, array, is_blocking=False)
            for memory, array in self._host_inputs(inputs)
        ]

    def _read_outputs(self) -> dict[str, np.ndarray]:
        outputs, copies = {}, []
        for name, shape, dtype, memory in self._outputs:
            out = outputs[name] = np.empty(shape, dtype=dtype)
            copies.append(cl.enqueue_copy(self.queue, out, memory, is_blocking=False))
        self.queue.finish()
        return outputs

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph outputs (logical arrays) for the graph inputs ``inputs``."""
        copies = self._upload_inputs(inputs)
        self._enqueue()
        outputs = self._read_outputs()
        del copies  # done: the queue has finished
        return outputs

    def profile(
        self, inputs: Mapping[str, np.ndarray], repeats: int = 10, warmup: int = 2
    ) -> PlanTiming:
        """``warmup`` untimed runs, then ``repeats`` timed ones (see :class:`PlanTiming`)."""
        if repeats < 1 or warmup < 0:
            raise ConfigError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
        self._upload_inputs(inputs)  # each copy done as its event is dropped
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
        for k, mem in enumerate(self._mem):
            if self.lowered.owner(k) == k:  # a buffer that shares memory frees nothing
                mem.release()
        self._mem = []

    def __enter__(self) -> CompiledPlan:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
