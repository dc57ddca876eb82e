from __future__ import annotations

import math

import pytest

from laytune.exceptions import ConfigError
from laytune.runners import MeasureConfig, Tolerance, input_seed

pytestmark = pytest.mark.xdist_group("runners")


@pytest.mark.parametrize(
    "fields",
    [
        {"warmup": -1},
        {"repeats": 0},
        {"repeats": 5, "max_repeats": 4},
        {"min_total_time_s": -1.0},
        {"flush_bytes": 0},
        {"clock": "cpu"},
        {"statistic": "mode"},
        {"time_limit_s": 0},
        {"early_stop_after": 0},
    ],
)
def test_invalid_config_names_the_value(fields: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as caught:
        MeasureConfig(**fields)  # type: ignore[arg-type]
    assert str(next(iter(fields.values()))) in str(caught.value)


def test_launch_count_formula() -> None:
    config = MeasureConfig(warmup=2, repeats=5)
    # P=1, C=2, U=1, n=5: 1+2+1 + (2+5)*(1+1) + (2+5)*2
    assert config.launch_count(1, 2, 1, 5) == 4 + 14 + 14
    assert (
        MeasureConfig(warmup=2, repeats=5, measure_conversions=False).launch_count(1, 2, 1, 5)
        == 4 + 14
    )
    assert MeasureConfig(repeats=5, flush_cache=True).flush_count(1, 1, 7) == 7 + 10
    assert MeasureConfig(flush_cache=False).flush_count(1, 1, 7) == 0


def test_tolerance_by_dtype_and_reduction() -> None:
    assert Tolerance.for_dtype("float32") == Tolerance(1e-4, 1e-5)
    assert Tolerance.for_dtype("float16").rtol == pytest.approx(1e-2)
    assert Tolerance.for_dtype("int32") == Tolerance(0.0, 0.0)
    wide = Tolerance.for_dtype("float32", reduction_length=400)
    assert wide.rtol == pytest.approx(1e-4 * math.sqrt(400))
    assert wide.atol == pytest.approx(1e-5 * 20)


def test_input_seed_is_stable() -> None:
    assert input_seed(0, "scale:1024:float32") == input_seed(0, "scale:1024:float32")
    assert input_seed(0, "a") != input_seed(0, "b")
    assert input_seed(0, "a") != input_seed(1, "a")
