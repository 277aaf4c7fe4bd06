"""cpu_burst: Koordinator koordlet's CPU burst on the node agent (``collect`` + ``qos_plan`` + ``shutdown``).

Koordinator ``pkg/koordlet/qosmanager/plugins/cpuburst``: for burstable (LS and unlabelled) pods, the
containers' and pods' ``cpu.cfs_burst_us`` (v2 ``cpu.max.burst``) from the CPU limit × ``cpuBurstPercent``
(policies ``cpuBurstOnly``/``auto``), and a temporary CFS quota increase for throttled containers while
the node's share pool has room (policies ``cfsQuotaBurstOnly``/``auto``), limited by a token bucket of
``cfsQuotaBurstPeriodSeconds``. Args are NodeSLO ``cpuBurstStrategy``; a pod's ``koordinator.sh/cpuBurst``
annotation overrides them for that pod. Beyond Koordinator: a burst is clamped to the cgroup's quota (the
kernel refuses more with EINVAL), and stopping the agent restores burst 0 and the kubelet's quotas.
See docs/plugins/cpu_burst.md.
"""

from __future__ import annotations

from .config import Args, BurstConfig, merge_pod_config, parse_pod_config
from .plugin import CPUBurst

__all__ = ["Args", "BurstConfig", "CPUBurst", "merge_pod_config", "parse_pod_config"]
