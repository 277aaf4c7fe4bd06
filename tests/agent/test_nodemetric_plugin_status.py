"""The kernel's extension point for NodeMetric status fields: what a plugin's ``collect`` returns under
``NodeState.NODE_METRIC_STATUS`` is published by the NodeMetric reporter (the last round's), without
replacing the reporter's own fields; ``None`` leaves a field out; a non-mapping is ignored."""

from __future__ import annotations

from koordfw import NodeState
from koordfw.agent.nodemetric import OWN_STATUS_FIELDS, NodeMetricReporter, merge_plugin_status, plugin_status

NOW = 1_800_000_000.0


def ns(extra) -> NodeState:
    s = NodeState(name="n1", usage={"cpu": 1000, "memory": 2**30})
    if extra is not ...:
        s.metrics[NodeState.NODE_METRIC_STATUS] = extra
    return s


def test_the_last_rounds_fields_are_published():
    rep = NodeMetricReporter()
    rep.observe(ns({"prodReclaimableMetric": {"resource": {}}}), NOW - 1)
    rep.observe(ns({"prodReclaimableMetric": {"resource": {"resources": {"cpu": "1"}}}, "prodPeakMetric": None}), NOW)
    st = rep.status(NOW, [])
    assert st["prodReclaimableMetric"] == {"resource": {"resources": {"cpu": "1"}}}
    assert "prodPeakMetric" not in st
    rep.observe(ns(...), NOW + 1)  # a round without it: gone
    assert "prodReclaimableMetric" not in rep.status(NOW + 1, [])


def test_the_reporters_own_fields_win_and_junk_is_ignored():
    assert OWN_STATUS_FIELDS == {"updateTime", "nodeMetric", "podsMetric", "hostApplicationMetric"}
    out = merge_plugin_status({"updateTime": "t", "nodeMetric": {}}, {"updateTime": "x", "nodeMetric": 1, "y": 2})
    assert out == {"updateTime": "t", "nodeMetric": {}, "y": 2}
    assert plugin_status(ns(["not", "a", "mapping"])) == {} and plugin_status(ns(...)) == {}
