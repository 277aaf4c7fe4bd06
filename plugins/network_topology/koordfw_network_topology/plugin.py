"""network_topology: network-topology-aware placement of gang groups (Koordinator v1.7's
``ClusterNetworkTopology`` and ``gang.scheduling.koordinator.sh/network-topology-spec``).

Koordinator splits the feature in two: the framework keeps the topology tree (``frameworkext/
networktopology``) and coscheduling plans the gang group when its first member is scheduled (``FindOneNode``
then a ``PreFilterResult`` of the planned node for every next member). Here one plugin does both, next to
``gang`` (which it reads only through ``koordfw_gang.api``):

* ``pre_filter``: for a member of a gang group whose PodGroup (or pod) carries a network-topology-spec, plan
  the group's pending members once (:func:`koordfw_network_topology.solver.place`): the smallest domain
  that holds them all and a node for each member. The plan is kept for the group and used by each member
  once; a member tried again, or a member released (``unreserve``), makes the next one re-plan.
* ``filter``: with a ``MustGather`` rule, nodes outside the planned domain are rejected; when no domain of
  the MustGather layer holds the group, every node is, with Koordinator's ``no candidate topology nodes
  can accommodate job`` message naming each domain's offer slots.
* ``score``: every member is drawn to its planned node and, failing that, to the nodes sharing the most
  layers with it, so a ``PreferGather`` group lands in the tightest domain that fits when it can and
  spreads (instead of waiting) when it cannot.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs
import numpy as np
from koordfw_gang.api import (
    GangDefinitionError,
    gang_id_of,
    group_id_of,
    is_crd_gang,
    spec_from_pod,
    spec_from_pod_group,
)

from koordfw import (
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    Handle,
    ManifestError,
    NodeBatch,
    Pod,
    StateKey,
    Status,
    hookimpl,
)
from koordfw.extension import (
    ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC,
    CLUSTER_NETWORK_TOPOLOGY_NAME,
    KIND_CLUSTER_NETWORK_TOPOLOGY,
    TOPOLOGY_LAYER_NODE,
)
from koordfw.hints import ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE

from .solver import NetworkTopologySpec, Placement, SpecError, parse_spec, place, sort_by_index
from .tree import Topology, TreeNode, parse_layers

#: Koordinator's ErrNoClusterNetworkTopology
ERR_NO_CLUSTER_NETWORK_TOPOLOGY = "no cluster network topology"


@attrs.frozen
class CyclePlan:
    """What pre_filter decided for this member: the group's domain, its node, or the refusal."""

    group_id: str
    spec: NetworkTopologySpec
    refusal: Status | None = None
    #: bool per cluster node index: inside the planned domain (MustGather only)
    mask: np.ndarray | None = None
    domain: str = ""
    node: str = ""
    #: per cluster node index, an id per layer of its path (-1: not in the tree); for the score
    paths: np.ndarray | None = None


_PLAN: StateKey[CyclePlan] = StateKey("network_topology/plan")


@attrs.define(eq=False)
class GroupPlan:
    placement: Placement
    used: set[str] = attrs.field(factory=set)


class NetworkTopology:
    """The plugin: the topology tree (rebuilt when the nodes or the ClusterNetworkTopology change) and
    the current plan of each gang group."""

    def __init__(self) -> None:
        self._topo_key: tuple[Any, ...] | None = None
        self._topo: Topology | str = ERR_NO_CLUSTER_NETWORK_TOPOLOGY
        self._paths: np.ndarray | None = None
        self._plans: dict[str, GroupPlan] = {}

    # -- the tree ------------------------------------------------------------------------------------------
    def topology(self, handle: Handle) -> Topology | str:
        """The tree over the live nodes, or why there is none."""
        c = handle.cluster
        obj = c.get_object(KIND_CLUSTER_NETWORK_TOPOLOGY, CLUSTER_NETWORK_TOPOLOGY_NAME)
        key = (id(obj), c.labels_generation, c.num_nodes, int(c.live_mask.sum()) if c.num_nodes else 0)
        if key != self._topo_key:
            self._topo_key, self._paths = key, None
            if obj is None:
                self._topo = ERR_NO_CLUSTER_NETWORK_TOPOLOGY
            else:
                try:
                    layers = parse_layers(obj)
                except ManifestError as e:
                    self._topo = str(e)
                else:
                    self._topo = Topology(layers, [(v.name, v.labels) for v in c.nodes])
        return self._topo

    def _path_ids(self, topo: Topology, handle: Handle) -> np.ndarray:
        """Per cluster node index, an id per layer of its domain path (-1 where it is not in the tree)."""
        if self._paths is None:
            c = handle.cluster
            ids: dict[int, int] = {}
            paths = np.full((c.num_nodes, len(topo.layers)), -1, dtype=np.int64)
            for name, leaf in topo.leaf.items():
                i = c.node_index(name)
                if i is None:
                    continue
                chain = list(leaf.ancestors())[:-1][::-1]  # top layer first, the node last
                paths[i, :len(chain)] = [ids.setdefault(id(t), len(ids)) for t in chain]
            self._paths = paths
        return self._paths

    # -- the gang group --------------------------------------------------------------------------------------
    def _group_and_spec(self, pod: Pod, gid: str, handle: Handle) -> tuple[tuple[str, ...], str | None]:
        """The gang ids of the pod's gang group and the raw network-topology-spec of the group (the pod's
        own gang's first, then the other gangs' in id order)."""
        c = handle.cluster
        groups: tuple[str, ...] = (gid,)
        try:
            if is_crd_gang(pod):
                pg = c.get_object("PodGroup", gid)
                if pg is not None:
                    groups = spec_from_pod_group(gid, pg).groups
            else:
                groups = spec_from_pod(pod).groups
        except GangDefinitionError:
            pass  # the gang plugin says why; the group is the gang alone meanwhile
        for g in (gid, *sorted(set(groups) - {gid})):
            raw = self._raw_spec(g, pod if g == gid else None, handle)
            if raw:
                return groups, raw
        return groups, None

    @staticmethod
    def _raw_spec(gid: str, pod: Pod | None, handle: Handle) -> str | None:
        pg = handle.cluster.get_object("PodGroup", gid)
        if pg is not None:
            ann = (pg.get("metadata") or {}).get("annotations") or {}
            raw = ann.get(ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC)
            if raw:
                return str(raw)
        if pod is not None:
            return pod.annotations.get(ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC)
        ns, _, name = gid.partition("/")
        for p in handle.cluster.all_pods():
            if p.namespace == ns and gang_id_of(p) == gid and (raw := p.annotations.get(
                    ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC)):
                return raw
        return None

    def _offer(self, topo: Topology, pods: list[Pod], handle: Handle) -> dict[str, int]:
        """``calculateNodeOfferSlot`` on requests: how many of ``pods``, in order, each node of the tree holds
        in its free room (schedulable, live nodes)."""
        c = handle.cluster
        names = list(topo.leaf)
        idx = np.array([c.node_index(n) for n in names], dtype=np.int64)
        if not len(idx) or not pods:
            return {}
        free = np.clip(c.allocatable[idx] - c.requested[idx], 0, None)
        vecs = np.zeros((len(pods), free.shape[1]), dtype=free.dtype)
        for j, p in enumerate(pods):
            v = c.request_vector(p)
            k = min(len(v), free.shape[1])
            vecs[j, :k] = v[:k]
        cum = np.cumsum(vecs, axis=0)
        # the requests only grow along the members, so the members that fit form a prefix
        slots = (cum[None, :, :] <= free[:, None, :]).all(axis=2).sum(axis=1)
        usable = c.live_mask[idx] & ~c.unschedulable_mask[idx]
        return {n: int(s) for n, s, u in zip(names, slots.tolist(), usable.tolist()) if u}

    def _plan(self, pod: Pod, group_id: str, groups: tuple[str, ...], spec: NetworkTopologySpec, topo: Topology,
              handle: Handle) -> Placement | str | None:
        members = [p for p in handle.cluster.all_pods() if not p.is_terminal and gang_id_of(p) in groups]
        pending = sort_by_index([p for p in members if not p.node_name])
        if pod.uid not in {p.uid for p in pending}:
            return None
        existing = Counter(p.node_name for p in members if p.node_name)
        anchor: TreeNode | None = None
        layer = spec.must_gather_layer(topo)
        if layer and existing:
            doms = {t for n in existing if (leaf := topo.leaf.get(n or "")) is not None
                    for t in leaf.ancestors() if t.layer == layer}
            if len(doms) > 1:
                names = ", ".join(sorted(t.name for t in doms))
                return (f"gang group {group_id} must gather in one {layer} domain but its placed members run in "
                        f"{names}")
            anchor = next(iter(doms), None)
        return place(topo, pending, self._offer(topo, pending, handle),
                     {str(k): v for k, v in existing.items()}, spec, anchor=anchor)

    # -- hooks ------------------------------------------------------------------------------------------------
    @hookimpl
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A refused group may fit once nodes come or change, pods leave, or the topology is edited."""
        return [ClusterEventWithHint(NODE_ADD), ClusterEventWithHint(NODE_UPDATE),
                ClusterEventWithHint(ASSIGNED_POD_DELETE),
                ClusterEventWithHint(ClusterEvent(KIND_CLUSTER_NETWORK_TOPOLOGY, "*"))]

    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, handle: Handle) -> Status | None:
        gid = gang_id_of(pod)
        if not gid:
            return Status.skip()
        groups, raw = self._group_and_spec(pod, gid, handle)
        if raw is None:
            return Status.skip()
        owner = f"PodGroup {gid}" if is_crd_gang(pod) and handle.cluster.get_object("PodGroup", gid) else \
            f"pod {pod.key}"
        try:
            spec = parse_spec(raw, owner)
        except SpecError as e:
            return Status.unresolvable(str(e))
        topo = self.topology(handle)
        if isinstance(topo, str):
            return Status.unschedulable(f"gang {gid} asks for network topology: {topo}")
        unknown = sorted({r.layer for r in spec.rules} - set(topo.layer_names))
        if unknown:
            return Status.unresolvable(f"{owner}: annotation {ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC}: layer(s) "
                                       f"{', '.join(unknown)} not in {KIND_CLUSTER_NETWORK_TOPOLOGY} "
                                       f"{CLUSTER_NETWORK_TOPOLOGY_NAME} (layers: {', '.join(topo.layer_names)})")
        group_id = group_id_of(groups)
        plan = self._plans.get(group_id)
        if plan is None or pod.uid not in plan.placement.nodes or pod.uid in plan.used:
            self._plans.pop(group_id, None)
            res = self._plan(pod, group_id, groups, spec, topo, handle)
            if res is None:
                return Status.skip()
            if isinstance(res, str):
                if not spec.required:
                    return Status.skip()  # PreferGather: placed without a preference rather than refused
                state[_PLAN] = CyclePlan(group_id, spec, refusal=Status.unschedulable(res))
                return None
            plan = self._plans[group_id] = GroupPlan(res)
        plan.used.add(pod.uid)
        domain = plan.placement.domain
        mask = None
        if spec.required:
            c = handle.cluster
            mask = np.zeros(c.num_nodes, dtype=bool)
            inside = [i for leaf in domain.leaves() if (i := c.node_index(leaf.name)) is not None]
            mask[inside] = True
        state[_PLAN] = CyclePlan(group_id, spec, mask=mask, domain=domain.label,
                                 node=plan.placement.nodes[pod.uid], paths=self._path_ids(topo, handle))
        return None if spec.required else Status.skip()

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> tuple[np.ndarray, Status] | None:
        cp = state.get(_PLAN)
        if cp is None:
            return None
        if cp.refusal is not None:
            return np.zeros(len(nodes), dtype=bool), cp.refusal
        if cp.mask is None:
            return None
        idx = nodes.idx
        ok = np.zeros(len(idx), dtype=bool)
        known = idx < len(cp.mask)
        ok[known] = cp.mask[idx[known]]
        return ok, Status.unschedulable(f"node(s) outside the network topology domain {cp.domain} planned for "
                                        f"gang group {cp.group_id}")

    @hookimpl
    def pre_score(self, state: CycleState) -> Status | None:
        cp = state.get(_PLAN)
        return None if cp is not None and cp.paths is not None and cp.node else Status.skip()

    @hookimpl
    def score(self, nodes: NodeBatch, state: CycleState, handle: Handle) -> np.ndarray | None:
        """100 on the planned node; elsewhere 100 × the layers shared with it ÷ the layers of the tree."""
        cp = state[_PLAN]
        paths = cp.paths
        target = handle.cluster.node_index(cp.node)
        if paths is None or target is None or target >= len(paths):
            return None
        idx = nodes.idx
        rows = np.full((len(idx), paths.shape[1]), -2, dtype=np.int64)
        known = idx < len(paths)
        rows[known] = paths[idx[known]]
        same = np.cumprod(rows == paths[target], axis=1).sum(axis=1)
        return (same * 100 // paths.shape[1]).astype(np.int64)

    @hookimpl
    def unreserve(self, pod: Pod) -> None:
        """A released member (its gang group failed or timed out): the next attempt re-plans."""
        gid = gang_id_of(pod)
        if gid:
            for key in [k for k in self._plans if gid in k.split(",")]:
                del self._plans[key]

    @hookimpl
    def report(self, handle: Handle) -> dict[str, Any] | None:
        """``networkTopology``: the domains; ``networkTopologyGangs``: where each gang group asking for a
        topology runs (the smallest domain holding its bound members)."""
        topo = self.topology(handle)
        if isinstance(topo, str):
            return None
        out: dict[str, Any] = {"networkTopology": topo.domains()}
        bound: dict[str, list[Pod]] = {}
        for p in handle.cluster.all_pods():
            gid = gang_id_of(p)
            if gid:
                bound.setdefault(gid, [])
                if p.node_name and not p.is_terminal:
                    bound[gid].append(p)
        rows = []
        for gid in sorted(bound):
            pods = bound[gid]
            raw = self._raw_spec(gid, None, handle)
            if not raw:
                continue
            try:
                spec = parse_spec(raw, gid)
            except SpecError as e:
                rows.append({"gang": gid, "gather": "", "bound": len(pods), "domain": "", "error": str(e)})
                continue
            gather = ", ".join(f"{r.strategy} {r.layer}" for r in spec.rules)
            rows.append({"gang": gid, "gather": gather, "bound": len(pods),
                         "domain": _smallest_common(topo, [p.node_name or "" for p in pods])})
        if rows:
            out["networkTopologyGangs"] = rows
        return out


def _smallest_common(topo: Topology, node_names: list[str]) -> str:
    """The lowest domain (not a node) holding every one of ``node_names``; "" for none."""
    chains = [list(leaf.ancestors())[::-1] for n in node_names if (leaf := topo.leaf.get(n)) is not None]
    if not chains:
        return ""
    common: TreeNode | None = None
    for level in zip(*chains):
        if all(t is level[0] for t in level) and level[0].layer != TOPOLOGY_LAYER_NODE:
            common = level[0]
        else:
            break
    return common.label if common is not None and common.parent is not None else "cluster"
