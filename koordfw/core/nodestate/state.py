"""One round's snapshot of a node (:class:`NodeState`) and its parts: pods, containers, host
applications, CPU topology, resctrl, the node's reservation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from ...extension import ANNOTATION_NODE_RESERVATION
from ..errors import ManifestError
from ..model import BEST_EFFORT, Pod, pod_from_manifest
from ..quantity import QuantityError, parse_resource_list
from ..safeload import loads_json
from .writes import (
    _INT64_MAX,
    CFS_PERIOD_RANGE,
    CFS_PERIOD_US,
    CPU_LIST_FILES,
    MAX_CGROUP_VALUE,
    MAX_CPUS,
    MAX_TOPOLOGY_ID,
    QOS_LEVEL_DIRS,
    FileWrite,
    _key,
    _show,
    check_cgroup_dir,
    parse_cpuset,
)


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
        """From a state file's ``resctrl`` mapping; a bad field raises :class:`ManifestError` naming it.

        ``cbmMask``: a hex string of at most 64 bits; ``minCbmBits``: an integer 0..64; ``numClosids``:
        0..4096; ``cacheIds``: a list of distinct integers below :data:`MAX_CPUS`; ``vendor``: a string;
        ``mba``: a boolean or a mapping whose ``minBandwidth``/``bandwidthGran``/``numClosids`` are
        integers 0..2^31-1 and ``delayLinear`` a boolean or 0/1. Floats, booleans as numbers and
        non-finite values are refused.
        """
        if not isinstance(raw, Mapping):
            raise ManifestError("expected a mapping", field=where)

        def bad(key: str, msg: str) -> ManifestError:
            return ManifestError(msg, field=f"{where}.{key}")

        cbm = raw.get("cbmMask", "")
        if not isinstance(cbm, str):
            raise bad("cbmMask", f"expected a hex string like '7ff', got {_show(cbm)}")
        digits = cbm.strip().lower().removeprefix("0x").lstrip("0")
        if cbm.strip() and (len(digits) > 16 or not all(c in "0123456789abcdef" for c in digits)):
            raise bad("cbmMask", f"expected a hex mask of at most 64 bits, got {_show(cbm)}")
        cache_ids = raw.get("cacheIds") or []
        if not isinstance(cache_ids, list):
            raise bad("cacheIds", f"expected a list of cache ids, got {_show(cache_ids)}")
        seen: set[int] = set()
        for i, c in enumerate(cache_ids):
            if not _is_int(c, 0, MAX_CPUS - 1):
                raise bad(f"cacheIds[{i}]", f"expected an integer 0..{MAX_CPUS - 1}, got {_show(c)}")
            if c in seen:
                raise bad(f"cacheIds[{i}]", f"duplicate cache id {c}")
            seen.add(c)
        vendor = raw.get("vendor", "")
        if not isinstance(vendor, str):
            raise bad("vendor", f"expected a string, got {_show(vendor)}")
        mba = raw.get("mba")
        if mba is None or isinstance(mba, bool):
            mba_out: Mapping[str, Any] | None = {} if mba else None
        elif isinstance(mba, Mapping):
            for key in ("minBandwidth", "bandwidthGran", "numClosids"):
                if key in mba and not _is_int(mba[key], 0, MAX_TOPOLOGY_ID):
                    raise bad(f"mba.{key}", f"expected an integer 0..{MAX_TOPOLOGY_ID}, got {_show(mba[key])}")
            if "delayLinear" in mba and mba["delayLinear"] not in (True, False, 0, 1):
                raise bad("mba.delayLinear", f"expected a boolean, got {_show(mba['delayLinear'])}")
            mba_out = dict(mba)
        else:
            raise bad("mba", f"expected true, false or a mapping, got {_show(mba)}")
        nums = {}
        for key, default, hi in (("minCbmBits", 1, 64), ("numClosids", 0, 4096)):
            v = raw.get(key, default)
            if not _is_int(v, 0, hi):
                raise bad(key, f"expected an integer 0..{hi}, got {_show(v)}")
            nums[key] = v
        return cls(cbm_mask=cbm, min_cbm_bits=nums["minCbmBits"], num_closids=nums["numClosids"],
                   cache_ids=tuple(cache_ids), vendor=vendor, mba=mba_out)


def _is_int(v: Any, lo: int, hi: int) -> bool:
    """An int (not a bool, not a float) within ``lo..hi``."""
    return type(v) is int and lo <= v <= hi


@attrs.frozen
class Reservation:
    """The node annotation ``node.koordinator.sh/reservation``."""

    resources: Mapping[str, int] = attrs.field(factory=dict)
    reserved_cpus: tuple[int, ...] = ()
    apply_policy: str = "Default"


def parse_reservation(raw: str | None, node: str = "") -> Reservation:
    """The value of ``node.koordinator.sh/reservation`` (see :meth:`NodeState.reservation`)."""
    if not raw:
        return Reservation()
    try:
        obj = loads_json(raw)
        if not isinstance(obj, dict):
            raise ValueError("expected a JSON object")
        resources = obj.get("resources") or {}
        if not isinstance(resources, dict):
            raise ValueError(f"resources: expected a mapping, got {type(resources).__name__}")
        res = parse_resource_list(resources, where="resources")
        reserved = obj.get("reservedCPUs") or ""
        if not isinstance(reserved, str):
            raise ValueError(f"reservedCPUs: expected a cpu list string, got {type(reserved).__name__}")
        cpus = parse_cpuset(reserved)
        if cpus:  # Koordinator: reservedCPUs, when set, decides the reserved cpu amount
            res["cpu"] = len(cpus) * 1000
        policy = obj.get("applyPolicy") or "Default"
        if not isinstance(policy, str):
            raise ValueError(f"applyPolicy: expected a string, got {type(policy).__name__}")
    except (ValueError, QuantityError) as e:
        raise ValueError(f"node {node}: annotation {ANNOTATION_NODE_RESERVATION}: {e}") from None
    return Reservation(res, tuple(cpus), policy)


def _int_text(text: str | None, digits: int = 19) -> int | None:
    """A non-negative decimal integer of at most ``digits`` ASCII digits, else ``None`` (cgroup files)."""
    if text is None:
        return None
    t = text.strip()
    if not t or len(t) > digits or not t.isascii() or not t.isdigit():
        return None
    return int(t)


#: the kube QoS names :meth:`NodeState.qos_dir` accepts for its levels
_QOS_LEVEL_NAMES = {"BestEffort": "besteffort", "Burstable": "burstable", "Guaranteed": "guaranteed"}


@attrs.frozen
class NodeState:
    """One round's snapshot of a node (see the module docstring for the contract)."""

    #: the key under which a plugin's ``collect`` may return the cgroup files it read this round (path,
    #: relative to the cgroup root, → text): the agent adds them to :attr:`cgroups`, so the executor
    #: compares that round's writes with them instead of reading the files again
    COLLECTED_CGROUPS: ClassVar[str] = "cgroups"
    #: the key under which a plugin's ``collect`` may return fields of the NodeMetric ``status`` the agent
    #: publishes (a mapping of top-level status fields, e.g. ``{"prodReclaimableMetric": {...}}``): the
    #: agent's NodeMetric reporter merges the last round's over the status it builds
    #: (:func:`koordfw.agent.nodemetric.merge_plugin_status`); the fields it builds itself are not replaced.
    #: Like every key of ``metrics``, a later plugin's (in profile order) replaces an earlier's
    NODE_METRIC_STATUS: ClassVar[str] = "nodeMetricStatus"

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
        path = f"{rel_dir}/{filename}" if rel_dir else filename
        return f"{controller}/{path}" if self.cgroup_version == 1 else path

    def qos_dir(self, level: str) -> str:
        """The kubelet's QoS-level cgroup dir (relative) for ``besteffort``/``burstable``/``guaranteed``.

        Accepts the kube QoS names too (``BestEffort``...). cgroupfs: ``kubepods/besteffort``;
        systemd: ``kubepods.slice/kubepods-besteffort.slice``; guaranteed is the kubepods dir itself.
        """
        lvl = _QOS_LEVEL_NAMES.get(level, level)
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
    def cpu_quota(self, rel_dir: str) -> int | None:
        """Current CFS quota of ``rel_dir`` in µs (``-1`` = unlimited), ``None`` when not read or not a
        quota (not an integer, below -1 or beyond int64)."""
        raw = self.cgroups.get(self.cpu_quota_file(rel_dir))
        if raw is None:
            return None
        fields = raw.split()
        head = fields[0] if fields else ""
        if head == "max":
            return -1
        n = _int_text(head.removeprefix("-"))
        if n is None:
            return None
        n = -n if head.startswith("-") else n
        return n if -1 <= n <= _INT64_MAX else None

    def cpu_period(self, rel_dir: str) -> int:
        """Current CFS period of ``rel_dir`` in µs; :data:`CFS_PERIOD_US` when not read or outside the
        kernel's range :data:`CFS_PERIOD_RANGE` (1 ms .. 1 s), so a plan never divides by a bad period."""
        if self.cgroup_version == 1:
            n = _int_text(self.cgroups.get(self.cgroup_file("cpu", rel_dir, "cpu.cfs_period_us")))
        else:
            raw = self.cgroups.get(self.cpu_quota_file(rel_dir))
            parts = raw.split() if raw else []
            n = _int_text(parts[1]) if len(parts) == 2 else None
        lo, hi = CFS_PERIOD_RANGE
        return n if n is not None and lo <= n <= hi else CFS_PERIOD_US

    def cpuset(self, rel_dir: str) -> list[int] | None:
        """Current ``cpuset.cpus`` of ``rel_dir`` as CPU ids, ``None`` when not read (or not a cpu list).

        On v2 an empty ``cpuset.cpus`` means "inherit": ``cpuset.cpus.effective`` is used then.
        """
        raw = self.cgroups.get(self.cpuset_file(rel_dir))
        if self.cgroup_version == 2 and not (raw or "").strip():
            eff = self.cgroups.get(self.cgroup_file("cpuset", rel_dir, "cpuset.cpus.effective"))
            raw = eff if eff is not None else raw
        if raw is None:
            return None
        try:
            return parse_cpuset(raw)
        except ValueError:
            return None

    # -- topology and annotations ------------------------------------------------------------------
    @property
    def cpu_ids(self) -> list[int]:
        """All logical CPUs: from the topology, else ``0..capacity-1`` (at most :data:`MAX_CPUS`)."""
        if self.cpu_topology:
            return sorted(c.id for c in self.cpu_topology)
        return list(range(min(max(self.capacity.get("cpu", 0) // 1000, 0), MAX_CPUS)))

    def topology(self) -> tuple[CPUInfo, ...]:
        """The CPU topology; without one, each CPU its own core on socket 0, node 0."""
        return self.cpu_topology or tuple(CPUInfo(i, i) for i in self.cpu_ids)

    def reservation(self) -> Reservation:
        """Parse ``node.koordinator.sh/reservation``; a bad value raises ``ValueError`` naming it.

        The JSON is read with :func:`koordfw.core.safeload.loads_json` (nesting bounded, no NaN), the
        quantities are bounded, ``reservedCPUs`` must be a cpu list string (ids below :data:`MAX_CPUS`)
        and ``applyPolicy`` a string. Plugins log and ignore a bad reservation, as Koordinator does.
        """
        return parse_reservation(self.annotations.get(ANNOTATION_NODE_RESERVATION), node=self.name)

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

        Every field is checked, so a plugin never sees a value it must not trust: integers are ints
        (not floats or booleans) in range (``cgroupVersion`` 1|2; topology ``id`` below
        :data:`MAX_CPUS`, distinct; ``core``/``socket``/``node`` 0..2^31-1); quantities are bounded by
        :func:`~koordfw.core.quantity.parse_resource_list`; without a topology ``capacity.cpu`` is at
        most :data:`MAX_CPUS` cores; names, labels and annotations are strings; pod uids are distinct;
        ``cgroupDir``, ``kubepods`` and host app paths pass :func:`check_cgroup_dir` (so no write can
        be planned at a controller's root); ``cgroups`` keys are relative paths and values strings (or
        ints) of at most :data:`MAX_CGROUP_VALUE` characters, cpu lists among them valid.
        """
        def err(msg: str, field: str) -> ManifestError:
            return ManifestError(msg, file=source, field=field)

        def text_field(obj: Any, where: str, default: str = "") -> str:
            if obj is None:
                return default
            if not isinstance(obj, str):
                raise err(f"expected a string, got {_show(obj)}", where)
            return obj

        def dir_field(obj: Any, where: str) -> str:
            try:
                return check_cgroup_dir(obj)
            except ValueError as e:
                raise err(str(e), where) from None

        if not isinstance(data, Mapping):
            raise err("a node state must be a JSON object", "")
        version = data.get("cgroupVersion", 1)
        if type(version) is not int or version not in (1, 2):
            raise err(f"expected 1 or 2, got {_show(version)}", "cgroupVersion")
        driver = data.get("cgroupDriver", "cgroupfs")
        if not isinstance(driver, str) or driver not in ("cgroupfs", "systemd"):
            raise err(f"expected cgroupfs or systemd, got {_show(driver)}", "cgroupDriver")
        kubepods = data.get("kubepods")
        if kubepods is None or kubepods == "":
            kubepods = "kubepods.slice" if driver == "systemd" else "kubepods"
        kubepods = dir_field(kubepods, "kubepods")
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
            for k, v in obj.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise err(f"expected strings, got {_show(v if isinstance(k, str) else k)}",
                              f"{where}.{_key(k)}" if isinstance(k, str) else where)
            return dict(obj)

        capacity = res(node.get("capacity"), "node.capacity")
        allocatable = res(node.get("allocatable"), "node.allocatable") or dict(capacity)
        topo: list[CPUInfo] = []
        cpu_topology = node.get("cpuTopology")
        if cpu_topology is not None and not isinstance(cpu_topology, Mapping):
            raise err("expected a mapping with detail", "node.cpuTopology")
        detail = (cpu_topology or {}).get("detail") or []
        if not isinstance(detail, list):
            raise err("expected a list of {id, core, socket, node}", "node.cpuTopology.detail")
        ids: set[int] = set()
        for i, c in enumerate(detail):
            where = f"node.cpuTopology.detail[{i}]"
            if not isinstance(c, Mapping) or "id" not in c:
                raise err("expected {id, core, socket, node}", where)
            vals = {"id": c["id"], "core": c.get("core", c["id"]), "socket": c.get("socket", 0),
                    "node": c.get("node", 0)}
            for key, v in vals.items():
                hi = MAX_CPUS - 1 if key == "id" else MAX_TOPOLOGY_ID
                if not _is_int(v, 0, hi):
                    raise err(f"{key}: expected an integer 0..{hi}, got {_show(v)}", where)
            if vals["id"] in ids:
                raise err(f"duplicate cpu id {vals['id']}", where)
            ids.add(vals["id"])
            topo.append(CPUInfo(vals["id"], vals["core"], vals["socket"], vals["node"]))
        if not topo and capacity.get("cpu", 0) > MAX_CPUS * 1000:
            raise err(f"{capacity['cpu'] // 1000} CPUs without a cpuTopology: at most {MAX_CPUS} are supported",
                      "node.capacity.cpu")
        name = text_field(node.get("name"), "node.name")
        kubepods_state = cls(cgroup_version=version, cgroup_driver=driver, kubepods=kubepods)

        pods: list[PodState] = []
        raw_pods = data.get("pods") or []
        if not isinstance(raw_pods, list):
            raise err("expected a list", "pods")
        uids: set[str] = set()
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
            uid = text_field(p.get("uid"), f"{where}.uid") or (pod.uid if pod is not None else "")
            if not uid:
                raise err("a pod needs a uid", f"{where}.uid")
            if "/" in uid or "\x00" in uid or len(uid) > 253:
                raise err(f"a uid has at most 253 characters and no '/' or NUL byte, got {_show(uid)}",
                          f"{where}.uid")
            if uid in uids:
                raise err(f"duplicate pod uid {_show(uid)}", f"{where}.uid")
            uids.add(uid)
            qos = pod.qos_class if pod is not None else ""
            kube_qos = pod.kube_qos if pod is not None else ""
            cgdir = p.get("cgroupDir")
            if cgdir is not None and cgdir != "":
                cgdir = dir_field(cgdir, f"{where}.cgroupDir")
            elif pod is not None:  # not given: the kubelet's dir for the pod
                cgdir = kubepods_state.pod_dir(uid, kube_qos)
            else:
                cgdir = ""
            pods.append(PodState(uid=uid, pod=pod, qos=qos, kube_qos=kube_qos, cgroup_dir=cgdir,
                                 usage=res(p.get("usage"), f"{where}.usage")))
        apps: list[HostApp] = []
        raw_apps = data.get("hostApps") or []
        if not isinstance(raw_apps, list):
            raise err("expected a list", "hostApps")
        for i, a in enumerate(raw_apps):
            where = f"hostApps[{i}]"
            if not isinstance(a, Mapping) or not a.get("name"):
                raise err("expected a mapping with a name", where)
            app_name = text_field(a["name"], f"{where}.name")
            cg_path, base = a.get("cgroupPath") or "", ""
            if isinstance(cg_path, Mapping):  # Koordinator's {base, parentDir, relativePath}
                base = text_field(cg_path.get("base"), f"{where}.cgroupPath.base")
                if base not in CGROUP_BASES:
                    raise err(f"unknown base {_show(base)}; known: {sorted(b for b in CGROUP_BASES if b)}",
                              f"{where}.cgroupPath.base")
                level = CGROUP_BASES[base]
                head = kubepods_state.qos_dir(level) if level else ""
                tail = [text_field(cg_path.get(k), f"{where}.cgroupPath.{k}") for k in ("parentDir", "relativePath")]
                cg_path = "/".join(x.strip("/") for x in (head, *tail) if x.strip("/"))
            elif isinstance(cg_path, str):
                be_dir = kubepods_state.qos_dir("besteffort")
                if cg_path.strip("/") == be_dir or cg_path.strip("/").startswith(be_dir + "/"):
                    base = "KubepodsBesteffort"
            else:
                raise err("expected a path or {base, parentDir, relativePath}", f"{where}.cgroupPath")
            if cg_path.strip("/"):  # "" is the root cgroup (Koordinator's CgroupRoot base)
                cg_path = dir_field(cg_path, f"{where}.cgroupPath")
            apps.append(HostApp(name=app_name, qos=text_field(a.get("qos"), f"{where}.qos"), cgroup_path=cg_path,
                                usage=res(a.get("usage"), f"{where}.usage"), cgroup_base=base))
        cg = data.get("cgroups") or {}
        if not isinstance(cg, Mapping):
            raise err("expected a mapping of path to value", "cgroups")
        cgroups: dict[str, str] = {}
        for k, v in cg.items():
            if not isinstance(k, str):
                raise err(f"expected a path, got {_show(k)}", "cgroups")
            where = f"cgroups.{_key(k)}"
            try:
                path = check_cgroup_dir(k, "cgroup file path")
            except ValueError as e:
                raise err(str(e), where) from None
            if isinstance(v, bool) or not isinstance(v, (str, int)):
                raise err(f"expected the file's text (a string), got {_show(v)}", where)
            value = str(v).strip()
            if len(value) > MAX_CGROUP_VALUE:
                raise err(f"longer than {MAX_CGROUP_VALUE} characters (more than the agent reads of a file)", where)
            if path.rsplit("/", 1)[-1] in CPU_LIST_FILES:
                try:
                    parse_cpuset(value)
                except ValueError as e:
                    raise err(str(e), where) from None
            cgroups[path] = value
        config = data.get("config") or {}
        if not isinstance(config, Mapping):
            raise err("expected a mapping of plugin name to args", "config")
        for k in config:
            if not isinstance(k, str):
                raise err(f"expected a plugin name, got {_show(k)}", "config")
        resctrl = None
        if data.get("resctrl") is not None:
            try:
                resctrl = ResctrlInfo.from_dict(data["resctrl"])
            except ManifestError as e:
                raise err(e.detail, e.field or "resctrl") from None
        return cls(name=name, cgroup_version=version, cgroup_driver=driver, kubepods=kubepods,
                   capacity=capacity, allocatable=allocatable, usage=res(node.get("usage"), "node.usage"),
                   labels=strmap(node.get("labels"), "node.labels"),
                   annotations=strmap(node.get("annotations"), "node.annotations"),
                   cpu_topology=tuple(topo), pods=tuple(pods), host_apps=tuple(apps),
                   cgroups=cgroups, resctrl=resctrl, config=dict(config))
