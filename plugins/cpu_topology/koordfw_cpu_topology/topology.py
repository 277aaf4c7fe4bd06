"""A node's CPU topology: which socket, NUMA node and physical core each logical CPU belongs to.

Built the way Koordinator's ``CPUTopologyBuilder.AddCPUInfo`` does it: core and NUMA node IDs are made
global by prefixing the socket (``socket<<16 | id``), so every ordering by core or node ID is
socket-major, exactly as in its accumulator.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from koordfw.extension import ANNOTATION_NODE_CPU_TOPOLOGY as ANNOTATION_CPU_TOPOLOGY
from koordfw.inputs import loads_json

from .cpuset import MAX_CPUS


class TopologyError(ValueError):
    """A CPU topology annotation that cannot be used; the message names the field."""


class CPUInfo(NamedTuple):
    cpu: int
    core: int  # socket<<16 | reported core
    node: int  # socket<<16 | reported NUMA node
    socket: int


class CPUTopology:
    """Immutable CPU topology with Koordinator's derived sizes (integer division, 0 when empty)."""

    __slots__ = ("cpus_in_core", "details", "num_cores", "num_cpus", "num_nodes", "num_sockets",
                 "cpus_in_node", "cpus_in_socket", "all_cpus", "arrays")

    def __init__(self, infos: Iterable[CPUInfo]) -> None:
        self.details: dict[int, CPUInfo] = {}
        for info in infos:
            self.details[info.cpu] = info
        self.num_cpus = len(self.details)
        self.num_sockets = len({i.socket for i in self.details.values()})
        self.num_nodes = len({(i.socket, i.node) for i in self.details.values()})
        self.num_cores = len({(i.socket, i.node, i.core) for i in self.details.values()})
        self.cpus_in_core: dict[int, tuple[int, ...]] = {}
        self.cpus_in_node: dict[int, tuple[int, ...]] = {}
        self.cpus_in_socket: dict[int, tuple[int, ...]] = {}
        for attr, key in (("cpus_in_core", 1), ("cpus_in_node", 2), ("cpus_in_socket", 3)):
            groups: dict[int, list[int]] = {}
            for info in self.details.values():
                groups.setdefault(info[key], []).append(info.cpu)
            setattr(self, attr, {k: tuple(sorted(v)) for k, v in groups.items()})
        self.all_cpus = frozenset(self.details)
        #: the scheduler plugin's index arrays of this topology, made on first use (they die with it)
        self.arrays: tuple | None = None

    def is_valid(self) -> bool:
        return bool(self.num_sockets and self.num_nodes and self.num_cores and self.num_cpus)

    def cpus_per_core(self) -> int:
        return self.num_cpus // self.num_cores if self.num_cores else 0

    def cpus_per_node(self) -> int:
        return self.num_cpus // self.num_nodes if self.num_nodes else 0

    def cpus_per_socket(self) -> int:
        return self.num_cpus // self.num_sockets if self.num_sockets else 0

    def __repr__(self) -> str:
        return (f"CPUTopology(sockets={self.num_sockets}, nodes={self.num_nodes}, cores={self.num_cores}, "
                f"cpus={self.num_cpus})")


#: bounds of the ids in ``detail``: CPU ids as the kernel's (below 8192); core and NUMA node ids below
#: 2^16, since they are made global as ``socket<<16 | id`` (a larger one would collide across sockets)
ID_LIMITS = {"id": MAX_CPUS, "socket": MAX_CPUS, "core": 1 << 16, "node": 1 << 16}


def _int_field(entry: Mapping[str, Any], key: str, where: str) -> int:
    v = entry.get(key, 0)
    hi = ID_LIMITS[key]
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi:
        shown = repr(v) if not isinstance(v, int) or abs(v) < 10**20 else f"an integer of {len(str(abs(v)))} digits"
        raise TopologyError(f"{where}.{key}: expected an integer in [0, {hi - 1}], got {shown[:40]}")
    return v


def topology_from_detail(detail: Any, *, where: str = "detail") -> CPUTopology:
    """Build a topology from Koordinator's ``detail`` list of ``{"id","core","socket","node"}``."""
    if not isinstance(detail, list):
        raise TopologyError(f"{where}: expected a list, got {type(detail).__name__}")
    infos = []
    seen: set[int] = set()
    for i, entry in enumerate(detail):
        w = f"{where}[{i}]"
        if not isinstance(entry, dict):
            raise TopologyError(f"{w}: expected a mapping, got {type(entry).__name__}")
        cpu = _int_field(entry, "id", w)
        socket = _int_field(entry, "socket", w)
        core = _int_field(entry, "core", w)
        node = _int_field(entry, "node", w)
        if cpu in seen:
            raise TopologyError(f"{w}.id: CPU {cpu} listed twice")
        seen.add(cpu)
        infos.append(CPUInfo(cpu, socket << 16 | core, socket << 16 | node, socket))
    return CPUTopology(infos)


def parse_cpu_topology(text: str) -> CPUTopology:
    """Parse the ``node.koordinator.sh/cpu-topology`` annotation (JSON ``{"detail": [...]}``)."""
    if not isinstance(text, (str, bytes)):
        raise TopologyError(f"{ANNOTATION_CPU_TOPOLOGY}: expected a JSON string, got {type(text).__name__}")
    try:
        obj = loads_json(text)
    except ValueError as e:
        raise TopologyError(f"{ANNOTATION_CPU_TOPOLOGY}: {e}") from None
    if not isinstance(obj, dict):
        raise TopologyError(f"{ANNOTATION_CPU_TOPOLOGY}: expected a JSON object")
    return topology_from_detail(obj.get("detail") or [], where=f"{ANNOTATION_CPU_TOPOLOGY}: detail")


def detail_for_test(num_sockets: int, nodes_per_socket: int, cores_per_node: int,
                    cpus_per_core: int) -> list[dict[str, int]]:
    """Koordinator's ``buildCPUTopologyForTest`` numbering as an annotation ``detail`` list: IDs are
    handed out socket → NUMA node → core → thread, so a core's hyper-threads have consecutive IDs."""
    out = []
    node_id = core_id = cpu_id = 0
    for s in range(num_sockets):
        for _ in range(nodes_per_socket):
            for _ in range(cores_per_node):
                for _ in range(cpus_per_core):
                    out.append({"id": cpu_id, "core": core_id, "socket": s, "node": node_id})
                    cpu_id += 1
                core_id += 1
            node_id += 1
    return out


def build_cpu_topology_for_test(num_sockets: int, nodes_per_socket: int, cores_per_node: int,
                                cpus_per_core: int) -> CPUTopology:
    return topology_from_detail(detail_for_test(num_sockets, nodes_per_socket, cores_per_node, cpus_per_core))


def topology_annotation(detail: list[dict[str, int]]) -> str:
    """The annotation value for a ``detail`` list (compact JSON, like Go's json.Marshal)."""
    return json.dumps({"detail": detail}, separators=(",", ":"))
