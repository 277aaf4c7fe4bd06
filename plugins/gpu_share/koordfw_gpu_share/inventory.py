"""Per-node GPU columns: devices from Koordinator's ``Device`` objects (or the node's allocatable), and
their free amounts after the allocations the scheduler knows of.

Row ``i`` is the cluster's node index ``i``; column ``g`` a device slot (devices sorted by minor).
Absent or unhealthy slots have total 0, so they never fit anything and hold no idle GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import structlog

from koordfw import BoundedCache, parse_quantity, warn_once
from koordfw.extension import RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO
from koordfw.inputs import loads_json

from .requests import GPU_MODEL_LABEL, NVIDIA_GPU

log = structlog.get_logger("koordfw.gpu_share")

DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
MILLI = 1000


class InventoryError(ValueError):
    pass


#: most GPUs one node (one Device object) may list: the columns are nodes × this many slots, so one
#: hostile Device must not make them gigabytes (the largest machines have 16 GPUs)
MAX_GPUS_PER_NODE = 256
#: Koordinator's minor is an int32
MAX_MINOR = 2**31 - 1
#: per device: gpu-core and gpu-memory-ratio are percentages of one device; gpu-memory at most 1 PiB,
#: so that bytes × 1000 (the milli arithmetic) stays far inside int64
MAX_PERCENT = 100
MAX_DEVICE_MEMORY = 2**50


@attrs.define
class Alloc:
    """What one pod holds on one node: device slots and per-slot core / memory milli (+ bytes)."""

    node: int
    slots: tuple[int, ...]
    core: int
    mem: int
    mem_bytes: int | None = None
    milli: int = 0
    tag: str = ""


def _minor(value: Any, where: str) -> int:
    """A device minor: an integer 0..2^31-1 (a string of digits is accepted, as the annotation writes it)."""
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 10:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise InventoryError(f"{where}: expected an integer minor, got {_show(value)}")
    if not 0 <= value <= MAX_MINOR:
        raise InventoryError(f"{where}: minor {_show(value)} outside 0..{MAX_MINOR}")
    return value


def _amount(res: Mapping[str, Any], name: str, default: Any, where: str, hi: int, scale: int = 1) -> int:
    """One resource (percent or bytes) in 0..``hi``, times ``scale`` (10: percent → milli of a device)."""
    raw = res.get(name, default)
    try:
        q = parse_quantity(raw)
    except ValueError as e:
        raise InventoryError(f"{where}.{name}: {e}") from None
    if q < 0 or q > hi:
        raise InventoryError(f"{where}.{name}: {_show(raw)} outside 0..{hi}")
    return int(q * scale)


def _show(v: Any, width: int = 40) -> str:
    r = repr(v) if not isinstance(v, int) or abs(v) < 10**width else f"an integer of {len(str(abs(v)))} digits"
    return r if len(r) <= width else r[:width] + "…"


#: one GPU of a node: (minor, healthy, core milli, memory milli, memory bytes, NUMA node, PCIe switch)
DeviceRow = tuple[int, bool, int, int, int, int, str]


def _device_list(obj: Any, node: str) -> list[DeviceRow]:
    """``[(minor, healthy, core milli, memory milli, memory bytes, NUMA node, PCIe switch)]`` of a Device
    object's GPUs (NUMA node and PCIe switch from ``topology``: see :func:`topology_of`).

    Raises :class:`InventoryError` naming the Device and the field for anything Koordinator's API would
    not accept (or that would not fit the columns): a non-mapping spec, devices not a list, a minor that
    is not an integer 0..2^31-1 or is listed twice, gpu-core / gpu-memory-ratio outside 0..100, gpu-memory
    outside 0..1 PiB, more than :data:`MAX_GPUS_PER_NODE` GPUs."""
    ctx = f"Device {node}"
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise InventoryError(f"{ctx}: spec must be a mapping")
    devs = spec.get("devices") or []
    if not isinstance(devs, list):
        raise InventoryError(f"{ctx}: spec.devices must be a list")
    out: list[DeviceRow] = []
    seen: dict[int, int] = {}
    for i, d in enumerate(devs):
        where = f"{ctx}: spec.devices[{i}]"
        if not isinstance(d, Mapping):
            raise InventoryError(f"{where} must be a mapping")
        if str(d.get("type", "")).lower() != "gpu":
            continue
        if len(out) >= MAX_GPUS_PER_NODE:
            raise InventoryError(f"{ctx}: spec.devices lists more than {MAX_GPUS_PER_NODE} GPUs")
        minor = _minor(d.get("minor", i), f"{where}.minor")
        if minor in seen:
            raise InventoryError(f"{where}.minor: minor {minor} already used by spec.devices[{seen[minor]}]")
        seen[minor] = i
        res = d.get("resources")
        if res is None:
            res = {}
        if not isinstance(res, Mapping):
            raise InventoryError(f"{where}.resources must be a mapping")
        core = _amount(res, RESOURCE_GPU_CORE, 100, f"{where}.resources", MAX_PERCENT, 10)
        ratio = _amount(res, RESOURCE_GPU_MEMORY_RATIO, 100, f"{where}.resources", MAX_PERCENT, 10)
        mem = _amount(res, RESOURCE_GPU_MEMORY, 0, f"{where}.resources", MAX_DEVICE_MEMORY)
        healthy = d.get("health", True) not in (False, "false", "False", "Unhealthy")
        numa, _socket, pcie = topology_of(d, where)
        out.append((minor, healthy, core, ratio, mem, numa, pcie))
    return sorted(out)


def topology_of(d: Mapping[str, Any], where: str) -> tuple[int, int, str]:
    """(NUMA node, socket, PCIe switch) of one Device entry's ``topology``: NUMA node -2 when the GPU has no
    topology, -1 when it reports none (``nodeID: -1``). Raises :class:`InventoryError` naming the field."""
    topo = d.get("topology")
    if topo is None:
        return -2, -1, ""
    if not isinstance(topo, Mapping):
        raise InventoryError(f"{where}.topology must be a mapping")
    node = topo.get("nodeID", 0)  # Go's int32 zero value for a missing field, as Koordinator decodes it
    socket = topo.get("socketID", 0)
    for name, v in (("nodeID", node), ("socketID", socket)):
        if isinstance(v, bool) or not isinstance(v, int) or not -1 <= v <= 63:
            raise InventoryError(f"{where}.topology.{name}: expected an integer in [-1, 63], got {v!r:.40}")
    pcie = topo.get("pcieID", "")
    if not isinstance(pcie, str) or len(pcie) > 253:
        raise InventoryError(f"{where}.topology.pcieID: expected a string of at most 253 characters")
    return node, socket, pcie


def devices_by_node(cluster: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Device objects by the node they describe (``metadata.name``; Device is cluster-scoped, so a
    namespace does not make a second object for the same node), and an error per node named by more
    than one Device: neither is used, rather than one silently shadowing the other."""
    by_name: dict[str, Any] = {}
    keys: dict[str, list[str]] = {}
    for key, obj in cluster.objects_of("Device").items():
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = str(meta.get("name")) if isinstance(meta, Mapping) and meta.get("name") else str(key).rsplit("/", 1)[-1]
        keys.setdefault(name, []).append(str(key))
        by_name.setdefault(name, obj)
    errors = {name: (f"Device {name}: defined {len(ks)} times ({', '.join(sorted(ks))}); "
                     f"none is used until only one is left")
              for name, ks in keys.items() if len(ks) > 1}
    for name in errors:
        by_name.pop(name, None)
    return by_name, errors


class Inventory:
    """GPU columns for every node of a cluster (a ClusterView), plus the allocations held on them."""

    def __init__(self, cluster: Any, warned: set[str] | BoundedCache[Any, bool] | None = None) -> None:
        """``warned``: inventory errors already logged (kept by the caller across rebuilds, so that a bad
        Device is reported once, not at every rebuild)."""
        self.cluster = cluster
        views = cluster.views
        n = cluster.num_nodes
        devices, dup_errors = devices_by_node(cluster)
        per_node: list[list[DeviceRow]] = []
        self.errors: dict[str, str] = {}
        models: list[str] = []
        model_of: list[str] = []
        for v in views:
            name = v.name
            devs: list[DeviceRow] = []
            obj = devices.get(name)
            try:
                if name in dup_errors:
                    raise InventoryError(dup_errors[name])
                if obj is not None:
                    devs = _device_list(obj, name)
                else:
                    devs = self._from_allocatable(v)
            except InventoryError as e:
                self.errors[name] = str(e)
                warn_once(log, warned, str(e), "bad GPU inventory: the node's GPUs are left out", node=name, error=str(e))
                devs = []
            per_node.append(devs)
            m = v.labels.get(GPU_MODEL_LABEL, "")
            model_of.append(m)
            if m and m not in models:
                models.append(m)
        self.models = tuple(models)
        g = max([len(d) for d in per_node] + [1])
        self.total_core = np.zeros((n, g), dtype=np.int64)
        self.total_mem = np.zeros((n, g), dtype=np.int64)
        self.mem_bytes = np.zeros((n, g), dtype=np.int64)
        self.minor = np.full((n, g), -1, dtype=np.int64)
        #: each slot's NUMA node (-1: reported as none, -2: no topology) and PCIe switch (an index, in
        #: pcieID order within the node; -1: none)
        self.numa = np.full((n, g), -2, dtype=np.int64)
        self.pcie = np.full((n, g), -1, dtype=np.int64)
        for i, devs in enumerate(per_node):
            switches = {p: k for k, p in enumerate(sorted({(d[5], d[6]) for d in devs if d[5] != -2}))}
            for j, (minor, healthy, core, ratio, mem, numa, pcie) in enumerate(devs):
                self.minor[i, j] = minor
                self.numa[i, j] = numa
                if numa != -2:
                    self.pcie[i, j] = switches[(numa, pcie)]
                if healthy:
                    self.total_core[i, j], self.total_mem[i, j], self.mem_bytes[i, j] = core, ratio, mem
        self.ngpu = (self.total_core > 0).sum(axis=1)
        mi = {m: k for k, m in enumerate(self.models)}
        self.model = np.array([mi.get(m, -1) for m in model_of], dtype=np.int64)
        self.core_free = self.total_core.copy()
        self.mem_free = self.total_mem.copy()
        self.left = np.minimum(self.core_free, self.mem_free)
        self.version = np.zeros(n, dtype=np.int64)
        self.allocs: dict[str, Alloc] = {}
        self.tags: list[dict[str, int]] = [dict() for _ in range(n)]
        self.any_gpu = bool(self.ngpu.any())
        #: some GPU reports its NUMA node (only then does gpu_share offer NUMA hints)
        self.any_numa = bool((self.numa >= 0).any())
        #: (pod uid, annotation) already warned about as unreadable
        self.bad_annotations: BoundedCache[tuple[str, str], bool] = BoundedCache(65536)

    @staticmethod
    def _from_allocatable(view: Any) -> list[DeviceRow]:
        alloc = view.allocatable
        count = alloc.get(NVIDIA_GPU, 0)
        if not count:
            count = max(alloc.get(RESOURCE_GPU_CORE, 0), alloc.get(RESOURCE_GPU, 0)) // 100
        if count <= 0:
            return []
        if count > MAX_GPUS_PER_NODE:
            raise InventoryError(f"Node {view.name}: status.allocatable gives {count} GPUs, more than "
                                 f"{MAX_GPUS_PER_NODE}")
        mem = alloc.get(RESOURCE_GPU_MEMORY, 0) // count
        if mem > MAX_DEVICE_MEMORY:
            raise InventoryError(f"Node {view.name}: status.allocatable.{RESOURCE_GPU_MEMORY}: more than "
                                 f"{MAX_DEVICE_MEMORY} bytes per GPU")
        return [(i, True, MILLI, MILLI, mem, -2, "") for i in range(count)]

    # -- allocation bookkeeping -------------------------------------------------------------------
    def _apply(self, a: Alloc, sign: int) -> None:
        s = list(a.slots)
        self.core_free[a.node, s] -= sign * a.core
        self.mem_free[a.node, s] -= sign * a.mem
        self.left[a.node] = np.minimum(self.core_free[a.node], self.mem_free[a.node])
        self.version[a.node] += 1
        if a.tag:
            t = self.tags[a.node]
            t[a.tag] = t.get(a.tag, 0) + sign
            if t[a.tag] <= 0:
                del t[a.tag]

    def add(self, uid: str, a: Alloc) -> None:
        old = self.allocs.pop(uid, None)
        if old is not None:
            self._apply(old, -1)
        self.allocs[uid] = a
        self._apply(a, +1)

    def release(self, uid: str) -> Alloc | None:
        a = self.allocs.pop(uid, None)
        if a is not None:
            self._apply(a, -1)
        return a

    def alloc_from_annotation(self, pod: Any, node: int, tag_of: Any) -> Alloc | None:
        """Rebuild a pod's allocation from ``scheduling.koordinator.sh/device-allocated``. An annotation
        that cannot be read (bad JSON, nesting, a minor the node lacks, amounts outside 0..100 %) is
        ignored with one warning naming the pod and the annotation: only that pod's GPUs are unknown."""
        raw = pod.annotations.get(DEVICE_ALLOCATED)
        if not raw:
            return None
        try:
            slots, core, mem, mem_b = self._parse_allocated(raw, node)
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as e:
            key = (pod.uid, raw)
            warn_once(log, self.bad_annotations, key, "ignoring bad device-allocated annotation", pod=pod.key,
                      annotation=DEVICE_ALLOCATED, error=str(e))
            return None
        if not slots:
            return None
        return Alloc(node, tuple(slots), core, mem, mem_b, max(core, mem) * len(slots),
                     tag_of(len(slots), max(core, mem)))

    def _parse_allocated(self, raw: str, node: int) -> tuple[list[int], int, int, int | None]:
        data = loads_json(raw)
        if not isinstance(data, Mapping):
            raise ValueError("expected a JSON object")
        gpus = data.get("gpu") or []
        if not isinstance(gpus, list):
            raise ValueError("gpu: expected a list")
        if len(gpus) > MAX_GPUS_PER_NODE:
            raise ValueError(f"gpu: more than {MAX_GPUS_PER_NODE} entries")
        slots: list[int] = []
        core, mem, mem_b = 0, 0, None
        for i, d in enumerate(gpus):
            where = f"gpu[{i}]"
            if not isinstance(d, Mapping):
                raise ValueError(f"{where}: expected a mapping")
            minor = _minor(d.get("minor"), f"{where}.minor")
            hit = np.flatnonzero(self.minor[node] == minor)
            if len(hit) == 0:
                raise ValueError(f"{where}.minor: node has no GPU with minor {minor}")
            if int(hit[0]) in slots:
                raise ValueError(f"{where}.minor: minor {minor} listed twice")
            slots.append(int(hit[0]))
            res = d.get("resources") or {}
            if not isinstance(res, Mapping):
                raise ValueError(f"{where}.resources: expected a mapping")
            core = _amount(res, RESOURCE_GPU_CORE, 0, f"{where}.resources", MAX_PERCENT, 10)
            if RESOURCE_GPU_MEMORY_RATIO in res:
                mem = _amount(res, RESOURCE_GPU_MEMORY_RATIO, 0, f"{where}.resources", MAX_PERCENT, 10)
            elif RESOURCE_GPU_MEMORY in res and self.mem_bytes[node, slots[-1]] > 0:
                mem_b = _amount(res, RESOURCE_GPU_MEMORY, 0, f"{where}.resources", MAX_DEVICE_MEMORY)
                mem = -(-mem_b * MILLI // int(self.mem_bytes[node, slots[-1]]))
        return slots, core, mem, mem_b

    def reconcile(self, tag_of: Any) -> None:
        """Drop allocations of pods that left their node; add annotated pods bound elsewhere. A cluster
        without GPU devices has nothing to reconcile (every pass was O(pods) on each scheduling cycle)."""
        if not self.any_gpu and not self.allocs:
            return
        cluster = self.cluster
        for uid in list(self.allocs):
            e = cluster.pods.get(uid)
            if e is None or e.node_index != self.allocs[uid].node:
                self.release(uid)
        for uid, e in cluster.pods.items():
            if e.node_index >= 0 and uid not in self.allocs:
                a = self.alloc_from_annotation(e.pod, e.node_index, tag_of)
                if a is not None:
                    self.add(uid, a)

    # -- device fit --------------------------------------------------------------------------------
    def fit_devices(self, idx: np.ndarray, core: int, mem: int | None, mem_bytes: int | None) -> np.ndarray:
        """(len(idx), G) bool: slots of these nodes that can hold one GPU's share of the request."""
        ok = (self.total_core[idx] > 0) & (self.core_free[idx] >= core)
        if mem is not None:
            ok &= self.mem_free[idx] >= mem
        elif mem_bytes is not None:
            ok &= self.mem_slots_needed(idx, mem_bytes) <= self.mem_free[idx]
        return ok

    def mem_slots_needed(self, idx: np.ndarray, mem_bytes: int) -> np.ndarray:
        """Memory milli a byte request takes on each slot (huge where the slot's memory is unknown)."""
        tb = self.mem_bytes[idx]
        return np.where(tb > 0, -(-mem_bytes * MILLI // np.maximum(tb, 1)), np.iinfo(np.int64).max // 4)
