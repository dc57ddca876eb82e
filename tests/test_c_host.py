"""The C host of examples/opencl_host runs exported kernels with the OpenCL C
API and checks them against laytune's numpy reference.

Built with the machine's C compiler (``CC``, else ``cc``) against the OpenCL
headers and ICD loader (Debian's ``ocl-icd-opencl-dev``, which ``.ci/run``
installs); skipped, saying which, only when the compiler or the headers are
missing. The program finds the pip-installed runtimes through
``OCL_ICD_VENDORS``, which laytune sets for its own process when it first
needs a device (README: OpenCL devices); the READMEs' one-liner prints that
folder for a shell, and the program says so when the loader finds nothing."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from laytune import ops
from laytune.codegen import lower
from laytune.layout import identity, permute, texture
from laytune.records import FrozenEntry, FrozenLayouts, export, export_stem
from laytune.space import Candidate, baseline_knobs

ROOT = Path(__file__).resolve().parents[1]
HOST = ROOT / "examples" / "opencl_host" / "host.c"
#: The READMEs that tell a shell how to point OCL_ICD_VENDORS at laytune's runtimes.
READMES = (ROOT / "README.md", ROOT / "examples" / "opencl_host" / "README.md")
ONE_LINER = re.compile(r"python -c '([^']+)'")


def compiler_or_skip(tmp_path: Path) -> str:
    """The C compiler, when it and the OpenCL headers are installed; else skip, saying which."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc or $CC): the C host example is not built")
    probe = tmp_path / "probe.c"
    probe.write_text(
        "#define CL_TARGET_OPENCL_VERSION 120\n#include <CL/cl.h>\nint main(void) { return 0; }\n"
    )
    done = subprocess.run([cc, "-fsyntax-only", str(probe)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(
            "no OpenCL headers (CL/cl.h; Debian: ocl-icd-opencl-dev): the C host is not built"
        )
    return cc


def _build(cc: str, folder: Path, stem: str) -> Path:
    binary = folder / "host"
    compiled = subprocess.run(
        [
            cc,
            "-std=c99",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-include",
            str(folder / f"{stem}.h"),
            str(HOST),
            "-lOpenCL",
            "-lm",
            "-o",
            str(binary),
        ],
        capture_output=True,
        text=True,
    )
    assert compiled.returncode == 0, compiled.stderr
    return binary


def _build_and_run(cc: str, folder: Path, stem: str) -> subprocess.CompletedProcess[str]:
    binary = _build(cc, folder, stem)
    return subprocess.run([str(binary), str(folder)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("workload", "layouts"),
    [
        (ops.matmul(24, 40, 32), {"B": lambda s: permute(s, (1, 0))}),
        (ops.copy((16, 32)), {"X": lambda s: texture(s, axis=1)}),  # an RGBA float image
        (ops.matmul(24, 40, 32), {}),  # every buffer aliased: no pack, no unpack
    ],
    ids=["matmul-transposed-B", "copy-from-an-image", "matmul-aliased"],
)
def test_the_c_host_reproduces_the_reference(
    workload, layouts, laytune_device, tmp_path: Path
) -> None:
    cc = compiler_or_skip(tmp_path)
    shapes = {b.name: b.shape for b in workload.buffers}
    candidate = Candidate.make(
        {n: layouts[n](s) if n in layouts else identity(s) for n, s in shapes.items()},
        baseline_knobs(workload),
    )
    program = lower(workload, candidate, device=laytune_device.info)
    entry = FrozenEntry(
        workload.key, laytune_device.key, laytune_device.name, candidate, program, 1e-5, None, None
    )
    export(FrozenLayouts([entry]), tmp_path, reference=True)
    stem = export_stem(workload.key, laytune_device.key)
    description = json.loads((tmp_path / f"{stem}.json").read_text())
    aliased = [b["aliased"] for b in description["buffers"]]
    assert aliased == [spec.aliased for spec in program.buffers]
    assert len(description["pack"]) == sum(
        not spec.aliased for spec in program.buffers if spec.role == "input"
    )
    run = _build_and_run(cc, tmp_path, stem)
    output = workload.output.name
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{output}: {workload.output.size} elements" in run.stdout
    assert "matches the reference" in run.stdout and "note:" not in run.stderr

    # a wrong number is found: the check is a check
    reference = next(tmp_path.glob(f"{stem}.{output}.ref.bin"))
    data = bytearray(reference.read_bytes())
    data[:4] = struct.pack("<f", struct.unpack("<f", data[:4])[0] + 0.5)
    reference.write_bytes(bytes(data))
    run = subprocess.run([str(tmp_path / "host"), str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 1 and "DIFFERS" in run.stdout


def _one_liner(readme: Path) -> str:
    (code,) = ONE_LINER.findall(readme.read_text(encoding="utf-8"))
    return code


@pytest.mark.parametrize("readme", READMES, ids=["README", "examples-opencl_host-README"])
def test_the_readme_one_liner_prints_the_vendors_folder_laytune_writes(readme: Path) -> None:
    code = _one_liner(readme)
    env = {k: v for k, v in os.environ.items() if k != "OCL_ICD_VENDORS"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # importing laytune alone sets nothing: no KeyError
    folder = done.stdout.strip()
    intel = Path(sys.prefix) / "lib" / "libintelocl.so"
    if intel.exists():  # the PyPI runtime the system's loader cannot find alone
        assert (Path(folder) / "laytune-libintelocl.icd").read_text().strip() == str(intel)
    else:
        assert folder == ""


def test_without_a_runtime_the_c_host_says_what_is_wrong_and_how_to_fix_it(
    laytune_device, tmp_path: Path
) -> None:
    cc = compiler_or_skip(tmp_path)
    workload = ops.copy((4, 8))
    candidate = Candidate.make(
        {b.name: identity(b.shape) for b in workload.buffers}, baseline_knobs(workload)
    )
    program = lower(workload, candidate, device=laytune_device.info)
    entry = FrozenEntry(
        workload.key, laytune_device.key, laytune_device.name, candidate, program, 1e-5, None, None
    )
    export(FrozenLayouts([entry]), tmp_path, reference=True)
    binary = _build(cc, tmp_path, export_stem(workload.key, laytune_device.key))
    empty = tmp_path / "no-runtime-here"
    empty.mkdir()
    env = {**os.environ, "OCL_ICD_VENDORS": str(empty)}
    run = subprocess.run([str(binary), str(tmp_path)], env=env, capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.startswith("no OpenCL platform found (clGetPlatformIDs: OpenCL error -1001")
    assert f"found no runtime it can load in OCL_ICD_VENDORS={empty}" in run.stderr
    # the fix, as the READMEs write it
    assert (
        f"unset OCL_ICD_VENDORS; export OCL_ICD_VENDORS=\"$(python -c '{_one_liner(READMES[1])}')\""
        in run.stderr
    )
