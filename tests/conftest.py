"""Shared fixtures: an OpenCL context on the device laytune picks by default,
and a PostgreSQL server on loopback.

The device is the first one here that builds a kernel (PoCL or Intel's CPU
runtime, both installed from PyPI), so these tests run everywhere and nothing
is skipped. ``LAYTUNE_DEVICE`` selects another one.

The PostgreSQL server (for the multi-host tests and the record-store
contract) is started from the PostgreSQL binaries installed on the machine
(``.ci/run`` installs Debian's ``postgresql`` package when they are missing)
in a temporary folder, on a free port, and stopped after the session. As
root it runs as the ``postgres`` user, since PostgreSQL refuses root. Tests
that use it carry ``xdist_group("postgres")``, so one worker starts one server.

Every test process checks at its end that it leaves no child process alive
(builder and runner workers, jobs started by tests, notebook kernels).

laytune's cache directory (device probes, the jobs' binary cache) is one
temporary folder for the whole run, shared by its workers and by every
process the tests start, and removed at the end: the suite neither reads
nor fills the user's cache, and a program compiled by one test's job is not
compiled again by the next.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyopencl as cl
import pytest

from laytune.runners import Device, default_device, release_workers
from tests import jobs

_CACHE_ENV = "LAYTUNE_CACHE_DIR"
_CACHE_KEY = pytest.StashKey[str]()
_KEEP_ENV = "LAYTUNE_KEEP_WORKERS_S"
#: How long a test process keeps the workers its last job left warm. Tests
#: that tune in this process follow each other minutes apart, and 30 s (the
#: default) closed the workers between them, which the next job then started
#: again (about 3 s of CPU a pair); the session's end closes them.
_KEEP_S = "900"


def pytest_configure(config: pytest.Config) -> None:
    # The controller (or a run without workers) sets both variables; xdist's
    # workers, started after this, inherit them.
    if hasattr(config, "workerinput"):
        return
    os.environ.setdefault(_KEEP_ENV, _KEEP_S)
    if _CACHE_ENV not in os.environ:
        folder = tempfile.mkdtemp(prefix="laytune-test-cache-")
        os.environ[_CACHE_ENV] = folder
        config.stash[_CACHE_KEY] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_CACHE_KEY, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(_CACHE_ENV, None)


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Torn down after every other session fixture: fails the run when a child
    process (other than the resource trackers) outlives it by 10 seconds."""
    yield
    release_workers()  # those the last jobs left warm for a next one
    deadline = time.monotonic() + 10.0
    while (left := jobs.live_children()) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        described = [f"{pid}: {command[:160]}" for pid, command in left.items()]
        pytest.fail("the tests left child processes alive:\n" + "\n".join(described))


@pytest.fixture(autouse=True)
def xdist_groups_hold(request: pytest.FixtureRequest) -> None:
    """Fails a test marked ``xdist_group`` that pytest-xdist's loadgroup did
    not group: xdist sends a group to one worker by the ``@name`` it appends
    to each grouped test's id, and a pytest whose ids it can no longer change
    (9.2 with xdist 3.8) lost every group without a word, so module fixtures
    were built on both workers and each started its own PostgreSQL server."""
    if not request.config.getoption("loadgroup", default=False):
        return
    node = request.node
    if node.get_closest_marker("xdist_group") is not None and "@" not in node.nodeid:
        pytest.fail(
            f"pytest {pytest.__version__} and this pytest-xdist ignore xdist_group marks; "
            "install the versions the test extra names (pyproject.toml)"
        )


@pytest.fixture(autouse=True)
def no_stop_signals_left_installed() -> Iterator[None]:
    """Fails the test that leaves the program's stop handlers installed: with
    a signal noted, every later search in the same worker would stop at its
    first checkpoint, and a fixture's job would record nothing."""
    from laytune import _stop

    yield
    left, _stop._INSTALLED = _stop._INSTALLED, None
    assert left is None, "a test left laytune's stop signals installed (call cancel())"


@pytest.fixture(scope="session")
def laytune_device() -> Device:
    return default_device()


@pytest.fixture(scope="session")
def cl_device(laytune_device: Device) -> cl.Device:
    return laytune_device.open()


@pytest.fixture(scope="session")
def cl_context(cl_device: cl.Device) -> cl.Context:
    return cl.Context([cl_device])


@pytest.fixture(scope="session")
def cl_queue(cl_context: cl.Context) -> cl.CommandQueue:
    return cl.CommandQueue(cl_context)


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (pg_ctl); .ci/run installs Debian's postgresql")
    pytest.importorskip("psycopg", reason="psycopg is in the 'test' extra")
    # not under pytest's base temp: that folder is private to the user, and
    # the server may run as another user
    folder = Path(tempfile.mkdtemp(prefix="laytune-postgres-"))
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        prefix = ["runuser", "-u", "postgres", "--"]
        shutil.chown(folder, "postgres")
        shutil.chown(sockets, "postgres")
    port = _free_port()

    def run(*args: str) -> None:
        done = subprocess.run([*prefix, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:1])} failed: {done.stderr or done.stdout}")

    run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "laytune")
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
    log = folder / "server.log"
    run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start")
    try:
        yield f"postgresql+psycopg://laytune@127.0.0.1:{port}/postgres"
    finally:
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked slow first, each group in its collection order: the two
    workers of ``make test`` take them while the many short tests wait, so
    that the run does not end with one worker alone in a minute-long test
    while the other idles (longest-first scheduling)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
