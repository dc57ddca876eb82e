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

import numpy as np
import pytest

from laytune import ops
from laytune.codegen import lower
from laytune.layout import identity, permute, texture
from laytune.plan import Graph, export_model, model_stem, plan_layouts
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


def _build(cc: str, folder: Path, stem: str, host: Path = HOST) -> Path:
    binary = folder / host.stem
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
            str(host),
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


MODEL_HOST = ROOT / "examples" / "opencl_host" / "model_host.c"


def _texture_graph():
    """relu -> conv whose input is an RGBA image: a rewrite into an image buffer."""
    from tests.plan.graphs import conv_candidate, weights

    conv = ops.conv2d(1, 8, 4, 4, 8, 3, stride=1, padding=1)
    g = Graph("texture")
    y = g.apply(ops.relu((1, 8, 4, 4)), "relu", X=g.input("x", (1, 8, 4, 4)))
    g.output(g.apply(conv, "conv", X=y, W=g.constant("f", weights((8, 8, 3, 3), 3))))
    return g, {conv.key: conv_candidate(conv, x=texture((1, 8, 4, 4), 1))}


@pytest.mark.parametrize("which", ["seed", "texture"])
def test_the_model_host_runs_an_exported_plan_as_python_does(
    which: str, laytune_device, tmp_path: Path
) -> None:
    """Every launch of the plan, in the order CompiledPlan runs them, with the
    constants packed into their planned layouts (NCHW4c, OIHW4i4o) and an
    image buffer; a changed byte of a packed constant is caught."""
    from tests.plan.graphs import seed_graph

    cc = compiler_or_skip(tmp_path)
    graph, source = seed_graph() if which == "seed" else _texture_graph()
    export_model(graph, source, tmp_path, laytune_device, reference=True)
    stem = model_stem(graph, laytune_device.key)
    description = json.loads((tmp_path / f"{stem}.json").read_text())
    with plan_layouts(graph, source, laytune_device.info, fuse=True).compile() as compiled:
        assert [launch["label"] for launch in description["launches"]] == [
            step.label for step in compiled.steps
        ]
        assert [launch["kernel"] for launch in description["launches"]] == [
            step.kernel.function_name for step in compiled.steps
        ]
    memories = {b["memory"] for b in description["buffers"]}
    assert memories == ({"global"} if which == "seed" else {"global", "image2d"})
    constants = [b for b in description["buffers"] if b["role"] == "constant"]
    assert constants and all("data_file" in b for b in constants)
    if which == "seed":  # the weights travel packed: OIHW4i4o is a 6-d physical array
        assert any(b["layout"].count(",") >= 5 for b in constants)
        # the last intermediate takes the memory of one whose life ended
        shared = [k for k, b in enumerate(description["buffers"]) if b["storage"] != k]
        assert shared and all(description["buffers"][k]["role"] == "intermediate" for k in shared)

    binary = _build(cc, tmp_path, stem, MODEL_HOST)
    run = subprocess.run(
        [str(binary), str(tmp_path), "3"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    (output,) = graph.outputs
    assert (
        f"{output}: {graph.tensors[output].shape and np.prod(graph.tensors[output].shape)}"
        " elements" in run.stdout
    )
    assert "matches the reference" in run.stdout and "note:" not in run.stderr
    assert re.search(
        rf"{graph.name}: {len(description['launches'])} launches, median [0-9.]+ ms", run.stdout
    )

    # the constants are read as packed: one changed weight changes the outputs
    weight = tmp_path / max(constants, key=lambda b: b["elements"])["data_file"]
    data = bytearray(weight.read_bytes())
    values = np.frombuffer(bytes(data), dtype="<f4").copy()
    values[np.flatnonzero(np.isfinite(values))[:8]] += 4.0
    weight.write_bytes(values.tobytes())
    run = subprocess.run([str(binary), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "DIFFERS" in run.stdout


def test_the_model_host_without_reference_data_says_to_export_with_it(
    laytune_device, tmp_path: Path
) -> None:
    from tests.plan.graphs import seed_graph

    cc = compiler_or_skip(tmp_path)
    graph, source = seed_graph()
    export_model(graph, source, tmp_path, laytune_device)  # no --reference: no inputs
    binary = _build(cc, tmp_path, model_stem(graph, laytune_device.key), MODEL_HOST)
    run = subprocess.run([str(binary), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2
    assert "input x has no data: export with --reference" in run.stderr
