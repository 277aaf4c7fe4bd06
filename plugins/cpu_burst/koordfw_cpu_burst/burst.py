"""Koordinator's cpuburst strategy, pure (pkg/koordlet/qosmanager/plugins/cpuburst/cpu_burst.go).

* CPU burst: a container's ``cpu.cfs_burst_us`` (v2 ``cpu.max.burst``) is ``limit cores × cpuBurstPercent
  / 100 × 100000`` (``calcStaticCPUBurstVal``; 0 when the policy has no CPU burst or the container no CPU
  limit); the pod's is the sum over its containers.
* CFS quota burst: each running container with a CPU limit scales its ``cpu.cfs_quota_us`` by ×1.2
  (throttled in the last sample) or ×0.8 (the node's share pool overloaded, or the container's
  burst-period token bucket empty), between its base quota (the kubelet's, ``MilliCPUToQuota(limit)``)
  and ``base × cfsQuotaBurstPercent / 100``; back to base when the policy has no quota burst. The pod's
  quota moves by the same delta (unless unlimited), pod first when scaling up, container first down.
* The node's share pool (``getNodeStateForBurst``): all CPUs minus LSE/LSR requests; its usage the node's
  minus LSE/LSR/BE pods' usage; overload at ``≥ sharePoolThresholdPercent``, cooling from 90 % of it.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable

import attrs

from .config import POLICY_AUTO, POLICY_CFS_QUOTA_BURST_ONLY, POLICY_CPU_BURST_ONLY, BurstConfig

CFS_BASE_PERIOD = 100000  # system.CFSBasePeriodValue
CFS_QUOTA_MIN = 1000  # system.CFSQuotaMinValue
CFS_INCREASE_STEP = 1.2  # cfsIncreaseStep
CFS_DECREASE_STEP = 0.8  # cfsDecreaseStep
SHARE_POOL_COOLING_RATIO = 0.9  # sharePoolCoolingThresholdRatio
LIMITER_CONSUME_PERCENT = 100  # cpuThresholdPercentForLimiterConsumeTokens
LIMITER_SAVE_PERCENT = 60  # cpuThresholdPercentForLimiterSavingTokens


class Op(enum.Enum):
    """cfsOperation"""

    SCALE_UP = "cfsScaleUp"
    SCALE_DOWN = "cfsScaleDown"
    REMAIN = "cfsRemain"
    RESET = "cfsReset"


class NodeBurst(enum.Enum):
    """nodeStateForBurst"""

    OVERLOAD = "nodeBurstOverload"
    COOLING = "nodeBurstCooling"
    IDLE = "nodeBurstIdle"
    UNKNOWN = "nodeBurstUnknown"


def cpu_burst_enabled(policy: str) -> bool:
    return policy in (POLICY_AUTO, POLICY_CPU_BURST_ONLY)


def cfs_quota_burst_enabled(policy: str) -> bool:
    return policy in (POLICY_AUTO, POLICY_CFS_QUOTA_BURST_ONLY)


def milli_cpu_to_quota(milli: int) -> int:
    """system.MilliCPUToQuota: -1 for no limit, at least 1000 µs."""
    quota = milli * CFS_BASE_PERIOD // 1000 if milli >= 0 else -1
    if quota <= 0:
        return -1
    return max(quota, CFS_QUOTA_MIN)


def static_cpu_burst(limit_milli: int, cfg: BurstConfig) -> int:
    """calcStaticCPUBurstVal: the container's cpu.cfs_burst_us before any kernel clamp (``limit_milli``
    -1: no CPU limit). A negative percent (only an unvalidated pod annotation has one) gives 0."""
    if not cpu_burst_enabled(cfg.policy) or limit_milli <= 0 or cfg.cpu_burst_percent is None:
        return 0
    cores = (float(limit_milli) / 1000) * (float(cfg.cpu_burst_percent) / 100)
    return max(int(cores * float(CFS_BASE_PERIOD)), 0)


def change_operation_by_node(node: NodeBurst, op: Op) -> Op:
    """changeOperationByNode: an overloaded share pool turns up/remain into down; a cooling or unknown
    one holds a scale-up."""
    if node is NodeBurst.OVERLOAD and op in (Op.SCALE_UP, Op.REMAIN):
        return Op.SCALE_DOWN
    if node in (NodeBurst.COOLING, NodeBurst.UNKNOWN) and op is Op.SCALE_UP:
        return Op.REMAIN
    return op


def container_operation(cfg: BurstConfig, allowed_by_limiter: bool, throttled: float | None) -> Op:
    """genOperationByContainer (the limiter's verdict is taken first, as Koordinator consults it before
    the policy); ``throttled``: the last throttled ratio, ``None`` without a sample."""
    if not cfs_quota_burst_enabled(cfg.policy):
        return Op.RESET
    if not allowed_by_limiter:
        return Op.SCALE_DOWN
    if throttled is None:
        return Op.REMAIN
    return Op.SCALE_UP if throttled > 0 else Op.REMAIN


def ceil_quota(base: int, cfg: BurstConfig) -> int:
    if cfg.cfs_quota_burst_percent is not None and cfg.cfs_quota_burst_percent > 100:
        return int(float(base) * float(cfg.cfs_quota_burst_percent) / 100)
    return base


def target_quota(base: int, current: int, op: Op, cfg: BurstConfig) -> int:
    """The container's next cpu.cfs_quota_us: ×1.2 / ×0.8 / base, within [base, ceil]."""
    target = current
    if op is Op.SCALE_UP:
        target = int(float(current) * CFS_INCREASE_STEP)
    elif op is Op.SCALE_DOWN:
        target = int(float(current) * CFS_DECREASE_STEP)
    elif op is Op.RESET:
        target = base
    return max(base, min(target, ceil_quota(base, cfg)))


@attrs.frozen
class PodUsage:
    """One pod for the share pool: its raw QoS label, CPU request (milli) and usage (milli, None: no
    metric)."""

    qos: str
    request_milli: int
    usage_milli: int | None


def node_state_for_burst(threshold_percent: int, node_cpus: int, node_usage_milli: int | None,
                         pods: Iterable[PodUsage]) -> NodeBurst:
    """getNodeStateForBurst: UNKNOWN without a node usage or CPU count."""
    if node_usage_milli is None or node_cpus <= 0:
        return NodeBurst.UNKNOWN
    total = float(node_cpus)
    used = node_usage_milli / 1000
    for p in pods:
        if p.qos in ("LSE", "LSR"):
            total -= float(p.request_milli) / 1000
        if p.usage_milli is not None and p.qos in ("LSE", "LSR", "BE"):
            used -= p.usage_milli / 1000
    threshold = float(threshold_percent) / 100
    cooling = threshold * SHARE_POOL_COOLING_RATIO
    ratio = used / total if total > 0 else 1.0
    if ratio >= threshold:
        return NodeBurst.OVERLOAD
    if cooling <= ratio < threshold:
        return NodeBurst.COOLING
    return NodeBurst.IDLE


def init_token_ratio(container_id: str) -> float:
    """Koordinator starts a bucket at a random [0, 0.5) of its capacity; koordfw draws it from a
    generator seeded by the container id, so a round is reproducible and containers still differ."""
    return random.Random(container_id).random() / 2


@attrs.define
class BurstLimiter:
    """burstLimiter: a token bucket of ``periodSeconds × (cfsQuotaBurstPercent − 100)`` tokens; each
    elapsed whole second at usage ≥ 100 % of the limit costs ``usage% − 100``, below 60 % it saves
    ``100 − usage%``; the container may burst while tokens remain (> 0)."""

    capacity: int
    current: int
    last_update: float
    expire_seconds: float

    @classmethod
    def new(cls, period_seconds: int, max_scale_percent: int, now: float, container_id: str) -> BurstLimiter:
        capacity = period_seconds * (max_scale_percent - 100)
        return cls(capacity, int(float(capacity) * init_token_ratio(container_id)), now, float(2 * period_seconds))

    def allow(self, now: float, usage_scale_percent: int) -> tuple[bool, int]:
        past = int(now - self.last_update)  # int64(timePastSec): whole seconds
        if usage_scale_percent >= LIMITER_CONSUME_PERCENT:
            self.current -= (usage_scale_percent - 100) * past
        elif usage_scale_percent < LIMITER_SAVE_PERCENT:
            self.current += (100 - usage_scale_percent) * past
        self.current = max(min(self.current, self.capacity), -self.capacity)
        self.last_update = now
        return self.current > 0, self.current

    def update_if_changed(self, period_seconds: int, max_scale_percent: int, now: float, container_id: str) -> None:
        if self.capacity != period_seconds * (max_scale_percent - 100):
            fresh = BurstLimiter.new(period_seconds, max_scale_percent, now, container_id)
            self.capacity, self.current, self.last_update, self.expire_seconds = (
                fresh.capacity, fresh.current, fresh.last_update, fresh.expire_seconds)

    def expired(self, now: float) -> bool:
        return now - self.last_update > self.expire_seconds


def limiter_allows(limiters: dict[str, BurstLimiter], container_id: str, cfg: BurstConfig, limit_milli: int,
                   usage_cores: float | None, now: float) -> bool:
    """cfsBurstAllowedByLimiter: no period (or < 0) always allows; a percent below 100 (or unset) never
    does; else the container's bucket decides, fed with its usage (its limit without a sample)."""
    period, percent = cfg.cfs_quota_burst_period_seconds, cfg.cfs_quota_burst_percent
    if period is None or period < 0:
        return True
    if percent is None or percent < 100:
        return False
    limit = float(limit_milli) / 1000
    usage = limit if usage_cores is None else usage_cores
    limiter = limiters.get(container_id)
    if limiter is None:
        limiter = limiters[container_id] = BurstLimiter.new(period, percent, now, container_id)
    else:
        limiter.update_if_changed(period, percent, now, container_id)
    scale = int(usage / limit * 100) if limit > 0 else 0
    return limiter.allow(now, scale)[0]


def fresh_limiter_allows(container_id: str, cfg: BurstConfig) -> bool:
    """What :func:`limiter_allows` says for a container seen the first time (no time has passed): the
    verdict of a plan made without the agent's collector (``koordfw agent plan --state``)."""
    period, percent = cfg.cfs_quota_burst_period_seconds, cfg.cfs_quota_burst_percent
    if period is None or period < 0:
        return True
    if percent is None or percent < 100:
        return False
    return BurstLimiter.new(period, percent, 0.0, container_id).current > 0


def recycle(limiters: dict[str, BurstLimiter], now: float) -> list[str]:
    """Recycle: drop the buckets not used for twice their period; returns the dropped ids."""
    gone = [k for k, v in limiters.items() if v.expired(now)]
    for k in gone:
        del limiters[k]
    return gone


@attrs.frozen
class QuotaStep:
    """One container's CFS quota change: ``delta`` added to the container's and (when limited) the pod's
    quota."""

    container_dir: str
    current: int
    target: int
    op: Op

    @property
    def delta(self) -> int:
        return self.target - self.current


def quota_step(container_dir: str, base: int, current: int, cfg: BurstConfig, allowed: bool,
               throttled: float | None, node: NodeBurst) -> QuotaStep | None:
    """One container of applyCFSQuotaBurst; ``None`` when nothing changes (or no CPU limit)."""
    if base <= 0:
        return None
    op = change_operation_by_node(node, container_operation(cfg, allowed, throttled))
    target = target_quota(base, current, op, cfg)
    if target == current:
        return None
    return QuotaStep(container_dir, current, target, op)


def pod_quota_sequence(pod_quota: int | None, steps: Iterable[QuotaStep]) -> list[tuple[str, int]]:
    """The (dir, quota) writes of a pod's steps in Koordinator's order: per container, pod before
    container when scaling up, container before pod when scaling down; the pod's quota (``None``:
    unreadable, the step is skipped as Koordinator's update fails; ``≤ 0``: unlimited, left alone)
    accumulates the deltas. The pod dir is named ``""`` in the result."""
    out: list[tuple[str, int]] = []
    cur = pod_quota
    for s in steps:
        if cur is None:
            continue
        pod_write = [("", cur + s.delta)] if cur > 0 else []
        container_write = [(s.container_dir, s.target)]
        out += pod_write + container_write if s.delta > 0 else container_write + pod_write
        if cur > 0:
            cur += s.delta
    return out


def burst_clamp(burst: int, quotas: Iterable[int | None]) -> int:
    """The kernel refuses a burst above the cgroup's quota (``tg_set_cfs_bandwidth``: EINVAL when
    ``burst > quota`` unless unlimited): at most the smallest limited quota the cgroup has this round."""
    limited = [q for q in quotas if q is not None and q > 0]
    return min([burst, *limited]) if limited else burst
