"""Runners: devices, parallel builds, and honest, verified measurements.

Pipeline stage after :mod:`laytune.codegen`. Two seams, each an abstract
base with a contract: a :class:`BaseBuilder` compiles KernelPrograms, a
:class:`BaseRunner` measures the binaries on one device under a
:class:`MeasureConfig`, checking every result against the workload's numpy
reference. Both take a batch and return a batch of the same length and order
(or a future of it); a candidate's failure is a result with an
:class:`ErrorKind`, never an exception. :class:`Builder` (parallel worker
processes) and :class:`Runner` (an isolated worker process) are the local
implementations; :func:`local_workers` opens both as a job makes them, for
several jobs to share, and keeps them warm for the next job of the process
(:func:`keep_seconds`, :func:`release_workers`).
"""

from __future__ import annotations

from laytune._lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: importing typing would slow every worker's start
if TYPE_CHECKING:
    from laytune._cl_build import build_source
    from laytune.device_info import DeviceInfo
    from laytune.runners._base import BaseBuilder, BaseRunner
    from laytune.runners._builder import Builder
    from laytune.runners._cache import build_cache_dir
    from laytune.runners._config import (
        Clock,
        MeasureConfig,
        Statistic,
        Tolerance,
        default_flush_bytes,
    )
    from laytune.runners._devices import (
        Device,
        default_device,
        device_builds,
        list_devices,
        select_device,
    )
    from laytune.runners._execute import ExecutionError, ProgramExecutor, as_context, image_format
    from laytune.runners._local import keep_seconds, keep_workers, local_workers, release_workers
    from laytune.runners._memory import allocation_bytes, memory_refusal
    from laytune.runners._opencl_runtime import register_opencl_runtimes
    from laytune.runners._results import (
        BuildResult,
        ConversionTiming,
        ErrorKind,
        LaunchCounts,
        OutputCheck,
        RunInput,
        RunResult,
    )
    from laytune.runners._runner import Runner
    from laytune.runners._worker import refuse_while_a_worker_starts
    from laytune.runners._workload import VerifiableWorkload, input_seed, timed_cold


__all__ = [
    "BaseBuilder",
    "BaseRunner",
    "BuildResult",
    "Builder",
    "Clock",
    "ConversionTiming",
    "Device",
    "DeviceInfo",
    "ErrorKind",
    "ExecutionError",
    "LaunchCounts",
    "MeasureConfig",
    "OutputCheck",
    "ProgramExecutor",
    "RunInput",
    "RunResult",
    "Runner",
    "Statistic",
    "Tolerance",
    "VerifiableWorkload",
    "allocation_bytes",
    "as_context",
    "build_cache_dir",
    "build_source",
    "default_device",
    "default_flush_bytes",
    "device_builds",
    "image_format",
    "input_seed",
    "keep_seconds",
    "keep_workers",
    "list_devices",
    "local_workers",
    "memory_refusal",
    "refuse_while_a_worker_starts",
    "register_opencl_runtimes",
    "release_workers",
    "select_device",
    "timed_cold",
]

# each name is imported on first use: a worker process that unpickles one
# class of this package imports that class's module, not the whole package
__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "laytune._cl_build": ("build_source",),
        "laytune.device_info": ("DeviceInfo",),
        "laytune.runners._base": ("BaseBuilder", "BaseRunner"),
        "laytune.runners._builder": ("Builder",),
        "laytune.runners._cache": ("build_cache_dir",),
        "laytune.runners._config": (
            "Clock",
            "MeasureConfig",
            "Statistic",
            "Tolerance",
            "default_flush_bytes",
        ),
        "laytune.runners._devices": (
            "Device",
            "default_device",
            "device_builds",
            "list_devices",
            "select_device",
        ),
        "laytune.runners._execute": (
            "ExecutionError",
            "ProgramExecutor",
            "as_context",
            "image_format",
        ),
        "laytune.runners._local": (
            "keep_seconds",
            "keep_workers",
            "local_workers",
            "release_workers",
        ),
        "laytune.runners._memory": ("allocation_bytes", "memory_refusal"),
        "laytune.runners._opencl_runtime": ("register_opencl_runtimes",),
        "laytune.runners._results": (
            "BuildResult",
            "ConversionTiming",
            "ErrorKind",
            "LaunchCounts",
            "OutputCheck",
            "RunInput",
            "RunResult",
        ),
        "laytune.runners._runner": ("Runner",),
        "laytune.runners._worker": ("refuse_while_a_worker_starts",),
        "laytune.runners._workload": ("VerifiableWorkload", "input_seed", "timed_cold"),
    },
)
