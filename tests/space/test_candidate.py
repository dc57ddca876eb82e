"""Candidate: canonical JSON round trip and a key stable across processes."""

from __future__ import annotations

import functools
import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laytune.layout import UNDEF, LayoutSyntaxError
from laytune.space import Candidate, SearchSpace
from tests.space.conftest import make_device, make_matmul

ROOT = Path(__file__).resolve().parents[2]


@functools.cache  # drawn when a test first asks (not when the module is collected), once
def _some_candidates(n: int = 40) -> tuple[Candidate, ...]:
    """``n`` candidates spread over the first 20000 of a matmul's space."""
    space = SearchSpace(make_matmul(16, 16, 16), make_device())
    return tuple(itertools.islice(space.enumerate(), 0, 20000, 20000 // n))[:n]


def test_json_round_trip_of_space_candidates():
    for candidate in _some_candidates():
        text = candidate.canonical_json()
        back = Candidate.from_json(text)
        assert back == candidate
        assert back.key == candidate.key
        assert back.canonical_json() == text


@settings(max_examples=30, deadline=None)
@given(
    pad=st.one_of(st.none(), st.just(UNDEF), st.just(-math.inf), st.floats(-10, 10)),
    vector=st.sampled_from([1, 2, 4]),
)
def test_json_round_trip_of_pad_values_and_knobs(pad, vector):
    base = _some_candidates(5)[0]
    candidate = Candidate.make(base.layout_map, {**base.knob_map, "vector": vector}, {"A": pad})
    back = Candidate.from_json(json.loads(json.dumps(candidate.to_json())))
    assert back == candidate and back.key == candidate.key


def test_key_is_stable_across_processes():
    candidates = _some_candidates(5)
    payload = json.dumps([c.canonical_json() for c in candidates])
    script = (
        "import json, sys\n"
        "from laytune.space import Candidate\n"
        "texts = json.loads(sys.stdin.read())\n"
        "print(json.dumps([Candidate.from_json(t).key for t in texts]))\n"
    )
    for seed in ("0", "12345"):
        result = subprocess.run(
            [sys.executable, "-c", script],
            input=payload,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            check=True,
        )
        assert json.loads(result.stdout) == [c.key for c in candidates]


def test_key_of_a_candidate_built_in_another_process():
    """The child builds the space itself: same candidates, same keys."""
    script = (
        "import itertools, json\n"
        "from tests.space.conftest import make_device, make_matmul\n"
        "from laytune.space import SearchSpace\n"
        "space = SearchSpace(make_matmul(16, 16, 16), make_device())\n"
        "print(json.dumps([c.key for c in itertools.islice(space.enumerate(), 0, 20000, 500)]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONHASHSEED": "7", "PATH": ""},
        check=True,
    )
    space = SearchSpace(make_matmul(16, 16, 16), make_device())
    expected = [c.key for c in itertools.islice(space.enumerate(), 0, 20000, 500)]
    assert json.loads(result.stdout) == expected


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{", "candidate JSON is not valid JSON"),
        ("3", "candidate JSON must be an object"),
        ({"knobs": {}}, "candidate JSON needs the 'layouts' field"),
        ({"version": 2, "layouts": {}}, "candidate JSON version 2 is not supported"),
        ({"layouts": {}, "pad_values": {"X": "zero"}}, "unknown pad_value 'zero'"),
    ],
)
def test_malformed_candidate_json_names_the_problem(data: object, message: str) -> None:
    with pytest.raises(LayoutSyntaxError, match=message):
        Candidate.from_json(data)  # type: ignore[arg-type]
