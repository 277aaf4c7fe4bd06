"""Which pods a descheduler may move: the evictor filter, namespaces, selectors, PDBs and gangs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from koordfw import BoundedCache, warn_once
from koordfw.extension import ANNOTATION_GANG_MODE, ANNOTATION_GANG_NAME, LABEL_POD_GROUP, LABEL_POD_GROUP_DEPRECATED
from koordfw.inputs import selector_matches

log = structlog.get_logger("koordfw.defrag")
#: (PDB, value) already warned about; a log line's dedup: process-wide
_WARNED: BoundedCache[tuple[str, str], bool] = BoundedCache(4096)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
SYSTEM_CRITICAL_PRIORITY = 2000000000
CRITICAL_CLASSES = ("system-cluster-critical", "system-node-critical")
#: the descheduler's opt-out annotation (value "false" keeps the pod where it is)
EVICT_ANNOTATION = "descheduler.alpha.kubernetes.io/evict"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
EVICTION_COST = "scheduling.koordinator.sh/eviction-cost"


def _spec(pod: Any) -> Mapping:
    raw = pod.raw or {}
    spec = raw.get("spec") if isinstance(raw, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def is_critical(pod: Any) -> bool:
    if pod.priority >= SYSTEM_CRITICAL_PRIORITY:
        return True
    pc = str(_spec(pod).get("priorityClassName") or "")
    return pc in CRITICAL_CLASSES


def has_local_storage(pod: Any) -> bool:
    for v in _spec(pod).get("volumes") or []:
        if isinstance(v, Mapping) and ("emptyDir" in v or "hostPath" in v):
            return True
    return False


def unevictable_reason(pod: Any) -> str | None:
    """Why the evictor filter keeps this pod (``None`` = it may be evicted)."""
    if not pod.node_name or pod.is_terminal or pod.deletion_timestamp is not None:
        return "not running"
    if pod.annotations.get(EVICT_ANNOTATION, "").lower() == "false":
        return f"annotation {EVICT_ANNOTATION}=false"
    if pod.is_daemonset:
        return "DaemonSet pod"
    if MIRROR_ANNOTATION in pod.annotations:
        return "mirror pod"
    if is_critical(pod):
        return "critical pod"
    if has_local_storage(pod):
        return "pod with local storage (emptyDir/hostPath)"
    return None


def gang_id(pod: Any) -> str:
    """``namespace/name`` of the pod's Strict gang, or ``""`` (no gang, or NonStrict)."""
    name = (pod.labels.get(LABEL_POD_GROUP) or pod.labels.get(LABEL_POD_GROUP_DEPRECATED)
            or pod.annotations.get(ANNOTATION_GANG_NAME) or "")
    if not name:
        return ""
    if pod.annotations.get(ANNOTATION_GANG_MODE, "Strict") == "NonStrict":
        return ""
    return f"{pod.namespace}/{name}"


def int_annotation(pod: Any, key: str) -> int:
    v = pod.annotations.get(key)
    if v in (None, ""):
        return 0
    try:
        return int(str(v).strip())
    except ValueError:
        return 0


class PdbBudget:
    """Disruptions left per PodDisruptionBudget (``status.disruptionsAllowed``) across one plan."""

    def __init__(self, pdbs: Mapping[str, dict]) -> None:
        self.pdbs = pdbs
        self.left = {}
        for key, pdb in pdbs.items():
            st = pdb.get("status") or {}
            raw = st.get("disruptionsAllowed", 0) if isinstance(st, Mapping) else None
            if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= 2**31 - 1:
                # Kubernetes' disruptionsAllowed is an int32 >= 0: anything else allows no eviction
                if raw != 0:
                    warn_once(log, _WARNED, (key, repr(raw)),
                              "PodDisruptionBudget with an invalid status.disruptionsAllowed allows no eviction",
                              pdb=key, value=repr(raw)[:40])
                raw = 0
            self.left[key] = raw

    def matching(self, pod: Any) -> list[str]:
        out = []
        for key, pdb in self.pdbs.items():
            meta, spec = pdb.get("metadata"), pdb.get("spec")
            meta = meta if isinstance(meta, Mapping) else {}
            spec = spec if isinstance(spec, Mapping) else {}
            if meta.get("namespace", "default") != pod.namespace:
                continue
            sel = spec.get("selector")
            try:
                hit = selector_matches(sel if isinstance(sel, Mapping) else None, pod.labels)
            except (AttributeError, TypeError, ValueError):
                hit = True  # a selector that cannot be read protects every pod of its namespace
            if hit:
                out.append(key)
        return out

    def allows(self, pods: Iterable[Any]) -> bool:
        need: dict[str, int] = {}
        for p in pods:
            for k in self.matching(p):
                need[k] = need.get(k, 0) + 1
        return all(self.left[k] >= n for k, n in need.items())

    def take(self, pods: Iterable[Any]) -> None:
        for p in pods:
            for k in self.matching(p):
                self.left[k] -= 1
