"""memory_qos: Koordinator's memory QoS on the node agent (``collect`` + ``runtime_hook`` + ``qos_plan``).

Koordinator ``pkg/koordlet/qosmanager/plugins/cgreconcile`` (the CgroupReconcile strategy) with the NodeSLO's
``resourceQOSStrategy.<class>.memoryQOS`` and the pod annotation ``koordinator.sh/memoryQOS``:
``memory.min``/``memory.low``/``memory.high`` from each pod's and container's requests and limits, Anolis'
``memory.wmark_*``, ``memory.priority``, ``memory.use_priority_oom`` and ``memory.oom.group`` where the
kernel has them. See ``docs/plugins/memory_qos.md``.
"""

from .config import DEFAULTS, NONE, MemoryQOS, MemoryQOSArgs, PodPolicy, Settings, parse_pod_policy, pod_settings
from .plan import compute, plan_writes

__all__ = ["DEFAULTS", "NONE", "MemoryQOS", "MemoryQOSArgs", "PodPolicy", "Settings", "compute", "parse_pod_policy",
           "plan_writes", "pod_settings"]
