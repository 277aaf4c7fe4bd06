"""Per-node GPU columns: devices from Koordinator's ``Device`` objects (or the node's allocatable), and
their free amounts after the allocations the scheduler knows of.

Row ``i`` is the cluster's node index ``i``; column ``g`` a device slot (devices sorted by minor).
Absent or unhealthy slots have total 0, so they never fit anything and hold no idle GPU.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import numpy as np
import structlog

from koordfw import parse_quantity

from .requests import GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO, GPU_MODEL_LABEL, KOORD_GPU, NVIDIA_GPU

log = structlog.get_logger("koordfw.gpu_share")

DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
MILLI = 1000


class InventoryError(ValueError):
    pass


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


def _device_list(obj: dict, node: str) -> list[tuple[int, bool, int, int, int]]:
    """``[(minor, healthy, core milli, memory milli, memory bytes)]`` of a Device object's GPUs."""
    spec = obj.get("spec") or {}
    devs = spec.get("devices") or []
    if not isinstance(devs, list):
        raise InventoryError(f"Device {node}: spec.devices must be a list")
    out = []
    for i, d in enumerate(devs):
        if not isinstance(d, dict):
            raise InventoryError(f"Device {node}: spec.devices[{i}] must be a mapping")
        if str(d.get("type", "")).lower() != "gpu":
            continue
        try:
            minor = int(d.get("minor", i))
            res = d.get("resources") or {}
            core = parse_quantity(res.get(GPU_CORE, 100))
            ratio = parse_quantity(res.get(GPU_MEMORY_RATIO, 100))
            mem = parse_quantity(res.get(GPU_MEMORY, 0))
        except (TypeError, ValueError) as e:
            raise InventoryError(f"Device {node}: spec.devices[{i}]: {e}") from None
        healthy = d.get("health", True) not in (False, "false", "False", "Unhealthy")
        out.append((minor, healthy, int(core * 10), int(ratio * 10), int(mem)))
    return sorted(out)


class Inventory:
    """GPU columns for every node of a ClusterState, plus the allocations held on them."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        views = cluster.views
        n = cluster.num_nodes
        devices = cluster.objects_of("Device")
        per_node: list[list[tuple[int, bool, int, int, int]]] = []
        self.errors: dict[str, str] = {}
        models: list[str] = []
        model_of: list[str] = []
        for v in views:
            name = v.name
            devs: list[tuple[int, bool, int, int, int]] = []
            obj = devices.get(name)
            try:
                if obj is not None:
                    devs = _device_list(obj, name)
                else:
                    devs = self._from_allocatable(v)
            except InventoryError as e:
                self.errors[name] = str(e)
                log.warning("bad GPU inventory", node=name, error=str(e))
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
        for i, devs in enumerate(per_node):
            for j, (minor, healthy, core, ratio, mem) in enumerate(devs):
                self.minor[i, j] = minor
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

    @staticmethod
    def _from_allocatable(view: Any) -> list[tuple[int, bool, int, int, int]]:
        alloc = view.allocatable
        count = alloc.get(NVIDIA_GPU, 0)
        if not count:
            count = max(alloc.get(GPU_CORE, 0), alloc.get(KOORD_GPU, 0)) // 100
        if count <= 0:
            return []
        mem = alloc.get(GPU_MEMORY, 0) // count
        return [(i, True, MILLI, MILLI, mem) for i in range(count)]

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
        """Rebuild a pod's allocation from ``scheduling.koordinator.sh/device-allocated``."""
        raw = pod.annotations.get(DEVICE_ALLOCATED)
        if not raw:
            return None
        try:
            data = json.loads(raw)
            gpus = data.get("gpu") or []
            slots, core, mem, mem_b = [], 0, 0, None
            for d in gpus:
                minor = int(d["minor"])
                hit = np.flatnonzero(self.minor[node] == minor)
                if len(hit) == 0:
                    raise ValueError(f"node has no GPU with minor {minor}")
                slots.append(int(hit[0]))
                res = d.get("resources") or {}
                core = int(parse_quantity(res.get(GPU_CORE, 0)) * 10)
                if GPU_MEMORY_RATIO in res:
                    mem = int(parse_quantity(res[GPU_MEMORY_RATIO]) * 10)
                elif GPU_MEMORY in res and self.mem_bytes[node, slots[-1]] > 0:
                    mem_b = int(parse_quantity(res[GPU_MEMORY]))
                    mem = -(-mem_b * MILLI // int(self.mem_bytes[node, slots[-1]]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("ignoring bad device-allocated annotation", pod=pod.key, error=str(e))
            return None
        if not slots:
            return None
        return Alloc(node, tuple(slots), core, mem, mem_b, max(core, mem) * len(slots),
                     tag_of(len(slots), max(core, mem)))

    def reconcile(self, tag_of: Any) -> None:
        """Drop allocations of pods that left their node; add annotated pods bound elsewhere."""
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
