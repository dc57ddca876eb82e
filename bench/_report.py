"""What the tuning benchmarks (``bench.tuned_vs_fixed``, ``bench.search_efficiency``)
share: the device and versions lines of a report, markdown tables, writing
the file."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import laytune

#: Idle before timing a runtime: both ONNX Runtime's pool and the OpenCL
#: runtime's workers keep spinning on the cores for a while after a run, and on
#: 2 cores they slowed whichever ran next (bench.models).
SETTLE_S = 0.3

RESULTS = Path(__file__).resolve().parent / "results"


def environment(device: Any) -> list[str]:
    """Markdown bullets: the device (name, platform, driver, OpenCL), the
    versions of what produced the figures, and when."""
    import optuna
    import pyopencl as cl

    info = device.info
    return [
        f"- device: {info.name}, {info.device_type}, "
        f"{info.compute_units} compute units, driver {info.driver_version}, "
        f"{info.opencl_version}",
        f"- laytune {laytune.__version__}, pyopencl {cl.VERSION_TEXT}, numpy {np.__version__}, "
        f"optuna {optuna.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs on the host",
        *([f"- host CPU: {host}"] if (host := host_cpu()) else []),
        f"- run {time.strftime('%Y-%m-%d %H:%M:%S')}",
    ]


def host_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The host's processor as Linux lists it: model name, family and model
    (one vendor's "AMD EPYC" spans Zen 3 and Zen 5) and its widest vector
    extension; empty where there is no ``/proc/cpuinfo``."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    widest = next((f for f in ("avx512f", "avx2", "sse4_2", "neon", "asimd") if f in flags), "")
    parts = [fields.get("model name", "")]
    if "cpu family" in fields:
        parts.append(f"family {fields['cpu family']} model {fields.get('model', '?')}")
    if widest:
        parts.append(widest)
    return ", ".join(p for p in parts if p)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    """A markdown table; ``align`` holds one of ``l``/``r`` per column (all
    left when empty)."""
    marks = [" ---: |" if a == "r" else " --- |" for a in (align or "l" * len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "".join(marks)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def write(name: str, text: str, out: Path | None = None) -> Path:
    """Write ``text`` to ``out`` (default ``bench/results/<name>``) atomically;
    the path written."""
    path = out if out is not None else RESULTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)
    return path


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    cwd = Path.cwd()
    return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)


def tune(*args: Any, **kwargs: Any) -> Any:
    """``laytune.tune``, but Ctrl-C stops the benchmark too: ``tune`` returns on
    an interrupt (its records kept, ``stop_reason`` "interrupted; ..."), and a
    benchmark that goes on to its next tune would ignore the user."""
    return stop_if_interrupted(laytune.tune(*args, **kwargs))


def stop_if_interrupted(result: Any) -> Any:
    """``result`` (a ``TuneResult``), or KeyboardInterrupt when its job was interrupted."""
    if result.stop_reason.startswith("interrupted"):
        raise KeyboardInterrupt(f"{result.workload_key}: {result.stop_reason}")
    return result
