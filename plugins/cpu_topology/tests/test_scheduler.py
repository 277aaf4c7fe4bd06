"""The scheduler hooks through the embedded kernel: which node and which exact CPUs."""

import json

import anyio
import numpy as np
import pytest
from cpu_topology_helpers import SPEC, STATUS, TOPO, cpuset_of, lsr, reason_of, topo_ann
from koordfw_cpu_topology.plugin import parse_resource_spec

from koordfw.engines.embedded import EmbeddedEngine, build_registry
from koordfw.inputs import make_pod
from koordfw.testing import ClusterBuilder, schedule

ONLY = ["cpu_topology"]


@pytest.fixture
def builder():
    return ClusterBuilder()


def test_lsr_pods_get_whole_cores_in_order(builder):
    builder.node("n1", cpu="16", memory="64Gi", annotations=topo_ann(2, 1, 4, 2))
    for i, cpu in enumerate(["4", "2", "8"]):
        lsr(builder, f"p{i}", cpu)
    r = schedule(builder, only=ONLY)
    # LeastAllocated NUMA strategy (default): the first pod lands on NUMA 0 (tie → lower id), the second on
    # the emptier NUMA 1; the third (8) fits no single NUMA node or socket, so whole sockets are taken
    # largest first (10-15), then whole cores from the remaining smallest list (4-5).
    assert [cpuset_of(r, f"p{i}") for i in range(3)] == ["0-3", "8-9", "4-5,10-15"]


def test_most_allocated_node_label_packs(builder):
    builder.node("n1", cpu="16", memory="64Gi",
                 labels={"node.koordinator.sh/numa-allocate-strategy": "MostAllocated"},
                 annotations=topo_ann(2, 1, 4, 2))
    for i in range(3):
        lsr(builder, f"p{i}", "2")
    r = schedule(builder, only=ONLY)
    assert [cpuset_of(r, f"p{i}") for i in range(3)] == ["0-1", "2-3", "4-5"]


def test_least_allocated_spreads_over_numa(builder):
    builder.node("n1", cpu="32", memory="64Gi", annotations=topo_ann(2, 2, 4, 2))
    for i in range(4):
        lsr(builder, f"p{i}", "2")
    r = schedule(builder, only=ONLY)
    assert [cpuset_of(r, f"p{i}") for i in range(4)] == ["0-1", "16-17", "8-9", "24-25"]


def test_spread_by_pcpus_and_resource_spec_written_back(builder):
    builder.node("n1", cpu="8", memory="64Gi", annotations=topo_ann(1, 1, 4, 2))
    lsr(builder, "spread", "4", spec={"preferredCPUBindPolicy": "SpreadByPCPUs"})
    lsr(builder, "plain", "2")
    r = schedule(builder, only=ONLY)
    assert cpuset_of(r, "spread") == "0,2,4,6"
    # FullPCPUs default: no whole core is free → spreading fallback picks the odd threads
    assert cpuset_of(r, "plain") == "1,3"
    anns = {p["name"]: p["annotations"] for p in r.to_dict()["pods"]}
    assert SPEC not in anns["spread"]
    assert json.loads(anns["plain"][SPEC]) == {"preferredCPUBindPolicy": "FullPCPUs"}


def test_existing_pods_cpus_are_never_given_twice(builder):
    builder.node("n1", cpu="12", memory="64Gi", annotations=topo_ann(1, 1, 4, 2))
    lsr(builder, "old", "4", node="n1", status="0-3")
    lsr(builder, "new", "4")
    lsr(builder, "late", "2")
    r = schedule(builder, only=ONLY)
    assert cpuset_of(r, "new") == "4-7"
    assert r.placements()["default/late"] is None
    assert "not enough cpus" in reason_of(r, "late")


def test_exclusive_pcpu_level_of_existing_pod(builder):
    builder.node("n1", cpu="16", memory="64Gi", annotations=topo_ann(2, 1, 4, 2))
    lsr(builder, "holder", "2", node="n1", status="0,2", spec={"preferredCPUExclusivePolicy": "PCPULevel"})
    lsr(builder, "p", "4", spec={"preferredCPUBindPolicy": "SpreadByPCPUs", "preferredCPUExclusivePolicy": "PCPULevel"})
    r = schedule(builder, only=ONLY)
    assert cpuset_of(r, "p") == "8,10,12,14"


def test_reserved_cpus_and_nrt_topology(builder):
    builder.node("n1", cpu="8", memory="64Gi",
                 annotations={"node.koordinator.sh/reservation": json.dumps({"reservedCPUs": "0-1"})})
    builder.obj({"apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
                 "metadata": {"name": "n1", "annotations": topo_ann(1, 1, 4, 2)}})
    lsr(builder, "p", "2")
    r = schedule(builder, only=ONLY)
    assert cpuset_of(r, "p") == "2-3"


def test_node_without_topology_rejects_binding_pods_only(builder):
    builder.node("bare", cpu="8", memory="64Gi")
    lsr(builder, "lsr", "2")
    builder.pod("ls", requests={"cpu": "2", "memory": "1Gi"})
    r = schedule(builder, only=ONLY)
    assert r.placements() == {"default/lsr": None, "default/ls": "bare"}
    assert "invalid CPU Topology" in reason_of(r, "lsr")
    assert cpuset_of(r, "ls") is None


@pytest.mark.parametrize("labels,spec,cpu,want", [
    ({"node.koordinator.sh/cpu-bind-policy": "FullPCPUsOnly"}, {"requiredCPUBindPolicy": "SpreadByPCPUs"}, "2",
     "cpu bind policy conflicts"),
    ({"node.koordinator.sh/cpu-bind-policy": "FullPCPUsOnly"}, None, "3", "not multiple cpus per core"),
    ({}, {"requiredCPUBindPolicy": "FullPCPUs"}, "3", "not multiple cpus per core"),
    ({}, None, "1500m", "the requested CPUs must be integer"),
    ({}, {"preferredCPUBindPolicy": "Sometimes"}, "2", "preferredCPUBindPolicy: unknown value 'Sometimes'"),
    ({"node.koordinator.sh/cpu-bind-policy": "Always"}, None, "2", "is not one of None, FullPCPUsOnly"),
])
def test_rejections_name_the_reason(builder, labels, spec, cpu, want):
    builder.node("n1", cpu="16", memory="64Gi", labels=labels, annotations=topo_ann(2, 1, 4, 2))
    lsr(builder, "p", cpu, spec=spec)
    r = schedule(builder, only=ONLY)
    assert r.placements()["default/p"] is None
    assert want in reason_of(r, "p")


def test_malformed_topology_names_node_and_field(builder):
    builder.node("n1", cpu="8", memory="64Gi", annotations={TOPO: '{"detail":[{"id":0,"core":"x"}]}'})
    lsr(builder, "p", "2")
    r = schedule(builder, only=ONLY)
    assert "Node n1: node.koordinator.sh/cpu-topology: detail[0].core" in reason_of(r, "p")


def test_node_forced_policy_binds_ls_pods(builder):
    builder.node("n1", cpu="8", memory="64Gi", labels={"node.koordinator.sh/cpu-bind-policy": "SpreadByPCPUs"},
                 annotations=topo_ann(1, 1, 4, 2))
    builder.pod("ls", requests={"cpu": "2", "memory": "1Gi"}, labels={"koordinator.sh/qosClass": "LS"})
    builder.pod("frac", requests={"cpu": "500m", "memory": "1Gi"}, labels={"koordinator.sh/qosClass": "LS"})
    r = schedule(builder, only=ONLY)
    assert cpuset_of(r, "ls") == "0,2"
    assert json.loads(r.to_dict()["pods"][0]["annotations"][SPEC]) == {"requiredCPUBindPolicy": "SpreadByPCPUs"}
    assert "the requested CPUs must be integer" in reason_of(r, "frac")


def test_score_prefers_node_by_bound_cpus(builder):
    builder.node("busy", cpu="16", memory="64Gi", annotations=topo_ann(2, 1, 4, 2))
    builder.node("idle", cpu="16", memory="64Gi", annotations=topo_ann(2, 1, 4, 2))
    lsr(builder, "old", "4", node="busy", status="0-3")
    lsr(builder, "p", "2")
    r = schedule(builder, only=ONLY, profile={"pluginConfig": {"node_resources_fit": {}}})
    assert r.placements()["default/p"] == "idle"
    r = schedule(builder, only=ONLY, profile={"pluginConfig": {"cpu_topology": {"scoringStrategy": {"type": "MostAllocated"}},
                                                                "node_resources_fit": {"scoringStrategy": "MostAllocated"}}})
    assert r.placements()["default/p"] == "busy"


def test_not_eligible_pods_are_untouched():
    """Same placements with and without the plugin for pods that do not ask for binding."""
    rng = np.random.default_rng(7)
    b = ClusterBuilder()
    for i in range(6):
        b.node(f"n{i}", cpu="16", memory="64Gi", annotations=topo_ann(2, 1, 4, 2) if i % 2 else None)
    for i in range(40):
        qos = ["LS", "BE", "LSR"][int(rng.integers(3))]
        labels = {"koordinator.sh/qosClass": qos}
        prio = 9500 if qos != "BE" else 5500
        if qos == "LSR":  # LSR but not koord-prod → no binding
            prio = 7500
        b.pod(f"p{i}", requests={"cpu": f"{int(rng.integers(1, 4)) * 500}m", "memory": "1Gi"}, labels=labels,
              priority=prio)
    with_plugin = schedule(b, only=ONLY, seed=3)
    without = schedule(b, only=[], seed=3)
    assert with_plugin.placements() == without.placements()
    assert all(STATUS not in p["annotations"] for p in with_plugin.to_dict()["pods"])


def test_same_input_same_cpusets():
    def run():
        b = ClusterBuilder()
        for i in range(3):
            b.node(f"n{i}", cpu="32", memory="64Gi", annotations=topo_ann(2, 2, 4, 2))
        for i in range(12):
            lsr(b, f"p{i}", str(2 * (1 + i % 3)))
        r = schedule(b, only=ONLY, seed=11)
        return [(p["name"], p["node"], p["annotations"].get(STATUS)) for p in r.to_dict()["pods"]]
    assert run() == run()


def test_unreserve_and_pod_leaving_free_cpus():
    async def main():
        b = ClusterBuilder()
        b.node("n1", cpu="8", memory="64Gi", annotations=topo_ann(1, 1, 4, 2))
        m = b.build()
        registry = build_registry(only={"cpu_topology"})
        engine = EmbeddedEngine(registry, m.to_cluster(), start_time=0.0)
        s = engine.scheduler
        await s.startup()
        first = make_pod("a", requests={"cpu": "8", "memory": "1Gi"}, labels={"koordinator.sh/qosClass": "LSR"},
                         priority=9500)
        await s.add_pod(first)
        await engine.drive()
        assert json.loads(engine.cluster.pod(first.uid).annotations[STATUS]) == {"cpuset": "0-7"}
        second = make_pod("b", requests={"cpu": "2", "memory": "1Gi"}, labels={"koordinator.sh/qosClass": "LSR"},
                          priority=9500)
        await s.add_pod(second)
        await engine.drive()
        assert engine.cluster.pod(second.uid).node_name is None
        await s.remove_pod(first.uid)
        await engine.drive()
        return engine.cluster.pod(second.uid)
    pod = anyio.run(main)
    assert pod.node_name == "n1"
    assert json.loads(pod.annotations[STATUS]) == {"cpuset": "0-1"}


def test_reserve_failure_runs_unreserve_and_releases():
    """A later reserve plugin fails: our reservation is released and the CPUs are free again."""
    class FailReserve:
        from koordfw import hookimpl as _h

        @_h
        def reserve(self, pod):
            return "no" if pod.name == "victim" else None

    b = ClusterBuilder()
    b.node("n1", cpu="8", memory="64Gi", annotations=topo_ann(1, 1, 4, 2))
    lsr(b, "victim", "8")
    lsr(b, "next", "8")
    r = schedule(b, only=ONLY, plugins={"fail_reserve": FailReserve()})
    assert r.placements()["default/next"] == "n1"
    assert cpuset_of(r, "next") == "0-7"


def test_parse_resource_spec_errors():
    assert parse_resource_spec(None) == {}
    with pytest.raises(ValueError, match="invalid JSON"):
        parse_resource_spec("{")
    with pytest.raises(ValueError, match="requiredCPUBindPolicy"):
        parse_resource_spec('{"requiredCPUBindPolicy": "X"}')


def test_bad_plugin_args_are_rejected():
    from koordfw import ConfigError
    with pytest.raises(ConfigError, match="cpu_topology"):
        build_registry({"pluginConfig": {"cpu_topology": {"defaultCPUBindPolicy": "Nope"}}}, only={"cpu_topology"})
