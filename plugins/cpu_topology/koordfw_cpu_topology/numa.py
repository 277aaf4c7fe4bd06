"""NUMA topology policy on a node: the per-NUMA resources, the cpu/memory hints, the split of a pod.

Koordinator's ``nodenumaresource`` side of the topology manager: the node's NUMA nodes and their
allocatable come from the NodeResourceTopology ``zones`` (``type: Node``, ``name: node-<id>``,
``resources[].allocatable``); what is used on a NUMA node is the sum of the ``numaNodeResources`` of the
pods' ``scheduling.koordinator.sh/resource-status`` (and of pods reserved but not yet bound). The policy
is the node's ``node.koordinator.sh/numa-topology-policy`` label, else the NRT's ``topologyPolicies``
(the kubelet TopologyManager's), merged with the pod's ``scheduling.koordinator.sh/numa-topology-spec``
``numaTopologyPolicy`` (the pod's wins; two different ones: ``node(s) NUMA Topology policy not match``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from koordfw import canonical, format_quantity
from koordfw.extension import ANNOTATION_NUMA_TOPOLOGY_SPEC
from koordfw.inputs import loads_json

from .numa_policy import (
    EXCLUSIVE_PREFERRED,
    EXCLUSIVE_REQUIRED,
    POLICIES,
    POLICY_BEST_EFFORT,
    POLICY_NONE,
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    NUMATopologyHint,
    iterate_masks,
    mask_bits,
)

ERR_NOT_MATCH_NUMA_TOPOLOGY = "node(s) NUMA Topology policy not match"
ERR_NO_NUMA_RESOURCES = "insufficient resources on NUMA Node"

#: NRT ``topologyPolicies`` (kubelet TopologyManager policy names) -> Koordinator's policy
_NRT_POLICIES = {"BestEffort": POLICY_BEST_EFFORT, "Restricted": POLICY_RESTRICTED,
                 "SingleNUMANodePodLevel": POLICY_SINGLE_NUMA_NODE}
_EXCLUSIVES = ("", EXCLUSIVE_PREFERRED, EXCLUSIVE_REQUIRED)


@attrs.frozen
class NUMATopologySpec:
    policy: str = POLICY_NONE
    exclusive: str = ""


def parse_numa_topology_spec(annotations: Mapping[str, str]) -> NUMATopologySpec:
    """The pod's ``numa-topology-spec``; ValueError names the field."""
    text = annotations.get(ANNOTATION_NUMA_TOPOLOGY_SPEC)
    if not text:
        return NUMATopologySpec()
    obj = loads_json(text)
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    policy = obj.get("numaTopologyPolicy") or ""
    if policy not in POLICIES:
        raise ValueError(f"numaTopologyPolicy: unknown value {policy!r} "
                         f"(allowed: {', '.join(p for p in POLICIES if p)})")
    exclusive = obj.get("singleNUMANodeExclusive") or ""
    if exclusive not in _EXCLUSIVES:
        raise ValueError(f"singleNUMANodeExclusive: unknown value {exclusive!r} (allowed: Preferred, Required)")
    return NUMATopologySpec(policy, exclusive)


def node_policy(label: str, nrt: Mapping[str, Any] | None) -> str:
    """``getNUMATopologyPolicy``: the node label, else the NRT's kubelet topology-manager policy."""
    if label:
        return label
    for p in (nrt or {}).get("topologyPolicies") or []:
        if p in _NRT_POLICIES:
            return _NRT_POLICIES[p]
    return POLICY_NONE


def numa_zones(nrt: Mapping[str, Any] | None, where: str) -> dict[int, dict[str, int]]:
    """``extractNUMANodeResources``: NUMA id -> allocatable (canonical units) from the NRT zones."""
    out: dict[int, dict[str, int]] = {}
    for i, zone in enumerate((nrt or {}).get("zones") or []):
        if not isinstance(zone, dict) or zone.get("type") != "Node":
            continue
        name = str(zone.get("name") or "")
        head, sep, tail = name.partition("node-")
        if head or not sep or not tail.isdigit():
            continue
        res: dict[str, int] = {}
        for r in zone.get("resources") or []:
            if isinstance(r, dict) and r.get("name"):
                try:
                    res[str(r["name"])] = canonical(str(r["name"]), r.get("allocatable", 0))
                except ValueError as e:
                    raise ValueError(f"{where}: zones[{i}] {name}: resource {r['name']}: {e}") from None
        out[int(tail)] = res
    return dict(sorted(out.items()))


def parse_numa_node_resources(status: Mapping[str, Any]) -> dict[int, dict[str, int]]:
    """A resource-status's ``numaNodeResources`` as NUMA id -> resources."""
    out: dict[int, dict[str, int]] = {}
    for e in status.get("numaNodeResources") or []:
        if not isinstance(e, dict) or not isinstance(e.get("node"), int):
            raise ValueError("numaNodeResources: each entry needs an integer node")
        res = out.setdefault(int(e["node"]), {})
        for k, v in (e.get("resources") or {}).items():
            res[k] = res.get(k, 0) + canonical(k, v)
    return out


def format_numa_node_resources(split: Mapping[int, Mapping[str, int]]) -> list[dict[str, Any]]:
    return [{"node": n, "resources": {k: format_quantity(k, v) for k, v in sorted(res.items()) if v}}
            for n, res in sorted(split.items())]


def available(total: Mapping[int, Mapping[str, int]], used: Iterable[Mapping[int, Mapping[str, int]]]
              ) -> dict[int, dict[str, int]]:
    avail = {n: dict(r) for n, r in total.items()}
    for u in used:
        for n, res in u.items():
            if n in avail:
                for k, v in res.items():
                    avail[n][k] = avail[n].get(k, 0) - v
    return avail


def resource_hints(requests: Mapping[str, int], total: Mapping[int, Mapping[str, int]],
                   avail: Mapping[int, Mapping[str, int]], policy: str) -> dict[str, list[NUMATopologyHint]]:
    """``generateResourceHints``: for each requested resource the NUMA nodes report, every set of NUMA
    nodes whose free amounts hold the whole request; the narrowest sets are preferred (all of them under
    Restricted); a resource no set can hold gets an empty list (the merge's "Unsatisfied NUMA")."""
    nodes = list(total)
    names = {k for r in total.values() for k in r}
    wanted = [k for k, v in requests.items() if v > 0 and k in names]
    lacking = {k: {n for n in nodes if avail.get(n, {}).get(k, 0) <= 0} for k in wanted}
    hints: dict[str, list[NUMATopologyHint]] = {k: [] for k in wanted}
    widths: dict[str, int] = {k: len(nodes) for k in wanted}
    for mask in iterate_masks(nodes):
        bits = mask_bits(mask)
        if any(lacking[k].intersection(bits) for k in wanted):
            continue
        if any(sum(avail.get(n, {}).get(k, 0) for n in bits) < requests[k] for k in wanted):
            continue
        for k in wanted:
            widths[k] = min(widths[k], len(bits))
            hints[k].append(NUMATopologyHint(mask))
    return {k: [attrs.evolve(h, preferred=len(h.bits()) == widths[k] or policy == POLICY_RESTRICTED) for h in hs]
            for k, hs in hints.items()}


def split_over(requests: Mapping[str, int], avail: Mapping[int, Mapping[str, int]],
               numa_nodes: Sequence[int]) -> dict[int, dict[str, int]] | None:
    """Spread each requested amount evenly over ``numa_nodes`` within their free amounts (Koordinator's
    tryBestToDistributeEvenly); ``None`` when they cannot hold it."""
    out: dict[int, dict[str, int]] = {n: {} for n in numa_nodes}
    for k, want in requests.items():
        if want <= 0 or not any(k in avail.get(n, {}) for n in numa_nodes):
            continue
        order = sorted(numa_nodes, key=lambda n: (avail.get(n, {}).get(k, 0), n))
        left = want
        for i, n in enumerate(order):
            share = -(-left // (len(order) - i))
            take = max(0, min(share, avail.get(n, {}).get(k, 0)))
            out[n][k] = take
            left -= take
        if left > 0:
            return None
    return {n: r for n, r in out.items() if any(r.values())}
