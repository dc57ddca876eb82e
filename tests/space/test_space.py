"""SearchSpace: sizes, enumeration, suggestion, rejections, check_candidate."""

from __future__ import annotations

import itertools
import math

import optuna
import pytest

from laytune.exceptions import LayoutRejectedError
from laytune.layout import UNDEF, Var, block, identity, pad_rows, permute
from laytune.space import (
    GLOBAL_FAMILIES,
    JOINT_RULES,
    LOCAL_FAMILIES,
    Axis,
    Buffer,
    Candidate,
    RowPointerTileLoad,
    SearchSpace,
    SpaceOptions,
    VectorAccess,
    WorkloadLike,
    WorkloadSpec,
    baseline_knobs,
    check_candidate,
    implied_constraints,
    knob_names,
    vector_dim,
)
from laytune.space._generate import global_layouts
from tests.space.conftest import make_add, make_conv2d, make_device, make_matmul

SMALL = SpaceOptions(
    families=("identity", "permute", "block", "pad_rows"),
    block_factors=(4, 3),
    pad_amounts=(1,),
    blocks=(1, 4),
    groups=(0, 4),
    splits=(1,),
    unrolls=(1, 4),
    local_pad_amounts=(1,),
    local_xor_periods=(16,),
    local_xor_chunks=(1,),
)

#: The default layouts with fewer knob values: what a report of layout
#: rejections needs, without counting billions of knob settings per rule.
FEWER_KNOBS = {"groups": (0, 4), "unrolls": (1, 4), "splits": (1, 4)}


@pytest.fixture
def small_matmul_space(device):
    return SearchSpace(make_matmul(16, 16, 16), device, SMALL)


def test_workload_spec_satisfies_the_protocol():
    matmul, conv = make_matmul(), make_conv2d()
    assert isinstance(matmul, WorkloadLike)
    assert [vector_dim(b, 1) for b in matmul.buffers] == [None, 1, 1]  # along j
    assert [vector_dim(b, 0) for b in matmul.buffers] == [0, None, 0]  # along i
    ow = vector_dim(conv.buffers[0], 3)
    assert isinstance(ow, str) and "other than as one bare index" in ow
    assert [vector_dim(b, 1) for b in conv.buffers] == [None, 0, 1]  # along the filters


@pytest.mark.slow
def test_enumerate_matches_len_and_every_candidate_passes(small_matmul_space, device):
    space = small_matmul_space
    candidates = list(space.enumerate())
    assert len(candidates) == len(space) > 0
    assert len({c.key for c in candidates}) == len(candidates)
    workload = space.workload
    for candidate in candidates[::7]:
        verdict = check_candidate(workload, candidate, device)
        assert verdict.ok, (candidate.describe(), str(verdict))
        assert space.check(candidate).ok
        assert set(candidate.knob_map) == set(knob_names(workload))
    blocked = {(c.knob("block.i"), c.knob("block.j")) for c in candidates}
    assert blocked == {(1, 1), (1, 4), (4, 1), (4, 4)}
    assert {c.knob("vector_axis") for c in candidates} == {"", "i", "j"}


def test_enumeration_order_is_deterministic(device):
    keys = [c.key for c in itertools.islice(SearchSpace(make_matmul(), device).enumerate(), 300)]
    again = [c.key for c in itertools.islice(SearchSpace(make_matmul(), device).enumerate(), 300)]
    assert keys == again


def test_staging_adds_local_layouts_ranked_by_bank_conflicts(small_matmul_space):
    scores = small_matmul_space.local_scores()
    assert set(scores) == {"A.local", "B.local"}
    values = [s for _, s in scores["A.local"]]
    assert values == sorted(values)
    assert dict(scores["A.local"])["identity()"] > values[0]
    staged = [c for c in small_matmul_space.enumerate() if c.knob("local_stage")]
    assert staged
    assert all({"A.local", "B.local"} <= set(c.layout_map) for c in staged)
    # the work-group covers the 16 x 16 block its tiles feed
    for c in staged:
        assert c.knob("group.j") * c.knob("block.j") == 16
        assert c.knob("group.i") * c.knob("block.i") == 16


def test_suggest_yields_only_valid_members(small_matmul_space, device):
    space = small_matmul_space
    members = {c.key for c in space.enumerate()}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(60):
        trial = study.ask()
        candidate = space.suggest(trial)
        assert check_candidate(space.workload, candidate, device).ok
        assert candidate.key in members
        assert Candidate.from_json(trial.user_attrs["candidate"]) == candidate
        study.tell(trial, 1.0)
        seen.add(candidate.key)
    assert len(seen) > 30


def test_suggest_with_tpe_on_a_conv_space(device):
    space = SearchSpace(make_conv2d(16, 16, 8), device, SMALL)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=5))
    for _ in range(15):
        trial = study.ask()
        candidate = space.suggest(trial)
        assert check_candidate(space.workload, candidate, device).ok
        study.tell(trial, float(len(candidate.canonical_json())))


def test_identity_is_the_safe_baseline(small_matmul_space, device):
    base = small_matmul_space.identity()
    assert all(layout.is_identity for _, layout in base.layouts)
    assert base.knob_map == {
        "order": "logical",
        "local_stage": False,
        "vector_axis": "",
        "vector": 1,
        "vector_transpose": "",
        "copy": "elementwise",
        "subgroup": 0,
        "block.i": 1,
        "block.j": 1,
        "group.i": 0,
        "group.j": 0,
        "reduce_order": "",
        "split": 1,
        "unroll": 1,
        "reduce_vector": 1,
        "peel": False,
        "pad_mode": "guard",
        "store": "plain",
        "prefetch": False,
    }
    assert base.knob_map == baseline_knobs(small_matmul_space.workload)
    assert check_candidate(small_matmul_space.workload, base, device).ok
    assert base.key == next(iter(small_matmul_space.enumerate())).key


def test_conv2d_space_is_counted_without_materialising(device):
    workload = make_conv2d()
    space = SearchSpace(workload, device)
    size = len(space)
    assert size > 10**9
    # vectors along ow are forbidden by the input's ow + kw index; along k they are offered
    first = list(itertools.islice(space.enumerate(), 3000))
    assert "ow" not in {c.knob("vector_axis") for c in first}
    for candidate in first[::100]:
        assert check_candidate(workload, candidate, device).ok
    # channels innermost in the weight and the output: vectors along k are offered

    class ChannelsLast:
        def suggest_categorical(self, name, choices):
            wanted = {"layout:weight": "permute(order=(1, 2, 3, 0))", "vector_axis": "k"}
            want = wanted.get(name.split("|")[0], "permute(order=(0, 2, 3, 1))")
            return want if want in choices else choices[0]

    candidate = space.suggest(ChannelsLast())
    assert candidate.knob("vector_axis") == "k" and candidate.knob("vector") > 1
    assert check_candidate(workload, candidate, device).ok


@pytest.mark.parametrize("make", [make_conv2d, lambda: make_matmul(64, 64, 64)])
def test_the_register_blocks_count_without_the_layouts_whole_facts(device, make):
    """The count is memoised on what the remaining steps read. From the first
    register block on, the steps read a layout fact only in part (the
    work-items of the chosen order, the vectors along reduce axes), so
    layouts that differ in what only earlier knobs ask share every count
    after them: a 64-channel 56 x 56 conv counted in 18 s when they did not."""
    rules = SearchSpace(make(), device)._rules
    first_block = next(i for i, step in enumerate(rules.steps) if step.name.startswith("block."))
    whole = {"@vectors", "@orders", "@crossed", "@overlap", "@copies", "@subgroups"}
    assert not whole & set(rules._needed[first_block])
    assert {"#order_items", "@reduce_vectors"} <= set(rules._needed[first_block])


def test_len_equals_enumeration_on_a_product_of_small_buffers(device):
    space = SearchSpace(make_add((4, 8)), device, SMALL)
    assert len(list(space.enumerate())) == len(space)


def test_reduce_order_and_split_are_offered_with_two_reduce_axes(device):
    options = SpaceOptions(
        families=("identity",), blocks=(1,), groups=(0,), splits=(1, 4, 8), unrolls=(1, 2)
    )
    space = SearchSpace(make_conv2d(16, 16, 8), device, options)
    candidates = list(space.enumerate())
    assert len(candidates) == len(space)
    orders = {c.knob("reduce_order") for c in candidates}
    assert len(orders) == 6 and "" in orders and "kh,kw,c" in orders
    split = [c for c in candidates if c.knob("split") > 1]
    assert {c.knob("split") for c in split} == {4, 8}
    # the split loop (c % 4 or c % 8) is the innermost: unroll divides it
    assert all(c.knob("split") % c.knob("unroll") == 0 for c in split)
    # a split that covers the whole first axis would only reorder: not offered
    assert not [c for c in split if c.knob("reduce_order").startswith("kh")]
    matmul = SearchSpace(make_matmul(16, 16, 16), device, options)
    assert {c.knob("split") for c in matmul.enumerate()} == {1}


def test_rejections_report_counts_and_examples(device):
    workload = make_conv2d(16, 16, 8)
    # every layout and block of the defaults, fewer groups, unrolls and splits:
    # each rule below still removes candidates, counted in seconds
    space = SearchSpace(workload, device, SpaceOptions(padding_budget=0.05, **FEWER_KNOBS))
    report = {r.constraint: r for r in space.rejections()}
    budget = report["PaddingBudget(max_fraction=0.05)"]
    assert budget.scope == "layout" and budget.removed > 0
    assert "over the budget of 5.0%" in budget.example
    image = report["Image2DRead(role='output')"]
    assert image.removed > 0 and "buffer 'output'" in image.example
    vector = report["vector_access"]
    assert vector.scope == "joint" and vector.removed > 0
    assert set(JOINT_RULES) <= set(report)
    assert report["local_memory_budget"].removed == 0
    assert report["register_budget"].removed > 0
    assert "over the budget of 128" in report["register_budget"].example


def test_joint_rule_counts_are_what_lifting_the_rule_adds(device):
    space = SearchSpace(make_add((4, 8)), device, SMALL)
    report = {r.constraint: r for r in space.rejections()}
    vector_removed = report["vector_access"].removed
    assert vector_removed > 0
    assert "vector 2 along 'x0'" in report["vector_access"].example
    assert "not consecutive" in report["vector_access"].example
    total = len(space)
    for rule in ("vector_access", "work_group_divides", "order_scalar"):
        lifted = space._count(frozenset({rule}))
        assert lifted - total == report[rule].removed


@pytest.mark.parametrize(
    "make", [lambda: make_matmul(16, 24, 8), lambda: make_conv2d(4, 4, 6)], ids=["matmul", "conv2d"]
)
def test_the_one_pass_rejection_counts_agree_with_a_count_per_lifted_rule(device, make):
    """rejections() counts every rule's lifting in one pass (its memo shared
    by all rules); each must equal the space counted with that rule lifted."""
    space = SearchSpace(make(), device, SMALL)
    report = {r.constraint: r.removed for r in space.rejections() if r.scope == "joint"}
    total = len(space)
    assert any(report.values())
    for rule in JOINT_RULES:
        assert report[rule] == space._count(frozenset({rule})) - total, rule


@pytest.mark.parametrize(
    "make", [lambda: make_matmul(16, 24, 8), lambda: make_conv2d(4, 4, 6)], ids=["matmul", "conv2d"]
)
def test_a_capped_count_is_the_count_up_to_the_cap(device, make):
    """count(cap=c) stops summing at c and equals min(count, c) at every cap,
    from a fresh memo and from one the full count filled; size_up_to too."""
    space = SearchSpace(make(), device, SMALL)
    total = space.size
    for cap in (1, 2, 7, total - 1, total, total + 1, 10 * total):
        fresh = SearchSpace(make(), device, SMALL)
        assert fresh.size_up_to(cap) == min(total, cap), cap
        assert space.size_up_to(cap) == min(total, cap), cap
        for sig in list(fresh._signatures)[:4]:
            state = fresh._rules.state_of(sig)
            assert fresh._rules.count(state, cap=cap) == min(space._rules.count(state), cap)


def test_local_memory_budget_limits_staging(device):
    tiny = make_device(local_mem_size=1000)  # one 16 x 16 float tile is 1024 bytes
    space = SearchSpace(make_matmul(16, 16, 16), tiny, SMALL)
    report = {r.constraint: r for r in space.rejections()}
    assert report["LocalMemoryBudget(max_bytes=None)"].removed > 0
    assert "over the budget of 1000 bytes" in report["LocalMemoryBudget(max_bytes=None)"].example
    assert not any(c.knob("local_stage") for c in space.enumerate())
    pair = make_device(local_mem_size=1500)  # each tile fits, the two together do not
    space = SearchSpace(make_matmul(16, 16, 16), pair, SMALL)
    assert not any(c.knob("local_stage") for c in space.enumerate())
    joint = {r.constraint: r for r in space.rejections()}["local_memory_budget"]
    assert joint.removed > 0 and "over the budget of 1500 bytes" in joint.example
    roomy = make_device(local_mem_size=2048 + 60)  # identity pair plus a little
    space = SearchSpace(make_matmul(16, 16, 16), roomy, SMALL)
    staged = [c for c in space.enumerate() if c.knob("local_stage")]
    assert staged
    sizes = {sum(c.layout(n).physical_size * 4 for n in ("A.local", "B.local")) for c in staged}
    assert max(sizes) <= 2048 + 60
    assert {r.constraint: r for r in space.rejections()}["local_memory_budget"].removed > 0
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(40):
        candidate = space.suggest(study.ask())
        assert check_candidate(space.workload, candidate, roomy).ok


def test_work_group_respects_the_device(device):
    small = make_device(max_work_group_size=8, max_work_item_sizes=(8, 8, 8))
    space = SearchSpace(make_matmul(16, 16, 16), small, SMALL)
    groups = {(c.knob("group.i"), c.knob("group.j")) for c in space.enumerate()}
    assert (4, 4) not in groups and (0, 0) in groups and (4, 1) not in groups
    report = {r.constraint: r for r in space.rejections()}
    assert report["work_group_device_limit"].removed > 0


def test_families_option_limits_the_space(device):
    workload = make_matmul()
    full = SearchSpace(workload, device)
    narrow = SearchSpace(
        workload, device, SpaceOptions(families_per_buffer={"A": ("identity",), "B": ("identity",)})
    )
    assert len(narrow.layouts("A")) == 1
    assert len(narrow) < len(full)
    capped = SearchSpace(workload, device, SpaceOptions(max_layouts_per_buffer=3))
    assert all(len(capped.layouts(b)) <= 3 for b in capped.buffers)


def test_extra_constraints_filter_a_buffers_layouts(device):
    workload = make_matmul(32, 32, 32)
    options = SpaceOptions(
        constraints={"A": (RowPointerTileLoad(8, row_elements=8),)}, **FEWER_KNOBS
    )
    space = SearchSpace(workload, device, options)
    for layout in space.layouts("A"):
        assert RowPointerTileLoad(8, row_elements=8).check(layout, (32, 32), "float32", device).ok
    report = {r.constraint: r for r in space.rejections()}
    assert any(k.startswith("RowPointerTileLoad") and r.removed for k, r in report.items())


def test_no_image_support_removes_textures():
    device = make_device(image_support=False, image2d_max_width=0, image2d_max_height=0)
    space = SearchSpace(make_matmul(), device, SpaceOptions(**FEWER_KNOBS))
    assert all(lay.image_rank == 1 for b in space.buffers for lay in space.layouts(b))
    report = {r.constraint: r for r in space.rejections()}
    assert "has no image support" in report["Image2DRead(role='input')"].example


# -- check_candidate: what codegen relies on -------------------------------------


def _base(space: SearchSpace, **changes) -> Candidate:
    base = space.identity()
    knobs = {**base.knob_map, **changes.pop("knobs", {})}
    layouts = {**base.layout_map, **changes.pop("layouts", {})}
    return Candidate.make(layouts, knobs, changes.pop("pad_values", {}))


VECTOR_J = {"vector_axis": "j", "vector": 4, "block.j": 4}


def test_check_candidate_rejects_a_vector_a_layout_cannot_serve(device):
    workload = make_matmul(32, 32, 32)
    space = SearchSpace(workload, device, SMALL)
    good = _base(space, knobs=VECTOR_J)
    assert check_candidate(workload, good, device).ok
    assert implied_constraints(workload, good) == {
        "B": (VectorAccess(1, 4),),
        "C": (VectorAccess(1, 4),),
    }
    bad = _base(space, knobs=VECTOR_J, layouts={"C": permute((32, 32), (1, 0))})
    verdict = check_candidate(workload, bad, device)
    assert not verdict.ok
    assert any("buffer 'C': VectorAccess(axis=1, width=4)" in r for r in verdict.reasons)
    # in its logical layout the output takes a vector it does not hold side
    # by side: the lanes are stored one by one (never with a vector store)
    along_i = {"vector_axis": "i", "vector": 4, "block.i": 4}
    lanes = _base(space, knobs=along_i, layouts={"A": permute((32, 32), (1, 0))})
    assert check_candidate(workload, lanes, device).ok
    assert implied_constraints(workload, lanes) == {"A": (VectorAccess(0, 4),)}
    nontemporal = _base(
        space, knobs={**along_i, "store": "nontemporal"}, layouts=dict(lanes.layouts)
    )
    assert "stored lane by lane" in str(check_candidate(workload, nontemporal, device))
    not_multiple = _base(space, knobs={**VECTOR_J, "block.j": 2})
    assert "block.j 2 is not a multiple of the vector 4" in str(
        check_candidate(workload, not_multiple, device)
    )
    # along i: A and C must hold runs of 4 along their first axis
    along_i = {"vector_axis": "i", "vector": 4, "block.i": 4}
    verdict = check_candidate(workload, _base(space, knobs=along_i), device)
    assert "buffer 'A': VectorAccess(axis=0, width=4)" in str(verdict)
    transposed = {n: permute((32, 32), (1, 0)) for n in ("A", "C")}
    assert check_candidate(workload, _base(space, knobs=along_i, layouts=transposed), device).ok
    scalar_axis = _base(space, knobs={"vector_axis": "j", "vector": 1})
    assert "vector 1 is written vector_axis ''" in str(
        check_candidate(workload, scalar_axis, device)
    )


def test_check_candidate_rejects_vectors_on_strided_windows(device):
    """A window ``ow + kw`` inside the input is one unaligned run per vector
    (``UnalignedVectorAccess``); a stride-2 window ``2 * ow + kw`` is not a
    run, so no vector serves it."""
    workload = make_conv2d(8, 8, 8)
    space = SearchSpace(workload, device, SMALL)
    knobs = {"vector_axis": "ow", "vector": 2, "block.ow": 2}
    assert check_candidate(workload, _base(space, knobs=knobs), device).ok
    n, ko, oh, ow, ci, kh, kw = (Var(x) for x in range(7))
    strided = WorkloadSpec(
        "conv2d_s2",
        (
            Axis("n", 1),
            Axis("k", 8),
            Axis("oh", 4),
            Axis("ow", 4),
            Axis("c", 8, "reduce"),
            Axis("kh", 3, "reduce"),
            Axis("kw", 3, "reduce"),
        ),
        (
            Buffer("input", (1, 8, 9, 9), indices=(n, ci, 2 * oh + kh, 2 * ow + kw)),
            Buffer("weight", (8, 8, 3, 3), indices=(ko, ci, kh, kw)),
            Buffer("output", (1, 8, 4, 4), role="output", indices=(n, ko, oh, ow)),
        ),
        "sum",
    )
    space = SearchSpace(strided, device, SMALL)
    verdict = check_candidate(strided, _base(space, knobs=knobs), device)
    assert not verdict.ok
    assert "buffer 'input' is indexed by the axis other than as one bare index" in str(verdict)
    assert "[n, c, 2 * oh + kh, 2 * ow + kw]" in str(verdict)


def test_check_candidate_accepts_any_lowerable_knob_value(device):
    """check_candidate judges validity, not a space's option lists: a block of
    5 (no space offers it by default) is valid, one beyond the axis is not."""
    workload = make_matmul(32, 32, 32)
    space = SearchSpace(workload, device, SMALL)
    assert check_candidate(workload, _base(space, knobs={"block.i": 5, "unroll": 32}), device).ok
    verdict = check_candidate(workload, _base(space, knobs={"block.i": 33}), device)
    assert "block.i 33 is not one of" in str(verdict)
    # an unroll that does not divide the loop leaves a loop of single steps
    assert check_candidate(workload, _base(space, knobs={"unroll": 3}), device).ok
    verdict = check_candidate(workload, _base(space, knobs={"unroll": 64}), device)
    assert "unroll 64 exceeds the 32 values of 'k'" in str(verdict)


def test_check_candidate_pad_mode_rules(device):
    workload = make_conv2d(8, 8, 8)
    space = SearchSpace(workload, device, SMALL)
    blocked = block(workload.buffers[0].shape, 1, 3)
    layouts = {"input": blocked}
    guard = _base(space, layouts=layouts)
    assert check_candidate(workload, guard, device).ok
    no_value = _base(space, layouts=layouts, knobs={"pad_mode": "overcompute"})
    verdict = check_candidate(workload, no_value, device)
    assert not verdict.ok and "not the neutral element 0.0" in str(verdict)
    wrong = _base(
        space, layouts=layouts, knobs={"pad_mode": "overcompute"}, pad_values={"input": 1.0}
    )
    assert not check_candidate(workload, wrong, device).ok
    right = _base(
        space, layouts=layouts, knobs={"pad_mode": "overcompute"}, pad_values={"input": 0.0}
    )
    assert check_candidate(workload, right, device).ok
    undef = _base(
        space, layouts=layouts, knobs={"pad_mode": "overcompute"}, pad_values={"input": UNDEF}
    )
    assert not check_candidate(workload, undef, device).ok


def test_overcompute_for_max_and_elementwise(device):
    i, j = Var(0), Var(1)
    pool = WorkloadSpec(
        "rowmax",
        (Axis("i", 8), Axis("j", 12, "reduce")),
        (Buffer("x", (8, 12), indices=(i, j)), Buffer("y", (8,), role="output", indices=(i,))),
        "max",
    )
    padded = {"x": pad_rows((8, 12), 4)}
    space = SearchSpace(pool, device, SMALL)
    over = {"pad_mode": "overcompute"}
    assert check_candidate(
        pool, _base(space, layouts=padded, knobs=over, pad_values={"x": -math.inf}), device
    ).ok
    assert not check_candidate(
        pool, _base(space, layouts=padded, knobs=over, pad_values={"x": 0.0}), device
    ).ok
    produced = [c for c in space.enumerate() if c.knob("pad_mode") == "overcompute"]
    assert produced and all(c.pad_value("x") == -math.inf for c in produced)
    add = make_add((8, 12))
    space = SearchSpace(add, device, SMALL)
    padded = {"x": pad_rows((8, 12), 4)}
    assert check_candidate(
        add, _base(space, layouts=padded, knobs=over, pad_values={"x": UNDEF}), device
    ).ok
    assert not check_candidate(add, _base(space, layouts=padded, knobs=over), device).ok


def test_check_candidate_order_work_group_and_staging(device):
    workload = make_matmul(32, 32, 32)
    space = SearchSpace(workload, device, SMALL)
    assert not check_candidate(workload, _base(space, knobs={"order": "A"}), device).ok
    # following C's physical order duplicates 'logical': the space does not offer it, yet it lowers
    assert check_candidate(workload, _base(space, knobs={"order": "C"}), device).ok
    assert not any(c.knob("order") == "C" and c.layout("C").is_identity for c in space.enumerate())
    verdict = check_candidate(workload, _base(space, knobs={"order": "C", "block.j": 2}), device)
    assert "order 'C' computes one point per item" in str(verdict)
    too_big = {"group.j": 32, "group.i": 16}
    verdict = check_candidate(workload, _base(space, knobs=too_big), device)
    assert "over the device's limits" in str(verdict)
    # a work-group need not divide its dimension (the NDRange rounds up and the
    # items past the last block return), but in a kernel of sub-group block reads
    verdict = check_candidate(workload, _base(space, knobs={"group.j": 3, "group.i": 1}), device)
    assert verdict.ok, verdict
    subgroups = make_device(sub_group_sizes=(16,), extensions=("cl_khr_fp16", "cl_intel_subgroups"))
    narrow = make_matmul(32, 24, 32)
    grouped = _base(
        SearchSpace(narrow, subgroups, SMALL),
        knobs={"group.j": 16, "group.i": 1, "subgroup": 16},
    )
    verdict = check_candidate(narrow, grouped, subgroups)
    assert "group.j 16 does not divide the 24 work-items of NDRange dimension 0" in str(verdict)
    verdict = check_candidate(workload, _base(space, knobs={"group.j": 4}), device)
    assert "all 0 (the driver's) or all set" in str(verdict)
    verdict = check_candidate(workload, _base(space, knobs={"local_stage": True}), device)
    assert "local staging needs a work-group of its own" in str(verdict)
    assert "no layout for 'A.local'" in str(verdict)
    tiles = {"A.local": pad_rows((16, 16), 1), "B.local": identity((16, 16))}
    staged_knobs = {"local_stage": True, "group.j": 4, "group.i": 16, "block.j": 4}
    staged = _base(space, knobs=staged_knobs, layouts=tiles)
    assert check_candidate(workload, staged, device).ok
    uncovered = _base(space, knobs={**staged_knobs, "group.j": 8}, layouts=tiles)
    assert "group.j must be 4 so that the work-group covers the staging block, got 8" in str(
        check_candidate(workload, uncovered, device)
    )
    walked = _base(space, knobs={**staged_knobs, "order": "C"}, layouts=tiles)
    assert "local staging walks the logical order" in str(check_candidate(workload, walked, device))
    vector = {**staged_knobs, "vector_axis": "j", "vector": 4}
    padded_b = {**tiles, "B.local": pad_rows((16, 16), 1)}
    verdict = check_candidate(workload, _base(space, knobs=vector, layouts=padded_b), device)
    assert "buffer 'B.local': VectorAccess(axis=1, width=4)" in str(verdict)
    missing = Candidate.make(space.identity().layout_map, {"vector": 1})
    assert "are missing" in str(check_candidate(workload, missing, device))
    unknown = _base(space, knobs={"per_item": 4})
    assert "unknown knobs ['per_item']" in str(check_candidate(workload, unknown, device))
    wrong_shape = _base(space, layouts={"A": identity((16, 32))})
    assert "built on (16, 32)" in str(check_candidate(workload, wrong_shape, device))
    typed = _base(space, knobs={"local_stage": 1})
    assert "local_stage 1 is not one of" in str(check_candidate(workload, typed, device))


def test_identity_raises_when_extra_constraints_refuse_it(device):
    options = SpaceOptions(constraints={"C": (VectorAccess(0, 4),)})
    space = SearchSpace(make_matmul(32, 32, 32), device, options)
    with pytest.raises(LayoutRejectedError):
        space.identity()
    impossible = SpaceOptions(families=("identity",), constraints={"C": (VectorAccess(0, 4),)})
    with pytest.raises(LayoutRejectedError, match="no layout of buffer 'C'"):
        SearchSpace(make_matmul(32, 32, 32), device, impossible)


def test_suggest_replays_from_its_params(small_matmul_space):
    """trial.params describe the candidate completely: a FixedTrial with the
    same params gives the same candidate. A domain narrowed by earlier
    choices is asked under a name that lists its choices."""
    space = small_matmul_space
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    for _ in range(20):
        trial = study.ask()
        candidate = space.suggest(trial)
        assert space.suggest(optuna.trial.FixedTrial(trial.params)) == candidate
        study.tell(trial, 0.0)
    params: dict[str, object] = {}

    class Recorder:
        def suggest_categorical(self, name, choices):
            value = choices[0]
            params[name] = value
            return value

    assert space.suggest(Recorder()) == space.identity()
    assert params["layout:A"] == "identity()"
    # identity layouts serve no vector along i: the domain is narrowed, and named so
    assert params["vector_axis|,j"] == ""
    assert params["vector|1"] == 1
    assert space.suggest(optuna.trial.FixedTrial(params)) == space.identity()


@pytest.mark.parametrize("local_families", [LOCAL_FAMILIES, (*LOCAL_FAMILIES, "pad_every")])
def test_every_global_family_appears_whatever_the_local_families(local_families):
    """The local families only shape ``__local`` tiles: a global buffer's
    layouts, family by family, are the same whatever they are, and every
    global family yields layouts beyond identity on a shape that admits them."""
    shape = (64, 64)
    opts = SpaceOptions(local_families=local_families)
    plain = SpaceOptions()
    for fam in GLOBAL_FAMILIES[1:]:
        got = global_layouts(shape, "float32", ["identity", fam], opts)
        assert len(got) > 1, fam
        assert got == global_layouts(shape, "float32", ["identity", fam], plain), fam
    every = global_layouts(shape, "float32", GLOBAL_FAMILIES, opts)
    assert any(lay.family == "texture" for lay in every)


def test_enumerating_with_knobs_held_is_the_whole_enumeration_filtered(device):
    options = SpaceOptions(families=("identity",), blocks=(1, 4), groups=(0, 2, 16), unrolls=(1,))
    space = SearchSpace(make_matmul(16, 16, 32), device, options)
    every = list(space.enumerate())
    assert {c.knob("local_stage") for c in every} == {True, False}
    for held in ({"local_stage": True}, {"local_stage": False, "block.j": 4}, {"copy": "rows"}):
        want = [c for c in every if all(c.knob(k) == v for k, v in held.items())]
        assert want and list(space.enumerate(held=held)) == want
    with pytest.raises(KeyError, match="no knob"):
        next(space.enumerate(held={"colour": 1}))
