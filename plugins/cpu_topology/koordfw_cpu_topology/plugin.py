"""The scheduler side of cpu_topology: Koordinator's NodeNUMAResource CPU binding.

Who gets a cpuset (``AllowUseCPUSet`` + ``requestCPUBind``): a pod labelled ``koordinator.sh/qosClass``
LSE or LSR whose priority class (with Koordinator's QoS default) is koord-prod, whose bind policy
(required, else preferred, else ``defaultCPUBindPolicy``) is FullPCPUs or SpreadByPCPUs, and whose cpu
request is a whole number of cores; also any pod with a cpu request on a node whose
``node.koordinator.sh/cpu-bind-policy`` (or kubelet ``full-pcpus-only``) forces a policy.

Per-node state (topology, reserved CPUs, CPUs held by the pods on the node) is rebuilt from the cluster
whenever the node's version changes, so pre-existing pods and restarts never double-allocate; CPUs
picked at ``reserve`` are remembered by pod uid until the pod carries its ``resource-status``
annotation or leaves the node. Filter and score read numpy columns of that state (vectorised).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import attrs
import numpy as np
import structlog

from koordfw import BoundedCache, CycleState, Handle, IdentityKey, NodeBatch, NodeView, Pod, StateKey, Status, hookimpl, warn_once
from koordfw.contract import FilterBatchResult
from koordfw.extension import (
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_CPU_ALLOCS,
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_NUMA_TOPOLOGY_SPEC,
    ANNOTATION_RESOURCE_STATUS,
    LABEL_POD_QOS,
    PRIORITY_PROD,
    QOS_LSE,
    QOS_LSR,
)
from koordfw.inputs import loads_json

from .accumulator import (
    EXCLUSIVE_NONE,
    FULL_PCPUS,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    NUMA_NODE_LEVEL,
    PCPU_LEVEL,
    SPREAD_BY_PCPUS,
    CPUAllocationError,
)
from .amplification import AmplificationMixin, merge_refusals
from .api import NUMA_AFFINITY, NUMA_HINT_PROVIDERS
from .cpuset import CPUSetError, format_cpuset, parse_cpuset
from .numa import ERR_NOT_MATCH_NUMA_TOPOLOGY, NUMATopologySpec, format_numa_node_resources, parse_numa_topology_spec
from .numa_plugin import NUMAPolicyMixin
from .numa_policy import mask_of
from .state import NodeAllocation, allocate_cpuset
from .topology import ANNOTATION_CPU_TOPOLOGY, CPUTopology, TopologyError, parse_cpu_topology

log = structlog.get_logger("koordfw.cpu_topology")

NAME = "cpu_topology"
STATE_KEY: StateKey[PodCPUState] = StateKey("cpu_topology")

ANNOTATION_RESOURCE_SPEC = "scheduling.koordinator.sh/resource-spec"
LABEL_CPU_BIND_POLICY = "node.koordinator.sh/cpu-bind-policy"
LABEL_NUMA_ALLOCATE_STRATEGY = "node.koordinator.sh/numa-allocate-strategy"
NRT_KIND = "NodeResourceTopology"

NODE_POLICY_NONE, NODE_FULL_PCPUS_ONLY, NODE_SPREAD_BY_PCPUS = "None", "FullPCPUsOnly", "SpreadByPCPUs"
BIND_POLICIES = ("", "Default", FULL_PCPUS, SPREAD_BY_PCPUS, "ConstrainedBurst")
EXCLUSIVE_POLICIES = ("", EXCLUSIVE_NONE, PCPU_LEVEL, NUMA_NODE_LEVEL)

ERR_INVALID_REQUESTED_CPUS = "the requested CPUs must be integer"
ERR_INVALID_CPU_TOPOLOGY = "node(s) invalid CPU Topology"
ERR_SMT_ALIGNMENT = "node(s) requested cpus not multiple cpus per core"
ERR_CPU_BIND_POLICY_CONFLICT = "node(s) cpu bind policy conflicts with pod's required cpu bind policy"
ERR_NOT_ENOUGH_CPUS = "not enough cpus available to satisfy request"

# policy codes in the numpy columns
_NONE, _FULL, _SPREAD = 0, 1, 2
_POLICY_CODE = {"": _NONE, FULL_PCPUS: _FULL, SPREAD_BY_PCPUS: _SPREAD}
_CODE_POLICY = {_NONE: "", _FULL: FULL_PCPUS, _SPREAD: SPREAD_BY_PCPUS}


def _strategy(value: str) -> str:
    if value not in (LEAST_ALLOCATED, MOST_ALLOCATED):
        raise ValueError(f"type must be LeastAllocated or MostAllocated, got {value!r}")
    return value


def _bind_policy(value: str) -> str:
    if value not in (FULL_PCPUS, SPREAD_BY_PCPUS, "ConstrainedBurst"):
        raise ValueError(f"defaultCPUBindPolicy must be FullPCPUs, SpreadByPCPUs or ConstrainedBurst, got {value!r}")
    return value


def _positive(inst: Any, attribute: Any, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise ValueError(f"maxRefCount: expected an integer in [1, 2147483647], got {str(value)[:40]}")


@attrs.define
class ScoringStrategy:
    type: str = attrs.field(default=LEAST_ALLOCATED, converter=_strategy)


@attrs.define
class Args:
    """Koordinator's NodeNUMAResourceArgs subset. ``numaScoringStrategy.type`` MostAllocated makes
    MostAllocated the NUMA allocate strategy of nodes without the strategy label (else LeastAllocated);
    ``scoringStrategy.type`` scores nodes by the CPUs bound after placing the pod; ``maxRefCount`` is how
    many pods may share one CPU (TopologyOptions.MaxRefCount)."""

    default_cpu_bind_policy: str = attrs.field(default=FULL_PCPUS, converter=_bind_policy)
    scoring_strategy: ScoringStrategy = attrs.field(factory=ScoringStrategy)
    numa_scoring_strategy: ScoringStrategy = attrs.field(factory=ScoringStrategy)
    max_ref_count: int = attrs.field(default=1, validator=_positive)


@attrs.define
class PodCPUState:
    """What pre_filter learned about the pod, shared by the cycle's later hooks."""

    skip: bool = True
    request_bind: bool = False
    cpu_milli: int = 0
    need: int = 0
    required: str = ""
    preferred: str = ""
    exclusive: str = ""
    spec: dict = attrs.field(factory=dict)
    cpus: tuple[int, ...] | None = None
    bind_policy: str = ""
    required_effective: bool = False
    uid: str = ""
    requests: dict = attrs.field(factory=dict)
    numa: bool = False  # some node or the pod states a NUMA topology policy
    numa_spec: NUMATopologySpec = attrs.field(factory=NUMATopologySpec)
    #: per node index, the score of the node's NUMA hint (-1: none), filled by filter
    numa_scores: np.ndarray | None = None
    numa_scored: bool = False  # some node has a NUMA hint score
    #: NUMA hints from providers other than this plugin's cpu and memory (GPUs): every node takes the
    #: exact merge, the columns cannot decide them
    numa_extra_hints: bool = False
    numa_split: dict | None = None
    numa_mask: frozenset[int] | None = None
    #: other plugins' NUMA hint providers for this pod (api.NUMA_HINT_PROVIDERS, read at filter)
    numa_providers: dict = attrs.field(factory=dict)
    #: node name -> the NUMA mask reserve chose there
    numa_chosen: dict = attrs.field(factory=dict)


@attrs.define
class NodeCPUState:
    """One node's CPU view, rebuilt when the node (or its pods, or its NodeResourceTopology) changes."""

    topology: CPUTopology | None = None
    error: str = ""
    reserved: frozenset[int] = frozenset()
    node_policy: str = ""  # "", FullPCPUsOnly or SpreadByPCPUs
    strategy: str = LEAST_ALLOCATED
    allocation: NodeAllocation = attrs.field(factory=NodeAllocation)


def allow_use_cpuset(pod: Any) -> bool:
    """``AllowUseCPUSet``: QoS label LSE/LSR (label only, like GetPodQoSClassRaw) and koord-prod."""
    return pod.labels.get(LABEL_POD_QOS) in (QOS_LSE, QOS_LSR) and pod.priority_class_with_default == PRIORITY_PROD


def parse_resource_spec(text: str | None) -> dict:
    """The pod's ``scheduling.koordinator.sh/resource-spec`` as a dict; ValueError names the field."""
    if not text:
        return {}
    spec = loads_json(text)  # InputError (a ValueError) says what is wrong and where
    if not isinstance(spec, dict):
        raise ValueError("expected a JSON object")
    for key, allowed in (("requiredCPUBindPolicy", BIND_POLICIES), ("preferredCPUBindPolicy", BIND_POLICIES),
                         ("preferredCPUExclusivePolicy", EXCLUSIVE_POLICIES)):
        v = spec.get(key, "")
        if v is None:
            spec[key] = v = ""
        if v not in allowed:
            raise ValueError(f"{key}: unknown value {v!r} (allowed: {', '.join(a for a in allowed if a)})")
    return spec


def _resource_spec_json(spec: dict) -> str:
    order = ("requiredCPUBindPolicy", "preferredCPUBindPolicy", "preferredCPUExclusivePolicy")
    out = {k: spec[k] for k in order if spec.get(k)}
    out.update({k: v for k, v in spec.items() if k not in order})
    return json.dumps(out, separators=(",", ":"))


class CPUTopologyPlugin(NUMAPolicyMixin, AmplificationMixin):
    """Stateful scheduler plugin (one instance per scheduler)."""

    def __init__(self) -> None:
        self._cluster: Any = None  # the cluster the columns are of (held: compared with 'is')
        self._nodes: list[NodeCPUState | None] = []
        self._ver = np.zeros(0, dtype=np.int64)
        self._valid = np.zeros(0, dtype=bool)
        self._cpc = np.ones(0, dtype=np.int64)
        self._n_avail = np.zeros(0, dtype=np.int64)
        self._n_full = np.zeros(0, dtype=np.int64)
        self._n_cores = np.zeros(0, dtype=np.int64)
        self._n_alloc = np.zeros(0, dtype=np.int64)
        self._max_full_block = np.zeros(0, dtype=np.int64)
        self._forced = np.zeros(0, dtype=np.int8)
        #: NodeResourceTopology key -> the object the columns were built with (held: compared with 'is')
        self._nrt_objs: dict[str, Any] = {}
        self._nrt_gen: int | None = None  # the kind's generation _nrt_objs is of
        self._nrt_index: dict[str, list] = {}
        #: the cluster and NodeResourceTopology objects the index was built from
        self._nrt_index_key: Any = None
        self._nrt_cluster: Any = None
        #: node errors and unreadable resource-specs already logged
        self._warned: BoundedCache[str, bool] = BoundedCache(65536)
        #: node index → what its CPU state was built from (see _signature)
        self._sigs: dict[int, tuple] = {}
        #: annotation text -> (its topology or None, the error)
        self._topologies: BoundedCache[str, tuple[CPUTopology | None, str]] = BoundedCache(4096)
        #: (topology object, unavailable CPUs) → (available, CPUs of whole free cores, cores with a free CPU,
        #: CPUs of whole free cores in the best NUMA node or socket); the key holds the topology (identity
        #: hash, immutable object)
        self._stats_cache: BoundedCache[tuple[CPUTopology, frozenset[int]], tuple[int, int, int, int]] = (
            BoundedCache(8192))
        #: resource-status annotation text -> its CPUs (None: unreadable)
        self._status_cache: BoundedCache[str, frozenset[int] | None] = BoundedCache(65536)
        #: CPUs picked at reserve, by node name then pod uid: (cpus, exclusive policy)
        self._reserved: dict[str, dict[str, tuple[frozenset[int], str]]] = {}
        self._reserved_node: dict[str, str] = {}
        self._max_ref = 1
        self._default_strategy = LEAST_ALLOCATED
        self._forced_key: tuple = ()
        self._forced_any = False
        self._numa_init()
        self._amp_init()

    # -- configuration --------------------------------------------------------------------------
    @staticmethod
    @hookimpl
    def plugin_args() -> type[Args]:
        return Args

    def _configure(self, args: Args) -> None:
        strategy = MOST_ALLOCATED if args.numa_scoring_strategy.type == MOST_ALLOCATED else LEAST_ALLOCATED
        if args.max_ref_count != self._max_ref or strategy != self._default_strategy:
            self._max_ref, self._default_strategy = args.max_ref_count, strategy
            self._ver[:] = -1

    # -- node state -------------------------------------------------------------------------------
    def _topology(self, text: str) -> tuple[CPUTopology | None, str]:
        hit = self._topologies.get(text)
        if hit is None:
            try:
                topo = parse_cpu_topology(text)
                hit = (topo, "") if topo.is_valid() else (None, f"{ANNOTATION_CPU_TOPOLOGY}: no CPUs")
            except TopologyError as e:
                hit = (None, str(e))
            self._topologies[text] = hit
        return hit

    def _pod_cpus(self, text: str, pod: Any) -> frozenset[int] | None:
        if text in self._status_cache:
            return self._status_cache[text]
        cpus: frozenset[int] | None
        try:
            obj = loads_json(text)
            cpus = parse_cpuset(obj.get("cpuset") or "") if isinstance(obj, dict) else None
            if cpus is None:
                raise ValueError("expected a JSON object")
        except (ValueError, CPUSetError) as e:
            log.warning("ignoring unparsable resource-status", pod=pod.key, annotation=ANNOTATION_RESOURCE_STATUS,
                        error=str(e))
            cpus = None  # remembered too: one warning per value, not one per rebuild
        self._status_cache[text] = cpus
        return cpus

    def _nrt(self, cluster: Any, name: str) -> tuple[dict | None, str]:
        """The node's NodeResourceTopology by ``metadata.name`` (it is cluster-scoped: a namespace does not
        make a second one), and an error when two objects name the same node (then neither is used)."""
        # the kind's generation says when the objects changed (comparing them all is O(objects) per call);
        # the cluster object last seen (held, so its identity is not reused) spares building its key
        gen = getattr(cluster, "objects_generation", None)
        if gen is not None and cluster is self._nrt_cluster and gen(NRT_KIND) == self._nrt_index_key[1]:
            return self._nrt_found(name)
        nrts = cluster.objects_of(NRT_KIND)
        key: Any = (IdentityKey(cluster), gen(NRT_KIND)) if gen is not None else IdentityKey(cluster, *nrts.values())
        self._nrt_cluster = cluster if gen is not None else None
        if key != self._nrt_index_key:
            by_name: dict[str, list[tuple[str, dict]]] = {}
            for k, obj in nrts.items():
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                n = str(meta.get("name")) if isinstance(meta, dict) and meta.get("name") else str(k).rsplit("/", 1)[-1]
                by_name.setdefault(n, []).append((str(k), obj))
            self._nrt_index = by_name
            self._nrt_index_key = key
        return self._nrt_found(name)

    def _nrt_found(self, name: str) -> tuple[dict | None, str]:
        found = self._nrt_index.get(name) or []
        if len(found) > 1:
            return None, (f"NodeResourceTopology {name}: defined {len(found)} times "
                          f"({', '.join(sorted(k for k, _ in found))}); none is used")
        return (found[0][1] if found else None), ""

    def _build(self, cluster: Any, view: Any) -> NodeCPUState:
        node = view.node
        anns = node.annotations
        nrt, nrt_error = self._nrt(cluster, node.name)
        nrt_anns = ((nrt or {}).get("metadata") or {}).get("annotations") or {}
        if not isinstance(nrt_anns, dict):
            nrt_anns, nrt_error = {}, f"NodeResourceTopology {node.name}: metadata.annotations must be a mapping"
        st = NodeCPUState()
        where = f"NodeResourceTopology {node.name}" if nrt_anns.get(ANNOTATION_CPU_TOPOLOGY) else f"Node {node.name}"
        text = nrt_anns.get(ANNOTATION_CPU_TOPOLOGY) or anns.get(ANNOTATION_CPU_TOPOLOGY)
        if text:
            st.topology, err = self._topology(text)
            if err:
                st.error = f"{ERR_INVALID_CPU_TOPOLOGY}: {where}: {err}"
        else:
            st.error = ERR_INVALID_CPU_TOPOLOGY
        reserved: set[int] = set()
        kubelet_full_pcpus_only = False
        try:
            for src, a in ((f"Node {node.name}", anns), (f"NodeResourceTopology {node.name}", nrt_anns)):
                raw = a.get(ANNOTATION_NODE_RESERVATION)
                if raw:
                    obj = _json_object(raw, src, ANNOTATION_NODE_RESERVATION)
                    reserved |= _cpus_field(obj.get("reservedCPUs"), src, f"{ANNOTATION_NODE_RESERVATION}.reservedCPUs")
                raw = a.get(ANNOTATION_KUBELET_CPU_MANAGER_POLICY)
                if raw:
                    obj = _json_object(raw, src, ANNOTATION_KUBELET_CPU_MANAGER_POLICY)
                    reserved |= _cpus_field(obj.get("reservedCPUs"), src,
                                            f"{ANNOTATION_KUBELET_CPU_MANAGER_POLICY}.reservedCPUs")
                    opts = obj.get("options") or {}
                    if obj.get("policy") == "static" and isinstance(opts, dict) and opts.get("full-pcpus-only") == "true":
                        kubelet_full_pcpus_only = True
                raw = a.get(ANNOTATION_NODE_CPU_ALLOCS)
                if raw:
                    try:
                        allocs = loads_json(raw)
                    except ValueError as e:
                        raise ValueError(f"{src}: {ANNOTATION_NODE_CPU_ALLOCS}: {e}") from None
                    for i, entry in enumerate(allocs if isinstance(allocs, list) else []):
                        # kubelet-managed guaranteed pods keep their CPUs out of Koordinator's hands
                        if isinstance(entry, dict) and entry.get("managedByKubelet") and entry.get("uid"):
                            reserved |= _cpus_field(entry.get("cpuset"), src, f"{ANNOTATION_NODE_CPU_ALLOCS}[{i}].cpuset")
        except ValueError as e:
            st.error = f"{ERR_INVALID_CPU_TOPOLOGY}: {e}"
        st.reserved = frozenset(reserved)
        label = node.labels.get(LABEL_CPU_BIND_POLICY, "")
        if label in ("", NODE_POLICY_NONE) and kubelet_full_pcpus_only:
            label = NODE_FULL_PCPUS_ONLY
        if label in (NODE_FULL_PCPUS_ONLY, NODE_SPREAD_BY_PCPUS):
            st.node_policy = label
        elif label not in ("", NODE_POLICY_NONE) and not st.error:
            st.error = (f"Node {node.name}: label {LABEL_CPU_BIND_POLICY}={label!r} is not one of "
                        f"None, FullPCPUsOnly, SpreadByPCPUs")
        if nrt_error:
            st.error = f"{ERR_INVALID_CPU_TOPOLOGY}: {nrt_error}"
        if st.error and st.error != ERR_INVALID_CPU_TOPOLOGY:
            warn_once(log, self._warned, st.error, "node left out of CPU binding", node=node.name, error=st.error)
        st.strategy = node.labels.get(LABEL_NUMA_ALLOCATE_STRATEGY) or self._default_strategy
        held = self._reserved.get(node.name, {})
        on_node = set()
        for pod in cluster.pods_on(node.name):
            on_node.add(pod.uid)
            text = pod.annotations.get(ANNOTATION_RESOURCE_STATUS)
            cpus = self._pod_cpus(text, pod) if text else None
            if cpus is not None:
                if pod.uid in held:  # bound: the annotation is authoritative now
                    self._drop_reservation(pod.uid)
                policy = _exclusive_of(pod, self._warned)
            elif pod.uid in held:
                cpus, policy = held[pod.uid]
            else:
                continue
            if cpus:
                st.allocation.add(pod.uid, cpus, policy)
        for uid in [u for u in held if u not in on_node]:
            self._drop_reservation(uid)
        return st

    def _drop_reservation(self, uid: str) -> None:
        name = self._reserved_node.pop(uid, None)
        if name is not None:
            d = self._reserved.get(name)
            if d is not None:
                d.pop(uid, None)
                if not d:
                    del self._reserved[name]

    def _grow(self, n: int) -> None:
        old = len(self._ver)
        if n <= old:
            return
        extra = n - old
        self._nodes.extend([None] * extra)
        self._ver = np.concatenate([self._ver, np.full(extra, -1, dtype=np.int64)])
        self._valid = np.concatenate([self._valid, np.zeros(extra, dtype=bool)])
        self._cpc = np.concatenate([self._cpc, np.ones(extra, dtype=np.int64)])
        for name in ("_n_avail", "_n_full", "_n_cores", "_n_alloc", "_max_full_block"):
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(extra, dtype=np.int64)]))
        self._forced = np.concatenate([self._forced, np.zeros(extra, dtype=np.int8)])

    def _refresh(self, cluster: Any) -> None:
        """Rebuild the nodes whose version (or NodeResourceTopology object) changed."""
        if cluster is not self._cluster:
            self._cluster = cluster
            self._nodes, self._ver = [], np.zeros(0, dtype=np.int64)
            self._valid, self._cpc = np.zeros(0, dtype=bool), np.ones(0, dtype=np.int64)
            self._n_avail = self._n_full = self._n_cores = self._n_alloc = np.zeros(0, dtype=np.int64)
            self._max_full_block = np.zeros(0, dtype=np.int64)
            self._forced = np.zeros(0, dtype=np.int8)
            self._nrt_objs = {}
            self._nrt_gen = None
            self._sigs = {}
        n = cluster.num_nodes
        self._grow(n)
        nrts = cluster.objects_of(NRT_KIND)
        gen = getattr(cluster, "objects_generation", None)
        nrt_gen = gen(NRT_KIND) if gen is not None else None
        # comparing every object is O(objects): only when the kind's generation says they changed
        if (nrts or self._nrt_objs) and (nrt_gen is None or nrt_gen != self._nrt_gen):
            self._nrt_gen = nrt_gen
            cur = dict(nrts)
            changed = set(cur) ^ set(self._nrt_objs) | {k for k, v in cur.items() if self._nrt_objs.get(k) is not v}
            if changed:
                for key in changed:
                    obj = nrts.get(key)
                    meta = obj.get("metadata") if isinstance(obj, dict) else None
                    name = str(meta["name"]) if isinstance(meta, dict) and meta.get("name") else key.rsplit("/", 1)[-1]
                    i = cluster.node_index(name)
                    if i is not None:
                        self._ver[i] = -1
                        self._numa_cols.touch(i)
                self._nrt_objs = cur
        stale = np.flatnonzero(self._ver[:n] != cluster.node_version)
        if len(stale) == 0:
            return
        views = cluster.views
        live = cluster.live_mask if cluster.has_removed_nodes else None
        for i in stale.tolist():
            if live is not None and not live[i]:
                self._nodes[i] = None
                self._valid[i] = False
                self._ver[i] = cluster.node_version[i]
                continue
            # a node's CPU state depends only on its Node/NRT objects, the pods carrying a cpuset and our
            # own reservations: ordinary pods landing on it change the version, not the state
            sig = self._signature(cluster, views[i])
            if self._nodes[i] is not None and self._sigs.get(i) == sig:
                self._ver[i] = cluster.node_version[i]
                continue
            st = self._build(cluster, views[i])
            self._nodes[i] = st
            self._numa_cols.touch(i)  # a bound pod's NUMA room is the node's whole free CPUs
            self._sigs[i] = self._signature(cluster, views[i])  # _build may drop stale reservations
            self._store_columns(i, st)
            self._ver[i] = cluster.node_version[i]

    def _signature(self, cluster: Any, view: Any) -> tuple:
        held = self._reserved.get(view.node.name, {})
        # a resource-status without CPUs (a NUMA split only) leaves the CPU state as it is
        pods = tuple((p.uid, p.annotations.get(ANNOTATION_RESOURCE_STATUS), p.annotations.get(ANNOTATION_RESOURCE_SPEC))
                     for p in cluster.pods_on(view.node.name)
                     if p.uid in held or (ANNOTATION_RESOURCE_STATUS in p.annotations
                                          and self._pod_cpus(p.annotations[ANNOTATION_RESOURCE_STATUS], p)))
        return (IdentityKey(view.node, self._nrt(cluster, view.node.name)[0]), pods, tuple(held.items()))

    def _store_columns(self, i: int, st: NodeCPUState) -> None:
        topo = st.topology
        self._forced[i] = _POLICY_CODE[{NODE_FULL_PCPUS_ONLY: FULL_PCPUS,
                                        NODE_SPREAD_BY_PCPUS: SPREAD_BY_PCPUS}.get(st.node_policy, "")]
        # CPUs bound (the amplified-cpu filter counts them on any node with a topology); -1: the topology
        # is there but unreadable (the bare error means there is none)
        self._n_alloc[i] = (sum(1 for c in st.allocation.cpus if c in topo.details) if topo is not None else
                            0 if st.error == ERR_INVALID_CPU_TOPOLOGY else -1)
        if topo is None or st.error:
            self._valid[i] = False
            self._n_avail[i] = self._n_full[i] = self._n_cores[i] = 0
            self._max_full_block[i] = 0
            return
        held = frozenset(c for c, a in st.allocation.cpus.items() if a.ref_count >= self._max_ref)
        key = (topo, held | st.reserved)
        stats = self._stats_cache.get(key)
        if stats is None:
            stats = _availability_stats(topo, key[1])
            self._stats_cache[key] = stats
        self._valid[i] = True
        self._cpc[i] = max(topo.cpus_per_core(), 1)
        self._n_avail[i], self._n_full[i], self._n_cores[i], self._max_full_block[i] = stats

    def _node_state(self, view: Any) -> NodeCPUState | None:
        self._refresh(view.cluster)
        return self._nodes[view.index]

    def _invalidate(self, index: int) -> None:
        if index < len(self._ver):
            self._ver[index] = -1

    # -- scheduling cycle -------------------------------------------------------------------------
    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, args: Args, handle: Handle) -> Status | None:
        self._configure(args)
        st = PodCPUState(uid=pod.uid, requests=dict(pod.requests))
        state[STATE_KEY] = st
        if not any(pod.requests.values()):
            return Status.skip()
        try:
            st.numa_spec = parse_numa_topology_spec(pod.annotations)
        except ValueError as e:
            return Status.unresolvable(f"pod {pod.key}: annotation {ANNOTATION_NUMA_TOPOLOGY_SPEC}: {e}")
        st.numa = bool(st.numa_spec.policy) or self._any_numa_node(handle.cluster)
        if st.numa:
            self.numa_forget_bound(handle.cluster)
        try:
            spec = parse_resource_spec(pod.annotations.get(ANNOTATION_RESOURCE_SPEC))
        except ValueError as e:
            return Status.unresolvable(f"pod {pod.key}: annotation {ANNOTATION_RESOURCE_SPEC}: {e}")
        st.spec = spec
        st.cpu_milli = cpu = int(pod.requests.get("cpu", 0))
        st.need = cpu // 1000
        if allow_use_cpuset(pod):
            policy = spec.get("preferredCPUBindPolicy", "")
            if policy in ("", "Default"):
                policy = args.default_cpu_bind_policy
            required = spec.get("requiredCPUBindPolicy", "")
            if required == "Default":
                required = args.default_cpu_bind_policy
            if required:
                policy = required
            if policy in (FULL_PCPUS, SPREAD_BY_PCPUS):
                if cpu % 1000 != 0:
                    return Status.unresolvable(f"{ERR_INVALID_REQUESTED_CPUS} (pod {pod.key} requests cpu "
                                               f"{cpu}m with cpu bind policy {policy})")
                if cpu > 0:
                    st.request_bind = True
                    st.required = required if required in (FULL_PCPUS, SPREAD_BY_PCPUS) else ""
                    st.preferred = policy
                    st.exclusive = spec.get("preferredCPUExclusivePolicy", "")
        if not st.request_bind and not st.numa:
            if cpu == 0:
                return Status.skip()
            if not self._any_forced_node(handle.cluster) and not self.any_amplified(handle.cluster):
                return Status.skip()
        st.skip = False
        return None

    def _any_forced_node(self, cluster: Any) -> bool:
        """Whether any node forces a bind policy (label or kubelet full-pcpus-only); cached until node
        labels/annotations or NodeResourceTopology objects change, so ordinary pods stay cheap."""
        nrts = cluster.objects_of(NRT_KIND)
        gen = getattr(cluster, "objects_generation", None)
        # the kind's generation stands for its objects (a key holding them all is O(objects) per pod)
        key = (cluster.labels_generation, IdentityKey(cluster) if gen is not None else IdentityKey(cluster, *nrts.values()),
               gen(NRT_KIND) if gen is not None else None)
        if key != self._forced_key:
            forced = bool(cluster.label_mask(LABEL_CPU_BIND_POLICY).any())
            if not forced:
                sources = [v.node.annotations for v in cluster.nodes]
                sources += [((o.get("metadata") or {}).get("annotations") or {}) for o in nrts.values()]
                forced = any(ANNOTATION_KUBELET_CPU_MANAGER_POLICY in a for a in sources)
            if forced:  # the exact per-node answer (label values, option parsing) comes from the state
                self._refresh(cluster)
                forced = bool(self._forced.any())
            self._forced_key, self._forced_any = key, forced
        return self._forced_any

    def _binding_mask(self, st: PodCPUState, idx: np.ndarray) -> np.ndarray:
        if st.request_bind:
            return np.ones(len(idx), dtype=bool)
        return self._forced[idx] != _NONE

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> FilterBatchResult:
        st = state.get(STATE_KEY)
        if st is None or st.skip:
            return None
        cluster = nodes.cluster
        self._refresh(cluster)
        idx = nodes.idx
        numa_out: dict[str, Status] = {}
        if st.numa:
            providers = state.get(NUMA_HINT_PROVIDERS)
            st.numa_providers = dict(providers) if providers else {}
            st.numa_extra_hints = bool(st.numa_providers)
            if st.numa_providers and state.get(NUMA_AFFINITY) is None:
                # what the providers place at reserve: the NUMA nodes chosen on the node (api.NUMA_AFFINITY)
                affinity: Callable[[Any], int | None] = partial(self.numa_affinity, cluster, st)
                state[NUMA_AFFINITY] = affinity
            numa_out = self.numa_filter(cluster, idx, st)
        binding = self._binding_mask(st, idx)
        amp_out = self.amplified_cpu_filter(cluster, idx, st.cpu_milli, binding)
        numa_out = merge_refusals(numa_out, amp_out, ERR_NOT_MATCH_NUMA_TOPOLOGY)
        if not binding.any():
            return numa_out or None
        forced = self._forced[idx].astype(np.int64)
        required = np.where(forced != _NONE, forced, _POLICY_CODE[st.required])
        need = st.need
        invalid = binding & ~self._valid[idx]
        fractional = binding & np.bool_(st.cpu_milli % 1000 != 0)
        conflict = binding & np.bool_(bool(st.required)) & (required != _POLICY_CODE[st.required])
        smt = binding & (required == _FULL) & (need % self._cpc[idx] != 0)
        avail = np.where(required == _FULL, self._n_full[idx],
                         np.where(required == _SPREAD, self._n_cores[idx], self._n_avail[idx]))
        short = binding & (avail < need)
        bad = invalid | fractional | conflict | smt | short
        if not bad.any():
            return numa_out or None
        out: dict[str, Status] = dict(numa_out)
        views = cluster.views
        for j in np.flatnonzero(bad).tolist():
            i = int(idx[j])
            name = views[i].name
            if fractional[j]:
                out[name] = Status.unresolvable(ERR_INVALID_REQUESTED_CPUS)
            elif name in amp_out:  # Koordinator checks the amplified cpu first
                out[name] = numa_out[name]
            elif invalid[j]:
                ns = self._nodes[i]
                out[name] = Status.unresolvable(ns.error if ns is not None and ns.error else ERR_INVALID_CPU_TOPOLOGY)
            elif conflict[j]:
                out[name] = Status.unresolvable(ERR_CPU_BIND_POLICY_CONFLICT)
            elif smt[j]:
                out[name] = Status.unresolvable(ERR_SMT_ALIGNMENT)
            else:
                out[name] = Status.unschedulable(ERR_NOT_ENOUGH_CPUS)
        return out

    @hookimpl
    def pre_score(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> Status | None:
        st = state.get(STATE_KEY)
        if st is None or not (st.request_bind or st.numa_scored):
            return Status.skip()
        return None

    def _bind_policy_for(self, st: PodCPUState, ns: NodeCPUState) -> tuple[str, bool]:
        """``getCPUBindPolicy``: the pod's required policy, else the node's forced one, else preferred."""
        if st.required:
            return st.required, True
        if ns.node_policy == NODE_FULL_PCPUS_ONLY:
            return FULL_PCPUS, True
        if ns.node_policy == NODE_SPREAD_BY_PCPUS:
            return SPREAD_BY_PCPUS, True
        return st.preferred, False

    def _allocate(self, st: PodCPUState, ns: NodeCPUState, args: Args) -> list[int]:
        policy, required = self._bind_policy_for(st, ns)
        assert ns.topology is not None
        reserved = ns.reserved
        if st.numa_mask is not None:  # the NUMA nodes the topology policy chose
            reserved = reserved | frozenset(c for c, i in ns.topology.details.items() if i.node & 0xFFFF not in st.numa_mask)
        return allocate_cpuset(ns.topology, ns.allocation, reserved, need=st.need, bind_policy=policy,
                               required=required, exclusive_policy=st.exclusive, numa_strategy=ns.strategy,
                               max_ref_count=self._max_ref)

    @hookimpl
    def score(self, pod: Pod, nodes: NodeBatch, state: CycleState, args: Args) -> np.ndarray | None:
        """Koordinator's Score for a bound pod: Least/MostAllocated over cpu, where the requested amount
        is every CPU bound on the node once this pod's CPUs are added (×1000) and the capacity is the
        node's allocatable cpu."""
        st = state.get(STATE_KEY)
        if st is None or not (st.request_bind or st.numa_scored):
            return None
        cluster = nodes.cluster
        idx = nodes.idx
        narrow = st.numa_scores[idx] if st.numa_scores is not None else np.full(len(idx), -1, dtype=np.int64)
        has = narrow >= 0
        narrow_i = np.where(has, narrow, 0)
        if not st.request_bind:
            return narrow_i
        self._refresh(cluster)
        alloc = cluster.allocatable[idx, cluster.resource_index("cpu")]
        bound = self._n_alloc[idx] + st.need
        # the count is exact when the pod's CPUs cannot overlap held ones (maxRefCount 1) and the
        # accumulator cannot overshoot (it only can for FullPCPUs with a request that splits a core)
        exact = np.zeros(len(idx), dtype=bool) if self._max_ref > 1 else np.ones(len(idx), dtype=bool)
        if self._max_ref == 1:
            pol = (_POLICY_CODE[st.required] if st.required else
                   np.where(self._forced[idx] != _NONE, self._forced[idx], _POLICY_CODE[st.preferred]))
            exact = ~((pol == _FULL) & (st.need % self._cpc[idx] != 0)) | (st.need <= self._max_full_block[idx])
        bound = np.where(self._valid[idx], bound, -1)
        for j in np.flatnonzero(~exact & self._valid[idx]).tolist():
            ns = cast(NodeCPUState, self._nodes[int(idx[j])])  # a valid node has its state
            try:
                cpus = self._allocate(st, ns, args)
                bound[j] = len(set(cpus) | set(ns.allocation.cpus))
            except CPUAllocationError:
                bound[j] = -1
        req = self.amplified_bound_milli(cluster, idx, st.cpu_milli, bound)
        safe = np.where(alloc > 0, alloc, 1)
        if args.scoring_strategy.type == MOST_ALLOCATED:
            out = np.minimum(req, alloc) * 100 // safe
        else:
            out = np.where(req <= alloc, (alloc - req) * 100 // safe, 0)
        base = np.where((alloc > 0) & (bound >= 0), out, 0)
        return np.where(has, (base + narrow_i) // 2, base)

    @hookimpl
    def reserve(self, pod: Pod, node: NodeView, state: CycleState, args: Args, handle: Handle) -> Status | None:
        st = state.get(STATE_KEY)
        if st is None or st.skip:
            return None
        ns = self._node_state(node)
        if ns is None:
            return Status.unresolvable(f"node {node.name} not found")
        if st.numa:
            refused = self.numa_reserve(handle.cluster, node, st)
            if refused is not None:
                return refused
            if st.numa_mask is not None:  # what api.NUMA_AFFINITY answers for this node from now on
                st.numa_chosen[node.name] = mask_of(*st.numa_mask)
        if not (st.request_bind or ns.node_policy):
            return None
        if ns.topology is None or ns.error:
            return Status.unresolvable(ns.error or ERR_INVALID_CPU_TOPOLOGY)
        if st.cpu_milli % 1000 != 0:
            return Status.unresolvable(ERR_INVALID_REQUESTED_CPUS)
        try:
            cpus = self._allocate(st, ns, args)
        except CPUAllocationError as e:
            self.numa_unreserve(node.name, pod.uid)
            return Status.unschedulable(str(e))
        if st.numa_split is not None and ns.topology is not None:  # the cpu of a bound pod: its CPUs' NUMA nodes
            for n, res in st.numa_split.items():
                res["cpu"] = 1000 * sum(1 for c in cpus if ns.topology.details[c].node & 0xFFFF == n)
            st.numa_split = {n: r for n, r in st.numa_split.items() if any(r.values())}
            self.numa_held_changed(node.name)
        policy, required = self._bind_policy_for(st, ns)
        self._drop_reservation(pod.uid)
        self._reserved.setdefault(node.name, {})[pod.uid] = (frozenset(cpus), st.exclusive)
        self._reserved_node[pod.uid] = node.name
        st.cpus, st.bind_policy, st.required_effective = tuple(cpus), policy, required
        self._invalidate(node.index)
        return None

    @hookimpl
    def unreserve(self, pod: Pod, node: NodeView, state: CycleState) -> None:
        st = state.get(STATE_KEY)
        if st is not None:
            st.cpus = None
            st.numa_split = st.numa_mask = None
        self.numa_unreserve(node.name, pod.uid)
        if pod.uid in self._reserved_node:
            self._drop_reservation(pod.uid)
            self._invalidate(node.index)

    @hookimpl
    def pre_bind(self, pod: Pod, node: NodeView, state: CycleState) -> dict[str, str] | None:
        """Write ``resource-status`` = {"cpuset": ...}; like Koordinator, also write the effective bind
        policy back into ``resource-spec`` when the pod did not state it."""
        st = state.get(STATE_KEY)
        if st is None or (st.cpus is None and st.numa_split is None):
            return None
        status: dict[str, Any] = {}
        if st.cpus is not None:
            status["cpuset"] = format_cpuset(st.cpus)
        if st.numa_split:
            status["numaNodeResources"] = format_numa_node_resources(st.numa_split)
        text = json.dumps(status, separators=(",", ":"))
        out = {ANNOTATION_RESOURCE_STATUS: text}
        # what the text reads back as (_pod_cpus, _used_numa), spared a parse when the node is rebuilt
        if text not in self._status_cache:
            self._status_cache[text] = parse_cpuset(status.get("cpuset") or "")
        if st.numa_split:
            self.numa_status_written(text, st.numa_split)
        if st.cpus is None:
            return out
        spec = dict(st.spec)
        write = False
        policy = st.bind_policy
        if st.required_effective and spec.get("requiredCPUBindPolicy", "") in ("", "Default"):
            spec["requiredCPUBindPolicy"] = policy
            write = True
        if spec.get("preferredCPUBindPolicy") == "Default":
            spec["preferredCPUBindPolicy"] = policy
            write = True
        if not spec.get("requiredCPUBindPolicy") and not spec.get("preferredCPUBindPolicy") and policy:
            spec["preferredCPUBindPolicy"] = policy
            write = True
        if write:
            out[ANNOTATION_RESOURCE_SPEC] = _resource_spec_json(spec)
        return out

    @hookimpl
    def report(self, handle: Handle) -> dict[str, Any] | None:
        """``cpusets``: every pod with a bound cpuset, by node (for ``koordfw simulate`` output)."""
        cluster = handle.cluster
        rows = []
        for view in cluster.nodes:
            for pod in cluster.pods_on(view.name):
                text = pod.annotations.get(ANNOTATION_RESOURCE_STATUS)
                cpus = self._pod_cpus(text, pod) if text else None
                if cpus:
                    rows.append({"node": view.name, "pod": pod.key, "cpuset": format_cpuset(cpus)})
        return {"cpusets": rows} if rows else None


def _availability_stats(topo: CPUTopology, unavailable: frozenset[int]) -> tuple[int, int, int, int]:
    """Counts the vectorised filter and score need, from the topology's per-core index arrays.

    The last one is the CPUs of wholly free cores in the best NUMA node or socket: a FullPCPUs request
    up to that size is served by the accumulator's first passes, which take exactly the count asked."""
    arr = _topology_arrays(topo)
    cpu_ids, core_of, node_of_core, socket_of_core, cpc = arr
    if unavailable:
        mask = ~np.isin(cpu_ids, np.fromiter(unavailable, dtype=np.int64, count=len(unavailable)))
    else:
        mask = np.ones(len(cpu_ids), dtype=bool)
    per_core = np.bincount(core_of[mask], minlength=len(node_of_core))
    full = per_core == cpc
    best = 0
    if full.any():
        best = int(max(np.bincount(node_of_core[full]).max(), np.bincount(socket_of_core[full]).max())) * cpc
    return int(mask.sum()), int(full.sum()) * cpc, int((per_core > 0).sum()), best


def _topology_arrays(topo: CPUTopology) -> tuple:
    """(sorted CPU ids, core index of each, NUMA index of each core, socket index of each core, CPUs per
    core), kept on the (immutable) topology object itself."""
    if topo.arrays is not None:
        return topo.arrays
    cpu_ids = np.array(sorted(topo.details), dtype=np.int64)
    cores = sorted(topo.cpus_in_core)
    core_index = {c: k for k, c in enumerate(cores)}
    nodes = {n: k for k, n in enumerate(sorted({i.node for i in topo.details.values()}))}
    sockets = {s: k for k, s in enumerate(sorted({i.socket for i in topo.details.values()}))}
    core_of = np.array([core_index[topo.details[c].core] for c in cpu_ids.tolist()], dtype=np.int64)
    first = [topo.details[topo.cpus_in_core[c][0]] for c in cores]
    node_of_core = np.array([nodes[f.node] for f in first], dtype=np.int64)
    socket_of_core = np.array([sockets[f.socket] for f in first], dtype=np.int64)
    arr = (cpu_ids, core_of, node_of_core, socket_of_core, max(topo.cpus_per_core(), 1))
    topo.arrays = arr
    return arr


def _json_object(raw: str, src: str, key: str) -> dict:
    try:
        obj = loads_json(raw)
    except ValueError as e:
        raise ValueError(f"{src}: {key}: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{src}: {key}: expected a JSON object")
    return obj


def _cpus_field(value: Any, src: str, field: str) -> frozenset[int]:
    if value in (None, ""):
        return frozenset()
    try:
        return parse_cpuset(value)
    except CPUSetError as e:
        raise ValueError(f"{src}: {field}: {e}") from None


def _exclusive_of(pod: Any, warned: set[str] | BoundedCache[str, bool] | None = None) -> str:
    """The bound pod's exclusive policy; an unreadable resource-spec counts as none (warned once)."""
    try:
        return parse_resource_spec(pod.annotations.get(ANNOTATION_RESOURCE_SPEC)).get("preferredCPUExclusivePolicy", "")
    except ValueError as e:
        key = f"{pod.uid}\0{pod.annotations.get(ANNOTATION_RESOURCE_SPEC)}"
        warn_once(log, warned, key, "ignoring unparsable resource-spec of a bound pod", pod=pod.key,
                  annotation=ANNOTATION_RESOURCE_SPEC, error=str(e))
        return ""
