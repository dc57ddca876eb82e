"""Export for builds outside Python: stable file names, a manifest from
workload keys to files, a C header and reference data."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from laytune import ops
from laytune.codegen import lower
from laytune.exceptions import FrozenFileError
from laytune.layout import permute
from laytune.records import FrozenEntry, FrozenLayouts, export, export_stem
from laytune.records._export import REFERENCE_SEED
from laytune.space import Candidate, baseline_knobs

DEVICE_KEY, DEVICE_NAME = "0123456789abcdef", "Some device (Some platform)"


def entry(workload, candidate: Candidate | None = None) -> FrozenEntry:
    """A frozen entry of ``workload`` (identity layouts unless given)."""
    shapes = {b.name: b.shape for b in workload.buffers}
    if candidate is None:
        from laytune.layout import identity

        candidate = Candidate.make(
            {n: identity(s) for n, s in shapes.items()}, baseline_knobs(workload)
        )
    return FrozenEntry(
        workload.key, DEVICE_KEY, DEVICE_NAME, candidate, lower(workload, candidate), 1e-5, 2.0, 7
    )


MATMUL = ops.matmul(8, 12, 16)
TRANSPOSE = ops.transpose((8, 4), (1, 0))
COPY = ops.copy((4, 8))


def test_file_names_do_not_shift_when_entries_change(tmp_path: Path) -> None:
    both = export(FrozenLayouts([entry(MATMUL), entry(TRANSPOSE)]), tmp_path / "both")
    one = export(FrozenLayouts([entry(COPY), entry(TRANSPOSE)]), tmp_path / "one")
    stem = export_stem(TRANSPOSE.key, DEVICE_KEY)
    assert stem == "transpose_8x4_perm_1x0_01234567"
    names = {p.name for p in both} & {p.name for p in one}
    assert names == {f"{stem}.cl", f"{stem}.json", f"{stem}.h", "manifest.json"}
    assert (tmp_path / "both" / f"{stem}.cl").read_text() == (
        tmp_path / "one" / f"{stem}.cl"
    ).read_text()


def test_the_manifest_maps_each_workload_key_to_its_files(tmp_path: Path) -> None:
    written = export(FrozenLayouts([entry(MATMUL), entry(TRANSPOSE)]), tmp_path, reference=True)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["format"] == "laytune-export-manifest" and manifest["version"] == 1
    assert set(manifest["workloads"]) == {MATMUL.key, TRANSPOSE.key}
    listed = {"manifest.json"}
    for key, per_device in manifest["workloads"].items():
        (item,) = per_device
        assert item["device_key"] == DEVICE_KEY and item["workload"] == ops.short_key(key)
        files = item["files"]
        description = json.loads((tmp_path / files["description"]).read_text())
        assert description["workload_key"] == key
        assert description["source_file"] == files["source"]
        listed |= {files["source"], files["description"], files["header"]}
        listed |= set(files["inputs"].values()) | set(files["reference"].values())
    assert listed == {p.name for p in written} == {p.name for p in tmp_path.iterdir()}


def test_reference_data_is_the_workloads_inputs_and_numpy_reference(tmp_path: Path) -> None:
    export(FrozenLayouts([entry(MATMUL)]), tmp_path, reference=True)
    files = json.loads((tmp_path / "manifest.json").read_text())["workloads"][MATMUL.key][0]
    inputs = MATMUL.make_inputs(REFERENCE_SEED)
    for name, file in files["files"]["inputs"].items():
        data = np.fromfile(tmp_path / file, dtype="<f4").reshape(MATMUL.buffer(name).shape)
        np.testing.assert_array_equal(data, inputs[name])
    (reference,) = files["files"]["reference"].values()
    expected = MATMUL.reference(inputs)["C"].astype(np.float32)
    np.testing.assert_array_equal(np.fromfile(tmp_path / reference, dtype="<f4"), expected.ravel())
    custom = dataclasses.replace(entry(COPY), workload_key="mine(n=4;float32)")
    with pytest.raises(FrozenFileError, match="no reference data for mine"):
        export(FrozenLayouts([custom]), tmp_path / "custom", reference=True)


def test_the_c_header_lists_buffers_and_launches_in_order(tmp_path: Path) -> None:
    shape = TRANSPOSE.buffer("X").shape
    transposed = Candidate.make(
        {"X": permute(shape, (1, 0)), "Y": entry(TRANSPOSE).candidate.layout("Y")},
        baseline_knobs(TRANSPOSE),
    )
    frozen = entry(TRANSPOSE, transposed)
    export(FrozenLayouts([frozen]), tmp_path)
    stem = export_stem(TRANSPOSE.key, DEVICE_KEY)
    header = (tmp_path / f"{stem}.h").read_text()
    program = frozen.program
    launches = [*program.pack, *program.compute, *program.unpack]
    assert re.findall(r'^    \{"(\w+)", \d', header, flags=re.MULTILINE) == [
        launch.kernel for launch in launches
    ]
    assert f"#define LAYTUNE_LAUNCH_COUNT {len(launches)}" in header
    assert f"#define LAYTUNE_BUFFER_COUNT {len(program.buffers)}" in header
    assert f'#define LAYTUNE_SOURCE_FILE "{stem}.cl"' in header
    assert f"#define LAYTUNE_BUFFERS {stem}_buffers" in header
    assert "NULL, NULL" in header  # exported without reference data
