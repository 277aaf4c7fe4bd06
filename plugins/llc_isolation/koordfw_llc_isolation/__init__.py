"""llc_isolation: L3 cache (CAT) and memory-bandwidth (MBA) isolation between QoS classes via resctrl.

Koordinator's resctrl semantics (``pkg/koordlet/qosmanager/plugins/resctrl``): class groups ``LSR``,
``LS``, ``BE`` (LSE shares ``LSR``) with an L3 way range and an MBA percentage per class, every pod's
tasks moved into its class group each round, and pod-level groups ``koordlet-<podUID>`` from the pod
annotation ``node.koordinator.sh/resctrl``. See ``docs/plugins/llc_isolation.md``.
"""

from .config import LLCIsolationArgs, ResctrlQOS
from .resctrl import ResctrlError, ResctrlInfo, detect, l3_mask, mba_value, parse_schemata

__all__ = ["LLCIsolationArgs", "ResctrlError", "ResctrlInfo", "ResctrlQOS", "detect", "l3_mask", "mba_value",
           "parse_schemata"]
