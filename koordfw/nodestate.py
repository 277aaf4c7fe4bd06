"""For node-side plugins (``collect``, ``qos_plan``, ``runtime_hook``): the node state's parts and limits
beyond what ``koordfw`` exports, cpu lists, the node's ``node.koordinator.sh/reservation`` annotation
(:class:`NodeReservation`; ``Reservation`` is the same class under its older name) and the agent's cgroup
file reader."""

from .agent.cgroups import read_cgroup_file
from .core.nodestate import (
    CFS_PERIOD_US,
    FS_CGROUP,
    FS_RESCTRL,
    MAX_CPUS,
    ContainerState,
    CPUInfo,
    Eviction,
    FileWrite,
    HostApp,
    NodeState,
    PodState,
    ResctrlInfo,
    Reservation,
    format_cpuset,
    parse_cpuset,
    parse_reservation,
)

NodeReservation = Reservation

__all__ = ["CFS_PERIOD_US", "FS_CGROUP", "FS_RESCTRL", "MAX_CPUS", "CPUInfo", "ContainerState", "Eviction", "FileWrite",
           "HostApp", "NodeReservation", "NodeState", "PodState", "ResctrlInfo", "Reservation", "format_cpuset",
           "parse_cpuset", "parse_reservation", "read_cgroup_file"]
