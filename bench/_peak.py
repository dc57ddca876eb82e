"""The peak float32 rate of a device, and where each of its factors came from.

    peak = compute units x SIMD lanes x 2 (an FMA is two flops) x FMA units per core x clock

Each factor is read from the OpenCL device where it reports one, or taken
from a flag that overrides it; :meth:`Peak.formula` states the product and
the source of every factor, so a fraction of peak can be checked by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: FMA units per core when no flag says otherwise: two 256-bit FMA pipes on
#: x86 cores with AVX2 (Haswell and later, AMD Zen 2 and later).
DEFAULT_FMA_UNITS = 2

_CPUINFO = Path("/proc/cpuinfo")  # Linux's view of the host's cores


@dataclass(frozen=True)
class Factor:
    """One factor of the peak and the sentence that says where it came from."""

    value: float | None
    source: str


@dataclass(frozen=True)
class Peak:
    """``compute_units x lanes x 2 x fma_units x clock``; ``clock`` in GHz.

    ``flops`` is None when the clock is unknown (the device reports none and
    no flag gives one); fractions of peak are then not stated.
    """

    compute_units: Factor
    lanes: Factor
    fma_units: Factor
    clock_ghz: Factor

    @property
    def flops(self) -> float | None:
        factors = (self.compute_units, self.lanes, self.fma_units, self.clock_ghz)
        if any(f.value is None for f in factors):
            return None
        product = 2.0 * 1e9
        for factor in factors:
            product *= float(factor.value)  # type: ignore[arg-type]
        return product

    def fraction(self, flops_per_second: float) -> str:
        """``flops_per_second`` as a percentage of the peak; ``-`` when the
        peak is unknown."""
        peak = self.flops
        return "-" if peak is None else f"{100.0 * flops_per_second / peak:.1f} %"

    def formula(self) -> str:
        """The product with numbers, then the source of each factor."""

        def number(factor: Factor, unit: str = "") -> str:
            if factor.value is None:
                return "?"
            value = factor.value
            text = f"{value:g}" if isinstance(value, float) else str(value)
            return text + unit

        peak = self.flops
        missing = "--clock-ghz" if self.clock_ghz.value is None else "--simd-lanes"
        total = f"unknown (pass {missing})" if peak is None else f"{peak / 1e9:.1f} GFLOP/s"
        product = (
            f"{number(self.compute_units)} compute units x {number(self.lanes)} SIMD lanes "
            f"x 2 (FMA) x {number(self.fma_units)} FMA units per core "
            f"x {number(self.clock_ghz, ' GHz')} = {total}"
        )
        sources = "; ".join(
            f"{name}: {factor.source}"
            for name, factor in (
                ("compute units", self.compute_units),
                ("SIMD lanes", self.lanes),
                ("FMA units", self.fma_units),
                ("clock", self.clock_ghz),
            )
        )
        return f"{product} ({sources})"


#: Float32 lanes per multiprocessor of NVIDIA's GPUs by compute capability
#: (CUDA's programming guide, arithmetic instructions' throughput): OpenCL
#: reports a GPU's compute units, not the lanes each one holds.
NVIDIA_FP32_LANES = {
    (6, 0): 64,
    (6, 1): 128,
    (7, 0): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
}


def _gpu_lanes(cl_device: Any) -> Factor:
    """A GPU's float32 lanes per compute unit: NVIDIA's by compute
    capability (``cl_nv_device_attribute_query``); unknown elsewhere."""
    try:
        capability = (
            int(cl_device.compute_capability_major_nv),
            int(cl_device.compute_capability_minor_nv),
        )
    except Exception:  # no NVIDIA query: another vendor, or a pyopencl without it
        capability = None
    lanes = NVIDIA_FP32_LANES.get(capability) if capability else None
    if lanes is None and capability is not None and capability >= (10, 0):
        lanes = 128  # Blackwell's multiprocessors keep Hopper's 128
    if lanes is None:
        return Factor(None, "the GPU reports no float lanes per compute unit (pass --simd-lanes)")
    major, minor = capability  # type: ignore[misc]
    return Factor(lanes, f"float32 lanes per multiprocessor of compute capability {major}.{minor}")


def host_clock_ghz(cpuinfo: Path = _CPUINFO) -> float | None:
    """The largest ``cpu MHz`` the host's kernel lists, in GHz (None when it
    lists none, as on hosts that are not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    found = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([0-9.]+)", text, re.MULTILINE)]
    return max(found) / 1e3 if found else None


def read_peak(
    cl_device: Any,
    *,
    compute_units: int | None = None,
    lanes: int | None = None,
    fma_units: int | None = None,
    clock_ghz: float | None = None,
    host_clock: float | None = None,
) -> Peak:
    """The peak of ``cl_device`` (a ``pyopencl.Device``); a keyword that is
    not None overrides what the device reports.

    - compute units: ``CL_DEVICE_MAX_COMPUTE_UNITS``.
    - SIMD lanes: the larger of the device's preferred and native float
      vector widths (a CPU runtime that vectorises across work-items may
      prefer scalar code, width 1, while its native width is the SIMD
      width).
    - FMA units per core: not reported by OpenCL; :data:`DEFAULT_FMA_UNITS`.
    - clock: ``CL_DEVICE_MAX_CLOCK_FREQUENCY``; when the device reports 0 and
      is a CPU, ``host_clock`` (default :func:`host_clock_ghz`, the clock the
      host's kernel lists: the nominal one on a virtual machine, so cores that
      boost above it can pass 100 %).
    """
    import pyopencl as cl

    if compute_units is not None:
        units = Factor(compute_units, "--compute-units")
    else:
        units = Factor(int(cl_device.max_compute_units), "the device's max_compute_units")

    cpu = bool(cl_device.type & cl.device_type.CPU)
    if lanes is not None:
        width = Factor(lanes, "--simd-lanes")
    elif not cpu:
        width = _gpu_lanes(cl_device)
    else:
        preferred = int(cl_device.preferred_vector_width_float)
        native = int(cl_device.native_vector_width_float)
        width = Factor(
            max(preferred, native),
            f"the larger of the device's preferred ({preferred}) and native ({native}) "
            f"float vector widths",
        )

    if fma_units is not None:
        fma = Factor(fma_units, "--fma-units")
    elif not cpu:
        fma = Factor(1, "one FMA per lane per clock (a GPU's float lanes)")
    else:
        fma = Factor(DEFAULT_FMA_UNITS, f"--fma-units default {DEFAULT_FMA_UNITS} (AVX2 cores)")

    if clock_ghz is not None:
        clock = Factor(clock_ghz, "--clock-ghz")
    else:
        reported = int(cl_device.max_clock_frequency)
        if reported > 0:
            clock = Factor(reported / 1e3, f"the device's max_clock_frequency ({reported} MHz)")
        elif cl_device.type & cl.device_type.CPU:
            host = host_clock_ghz() if host_clock is None else host_clock
            clock = Factor(
                host,
                "the device reports max_clock_frequency 0; the host's listed cpu MHz "
                "(nominal; cores may boost above it)"
                if host is not None
                else "the device reports no clock and the host lists none",
            )
        else:
            clock = Factor(None, "the device reports max_clock_frequency 0")
    return Peak(units, width, fma, clock)


def add_peak_arguments(parser: Any) -> None:
    """The flags that override a factor of the peak (:func:`peak_from_arguments`)."""
    parser.add_argument("--compute-units", type=int, help="override the device's compute units")
    parser.add_argument("--simd-lanes", type=int, help="override the device's float SIMD width")
    parser.add_argument(
        "--fma-units", type=int, help=f"FMA units per core (default {DEFAULT_FMA_UNITS})"
    )
    parser.add_argument(
        "--clock-ghz",
        type=float,
        help="override the device's clock (a CPU's runtime lists its base clock; "
        "the cores run boosted)",
    )


def peak_from_arguments(cl_device: Any, args: Any) -> Peak:
    """:func:`read_peak` of ``cl_device`` with the flags of :func:`add_peak_arguments`."""
    return read_peak(
        cl_device,
        compute_units=args.compute_units,
        lanes=args.simd_lanes,
        fma_units=args.fma_units,
        clock_ghz=args.clock_ghz,
    )
