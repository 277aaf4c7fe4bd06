"""scheduling_gates: kube-scheduler's ``schedulinggates/scheduling_gates_test.go`` (a pod without gates is
enqueued; a pod with gates waits with the gates' names), through the embedded cluster."""

from __future__ import annotations

import pytest

from koordfw import ManifestError
from koordfw.inputs import make_pod
from koordfw.testing import ClusterBuilder, schedule


def test_gated_pods_wait_and_others_schedule():
    b = ClusterBuilder().node("n1")
    b.pod("gated", schedulingGates=[{"name": "example.com/foo"}, {"name": "example.com/bar"}])
    b.pod("free")
    r = schedule(b)
    assert r.placements() == {"default/gated": None, "default/free": "n1"}
    assert r.results[r.cluster.pod_by_key("default/gated").uid].reason == (
        "waiting for scheduling gates: [example.com/foo example.com/bar]")
    assert schedule(b, profile={"disable": ["scheduling_gates"]}).placements()["default/gated"] == "n1"


def test_a_gate_without_a_name_names_the_pod_and_field():
    with pytest.raises(ManifestError) as e:
        make_pod("p", schedulingGates=[{"nam": "x"}])
    assert e.value.obj == "Pod default/p" and e.value.field == "spec.schedulingGates[0].name"
