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
Paths are built with the helpers here (:meth:`NodeState.cgroup_file`, :meth:`NodeState.qos_dir`, ...)
so a plugin works on v1 and v2 and with the cgroupfs and systemd drivers alike.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import attrs

from .errors import ManifestError
from .model import BEST_EFFORT, BURSTABLE, GUARANTEED, Pod, pod_from_manifest
from .quantity import QuantityError, parse_resource_list

FS_CGROUP = "cgroup"
FS_RESCTRL = "resctrl"
FILESYSTEMS = (FS_CGROUP, FS_RESCTRL)

#: Kubernetes QoS level → the kubelet's QoS cgroup name (cgroupfs driver); Guaranteed pods sit in kubepods
QOS_LEVEL_DIRS = {BEST_EFFORT: "besteffort", BURSTABLE: "burstable", GUARANTEED: ""}
#: Kubernetes QoS level → the Koordinator QoS class it implies (apis/extension/qos_utils.go)
KOORD_QOS_OF_KUBE = {GUARANTEED: "LSR", BURSTABLE: "LS", BEST_EFFORT: "BE"}

CFS_PERIOD_US = 100000  # DefaultCPUCFSPeriod

ANNOTATION_RESERVATION = "node.koordinator.sh/reservation"
ANNOTATION_SYSTEM_QOS = "node.koordinator.sh/system-qos-resource"
ANNOTATION_RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"


# -- cpuset lists ------------------------------------------------------------------------------------

def parse_cpuset(text: str | None) -> list[int]:
    """Parse a Linux cpu list (``"0-3,8,10-11"``) into sorted CPU ids. Empty text → ``[]``.

    Raises ``ValueError`` naming the bad part.
    """
    out: set[int] = set()
    if text is None:
        return []
    for part in str(text).strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ValueError(f"invalid cpu list {text!r}: bad element {part!r}") from None
        if a < 0 or b < a:
            raise ValueError(f"invalid cpu list {text!r}: bad range {part!r}")
        out.update(range(a, b + 1))
    return sorted(out)


def format_cpuset(cpus: Iterable[int]) -> str:
    """Render CPU ids as the kernel prints a cpu list (sorted ranges): ``[0,1,2,5]`` → ``"0-2,5"``."""
    ids = sorted(set(int(c) for c in cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


# -- values ------------------------------------------------------------------------------------------

def _check_fs(inst: Any, attribute: Any, value: str) -> None:
    if value not in FILESYSTEMS:
        raise ValueError(f"FileWrite.fs must be one of {FILESYSTEMS}, got {value!r}")


@attrs.frozen
class FileWrite:
    """One desired file value, returned by ``qos_plan`` / ``runtime_hook``.

    ``path``: relative to the root of ``fs``; ``value``: the text to write; ``plugin``: filled in by the
    agent with the name of the plugin that asked; ``mkdir``: create the parent directory when missing
    (resctrl groups need it; cgroups of pods are never created, a missing one has vanished).
    ``rmdir``: remove the directory ``path`` instead of writing (``value`` is ignored, ``mkdir`` must be
    false); the kernel's pseudo-filesystems remove a resctrl group or a cgroup with ``rmdir(2)`` even
    though it lists control files. Build one with :meth:`remove_dir`.
    """

    path: str
    value: str = attrs.field(converter=str)
    fs: str = attrs.field(default=FS_CGROUP, validator=_check_fs)
    plugin: str = ""
    mkdir: bool = False
    rmdir: bool = attrs.field(default=False)

    @rmdir.validator
    def _check_rmdir(self, attribute: Any, value: bool) -> None:
        if value and self.mkdir:
            raise ValueError(f"FileWrite {self.path!r}: rmdir and mkdir exclude each other")

    @classmethod
    def remove_dir(cls, path: str, fs: str = FS_CGROUP, plugin: str = "") -> FileWrite:
        """A request to remove the directory ``path`` (relative to the root of ``fs``)."""
        return cls(path, "", fs=fs, plugin=plugin, rmdir=True)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "value": self.value, "plugin": self.plugin, "fs": self.fs}
        if self.rmdir:
            out["rmdir"] = True
        return out


@attrs.frozen
class CPUInfo:
    """One logical CPU of the node (Koordinator's ``CPUInfo`` of the NodeResourceTopology)."""

    id: int
    core: int
    socket: int = 0
    node: int = 0


@attrs.frozen
class ContainerState:
    name: str
    id: str = ""
    cgroup_dir: str = ""  # relative to a controller's root, e.g. "kubepods/besteffort/pod<uid>/<id>"


@attrs.frozen
class PodState:
    """A pod found on the node.

    ``pod`` is the koordfw :class:`~koordfw.core.model.Pod` when its manifest is known, else ``None``.
    ``qos`` is the Koordinator QoS class (from the pod's metadata, else from the kube QoS level of its
    cgroup; ``""`` when neither is known: such a pod counts as non-BE, as in Koordinator).
    ``kube_qos`` is the Kubernetes QoS (``Guaranteed``/``Burstable``/``BestEffort``, or ``""``).
    ``cgroup_dir`` is relative to a controller's root (v1) or the unified root (v2).
    ``usage`` holds canonical ints (``cpu`` milli, ``memory`` bytes).
    """

    uid: str
    pod: Pod | None = None
    qos: str = ""
    kube_qos: str = ""
    cgroup_dir: str = ""
    containers: tuple[ContainerState, ...] = ()
    usage: Mapping[str, int] = attrs.field(factory=dict)

    @property
    def is_be(self) -> bool:
        """Koordinator's BE test (``qosClass == BE`` or kube QoS BestEffort); unknown pods are not BE."""
        return self.qos == "BE" or self.kube_qos == BEST_EFFORT

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.pod.annotations if self.pod is not None else {}


#: Koordinator's ``CgroupPath.base`` values (apis/slo/v1alpha1) → the QoS level dir they stand for
CGROUP_BASES = {"": None, "CgroupRoot": None, "Kubepods": "guaranteed", "KubepodsBurstable": "burstable",
                "KubepodsBesteffort": "besteffort"}


@attrs.frozen
class HostApp:
    """A non-pod workload of the node (Koordinator's NodeSLO ``hostApplications``).

    ``cgroup_base`` is Koordinator's ``cgroupPath.base`` (``""``/``CgroupRoot``, ``Kubepods``,
    ``KubepodsBurstable``, ``KubepodsBesteffort``); ``cgroup_path`` the resulting dir relative to a
    controller's root. A host app counts as BE only when ``qos == "BE"`` and its base is
    ``KubepodsBesteffort`` (Koordinator's ``NonBEHostAppFilter``).
    """

    name: str
    qos: str = ""
    cgroup_path: str = ""
    usage: Mapping[str, int] = attrs.field(factory=dict)
    cgroup_base: str = ""

    @property
    def is_be(self) -> bool:
        return self.qos == "BE" and self.cgroup_base == "KubepodsBesteffort"


@attrs.frozen
class ResctrlInfo:
    """What ``/sys/fs/resctrl/info`` says about L3 CAT and MBA (only when resctrl is mounted).

    ``cbm_mask``: hex string of the full L3 mask (``info/L3/cbm_mask``); ``min_cbm_bits``; ``num_closids``;
    ``cache_ids``: the L3 cache domains (from ``schemata``); ``vendor``: ``intel``/``amd``/...;
    ``mba``: ``None`` without MBA, else a mapping (``minBandwidth``, ``bandwidthGran``, ``numClosids``,
    ``delayLinear``) from ``info/MB``; ``{}`` when the state file only says ``"mba": true``.
    """

    cbm_mask: str = ""
    min_cbm_bits: int = 1
    num_closids: int = 0
    cache_ids: tuple[int, ...] = ()
    vendor: str = ""
    mba: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "resctrl") -> ResctrlInfo:
        if not isinstance(raw, Mapping):
            raise ManifestError("expected a mapping", field=where)
        try:
            mba = raw.get("mba")
            return cls(cbm_mask=str(raw.get("cbmMask", "")), min_cbm_bits=int(raw.get("minCbmBits", 1)),
                       num_closids=int(raw.get("numClosids", 0)),
                       cache_ids=tuple(int(x) for x in raw.get("cacheIds") or ()),
                       vendor=str(raw.get("vendor", "")),
                       # the state file may say just "mba": true (MBA present, details unknown) → {}
                       mba=({} if mba is True else dict(mba)) if mba else None)
        except (TypeError, ValueError) as e:
            raise ManifestError(f"invalid resctrl info: {e}", field=where) from None


@attrs.frozen
class Reservation:
    """The node annotation ``node.koordinator.sh/reservation``."""

    resources: Mapping[str, int] = attrs.field(factory=dict)
    reserved_cpus: tuple[int, ...] = ()
    apply_policy: str = "Default"


@attrs.frozen
class NodeState:
    """One round's snapshot of a node (see the module docstring for the contract)."""

    name: str = ""
    cgroup_version: int = 1
    cgroup_driver: str = "cgroupfs"
    kubepods: str = "kubepods"
    capacity: Mapping[str, int] = attrs.field(factory=dict)
    allocatable: Mapping[str, int] = attrs.field(factory=dict)
    usage: Mapping[str, int] = attrs.field(factory=dict)
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    cpu_topology: tuple[CPUInfo, ...] = ()
    pods: tuple[PodState, ...] = ()
    host_apps: tuple[HostApp, ...] = ()
    cgroups: Mapping[str, str] = attrs.field(factory=dict)
    resctrl: ResctrlInfo | None = None
    config: Mapping[str, Any] = attrs.field(factory=dict)
    metrics: dict[str, Any] = attrs.field(factory=dict)

    # -- paths -------------------------------------------------------------------------------------
    def cgroup_file(self, controller: str, rel_dir: str, filename: str) -> str:
        """Path, relative to the cgroup root, of ``filename`` of the cgroup ``rel_dir``.

        v1: ``<controller>/<rel_dir>/<filename>``; v2 (unified): ``<rel_dir>/<filename>``. The file name
        is used as given: v1 and v2 name some knobs differently (``cpu.cfs_quota_us`` vs ``cpu.max``),
        see :meth:`cpu_quota_write` for the quota.
        """
        rel_dir = rel_dir.strip("/")
        parts = ([controller] if self.cgroup_version == 1 else []) + ([rel_dir] if rel_dir else []) + [filename]
        return "/".join(parts)

    def qos_dir(self, level: str) -> str:
        """The kubelet's QoS-level cgroup dir (relative) for ``besteffort``/``burstable``/``guaranteed``.

        Accepts the kube QoS names too (``BestEffort``...). cgroupfs: ``kubepods/besteffort``;
        systemd: ``kubepods.slice/kubepods-besteffort.slice``; guaranteed is the kubepods dir itself.
        """
        lvl = {"BestEffort": "besteffort", "Burstable": "burstable", "Guaranteed": "guaranteed"}.get(level, level)
        if lvl not in ("besteffort", "burstable", "guaranteed"):
            raise ValueError(f"unknown QoS level {level!r}")
        if lvl == "guaranteed":
            return self.kubepods
        if self.cgroup_driver == "systemd":
            return f"{self.kubepods}/kubepods-{lvl}.slice"
        return f"{self.kubepods}/{lvl}"

    def pod_dir(self, uid: str, kube_qos: str) -> str:
        """The kubelet's cgroup dir of a pod (relative) for its kube QoS and this node's driver."""
        lvl = QOS_LEVEL_DIRS.get(kube_qos)
        if lvl is None:
            raise ValueError(f"unknown kube QoS {kube_qos!r}")
        if self.cgroup_driver == "systemd":
            esc = uid.replace("-", "_")
            name = f"kubepods-{lvl}-pod{esc}.slice" if lvl else f"kubepods-pod{esc}.slice"
        else:
            name = f"pod{uid}"
        base = self.qos_dir(lvl) if lvl else self.kubepods
        return f"{base}/{name}"

    def cpu_quota_file(self, rel_dir: str) -> str:
        return self.cgroup_file("cpu", rel_dir, "cpu.cfs_quota_us" if self.cgroup_version == 1 else "cpu.max")

    def cpuset_file(self, rel_dir: str) -> str:
        return self.cgroup_file("cpuset", rel_dir, "cpuset.cpus")

    def cpu_idle_file(self, rel_dir: str) -> str:
        return self.cgroup_file("cpu", rel_dir, "cpu.idle")

    def cpu_quota_write(self, rel_dir: str, quota_us: int, plugin: str = "") -> FileWrite:
        """The write setting the CFS quota of ``rel_dir`` (``-1`` = unlimited) on v1 or v2."""
        if self.cgroup_version == 1:
            return FileWrite(self.cpu_quota_file(rel_dir), str(int(quota_us)), plugin=plugin)
        period = self.cpu_period(rel_dir)
        value = f"max {period}" if quota_us < 0 else f"{int(quota_us)} {period}"
        return FileWrite(self.cpu_quota_file(rel_dir), value, plugin=plugin)

    # -- current values ----------------------------------------------------------------------------
    def cgroup_value(self, path: str) -> str | None:
        return self.cgroups.get(path)

    def cpu_quota(self, rel_dir: str) -> int | None:
        """Current CFS quota of ``rel_dir`` in µs (``-1`` = unlimited), ``None`` when not read."""
        raw = self.cgroups.get(self.cpu_quota_file(rel_dir))
        if raw is None:
            return None
        head = raw.split()[0] if raw.split() else ""
        if head == "max":
            return -1
        try:
            return int(head)
        except ValueError:
            return None

    def cpu_period(self, rel_dir: str) -> int:
        if self.cgroup_version == 1:
            raw = self.cgroups.get(self.cgroup_file("cpu", rel_dir, "cpu.cfs_period_us"))
            return int(raw) if raw and raw.strip().isdigit() else CFS_PERIOD_US
        raw = self.cgroups.get(self.cpu_quota_file(rel_dir))
        parts = raw.split() if raw else []
        return int(parts[1]) if len(parts) == 2 and parts[1].isdigit() else CFS_PERIOD_US

    def cpuset(self, rel_dir: str) -> list[int] | None:
        """Current ``cpuset.cpus`` of ``rel_dir`` as CPU ids, ``None`` when not read.

        On v2 an empty ``cpuset.cpus`` means "inherit": ``cpuset.cpus.effective`` is used then.
        """
        raw = self.cgroups.get(self.cpuset_file(rel_dir))
        if self.cgroup_version == 2 and not (raw or "").strip():
            eff = self.cgroups.get(self.cgroup_file("cpuset", rel_dir, "cpuset.cpus.effective"))
            raw = eff if eff is not None else raw
        return None if raw is None else parse_cpuset(raw)

    # -- topology and annotations ------------------------------------------------------------------
    @property
    def cpu_ids(self) -> list[int]:
        """All logical CPUs: from the topology, else ``0..capacity-1``."""
        if self.cpu_topology:
            return sorted(c.id for c in self.cpu_topology)
        return list(range(self.capacity.get("cpu", 0) // 1000))

    def topology(self) -> tuple[CPUInfo, ...]:
        """The CPU topology; without one, each CPU its own core on socket 0, node 0."""
        return self.cpu_topology or tuple(CPUInfo(i, i) for i in self.cpu_ids)

    def reservation(self) -> Reservation:
        """Parse ``node.koordinator.sh/reservation``; a bad value raises ``ValueError`` naming it."""
        raw = self.annotations.get(ANNOTATION_RESERVATION)
        if not raw:
            return Reservation()
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("expected a JSON object")
            res = parse_resource_list(obj.get("resources") or {}, where="resources")
            cpus = parse_cpuset(obj.get("reservedCPUs") or "")
            if cpus:  # Koordinator: reservedCPUs, when set, decides the reserved cpu amount
                res["cpu"] = len(cpus) * 1000
        except (ValueError, QuantityError) as e:
            raise ValueError(f"node {self.name}: annotation {ANNOTATION_RESERVATION}: {e}") from None
        return Reservation(res, tuple(cpus), str(obj.get("applyPolicy") or "Default"))

    def pod(self, uid: str) -> PodState | None:
        for p in self.pods:
            if p.uid == uid:
                return p
        return None

    # -- the state file ----------------------------------------------------------------------------
    @classmethod
    def from_state_file(cls, data: Mapping[str, Any], source: str = "<state>") -> NodeState:
        """Parse the node state format of ``koordfw agent plan --state`` (errors name file and field).

        Keys: ``cgroupVersion`` (1|2), ``node`` (name, capacity, allocatable, labels, annotations,
        cpuTopology.detail, usage), ``pods`` ([{metadata, spec, status} of a Pod (optional), uid, usage,
        cgroupDir (optional)}]), ``hostApps`` ([{name, qos, cgroupPath, usage}]), ``cgroups``
        (path → current value), ``config`` (pluginConfig), and optionally ``cgroupDriver``,
        ``kubepods`` and ``resctrl`` (cbmMask, minCbmBits, numClosids, cacheIds, vendor, mba).
        """
        def err(msg: str, field: str) -> ManifestError:
            return ManifestError(msg, file=source, field=field)

        if not isinstance(data, Mapping):
            raise err("a node state must be a JSON object", "")
        version = data.get("cgroupVersion", 1)
        if version not in (1, 2):
            raise err(f"expected 1 or 2, got {version!r}", "cgroupVersion")
        driver = data.get("cgroupDriver", "cgroupfs")
        if driver not in ("cgroupfs", "systemd"):
            raise err(f"expected cgroupfs or systemd, got {driver!r}", "cgroupDriver")
        kubepods = str(data.get("kubepods") or ("kubepods.slice" if driver == "systemd" else "kubepods"))
        node = data.get("node") or {}
        if not isinstance(node, Mapping):
            raise err("expected a mapping", "node")

        def res(obj: Any, where: str) -> dict[str, int]:
            try:
                return parse_resource_list(obj, where=where)
            except QuantityError as e:
                raise err(str(e), e.field or where) from None

        def strmap(obj: Any, where: str) -> dict[str, str]:
            if obj is None:
                return {}
            if not isinstance(obj, Mapping):
                raise err("expected a mapping", where)
            return {str(k): str(v) for k, v in obj.items()}

        capacity = res(node.get("capacity"), "node.capacity")
        allocatable = res(node.get("allocatable"), "node.allocatable") or dict(capacity)
        topo: list[CPUInfo] = []
        detail = (node.get("cpuTopology") or {}).get("detail") if isinstance(node.get("cpuTopology"), Mapping) else None
        if node.get("cpuTopology") is not None and not isinstance(node.get("cpuTopology"), Mapping):
            raise err("expected a mapping with detail", "node.cpuTopology")
        for i, c in enumerate(detail or []):
            where = f"node.cpuTopology.detail[{i}]"
            if not isinstance(c, Mapping) or "id" not in c:
                raise err("expected {id, core, socket, node}", where)
            try:
                topo.append(CPUInfo(int(c["id"]), int(c.get("core", c["id"])), int(c.get("socket", 0)),
                                    int(c.get("node", 0))))
            except (TypeError, ValueError):
                raise err("id, core, socket and node must be integers", where) from None
        name = str(node.get("name") or "")
        kubepods_state = cls(cgroup_version=version, cgroup_driver=driver, kubepods=kubepods)

        pods: list[PodState] = []
        raw_pods = data.get("pods") or []
        if not isinstance(raw_pods, list):
            raise err("expected a list", "pods")
        for i, p in enumerate(raw_pods):
            where = f"pods[{i}]"
            if not isinstance(p, Mapping):
                raise err("expected a mapping", where)
            pod = None
            if p.get("metadata"):
                try:
                    pod = pod_from_manifest({k: p[k] for k in ("metadata", "spec", "status") if k in p})
                except ManifestError as e:
                    raise err(e.detail, f"{where}.{e.field}" if e.field else where) from None
            uid = str(p.get("uid") or (pod.uid if pod is not None else ""))
            if not uid:
                raise err("a pod needs a uid", f"{where}.uid")
            qos = pod.qos_class if pod is not None else ""
            kube_qos = pod.kube_qos if pod is not None else ""
            cgdir = p.get("cgroupDir")
            if not cgdir and pod is not None:
                cgdir = kubepods_state.pod_dir(uid, kube_qos)
            pods.append(PodState(uid=uid, pod=pod, qos=qos, kube_qos=kube_qos, cgroup_dir=str(cgdir or ""),
                                 usage=res(p.get("usage"), f"{where}.usage")))
        apps: list[HostApp] = []
        raw_apps = data.get("hostApps") or []
        if not isinstance(raw_apps, list):
            raise err("expected a list", "hostApps")
        for i, a in enumerate(raw_apps):
            where = f"hostApps[{i}]"
            if not isinstance(a, Mapping) or not a.get("name"):
                raise err("expected a mapping with a name", where)
            cg_path, base = a.get("cgroupPath") or "", ""
            if isinstance(cg_path, Mapping):  # Koordinator's {base, parentDir, relativePath}
                base = str(cg_path.get("base") or "")
                if base not in CGROUP_BASES:
                    raise err(f"unknown base {base!r}; known: {sorted(b for b in CGROUP_BASES if b)}",
                              f"{where}.cgroupPath.base")
                level = CGROUP_BASES[base]
                head = kubepods_state.qos_dir(level) if level else ""
                cg_path = "/".join(x.strip("/") for x in (head, str(cg_path.get("parentDir") or ""),
                                                          str(cg_path.get("relativePath") or "")) if x.strip("/"))
            elif isinstance(cg_path, str):
                be_dir = kubepods_state.qos_dir("besteffort")
                if cg_path.strip("/") == be_dir or cg_path.strip("/").startswith(be_dir + "/"):
                    base = "KubepodsBesteffort"
            else:
                raise err("expected a path or {base, parentDir, relativePath}", f"{where}.cgroupPath")
            apps.append(HostApp(name=str(a["name"]), qos=str(a.get("qos") or ""), cgroup_path=str(cg_path),
                                usage=res(a.get("usage"), f"{where}.usage"), cgroup_base=base))
        cg = data.get("cgroups") or {}
        if not isinstance(cg, Mapping):
            raise err("expected a mapping of path to value", "cgroups")
        config = data.get("config") or {}
        if not isinstance(config, Mapping):
            raise err("expected a mapping of plugin name to args", "config")
        resctrl = None
        if data.get("resctrl") is not None:
            try:
                resctrl = ResctrlInfo.from_dict(data["resctrl"])
            except ManifestError as e:
                raise err(e.detail, "resctrl") from None
        return cls(name=name, cgroup_version=version, cgroup_driver=driver, kubepods=kubepods,
                   capacity=capacity, allocatable=allocatable, usage=res(node.get("usage"), "node.usage"),
                   labels=strmap(node.get("labels"), "node.labels"),
                   annotations=strmap(node.get("annotations"), "node.annotations"),
                   cpu_topology=tuple(topo), pods=tuple(pods), host_apps=tuple(apps),
                   cgroups={str(k): str(v).strip() for k, v in cg.items()}, resctrl=resctrl,
                   config=dict(config))
