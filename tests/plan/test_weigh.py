"""The planner weighs recorded candidates: a slower kernel that needs fewer
conversions wins where the conversions cost more than it loses."""

from __future__ import annotations

from pathlib import Path

import pytest

from laytune.codegen import GENERIC_DEVICE
from laytune.layout import identity
from laytune.plan import plan_layouts
from laytune.plan._price import Option
from laytune.plan._weigh import weigh
from laytune.records import Record, open_database
from laytune.space import Candidate
from tests.plan.graphs import conv_candidate, seed_graph

DEVICE = GENERIC_DEVICE


def _record(workload, candidate, compute_s, pack_s) -> Record:
    """A verified record whose own pack and unpack kernels of every buffer
    not in its logical layout took ``pack_s`` each."""
    converted = [name for name, layout in candidate.layouts if not layout.is_identity]
    return Record(
        workload.key,
        DEVICE.key,
        candidate,
        "ok",
        value_s=compute_s,
        program={
            "buffers": [
                {"name": b.name, "role": b.role, "shape": list(b.shape), "dtype": b.dtype}
                for b in workload.buffers
            ]
        },
        result={
            "pack_times": [{"buffer": n, "value_s": pack_s} for n in converted if n != "Y"],
            "unpack_times": [{"buffer": "Y", "value_s": pack_s}] if "Y" in converted else [],
        },
    )


def _records(db, graph, weight_pack_s: float) -> None:
    """For both convolutions: a blocked kernel of 1 ms whose data conversions
    take 0.1 ms and whose weights' take ``weight_pack_s``, and a kernel in
    logical layouts of 1.5 ms."""
    for name in ("conv1", "conv2"):
        workload = graph.op(name).workload
        blocked = conv_candidate(workload)
        plain = Candidate.make({n: identity(lay.shape) for n, lay in blocked.layouts})
        record = _record(workload, blocked, 1e-3, 1e-4)
        weights = [t for t in record.result["pack_times"] if t["buffer"] == "W"]
        for timing in weights:
            timing["value_s"] = weight_pack_s
        db.add(record)
        db.add(_record(workload, plain, 1.5e-3, 0.0))


def test_a_slower_kernel_with_fewer_conversions_wins_where_weights_are_inputs(
    tmp_path: Path,
) -> None:
    # weights packed on the host once: the blocked kernels win, two rewrites
    # at the graph's edge (0.2 ms) against 1 ms of kernel time saved
    constant, _ = seed_graph()
    # weights fed every run: packing them (3 ms each) costs more than the
    # blocked kernels save, so the planner picks the slower logical kernels
    per_run, _ = seed_graph(weights_as_inputs=True)
    with open_database(tmp_path / "w.db") as db:
        _records(db, constant, 3e-3)
        # each convolution alone (its weights constant) is fastest blocked:
        # 1 + 0.1 + 0.1 ms against 1.5 ms
        for name in ("conv1", "conv2"):
            best = db.best(constant.op(name).workload.key, DEVICE.key)
            assert not all(lay.is_identity for _, lay in best.candidate.layouts)
        blocked = plan_layouts(constant, db, DEVICE)
        plain = plan_layouts(per_run, db, DEVICE)
        # candidates given as a mapping are predicted from the records too
        given = {p.candidate for p in blocked.placements if p.frozen}
        mapping = {
            constant.op(n).workload.key: blocked.placement(n).candidate for n in ("conv1", "conv2")
        }
        same = plan_layouts(constant, mapping, DEVICE, records=db)
    assert len(given) == 2
    assert [p.seconds for p in same.predictions] == [p.seconds for p in blocked.predictions]
    assert {p.label: p for p in same.predictions}["conv1"].source.startswith("record ")

    assert len(blocked.rewrites) == 2
    for name in ("conv1", "conv2"):
        assert not blocked.placement(name).candidate.layout("X").is_identity
    assert blocked.predicted_s is not None
    # the bias add has no record: its bytes at the rate of the operators' own
    # conversion kernels (the records above: no conversion records here)
    add = {p.label: p for p in blocked.predictions}["add"]
    assert "pack and unpack kernels the operators' records measured" in add.source
    assert blocked.predicted_s == pytest.approx(2e-3 + 2e-4 + add.seconds)

    assert plain.rewrites == ()
    for name in ("conv1", "conv2"):
        layouts = plain.placement(name).candidate.layouts
        assert all(lay.is_identity for _, lay in layouts)
    kernels = {p.label: p for p in plain.predictions if p.kind == "operator"}
    assert kernels["conv1"].seconds == kernels["conv2"].seconds == 1.5e-3
    assert any("weighed" in line for line in plain.log)
    assert "fewer or cheaper conversions" in "\n".join(plain.log)
    text = str(plain)
    assert "predicted" in text and "record " in text


def test_weighing_escapes_what_one_operator_at_a_time_cannot() -> None:
    # two operators that only gain together (their shared rewrite cancels):
    # switching either alone is slower, both together is faster
    a = [Option(Candidate.make({}), 2e-3, origin="a plain"), Option(_marked(1), 1e-3, origin="a")]
    b = [Option(Candidate.make({}), 2e-3, origin="b plain"), Option(_marked(2), 1e-3, origin="b")]

    def predict(choice) -> float:
        fast = [choice[n] is not options[n][0] for n in ("a", "b")]
        between = 5e-3 if fast[0] != fast[1] else 0.0  # a rewrite unless both agree
        edges = 1e-3 if all(fast) else 0.0
        return sum(o.compute_s for o in choice.values()) + between + edges

    options = {"a": a, "b": b}
    log: list[str] = []
    chosen = weigh(options, predict, log)
    assert chosen == {"a": a[1], "b": b[1]}  # 3 ms against the first choice's 4 ms
    assert "all 4 combinations" in log[0]


def _marked(n: int) -> Candidate:
    return Candidate.make({}, {"unroll": n})


def test_where_some_records_of_an_operator_were_timed_cold_the_planner_weighs_only_those(
    tmp_path: Path,
) -> None:
    """Records of one workload timed warm (before its weights counted as
    outgrowing the cache) beside records timed cold: the cold ones are what
    the model meets, so the options come from them alone."""
    from laytune.plan._price import lookup_options

    graph, _ = seed_graph()
    workload = graph.op("conv1").workload
    blocked = conv_candidate(workload)
    plain = Candidate.make({n: identity(lay.shape) for n, lay in blocked.layouts})
    with open_database(tmp_path / "c.db") as db:
        db.add(_record(workload, blocked, 1e-3, 0.0))  # warm: fast on warm caches
        options = lookup_options(db, workload.key, DEVICE.key)
        assert [o.candidate for o in options][:1] == [blocked]
        cold = _record(workload, plain, 1.5e-3, 0.0)
        cold.result["launches"] = {"pack": 0, "compute": 9, "unpack": 0, "flush": 3}
        db.add(cold)
        options = lookup_options(db, workload.key, DEVICE.key)
        assert [o.candidate for o in options] == [plain]
        assert options[0].compute_s == pytest.approx(1.5e-3)


def test_each_set_of_layouts_an_operator_asks_is_offered_by_its_fastest_kernel(
    tmp_path: Path,
) -> None:
    """Five kernels of one convolution in NCHW4c, all faster than its one
    kernel in NCHW2c: the options hold the fastest NCHW4c kernel and the
    NCHW2c one (which neighbours in NCHW2c would take without a rewrite),
    where the five fastest kernels alone would all be NCHW4c. This was
    ResNet-18's stride-2 convolution into 512 channels: its 20 fastest
    records were NCHW, so its plan kept two rewrites around it though an
    NCHW16c kernel ran within 0.05 ms of them."""
    from laytune import layout as L
    from laytune.plan._price import lookup_options
    from tests.plan.graphs import oihw4i4o

    graph, _ = seed_graph()
    workload = graph.op("conv1").workload
    four = [conv_candidate(workload, knobs={"unroll": n}) for n in range(1, 6)]
    shape = {b.name: b.shape for b in workload.buffers}
    two = Candidate.make(
        {
            "X": L.block(shape["X"], 1, 2),
            "W": oihw4i4o(shape["W"]),
            "Y": L.block(shape["Y"], 1, 2),
        }
    )
    plain = Candidate.make({n: identity(s) for n, s in shape.items()})
    with open_database(tmp_path / "s.db") as db:
        for k, candidate in enumerate(four):
            db.add(_record(workload, candidate, (1 + 0.1 * k) * 1e-3, 0.0))
        db.add(_record(workload, two, 2e-3, 0.0))
        db.add(_record(workload, plain, 3e-3, 0.0))
        options = lookup_options(db, workload.key, DEVICE.key)
    assert [o.candidate for o in options] == [four[0], two, plain]
    assert [o.compute_s for o in options] == [1e-3, 2e-3, 3e-3]


def test_a_kernel_timed_cold_and_warm_is_priced_at_the_mean_and_weighed_by_it(
    tmp_path: Path,
) -> None:
    """Two kernels of a convolution whose weights outgrow the cache, timed
    cold alike (memory bounds both) but one far faster warm: the planner
    prices each at the mean of its two times and runs the one that computes
    faster, as ResNet-18's last convolutions ran in their plan."""
    from laytune.records import model_seconds

    graph, _ = seed_graph()
    workload = graph.op("conv1").workload
    slow, fast = (conv_candidate(workload, knobs={"unroll": n}) for n in (1, 2))
    with open_database(tmp_path / "c.db") as db:
        for candidate, cold, warm in ((slow, 1.00e-3, 0.90e-3), (fast, 1.01e-3, 0.61e-3)):
            record = _record(workload, candidate, cold, 0.0)
            record.result["launches"] = {"pack": 0, "compute": 9, "unpack": 0, "flush": 3}
            record.result["warm_value_s"] = warm
            db.add(record)
        assert db.best(workload.key, DEVICE.key).candidate == slow  # by the cold times
        assert [model_seconds(r) for r in db.records(workload=workload.key)] == [
            pytest.approx(0.95e-3),
            pytest.approx(0.81e-3),
        ]
        plan = plan_layouts(graph, db, DEVICE, critical=["conv1"])
    assert plan.placement("conv1").candidate == fast
    assert {p.label: p for p in plan.predictions}["conv1"].seconds == pytest.approx(0.81e-3)
    # a record timed warm only is priced at its one time
    warm_only = _record(workload, slow, 1e-3, 0.0)
    warm_only.result["warm_value_s"] = 0.5e-3
    assert model_seconds(warm_only) == 1e-3
