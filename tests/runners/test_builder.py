from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from laytune.exceptions import ConfigError
from laytune.runners import (
    Builder,
    BuildResult,
    Device,
    ErrorKind,
    RunInput,
    Runner,
    build_cache_dir,
)
from laytune.runners._cache import BinaryCache

pytestmark = pytest.mark.xdist_group("runners")


def test_build_returns_binaries_in_batch_order(builder: Builder, kit: SimpleNamespace) -> None:
    programs = [kit.scale_program("first"), kit.transpose_program(), kit.image_program()]
    results = builder.build(programs)
    assert [r.program for r in results] == programs
    for result in results:
        assert result.ok, result.error_message + result.build_log
        assert result.error_kind is ErrorKind.NONE
        assert isinstance(result.binary, bytes) and result.binary
        assert result.device_key == builder.device.key


def test_failed_build_keeps_log_options_and_source(builder: Builder, kit: SimpleNamespace) -> None:
    broken = kit.broken_program()
    broken = type(broken)(**{**broken.__dict__, "build_options": ("-DTAG=3",)})
    good = kit.scale_program("after_broken")
    failed, after = builder.build([broken, good])
    assert failed.error_kind is ErrorKind.BUILD
    assert not failed.ok and failed.binary is None
    assert "this_does_not_exist" in failed.build_log
    assert failed.build_options == ("-DTAG=3",)
    assert "-DTAG=3" in failed.error_message
    assert failed.source == broken.source
    assert failed.cl_error_code is not None
    assert after.ok


def test_builds_of_eight_programs_run_concurrently(builder: Builder, kit: SimpleNamespace) -> None:
    # Enough distinct code per program that a compile takes a while, and
    # distinct sources so no compiler cache answers.
    programs = [
        kit.scale_program(
            f"p{k}",
            "float acc = x[i];\n"
            + "".join(f"  acc = acc * 1.0001f + {k}.{j}f * sin(acc);\n" for j in range(120))
            + "  y[i] = 2.0f * x[i] + 0.0f * acc;",
        )
        for k in range(8)
    ]
    results: list[BuildResult] = builder.build(programs)
    assert all(r.ok for r in results), [r.error_message for r in results if not r.ok]
    pids = {r.worker_pid for r in results}
    assert len(pids) >= 2 or builder.max_workers == 1
    if builder.max_workers >= 2:
        intervals = [(r.started_at, r.finished_at, r.worker_pid) for r in results]
        overlapping = any(
            a[2] != b[2] and a[0] < b[1] and b[0] < a[1]
            for i, a in enumerate(intervals)
            for b in intervals[i + 1 :]
        )
        assert overlapping, intervals


def test_submit_returns_a_future(builder: Builder, kit: SimpleNamespace) -> None:
    future = builder.submit([kit.scale_program("async1"), kit.scale_program("async2")])
    results = future.result(timeout=120)
    assert [r.program.name for r in results] == ["async1", "async2"]
    assert all(r.ok for r in results)


def test_timeout_kills_workers_and_the_builder_recovers(
    device: Device, kit: SimpleNamespace
) -> None:
    # An impossible limit, but fresh workers get startup_time_limit_s on top:
    # the first build (fresh pool) passes, the second (warm pool) times out,
    # and the third runs on a fresh pool again.
    with Builder(device, max_workers=1, time_limit_s=1e-4, startup_time_limit_s=60) as builder:
        assert builder.build([kit.scale_program("warm")])[0].ok
        late = builder.build([kit.scale_program("too_slow")])[0]
        assert late.error_kind is ErrorKind.TIMEOUT
        assert late.binary is None
        assert builder.build([kit.scale_program("recovered")])[0].ok


def _alive(process: object) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE  # type: ignore[attr-defined]
    except psutil.NoSuchProcess:
        return False


def test_close_stops_a_batch_in_flight_and_its_workers(
    device: Device, kit: SimpleNamespace
) -> None:
    import time
    from concurrent.futures import CancelledError

    import psutil

    builder = Builder(device, max_workers=2)
    future = builder.submit([kit.scale_program(f"closed{i}") for i in range(40)])
    deadline = time.monotonic() + 60
    # workers starting, and the pool's thread that manages them
    while not (
        builder._executor
        and builder._executor._processes
        and builder._executor._executor_manager_thread
    ):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    workers = [psutil.Process(pid) for pid in list(builder._executor._processes)]
    manager = builder._executor._executor_manager_thread
    builder.close()  # long before 40 builds on workers still starting are done
    with pytest.raises(CancelledError, match="closed while this batch was built"):
        future.result(timeout=0)
    # close() returns once the pool has killed and reaped its workers, while
    # the thread that started them still ran: none is left for Linux to kill
    # when that thread ends (half-way through sending a result, maybe)
    assert not manager.is_alive()
    assert not any(_alive(w) for w in workers)
    results = builder.build([kit.scale_program("after_close")])  # a closed builder starts again
    builder.close()
    assert results[0].ok


@pytest.mark.slow
def test_binary_cache_answers_a_program_built_before(
    device: Device, runner: Runner, kit: SimpleNamespace, tmp_path: Path
) -> None:
    first_program = kit.scale_program("cached_first")
    with Builder(device, max_workers=1, cache_dir=tmp_path) as builder:
        built, failed = builder.build([first_program, kit.broken_program()])
    assert built.ok and not built.cached
    assert failed.error_kind is ErrorKind.BUILD
    # A new builder on the same directory: the program is not compiled again.
    other = replace(first_program, build_options=("-DUNUSED=1",))
    with Builder(device, max_workers=1, cache_dir=tmp_path) as builder:
        again, failed_again, with_options = builder.build(
            [first_program, kit.broken_program(), other]
        )
    assert again.cached and again.ok
    assert again.binary == built.binary and again.build_log == built.build_log
    assert again.worker_pid is None and again.program == first_program
    assert failed_again.error_kind is ErrorKind.BUILD and not failed_again.cached
    assert with_options.ok and not with_options.cached
    (result,) = runner.run([RunInput(again, kit.ScaleWorkload())])
    assert result.ok, result.error_message


def test_binary_cache_entry_that_does_not_parse_is_rebuilt(
    device: Device, kit: SimpleNamespace, tmp_path: Path
) -> None:
    program = kit.scale_program("cached_corrupt")
    with Builder(device, max_workers=1, cache_dir=tmp_path) as builder:
        (built,) = builder.build([program])
        (entry,) = tmp_path.glob("*.bin")
        entry.write_bytes(entry.read_bytes()[:-7])  # cut short
        (rebuilt,) = builder.build([program])
        (answered,) = builder.build([program])
    assert built.ok and rebuilt.ok and not rebuilt.cached
    assert answered.cached and answered.binary == rebuilt.binary  # the new entry


@pytest.mark.parametrize("workers", [1, 2])
def test_warm_up_readies_every_worker(device: Device, kit: SimpleNamespace, workers: int) -> None:
    with Builder(device, max_workers=workers) as builder:
        assert builder.warm_up() == workers
        results = builder.build([kit.scale_program(f"after_warm_up{k}") for k in range(3)])
    assert all(r.ok for r in results)


def _entry_program(name: str) -> SimpleNamespace:
    """What the cache reads of a program: its source and build options."""
    return SimpleNamespace(source=f"__kernel void {name}() {{}}", build_options=())


def test_a_bounded_cache_keeps_the_recently_used_entries(tmp_path: Path) -> None:
    cache = BinaryCache(tmp_path, max_bytes=4000)
    programs = [_entry_program(f"k{k}") for k in range(8)]
    for program in programs[:3]:  # about 1100 bytes an entry
        cache.store("dev", program, b"x" * 900, "")
    for path in tmp_path.glob("*.bin"):
        os.utime(path, (1000.0, 1000.0))  # every entry as old as can be ...
    assert cache.load("dev", programs[0]) == (b"x" * 900, "")  # ... but the one just read
    cache.store("dev", programs[3], b"x" * 900, "")  # past the bound: down to 3000 bytes
    kept = [cache.load("dev", program) is not None for program in programs[:4]]
    assert kept == [True, False, False, True]  # the least recently used went
    for program in programs[4:]:
        cache.store("dev", program, b"x" * 900, "")
        total = sum(path.stat().st_size for path in tmp_path.glob("*.bin"))
        assert total <= 4000
        assert cache.load("dev", program) is not None  # the newest stays
    assert not list(tmp_path.glob(".tmp-*"))


def test_the_bound_is_positive_and_optional(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_bytes"):
        BinaryCache(tmp_path, max_bytes=0)
    unbounded = BinaryCache(tmp_path, max_bytes=None)
    for k in range(5):
        unbounded.store("dev", _entry_program(f"u{k}"), b"y" * 1000, "")
    assert len(list(tmp_path.glob("*.bin"))) == 5


def test_jobs_build_through_the_users_cache_unless_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAYTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LAYTUNE_BUILD_CACHE", raising=False)
    assert build_cache_dir() == tmp_path / "binaries"
    for off in ("0", "off", "false"):
        monkeypatch.setenv("LAYTUNE_BUILD_CACHE", off)
        assert build_cache_dir() is None


def test_a_cache_folder_that_cannot_be_made_only_costs_compiles(
    device: Device, kit: SimpleNamespace, tmp_path: Path
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with pytest.warns(RuntimeWarning, match="cannot be made"):
        builder = Builder(device, max_workers=1, cache_dir=blocked / "binaries")
    with builder:
        (built,) = builder.build([kit.scale_program("cache_blocked")])
    assert built.ok and not built.cached


def test_what_the_compiler_writes_to_stderr_stays_out_of_the_terminal(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A compiler that writes to file descriptor 2 while it builds (Intel's
    crash banner asks the reader to file a bug report) writes into the
    build's own record, not over the job's progress bar; stderr is whole
    again after the block."""
    from laytune._cl_build import compiler_output, with_output

    with compiler_output() as output:
        os.write(2, b"PLEASE submit a bug report\n")
    os.write(2, b"after\n")
    assert output == ["PLEASE submit a bug report"]
    assert capfd.readouterr().err == "after\n"
    assert with_output("error: no such type", output).endswith(
        "compiler's stderr:\nPLEASE submit a bug report"
    )
    assert with_output("log", [""]) == "log"


def test_a_failed_build_carries_what_the_compiler_wrote_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Every build of source or binary (the builder's, the runner's, the
    plan's) raises the driver's error with the compiler's stderr as a note."""
    from laytune._cl_build import build_program

    class Loud:
        def build(self, options: list[str], devices: object) -> None:
            os.write(2, b"PLEASE submit a bug report\n")
            raise RuntimeError("clBuildProgram failed")

    with pytest.raises(RuntimeError, match="clBuildProgram failed") as info:
        build_program(Loud(), ["-w"], None)
    assert "PLEASE submit a bug report" in "".join(info.value.__notes__)
    assert capfd.readouterr().err == ""


class _Silent:
    """A program whose failed build raises the bare error code, as pyopencl
    does over NVIDIA's OpenCL, while its build log names the problem."""

    LOG = (
        "<kernel>:1:40: warning: implicit declaration of function 'no_such_function'\n"
        "ptxas application ptx input, line 20; fatal   : "
        "Unresolved extern function 'no_such_function'"
    )

    def build(self, options: list[str], devices: object) -> None:
        import pyopencl as cl

        raise cl.RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE")

    def get_info(self, param: object) -> list[str]:
        return ["the device"]

    def get_build_info(self, device: object, param: object) -> str:
        return self.LOG


def test_a_failed_build_whose_error_lacks_the_log_carries_the_log() -> None:
    import pyopencl as cl

    from laytune._cl_build import build_program

    with pytest.raises(cl.RuntimeError, match="BUILD_PROGRAM_FAILURE") as info:
        build_program(_Silent(), [], None)
    assert _Silent.LOG in "".join(info.value.__notes__)


def test_a_probe_build_names_the_error_from_the_log_where_the_driver_does_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from laytune import device_info
    from laytune._cl_build import build_program
    from laytune.runners import default_device

    opened = default_device().open()  # chosen by probe builds of its own, before the patch
    monkeypatch.setenv("LAYTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(device_info, "_PROBED", {})
    monkeypatch.setattr(
        device_info, "build_source", lambda ctx, src, opts=(): build_program(_Silent(), opts, None)
    )
    error = device_info.probe_build(opened, "__kernel void k() {}")
    assert error == _Silent.LOG.splitlines()[-1]
