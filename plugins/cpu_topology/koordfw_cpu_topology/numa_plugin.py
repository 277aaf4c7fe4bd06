"""The NUMA topology policy hooks of the cpu_topology scheduler plugin (mixed into CPUTopologyPlugin).

For a pod on a node whose effective policy (see :mod:`.numa`) is not None, the cpu and memory hints of
the node's NUMA nodes are merged with the topology-manager merge (:mod:`.numa_policy`); Restricted and
SingleNUMANode refuse a node whose merged hint is not preferred, with Koordinator's reasons. Score prefers
nodes whose best hint is narrow (``100 // NUMA nodes in the hint``). At reserve the pod's cpu and memory
are split over the hint's NUMA nodes (a bound pod's cpuset is taken from those NUMA nodes only), and
pre_bind records the split as ``numaNodeResources`` in ``scheduling.koordinator.sh/resource-status``.
"""

from __future__ import annotations

from typing import Any

import attrs

from koordfw import BoundedCache, IdentityKey, Status
from koordfw.extension import ANNOTATION_RESOURCE_STATUS, LABEL_NUMA_TOPOLOGY_POLICY
from koordfw.inputs import loads_json

from .numa import (
    ERR_NO_NUMA_RESOURCES,
    ERR_NOT_MATCH_NUMA_TOPOLOGY,
    NUMATopologySpec,
    available,
    node_policy,
    numa_zones,
    parse_numa_node_resources,
    resource_hints,
    split_over,
)
from .numa_policy import (
    EXCLUSIVE_REQUIRED,
    POLICY_NONE,
    POLICY_RESTRICTED,
    POLICY_SINGLE_NUMA_NODE,
    NUMATopologyHint,
    ProviderHints,
    mask_bits,
    merge,
    merge_topology_policy,
)

NUMA_RESOURCES = ("cpu", "memory")


@attrs.define
class NodeNUMA:
    """One node's NUMA view for one pod: its effective policy, NUMA nodes, free amounts, and an error."""

    policy: str = POLICY_NONE
    total: dict[int, dict[str, int]] = attrs.field(factory=dict)
    avail: dict[int, dict[str, int]] = attrs.field(factory=dict)
    error: str = ""


def _frozen_hints(hints: ProviderHints) -> tuple[Any, ...] | None:
    if hints is None:
        return None
    return tuple(sorted((k, None if v is None else tuple(v)) for k, v in hints.items()))


def _frozen(per_numa: dict[int, dict[str, int]]) -> tuple[tuple[int, tuple[tuple[str, int], ...]], ...]:
    return tuple((n, tuple(sorted(res.items()))) for n, res in sorted(per_numa.items()))


class NUMAPolicyMixin:
    """State and helpers; the host class provides ``_nrt`` and ``_node_state``."""

    def _numa_init(self) -> None:
        #: resource-status text -> its numaNodeResources ({} when none or unreadable)
        self._numa_status: BoundedCache[str, dict[int, dict[str, int]]] = BoundedCache(65536)
        #: NUMA resources held by reserved, not yet bound pods: node name -> pod uid -> split
        self._numa_reserved: dict[str, dict[str, dict[int, dict[str, int]]]] = {}
        #: the nodes' NUMA views (see _node_numa) and, per node, a counter bumped when its reservations change
        self._numa_nodes_memo: BoundedCache[tuple[Any, ...], NodeNUMA] = BoundedCache(65536)
        self._numa_res_gen: dict[str, int] = {}
        #: (policy, exclusive, request, totals, free amounts) -> (merged hint, admit, reasons)
        self._numa_hints_memo: BoundedCache[tuple[Any, ...], tuple[NUMATopologyHint, bool, tuple[str, ...]]] = \
            BoundedCache(65536)

    def _used_numa(self, text: str) -> dict[int, dict[str, int]]:
        hit = self._numa_status.get(text)
        if hit is None:
            try:
                obj = loads_json(text)
                hit = parse_numa_node_resources(obj) if isinstance(obj, dict) else {}
            except ValueError:
                hit = {}  # cpu_topology's own parse of the cpuset logs the unreadable annotation
            self._numa_status[text] = hit
        return hit

    def _any_numa_node(self, cluster: Any) -> bool:
        if cluster.label_mask(LABEL_NUMA_TOPOLOGY_POLICY).any():
            return True
        return any((o or {}).get("topologyPolicies") for o in cluster.objects_of("NodeResourceTopology").values())

    def _node_numa(self, cluster: Any, view: Any, spec: NUMATopologySpec, st: Any) -> NodeNUMA:
        """The node's NUMA view for the pod: memoised by the node's version (its pods), the reservations held
        on it, its NodeResourceTopology and the pod's policy and bind request (not for a pod holding a
        reservation on the node itself: its own share is left out)."""
        nrt, _ = self._nrt(cluster, view.name)  # type: ignore[attr-defined]
        held = self._numa_reserved.get(view.name, {})
        if st.uid in held:
            return self._node_numa_now(cluster, view, spec, st, nrt)
        key = (view.name, view.version, self._numa_res_gen.get(view.name, 0), IdentityKey(nrt), spec.policy,
               bool(st.request_bind), IdentityKey(cluster))
        hit = self._numa_nodes_memo.get(key)
        if hit is None:
            hit = self._numa_nodes_memo[key] = self._node_numa_now(cluster, view, spec, st, nrt)
        return hit

    def _node_numa_now(self, cluster: Any, view: Any, spec: NUMATopologySpec, st: Any, nrt: Any) -> NodeNUMA:
        merged = merge_topology_policy(node_policy(view.node.labels.get(LABEL_NUMA_TOPOLOGY_POLICY, ""), nrt),
                                       spec.policy)
        if merged is None:
            return NodeNUMA(error=ERR_NOT_MATCH_NUMA_TOPOLOGY)
        out = NodeNUMA(policy=merged)
        if merged == POLICY_NONE:
            return out
        try:
            out.total = numa_zones(nrt, f"NodeResourceTopology {view.name}")
        except ValueError as e:
            out.error = str(e)
            return out
        if not out.total:
            out.error = ERR_NO_NUMA_RESOURCES
            return out
        used = [self._used_numa(p.annotations[ANNOTATION_RESOURCE_STATUS]) for p in cluster.pods_on(view.name)
                if ANNOTATION_RESOURCE_STATUS in p.annotations and p.uid != st.uid]
        used += [u for uid, u in self._numa_reserved.get(view.name, {}).items() if uid != st.uid]
        out.avail = available(out.total, used)
        if st.request_bind:  # trimNUMANodeResources: a bound pod's cpu is whole free CPUs of the NUMA node
            ns = self._node_state(view)  # type: ignore[attr-defined]
            if ns is not None and ns.topology is not None:
                taken = set(ns.allocation.cpus) | set(ns.reserved)
                for n, res in out.avail.items():
                    # CPUInfo.node is socket << 16 | NUMA id (topology.py keeps node ids per socket unique)
                    free = sum(1 for c, i in ns.topology.details.items() if i.node & 0xFFFF == n and c not in taken)
                    res["cpu"] = min(res.get("cpu", 0), free * 1000)
        return out

    def _numa_hint(self, nn: NodeNUMA, requests: dict[str, int], spec: NUMATopologySpec,
                   extra: tuple[ProviderHints, ...] = ()) -> tuple[NUMATopologyHint, bool, list[str]]:
        """The merged hint on the node: cpu and memory from this plugin's hints, ``extra`` from the other
        providers (:data:`.api.NUMA_HINT_PROVIDERS`: gpu_share's GPUs). A function of the policy, the NUMA
        totals and free amounts, the request and the providers' hints only: memoised, since the nodes of a
        fleet share a few shapes and most of them the same free amounts."""
        req = tuple(requests.get(k, 0) for k in NUMA_RESOURCES)
        exclusive = spec.exclusive or (EXCLUSIVE_REQUIRED if spec.policy else "")
        key = (nn.policy, exclusive, req, _frozen(nn.total), _frozen(nn.avail), tuple(_frozen_hints(e) for e in extra))
        hit = self._numa_hints_memo.get(key)
        if hit is None:
            hints = resource_hints(dict(zip(NUMA_RESOURCES, req, strict=True)), nn.total, nn.avail, nn.policy)
            hint, admit, reasons = merge(nn.policy, list(nn.total), [hints, *extra], exclusive if nn.policy in (
                POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE) else "", ())
            hit = self._numa_hints_memo[key] = (hint, admit, tuple(reasons))
        return hit[0], hit[1], list(hit[2])

    @staticmethod
    def _provider_hints(view: Any, st: Any) -> tuple[tuple[ProviderHints, ...], str | None]:
        """The other providers' hints for the pod on ``view`` (in provider-name order), or a refusal."""
        out: list[ProviderHints] = []
        for name in sorted(st.numa_providers):
            hints, refusal = st.numa_providers[name](view)
            if refusal:
                return (), refusal
            out.append(hints)
        return tuple(out), None

    def numa_filter(self, cluster: Any, views: list[Any], st: Any) -> dict[str, Status]:
        """Refusals (and each node's best hint in ``st.numa_hints``) for nodes under a policy."""
        out: dict[str, Status] = {}
        for view in views:
            nn = self._node_numa(cluster, view, st.numa_spec, st)
            if nn.error == ERR_NOT_MATCH_NUMA_TOPOLOGY:
                out[view.name] = Status.unresolvable(nn.error)
                continue
            if nn.policy == POLICY_NONE:
                continue
            strict = nn.policy in (POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE)
            if nn.error:
                if strict:
                    out[view.name] = Status.unresolvable(nn.error)
                continue
            extra, refusal = self._provider_hints(view, st) if st.numa_providers else ((), None)
            if refusal:
                out[view.name] = Status.unschedulable(refusal)
                continue
            hint, admit, reasons = self._numa_hint(nn, st.requests, st.numa_spec, extra)
            if strict and not admit:
                out[view.name] = Status.unschedulable(*reasons) if reasons else Status.unschedulable(
                    ERR_NO_NUMA_RESOURCES)
                continue
            st.numa_hints[view.name] = hint
        return out

    def numa_reserve(self, cluster: Any, view: Any, st: Any) -> Status | None:
        """Choose the NUMA nodes on the chosen node and hold the pod's cpu and memory on them."""
        st.numa_split = None
        st.numa_mask = None
        nn = self._node_numa(cluster, view, st.numa_spec, st)
        if nn.error == ERR_NOT_MATCH_NUMA_TOPOLOGY:
            return Status.unresolvable(nn.error)
        if nn.policy == POLICY_NONE or nn.error:
            return Status.unresolvable(nn.error) if nn.error and nn.policy in (
                POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE) else None
        extra, refusal = self._provider_hints(view, st) if st.numa_providers else ((), None)
        if refusal:
            return Status.unschedulable(refusal)
        hint, admit, reasons = self._numa_hint(nn, st.requests, st.numa_spec, extra)
        if not admit:
            return Status.unschedulable(*(reasons or [ERR_NO_NUMA_RESOURCES]))
        nodes = hint.bits() if hint.affinity else list(nn.total)
        split = split_over({k: st.requests.get(k, 0) for k in NUMA_RESOURCES}, nn.avail, nodes)
        if split is None:
            if nn.policy in (POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE):
                return Status.unschedulable(ERR_NO_NUMA_RESOURCES)
            return None
        st.numa_mask = frozenset(nodes)
        st.numa_split = split
        self._numa_reserved.setdefault(view.name, {})[st.uid] = split
        self._numa_res_gen[view.name] = self._numa_res_gen.get(view.name, 0) + 1
        return None

    def numa_unreserve(self, node: str, uid: str) -> None:
        held = self._numa_reserved.get(node)
        if held is not None:
            held.pop(uid, None)
            self._numa_res_gen[node] = self._numa_res_gen.get(node, 0) + 1
            if not held:
                del self._numa_reserved[node]

    def numa_forget_bound(self, cluster: Any) -> None:
        """Drop reservations of pods that now carry their resource-status (or left their node)."""
        for name in list(self._numa_reserved):
            on = {p.uid: p for p in cluster.pods_on(name)} if cluster.node(name) is not None else {}
            for uid in list(self._numa_reserved[name]):
                p = on.get(uid)
                if p is None or ANNOTATION_RESOURCE_STATUS in p.annotations:
                    self.numa_unreserve(name, uid)

    @staticmethod
    def numa_score(st: Any, name: str) -> int | None:
        hint = st.numa_hints.get(name)
        if hint is None:
            return None
        width = len(mask_bits(hint.affinity)) if hint.affinity else 0
        return 100 // width if width else 100
