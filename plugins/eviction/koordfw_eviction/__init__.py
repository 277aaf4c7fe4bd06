"""eviction: Koordinator's BEMemoryEvict, MemoryEvict and BECPUEvict on the node agent (``qos_plan`` returns
Evictions).

Koordinator ``pkg/koordlet/qosmanager/plugins/memoryevict`` and ``cpuevict`` (the BE features), with the
evictor helpers of ``plugins/util``:

* **Memory** (BEMemoryEvict): when the node's memory usage, ``used × 100 // capacity`` (integer percent
  of the kubelet's memory capacity), reaches ``memoryEvictThresholdPercent``, ``capacity × (usage% −
  lower%) // 100`` bytes are to be released, ``lower`` being ``memoryEvictLowerPercent`` (default
  threshold − 2). BE pods are evicted in order (``spec.priority`` ascending, then memory usage
  descending, pods without usage last, two without usage by name descending) until the sum of their
  usage reaches it.
* **Memory, opted-in pods** (MemoryEvict, after BEMemoryEvict in the same round and towards the same
  release): active pods labelled ``koordinator.sh/eviction-enabled: "true"`` whose priority (with
  Koordinator's defaults) is at most ``evictEnabledPriorityThreshold``, by ``koordinator.sh/eviction-priority``,
  priority, ``koordinator.sh/priority``, then usage; each victim counts its usage × 1000 (koordlet's
  ``int64(result * 1000)``), so one is enough per round. Of those, the agent plans only BE pods (it never
  evicts another QoS; koordlet skips a pod its executor refuses).
* **CPU** (BECPUEvict): BE pods' CPU satisfaction is ``BE limit / BE request``; the limit is the besteffort
  cgroup's real limit (``min(cpuset CPUs × 1000, quota × 1000 / period)``) with policy
  ``evictByRealLimit`` (default), the node's allocatable ``kubernetes.io/batch-cpu`` with
  ``evictByAllocatable`` (1 milli when 0); the request is the sum of the BE pods' batch-cpu requests.
  When BE pods use at least ``cpuEvictBEUsageThresholdPercent`` (default 90) of their limit (or the limit
  is below one core) and satisfaction is at most ``cpuEvictBESatisfactionLowerPercent``, ``request ×
  (upper% − satisfaction)`` milli-CPU of batch-cpu requests is to be released, ``upper`` being
  ``cpuEvictBESatisfactionUpperPercent``. Averages over ``cpuEvictTimeWindowSeconds`` (at least one
  round) decide, and the current sample must agree (its release, the smaller, is taken when request or
  limit changed). Victims: BE pods by ``spec.priority`` ascending (pods without one, or of equal
  priority, by CPU usage / batch-cpu request descending) until their batch-cpu requests reach it.

All only ever pick pods of Koordinator QoS BE (the ``koordinator.sh/qosClass`` label, else derived from
the kube QoS class: :attr:`koordfw.PodState.qos`), skip a pod whose ``koordinator.sh/eviction-policy``
annotation (a JSON list of feature names) does not list the feature (an unparsable one refuses all), and
count a pod already terminating, or planned for eviction in the last 5 minutes, as releasing its share
(koordlet's ``IsPodEvicted``) instead of picking more victims.

History: the live agent calls ``collect`` every round, which keeps this plugin's BE CPU samples; the
window average and the cool-downs (``memoryEvictCoolTimeSeconds`` 4 s, ``cpuEvictCoolTimeSeconds`` 20 s
after a round that evicted, as koordlet's flags) apply there. ``koordfw agent plan`` calls only
``qos_plan``: its state is one sample, taken as the whole window, and no cool-down applies.

Defaults: memory eviction is on (``memoryEvictEnable``, threshold 70 %: Koordinator's BEMemoryEvict gate
is an alpha feature, off by default; koordfw turns it on so BE work never endangers LS pods); MemoryEvict
is off (``memoryEvictByPriorityEnable``, needs ``evictEnabledPriorityThreshold``); CPU eviction is off
(``cpuEvictEnable``, Koordinator's BECPUEvict gate) and needs both satisfaction percents.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any

import attrs
import structlog

from koordfw import AgentHandle, Eviction, Handle, InputError, NodeState, PodState, StashKey, hookimpl
from koordfw.extension import (
    ANNOTATION_POD_EVICT_POLICY,
    ANNOTATION_POD_EVICTION_PRIORITY,
    BATCH_CPU,
    LABEL_POD_EVICT_ENABLED,
    LABEL_POD_PRIORITY,
    PRIORITY_BATCH,
    PRIORITY_FREE,
    PRIORITY_MID,
    PRIORITY_PROD,
)
from koordfw.inputs import camel, loads_json

log = structlog.get_logger("koordfw.eviction")

NAME = "eviction"
BE_MEMORY_EVICT = "BEMemoryEvict"
BE_CPU_EVICT = "BECPUEvict"
MEMORY_EVICT = "MemoryEvict"
EVICT_REASON_PREFIX = "trigger by koordlet feature "  # qosmanagerUtil.EvictReasonPrefix
MEMORY_RELEASE_BUFFER_PERCENT = 2  # memoryReleaseBufferPercent
BE_CPU_SATISFACTION_LOW_PERCENT_MAX = 60  # beCPUSatisfactionLowPercentMax
BE_CPU_SATISFACTION_UPPER_PERCENT_MAX = 100  # beCPUSatisfactionUpperPercentMax
BE_CPU_USAGE_THRESHOLD_PERCENT = 90  # beCPUUsageThresholdPercent
DEFAULT_MIN_ALLOCATABLE_BATCH_MILLI_CPU = 1  # defaultMinAllocatableBatchMilliCPU
POLICY_REAL_LIMIT = "evictByRealLimit"
POLICY_ALLOCATABLE = "evictByAllocatable"
#: koordlet's evicted-pods cache (expireCache.NewCacheDefault): a planned pod counts as releasing this long
EVICTED_TTL_SECONDS = 300.0
#: GetDefaultPriorityByPriorityClass (apis/extension/priority_utils.go); no class: 0
DEFAULT_PRIORITY_VALUES = {PRIORITY_PROD: 9500, PRIORITY_MID: 7500, PRIORITY_BATCH: 5500, PRIORITY_FREE: 3500}
#: Koordinator's MemoryEvict counts a victim's release as ``int64(result * 1000)`` of its memory usage
MEMORY_EVICT_USED_SCALE = 1000
#: the most BE CPU samples kept (a window of a day at one round a second stays far below it)
MAX_SAMPLES = 100_000


def _percent(inst: Any, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not (0 <= value <= 100):
        raise ValueError(f"{camel(attribute.name)}: must be an integer between 0 and 100, got {value!r}")


def _seconds(inst: Any, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not (0 < value <= 86400):
        raise ValueError(f"{camel(attribute.name)}: must be an integer number of seconds 1..86400, got {value!r}")


def _cool(inst: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not (0 <= value <= 86400):
        raise ValueError(f"{camel(attribute.name)}: must be an integer number of seconds 0..86400, got {value!r}")


def _int32(inst: Any, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not (-(2**31) <= value < 2**31):
        raise ValueError(f"{camel(attribute.name)}: must be a 32-bit integer (a pod priority), got {value!r}")


def _policy(inst: Any, attribute: Any, value: Any) -> None:
    if value not in (POLICY_REAL_LIMIT, POLICY_ALLOCATABLE):
        raise ValueError(f"cpuEvictPolicy: must be {POLICY_REAL_LIMIT!r} or {POLICY_ALLOCATABLE!r}, got {value!r}")


@attrs.frozen
class Args:
    """NodeSLO ``resourceUsedThresholdWithBE``'s eviction fields (Koordinator's names), a switch per
    feature (Koordinator's BEMemoryEvict / MemoryEvict / BECPUEvict gates: ``memoryEvictEnable``,
    ``memoryEvictByPriorityEnable``, ``cpuEvictEnable``) and koordlet's cool-down flags.

    Checked as Koordinator's config checks (``generateConfigCheck``, ``isSatisfactionConfigValid``) and its
    NodeSLO validation: percents 0..100; ``memoryEvictLowerPercent`` below the threshold;
    ``cpuEvictBESatisfactionLowerPercent`` in (0, 60], ``...UpperPercent`` in (0, 100) and not below it.
    """

    memory_evict_enable: bool = True
    memory_evict_threshold_percent: int = attrs.field(default=70, validator=_percent)
    memory_evict_lower_percent: int | None = attrs.field(default=None, validator=_percent)
    memory_evict_cool_time_seconds: int = attrs.field(default=4, validator=_cool)
    memory_evict_by_priority_enable: bool = False
    evict_enabled_priority_threshold: int | None = attrs.field(default=None, validator=_int32)
    cpu_evict_enable: bool = False
    cpu_evict_BE_satisfaction_lower_percent: int | None = attrs.field(default=None, validator=_percent)
    cpu_evict_BE_satisfaction_upper_percent: int | None = attrs.field(default=None, validator=_percent)
    cpu_evict_BE_usage_threshold_percent: int | None = attrs.field(default=None, validator=_percent)
    cpu_evict_time_window_seconds: int | None = attrs.field(default=None, validator=_seconds)
    cpu_evict_policy: str = attrs.field(default=POLICY_REAL_LIMIT, validator=_policy)
    cpu_evict_cool_time_seconds: int = attrs.field(default=20, validator=_cool)

    def __attrs_post_init__(self) -> None:
        if self.memory_lower_percent >= self.memory_evict_threshold_percent:
            raise ValueError(f"memoryEvictLowerPercent ({self.memory_lower_percent}) must be below "
                             f"memoryEvictThresholdPercent ({self.memory_evict_threshold_percent})")
        lo, up = self.cpu_evict_BE_satisfaction_lower_percent, self.cpu_evict_BE_satisfaction_upper_percent
        if lo is not None and not 0 < lo <= BE_CPU_SATISFACTION_LOW_PERCENT_MAX:
            raise ValueError(f"cpuEvictBESatisfactionLowerPercent ({lo}) must be in (0, "
                             f"{BE_CPU_SATISFACTION_LOW_PERCENT_MAX}]")
        if up is not None and not 0 < up < BE_CPU_SATISFACTION_UPPER_PERCENT_MAX:
            raise ValueError(f"cpuEvictBESatisfactionUpperPercent ({up}) must be in (0, "
                             f"{BE_CPU_SATISFACTION_UPPER_PERCENT_MAX})")
        if lo is not None and up is not None and up < lo:
            raise ValueError(f"cpuEvictBESatisfactionUpperPercent ({up}) must not be below "
                             f"cpuEvictBESatisfactionLowerPercent ({lo})")

    @property
    def memory_lower_percent(self) -> int:
        if self.memory_evict_lower_percent is not None:
            return self.memory_evict_lower_percent
        return self.memory_evict_threshold_percent - MEMORY_RELEASE_BUFFER_PERCENT

    @property
    def cpu_configured(self) -> bool:
        """Koordinator skips BECPUEvict unless both satisfaction percents are configured."""
        return (self.cpu_evict_BE_satisfaction_lower_percent is not None
                and self.cpu_evict_BE_satisfaction_upper_percent is not None)


@hookimpl
def plugin_args() -> type[Args]:
    return Args


# -- pods ----------------------------------------------------------------------------------------------

def spec_priority(ps: PodState) -> int | None:
    """The pod's ``spec.priority``; ``None`` when the manifest has none (Go's nil pointer)."""
    if ps.pod is None:
        return None
    raw = ps.pod.raw
    if raw is None:
        return ps.pod.priority
    spec = raw.get("spec") if isinstance(raw, Mapping) else None
    prio = spec.get("priority") if isinstance(spec, Mapping) else None
    return prio if isinstance(prio, int) and not isinstance(prio, bool) else None


def eviction_policy_allowed(policy: str, annotations: Mapping[str, str]) -> bool:
    """Koordinator's ``IsEvictionPolicyAllowed``: no ``koordinator.sh/eviction-policy`` allows every
    feature; else the annotation is a JSON list of the features allowed to evict the pod (bad JSON: none)."""
    content = annotations.get(ANNOTATION_POD_EVICT_POLICY)
    if content is None:
        return True
    try:
        policies = loads_json(content)  # bounded: the annotation is anyone's text
    except (InputError, ValueError, RecursionError):
        return False
    if not isinstance(policies, list):
        return False
    return policy in policies


def be_candidates(ns: NodeState, feature: str) -> list[PodState]:
    """The pods ``feature`` may evict: Koordinator QoS BE, with metadata (an eviction needs a name),
    allowed by their eviction policy."""
    return [p for p in ns.pods if p.pod is not None and p.qos == "BE"
            and eviction_policy_allowed(feature, p.pod.annotations)]


def pod_batch_milli_cpu_request(ps: PodState) -> int:
    """Koordinator's ``GetPodBEMilliCPURequest``: the containers' ``kubernetes.io/batch-cpu`` requests
    (negative ones as 0), sidecars (restartable init containers) included."""
    pod = ps.pod
    if pod is None:
        return 0
    total = sum(max(c.requests.get(BATCH_CPU, 0), 0) for c in pod.containers)
    raw_init = ((pod.raw or {}).get("spec") or {}).get("initContainers") or []
    for i, c in enumerate(pod.init_containers):
        raw = raw_init[i] if i < len(raw_init) and isinstance(raw_init[i], Mapping) else {}
        if raw.get("restartPolicy") == "Always":
            total += max(c.requests.get(BATCH_CPU, 0), 0)
    return total


def _key(ps: PodState) -> str:
    assert ps.pod is not None
    return f"{ps.pod.namespace}/{ps.pod.name}"


# -- memory (BEMemoryEvict) ----------------------------------------------------------------------------

def memory_to_release(ns: NodeState, args: Args) -> tuple[int, int]:
    """(bytes to release, node usage percent) of ``calculateReleaseByUsedThresholdPercent``; 0 bytes when
    below the threshold or without node usage / a positive memory capacity."""
    capacity = ns.capacity.get("memory", 0)
    if capacity <= 0 or "memory" not in ns.usage:
        return 0, 0
    usage_pct = ns.usage["memory"] * 100 // capacity
    if usage_pct < args.memory_evict_threshold_percent:
        return 0, usage_pct
    return capacity * (usage_pct - args.memory_lower_percent) // 100, usage_pct


def _memory_less(a: PodState, b: PodState) -> bool:
    """The comparator of ``getSortedBEPodInfos`` (priority > memory used > name)."""
    pa, pb = spec_priority(a), spec_priority(b)
    if pa is not None and pb is not None and pa != pb:
        return pa < pb
    ma, mb = a.usage.get("memory", 0), b.usage.get("memory", 0)
    if ma != 0 and mb != 0:
        return ma > mb
    if ma == 0 and mb == 0:
        assert a.pod is not None and b.pod is not None
        return a.pod.name > b.pod.name
    return mb == 0


def _sorted(pods: Iterable[PodState], less: Any) -> list[PodState]:
    def cmp(a: PodState, b: PodState) -> int:
        return -1 if less(a, b) else 1 if less(b, a) else 0
    return sorted(pods, key=functools.cmp_to_key(cmp))


def sorted_be_memory_pods(ns: NodeState) -> list[PodState]:
    return _sorted(be_candidates(ns, BE_MEMORY_EVICT), _memory_less)


@attrs.define
class Round:
    """What ``KillAndEvictPods`` keeps across the tasks of one round (one release target): the pods
    already taken and the amount released so far."""

    taken: set[str] = attrs.field(factory=set)
    released: int = 0


def pick(ordered: Sequence[PodState], to_release: int, amount: Any, pending: Set[str],
         rnd: Round | None = None) -> list[PodState]:
    """``KillAndEvictPods`` for one task: walk ``ordered``, skipping pods an earlier task of the round
    took, counting pods in ``pending`` (evicted, still there) as released without evicting them again,
    and pick until the released sum (with what earlier tasks of ``rnd`` freed) reaches ``to_release``."""
    rnd = Round() if rnd is None else rnd
    out: list[PodState] = []
    if to_release <= 0 or rnd.released >= to_release:
        return out
    for p in ordered:
        if p.uid in rnd.taken:
            continue
        rnd.taken.add(p.uid)
        rnd.released += amount(p)
        if p.uid not in pending:
            out.append(p)
        if rnd.released >= to_release:
            break
    return out


# -- memory (MemoryEvict: pods that opted in, up to a priority) ------------------------------------------

def _go_int(text: str, bits: int) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, bits)`` (``Atoi``: 64): an optional sign and decimal digits
    within the signed range, else ``None``."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or len(body) > 20 or not body.isascii() or not body.isdigit():
        return None
    v = int(text)
    return v if -(2 ** (bits - 1)) <= v < 2 ** (bits - 1) else None


def priority_value_with_default(ps: PodState) -> int:
    """Koordinator's ``GetPodPriorityValueWithDefault``: ``spec.priority`` when set and not 0, else the
    default value of the pod's priority class (``GetPodPriorityClassWithDefault``: the
    ``koordinator.sh/priority-class`` label or the priority's range, else derived from the QoS)."""
    prio = spec_priority(ps)
    if prio:
        return prio
    assert ps.pod is not None
    return DEFAULT_PRIORITY_VALUES.get(ps.pod.priority_class_with_default, 0)


def pod_evict_enabled(ps: PodState) -> bool:
    """``PodEvictEnabled``: the label ``koordinator.sh/eviction-enabled`` is exactly ``"true"``."""
    return ps.pod is not None and ps.pod.labels.get(LABEL_POD_EVICT_ENABLED) == "true"


def pod_eviction_priority(ps: PodState) -> int:
    """``GetPodEvictionPriority``: the annotation ``koordinator.sh/eviction-priority`` as an int32; 0 when
    absent or invalid (koordlet logs the invalid one)."""
    assert ps.pod is not None
    raw = ps.pod.annotations.get(ANNOTATION_POD_EVICTION_PRIORITY)
    v = _go_int(raw, 32) if isinstance(raw, str) else None
    return 0 if v is None else v


def pod_priority_label(ps: PodState, default: int) -> int:
    """``GetPodPriorityLabel``: the label ``koordinator.sh/priority`` as an integer (``strconv.Atoi``),
    else ``default``."""
    assert ps.pod is not None
    raw = ps.pod.labels.get(LABEL_POD_PRIORITY)
    v = _go_int(raw, 64) if isinstance(raw, str) else None
    return default if v is None else v


@attrs.frozen
class PriorityEvictInfo:
    """A pod as ``getPodEvictInfoAndSortByPriority`` sees it."""

    pod: PodState
    eviction_priority: int
    priority: int
    label_priority: int
    memory_used: int  # usage × MEMORY_EVICT_USED_SCALE, as koordlet computes it


def sorted_priority_memory_pods(ns: NodeState, threshold: int, feature: str = MEMORY_EVICT) -> list[PriorityEvictInfo]:
    """Koordinator's ``getPodEvictInfoAndSortByUsed``: every active pod (phase Pending or Running) with
    metadata that ``feature`` may evict (``koordinator.sh/eviction-policy``), whose priority
    (:func:`priority_value_with_default`) is at most ``threshold``, labelled
    ``koordinator.sh/eviction-enabled: "true"`` and with a memory usage; sorted by eviction priority,
    priority, priority label (default: the priority), then memory usage descending. Any QoS: the agent's
    own rule (BE only) is applied by :func:`plan_memory`."""
    infos = []
    for p in ns.pods:
        if p.pod is None or p.pod.phase not in ("Pending", "Running"):
            continue
        if not eviction_policy_allowed(feature, p.pod.annotations):
            continue
        prio = priority_value_with_default(p)
        if prio > threshold or not pod_evict_enabled(p):
            continue
        if "memory" not in p.usage:  # no metric: koordlet skips the pod
            continue
        infos.append(PriorityEvictInfo(p, pod_eviction_priority(p), prio, pod_priority_label(p, prio),
                                       p.usage["memory"] * MEMORY_EVICT_USED_SCALE))
    # Go's sort.Slice is not stable; ties keep the node state's order here
    return sorted(infos, key=lambda i: (i.eviction_priority, i.priority, i.label_priority, -i.memory_used))


def plan_memory(ns: NodeState, args: Args, pending: Set[str] = frozenset()) -> list[Eviction]:
    """The memory evictions for ``ns`` (``pending``: uids whose eviction is under way): BEMemoryEvict's
    task, then MemoryEvict's, as koordlet's ``memoryEvict`` runs them (one release target: a pod the
    first task took is not taken again, and what it freed counts towards the second)."""
    features = [f for f, on in ((BE_MEMORY_EVICT, args.memory_evict_enable),
                                (MEMORY_EVICT, args.memory_evict_by_priority_enable)) if on]
    if MEMORY_EVICT in features and args.evict_enabled_priority_threshold is None:
        # generateConfigCheck: MemoryEvict needs EvictEnabledPriorityThreshold; the other task still runs
        log.warning("MemoryEvict skipped, invalid config: evictEnabledPriorityThreshold not configured",
                    plugin=NAME, node=ns.name)
        features.remove(MEMORY_EVICT)
    if not features:
        return []
    release, usage_pct = memory_to_release(ns, args)
    if release <= 0:
        return []
    out: list[Eviction] = []
    rnd = Round()
    for feature in features:
        reason = (f"{EVICT_REASON_PREFIX}{feature}: node memory usage {usage_pct}% >= "
                  f"{args.memory_evict_threshold_percent}%, releasing {release} bytes to {args.memory_lower_percent}%")
        if feature == BE_MEMORY_EVICT:
            ordered = sorted_be_memory_pods(ns)
            amounts = {p.uid: p.usage.get("memory", 0) for p in ordered}
        else:
            assert args.evict_enabled_priority_threshold is not None
            infos = sorted_priority_memory_pods(ns, args.evict_enabled_priority_threshold, feature)
            # the agent evicts only BE pods (its evictor refuses any other, which KillAndEvictPods skips)
            infos = [i for i in infos if i.pod.qos == "BE"]
            ordered = [i.pod for i in infos]
            amounts = {i.pod.uid: i.memory_used for i in infos}
        victims = pick(ordered, release, lambda p, a=amounts: a[p.uid], pending, rnd)
        out += [Eviction(p.uid, _key(p), reason=reason) for p in victims]
    return out


# -- CPU (BECPUEvict) ----------------------------------------------------------------------------------

@attrs.frozen
class BESample:
    """One sample of koordlet's BE CPU metrics (milli-CPU): BE usage, request (batch-cpu) and real limit."""

    usage: float
    request: float
    real_limit: float


def be_cpu_usage_limit(ns: NodeState) -> tuple[int, int] | None:
    """The BE CPU usage and the besteffort cgroup's real limit of :func:`be_cpu_sample` (milli-CPU), without
    the requests; ``None`` where that sample is ``None`` (no CPU usage yet, or no cpuset read)."""
    be_pods = [p for p in ns.pods if p.kube_qos == "BestEffort"]
    if any("cpu" not in p.usage for p in be_pods):
        return None
    usage = sum(p.usage["cpu"] for p in be_pods) + sum(a.usage.get("cpu", 0) for a in ns.host_apps if a.is_be)
    be_dir = ns.qos_dir("besteffort")
    cpus = ns.cpuset(be_dir)
    if cpus is None:
        return None
    limit = len(cpus) * 1000
    quota = ns.cpu_quota(be_dir)
    if quota is not None and quota != -1:
        limit = min(limit, quota * 1000 // ns.cpu_period(be_dir))
    return usage, limit


def be_requested(ns: NodeState, request: Callable[[PodState], int] = pod_batch_milli_cpu_request) -> int:
    """The BE pods' batch-cpu requests (milli-CPU)."""
    return sum(request(p) for p in ns.pods if p.pod is not None and p.qos == "BE")


def be_cpu_sample(ns: NodeState, request: Callable[[PodState], int] = pod_batch_milli_cpu_request) -> BESample | None:
    """This state's BE CPU sample (``beResourceCollector``): usage of the pods in the besteffort cgroup
    (and BE host applications under it), the BE pods' batch-cpu requests, the besteffort cgroup's real
    limit. ``None`` without CPU usage (the agent's first round) or without the cgroup's cpuset."""
    ul = be_cpu_usage_limit(ns)
    if ul is None:
        return None
    return BESample(float(ul[0]), float(be_requested(ns, request)), float(ul[1]))


def be_milli_allocatable(ns: NodeState) -> float:
    """``getBEMilliAllocatable``: the node's allocatable batch-cpu; 1 when 0; -1 when unknown."""
    if BATCH_CPU not in ns.allocatable or ns.allocatable[BATCH_CPU] < 0:
        return -1.0
    v = ns.allocatable[BATCH_CPU]
    return float(DEFAULT_MIN_ALLOCATABLE_BATCH_MILLI_CPU) if v == 0 else float(v)


def usage_high_enough(usage: float, limit: float, threshold_percent: int | None) -> bool:
    """``isBECPUUsageHighEnough``."""
    if limit <= 0:
        return False
    if limit < 1000:
        return True
    pct = BE_CPU_USAGE_THRESHOLD_PERCENT if threshold_percent is None else threshold_percent
    return usage / limit >= pct / 100


def release_by_satisfaction(request: float, limit: float, lower_percent: int, upper_percent: int) -> int:
    """``calculateResourceMilliToReleaseBySatisfaction``: milli batch-cpu to release."""
    if request <= 0:
        return 0
    rate = limit / request
    if rate > lower_percent / 100:
        return 0
    gap = upper_percent / 100 - rate
    if gap <= 0:
        return 0
    return int(request * gap)


def cpu_to_release(avg: BESample, current: BESample, args: Args, allocatable: float = -1.0) -> int:
    """``calculateMilliReleaseByBESatisfaction`` on a window average and the current sample."""
    assert args.cpu_evict_BE_satisfaction_lower_percent is not None
    assert args.cpu_evict_BE_satisfaction_upper_percent is not None
    lo, up = args.cpu_evict_BE_satisfaction_lower_percent, args.cpu_evict_BE_satisfaction_upper_percent
    by_alloc = args.cpu_evict_policy == POLICY_ALLOCATABLE
    avg_limit = allocatable if by_alloc else avg.real_limit
    if not usage_high_enough(avg.usage, avg_limit, args.cpu_evict_BE_usage_threshold_percent):
        return 0
    release = release_by_satisfaction(avg.request, avg_limit, lo, up)
    if release <= 0:
        return 0
    cur_limit = allocatable if by_alloc else current.real_limit
    if not usage_high_enough(current.usage, cur_limit, args.cpu_evict_BE_usage_threshold_percent):
        return 0
    if current.request == avg.request and cur_limit == avg_limit:
        return release
    by_current = release_by_satisfaction(current.request, cur_limit, lo, up)
    if by_current <= 0:
        return 0
    return min(release, by_current)


def window_average(samples: Sequence[tuple[float, BESample]], now: float, window: float) -> tuple[BESample, int]:
    """The average of the samples of the last ``window`` seconds, and how many there were."""
    recent = [s for t, s in samples if now - t <= window]
    n = len(recent)
    if not n:
        return BESample(0.0, 0.0, 0.0), 0
    return BESample(sum(s.usage for s in recent) / n, sum(s.request for s in recent) / n,
                    sum(s.real_limit for s in recent) / n), n


def _cpu_less(a: PodState, b: PodState) -> bool:
    """The comparator of ``getBEPodEvictInfoAndSort``: priority ascending; without one (or equal) by CPU
    usage / batch-cpu request descending."""
    pa, pb = spec_priority(a), spec_priority(b)
    if pa is None or pb is None or pa == pb:
        return _cpu_ratio(a) > _cpu_ratio(b)
    return pa < pb


def _cpu_ratio(p: PodState, request: Callable[[PodState], int] = pod_batch_milli_cpu_request) -> float:
    req = request(p)
    return p.usage.get("cpu", 0) / req if req > 0 else 0.0


def sorted_be_cpu_pods(ns: NodeState, request: Callable[[PodState], int] = pod_batch_milli_cpu_request,
                       ) -> list[PodState]:
    """The BE pods in :func:`_cpu_less`'s order. Each pod's priority and ratio are computed once for the
    sort (the comparator asks for them ~2 log n times a pod), then compared exactly as :func:`_cpu_less`."""
    pods = be_candidates(ns, BE_CPU_EVICT)
    info = {id(p): (spec_priority(p), _cpu_ratio(p, request)) for p in pods}  # the pods outlive the sort: ids stay theirs

    def less(a: PodState, b: PodState) -> bool:
        (pa, ra), (pb, rb) = info[id(a)], info[id(b)]
        if pa is None or pb is None or pa == pb:
            return ra > rb
        return pa < pb
    return _sorted(pods, less)


def plan_cpu(ns: NodeState, args: Args, avg: BESample | None = None, current: BESample | None = None,
             pending: Set[str] = frozenset()) -> list[Eviction]:
    """The BECPUEvict evictions: ``avg`` (the window's average; default: this state's sample) and
    ``current`` (default: this state's sample)."""
    if not args.cpu_evict_enable or not args.cpu_configured or ns.capacity.get("cpu", 0) <= 0:
        return []
    requests: dict[int, int] = {}  # pod_batch_milli_cpu_request of each pod once in this plan (id: ns holds them)

    def request(p: PodState) -> int:
        r = requests.get(id(p))
        if r is None:
            r = requests[id(p)] = pod_batch_milli_cpu_request(p)
        return r
    if current is None:
        # this state's sample; without a window it is the average too, and cpu_to_release gives 0 unless
        # its usage is high enough for the limit the policy compares with: the requests are summed only then
        ul = be_cpu_usage_limit(ns)
        if ul is None:
            return []
        if avg is None:
            limit = be_milli_allocatable(ns) if args.cpu_evict_policy == POLICY_ALLOCATABLE else float(ul[1])
            if not usage_high_enough(float(ul[0]), limit, args.cpu_evict_BE_usage_threshold_percent):
                return []
        current = BESample(float(ul[0]), float(be_requested(ns, request)), float(ul[1]))
    avg = avg if avg is not None else current
    release = cpu_to_release(avg, current, args, be_milli_allocatable(ns))
    if release <= 0:
        return []
    limit = be_milli_allocatable(ns) if args.cpu_evict_policy == POLICY_ALLOCATABLE else avg.real_limit
    satisfaction = limit / avg.request * 100 if avg.request > 0 else 0.0
    reason = (f"{EVICT_REASON_PREFIX}{BE_CPU_EVICT}: BE CPU satisfaction {satisfaction:.0f}% <= "
              f"{args.cpu_evict_BE_satisfaction_lower_percent}%, releasing {release}m batch-cpu requests to "
              f"{args.cpu_evict_BE_satisfaction_upper_percent}%")
    victims = pick(sorted_be_cpu_pods(ns, request), release, request, pending)
    return [Eviction(p.uid, _key(p), reason=reason) for p in victims]


# -- the live agent's history ----------------------------------------------------------------------------

@attrs.define
class Live:
    """What the live agent keeps between rounds for this plugin (one per agent handle)."""

    samples: list[tuple[float, BESample]] = attrs.field(factory=list)
    last_memory_evict: float | None = None
    last_cpu_evict: float | None = None
    #: uid → when it was planned for eviction (koordlet's evicted-pods cache)
    evicted: dict[str, float] = attrs.field(factory=dict)

    def interval(self) -> float:
        """The seconds between the last two samples (the agent's collect interval); 1 before two."""
        if len(self.samples) < 2:
            return 1.0
        return max(self.samples[-1][0] - self.samples[-2][0], 1e-3)


#: the agent's history, in the handle's stash (one per agent); only the live agent calls ``collect``, so
#: ``agent plan`` finds none
LIVE = StashKey[Live]()


@hookimpl
def collect(node_state: NodeState, args: Args, handle: AgentHandle) -> None:
    live = handle.stash.setdefault(LIVE, Live())
    now = handle.now()
    sample = be_cpu_sample(node_state)
    if sample is not None:
        live.samples.append((now, sample))
    keep = max(float(args.cpu_evict_time_window_seconds or 0), 2 * live.interval())
    live.samples = [(t, s) for t, s in live.samples[-MAX_SAMPLES:] if now - t <= keep]
    # a planned eviction that did not happen (a PodDisruptionBudget's 429, refused, rate-limited) is not
    # remembered: koordlet caches a pod as evicted only once its eviction succeeded, so the pod is planned
    # again after the cool-down and does not count as released meanwhile
    failed: frozenset[str] = getattr(handle, "unevicted", frozenset())
    live.evicted = {u: t for u, t in live.evicted.items() if now - t < EVICTED_TTL_SECONDS and u not in failed}
    return None


def plan(ns: NodeState, args: Args, live: Live | None = None, now: float = 0.0) -> list[Eviction]:
    """Both features for ``ns``: memory first, then CPU (koordlet runs them as two strategies), no pod
    twice. ``live`` (the agent's history) adds the window, the cool-downs and the pending evictions."""
    pending = {p.uid for p in ns.pods if p.pod is not None and p.pod.deletion_timestamp is not None}
    if live is not None:
        pending |= set(live.evicted)
    out: list[Eviction] = []
    if live is None or live.last_memory_evict is None or now >= live.last_memory_evict + args.memory_evict_cool_time_seconds:
        mem = plan_memory(ns, args, pending)
        if mem and live is not None:
            live.last_memory_evict = now
        out += mem
    if live is None:
        cpu = plan_cpu(ns, args, pending=pending)
    elif live.last_cpu_evict is not None and now < live.last_cpu_evict + args.cpu_evict_cool_time_seconds:
        cpu = []
    else:
        cpu = _plan_cpu_live(ns, args, live, now, pending)
        if cpu:
            live.last_cpu_evict = now
    chosen = {e.pod_uid for e in out}
    out += [e for e in cpu if e.pod_uid not in chosen]
    if live is not None:
        for e in out:
            live.evicted[e.pod_uid] = now
    return out


def _plan_cpu_live(ns: NodeState, args: Args, live: Live, now: float, pending: Set[str]) -> list[Eviction]:
    if not live.samples:
        return []
    interval = live.interval()
    window = max(float(args.cpu_evict_time_window_seconds or 0), interval)
    avg, count = window_average(live.samples, now, window)
    if count * interval < window / 3:  # isAvgQueryResultValid
        return []
    current = live.samples[-1][1] if now - live.samples[-1][0] <= 2 * interval else None
    if current is None:
        return []
    return plan_cpu(ns, args, avg=avg, current=current, pending=pending)


@hookimpl
def qos_plan(node_state: NodeState, args: Args, handle: AgentHandle) -> list[Eviction]:
    live = handle.stash.get(LIVE, None)
    now = float(handle.now()) if live is not None else 0.0
    out = plan(node_state, args, live, now)
    for e in out:
        log.info("planning eviction", pod=e.pod, uid=e.pod_uid, reason=e.reason, node=node_state.name)
    return out


@hookimpl
def shutdown(handle: Handle | AgentHandle) -> None:
    if LIVE in handle.stash:
        del handle.stash[LIVE]
