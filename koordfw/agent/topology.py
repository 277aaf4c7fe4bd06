"""The node's CPU topology and kubelet CPU-manager policy, reported as koordlet reports them
(``pkg/koordlet/statesinformer/impl/states_noderesourcetopology.go``): the annotations of the node's
``NodeResourceTopology`` (``topology.node.k8s.io/v1alpha1``, cluster-scoped, named like the node), its
NUMA zones and its topology policy.

* CPUs come from ``/sys/devices/system/cpu`` (the online ones) with lscpu's *logical* ids, which koordlet
  reads from ``lscpu -e=CPU,NODE,SOCKET,CORE``: cores and sockets are numbered in the order they first
  appear scanning the CPUs by id (a core is a ``thread_siblings`` set, a socket a ``physical_package_id``);
  NUMA nodes are the kernel's node numbers (``/sys/devices/system/node/node<N>/cpulist``).
* ``node.koordinator.sh/cpu-basic-info``: ``cpuModel`` and ``vendorID`` (``/proc/cpuinfo``),
  ``hyperThreadEnabled`` (``/sys/devices/system/cpu/smt/active``), ``turboEnabled``
  (``intel_pstate/no_turbo`` = 0), ``catL3CbmMask`` (``<resctrl>/info/L3/cbm_mask``).
* ``kubelet.koordinator.sh/cpu-manager-policy``: ``{"policy","options","reservedCPUs"}`` from the kubelet's
  configuration file (``--kubelet-config``, a KubeletConfiguration: ``cpuManagerPolicy``,
  ``cpuManagerPolicyOptions``, ``reservedSystemCPUs``); without one ``{}``, as koordlet with
  ``DisableQueryKubeletConfig``. With the ``static`` policy, ``node.koordinator.sh/pod-cpu-allocs`` lists
  the kubelet-managed pods of ``<kubelet root>/cpu_manager_state`` (not LS/BE pods, not pods with a
  Koordinator cpuset), ``managedByKubelet: true``.
* ``cpu-shared-pools`` / ``be-cpu-shared-pools``: per NUMA node, the CPUs not bound by any pod's
  ``resource-status`` cpuset (BE: not bound by an LSE pod), minus the node's reserved CPUs and an exclusive
  SYSTEM cpuset.
* ``node.koordinator.sh/reservation`` and ``system-qos-resource`` are copied from the Node (``{}`` and
  ``null`` without them, as koordlet marshals the empty values).

Every JSON value is compact, with the Go struct's field order and ``omitempty``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import structlog

from ..core.errors import ConfigError
from ..core.model import Node, Pod
from ..core.nodestate import MAX_CPUS, format_cpuset, parse_cpuset
from ..core.quantity import QuantityError, canonical, format_quantity
from ..core.safeload import load_yaml, loads_json, read_text
from ..extension import (
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_BE_CPU_SHARED_POOLS,
    ANNOTATION_NODE_CPU_ALLOCS,
    ANNOTATION_NODE_CPU_SHARED_POOLS,
    ANNOTATION_NODE_CPU_TOPOLOGY,
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
    ANNOTATION_RESOURCE_STATUS,
    LABEL_MANAGED_BY,
    QOS_BE,
    QOS_LS,
    QOS_LSE,
    TOPOLOGY_GROUP_VERSION,
)

log = structlog.get_logger("koordfw.agent")

#: the annotations koordlet manages on the NodeResourceTopology (managedNRTAnnotationKeys)
MANAGED_ANNOTATIONS = (ANNOTATION_CPU_BASIC_INFO, ANNOTATION_KUBELET_CPU_MANAGER_POLICY, ANNOTATION_NODE_CPU_SHARED_POOLS,
                       ANNOTATION_NODE_BE_CPU_SHARED_POOLS, ANNOTATION_NODE_CPU_TOPOLOGY, ANNOTATION_NODE_CPU_ALLOCS,
                       ANNOTATION_NODE_RESERVATION, ANNOTATION_NODE_SYSTEM_QOS_RESOURCE)
#: the NRT's topology policy when the kubelet's topology manager is not known (v1alpha1.None)
TOPOLOGY_POLICY_NONE = "None"
ZONE_TYPE_NODE = "Node"
MAX_KUBELET_FILE_BYTES = 1 * 2**20


@attrs.frozen
class ProcessorInfo:
    """One logical CPU with lscpu's logical core and socket ids and the kernel's NUMA node."""

    cpu: int
    core: int
    socket: int
    node: int


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(65536).strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    t = text.strip()
    if t.startswith("-") and t[1:].isdigit():
        return -int(t[1:])
    return int(t) if t.isascii() and t.isdigit() and len(t) <= 9 else None


def read_processors(sys_root: str | os.PathLike[str] = "/sys") -> list[ProcessorInfo]:
    """The online CPUs, sorted as koordlet sorts lscpu's output (node, socket, core, cpu)."""
    base = Path(sys_root) / "devices/system/cpu"
    online = _read(base / "online")
    try:
        ids = parse_cpuset(online) if online else []
    except ValueError:
        ids = []
    if not ids:
        ids = sorted(i for i in (_int(p.name[3:]) for p in base.glob("cpu[0-9]*")) if i is not None and i < MAX_CPUS)
    node_of: dict[int, int] = {}
    for d in sorted((Path(sys_root) / "devices/system/node").glob("node[0-9]*")):
        n = _int(d.name[4:])
        text = _read(d / "cpulist")
        if n is None or not text:
            continue
        try:
            for c in parse_cpuset(text):
                node_of.setdefault(c, n)
        except ValueError:
            continue
    cores: dict[Any, int] = {}
    sockets: dict[Any, int] = {}
    out = []
    for i in ids:
        t = base / f"cpu{i}" / "topology"
        package = _int(_read(t / "physical_package_id"))
        package = 0 if package is None or package < 0 else package
        siblings = _read(t / "thread_siblings_list") or _read(t / "core_cpus_list")
        try:
            core_key: Any = (package, tuple(parse_cpuset(siblings))) if siblings else None
        except ValueError:
            core_key = None
        if core_key is None:
            core_id = _int(_read(t / "core_id"))
            core_key = (package, "core", i if core_id is None else core_id)
        core = cores.setdefault(core_key, len(cores))
        socket = sockets.setdefault(package, len(sockets))
        out.append(ProcessorInfo(i, core, socket, node_of.get(i, 0)))
    out.sort(key=lambda p: (p.node, p.socket, p.core, p.cpu))
    return out


def numa_memory(sys_root: str | os.PathLike[str] = "/sys") -> dict[int, int]:
    """MemTotal in bytes per NUMA node (``/sys/devices/system/node/node<N>/meminfo``)."""
    out: dict[int, int] = {}
    for d in (Path(sys_root) / "devices/system/node").glob("node[0-9]*"):
        n = _int(d.name[4:])
        text = _read(d / "meminfo")
        if n is None or not text:
            continue
        for line in text.splitlines():
            parts = line.split()
            # "Node 0 MemTotal:       16384 kB"
            if len(parts) >= 4 and parts[2] == "MemTotal:" and parts[3].isdigit():
                out[n] = int(parts[3]) * 1024
    return out


def cpu_basic_info(proc_root: str | os.PathLike[str] = "/proc", sys_root: str | os.PathLike[str] = "/sys",
                   resctrl_root: str | os.PathLike[str] = "/sys/fs/resctrl") -> dict[str, Any]:
    """extension.CPUBasicInfo (``omitempty`` fields left out)."""
    info: dict[str, Any] = {}
    model = vendor = ""
    for line in (_read(Path(proc_root) / "cpuinfo") or "").splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if not model and k in ("model name", "Model Name"):
            model = v.strip()
        elif not vendor and k == "vendor_id":
            vendor = v.strip()
    if model:
        info["cpuModel"] = model
    smt = _int(_read(Path(sys_root) / "devices/system/cpu/smt/active"))
    if smt == 1:
        info["hyperThreadEnabled"] = True
    if _int(_read(Path(sys_root) / "devices/system/cpu/intel_pstate/no_turbo")) == 0:
        info["turboEnabled"] = True
    cbm = _read(Path(resctrl_root) / "info/L3/cbm_mask")
    if cbm:
        info["catL3CbmMask"] = cbm
    if vendor:
        info["vendorID"] = vendor
    return info


@attrs.frozen
class KubeletCPUManager:
    """What the kubelet's configuration says about its CPU manager (``policy`` "" when unknown)."""

    policy: str = ""
    options: Mapping[str, str] = attrs.field(factory=dict)
    reserved_cpus: str = ""
    topology_manager_policy: str = ""
    topology_manager_scope: str = ""
    #: ``kubeReserved.cpu + systemReserved.cpu`` in milli-cores (what the static policy reserves without
    #: ``reservedSystemCPUs``)
    reserved_milli: int = 0


def read_kubelet_config(path: str | None) -> KubeletCPUManager:
    """The CPU manager part of a KubeletConfiguration file; ``ConfigError`` names the file and field."""
    if path is None:
        return KubeletCPUManager()
    try:
        doc = load_yaml(read_text(path, limit=MAX_KUBELET_FILE_BYTES))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the kubelet configuration: {e.strerror or e}") from None
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{path}: expected a KubeletConfiguration mapping")

    def text(key: str, default: str = "") -> str:
        v = doc.get(key, default)
        if v is None:
            return default
        if not isinstance(v, str):
            raise ConfigError(f"{path}: field {key}: expected a string, got {str(v)[:40]}")
        return v

    opts = doc.get("cpuManagerPolicyOptions") or {}
    if not isinstance(opts, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in opts.items()):
        raise ConfigError(f"{path}: field cpuManagerPolicyOptions: expected a mapping of strings")
    reserved = text("reservedSystemCPUs")
    if reserved:
        try:
            reserved = format_cpuset(parse_cpuset(reserved))
        except ValueError as e:
            raise ConfigError(f"{path}: field reservedSystemCPUs: {e}") from None
    reserved_milli = 0
    for key in ("kubeReserved", "systemReserved"):
        res = doc.get(key) or {}
        if not isinstance(res, Mapping):
            raise ConfigError(f"{path}: field {key}: expected a mapping of resource quantities")
        if res.get("cpu") is not None:
            try:
                reserved_milli += canonical("cpu", res["cpu"])
            except QuantityError as e:
                raise ConfigError(f"{path}: field {key}.cpu: {e}") from None
    return KubeletCPUManager(policy=text("cpuManagerPolicy", "none"), options=dict(opts), reserved_cpus=reserved,
                             reserved_milli=reserved_milli,
                             topology_manager_policy=text("topologyManagerPolicy"),
                             topology_manager_scope=text("topologyManagerScope", "container"))


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _pod_cpuset(pod: Pod) -> list[int]:
    raw = pod.annotations.get(ANNOTATION_RESOURCE_STATUS)
    if not raw:
        return []
    try:
        obj = loads_json(raw)
        return parse_cpuset(obj.get("cpuset") or "") if isinstance(obj, dict) else []
    except (ValueError, AttributeError):
        return []


def _kubelet_allocs(state_path: Path, pods: Sequence[Pod], shared: dict[int, ProcessorInfo]) -> list[dict] | None:
    """calGuaranteedCpu: the kubelet checkpoint's pods that Koordinator does not manage."""
    text = _read(state_path)
    if not text:
        return None
    try:
        checkpoint = loads_json(text)
    except ValueError as e:
        log.warning("cannot read the kubelet CPU manager state", file=str(state_path), error=str(e))
        return None
    entries = checkpoint.get("entries") if isinstance(checkpoint, dict) else None
    if not isinstance(entries, dict):
        return None
    by_uid = {p.uid: p for p in pods}
    managed = {p.uid for p in pods if p.labels.get("koordinator.sh/qosClass") in (QOS_LS, QOS_BE) or _pod_cpuset(p)}
    allocs = []
    for uid, containers in entries.items():
        if uid in managed or not isinstance(containers, dict):
            continue
        cpus: set[int] = set()
        for text_ in containers.values():
            try:
                cpus.update(parse_cpuset(text_) if isinstance(text_, str) else [])
            except ValueError:
                continue
        if not cpus:
            continue
        entry: dict[str, Any] = {}
        p = by_uid.get(uid)
        if p is not None:
            entry["namespace"], entry["name"] = p.namespace, p.name
        entry.update({"uid": uid, "cpuset": format_cpuset(cpus), "managedByKubelet": True})
        allocs.append(entry)
        for c in cpus:
            shared.pop(c, None)
    allocs.sort(key=lambda a: a["uid"])
    return allocs or None


def _pools(cpus: Mapping[int, ProcessorInfo]) -> list[dict[str, Any]]:
    by_node: dict[int, list[int]] = {}
    for c, info in cpus.items():
        by_node.setdefault(info.node, []).append(c)
    keyed = sorted(((cpus[min(ids)].socket << 32) | n, cpus[min(ids)].socket, n, ids) for n, ids in by_node.items())
    return [{"socket": sock, "node": n, "cpuset": format_cpuset(ids)} for _, sock, n, ids in keyed]


def _minus(pools: list[dict[str, Any]], cpus: Iterable[int]) -> list[dict[str, Any]]:
    drop = set(cpus)
    if not drop:
        return pools
    out = []
    for p in pools:
        left = [c for c in parse_cpuset(p["cpuset"]) if c not in drop]
        q = {"socket": p["socket"], "node": p["node"]}
        if left:
            q["cpuset"] = format_cpuset(left)
        out.append(q)
    return out


def topology_annotations(processors: Sequence[ProcessorInfo], node: Node | None, pods: Sequence[Pod], *,
                         kubelet: KubeletCPUManager, basic_info: Mapping[str, Any],
                         kubelet_root: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The NodeResourceTopology annotations koordlet's calcNodeTopo writes."""
    node_anns = node.annotations if node is not None else {}
    cpus = {p.cpu: p for p in processors}
    shared = dict(cpus)
    allocs: list[dict] | None = None
    if kubelet.policy == "static" and kubelet_root is not None:
        allocs = _kubelet_allocs(Path(kubelet_root) / "cpu_manager_state", pods, shared)
    reservation_raw = node_anns.get(ANNOTATION_NODE_RESERVATION)
    reservation: dict[str, Any] = {}
    if reservation_raw:
        try:
            obj = loads_json(reservation_raw)
            if isinstance(obj, dict):
                reservation = dict(obj)
                if isinstance(reservation.get("reservedCPUs"), str):
                    reservation["reservedCPUs"] = format_cpuset(parse_cpuset(reservation["reservedCPUs"]))
        except ValueError as e:  # koordlet logs and reports an empty reservation
            log.warning("ignoring malformed node reservation", annotation=ANNOTATION_NODE_RESERVATION, error=str(e))
            reservation = {}
    system_raw = node_anns.get(ANNOTATION_NODE_SYSTEM_QOS_RESOURCE)
    system_obj: Any = None
    if system_raw:
        try:
            system_obj = loads_json(system_raw)
        except ValueError as e:
            raise ValueError(f"annotation {ANNOTATION_NODE_SYSTEM_QOS_RESOURCE}: {e}") from None
    ls_cpus, be_cpus = dict(shared), dict(shared)
    for p in pods:
        held = _pod_cpuset(p)
        for c in held:
            ls_cpus.pop(c, None)
            if p.labels.get("koordinator.sh/qosClass") == QOS_LSE:
                be_cpus.pop(c, None)
    ls_pools, be_pools = _pools(ls_cpus), _pools(be_cpus)
    try:
        reserved = parse_cpuset(reservation.get("reservedCPUs") or "")
    except ValueError:
        reserved = []
    ls_pools, be_pools = _minus(ls_pools, reserved), _minus(be_pools, reserved)
    if isinstance(system_obj, dict) and system_obj.get("cpuset") and system_obj.get("cpusetExclusive", True) is not False:
        try:
            sys_cpus = parse_cpuset(system_obj["cpuset"])
        except (ValueError, TypeError):
            sys_cpus = []
        ls_pools, be_pools = _minus(ls_pools, sys_cpus), _minus(be_pools, sys_cpus)
    detail = [{"id": p.cpu, "core": p.core, "socket": p.socket, "node": p.node}
              for p in sorted(processors, key=lambda p: p.cpu)]
    topo: dict[str, Any] = {"detail": detail} if detail else {}
    return {
        ANNOTATION_CPU_BASIC_INFO: _dumps(dict(basic_info)),
        ANNOTATION_NODE_CPU_TOPOLOGY: _dumps(topo),
        ANNOTATION_NODE_CPU_SHARED_POOLS: _dumps(ls_pools or None),
        ANNOTATION_KUBELET_CPU_MANAGER_POLICY: kubelet_policy_json(kubelet, processors),
        ANNOTATION_NODE_BE_CPU_SHARED_POOLS: _dumps(be_pools or None),
        ANNOTATION_NODE_CPU_ALLOCS: _dumps(allocs),
        ANNOTATION_NODE_RESERVATION: _dumps(reservation),
        ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: _dumps(system_obj),
    }


def topology_policy(kubelet: KubeletCPUManager) -> str:
    """getTopologyPolicy: the NRT policy from the kubelet's topology manager policy and scope."""
    names = {"single-numa-node": "SingleNUMANode", "restricted": "Restricted", "best-effort": "BestEffort"}
    level = {"container": "ContainerLevel", "pod": "PodLevel"}.get(kubelet.topology_manager_scope)
    name = names.get(kubelet.topology_manager_policy)
    return f"{name}{level}" if name and level else TOPOLOGY_POLICY_NONE


def zones(processors: Sequence[ProcessorInfo], memory: Mapping[int, int]) -> list[dict[str, Any]]:
    """calTopologyZoneList: one ``Node`` zone per NUMA node (cpu, memory; hugepages 0 unless reported)."""
    nodes = sorted({p.node for p in processors} | set(memory))
    out = []
    for n in nodes:
        ncpu = sum(1 for p in processors if p.node == n)
        res = {"cpu": str(ncpu), "hugepages-1Gi": "0", "hugepages-2Mi": "0",
               "memory": format_quantity("memory", memory.get(n, 0))}
        out.append({"name": f"node-{n}", "type": ZONE_TYPE_NODE,
                    "resources": [{"name": k, "capacity": v, "allocatable": v, "available": v}
                                  for k, v in sorted(res.items())]})
    return out


def node_resource_topology(node_name: str, node_uid: str, annotations: Mapping[str, str],
                           zone_list: list[dict[str, Any]], policy: str) -> dict[str, Any]:
    """A new NodeResourceTopology object (newNodeTopo + the reported status)."""
    meta: dict[str, Any] = {"name": node_name, "labels": {LABEL_MANAGED_BY: "Koordinator"},
                            "annotations": dict(annotations)}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
                                    "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": TOPOLOGY_GROUP_VERSION, "kind": "NodeResourceTopology", "metadata": meta,
            "topologyPolicies": [policy], "zones": zone_list}


def _decoded(v: str | None) -> Any:
    if v is None:
        return math.nan  # never equal to a decoded value
    try:
        return loads_json(v)
    except ValueError:
        return v


def nrt_changed(old: Mapping[str, Any], annotations: Mapping[str, str], zone_list: list[dict], policy: str) -> bool:
    """isChanged: the managed annotations (compared as JSON), the topology policies and the zones differ."""
    meta = old.get("metadata") or {}
    anns = meta.get("annotations")
    if not isinstance(anns, Mapping):
        return True
    if old.get("topologyPolicies") != [policy]:
        return True
    for k in MANAGED_ANNOTATIONS:
        if (k in anns) != (k in annotations):
            return True
        if k in anns and _decoded(anns[k]) != _decoded(annotations[k]):
            return True
    return old.get("zones") != zone_list


def updated_nrt(old: Mapping[str, Any], annotations: Mapping[str, str], zone_list: list[dict],
                policy: str) -> dict[str, Any]:
    """updateNRT: ``old`` with the reported annotations and labels set and zones/policies replaced."""
    new = json.loads(json.dumps(old))
    meta = new.setdefault("metadata", {})
    meta.setdefault("annotations", {}).update(annotations)
    meta.setdefault("labels", {})
    new["topologyPolicies"] = [policy]
    new["zones"] = zone_list
    return new


def take_by_topology(processors: Sequence[ProcessorInfo], available: Iterable[int], n: int) -> list[int] | None:
    """The kubelet's ``takeByTopologyNUMAPacked`` (sockets first, as koordlet's copy): whole sockets, then whole
    NUMA nodes, then whole cores while ``n`` still needs them, then single CPUs, each level ordered by fewest
    available CPUs then id. ``None`` when fewer than ``n`` are available."""
    details = {p.cpu: p for p in processors if p.cpu in set(available)}
    if n < 1:
        return []
    if n > len(details):
        return None
    ncpu = len(processors)
    cpus_per_socket = ncpu // max(len({p.socket for p in processors}), 1)
    cpus_per_core = ncpu // max(len({p.core for p in processors}), 1)
    result: list[int] = []
    need = n

    def avail(attr: str, v: int) -> list[int]:
        return sorted(c for c, p in details.items() if getattr(p, attr) == v)

    def ordered(attr: str, ids: Iterable[int]) -> list[int]:
        return sorted(set(ids), key=lambda i: (len(avail(attr, i)), i))

    def sockets() -> list[int]:
        return ordered("socket", (p.socket for p in details.values()))

    def numas() -> list[int]:
        return [m for s in sockets() for m in ordered("node", (p.node for p in details.values() if p.socket == s))]

    def cores() -> list[int]:
        return [c for m in numas() for c in ordered("core", (p.core for p in details.values() if p.node == m))]

    def take(cpus: list[int]) -> None:
        nonlocal need
        result.extend(cpus)
        for c in cpus:
            details.pop(c, None)
        need -= len(cpus)

    levels = (("socket", sockets, lambda v: cpus_per_socket),
              ("node", numas, lambda v: sum(1 for p in processors if p.node == v)),
              ("core", cores, lambda v: cpus_per_core))
    for attr, order, size in levels:
        for v in [v for v in order() if len(avail(attr, v)) == size(v)]:
            whole = sorted(p.cpu for p in processors if getattr(p, attr) == v)
            if need >= len(whole):
                take(whole)
            if need < 1:
                return sorted(result)
    for core in cores():
        for c in avail("core", core):
            take([c])
            if need < 1:
                return sorted(result)
    return None


def static_reserved_cpus(kubelet: KubeletCPUManager, processors: Sequence[ProcessorInfo]) -> str:
    """GetStaticCPUManagerPolicyReservedCPUs: ``reservedSystemCPUs``, else ``ceil(kube + system reserved)``
    CPUs taken by topology from all; "" when the static policy could not start (no CPU reserved)."""
    if kubelet.policy != "static":
        return ""
    if kubelet.reserved_cpus:
        return kubelet.reserved_cpus
    n = math.ceil(kubelet.reserved_milli / 1000)
    if n <= 0:
        log.warning("the kubelet's static CPU manager policy needs systemReserved.cpu + kubeReserved.cpu > 0")
        return ""
    got = take_by_topology(processors, [p.cpu for p in processors], n)
    return format_cpuset(got) if got else ""


def kubelet_policy_json(kubelet: KubeletCPUManager, processors: Sequence[ProcessorInfo] = ()) -> str:
    """extension.KubeletCPUManagerPolicy as koordlet marshals it (``{}`` when the policy is unknown);
    ``processors`` for the static policy's reserved CPUs when ``reservedSystemCPUs`` is not given."""
    policy: dict[str, Any] = {}
    if kubelet.policy:
        policy["policy"] = kubelet.policy
        if kubelet.options:
            policy["options"] = dict(kubelet.options)
        reserved = static_reserved_cpus(kubelet, processors)
        if reserved:
            policy["reservedCPUs"] = reserved
    return _dumps(policy)


def kubelet_policy_annotation(kubelet: KubeletCPUManager, processors: Sequence[ProcessorInfo] = ()) -> dict[str, str]:
    """``{kubelet.koordinator.sh/cpu-manager-policy: ...}``, what the node plugins read from the node."""
    return {ANNOTATION_KUBELET_CPU_MANAGER_POLICY: kubelet_policy_json(kubelet, processors)}
