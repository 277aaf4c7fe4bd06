"""gpu_share: Koordinator's fractional GPU scheduling with a choice of placement policies.

Hooks: ``pre_filter`` validates/normalises the pod's GPU request (Koordinator's rules); ``filter``
keeps nodes where enough devices can hold the per-GPU share; ``score`` ranks nodes by the policy;
``reserve`` picks the exact devices (per policy); ``pre_bind`` writes
``scheduling.koordinator.sh/device-allocated``. Pods without GPU requests are skipped unless a paper
policy (which scores every pod, as in the FGD paper's simulator) is chosen.

Policies (``pluginConfig: {gpu_share: {policy: NAME}}``) are strategy objects registered by name
(:mod:`koordfw_gpu_share.policies`): ``spread`` (default; Koordinator LeastAllocated), ``binpack``
(MostAllocated), the FGD paper's ``fgd`` and ours, ``fgdlp`` (FGD over a capacity-aware measure, shares
packed by the configuration LP of :mod:`koordfw_gpu_share.lp`); the paper's baselines ``bestfit``,
``dotprod``, ``packing``, ``clustering``, ``random`` and ``fgdcap`` are in
:mod:`koordfw_gpu_share.baselines`. The plugin keeps the state they use (inventory, target workload,
FGD caches, the configuration packer) and calls the policy of ``args.policy``.
"""

from __future__ import annotations

import json
import math
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, cast

import attrs
import numpy as np
from koordfw_cpu_topology.api import NUMA_AFFINITY, NUMA_HINT_PROVIDERS, ProviderResult

from koordfw import (
    BoundedCache,
    ClusterView,
    CycleState,
    Handle,
    IdentityKey,
    NodeBatch,
    NodeView,
    Pod,
    StateKey,
    Status,
    format_quantity,
    hookimpl,
)
from koordfw.contract import FilterBatchResult
from koordfw.extension import (
    ANNOTATION_DEVICE_ALLOCATE_HINT,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
)
from koordfw.inputs import camel

from . import (
    baselines,  # noqa: F401  (registers the paper's baselines and fgdcap)
    frag,
    lp,
)
from . import node_resources as node_res
from . import topology as topo
from .inventory import DEVICE_ALLOCATED, MAX_GPUS_PER_NODE, MILLI, Alloc, Inventory
from .policies import CHOICE as _CHOICE
from .policies import POLICIES, Policy, pod_tag, sub_select  # noqa: F401  (pod_tag, sub_select: public)
from .requests import GpuRequest, InvalidGpuRequest, pod_gpu_request, pod_key

_REQ: StateKey[GpuRequest | None] = StateKey("gpu_share/request")
_ALLOC: StateKey[Alloc] = StateKey("gpu_share/alloc")
_SCOPE: StateKey[int] = StateKey("gpu_share/required_scope")
_LP_UNDO: StateKey[tuple] = StateKey("gpu_share/lp")
#: fgdlp with a learnt share distribution: first LP after this many shared pods, then again every as many
LP_LEARN_EVERY = 300
LP_COUNTED_MAX = 100_000
INSUFFICIENT = "Insufficient gpu devices"
_INSUFFICIENT = Status.unschedulable(INSUFFICIENT)


def _policy(value: str) -> str:
    v = str(value).lower()
    if v not in POLICIES:
        raise ValueError(f"unknown policy {value!r}; use one of {', '.join(POLICIES)}")
    return v


def _number(lo: float | None = None, hi: float | None = None, *,
            integer: bool = False) -> Callable[[Any, Any, Any], None]:
    """attrs validator: a finite number (an integer with ``integer``) within [lo, hi]; the message names
    the field in the profile's camelCase."""
    kind = "an integer" if integer else "a finite number"
    bounds = (f" in [{lo:g}, {hi:g}]" if lo is not None and hi is not None else f" >= {lo:g}" if lo is not None
              else f" <= {hi:g}" if hi is not None else "")

    def check(inst: Any, attribute: Any, value: Any) -> None:
        ok = (not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
              and (integer or math.isfinite(value)) and (lo is None or value >= lo) and (hi is None or value <= hi))
        if not ok:
            raise ValueError(f"{camel(attribute.name)}: expected {kind}{bounds}, got {value!r}")
    return check


#: largest CPU (milli) of a typical pod: far above any node, far below int64 in the numpy columns
MAX_MILLI_CPU = 2**40


@attrs.define
class TypicalPod:
    """One entry of the FGD target workload (the paper's ``TargetPod``)."""

    milli_cpu: int = attrs.field(validator=_number(0, MAX_MILLI_CPU, integer=True))
    milli_gpu: int = attrs.field(default=0, validator=_number(0, MILLI, integer=True))
    gpu_number: int = attrs.field(default=0, validator=_number(0, MAX_GPUS_PER_NODE, integer=True))
    gpu_spec: str = ""
    weight: float = attrs.field(default=1.0, validator=_number(0))


@attrs.define
class ShareSize:
    """One share size of fgdlp's distribution: per-GPU milli (1–999) and its relative frequency."""

    milli_gpu: int = attrs.field(validator=_number(1, MILLI - 1, integer=True))
    weight: float = attrs.field(default=1.0, validator=_number(0))


@attrs.define
class Args:
    policy: str = attrs.field(default="spread", converter=_policy)
    #: FGD target workload; empty = learnt from the pods the scheduler has seen
    typical_pods: list[TypicalPod] = attrs.field(factory=list)
    popularity_threshold: float = attrs.field(default=95.0, validator=_number(0, 100))
    #: with a learnt workload, rebuild it after this many new pods
    workload_refresh_pods: int = attrs.field(default=100, validator=_number(0, integer=True))
    #: seed of the ``random`` policy's GPU choice (numpy's generators take a non-negative seed)
    seed: int = attrs.field(default=0, validator=_number(0, integer=True))
    #: ``random`` (the kernel's uniform choice among equal scores) or ``first`` (the first node in
    #: cluster order among the best, which the replay's node permutation makes random per seed)
    tie_break: str = attrs.field(default="random", validator=attrs.validators.in_(("random", "first")))
    #: fgdlp's share distribution; empty = learnt from the shared pods seen
    share_sizes: list[ShareSize] = attrs.field(factory=list)
    #: fgdlp opens a GPU for a configuration only on a node whose CPU left after the pod is at least this
    #: many times the typical CPU of the configuration's other shares (1.5 measured best of 1, 1.5, 2)
    lp_cpu_margin: float = attrs.field(default=1.5, validator=_number(0))
    #: Koordinator's DeviceShareArgs field: no GPU NUMA hints, no GPU choice by the NUMA policy's affinity
    disable_device_NUMA_topology_alignment: bool = False


def typical_weights(pods: list[TypicalPod]) -> list[tuple[frag.PodKey, float]]:
    """``args.typical_pods`` as ``[(key, p)]`` with the weights normalised to sum to 1."""
    tot = sum(t.weight for t in pods) or 1.0
    return [((t.milli_cpu, t.milli_gpu, t.gpu_number, t.gpu_spec), t.weight / tot) for t in pods]


class GpuShare:
    """Stateful per scheduler: the GPU inventory, allocations, FGD caches and the learnt workload."""

    def __init__(self) -> None:
        self.inv: Inventory | None = None
        self._inv_key: tuple | None = None
        self._sync_key: tuple | None = None
        self.rng = np.random.default_rng(0)
        self.workload: frag.Workload | None = None
        self._fixed_workload = False
        self._seen: dict[str, frag.PodKey] = {}
        self._seen_order: deque[str] = deque()
        self._since_refresh = 0
        self._cache: BoundedCache[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = BoundedCache(1024)  # FGD's
        self._frag_cache: tuple[np.ndarray, np.ndarray] | None = None
        self.packer = lp.Packer()
        self._shares_seen: Counter = Counter()
        self._shares_since = 0
        self._lp_counted: dict[str, None] = {}  # insertion-ordered, bounded by LP_COUNTED_MAX
        self._warned: BoundedCache[Any, bool] = BoundedCache(65536)  # inventory errors already logged
        self._policies: dict[str, Policy] = {}
        self._numa_memo: BoundedCache[tuple, ProviderResult] = BoundedCache(65536)  # GPU NUMA hints per node state

    def policy(self, args: Args) -> Policy:
        """The policy object of ``args.policy``, bound to this plugin."""
        pol = self._policies.get(args.policy)
        if pol is None:
            pol = self._policies[args.policy] = POLICIES[args.policy](self)
        return pol

    # -- configuration ---------------------------------------------------------------------------
    @staticmethod
    @hookimpl
    def plugin_args() -> type[Args]:
        return Args

    # -- node resources (koordfw manager; simulate for nodes without device allocatable) ---------------
    @hookimpl
    def node_resources(self, node: NodeView, now: float, last_update: float | None, colocation: dict[str, Any] | None,
                       handle: Handle) -> dict[str, Any] | None:
        """The node's device resources from its Device (see :mod:`.node_resources`). Without a colocation
        configuration (``koordfw simulate`` without slo-controller-config) only a node that has none of
        these resources in its allocatable gets them derived; otherwise the node's strategy decides."""
        n = getattr(node, "node", node)
        device = handle.cluster.get_object("Device", n.name)
        if colocation is None:
            if device is None or any(r in n.allocatable for r in node_res.RESOURCE_NAMES):
                return None
            res = node_res.device_resources(device, self._warned)
            return {k: v for k, v in res.items() if v is not None} or None
        strategy = node_res.node_strategy(colocation, n.labels, n.annotations)
        if not strategy["enable"]:
            return None
        res = node_res.device_resources(device, self._warned)
        old = {r: n.allocatable.get(r) for r in res}
        if not node_res.needs_sync(old, res, last_update=last_update, now=now, strategy=strategy):
            return None
        return res

    @hookimpl
    def startup(self, args: Args, handle: Handle) -> None:
        self.rng = np.random.default_rng(args.seed)
        if args.typical_pods:
            self._fixed_workload = True
            self._weighted = typical_weights(args.typical_pods)
        self.sync(handle.cluster)
        for e in handle.cluster.pods.values():
            self._observe(e.pod)
        if self.policy(args).needs_lp and args.share_sizes:
            self.packer.weights = self._solve({s.milli_gpu: s.weight for s in args.share_sizes})

    @staticmethod
    def _solve(dist: dict[int, float]) -> dict:
        try:
            return lp.solve(dist)
        except ImportError:
            raise RuntimeError("policy fgdlp needs scipy for its configuration LP (pip install scipy)") from None

    def _learn_share(self, req: GpuRequest | None, args: Args) -> None:
        """fgdlp without ``shareSizes``: count shared pods; solve the LP after every LP_LEARN_EVERY."""
        if args.share_sizes or req is None or req.count != 1 or req.milli >= MILLI:
            return
        self._shares_seen[req.milli] += 1
        self._shares_since += 1
        if self._shares_since >= LP_LEARN_EVERY:
            self._shares_since = 0
            self.packer.weights = self._solve(dict(self._shares_seen))
            self.packer.opened.clear()  # match the new proportions from here on
            self.packer.n_opened = 0

    # -- state -----------------------------------------------------------------------------------
    def sync(self, cluster: ClusterView) -> Inventory:
        """Bring the inventory up to date with the cluster (nodes, Devices, departed or annotated pods)."""
        devs = cluster.objects_of("Device")
        key = (cluster.num_nodes, cluster.labels_generation, IdentityKey(cluster, *devs.values()))
        if key != self._inv_key or self.inv is None:  # (inv is None only while _inv_key is)
            old = self.inv
            self.inv = Inventory(cluster, self._warned)
            if old is not None:  # keep what we reserved on nodes that still exist
                for uid, a in old.allocs.items():
                    if a.node < cluster.num_nodes:
                        self.inv.add(uid, a)
            self._inv_key = key
            self._sync_key = None
            self._cache.clear()
            self._frag_cache = None
            if self.workload is not None and self.workload.models != self.inv.models:
                self.workload = self.workload.with_models(self.inv.models)
        sk = (cluster.free_generation, len(cluster.pods))
        if sk != self._sync_key:
            self.inv.reconcile(pod_tag)
            self._sync_key = sk
        return self.inv

    def node_version(self, cluster: ClusterView, idx: np.ndarray | slice) -> np.ndarray:
        inv = self.inv
        assert inv is not None  # sync built it
        return cluster.node_version[idx] + inv.version[idx]

    def cpu_left(self, cluster: ClusterView, idx: np.ndarray) -> np.ndarray:
        c = cluster.resource_index("cpu")
        return cluster.allocatable[idx, c] - cluster.requested[idx, c]

    def _observe(self, pod: Pod) -> None:
        if self._fixed_workload or pod.uid in self._seen:
            return
        try:
            key = pod_key(pod)
        except InvalidGpuRequest:
            return
        self._seen[pod.uid] = key
        self._since_refresh += 1

    def target_workload(self, args: Args) -> frag.Workload:
        """M: the args' typical pods, or learnt from the pods seen (rebuilt every N new pods)."""
        models = self.inv.models if self.inv is not None else ()
        if self._fixed_workload:
            if self.workload is None or self.workload.models != models:
                self.workload = frag.make_workload(self._weighted, models)
            return self.workload
        if self.workload is None or self._since_refresh >= max(args.workload_refresh_pods, 1):
            self.workload = frag.typical_pods(self._seen.values(), models, args.popularity_threshold)
            self._since_refresh = 0
            self._cache.clear()
            self._frag_cache = None
        return self.workload

    def node_frag_milli(self, cluster: ClusterView, args: Args) -> np.ndarray:
        """Fragmented GPU milli per node under M, recomputed only for nodes that changed."""
        inv = self.sync(cluster)
        w = self.target_workload(args)
        ver = self.node_version(cluster, slice(None))
        if self._frag_cache is None or len(self._frag_cache[0]) != len(ver):
            self._frag_cache = (np.full(len(ver), -1, dtype=np.int64), np.zeros(len(ver)))
        fv, fr = self._frag_cache
        stale = np.flatnonzero(fv != ver)
        if len(stale):
            fr[stale] = frag.node_frag(self.cpu_left(cluster, stale), inv.left[stale], inv.model[stale], w)
            fv[stale] = ver[stale]
        return fr

    # -- scheduling cycle ------------------------------------------------------------------------
    @hookimpl
    def pre_filter(self, pod: Pod, state: CycleState, args: Args, handle: Handle) -> Status | None:
        self.sync(handle.cluster)
        self._observe(pod)
        try:
            req = pod_gpu_request(pod)
        except InvalidGpuRequest as e:
            return Status.unresolvable(str(e))
        state[_REQ] = req
        if req is not None and ANNOTATION_DEVICE_ALLOCATE_HINT in pod.annotations:
            try:
                state[_SCOPE] = topo.required_scope(pod.annotations)
            except ValueError as e:
                return Status.unresolvable(f"pod {pod.key}: annotation {ANNOTATION_DEVICE_ALLOCATE_HINT}: {e}")
        if self.policy(args).needs_lp and not args.share_sizes and pod.uid not in self._lp_counted:
            self._lp_counted[pod.uid] = None  # count each pod once, however often it is retried
            if len(self._lp_counted) > LP_COUNTED_MAX:
                del self._lp_counted[next(iter(self._lp_counted))]
            self._learn_share(req, args)
        if req is None:
            return Status.skip()
        inv = cast(Inventory, self.inv)  # synced above
        if not inv.any_gpu:
            return Status.unresolvable(f"{INSUFFICIENT}: no node has GPU devices")
        if inv.any_numa and not args.disable_device_NUMA_topology_alignment:  # a NUMA hint provider (topology.py)
            providers = state.get(NUMA_HINT_PROVIDERS)
            if providers is None:
                providers = state[NUMA_HINT_PROVIDERS] = {}
            providers["gpu_share"] = GpuNUMAHints(self, req)
        return None

    def numa_hints(self, req: GpuRequest, view: NodeView) -> ProviderResult:
        """The GPU NUMA hints of ``view`` for ``req`` (:func:`.topology.numa_hints`), memoised by the node's
        GPU state."""
        inv = cast(Inventory, self.inv)
        i = view.index
        key = (IdentityKey(inv), i, int(inv.version[i]), req.core, req.memory_ratio, req.memory_bytes, req.count, req.milli)
        hit = self._numa_memo.get(key)
        if hit is None:
            fit = inv.fit_devices(np.array([i]), req.core, req.memory_ratio, req.memory_bytes)[0]
            hints, feasible = topo.numa_hints(inv, i, fit, req.count, req.milli >= MILLI)
            if hints is None:
                hit = (None, None)
            elif not feasible:
                hit = (None, topo.ERR_INSUFFICIENT_NUMA_SCOPED_DEVICES)
            else:
                hit = ({topo.GPU_HINT_RESOURCE: hints}, None)
            self._numa_memo[key] = hit
        return hit

    @hookimpl
    def filter(self, pod: Pod, nodes: NodeBatch, state: CycleState) -> FilterBatchResult:
        req = state.get(_REQ)
        if req is None:
            return None
        inv = cast(Inventory, self.inv)  # synced at pre_filter
        idx = nodes.idx
        ok = inv.fit_devices(idx, req.core, req.memory_ratio, req.memory_bytes).sum(axis=1) >= req.count
        if req.spec:
            allowed = np.array([m in req.spec.split("|") for m in inv.models] + [False], dtype=np.bool_)
            ok &= allowed[inv.model[idx]]
        required = state.get(_SCOPE, 0)
        if required and req.milli >= MILLI:  # whole GPUs within the required topology scope: node by node
            return self._filter_scoped(nodes, ok, req, required)
        if ok.all():
            return None
        # the kernel's mask form: one shared Status, no per-node Python work for the common case
        if not inv.errors:
            return ok, _INSUFFICIENT
        views = nodes.cluster.views
        reasons = [None if good else (inv.errors.get(views[i].name) or _INSUFFICIENT)
                   for i, good in zip(idx.tolist(), ok.tolist())]
        return ok, reasons

    def _filter_scoped(self, nodes: NodeBatch, ok: np.ndarray, req: GpuRequest, required: int) -> FilterBatchResult:
        """The filter for a pod whose ``requiredTopologyScope`` asks its GPUs to share a scope (Koordinator
        runs the allocator at Filter): a node passes when :func:`.topology.scope_choose` finds them."""
        inv = cast(Inventory, self.inv)
        views = nodes.cluster.views
        out: list[Status | None] = []
        for i, good in zip(nodes.idx.tolist(), ok.tolist()):
            if not good:
                out.append(Status.unschedulable(inv.errors.get(views[i].name) or INSUFFICIENT))
            elif not topo.has_tree(inv, i):
                out.append(Status.unresolvable(topo.ERR_NODE_MISSING_GPU_DEVICE_TOPOLOGY_TREE))
            else:
                fit = inv.fit_devices(np.array([i]), req.core, req.memory_ratio, req.memory_bytes)[0]
                found = topo.scope_choose(inv, i, fit, req.count, required) is not None
                out.append(None if found else Status.unschedulable(topo.ERR_INSUFFICIENT_TOPOLOGY_SCOPED_GPU_DEVICES))
        mask = np.array([s is None for s in out], dtype=bool)
        return None if mask.all() else (mask, out)

    @hookimpl
    def pre_score(self, pod: Pod, nodes: NodeBatch, state: CycleState, args: Args) -> Status | None:
        if state.get(_REQ) is None and not self.policy(args).scores_cpu_pods:
            return Status.skip()
        return None

    @hookimpl
    def score(self, pod: Pod, nodes: NodeBatch, state: CycleState, args: Args, handle: Handle) -> np.ndarray:
        s = self.policy(args).score(handle.cluster, nodes.idx, pod, state.get(_REQ), args, state)
        if args.tie_break == "first" and len(s):
            s = np.minimum(s, 99)
            s[int(np.argmax(s))] = 100
        return s

    # -- device choice ---------------------------------------------------------------------------
    def choose_slots(self, cluster: ClusterView, i: int, pod: Pod, req: GpuRequest, args: Args,
                     choice: tuple | None = None, numa_mask: int | None = None, required: int = 0) -> list[int]:
        """The GPUs for ``req`` on node ``i``: within ``numa_mask`` (the NUMA policy's affinity) when given;
        whole GPUs from one topology scope (:func:`.topology.scope_choose`) on a node whose GPUs report their
        topology; else the policy's choice."""
        inv = self.inv
        assert inv is not None  # sync built it
        fit = inv.fit_devices(np.array([i]), req.core, req.memory_ratio, req.memory_bytes)[0]
        if numa_mask is not None:
            fit &= topo.in_affinity(inv, i, numa_mask)
        cand = np.flatnonzero(fit)
        if len(cand) < req.count:
            return []
        if req.milli >= MILLI:
            got = topo.scope_choose(inv, i, fit, req.count, required)
            if got is not None:
                return got
            if required and topo.has_tree(inv, i):
                return []
        return self.policy(args).choose(cluster, i, pod, req, args, fit, cand, choice)

    @hookimpl
    def reserve(self, pod: Pod, node: NodeView, state: CycleState, args: Args, handle: Handle) -> Status | None:
        req = state.get(_REQ)
        if req is None:
            return None
        inv = self.sync(handle.cluster)
        affinity = None if args.disable_device_NUMA_topology_alignment else state.get(NUMA_AFFINITY)
        mask = affinity(node) if affinity is not None else None
        required = state.get(_SCOPE, 0)
        slots = self.choose_slots(handle.cluster, node.index, pod, req, args, state.get(_CHOICE), mask, required)
        if len(slots) < req.count:
            return Status.unschedulable(topo.ERR_INSUFFICIENT_NUMA_SCOPED_DEVICES if mask is not None else
                                        topo.ERR_INSUFFICIENT_TOPOLOGY_SCOPED_GPU_DEVICES if required else INSUFFICIENT)
        rec = self.policy(args).reserved(node.index, slots, req, state.get(_CHOICE))
        if rec is not None:
            state[_LP_UNDO] = rec
        if req.memory_ratio is not None:
            mem, mem_b = req.memory_ratio, None
        else:
            mem_b = req.memory_bytes
            mem = int(inv.mem_slots_needed(np.array([node.index]), cast(int, mem_b))[0, slots[0]])
        a = Alloc(node.index, tuple(slots), req.core, mem, mem_b, req.milli * req.count, pod_tag(req.count, req.milli))
        inv.add(pod.uid, a)
        state[_ALLOC] = a
        return None

    @hookimpl
    def unreserve(self, pod: Pod, node: NodeView, state: CycleState) -> None:
        rec = state.pop(_LP_UNDO, None)
        if rec is not None:
            self.packer.undo(rec)
        if self.inv is not None:
            self.inv.release(pod.uid)
        state.pop(_ALLOC, None)

    @hookimpl
    def pre_bind(self, pod: Pod, node: NodeView, state: CycleState) -> dict[str, str] | None:
        a = state.get(_ALLOC)
        if a is None:
            return None
        return {DEVICE_ALLOCATED: device_allocated_json(cast(Inventory, self.inv), a)}

    def allocated_milli(self, uid: str) -> int:
        a = self.inv.allocs.get(uid) if self.inv is not None else None
        return a.milli if a is not None else 0


def device_allocated_json(inv: Inventory, a: Alloc) -> str:
    """Koordinator's annotation: ``{"gpu":[{"minor":0,"resources":{...}}]}``, quantities as strings,
    keys sorted; gpu-memory filled from the ratio, or the ratio from the bytes (``fillGPUTotalMem``)."""
    out = []
    for s in a.slots:
        total_b = int(inv.mem_bytes[a.node, s])
        res = {RESOURCE_GPU_CORE: str(a.core // 10)}
        if a.mem_bytes is not None:
            res[RESOURCE_GPU_MEMORY] = format_quantity(RESOURCE_GPU_MEMORY, a.mem_bytes)
            if total_b > 0:
                res[RESOURCE_GPU_MEMORY_RATIO] = str(int(a.mem_bytes / total_b * 100))
        else:
            res[RESOURCE_GPU_MEMORY_RATIO] = str(a.mem // 10)
            if total_b > 0:
                res[RESOURCE_GPU_MEMORY] = format_quantity(RESOURCE_GPU_MEMORY, a.mem // 10 * total_b // 100)
        out.append({"minor": int(inv.minor[a.node, s]), "resources": dict(sorted(res.items()))})
    return json.dumps({"gpu": out}, separators=(",", ":"))


class GpuNUMAHints:
    """gpu_share's NUMA hint provider for one pod's cycle (:data:`koordfw_cpu_topology.api.NUMA_HINT_PROVIDERS`):
    called with a node, its hints; :meth:`single_numa` answers the SingleNUMANode question for many nodes at once."""

    def __init__(self, plugin: GpuShare, req: GpuRequest) -> None:
        self.plugin = plugin
        self.req = req

    def __call__(self, view: NodeView) -> ProviderResult:
        return self.plugin.numa_hints(self.req, view)

    def versions(self, idx: np.ndarray) -> tuple[Any, np.ndarray]:
        """The inventory (its identity) and the nodes' GPU versions: the hints change only with them."""
        inv = cast(Inventory, self.plugin.inv)
        return IdentityKey(inv), inv.version[idx]

    def single_numa(self, idx: np.ndarray, zones: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """For nodes ``idx``: (whether the node's GPUs report NUMA nodes at all: the others have no preference,
        whether NUMA node ``zones[k]`` alone holds the request's GPUs: a (len(idx), len(zones)) bool array).
        The single-NUMA-node hints :func:`.topology.numa_hints` gives, vectorised."""
        inv = cast(Inventory, self.plugin.inv)
        req = self.req
        fit = inv.fit_devices(idx, req.core, req.memory_ratio, req.memory_bytes)
        numa = inv.numa[idx]
        healthy = inv.total_core[idx] > 0
        has = ((numa >= 0) & healthy).any(axis=1)
        out = np.zeros((len(idx), len(zones)), dtype=bool)
        for k, z in enumerate(zones):
            out[:, k] = (fit & (numa == z)).sum(axis=1) >= req.count
        return has, out
