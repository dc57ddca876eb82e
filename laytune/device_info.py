"""DeviceInfo: an immutable snapshot of what tuning needs to know of a device.

It lives outside the pipeline stages because every stage reads it: the search
space checks constraints against its limits without a device attached, the
runners fill it from a live pyopencl device, and records key on it. A snapshot
can also be written by hand for a device that is not present.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from laytune._cl_build import build_source
from laytune.exceptions import DeviceInfoError

__all__ = ["DeviceInfo"]

_VECTOR_TYPES = ("char", "short", "int", "long", "float", "double", "half")


@dataclass(frozen=True)
class DeviceInfo:
    """Limits and identity of one OpenCL device.

    ``sub_group_sizes``: the sub-group sizes a kernel may require
    (``CL_DEVICE_SUB_GROUP_SIZES_INTEL``; empty where the device does not
    report them). ``compute_capability``: NVIDIA's (major, minor) where the
    device reports it (``cl_nv_device_attribute_query``), else None.
    ``builtins``: the compiler built-ins outside the OpenCL C standard that a
    probe build found (:data:`PROBED_BUILTINS`): ``"nontemporal_store"``
    (clang's ``__builtin_nontemporal_store``, a store that bypasses the
    caches, on compilers built on clang), ``"prefetch"`` (clang's
    ``__builtin_prefetch``: a hint that loads a line into the cache without
    waiting for it; OpenCL's own ``prefetch`` made a kernel slower on
    Intel's CPU runtime, ``bench.hand_stream``). ``last_level_cache_size``: bytes of
    the largest cache between the compute units and global memory: the
    device's ``CL_DEVICE_GLOBAL_MEM_CACHE_SIZE``, or on a CPU device the
    host's largest cache when that is larger (CPU runtimes report one core's:
    Intel's 1 MiB on a host with a 32 MiB L3); 0 when unknown.
    ``cacheline_size``: bytes of one line of the global memory cache
    (``CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE``); 0 when unknown.
    ``cache_size``: bytes of the global memory cache as the device itself
    reports it (``CL_DEVICE_GLOBAL_MEM_CACHE_SIZE``: one core's L2 on
    Intel's CPU runtime, the last level on PoCL's); 0 when unknown.
    ``lockstep_width``: the work-items that one instruction runs together as
    its lanes, where the device reports it (NVIDIA's warp,
    ``CL_DEVICE_WARP_SIZE_NV``; AMD's wavefront,
    ``CL_DEVICE_WAVEFRONT_WIDTH_AMD``); 0 when it reports none
    (:meth:`lockstep_items` then infers it).

    ``key`` is stable: the same platform, device, vendor, driver and OpenCL
    version give the same key in every process and run, and nothing else
    (memory currently free, say) enters it.
    """

    platform_name: str
    device_name: str
    vendor: str = ""
    driver_version: str = ""
    opencl_version: str = ""
    device_type: str = "UNKNOWN"
    compute_units: int = 1
    global_mem_size: int = 1 << 30
    max_mem_alloc_size: int = 1 << 28
    local_mem_size: int = 32 * 1024
    max_work_group_size: int = 256
    max_work_item_sizes: tuple[int, ...] = (256, 256, 64)
    image_support: bool = False
    image2d_max_width: int = 0
    image2d_max_height: int = 0
    extensions: tuple[str, ...] = ()
    preferred_vector_widths: tuple[tuple[str, int], ...] = field(default=())
    sub_group_sizes: tuple[int, ...] = ()
    compute_capability: tuple[int, int] | None = None
    builtins: tuple[str, ...] = ()
    last_level_cache_size: int = 0
    cacheline_size: int = 0
    cache_size: int = 0
    lockstep_width: int = 0

    # -- identity -----------------------------------------------------------
    @property
    def key(self) -> str:
        return _device_key(
            self.platform_name,
            self.device_name,
            self.vendor,
            self.driver_version,
            self.opencl_version,
        )

    @staticmethod
    def key_of(device: Any) -> str:
        """The :attr:`key` of a ``pyopencl.Device``, read from its identity
        alone: no snapshot (whose built-in probe builds a program), so a
        worker that reopens a device by its indices checks it cheaply."""
        return _device_key(
            device.platform.name.strip(),
            device.name.strip(),
            device.vendor.strip(),
            device.driver_version.strip(),
            device.version.strip(),
        )

    @property
    def name(self) -> str:
        return f"{self.device_name} ({self.platform_name})"

    # -- capabilities -------------------------------------------------------
    def has_extension(self, extension: str) -> bool:
        return extension in self.extensions

    @property
    def supports_fp16(self) -> bool:
        return self.has_extension("cl_khr_fp16")

    @property
    def supports_fp64(self) -> bool:
        return self.has_extension("cl_khr_fp64")

    @property
    def is_nvidia(self) -> bool:
        return "NVIDIA" in self.vendor.upper() or "NVIDIA" in self.platform_name.upper()

    def preferred_vector_width(self, ctype: str) -> int:
        return dict(self.preferred_vector_widths).get(ctype, 1)

    # -- construction -------------------------------------------------------
    @classmethod
    def from_cl_device(cls, device: Any) -> DeviceInfo:
        """Read a snapshot from a ``pyopencl.Device`` (every limit read once)."""
        import pyopencl as cl

        widths = []
        for ctype in _VECTOR_TYPES:
            try:
                widths.append((ctype, int(getattr(device, f"preferred_vector_width_{ctype}"))))
            except (cl.LogicError, AttributeError):
                continue
        from laytune._cl_queries import compute_capability_nv, sub_group_sizes_intel

        image_support = bool(device.image_support)
        capability = None
        if "cl_nv_device_attribute_query" in device.extensions.split():
            try:
                capability = (
                    int(device.compute_capability_major_nv),
                    int(device.compute_capability_minor_nv),
                )
            except (cl.LogicError, AttributeError):  # a pyopencl without the NV names
                capability = compute_capability_nv(device)
        return cls(
            platform_name=device.platform.name.strip(),
            device_name=device.name.strip(),
            vendor=device.vendor.strip(),
            driver_version=device.driver_version.strip(),
            opencl_version=device.version.strip(),
            device_type=" | ".join(
                kind
                for kind in ("GPU", "CPU", "ACCELERATOR", "CUSTOM")
                if device.type & getattr(cl.device_type, kind)
            )
            or "DEFAULT",
            compute_units=int(device.max_compute_units),
            global_mem_size=int(device.global_mem_size),
            max_mem_alloc_size=int(device.max_mem_alloc_size),
            local_mem_size=int(device.local_mem_size),
            max_work_group_size=int(device.max_work_group_size),
            max_work_item_sizes=tuple(int(s) for s in device.max_work_item_sizes),
            image_support=image_support,
            image2d_max_width=int(device.image2d_max_width) if image_support else 0,
            image2d_max_height=int(device.image2d_max_height) if image_support else 0,
            extensions=tuple(sorted(device.extensions.split())),
            preferred_vector_widths=tuple(sorted(widths)),  # as from_json gives them
            sub_group_sizes=sub_group_sizes_intel(device),
            compute_capability=capability,
            builtins=probe_builtins(device),
            last_level_cache_size=max(
                int(device.global_mem_cache_size),
                _host_cache_size() if device.type & cl.device_type.CPU else 0,
            ),
            cacheline_size=int(device.global_mem_cacheline_size),
            cache_size=int(device.global_mem_cache_size),
            lockstep_width=_lockstep_width(device),
        )

    def has_builtin(self, name: str) -> bool:
        return name in self.builtins

    def holds(self, nbytes: int) -> bool:
        """Whether ``nbytes`` written by one kernel are still in the
        last-level cache when the next reads them: at most half of it (a
        working set near a cache's size does not stay in it, for its ways
        and its other tenants: 24 MiB ran at the cold rates on a 32 MiB L3);
        False where the size is unknown."""
        return 0 < 2 * nbytes <= self.last_level_cache_size

    def float_lanes(self) -> int:
        """Float lanes of one vector register: the preferred float vector
        width where the device reports one above 1; on a CPU device that
        reports 1 (Intel's runtime, which vectorises across work-items), the
        host's widest float SIMD (AVX-512: 16, AVX: 8, SSE and NEON: 4); 4 on
        other devices (a GPU work-item's 128-bit loads)."""
        preferred = self.preferred_vector_width("float")
        if preferred > 1:
            return min(max(preferred, 4), 16)
        if not self.is_cpu:
            return 4
        try:
            from numpy._core._multiarray_umath import __cpu_features__ as features
        except ImportError:  # another numpy: the width every x86-64 and ARM64 has
            return 4
        if features.get("AVX512F"):
            return 16
        return 8 if features.get("AVX") else 4

    def block_registers(self) -> int:
        """Vector registers a register block of accumulators may take: the
        register file of the lanes' instruction set (AVX-512: 32, AVX and
        128-bit SIMD: 16) less 4 that hold the operands."""
        return block_registers(self.float_lanes())

    @property
    def is_cpu(self) -> bool:
        return "CPU" in self.device_type

    def lockstep_items(self) -> int:
        """Consecutive work-items (along NDRange dimension 0) that run each
        instruction together as its lanes, so that their loads and stores
        are one access when their addresses are adjacent (coalesced) or
        equal (broadcast): 1 on a CPU device (its work-items are iterations
        of a loop, and a kernel's own vectors are its lanes); the width the
        device reports (:attr:`lockstep_width`), else its largest sub-group,
        else 32 (a warp) on other devices."""
        if self.is_cpu:
            return 1
        if self.lockstep_width > 0:
            return self.lockstep_width
        return max(self.sub_group_sizes, default=LOCKSTEP_ITEMS)

    def register_block_points(self) -> int:
        """Outputs one work-item's register block may hold: on a CPU,
        :func:`accumulator_registers` vectors of :meth:`float_lanes`
        (AVX-512: 30 x 16 = 480, AVX: 14 x 8 = 112); on other devices, whose
        work-items hold scalars, 128: half the 255 registers an NVIDIA
        thread may use, the rest for addresses and operands."""
        if not self.is_cpu:
            return GPU_BLOCK_POINTS
        lanes = self.float_lanes()
        return accumulator_registers(lanes) * lanes

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["max_work_item_sizes"] = list(self.max_work_item_sizes)
        data["extensions"] = list(self.extensions)
        data["preferred_vector_widths"] = dict(self.preferred_vector_widths)
        data["sub_group_sizes"] = list(self.sub_group_sizes)
        data["builtins"] = list(self.builtins)
        if self.compute_capability is not None:
            data["compute_capability"] = list(self.compute_capability)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceInfo:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise DeviceInfoError(f"unknown DeviceInfo fields: {sorted(unknown)}")
        data = dict(data)
        if "max_work_item_sizes" in data:
            data["max_work_item_sizes"] = tuple(data["max_work_item_sizes"])
        if "extensions" in data:
            data["extensions"] = tuple(data["extensions"])
        for name in ("sub_group_sizes", "compute_capability", "builtins"):
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        if "preferred_vector_widths" in data:
            data["preferred_vector_widths"] = tuple(
                sorted(dict(data["preferred_vector_widths"]).items())
            )
        return cls(**data)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


def _lockstep_width(device: Any) -> int:
    """The warp (NVIDIA) or wavefront (AMD) width a ``pyopencl.Device``
    reports through its vendor's query extension; 0 where it reports none."""
    import pyopencl as cl

    extensions = device.extensions.split()
    for extension, name in (
        ("cl_nv_device_attribute_query", "warp_size_nv"),
        ("cl_amd_device_attribute_query", "wavefront_width_amd"),
    ):
        if extension in extensions:
            try:
                return int(getattr(device, name))
            except (cl.Error, AttributeError):  # a pyopencl or driver without the query
                continue
    return 0


def _host_cache_size() -> int:
    """Bytes of this host's largest CPU cache (Linux sysfs; 0 elsewhere)."""
    sizes = [0]
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = path.read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes)


#: Vector registers per instruction set, by float lanes (AVX-512's 32 zmm,
#: AVX's 16 ymm, SSE's and 128-bit GPU loads' 16).
VECTOR_REGISTERS = {16: 32, 8: 16, 4: 16}


def vector_registers(lanes: int) -> int:
    """The register file of the instruction set whose vectors hold ``lanes`` floats."""
    return VECTOR_REGISTERS.get(lanes, 16)


def accumulator_registers(lanes: int) -> int:
    """Vector registers of ``lanes`` floats a register block's accumulators
    may take at most: the register file less one broadcast operand and one
    vector operand (which an FMA may also read from memory). The space
    holds blocks up to this; the starts mostly keep to :func:`block_registers`.
    On a Zen 3 host's AVX2, ResNet-18's conv2d (1, 256, 14, 14) x 256 ran
    fastest with the 14 accumulators of a whole output row (2.4-2.5 ms,
    where 2 x 3 vectors took 3.1-3.5)."""
    return vector_registers(lanes) - 2


def block_registers(lanes: int) -> int:
    """Vector registers of ``lanes`` floats a register block may take: the
    instruction set's register file less 4 for the operands."""
    return vector_registers(lanes) - 4


#: Outputs a register block of a non-CPU device's work-item may hold.
GPU_BLOCK_POINTS = 128

#: Work-items per instruction on a non-CPU device that reports no width
#: (:meth:`DeviceInfo.lockstep_items`): a warp of NVIDIA's, the wave of AMD's
#: RDNA in its default mode, an Intel GPU's largest sub-group.
LOCKSTEP_ITEMS = 32

PROBED_BUILTINS: dict[str, str] = {
    "nontemporal_store": (
        "__kernel void probe(__global const float4* restrict s, __global float4* restrict d) "
        "{ __builtin_nontemporal_store(s[get_global_id(0)], d + get_global_id(0)); }"
    ),
    "prefetch": (
        "__kernel void probe(__global const float* restrict s, __global float* restrict d) "
        "{ __builtin_prefetch(s + get_global_id(0) + 16); d[get_global_id(0)] = s[get_global_id(0)]; }"
    ),
}
"""Built-in name -> a kernel that builds only where the compiler has it."""


def _device_key(platform: str, device: str, vendor: str, driver: str, version: str) -> str:
    ident = "|".join((platform, device, vendor, driver, version))
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def probe_builtins(device: Any) -> tuple[str, ...]:
    """The :data:`PROBED_BUILTINS` a ``pyopencl.Device``'s compiler builds
    (:func:`probe_build`: remembered per device, driver and source)."""
    return tuple(
        name for name, source in PROBED_BUILTINS.items() if probe_build(device, source) is None
    )


# -- probe builds, remembered ----------------------------------------------------
# Every laytune process reads what its device's compiler has (the built-ins
# above) and picks its device by whether it builds a kernel at all: a build
# each, 0.2-0.3 s on Intel's CPU runtime, paid again by every command and by
# every worker a job starts. The outcome depends only on the device and
# driver (the key), the source and the options, so it is kept: in this
# process, and on disk in the user's cache directory, one small JSON file per
# outcome, written whole (temporary file, then rename) so processes may share
# the directory. A file that does not read back is a miss, probed again.

_PROBED: dict[str, str | None] = {}  # by the digest of device key, source, options

#: Version of the probe files' format and of what a probe records.
_PROBE_FORMAT = 1


def cache_dir() -> Path:
    """laytune's cache directory: ``$LAYTUNE_CACHE_DIR``, else the user's
    cache directory (``~/.cache/laytune`` on Linux)."""
    import os

    given = os.environ.get("LAYTUNE_CACHE_DIR")
    if given:
        return Path(given)
    import platformdirs

    return Path(platformdirs.user_cache_dir("laytune"))


def probe_build(device: Any, source: str, options: tuple[str, ...] = ()) -> str | None:
    """None when a ``pyopencl.Device``'s compiler builds ``source`` with
    ``options``, else the last error line of its log; built once per device,
    driver, source and options, then read back (see above)."""
    digest = hashlib.sha256(
        json.dumps([_PROBE_FORMAT, DeviceInfo.key_of(device), source, list(options)]).encode()
    ).hexdigest()[:32]
    if digest in _PROBED:
        return _PROBED[digest]
    path = cache_dir() / "probes" / f"{digest}.json"
    try:
        kept = json.loads(path.read_text())
        if kept.get("format") == _PROBE_FORMAT and isinstance(kept.get("error"), (str, type(None))):
            _PROBED[digest] = kept["error"]
            return kept["error"]
    except (OSError, ValueError, AttributeError):
        pass
    error = _build_error(device, source, options)
    _PROBED[digest] = error
    _keep(path, {"format": _PROBE_FORMAT, "error": error})
    return error


def _build_error(device: Any, source: str, options: tuple[str, ...]) -> str | None:
    import warnings

    import pyopencl as cl

    try:
        context = cl.Context([device])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build_source(context, source, options)
    except cl.Error as exc:
        text = "\n".join([str(exc), *getattr(exc, "__notes__", ())])
        return _named_failure(text)
    return None


def _named_failure(text: str) -> str:
    """The line of a failed build's message and log that names the problem:
    the last that says ``error``, else the last that says ``fatal`` (NVIDIA's
    OpenCL warns of an unknown function and fails in ``ptxas``: ``fatal :
    Unresolved extern function 'f'``), else the last line (the end of
    the log, where there is one)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for word in ("error", "fatal"):
        named = [line for line in lines if word in line.lower()]
        if named:
            return named[-1]
    return lines[-1] if lines else "the build failed and its driver said nothing"


def _keep(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` whole, or not at all (a cache that cannot be
    written is only slower)."""
    from laytune._files import write_atomically

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(
            path, lambda out: out.write(json.dumps(data).encode()), error=DeviceInfoError
        )
    except (OSError, DeviceInfoError):
        pass
