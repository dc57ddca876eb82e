"""The contracts of BaseBuilder and BaseRunner, run over every implementation.

An implementation joins by adding a parameter to the ``builders`` or
``runners`` fixture; today there is one of each, the local worker processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from laytune.exceptions import ConfigError
from laytune.runners import (
    BaseBuilder,
    BaseRunner,
    Builder,
    Device,
    ErrorKind,
    RunInput,
    Runner,
)

pytestmark = pytest.mark.xdist_group("runners")


@pytest.fixture(params=["local"])
def some_builder(request: pytest.FixtureRequest, builder: Builder) -> Iterator[BaseBuilder]:
    if request.param == "local":
        yield builder  # the session's, shared with the other runners tests


@pytest.fixture(params=["local"])
def some_runner(request: pytest.FixtureRequest, runner: Runner) -> Iterator[BaseRunner]:
    if request.param == "local":
        yield runner


def test_the_local_classes_implement_the_bases() -> None:
    assert issubclass(Builder, BaseBuilder) and issubclass(Runner, BaseRunner)
    with pytest.raises(TypeError, match="abstract"):
        BaseBuilder()  # type: ignore[abstract]
    with pytest.raises(TypeError, match="abstract"):
        BaseRunner()  # type: ignore[abstract]


def test_a_build_batch_comes_back_in_order_with_failures_as_data(
    some_builder: BaseBuilder, kit: SimpleNamespace, device: Device
) -> None:
    batch = [kit.scale_program("c_first"), kit.broken_program(), kit.scale_program("c_last")]
    results = some_builder.build(batch)
    assert [r.program for r in results] == batch
    assert [r.error_kind for r in results] == [ErrorKind.NONE, ErrorKind.BUILD, ErrorKind.NONE]
    assert all(r.device_key == device.key for r in results)
    assert some_builder.build([]) == []


def test_submitted_build_batches_complete_in_submission_order(
    some_builder: BaseBuilder, kit: SimpleNamespace
) -> None:
    futures: list[Future] = [
        some_builder.submit([kit.scale_program(f"c_sub{k}")]) for k in range(3)
    ]
    names = [f.result(timeout=120)[0].program.name for f in futures]
    assert names == ["c_sub0", "c_sub1", "c_sub2"]


def test_a_run_batch_comes_back_in_order_with_failures_as_data(
    some_builder: BaseBuilder, some_runner: BaseRunner, kit: SimpleNamespace
) -> None:
    good, broken, wrong = some_builder.build(
        [kit.scale_program("c_run"), kit.broken_program(), kit.wrong_program()]
    )
    batch = [
        RunInput(good, kit.ScaleWorkload()),
        RunInput(broken, kit.ScaleWorkload()),
        RunInput(wrong, kit.ScaleWorkload()),
        RunInput(good, kit.ScaleWorkload()),
    ]
    results = some_runner.run(batch)
    assert [r.program_name for r in results] == [i.build.program.name for i in batch]
    assert [r.error_kind for r in results] == [
        ErrorKind.NONE,
        ErrorKind.BUILD,
        ErrorKind.WRONG_RESULT,
        ErrorKind.NONE,
    ]
    assert some_runner.run([]) == []
    future = some_runner.submit(batch[:1])
    assert [r.error_kind for r in future.result(timeout=120)] == [ErrorKind.NONE]
    with pytest.raises(ConfigError, match="abandon_above_s"):
        some_runner.run(batch[:1], abandon_above_s=0.0)


def test_closing_twice_is_fine(device: Device, kit: SimpleNamespace) -> None:
    builder = Builder(device, max_workers=1)
    assert builder.submit([kit.scale_program("c_close")]).result(timeout=120)[0].ok
    builder.close()
    builder.close()
    runner = Runner(device)
    runner.close()
    runner.close()
