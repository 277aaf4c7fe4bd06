"""The colocation replay: a week of service VMs plus the Alibaba batch queue, with and without colocation.

The cluster: ``nodes`` equal nodes; one LS pod per VM (``koord-prod``, QoS LS, requests = the week's
maximum provisioned cores and memory), scheduled at the start by the real scheduler. Time advances in
5-minute slots on the engine's VirtualClock; each slot the VMs' usage comes from the trace.

Batch (the pod granularity): a Spark/YARN-style executor pool. A task's instances run on *executor pods*
of the task's shape class (plan cpu and memory rounded up to a grid); an executor has ``lanes`` instance
slots (``EXECUTOR_CORES`` cores of planned requests) and runs instances back to back, several tasks at
once. The queue dispatches ready tasks (arrived, every DAG parent done) in FIFO order onto free lanes, a
task taking at most its trace parallelism. Each slot the pool asks for executors (new pods, through
admission) for the queued lanes its free ones do not cover, shape by shape in the order of each shape's
longest-waiting task, each request no larger than the lanes wanted and scheduled as it is made (as the
scheduler places a new pod within its cycle); a request no node can take is withdrawn, its shape's next
requests are half the size (doubled back as they are placed), and the pool stops asking for the slot
after ``MAX_FAILS`` of them. An executor idle for a whole slot is deleted. So the scheduler sees
executors (tens of thousands a week), not the three million instances a day, and the kernel with the
real plugins does every placement.

Per slot and node (``koordfw`` mode): the agent's NodeMetric aggregation (:class:`koordfw.NodeMetricReporter`
on the node state), its QoS plan (:class:`koordfw.NodePlanner` with be_suppress and eviction) on the node
state, then the manager's node-resource step (:func:`koordfw.update_node_resources`: batch_resource with
Koordinator's update rules, resource_profile learning), then the scheduling cycles. BE pods get the CPU
the be_suppress quota leaves them, shared in proportion to demand; an executor's tasks run slower in the
same proportion (an instance given less CPU than it uses runs longer); an evicted executor's instances in
flight lose their progress and are retried. LS pods always get what they use (BE yields first).

Mid workloads (``mid_share``): a share of the jobs, drawn once per job of the trace, run on a second executor
pool whose pods are koord-mid (QoS LS, their requests renamed to ``kubernetes.io/mid-cpu`` / ``mid-memory``
by the colocation profile webhook); the agents then run the prediction plugin (its peak predictor publishes
``prodReclaimableMetric``) and the manager mid_resource. Mid executors get the CPU LS leaves before BE, are
never suppressed (be_suppress counts them with the LS pods) and never evicted.

The risk-budget mode (:func:`risk_profile`): batch and Mid sized from the LS usage distribution the
prediction plugin publishes (``riskBudget``), instead of the reclaim thresholds.

``kubernetes`` mode: the same jobs, executors as ordinary pods with the planned cpu/memory requests,
built-in plugins only, no agent, no NodeMetric, no batch resources; BE gets whatever CPU LS leaves.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import numpy as np
from koordfw_resource_profile.api import ANNOTATION_TEMPLATES

from koordfw import NodeState, PodState, build_registry
from koordfw.embed import (
    CollectPolicy,
    EmbeddedEngine,
    NodeMetricReporter,
    NodePlanner,
    PodAdmission,
    update_node_resources,
)
from koordfw.extension import BATCH_CPU, BATCH_MEMORY, LABEL_POD_QOS, MID_CPU, MID_MEMORY
from koordfw.inputs import make_node, make_pod

from .traces import SLOT, LSTrace, Task, TraceError

GiB = 2**30
#: planned cores of the largest executor pod (its lanes × the shape's cores, at least one lane)
EXECUTOR_CORES = 8.0
#: shape grid: plan cpu rounded up to a multiple of 0.5 core, plan memory to a multiple of 0.25 GiB
CPU_GRID = 0.5
MEM_GRID = 0.25
#: the pool stops asking for executors in a slot after this many requests the scheduler could not place
MAX_FAILS = 8
#: an evicted executor still pending is withdrawn after this long, or at once when its shape's queue
#: wants no lanes
PENDING_TIMEOUT = 6 * 300
#: most new executors one slot asks for
MAX_NEW_PER_SLOT = 96
#: the wave samples kept per task for the queueing-delay percentiles
WAVE_SAMPLES = 16
LS_ALLOCATION = 0.95
BATCH_LABEL = "koordfw.io/replay"
POOL_TEMPLATE = "pool:alibaba-batch"
#: the agents report NodeMetrics every REPORT_SLOTS slots (metricCollectPolicy reportIntervalSeconds and
#: aggregateDurationSeconds 600: koordlet's defaults are 60 and 300, the trace has one sample per 5 min),
#: and the manager recomputes the batch resources on each report; the QoS plan runs every slot
REPORT_SLOTS = 3
SUPPRESS_QUOTA_FILE = "cpu/kubepods/besteffort/cpu.cfs_quota_us"
#: the besteffort cgroup's cpuset: every CPU of the node (be_suppress's cfsQuota policy leaves it), which
#: BECPUEvict reads with the quota for the BE pods' real limit
BE_CPUSET_FILE = "cpuset/kubepods/besteffort/cpuset.cpus"
CFS_PERIOD = 100_000


def shape_of(t: Task) -> tuple[float, int]:
    cpu = max(CPU_GRID, math.ceil(t.plan_cpu / CPU_GRID - 1e-9) * CPU_GRID)
    mem_q = max(MEM_GRID, math.ceil(t.plan_mem / GiB / MEM_GRID - 1e-9) * MEM_GRID)
    return cpu, int(mem_q * GiB)


def recommended_profile() -> dict[str, Any]:
    """koordfw's recommended profile for the replay. Resource profiling right-sizes BE requests to the median
    of the pool's node-sum usage / request plus the 10 % margin (Koordinator's p95 changes no request on
    this data: the node-sum ratio's p95 is above 1 / 1.1). The reclaim threshold is 65 % and the suppress
    threshold 70 % (Koordinator's 60 and 65 plus 5 points each), with BECPUEvict on (satisfaction lower 60 %,
    the most Koordinator accepts, upper 80 %): an executor left behind on a node whose LS usage rose
    and stayed is evicted and rescheduled where there is room, instead of running throttled there for
    hours. Over eight batch samples (docs/benchmarks.md): no LS-starved slot, 0.30-1.02 % of node-slots over
    capacity (0.42-1.75 % without BECPUEvict at Koordinator's thresholds)."""
    return {"pluginConfig": {
        "batch_resource": {"enable": True, "cpuReclaimThresholdPercent": 65},
        "be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 70},
        "eviction": {"cpuEvictEnable": True, "cpuEvictBESatisfactionLowerPercent": 60,
                     "cpuEvictBESatisfactionUpperPercent": 80},
        # NodeMetrics come every REPORT_SLOTS slots: load_aware's expiry is three report intervals, as its
        # default (180 s) is for koordlet's 60 s reports
        "load_aware": {"nodeMetricExpirationSeconds": 3 * REPORT_SLOTS * SLOT},
        "resource_profile": {"enable": True, "cpuPercentile": 50},
    }}


#: the prediction plugin's cold start in the risk profiles: every LS pod of the replay starts at once, so
#: Koordinator's 24 h would sell nothing by risk for the first day (its pods all "unpredicted")
RISK_COLD_START = "2h"


def risk_profile(epsilon: float) -> dict[str, Any]:
    """koordfw's risk-budget mode (docs/plugins/risk_budget.md) on the recommended profile: batch-cpu and
    batch-memory sized from the LS usage distribution the agents' prediction plugin publishes, so that
    P(LS + BE usage > capacity) <= ``epsilon`` per node and resource (Bonferroni over the system, koord-prod and
    no-class components), instead of the reclaim threshold; Mid resources sized the same way. Suppress 70 %
    and BECPUEvict as recommended; prediction's cold start :data:`RISK_COLD_START`. Profiling at Koordinator's
    p95, not the recommended median: the budget bounds LS usage plus what is *sold*, so it holds only while
    BE pods use at most their requests (at the median, half of them use more: 2.2 % of node-slots over
    capacity at ε = 0.5 % on two days of the trace, against 0.8 % at p95)."""
    p = recommended_profile()
    cfg = p["pluginConfig"]
    cfg["resource_profile"] = {**cfg["resource_profile"], "cpuPercentile": 95}
    budget = {"cpu": epsilon, "memory": epsilon}
    cfg["batch_resource"] = {"enable": True, "riskBudget": budget}
    cfg["mid_resource"] = {"enable": True, "riskBudget": budget}
    cfg["prediction"] = {"coldStartDuration": RISK_COLD_START}
    return p


def with_mid(profile: dict[str, Any]) -> dict[str, Any]:
    """``profile`` for a replay with Mid workloads: the agents' prediction plugin (its Koordinator defaults,
    unless the profile configures it) publishes ``prodReclaimableMetric`` and mid_resource (Koordinator's
    defaults, unless configured) turns it into ``kubernetes.io/mid-cpu`` / ``mid-memory``."""
    cfg = dict(profile.get("pluginConfig", {}))
    cfg.setdefault("prediction", {})
    cfg.setdefault("mid_resource", {"enable": True})
    return {**profile, "pluginConfig": cfg}


def reclaim_percent(profile: dict[str, Any]) -> int:
    """The share of the cluster's CPU the profile's batch resources are meant to fill, which the batch sample
    is drawn for (:func:`batch_fraction`): batch_resource's ``cpuReclaimThresholdPercent`` (Koordinator's
    default 60); in the risk-budget mode, which has no threshold, be_suppress's
    ``cpuSuppressThresholdPercent`` (the most BE may use; 65 by default)."""
    cfg = profile.get("pluginConfig", {})
    if cfg.get("batch_resource", {}).get("riskBudget"):
        return int(cfg.get("be_suppress", {}).get("cpuSuppressThresholdPercent", 65))
    return int(cfg.get("batch_resource", {}).get("cpuReclaimThresholdPercent", 60))


def koordinator_profile() -> dict[str, Any]:
    """Koordinator's defaults: reclaim 60 %, suppress 65 % (cfsQuota), no CPU eviction, no profiling
    (requests as planned); BEMemoryEvict at 70 % as koordfw's eviction plugin ships it."""
    return {"pluginConfig": {
        "batch_resource": {"enable": True},
        "be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 65},
        "load_aware": {"nodeMetricExpirationSeconds": 3 * REPORT_SLOTS * SLOT},
        "resource_profile": {"enable": False},
    }}


@attrs.define(eq=False)
class Executor:
    """An executor pod of the pool (compared by identity: the pool's lists hold each one once)."""
    uid: str
    shape: int
    lanes: int
    cpu_req: float
    mem_req: float
    node: int = -1
    used: int = 0
    #: task index → lanes of it running here
    tasks: dict[int, int] = attrs.field(factory=dict)
    #: task index → instance-seconds done here (for the progress an eviction loses)
    work: dict[int, float] = attrs.field(factory=dict)
    idle_since: float = 0.0
    name: str = ""
    #: its node-side pod state and that state's usage dict (koordfw mode; rebuilt when the pod is rebound)
    state: tuple[PodState, dict[str, int]] | None = None
    #: a Mid executor (koord-mid, QoS LS, mid-cpu/mid-memory requests) rather than a batch one
    mid: bool = False


@attrs.define
class Result:
    mode: str
    nodes: int
    hours: list[dict[str, Any]]
    summary: dict[str, Any]
    series: dict[str, list[float]]


class Replay:
    """One mode's run. Build with the traces and options, then ``await run()``."""

    def __init__(self, ls: LSTrace, tasks: list[Task], *, mode: str, nodes: int, node_cpu: float,
                 node_memory: int, slots: int, batch_fraction: float, seed: int, profile: dict[str, Any],
                 progress: Callable[[int, int], None] | None = None, mid_share: float = 0.0) -> None:
        self.ls, self.mode, self.n = ls, mode, nodes
        self.node_cpu, self.node_memory = node_cpu, node_memory
        self.slots = slots
        self.mid_share = mid_share
        self.profile = with_mid(profile) if mid_share > 0 else profile
        self.progress = progress
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        #: one NodePlanner with the prediction plugin per node (koordfw mode, when the profile configures it)
        self.predictors: list[NodePlanner] = []
        self._jobs(tasks, batch_fraction)

    # -- the batch work ---------------------------------------------------------------------------
    def _jobs(self, tasks: list[Task], fraction: float) -> None:
        """Tile the hour: each hour, each job of the trace is taken with probability ``fraction``."""
        jobs: dict[str, list[Task]] = {}
        for t in tasks:
            jobs.setdefault(t.job, []).append(t)
        names = sorted(jobs)
        # a job of the hour is Mid (stable, as a streaming or online-training service) with probability
        # mid_share, drawn once per job of the trace: it is Mid every hour it is taken
        mid_jobs = {j for j, m in zip(names, (np.random.default_rng([self.seed, 7]).random(len(names))
                                             < self.mid_share).tolist(), strict=True) if m}
        hours = math.ceil(self.slots * SLOT / 3600)
        rows: list[tuple[float, Task, str]] = []
        for h in range(hours):
            pick = np.random.default_rng([self.seed, h]).random(len(names)) < fraction
            for j, take in zip(names, pick.tolist(), strict=True):
                if take:
                    for t in jobs[j]:
                        rows.append((self.ls.start + h * 3600 + t.arrival, t, f"{j}@{h}"))
        rows.sort(key=lambda r: (r[0], r[2], r[1].name))
        end = self.ls.start + self.slots * SLOT
        rows = [r for r in rows if r[0] < end]
        self.tasks = [r[1] for r in rows]
        # per-task state lives in Python lists: the event loop reads and writes them one element at a time,
        # where a list is several times cheaper than a numpy array (the same doubles either way)
        self.arrival = [float(r[0]) for r in rows]
        jid = [r[2] for r in rows]
        idx = {(jid[i], t.name): i for i, t in enumerate(self.tasks)}
        self.children: list[list[int]] = [[] for _ in rows]
        self.waiting = [0] * len(rows)
        for i, t in enumerate(self.tasks):
            for p in t.parents:
                k = idx.get((jid[i], p))
                if k is not None:
                    self.children[k].append(i)
                    self.waiting[i] += 1
        shapes: dict[tuple[float, int, bool], int] = {}
        self.shape = [0] * len(rows)
        for i, t in enumerate(self.tasks):
            self.shape[i] = shapes.setdefault((*shape_of(t), t.job in mid_jobs), len(shapes))
        keys = sorted(shapes, key=lambda s: shapes[s])
        #: each shape's (cpu, memory), and whether its executors are Mid
        self.shapes = [(c, m) for c, m, _mid in keys]
        self.shape_mid = [mid for _c, _m, mid in keys]
        self.jobs_taken = len(set(jid))
        self.mid_jobs_taken = len({j for j, (_a, t, _) in zip(jid, rows, strict=True) if t.job in mid_jobs})

    # -- the cluster --------------------------------------------------------------------------------
    def _registry(self) -> Any:
        if self.mode == "kubernetes":
            return build_registry({"percentageOfNodesToScore": 100}, only=())
        prof = {"percentageOfNodesToScore": 100, **{k: v for k, v in self.profile.items() if k != "pluginConfig"},
                "pluginConfig": {k: v for k, v in self.profile.get("pluginConfig", {}).items()
                                 if k not in ("be_suppress", "eviction", "prediction")}}
        only = ["batch_resource", "load_aware", "colocation_profile", "resource_profile"]
        if "mid_resource" in prof["pluginConfig"]:
            only.append("mid_resource")
        return build_registry(prof, only=tuple(only))

    def _prediction_registry(self) -> Any | None:
        """One node's prediction plugin (the agents' peak predictor), when the profile configures it: it keeps
        one node's models, so each node gets its own."""
        cfg = self.profile.get("pluginConfig", {})
        if "prediction" not in cfg:
            return None
        return build_registry({"pluginConfig": {"prediction": cfg["prediction"]}}, only=("prediction",))

    def _agent_registry(self) -> Any:
        cfg = self.profile.get("pluginConfig", {})
        return build_registry({"pluginConfig": {k: cfg[k] for k in ("be_suppress", "eviction") if k in cfg}},
                              only=("be_suppress", "eviction"))

    async def run(self) -> Result:
        import anyio

        t_wall = time.perf_counter()
        registry = self._registry()
        self.engine = self._engine(registry)
        koord = self.mode == "koordfw"
        objects = [{"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                    "metadata": {"name": "replay-batch"},
                    "spec": {"selector": {"matchLabels": {BATCH_LABEL: "batch"}}, "qosClass": "BE",
                             "priorityClassName": "koord-batch", "koordinatorPriority": 5000}},
                   {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koord-batch"},
                    "value": 5000},
                   {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                    "metadata": {"name": "replay-mid"},
                    "spec": {"selector": {"matchLabels": {BATCH_LABEL: "mid"}}, "qosClass": "LS",
                             "priorityClassName": "koord-mid", "koordinatorPriority": 7000}},
                   {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koord-mid"},
                    "value": 7000},
                   {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "batch", "labels": {"kubernetes.io/metadata.name": "batch"}}}]
        self.admission = PodAdmission(registry, objects, clock=self.engine.clock, seed=self.seed) if koord else None
        if koord:
            self.planner = NodePlanner(self._agent_registry(), self.engine.clock)
            policy = CollectPolicy(aggregate_duration_seconds=REPORT_SLOTS * SLOT,
                                   report_interval_seconds=REPORT_SLOTS * SLOT, durations=None)
            self.reporters = [NodeMetricReporter(policy, sample_interval=SLOT) for _ in range(self.n)]
            regs = [self._prediction_registry() for _ in range(self.n)]
            self.predictors = [NodePlanner(r, self.engine.clock) for r in regs if r is not None]
            self.quota = np.full(self.n, -1.0)  # the besteffort cfs quota in force (µs per period; -1 none)
            self.last_update: dict[str, float] = {}
            self._ls_static: list[tuple[int, int, PodState, dict[str, int]]] | None = None
            self._ls_pods_of: list[list[Any]] = []
        await self.engine.start()
        self.stats = _Stats(self.slots, self.n)
        with _fewer_collections():
            async with anyio.create_task_group() as tg:
                self.tg = tg
                await self._place_ls()
                await self._loop()
        await self.engine.stop()
        wall = time.perf_counter() - t_wall
        return self.stats.result(self, wall)

    def _engine(self, registry: Any) -> EmbeddedEngine:
        """The embedded cluster of ``n`` equal nodes, empty; ``self.cluster`` its read-only view."""
        cpu_m, mem_b = int(self.node_cpu * 1000), int(self.node_memory)
        nodes = [make_node(f"node-{i:03d}", allocatable={"cpu": f"{cpu_m}m", "memory": str(mem_b), "pods": "512"})
                 for i in range(self.n)]
        engine = EmbeddedEngine(registry, nodes=nodes, seed=self.seed, start_time=float(self.ls.start))
        self.cluster = engine.view
        return engine

    async def place_only(self) -> int:
        """Build the cluster and place the LS pods only; the number left unplaced."""
        self.engine = self._engine(self._registry())
        await self.engine.start()
        import anyio

        async with anyio.create_task_group() as tg:
            self.tg = tg
            await self._place_ls()
        await self.engine.stop()
        return self.ls_unplaced

    async def _place_ls(self) -> None:
        ls = self.ls
        self.ls_pods = []
        # created largest first (as an operator migrating VMs places the big ones first), so that the
        # scheduler's spreading does not strand the large VMs
        order = sorted(range(len(ls.vms)), key=lambda j: (-ls.request_cores[j], -ls.request_memory[j], j))
        pods: dict[int, Any] = {}
        for j in order:
            vm = ls.vms[j]
            p = make_pod(f"vm-{vm}", "services", requests={"cpu": f"{int(math.ceil(ls.request_cores[j] * 1000))}m",
                                                            "memory": str(int(ls.request_memory[j]))},
                         labels={LABEL_POD_QOS: "LS", "app": f"vm-{vm}"}, priorityClassName="koord-prod", priority=9000)
            # created now, as the API server stamps it (the agents' predictor counts a pod's age from it)
            p = attrs.evolve(p, creation_timestamp=float(ls.start))
            pods[j] = p
            await self.engine.add_pod(p)
        self.ls_pods = [pods[j] for j in range(len(ls.vms))]
        while await self.engine.schedule_one(self.tg) is not None:
            pass
        names = {v.name: v.index for v in self.cluster.nodes}
        self.ls_node = np.full(len(ls.vms), -1, dtype=np.int64)
        for j, p in enumerate(self.ls_pods):
            cur = self.cluster.pod(p.uid)
            if cur is not None and cur.node_name:
                self.ls_node[j] = names[cur.node_name]
        self.ls_unplaced = int((self.ls_node < 0).sum())
        self.node_index = names
        placed = self.ls_node >= 0
        self.ls_req_cpu = np.bincount(self.ls_node[placed], weights=ls.request_cores[placed], minlength=self.n)

    # -- the slot loop ------------------------------------------------------------------------------
    async def _loop(self) -> None:
        ls = self.ls
        n = self.n
        T = len(self.tasks)
        self.remaining = [float(t.inst * t.duration) for t in self.tasks]  # instance-seconds left
        self.assigned = [0] * T  # lanes held
        self.state = [0] * T  # 0 not arrived, 1 waiting parents, 2 ready/running, 3 done
        self.ready_at = [math.nan] * T
        self.first_at = [math.nan] * T
        self.finished_at = [math.nan] * T
        self.rate = [0.0] * T
        self.t_ref = [0.0] * T
        self.version = [0] * T
        #: each task's measured cpu and memory per instance (read per lane in the hot loops)
        self.task_cpu = [t.cpu for t in self.tasks]
        self.task_mem = [t.mem for t in self.tasks]
        self.queues: list[list[int]] = [[] for _ in self.shapes]  # FIFO of tasks wanting lanes
        self.qhead = [0] * len(self.shapes)
        #: free lanes of the bound executors, per shape
        self.free_lanes = [0] * len(self.shapes)
        #: lanes the queued tasks still want, per shape
        self.want = [0] * len(self.shapes)
        #: lanes of the next executor of each shape: the most (EXECUTOR_CORES), halved when the scheduler
        #: cannot place one, doubled back as they are placed (an autoscaler fitting its requests to the room)
        self.max_lanes = [max(1, int(EXECUTOR_CORES // cpu)) for cpu, _m in self.shapes]
        self.exec_lanes = list(self.max_lanes)
        self.heap: list[tuple[float, int, int]] = []
        self.executors: dict[str, Executor] = {}
        #: task → (executor, lanes) it runs on
        self.holders: dict[int, list[tuple[Executor, int]]] = {}
        self.by_shape: list[list[Executor]] = [[] for _ in self.shapes]
        self.pending: dict[str, Executor] = {}
        self.speed = np.ones(n)
        self.speed_of = self.speed.tolist()  # the same, per node, for the event loop
        self.speed_mid_of = [1.0] * n  # the Mid executors' speed, per node
        self.next_task = 0
        self._exec_seq = 0
        self.mid_bound = 0
        self.retried = 0
        t0 = float(ls.start)
        for k in range(self.slots):
            now = t0 + k * SLOT
            end = now + SLOT
            self.engine.clock.advance_to(now)
            await self._arrivals(now)
            self._dispatch_all(now)
            await self._autoscale(now)
            # this slot's CPU: LS first, then Mid (LS QoS, never suppressed), BE the rest (or what the
            # suppress quota leaves)
            placed = self.ls_node >= 0
            ls_cpu = np.bincount(self.ls_node[placed], weights=ls.cpu[k][placed], minlength=n)
            ls_mem = np.bincount(self.ls_node[placed], weights=ls.memory[k][placed], minlength=n)
            demand, mid_demand = self._be_demand()
            room = np.maximum(self.node_cpu - ls_cpu, 0.0)
            mid_grant = np.minimum(mid_demand, room)
            room = room - mid_grant
            if self.mode == "koordfw":
                budget = np.where(self.quota < 0, np.inf, self.quota / CFS_PERIOD)
                grant = np.minimum(demand, np.minimum(room, budget))
            else:
                grant = np.minimum(demand, room)
            self.speed = np.where(demand > 0, grant / np.where(demand > 0, demand, 1.0), 1.0)
            self.speed_of = self.speed.tolist()
            self.speed_mid_of = np.where(mid_demand > 0, mid_grant / np.where(mid_demand > 0, mid_demand, 1.0),
                                         1.0).tolist()
            self._rerate_all(now)
            await self._advance(now, end)
            self._settle_all(end)
            self.stats.slot(k, self, ls_cpu, demand + mid_demand, grant + mid_grant, mid_grant)
            self.engine.clock.advance_to(end)
            if self.mode == "koordfw":
                await self._node_side(end, ls_cpu, ls_mem, grant, mid_grant)
            if self.progress is not None and (k % 12 == 11 or k == self.slots - 1):
                self.progress(k + 1, self.slots)

    async def _arrivals(self, now: float) -> None:
        self._arrivals_until(now)

    def _cap(self, i: int) -> int:
        t = self.tasks[i]
        return min(t.parallelism, t.inst)

    def _ready(self, i: int, t: float) -> None:
        self.state[i] = 2
        self.ready_at[i] = t
        self.queues[self.shape[i]].append(i)
        self.want[self.shape[i]] += self._cap(i)

    def _be_demand(self) -> tuple[np.ndarray, np.ndarray]:
        """The CPU the bound executors' running instances want, per node: (batch, Mid)."""
        demand = [0.0] * self.n
        mid = [0.0] * self.n
        tcpu = self.task_cpu
        for e in self.executors.values():
            nd = e.node
            if nd < 0:
                continue
            d = mid if e.mid else demand
            for i, lanes in e.tasks.items():
                d[nd] += lanes * tcpu[i]
        return np.array(demand), np.array(mid)

    # -- the fluid progress of tasks ---------------------------------------------------------------
    def _settle(self, i: int, now: float) -> None:
        dt = now - self.t_ref[i]
        if dt > 0 and self.rate[i] > 0:
            self.remaining[i] = max(self.remaining[i] - self.rate[i] * dt, 0.0)
        self.t_ref[i] = now

    def _set_rate(self, i: int, now: float) -> None:
        self._settle(i, now)
        r = 0.0
        # a task runs on executors of its shape, all of one tier
        speed = self.speed_mid_of if self.shape_mid[self.shape[i]] else self.speed_of
        for e, lanes in self.holders.get(i, ()):
            r += lanes * speed[e.node]
        self.rate[i] = r
        self.version[i] += 1
        if r > 0:
            heapq.heappush(self.heap, (now + self.remaining[i] / r, i, self.version[i]))

    def _settle_all(self, now: float) -> None:
        """Account every running task's work up to ``now`` at the speeds in force."""
        for i, hs in self.holders.items():
            if hs:
                self._account_work(i, now)
                self._settle(i, now)

    def _rerate_all(self, now: float) -> None:
        """The speeds changed (a new slot): every running task's new rate and completion time."""
        for i, hs in list(self.holders.items()):
            if hs:
                self._set_rate(i, now)

    def _account_work(self, i: int, now: float) -> None:
        dt = now - self.t_ref[i]
        if dt <= 0:
            return
        speed = self.speed_mid_of if self.shape_mid[self.shape[i]] else self.speed_of
        for e, lanes in self.holders.get(i, ()):
            e.work[i] = e.work.get(i, 0.0) + lanes * speed[e.node] * dt

    async def _advance(self, now: float, end: float) -> None:
        """Run the slot: task arrivals and completions in time order, freed lanes and ready tasks dispatched
        at once (the speeds stay those of the slot)."""
        T = len(self.tasks)
        while True:
            while self.heap and (self.heap[0][2] != self.version[self.heap[0][1]] or self.state[self.heap[0][1]] != 2):
                heapq.heappop(self.heap)
            tc = self.heap[0][0] if self.heap else math.inf
            ta = self.arrival[self.next_task] if self.next_task < T else math.inf
            t = min(tc, ta)
            if t > end:
                return
            if ta <= tc:
                for i in self._arrivals_until(ta):
                    self._dispatch(self.shape[i], ta)
                continue
            _, i, _v = heapq.heappop(self.heap)
            self._account_work(i, t)
            self._settle(i, t)
            for sh in self._finish(i, t):
                self._dispatch(sh, t)

    def _arrivals_until(self, t: float) -> list[int]:
        """Tasks arrived by ``t``; returns those ready now."""
        ready = []
        while self.next_task < len(self.tasks) and self.arrival[self.next_task] <= t:
            i = self.next_task
            self.next_task += 1
            self.state[i] = 1
            if self.waiting[i] == 0:
                self._ready(i, self.arrival[i])
                ready.append(i)
        return ready

    def _finish(self, i: int, t: float) -> set[int]:
        """Task ``i`` completed at ``t``: its lanes freed, its children ready when their last parent is done.
        Returns the shapes with new free lanes or new ready tasks."""
        self.state[i] = 3
        self.finished_at[i] = t
        self.remaining[i] = 0.0
        self.rate[i] = 0.0
        touched = {self.shape[i]}
        self.want[self.shape[i]] -= max(self._cap(i) - self.assigned[i], 0)
        for e, lanes in self.holders.pop(i, []):
            e.used -= lanes
            if e.node >= 0:
                self.free_lanes[e.shape] += lanes
            e.tasks.pop(i, None)
            e.work.pop(i, None)
            if e.used == 0:
                e.idle_since = t
        self.assigned[i] = 0
        self.stats.completed(self, i, t)
        for c in self.children[i]:
            self.waiting[c] -= 1
            if self.waiting[c] == 0 and self.state[c] == 1:
                self._ready(c, t)
                touched.add(self.shape[c])
        return touched

    def _dispatch_all(self, now: float) -> None:
        for sh in range(len(self.shapes)):
            if self.qhead[sh] < len(self.queues[sh]):
                self._dispatch(sh, now)

    def _dispatch(self, sh: int, now: float) -> None:
        if self.free_lanes[sh] <= 0 or self.qhead[sh] >= len(self.queues[sh]):
            return
        free = [e for e in self.by_shape[sh] if e.node >= 0 and e.used < e.lanes]
        if not free:
            return
        q = self.queues[sh]
        h = self.qhead[sh]
        fi = 0
        while h < len(q) and fi < len(free):
            i = q[h]
            if self.state[i] != 2:
                h += 1
                continue
            t = self.tasks[i]
            want = min(t.parallelism, t.inst) - self.assigned[i]
            if want <= 0:
                h += 1
                continue
            changed = False
            while want > 0 and fi < len(free):
                e = free[fi]
                take = min(want, e.lanes - e.used)
                if take <= 0:
                    fi += 1
                    continue
                if not changed:
                    self._account_work(i, now)
                    self._settle(i, now)
                e.used += take
                self.free_lanes[sh] -= take
                self.want[sh] -= take
                e.tasks[i] = e.tasks.get(i, 0) + take
                self.holders.setdefault(i, []).append((e, take))
                self.assigned[i] += take
                want -= take
                changed = True
                if e.used >= e.lanes:
                    fi += 1
            if changed:
                if math.isnan(self.first_at[i]):
                    self.first_at[i] = now
                self._set_rate(i, now)
            if want <= 0:
                h += 1
        self.qhead[sh] = h
        # tasks still short of lanes stay queued at the head: compact the consumed prefix now and then
        if h > 4096:
            del q[:h]
            self.qhead[sh] = 0

    # -- the executor pool ----------------------------------------------------------------------------
    async def _autoscale(self, now: float) -> None:
        wants = self.want
        # idle executors (no lane used for a whole slot) leave; an evicted executor still pending after
        # PENDING_TIMEOUT, or that its shape's queue no longer wants, is withdrawn
        for e in list(self.executors.values()):
            if e.node >= 0:
                if e.used == 0 and now - e.idle_since >= SLOT:
                    await self._delete(e)
            elif now - e.idle_since >= PENDING_TIMEOUT or wants[e.shape] == 0:
                await self._delete(e)
        await self.engine.flush_queue()
        await self._schedule(now)
        # the shapes in the order of their longest-waiting queued task (the queue is FIFO across shapes)
        heads = []
        for sh in range(len(self.shapes)):
            if wants[sh] > 0:
                q, h = self.queues[sh], self.qhead[sh]
                while h < len(q) and self.state[q[h]] != 2:
                    h += 1
                if h < len(q):
                    heads.append((self.ready_at[q[h]], sh))
        heads.sort()
        # the batch and the Mid executors are two pools (two applications), each with its own limits: the Mid
        # pool's requests finding no mid-cpu do not stop the batch pool's
        budgets, fails = [MAX_NEW_PER_SLOT, MAX_NEW_PER_SLOT], [0, 0]
        faileds: list[list[tuple[float, int]]] = [[], []]
        for _ready, sh in heads:
            tier = int(self.shape_mid[sh])
            if budgets[tier] <= 0 or fails[tier] >= MAX_FAILS:
                if all(b <= 0 or f >= MAX_FAILS for b, f in zip(budgets, fails, strict=True)):
                    break
                continue
            failed = faileds[tier]
            cpu, mem = self.shapes[sh]
            need = wants[sh] - self.free_lanes[sh] - sum(e.lanes for e in self.by_shape[sh] if e.node < 0)
            # each request is scheduled as it is made (the scheduler places a new pod within its cycle):
            # the shape asks until the queue's lanes are covered or a request finds no node; that
            # request is withdrawn and the shape's next ones are half the size
            while need > 0 and budgets[tier] > 0:
                lanes = min(self.exec_lanes[sh], need)
                c, m = lanes * cpu, lanes * mem
                if any(fc <= c + 1e-9 and fm <= m for fc, fm in failed):
                    self.exec_lanes[sh] = max(1, lanes // 2)
                    break
                e = await self._create(sh, lanes, cpu, mem, now)
                budgets[tier] -= 1
                await self._schedule(now)
                if e.node < 0:
                    await self._delete(e)
                    failed.append((c, m))
                    self.exec_lanes[sh] = max(1, lanes // 2)
                    fails[tier] += 1
                    break
                need -= lanes
                if self.exec_lanes[sh] < self.max_lanes[sh]:
                    self.exec_lanes[sh] = min(self.max_lanes[sh], self.exec_lanes[sh] * 2)
        self._dispatch_all(now)

    async def _schedule(self, now: float) -> None:
        """Run the scheduling cycles of the pods queued; record the executors bound."""
        while await self.engine.schedule_one(self.tg) is not None:
            pass
        self._bound(now)

    async def _create(self, sh: int, lanes: int, cpu: float, mem: int, now: float) -> Executor:
        self._exec_seq += 1
        name = f"exec-{self._exec_seq}"
        mid = self.shape_mid[sh]
        tier = "mid" if mid else "batch"
        req = {"cpu": f"{int(round(lanes * cpu * 1000))}m", "memory": str(lanes * mem)}
        # one template for the pool's executors (as one Spark application's executor template)
        templates = POOL_TEMPLATE
        manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "batch", "uid": f"uid-{name}",
                                 "labels": {BATCH_LABEL: tier, "shape": str(sh)},
                                 "annotations": {ANNOTATION_TEMPLATES: templates}},
                    # no preemptionPolicy: koord-batch's (PreemptLowerPriority, as Koordinator ships it)
                    # applies, set by the colocation profile's priority class
                    "spec": {"containers": [{"name": "executor", "resources": {"requests": req}}]}}
        if self.admission is not None:
            pod = await self.admission.admit(manifest)
        else:
            pod = make_pod(name, "batch", requests=req, labels={BATCH_LABEL: tier})
            manifest["metadata"]["uid"] = pod.uid
        r = pod.requests
        cpu_name, mem_name = (MID_CPU, MID_MEMORY) if mid else (BATCH_CPU, BATCH_MEMORY)
        e = Executor(pod.uid, sh, lanes, r.get(cpu_name, r.get("cpu", 0)) / 1000.0,
                     float(r.get(mem_name, r.get("memory", 0))), idle_since=now, name=name, mid=mid)
        self.executors[e.uid] = e
        self.pending[e.uid] = e
        self.by_shape[sh].append(e)
        await self.engine.add_pod(pod)
        return e

    def _bound(self, now: float) -> None:
        for uid, e in list(self.pending.items()):
            cur = self.cluster.pod(uid)
            if cur is not None and cur.node_name:
                e.node = self.node_index[cur.node_name]
                e.idle_since = now
                self.free_lanes[e.shape] += e.lanes - e.used
                del self.pending[uid]
                self.mid_bound += e.mid

    async def _delete(self, e: Executor) -> None:
        self.executors.pop(e.uid, None)
        self.pending.pop(e.uid, None)
        if e.node >= 0:
            self.free_lanes[e.shape] -= e.lanes - e.used
        self.by_shape[e.shape].remove(e)
        await self.engine.delete_pod(e.uid)

    async def _evict(self, e: Executor, now: float) -> None:
        """The executor is evicted: its instances in flight lose their progress (retried), its lanes go back
        to the queue; the pod comes back pending (its controller recreates it) and is rescheduled."""
        self.free_lanes[e.shape] -= e.lanes - e.used
        for i, lanes in list(e.tasks.items()):
            self._account_work(i, now)
            self._settle(i, now)
            t = self.tasks[i]
            done_here = e.work.get(i, 0.0)
            # lanes run instances back to back: each lane is part-way through one instance
            lost = lanes * ((done_here / lanes) % t.duration) if t.duration > 0 else 0.0
            self.remaining[i] += lost
            self.retried += lanes
            hs = self.holders.get(i, [])
            self.holders[i] = [(x, k) for x, k in hs if x is not e]
            self.assigned[i] -= lanes
            self.want[self.shape[i]] += lanes
            self._set_rate(i, now)
            sh = self.shape[i]
            self.queues[sh].append(i)
        e.tasks.clear()
        e.work.clear()
        e.used = 0
        pod = self.cluster.pod(e.uid)
        if pod is not None:
            await self.engine.evict(pod, "evicted by the node agent")
        e.node = -1
        e.idle_since = now
        self.pending[e.uid] = e
        self.stats.evictions += 1
        self.stats.hour_evictions[min(int((now - self.ls.start) // 3600), len(self.stats.hour_evictions) - 1)] += 1

    # -- the node side (koordfw mode) ----------------------------------------------------------------
    async def _node_side(self, now: float, ls_cpu: np.ndarray, ls_mem: np.ndarray, grant: np.ndarray,
                         mid_grant: np.ndarray) -> None:
        ls = self.ls
        k = int((now - ls.start) // SLOT) - 1
        report = k % REPORT_SLOTS == 0
        if self._ls_static is None:
            # the placed LS pods never move: their pod states are built once, and each slot writes the
            # slot's usage into their usage dicts (no plan keeps a round's states past the round)
            self._ls_static = []
            self._ls_pods_of = [[] for _ in range(self.n)]
            for j, (p, nd) in enumerate(zip(self.ls_pods, self.ls_node.tolist(), strict=True)):
                if nd >= 0:
                    usage = {"cpu": 0, "memory": 0}
                    self._ls_static.append((j, int(nd), PodState(p.uid, p, "LS", "Burstable",
                                                                 f"kubepods/burstable/pod{p.uid}", usage=usage), usage))
                    self._ls_pods_of[nd].append(p)
        by_node: list[list[PodState]] = [[] for _ in range(self.n)]
        pods_of: list[list[Any]] = [list(ps) for ps in self._ls_pods_of]
        # int() of each value truncates as astype does for these non-negative amounts
        cpu_k = (ls.cpu[k] * 1000).astype(np.int64).tolist()
        mem_k = ls.memory[k].astype(np.int64).tolist()
        for j, nd, state, usage in self._ls_static:
            usage["cpu"] = cpu_k[j]
            usage["memory"] = mem_k[j]
            by_node[nd].append(state)
        demand = np.zeros(self.n)
        mid_demand = np.zeros(self.n)
        per_exec: list[tuple[Executor, float, float]] = []
        tcpu, tmem = self.task_cpu, self.task_mem
        for e in self.executors.values():
            if e.node < 0:
                continue
            d = sum(lanes * tcpu[i] for i, lanes in e.tasks.items())
            m = sum(lanes * tmem[i] for i, lanes in e.tasks.items())
            (mid_demand if e.mid else demand)[e.node] += d
            per_exec.append((e, d, m))
        grant_of, demand_of = grant.tolist(), demand.tolist()
        mid_grant_of, mid_demand_of = mid_grant.tolist(), mid_demand.tolist()
        #: the BE memory in use at the slot's end, per node: the sum of its executors' (the node's usage is
        #: its pods' sum, so the agent's system usage, node minus pods, stays 0)
        be_mem_now = [0.0] * self.n
        for e, d, m in per_exec:
            pod = self.cluster.pod(e.uid)
            if pod is None:
                continue
            nd = e.node
            be_mem_now[nd] += int(m)
            g, dd = (mid_grant_of[nd], mid_demand_of[nd]) if e.mid else (grant_of[nd], demand_of[nd])
            used = d * (g / dd) if dd > 0 else 0.0
            # an executor's state is kept while it stays bound as the same pod object; its usage is the slot's
            st = e.state
            if st is None or st[0].pod is not pod:
                be_usage: dict[str, int] = {}
                # a Mid executor is QoS LS (Burstable, its requests mid-*): be_suppress counts it with the LS
                # pods, eviction leaves it
                state = (PodState(e.uid, pod, "LS", "Burstable", f"kubepods/burstable/pod{e.uid}", usage=be_usage)
                         if e.mid else
                         PodState(e.uid, pod, "BE", "BestEffort", f"kubepods/besteffort/pod{e.uid}", usage=be_usage))
                st = e.state = (state, be_usage)
            st[1]["cpu"] = int(used * 1000)
            st[1]["memory"] = int(m)
            by_node[nd].append(st[0])
            pods_of[nd].append(pod)
        evict: list[tuple[Executor, str]] = []
        cap = {"cpu": int(self.node_cpu * 1000), "memory": int(self.node_memory)}
        cpus = f"0-{max(math.ceil(self.node_cpu), 1) - 1}"
        for nd, view in enumerate(self.cluster.nodes):
            used_cpu = int((ls_cpu[nd] + grant[nd] + mid_grant[nd]) * 1000)
            used_mem = int(ls_mem[nd]) + int(be_mem_now[nd])
            q = self.quota[nd]
            ns = NodeState(name=view.name, capacity=cap, allocatable=view.allocatable,
                           usage={"cpu": used_cpu, "memory": used_mem}, pods=tuple(by_node[nd]),
                           cgroups={SUPPRESS_QUOTA_FILE: str(int(q)), BE_CPUSET_FILE: cpus})
            if self.predictors:
                for err in await self.predictors[nd].collect(ns):
                    self.stats.collect_errors.append(err)
            self.reporters[nd].observe(ns, now)
            if report:
                self.engine.put_object({
                    "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": view.name},
                    "status": self.reporters[nd].status(now, pods_of[nd])})
            plan = await self.planner.plan(ns)
            for w in plan.writes:
                if w.path == SUPPRESS_QUOTA_FILE:
                    self.quota[nd] = float(w.value)
            for ev in plan.evictions:
                victim = self.executors.get(ev.pod_uid)
                if victim is not None and victim.node == nd:
                    evict.append((victim, ev.reason))
        for e, _reason in evict:
            await self._evict(e, now)
        if not report:
            return
        written = await update_node_resources(self.engine, self.last_update)
        # one NODE_UPDATE for the slot's writes (each would wake the same pods waiting for resources)
        if written:
            await self.engine.node_updated(written[0])


#: the garbage collector's thresholds during a run (generation 0 allocations, then collections of the
#: younger generation before an older one is collected); Python's defaults are (700, 10, 10)
RUN_GC_THRESHOLDS = (10_000, 20, 20)


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """A run allocates millions of short-lived objects (pods, node states, plans) over a heap of a few hundred
    MB that lives as long as the run: with the default thresholds the collector takes ~10 % of a replay (two
    days: 3.1 s of collections, 2.2 s of them full ones, against 0.7 s with these), the resident size stays
    the same. The process's thresholds are restored after the run."""
    old = gc.get_threshold()
    gc.set_threshold(*RUN_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*old)


class _Stats:
    """The per-slot and per-hour accounting (see the issue's list of figures)."""

    def __init__(self, slots: int, n: int) -> None:
        self.slots = slots
        hours = math.ceil(slots * SLOT / 3600)
        self.util = np.zeros(slots)
        self.alloc = np.zeros(slots)
        self.be_cpu = np.zeros(slots)
        self.mid_cpu = np.zeros(slots)
        self.throttled = np.zeros(slots)
        self.over = np.zeros(slots)
        self.starved = np.zeros(slots)
        self.above = np.zeros(slots)
        self.hour_done = np.zeros(hours)
        self.hour_evictions = np.zeros(hours, dtype=np.int64)
        self.waits: list[list[tuple[float, float]]] = [[] for _ in range(hours)]
        self.evictions = 0
        self.n = n
        #: the prediction plugins' collect failures (one message each)
        self.collect_errors: list[str] = []

    def slot(self, k: int, r: Replay, ls_cpu: np.ndarray, demand: np.ndarray, grant: np.ndarray,
             mid_grant: np.ndarray) -> None:
        """One slot: ``demand`` and ``grant`` of the executors, batch and Mid together; ``mid_grant`` Mid's."""
        cap = r.node_cpu * r.n
        self.util[k] = (ls_cpu.sum() + grant.sum()) / cap
        be_req = sum(e.cpu_req for e in r.executors.values() if e.node >= 0)
        self.alloc[k] = (r.ls_req_cpu.sum() + be_req) / cap
        self.mid_cpu[k] = mid_grant.sum()
        self.be_cpu[k] = grant.sum() - self.mid_cpu[k]
        self.throttled[k] = (demand - grant).sum()
        self.over[k] = int(((ls_cpu + demand) > r.node_cpu + 1e-9).sum())
        self.starved[k] = int((ls_cpu > r.node_cpu + 1e-9).sum())
        thr = r.profile.get("pluginConfig", {}).get("be_suppress", {}).get("cpuSuppressThresholdPercent", 65) / 100
        self.above[k] = int(((ls_cpu + grant) > thr * r.node_cpu + 1e-9).sum())

    def completed(self, r: Replay, i: int, t: float) -> None:
        h = min(int((t - r.ls.start) // 3600), len(self.hour_done) - 1)
        task = r.tasks[i]
        self.hour_done[h] += task.inst
        d0 = float(r.first_at[i] - r.ready_at[i]) if not math.isnan(r.first_at[i]) else 0.0
        span = max(t - float(r.first_at[i]), 0.0) if not math.isnan(r.first_at[i]) else 0.0
        par = max(1, min(task.parallelism, task.inst))
        waves = math.ceil(task.inst / par)
        per_wave = span / waves if waves else 0.0
        ks = range(waves) if waves <= WAVE_SAMPLES else np.linspace(0, waves - 1, WAVE_SAMPLES).astype(int).tolist()
        scale = waves / len(ks) if waves > WAVE_SAMPLES else 1.0
        for w in ks:
            count = min(par, task.inst - w * par) if waves <= WAVE_SAMPLES else par
            self.waits[h].append((d0 + w * per_wave, count * scale))

    def result(self, r: Replay, wall: float) -> Result:
        per_hour = 3600 // SLOT
        hours = []
        dt_h = SLOT / 3600
        for h in range(len(self.hour_done)):
            sl = slice(h * per_hour, min((h + 1) * per_hour, self.slots))
            u = self.util[sl]
            if not len(u):
                continue
            w50, w99 = _wpct(self.waits[h], (50, 99))
            hours.append({
                "hour": h, "cpu_utilisation_mean": _r(u.mean()), "cpu_utilisation_p95": _r(np.percentile(u, 95)),
                "allocation": _r(self.alloc[sl].mean()),
                "batch_instances_completed": int(self.hour_done[h]), "batch_wait_p50_s": _r(w50, 1),
                "batch_wait_p99_s": _r(w99, 1), "batch_cpu_hours": _r(self.be_cpu[sl].sum() * dt_h, 2),
                "be_throttled_cpu_hours": _r(self.throttled[sl].sum() * dt_h, 2),
                "evictions": int(self.hour_evictions[h]),
                "node_over_capacity_slots": int(self.over[sl].sum()), "ls_starved_slots": int(self.starved[sl].sum()),
                "node_slots_above_suppress_threshold": int(self.above[sl].sum())})
        allw = [x for ws in self.waits for x in ws]
        w50, w99 = _wpct(allw, (50, 99))
        node_slots = self.slots * self.n
        summary = {
            "nodes": r.n, "node_cpu": r.node_cpu, "node_memory": r.node_memory, "slots": self.slots,
            "cpu_utilisation_mean": _r(self.util.mean()), "cpu_utilisation_p95": _r(np.percentile(self.util, 95)),
            "allocation_mean": _r(self.alloc.mean()),
            "batch_instances_completed": int(self.hour_done.sum()),
            "batch_instances_submitted": int(sum(t.inst for t in r.tasks)),
            "batch_jobs_submitted": r.jobs_taken, "batch_tasks_submitted": len(r.tasks),
            "batch_wait_p50_s": _r(w50, 1), "batch_wait_p99_s": _r(w99, 1),
            "batch_cpu_hours": _r(self.be_cpu.sum() * dt_h, 2),
            "be_throttled_cpu_hours": _r(self.throttled.sum() * dt_h, 2),
            "evictions": int(self.evictions), "instances_retried": int(r.retried),
            "ls_starved_slots": int(self.starved.sum()),
            "node_over_capacity_slot_fraction": _r(self.over.sum() / node_slots, 6),
            "node_slots_above_suppress_threshold_fraction": _r(self.above.sum() / node_slots, 6),
            "executor_pods_created": r._exec_seq, "ls_pods_unplaced": r.ls_unplaced,
            "wall_seconds": _r(wall, 2)}
        if r.predictors:
            summary["prediction_errors"] = len(self.collect_errors)
        if r.mid_share > 0:
            summary["mid_jobs_submitted"] = r.mid_jobs_taken
            summary["mid_cpu_hours"] = _r(self.mid_cpu.sum() * dt_h, 2)
            summary["mid_executor_pods_bound"] = r.mid_bound
        series = {"utilisation": self.util.tolist(), "be_cpu": self.be_cpu.tolist(),
                  "over_capacity_slots": self.over.tolist(), "above_threshold_slots": self.above.tolist(),
                  "completed_per_hour": self.hour_done.tolist()}
        return Result(r.mode, r.n, hours, summary, series)


def _r(x: float, nd: int = 4) -> float:
    return round(float(x), nd)


def _wpct(samples: list[tuple[float, float]], qs: tuple[float, ...]) -> tuple[float, ...]:
    if not samples:
        return tuple(0.0 for _ in qs)
    a = np.array(samples)
    order = np.argsort(a[:, 0], kind="stable")
    v, w = a[order, 0], a[order, 1]
    c = np.cumsum(w)
    return tuple(float(v[min(int(np.searchsorted(c, c[-1] * q / 100.0, side="left")), len(v) - 1)]) for q in qs)


def default_nodes(ls: LSTrace, node_cpu: float, node_memory: int) -> int:
    """Enough nodes for the LS requests at ~95 % allocation (cpu and memory): the ratio's count, plus a
    node at a time while the scheduler (built-in plugins) cannot place every LS pod on them."""
    n = max(1, math.ceil(max(ls.request_cores.sum() / (LS_ALLOCATION * node_cpu),
                             ls.request_memory.sum() / (LS_ALLOCATION * node_memory))))
    import anyio

    # a VM larger than a node fits on none (it is reported unplaced): it does not ask for more nodes
    too_big = int(((ls.request_cores > node_cpu) | (ls.request_memory > node_memory)).sum())
    for extra in range(8):
        r = Replay(ls, [], mode="kubernetes", nodes=n + extra, node_cpu=node_cpu, node_memory=node_memory,
                   slots=0, batch_fraction=0.0, seed=0, profile={})
        if anyio.run(r.place_only) <= too_big:
            return n + extra
    return n + 8


def batch_fraction(ls: LSTrace, tasks: list[Task], nodes: int, node_cpu: float, load: float,
                   reclaim_percent: int = 60) -> tuple[float, float]:
    """(the share of the hour's jobs taken each hour, the batch cores it stands for): ``load`` times what
    the batch resources could hold at the tasks' measured usage, the batch resources estimated from the
    LS usage: ``nodes × cpu × reclaim% − mean LS usage`` (Koordinator's formula, cluster-wide)."""
    if load < 0 or not math.isfinite(load):
        raise TraceError(f"--batch-load: expected a number >= 0, got {load!r}")
    holdable = max(nodes * node_cpu * reclaim_percent / 100 - float(ls.cpu.sum(axis=1).mean()), 0.0)
    used_per_hour = sum(t.inst * t.duration * t.cpu for t in tasks) / 3600.0
    f = min(1.0, load * holdable / used_per_hour) if used_per_hour > 0 else 0.0
    return f, holdable


__all__ = ["Replay", "Result", "batch_fraction", "default_nodes", "koordinator_profile", "recommended_profile",
           "reclaim_percent", "risk_profile", "with_mid"]
