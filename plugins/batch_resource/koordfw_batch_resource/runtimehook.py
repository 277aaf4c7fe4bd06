"""The node side of batch resources: koordlet's ``BatchResource`` runtime hook and its reconciler
(``pkg/koordlet/runtimehooks/hooks/batchresource``), which hold a BE pod to the ``kubernetes.io/batch-cpu``
and ``kubernetes.io/batch-memory`` it requested.

For a pod labelled ``koordinator.sh/qosClass: BE`` (the label only: Koordinator's hook tests
``GetQoSClassByAttrs``, so a kube-BestEffort pod without the label is left alone), from the batch requests
and limits of its containers (the pod spec; without any there, the ``node.koordinator.sh/extended-resource-spec``
annotation; init containers and the pod overhead do not count at pod level, Koordinator's TODO)::

    pod cpu.shares        = MilliCPUToShares(Σ batch-cpu requests > 0)          (2 when none)
    pod cfs quota         = MilliCPUToQuota(Σ batch-cpu limits)                 -1 once a container has none
    pod memory limit      = Σ batch-memory limits                               -1 once a container has none
    container cpu.shares  = MilliCPUToShares(its batch-cpu request)             (2 when none)
    container cfs quota   = MilliCPUToQuota(its batch-cpu limit)                -1 when none
    container memory      = its batch-memory limit                              -1 when none

    MilliCPUToShares(m) = clamp(m * 1024 / 1000, 2, 262144), 2 for m <= 0
    MilliCPUToQuota(m)  = m * 100000 / 1000, -1 for <= 0, at least 1000

A Mid+BE pod (QoS BE on Koordinator's Mid resources) is held alike to its ``kubernetes.io/mid-cpu`` and
``mid-memory``: a container's mid and batch amounts of one kind add up (Koordinator's batchresource hook
manages the cgroups of Mid+BE pods the same way since the Mid tier's node support, koordinator#1442; kubelet
sees no cpu/memory requests on such a pod and gives its cgroup nothing of its own). A Mid+LS pod is left
alone, as Koordinator leaves it.

Only containers carrying some batch (or mid) resource are counted (or written). The quota is ``-1`` everywhere
when BE suppress runs with the ``cfsQuota`` policy (NodeSLO ``resourceUsedThresholdWithBE.enable`` and
``cpuSuppressPolicy: cfsQuota``, here be_suppress's args): the besteffort quota then bounds them, and a
child's quota may not exceed its parent's. A limited quota is divided by the node's
``node.koordinator.sh/cpu-normalization-ratio`` when that is above 1 (``ceil(quota / ratio)``).

cgroup v1 files: ``cpu.shares``, ``cpu.cfs_quota_us``, ``memory.limit_in_bytes``; v2: ``cpu.weight``
(kubelet's ``1 + (shares - 2) * 9999 / 262142``), ``cpu.max`` (``<quota|max> <period>``, the period kept),
``memory.max`` (``max`` for -1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import structlog

from koordfw import FileWrite, NodeState, PodState, QuantityError, canonical, warn_once
from koordfw.extension import (
    ANNOTATION_EXTENDED_RESOURCE_SPEC,
    BATCH_CPU,
    BATCH_MEMORY,
    LABEL_POD_QOS,
    MID_CPU,
    MID_MEMORY,
    QOS_BE,
)
from koordfw.inputs import loads_json

log = structlog.get_logger("koordfw.batch_resource")

PLUGIN = "batch_resource"
#: ``NormalizationRatioDiffEpsilon`` / the rule's ``ratioDiffEpsilon``: smaller ratio changes are ignored
RATIO_DIFF_EPSILON = 0.01
RUNTIME_CLASS_KATA = "kata"  # runtimeClassKata: containers of kata pods are not reconciled

# pkg/koordlet/util/system: cgroup.go, cgroup_resource.go
CPU_SHARE_UNIT = 1024
CPU_SHARES_MIN, CPU_SHARES_MAX = 2, 262144
CPU_WEIGHT_MIN, CPU_WEIGHT_MAX = 1, 10000
CFS_BASE_PERIOD = 100000
CFS_QUOTA_MIN = 1000
CFS_PERIOD_RANGE = (1000, 1000000)
#: a v1 memory limit at least this large reads back from "-1" (PAGE_COUNTER_MAX pages, any page size)
_V1_UNLIMITED_FLOOR = 2**62
_PAGE_SIZES = (4096, 16384, 65536)


# -- Koordinator's conversions ---------------------------------------------------------------------

def milli_cpu_to_shares(milli: int) -> int:
    """``sysutil.MilliCPUToShares``."""
    if milli <= 0:
        return CPU_SHARES_MIN
    return min(max(milli * CPU_SHARE_UNIT // 1000, CPU_SHARES_MIN), CPU_SHARES_MAX)


def milli_cpu_to_quota(milli: int) -> int:
    """``sysutil.MilliCPUToQuota``: µs per 100 ms period; -1 (unlimited) for no limit."""
    quota = milli * CFS_BASE_PERIOD // 1000 if milli > 0 else 0
    if quota <= 0:
        return -1
    return max(quota, CFS_QUOTA_MIN)


def shares_to_weight(shares: int) -> int:
    """``sysutil.ConvertCPUSharesToWeight`` (kubelet's): shares [2, 262144] → weight [1, 10000]."""
    w = 1 + ((shares - 2) * 9999) // 262142
    return min(max(w, CPU_WEIGHT_MIN), CPU_WEIGHT_MAX)


# -- the rule (rule.go) ------------------------------------------------------------------------------

@attrs.frozen
class Rule:
    """``GetCFSQuotaScaleRatio``: whether quotas are set at all, and the ratio limited ones are divided by
    (``-1``: none)."""

    cfs_quota_enabled: bool = True
    cpu_normalization_ratio: float = -1.0

    def quota(self, milli_limit: int) -> int:
        if not self.cfs_quota_enabled:
            return -1
        q = milli_cpu_to_quota(milli_limit)
        if q > 0 and self.cpu_normalization_ratio > 1.0:  # no support for a ratio in (0, 1)
            q = int(math.ceil(float(q) / self.cpu_normalization_ratio))
        return q


def cfs_quota_enabled(config: Mapping[str, Any]) -> bool:
    """``parseRuleForNodeSLO``: false when BE suppress is on with the ``cfsQuota`` policy. The NodeSLO's
    ``resourceUsedThresholdWithBE`` is be_suppress's args in koordfw (the agent maps the NodeSLO onto
    them), so they are read from the node state's pluginConfig; unset, Koordinator's default applies
    (off, ``cpuset``)."""
    raw = config.get("be_suppress") if isinstance(config, Mapping) else None
    if not isinstance(raw, Mapping):
        return True
    return not (raw.get("enable") is True and raw.get("cpuSuppressPolicy") == "cfsQuota")


def parse_ratio(raw: str | None) -> float:
    """``GetCPUNormalizationRatio``: ``-1`` without the annotation; ``ValueError`` for a value that is not
    a finite number above 0."""
    if raw is None:
        return -1.0
    try:
        v = float(raw.strip()) if len(raw) <= 64 else math.nan
    except ValueError:
        raise ValueError(f"parse cpu normalization ratio failed: {raw[:40]!r} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"illegal cpu normalization ratio: {raw[:40]!r}")
    return v


# -- a pod's batch resources (util.GetPodExtendedResources, apiext.GetExtendedResourceSpec) ----------

@attrs.frozen
class BatchSpec:
    """One container's batch requests and limits (Koordinator's ``ExtendedResourceContainerSpec``,
    only batch-cpu and batch-memory, canonical ints: the quantities' ``Value()``)."""

    requests: Mapping[str, int] = attrs.field(factory=dict)
    limits: Mapping[str, int] = attrs.field(factory=dict)


#: the resources a BE pod's cgroups are held to, under the batch name they are counted as: its batch-* and
#: mid-* (a Mid+BE pod) of one kind add up
HELD = ((BATCH_CPU, (BATCH_CPU, MID_CPU)), (BATCH_MEMORY, (BATCH_MEMORY, MID_MEMORY)))


def _held(rl: Mapping[str, int]) -> dict[str, int]:
    out = {}
    for name, sources in HELD:
        present = [rl[r] for r in sources if r in rl]
        if present:
            out[name] = sum(present)
    return out


def _batch_of(requests: Mapping[str, int], limits: Mapping[str, int]) -> BatchSpec | None:
    req, lim = _held(requests), _held(limits)
    return BatchSpec(req, lim) if req or lim else None


def _resource_list(raw: Any, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a resource list")
    out = {}
    for r in (BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY):
        if raw.get(r) is not None:
            try:
                out[r] = canonical(r, raw[r])
            except QuantityError as e:
                raise ValueError(f"{where}.{r}: {e}") from None
    return _held(out)


def spec_from_annotation(annotations: Mapping[str, str]) -> dict[str, BatchSpec] | None:
    """The ``node.koordinator.sh/extended-resource-spec`` annotation by container name; ``None`` without
    one or without ``containers``. ``ValueError`` names what is wrong."""
    raw = annotations.get(ANNOTATION_EXTENDED_RESOURCE_SPEC)
    if not raw:
        return None
    obj = loads_json(raw)
    if not isinstance(obj, Mapping):
        raise ValueError("expected a JSON object")
    containers = obj.get("containers")
    if containers is None:
        return None
    if not isinstance(containers, Mapping):
        raise ValueError("containers: expected a mapping of container name to {requests, limits}")
    out = {}
    for name, c in containers.items():
        if not isinstance(c, Mapping):
            raise ValueError(f"containers.{str(name)[:60]}: expected {{requests, limits}}")
        out[str(name)] = BatchSpec(_resource_list(c.get("requests"), f"containers.{str(name)[:60]}.requests"),
                                   _resource_list(c.get("limits"), f"containers.{str(name)[:60]}.limits"))
    return out


@attrs.frozen
class PodBatch:
    """What the hook knows of a BE pod: the pod-level spec (``None``: no batch resources) and each
    container's, by name (the spec's containers and init containers, or the annotation's)."""

    pod: dict[str, BatchSpec] | None
    containers: dict[str, BatchSpec]


def pod_batch(ps: PodState, warned: set | None = None) -> PodBatch | None:
    """The batch resources of a pod the hook acts on: ``None`` unless it has a manifest labelled BE."""
    pod = ps.pod
    if pod is None or pod.labels.get(LABEL_POD_QOS) != QOS_BE:
        return None
    from_spec = {c.name: b for c in pod.containers if (b := _batch_of(c.requests, c.limits)) is not None}
    init = {c.name: b for c in pod.init_containers if (b := _batch_of(c.requests, c.limits)) is not None}
    try:
        from_anno = spec_from_annotation(pod.annotations)
    except (ValueError, RecursionError) as e:
        warn_once(log, warned, (ps.uid, "extended-resource-spec", str(e)), "ignoring malformed annotation",
                  pod=pod.key, annotation=ANNOTATION_EXTENDED_RESOURCE_SPEC, error=str(e) or type(e).__name__)
        from_anno = None
    # the pod level: the spec's containers, else the annotation's. An annotation without any container
    # is taken as none: Koordinator would then write a pod memory limit of 0 (an empty sum)
    pod_level = from_spec or from_anno or None
    containers = dict(from_anno or {})
    containers.update(init)  # a container's own spec wins over the annotation
    containers.update(from_spec)
    return PodBatch(pod_level, containers)


# -- knob values (batch_resource.go) ---------------------------------------------------------------

@attrs.frozen
class Knobs:
    cpu_shares: int
    cfs_quota: int
    memory_limit: int


def _get(rl: Mapping[str, int], r: str) -> int:
    """``GetBatchMilliCPUFromResourceList`` / ``GetBatchMemoryFromResourceList``: -1 when absent."""
    return rl.get(r, -1)


def pod_knobs(containers: Mapping[str, BatchSpec], rule: Rule) -> Knobs:
    """``SetPodCPUShares``, ``SetPodCFSQuota``, ``SetPodMemoryLimit``."""
    request = sum(v for c in containers.values() if (v := _get(c.requests, BATCH_CPU)) > 0)
    cpu_limit = 0
    for c in containers.values():
        v = _get(c.limits, BATCH_CPU)
        if v <= 0:  # pod unlimited once a container is unlimited
            cpu_limit = -1
            break
        cpu_limit += v
    memory = 0
    for c in containers.values():
        v = _get(c.limits, BATCH_MEMORY)
        if v <= 0:
            memory = -1
            break
        memory += v
    return Knobs(milli_cpu_to_shares(request), rule.quota(cpu_limit), memory)


def container_knobs(spec: BatchSpec, rule: Rule) -> Knobs:
    """``SetContainerCPUShares``, ``SetContainerCFSQuota``, ``SetContainerMemoryLimit``."""
    request = max(_get(spec.requests, BATCH_CPU), 0)
    limit = max(_get(spec.limits, BATCH_CPU), 0)
    memory = _get(spec.limits, BATCH_MEMORY)
    return Knobs(milli_cpu_to_shares(request), rule.quota(limit), memory if memory > 0 else -1)


# -- cgroup files --------------------------------------------------------------------------------------

def knob_files(ns: NodeState, rel_dir: str) -> tuple[str, str, str]:
    """(shares, quota, memory limit) files of a cgroup dir, relative to the cgroup root."""
    if ns.cgroup_version == 1:
        return (ns.cgroup_file("cpu", rel_dir, "cpu.shares"), ns.cgroup_file("cpu", rel_dir, "cpu.cfs_quota_us"),
                ns.cgroup_file("memory", rel_dir, "memory.limit_in_bytes"))
    return (ns.cgroup_file("cpu", rel_dir, "cpu.weight"), ns.cgroup_file("cpu", rel_dir, "cpu.max"),
            ns.cgroup_file("memory", rel_dir, "memory.max"))


def _int(text: str | None) -> int | None:
    t = (text or "").strip()
    neg = t.startswith("-")
    digits = t[1:] if neg else t
    if not digits or len(digits) > 19 or not digits.isascii() or not digits.isdigit():
        return None
    return -int(digits) if neg else int(digits)


def _quota_of(text: str | None) -> int | None:
    """A quota as read (v1 ``-1``/µs, v2 ``max 100000``/``50000 100000``); ``None`` when unknown."""
    if text is None:
        return None
    head = (text.split() or [""])[0]
    if head == "max":
        return -1
    return _int(head)


def _period_of(text: str | None) -> int:
    parts = (text or "").split()
    n = _int(parts[1]) if len(parts) == 2 else None
    lo, hi = CFS_PERIOD_RANGE
    return n if n is not None and lo <= n <= hi else CFS_BASE_PERIOD


def _memory_equal(current: str | None, target: int, version: int) -> bool:
    """The current memory limit is the target already (as the kernel shows it: rounded down to a page,
    a v1 ``-1`` as a huge number), so writing it again would only log a write every round."""
    cur = _int(current)
    if cur is None:
        return current is not None and version == 2 and current.strip() == "max" and target < 0
    if target < 0:
        return version == 1 and cur >= _V1_UNLIMITED_FLOOR
    return cur == target or any(cur == target - target % p for p in _PAGE_SIZES)


def knob_writes(ns: NodeState, rel_dir: str, k: Knobs, current: Mapping[str, str]) -> list[FileWrite]:
    shares_f, quota_f, memory_f = knob_files(ns, rel_dir)
    if ns.cgroup_version == 1:
        out = [FileWrite(shares_f, str(k.cpu_shares), plugin=PLUGIN),
               FileWrite(quota_f, str(k.cfs_quota), plugin=PLUGIN)]
        memory = str(k.memory_limit)
    else:
        period = _period_of(current.get(quota_f))
        out = [FileWrite(shares_f, str(shares_to_weight(k.cpu_shares)), plugin=PLUGIN),
               FileWrite(quota_f, f"{'max' if k.cfs_quota < 0 else k.cfs_quota} {period}", plugin=PLUGIN)]
        memory = "max" if k.memory_limit < 0 else str(k.memory_limit)
    if not _memory_equal(current.get(memory_f), k.memory_limit, ns.cgroup_version):
        out.append(FileWrite(memory_f, memory, plugin=PLUGIN))
    return out


def _container_id(container_id: Any) -> str:
    """The id of a status ``containerID`` (``containerd://<id>``), ``""`` when there is none."""
    if not isinstance(container_id, str):
        return ""
    _, sep, cid = container_id.partition("://")
    return cid if sep else ""


def _dir_holds(name: str, cid: str) -> bool:
    """Whether a container cgroup dir name is the container ``cid``'s: ``<id>`` (cgroupfs) or
    ``<runtime prefix>-<id>.scope`` (systemd)."""
    return name == cid or (name.endswith(f"-{cid}.scope"))


def _sub_dirs(paths: Iterable[str], pod_dir: str, version: int) -> list[str]:
    """The cgroup dirs right below ``pod_dir`` that ``paths`` (files relative to the cgroup root; on v1
    under a controller) name."""
    out: list[str] = []
    for path in paths:
        rel = path.split("/", 1)[-1] if version == 1 else path
        if not rel.startswith(pod_dir + "/"):
            continue
        rest = rel[len(pod_dir) + 1:]
        if "/" not in rest:
            continue  # a file of the pod's own dir
        d = f"{pod_dir}/{rest.split('/', 1)[0]}"
        if d not in out:
            out.append(d)
    return out


def container_dirs(ns: NodeState, ps: PodState, current: Mapping[str, str]) -> list[tuple[str, str]]:
    """(container name, cgroup dir) of the pod's started containers (status ``containerStatuses`` and
    ``initContainerStatuses`` with an id) whose cgroup exists: found by the agent, or, in a state file,
    named by a known value under the pod's dir. Kata pods have none (``ContainerReconcileIgnoreFilter``)."""
    raw = ps.pod.raw if ps.pod is not None else None
    if not isinstance(raw, Mapping):
        return []
    spec, status = raw.get("spec"), raw.get("status")
    if isinstance(spec, Mapping) and spec.get("runtimeClassName") == RUNTIME_CLASS_KATA:
        return []
    if not isinstance(status, Mapping):
        return []
    known = [c.cgroup_dir for c in ps.containers if c.cgroup_dir]
    if not known and ps.cgroup_dir:  # a state file: the dirs below the pod's that have a value
        known = _sub_dirs((*ns.cgroups, *current), ps.cgroup_dir.strip("/"), ns.cgroup_version)
    out = []
    for key in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(key)
        if not isinstance(statuses, list):
            continue
        for st in statuses:
            if not isinstance(st, Mapping) or not isinstance(st.get("name"), str):
                continue
            cid = _container_id(st.get("containerID"))
            if not cid:
                continue  # not started: Koordinator skips it
            d = next((d for d in known if _dir_holds(d.rsplit("/", 1)[-1], cid)), None)
            if d is not None:
                out.append((st["name"], d))
    return out


def _lookup(ns: NodeState, current: Mapping[str, str]) -> dict[str, str]:
    merged = dict(current)
    merged.update(ns.cgroups)
    return merged


def pod_writes(ns: NodeState, ps: PodState, rule: Rule, current: Mapping[str, str],
               warned: set | None = None, only_container: str | None = None) -> list[FileWrite]:
    """The writes holding one pod (and its containers) to its batch resources; ``[]`` for a pod the hook
    does not act on. ``only_container``: that container dir's writes only (a container start).

    Order: the pod's quota is written before its containers' unless a container's current quota is above
    the pod's new one (cgroup v1 refuses a child quota above its parent's), then the containers go first.
    """
    batch = pod_batch(ps, warned)
    if batch is None or not ps.cgroup_dir:
        return []
    cur = _lookup(ns, current)
    containers: list[tuple[str, Knobs]] = []
    for name, d in container_dirs(ns, ps, cur):
        spec = batch.containers.get(name)
        if spec is not None and (only_container is None or d == only_container):
            containers.append((d, container_knobs(spec, rule)))
    out_containers = [w for d, k in containers for w in knob_writes(ns, d, k, cur)]
    if only_container is not None:
        return out_containers
    if batch.pod is None:
        return out_containers
    pk = pod_knobs(batch.pod, rule)
    out_pod = knob_writes(ns, ps.cgroup_dir, pk, cur)
    new = math.inf if pk.cfs_quota < 0 else pk.cfs_quota
    children = (_quota_of(cur.get(knob_files(ns, d)[1])) for d, _ in containers)
    if all(q is None or q < 0 or q <= new for q in children):
        return out_pod + out_containers
    return out_containers + out_pod


def plan(ns: NodeState, rule: Rule, current: Mapping[str, str], warned: set | None = None) -> list[FileWrite]:
    """Every BE pod of the node, in pod order (the reconciler's round)."""
    out: list[FileWrite] = []
    for ps in ns.pods:
        out += pod_writes(ns, ps, rule, current, warned)
    return out


def files_to_read(ns: NodeState, pods: Iterable[PodState], warned: set | None = None) -> list[str]:
    """The current-value files the plan orders and compares by (quota and memory limit of each acted-on
    pod and container dir), for ``collect``."""
    out: list[str] = []
    for ps in pods:
        if pod_batch(ps, warned) is None or not ps.cgroup_dir:
            continue
        for d in [ps.cgroup_dir] + [c.cgroup_dir for c in ps.containers if c.cgroup_dir]:
            _, quota_f, memory_f = knob_files(ns, d)
            out += [quota_f, memory_f]
    return out
