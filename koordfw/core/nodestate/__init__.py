"""Node-side value types of the node QoS loop: what the agent collects and what plugins ask it to write.

Contract (used by the ``collect`` / ``qos_plan`` / ``runtime_hook`` hooks, see ``koordfw.hookspecs``):

* :class:`NodeState` is one round's snapshot of a node: capacity, usage, CPU topology, the pods found in
  the kubelet's cgroup layout (with their Koordinator QoS), host applications, the **current** values
  of the cgroup files plugins care about (``cgroups``: path relative to the cgroup root → text as read,
  stripped), optional resctrl info, the raw ``pluginConfig`` mapping and the metrics gathered by
  ``collect``. It is frozen; only ``metrics`` (a dict) is filled in by the agent during ``collect``.
* :class:`FileWrite` is a desired file value. ``path`` is relative to the root of its filesystem
  (``fs="cgroup"``: the cgroup root, e.g. ``/sys/fs/cgroup``; ``fs="resctrl"``: ``/sys/fs/resctrl``).
  cgroup v1 paths start with the controller (``cpu/kubepods/besteffort/cpu.cfs_quota_us``); v2 paths
  do not (``kubepods/besteffort/cpu.max``). The executor (``koordfw.agent.executor``) applies writes in
  list order, only where the file's value differs, and never outside the root.
  A :class:`FileWrite` with ``rmdir=True`` (see :meth:`FileWrite.remove_dir`) asks instead for the
  directory ``path`` to be removed with one ``rmdir(2)`` (``value`` is ignored): how a plugin gives back
  a resctrl group or a cgroup it created. It is never a recursive delete.

Quantities are canonical ints as everywhere in koordfw: cpu in milli-cores, memory in bytes.

Bounds (so that no node state, however small, costs unbounded time or memory): CPU ids are below
:data:`MAX_CPUS` (8192, the kernel's largest ``NR_CPUS``) in cpu lists, the topology and resctrl cache
ids; a node without a topology has at most :data:`MAX_CPUS` CPUs; core, socket and NUMA node ids are
int32 (as Koordinator's ``CPUInfo``); a cgroup value is at most :data:`MAX_CGROUP_VALUE` characters (what
the agent reads of a file); a cgroup path has no NUL byte, ``.``/``..`` component or component longer
than :data:`NAME_MAX` bytes. :meth:`NodeState.from_state_file` checks all of it and names the field.
Paths are built with the helpers here (:meth:`NodeState.cgroup_file`, :meth:`NodeState.qos_dir`, ...)
so a plugin works on v1 and v2 and with the cgroupfs and systemd drivers alike.
"""

from .state import (
    CGROUP_BASES,
    ContainerState,
    CPUInfo,
    HostApp,
    NodeState,
    PodState,
    ResctrlInfo,
    Reservation,
    parse_reservation,
)
from .writes import (
    CFS_PERIOD_RANGE,
    CFS_PERIOD_US,
    CPU_LIST_FILES,
    FILESYSTEMS,
    FS_CGROUP,
    FS_RESCTRL,
    KOORD_QOS_OF_KUBE,
    MAX_CGROUP_VALUE,
    MAX_CPUS,
    MAX_TOPOLOGY_ID,
    NAME_MAX,
    PATH_MAX,
    QOS_LEVEL_DIRS,
    Eviction,
    FileWrite,
    check_cgroup_dir,
    format_cpuset,
    parse_cpuset,
)

__all__ = [
    "CFS_PERIOD_RANGE",
    "CFS_PERIOD_US",
    "CGROUP_BASES",
    "CPUInfo",
    "CPU_LIST_FILES",
    "ContainerState",
    "Eviction",
    "FILESYSTEMS",
    "FS_CGROUP",
    "FS_RESCTRL",
    "FileWrite",
    "HostApp",
    "KOORD_QOS_OF_KUBE",
    "MAX_CGROUP_VALUE",
    "MAX_CPUS",
    "MAX_TOPOLOGY_ID",
    "NAME_MAX",
    "NodeState",
    "PATH_MAX",
    "PodState",
    "QOS_LEVEL_DIRS",
    "ResctrlInfo",
    "Reservation",
    "check_cgroup_dir",
    "format_cpuset",
    "parse_cpuset",
    "parse_reservation",
]
