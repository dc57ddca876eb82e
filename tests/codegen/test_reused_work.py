"""Lowering reuses the work that does not depend on the candidate: an
expression's hash, a kernel scope's simplified index expressions and their
C text, and the facts of each buffer's layout that checking a candidate
derives. What is reused is exactly what would be computed again: a result
kept for one scope's names or ranges never answers another's."""

from __future__ import annotations

import gc
import pickle
import subprocess
import sys
import weakref

import laytune.codegen._emit as emit
import laytune.space._facts as facts
from laytune import ops
from laytune.codegen import GENERIC_DEVICE, lower
from laytune.codegen._emit import Scope
from laytune.layout import BinOp, Const, Var
from laytune.space import SearchSpace, SpaceOptions, check_candidate
from tests.codegen.harness import RandomTrial
from tests.jobs import ROOT


class _CountedVar(Var):
    """A Var that counts how often it is hashed."""

    def __hash__(self) -> int:
        _CountedVar.hashed += 1  # type: ignore[attr-defined]
        return hash(("Var", self.index))


_CountedVar.hashed = 0  # type: ignore[attr-defined]


def test_an_expression_is_hashed_once_and_as_its_fields() -> None:
    i = _CountedVar(0, "i")
    e = BinOp("+", BinOp("*", i, Const(4)), BinOp("%", i, Const(3)))
    assert hash(e) == hash(("+", e.lhs, e.rhs))  # the dataclass's hash, as before
    counted = _CountedVar.hashed  # type: ignore[attr-defined]
    for _ in range(50):
        hash(e)
    assert len({e, BinOp("+", e.lhs, e.rhs)}) == 1
    assert _CountedVar.hashed == counted  # type: ignore[attr-defined]  # the tree is not walked


def test_a_pickled_expression_hashes_in_a_process_with_another_hash_seed() -> None:
    """The kept hash hashes ``op``, a string: a process with another hash
    seed must compute its own, never read this one's."""
    e = BinOp("//", BinOp("+", Var(0, "i"), Const(3)), Const(4))
    script = (
        "import pickle, sys\n"
        "from laytune.layout import BinOp, Const, Var\n"
        "e = pickle.loads(sys.stdin.buffer.read())\n"
        "fresh = BinOp('//', BinOp('+', Var(0, 'i'), Const(3)), Const(4))\n"
        "assert e == fresh and hash(e) == hash(fresh) and e in {fresh}, 'stale hash'\n"
    )
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", script],
            input=pickle.dumps(e),
            cwd=ROOT,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            capture_output=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr.decode()


def test_a_kept_c_text_answers_only_the_same_names_and_ranges() -> None:
    texts = []
    for name, hi in (("i", 7), ("row", 7), ("i", 15), ("i", 7)):
        scope = Scope()
        v = scope.var(name, 0, hi)
        e = v % 8 + v // 8 * 3
        texts.append((scope.c(e), str(scope.simplify(e)), scope.fits_int(e)))
    assert texts[0] == ("i", "i", True)
    assert texts[1] == ("row", "row", True)  # not the text kept for i
    assert texts[2] == ("(i & 7) + (i >> 3) * 3", "i % 8 + (i // 8) * 3", True)
    assert texts[3] == texts[0]


def test_lowering_a_candidate_again_simplifies_nothing_again(monkeypatch) -> None:
    workload = ops.conv2d(1, 2, 6, 6, 2, 3, stride=1, padding=1)
    space = SearchSpace(workload, GENERIC_DEVICE, SpaceOptions(families=("identity", "pad_rows")))
    candidate = space.suggest(RandomTrial(3))
    first = lower(workload, candidate)
    calls = []
    simplify = emit.simplify
    monkeypatch.setattr(emit, "simplify", lambda e, r: calls.append(e) or simplify(e, r))
    again = lower(workload, candidate)
    assert again.source == first.source
    assert calls == []


def test_checking_a_candidate_again_derives_no_buffer_facts_again(monkeypatch) -> None:
    workload = ops.matmul(16, 16, 32)
    space = SearchSpace(workload, GENERIC_DEVICE)
    candidate = space.identity()
    first = check_candidate(workload, candidate, GENERIC_DEVICE)
    calls = []
    derive = facts.buffer_facts
    monkeypatch.setattr(
        facts, "buffer_facts", lambda *args: calls.append(args[1].name) or derive(*args)
    )
    again = check_candidate(workload, candidate, GENERIC_DEVICE)
    assert again == first and again.ok
    assert calls == []


def test_the_kept_facts_do_not_keep_a_workload_alive() -> None:
    """The registry of defined workloads forgets one that nothing holds; the
    facts kept for checking its candidates must not hold it."""
    workload = ops.matmul(8, 8, 12)
    assert check_candidate(
        workload, SearchSpace(workload, GENERIC_DEVICE).identity(), GENERIC_DEVICE
    ).ok
    gone = weakref.ref(workload)
    del workload
    gc.collect()
    assert gone() is None
