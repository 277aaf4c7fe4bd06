"""Shared helpers of the cpu_topology tests (a uniquely named module, not a conftest)."""

import json

from koordfw_cpu_topology.topology import detail_for_test, topology_annotation

TOPO = "node.koordinator.sh/cpu-topology"
SPEC = "scheduling.koordinator.sh/resource-spec"
STATUS = "scheduling.koordinator.sh/resource-status"


def topo_ann(*shape):
    return {TOPO: topology_annotation(detail_for_test(*shape))}


def lsr(builder, name, cpu, *, qos="LSR", spec=None, node=None, status=None, priority=9500, memory="1Gi"):
    anns = {}
    if spec is not None:
        anns[SPEC] = json.dumps(spec)
    if status is not None:
        anns[STATUS] = json.dumps({"cpuset": status})
    return builder.pod(name, requests={"cpu": cpu, "memory": memory}, limits={"cpu": cpu, "memory": memory},
                       labels={"koordinator.sh/qosClass": qos}, annotations=anns, priority=priority, node=node)


def cpuset_of(result, name, namespace="default"):
    for p in result.to_dict()["pods"]:
        if p["name"] == name and p["namespace"] == namespace:
            raw = p["annotations"].get(STATUS)
            return json.loads(raw)["cpuset"] if raw else None
    raise KeyError(name)


def reason_of(result, name):
    for p in result.to_dict()["pods"]:
        if p["name"] == name:
            return p["reason"]
    raise KeyError(name)

