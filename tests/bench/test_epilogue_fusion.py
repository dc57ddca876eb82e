"""bench.epilogue_fusion's report, on fabricated times, and its graph."""

from __future__ import annotations

from bench.epilogue_fusion import network, report
from laytune.plan import plan_layouts


def test_the_report_states_the_ratios_of_medians_and_minima() -> None:
    times = {
        "unfused": {"device": [3e-3, 6e-3, 9e-3], "conv": [2e-3], "rest": [5e-4], "kernels": [5]},
        "fused": {"device": [2e-3, 4e-3, 8e-3], "conv": [2e-3], "rest": [1e-4], "kernels": [3]},
    }
    text = report(times, {"fused": "the plan"}, "load average 1.0", "a device")
    assert "| unfused | 5 | 6.000 | 3.000 | 2.000 | 0.500 |" in text
    assert "| fused | 3 | 4.000 | 2.000 | 2.000 | 0.100 |" in text
    assert "Unfused / fused: 1.50x by the medians, 1.50x by the minima." in text


def test_the_graph_fuses_its_bias_and_relu_into_the_conv() -> None:
    graph, source = network()
    plan = plan_layouts(graph, source, fuse=True)
    assert [op.name for op in plan.graph.ops] == ["conv"]
    assert plan.fusions[0].absorbed == ("bias", "relu")
