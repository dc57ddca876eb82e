"""Freeze the best records, load them without optuna or a database, replay them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import laytune
from laytune import ops
from laytune.exceptions import FrozenFileError
from laytune.layout import pack, unpack
from laytune.records import export, freeze, load_frozen, open_database
from laytune.space import SpaceOptions

WORKLOAD = ops.transpose((16, 24), (1, 0))
SMALL = SpaceOptions(
    families=("identity", "permute", "pad_rows", "block"),
    vectors=(1, 4),
    blocks=(1, 4),
    groups=(0,),
    unrolls=(1,),
)


#: one worker runs the module's tests, so its module fixture is built once
#: (tests of one module spread over both workers built it once each, or more)
pytestmark = pytest.mark.xdist_group("frozen")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory, laytune_device):
    folder = tmp_path_factory.mktemp("frozen")
    url = f"sqlite:///{folder / 'r.db'}"
    options = laytune.TuneOptions(trials=10, batch=5, space=SMALL, seed=1)
    result = laytune.tune(WORKLOAD, laytune_device, options=options, database=url, progress=False)
    assert result.best is not None
    path = freeze(url, folder / "frozen.json")
    return url, path, result


@pytest.mark.slow
def test_frozen_kernel_on_numpy_arrays_gives_the_reference(tuned, cl_context) -> None:
    _url, path, result = tuned
    frozen = load_frozen(path)
    entry = frozen.entry(WORKLOAD, cl_context)
    assert entry.source == result.best.source  # the very kernel the best record measured
    assert entry.record_id == result.best.id
    assert entry.layouts == {n: str(lay.index_map) for n, lay in result.best.candidate.layouts}
    kernel = frozen.kernel(WORKLOAD, cl_context)
    x = WORKLOAD.make_inputs(7)["X"]
    np.testing.assert_array_equal(kernel(x), WORKLOAD.reference({"X": x})["Y"])
    np.testing.assert_array_equal(kernel(X=x * 2), (x * 2).T)


@pytest.mark.slow
def test_frozen_kernel_on_buffers_already_in_the_physical_layout(tuned, cl_context) -> None:
    _, path, result = tuned
    frozen = load_frozen(path)
    kernel = frozen.kernel(WORKLOAD, cl_context)
    candidate = result.best.candidate
    x = WORKLOAD.make_inputs(3)["X"]
    x_layout, y_layout = candidate.layout("X"), candidate.layout("Y")
    mf = cl.mem_flags
    x_phys = np.ascontiguousarray(pack(x, x_layout.index_map, 0.0), np.float32).ravel()
    x_buf = cl.Buffer(cl_context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x_phys)
    y_size = int(np.prod(y_layout.flat_shape))
    y_buf = cl.Buffer(cl_context, mf.READ_WRITE, y_size * 4)
    kernel.set_physical("X", x_buf)
    kernel.set_physical("Y", y_buf)
    kernel.compute()
    y_phys = np.empty(y_size, np.float32)
    cl.enqueue_copy(kernel.queue, y_phys, y_buf)
    y = unpack(y_phys, y_layout.index_map, y_layout.shape)
    np.testing.assert_array_equal(y, x.T)


@pytest.mark.slow
def test_export_writes_source_and_a_json_description(tuned, tmp_path: Path) -> None:
    _, path, result = tuned
    files = export(path, tmp_path / "out")
    sources = [f for f in files if f.suffix == ".cl"]
    metas = [f for f in files if f.suffix == ".json" and f.name != "manifest.json"]
    assert len(sources) == len(metas) == 1
    assert sources[0].read_text() == result.best.source
    meta = json.loads(metas[0].read_text())
    assert meta["source_file"] == sources[0].name
    assert meta["workload_key"] == WORKLOAD.key
    assert [k["kernel"] for k in meta["compute"]] == [
        launch.kernel for launch in result.best.kernel_program().compute
    ]
    assert {b["name"] for b in meta["buffers"]} == {"X", "Y"}
    assert all("global_size" in launch and "args" in launch for launch in meta["compute"])


@pytest.mark.slow
def test_loading_needs_neither_optuna_nor_a_database(tuned) -> None:
    _, path, _ = tuned
    script = f"""
import sys
for blocked in ("optuna", "sqlalchemy"):
    sys.modules[blocked] = None  # any import of them now fails
import numpy as np, pyopencl as cl
from laytune import load_frozen, ops
from laytune.runners import default_device
w = ops.from_key({WORKLOAD.key!r})
kernel = load_frozen({str(path)!r}).kernel(w, default_device())
x = w.make_inputs(1)["X"]
assert np.array_equal(kernel(x), x.T)
print("replayed")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "replayed" in done.stdout


def _write(path: Path, data: object) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.slow
def test_bad_frozen_files_give_clear_errors(tuned, tmp_path: Path, cl_context) -> None:
    _, path, _ = tuned
    text = path.read_text()
    data = json.loads(text)
    with pytest.raises(FrozenFileError, match="truncated or not JSON"):
        load_frozen(_write(tmp_path / "cut.json", text[: len(text) // 2]))
    newer = {**data, "version": 2, "laytune_version": "9.0"}
    with pytest.raises(
        FrozenFileError, match=r"format 2, written by laytune 9\.0; .* reads format 1"
    ):
        load_frozen(_write(tmp_path / "newer.json", newer))
    with pytest.raises(FrozenFileError, match="not a laytune frozen-layouts file"):
        load_frozen(_write(tmp_path / "other.json", {"entries": []}))
    with pytest.raises(FrozenFileError, match="no frozen file at"):
        load_frozen(tmp_path / "absent.json")
    broken = json.loads(text)
    del broken["entries"][0]["program"]
    with pytest.raises(FrozenFileError, match="entry 0: malformed entry"):
        load_frozen(_write(tmp_path / "broken.json", broken))
    moved = json.loads(text)
    moved["entries"][0]["device_key"] = "0123456789abcdef"
    moved["entries"][0]["device_name"] = "Some GPU"
    frozen = load_frozen(_write(tmp_path / "moved.json", moved))
    with pytest.raises(FrozenFileError, match="for another device: Some GPU"):
        frozen.kernel(WORKLOAD, cl_context)
    with pytest.raises(FrozenFileError, match="has no layouts for copy"):
        load_frozen(path).kernel(ops.copy((4, 4)), cl_context)


def test_frozen_files_past_the_bounds_give_clear_errors(tmp_path: Path) -> None:
    from laytune.records._frozen import MAX_FROZEN_BYTES

    huge = tmp_path / "huge.json"
    with open(huge, "wb") as sparse:  # never read: refused by its size
        sparse.truncate(MAX_FROZEN_BYTES + 1)
    with pytest.raises(FrozenFileError, match=f"{MAX_FROZEN_BYTES + 1} bytes, more than"):
        load_frozen(huge)
    deep = _write(tmp_path / "deep.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(FrozenFileError, match="nests JSON too deeply"):
        load_frozen(deep)
    nested = {"format": "laytune-frozen", "version": 1, "entries": [], "x": [[[[]]]]}
    for _ in range(70):
        nested["x"] = [nested["x"]]
    with pytest.raises(FrozenFileError, match="more than 64 levels deep"):
        load_frozen(_write(tmp_path / "nested.json", nested))


def test_freeze_with_nothing_verified_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FrozenFileError, match="has no verified record"):
        freeze(open_database(tmp_path / "empty.db"), tmp_path / "f.json")
    assert not (tmp_path / "f.json").exists()


@pytest.mark.slow
def test_a_frozen_kernel_names_bad_inputs(tuned, cl_context) -> None:
    from laytune.runners import ExecutionError

    _, path, _ = tuned
    kernel = load_frozen(path).kernel(WORKLOAD, cl_context)
    x = WORKLOAD.make_inputs(0)["X"]
    with pytest.raises(ExecutionError, match=r"takes inputs \['X'\]; missing \['X'\]"):
        kernel()
    with pytest.raises(ExecutionError, match=r"unknown \['Z'\]"):
        kernel(X=x, Z=x)
    with pytest.raises(ExecutionError, match=r"'X' must have shape \(16, 24\), got \(24, 16\)"):
        kernel(x.T)
    with pytest.raises(ExecutionError, match="expected an OpenCL context or device"):
        load_frozen(path).kernel(WORKLOAD, "not a device")


def test_a_frozen_entry_carries_both_speedups(tuned, tmp_path: Path) -> None:
    _, path, result = tuned
    (entry,) = load_frozen(path)
    assert entry.speedup == pytest.approx(result.speedup)
    assert entry.layout_speedup == pytest.approx(result.layout_speedup)
    data = json.loads(path.read_text())["entries"][0]
    assert data["speedup_over_baseline"] == entry.speedup
    assert data["speedup_over_identity_layouts"] == entry.layout_speedup
    # files of laytune 0.1.0 named the speed-up over the baseline "over identity"
    old = json.loads(path.read_text())
    for item in old["entries"]:
        item["speedup_over_identity"] = item.pop("speedup_over_baseline")
        del item["speedup_over_identity_layouts"]
    (legacy,) = load_frozen(_write(tmp_path / "old.json", old))
    assert legacy.speedup == entry.speedup and legacy.layout_speedup is None
