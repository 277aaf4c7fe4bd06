"""What Koordinator's webhooks read from and write to a Pod manifest (a JSON dict): its QoS and priority
class (``apis/extension/qos_utils.go``, ``priority_utils.go``), its requests (kube's ``PodRequests``), the
batch/mid resource conversion (``pkg/webhook/pod/mutating/cluster_colocation_profile.go``
``mutatePodResourceSpec``) and the extended resource spec annotation (``extended_resource_spec.go``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from koordfw import BoundedCache, QuantityError, canonical
from koordfw.extension import (
    ANNOTATION_EXTENDED_RESOURCE_SPEC,
    BATCH_CPU,
    BATCH_MEMORY,
    LABEL_POD_PRIORITY_CLASS,
    LABEL_POD_QOS,
    MID_CPU,
    MID_MEMORY,
    PRIORITY_BATCH,
    PRIORITY_CLASSES,
    PRIORITY_MID,
    PRIORITY_NONE,
    PRIORITY_PROD,
    PRIORITY_VALUE_RANGES,
    QOS_BE,
    QOS_CLASSES,
    QOS_LS,
    QOS_LSE,
    QOS_LSR,
    QOS_NONE,
    QOS_SYSTEM,
)

__all__ = ["RESOURCE_NAME_MAP", "convert_resources", "extended_resource_spec", "pod_priority_class_raw",
           "pod_priority_class_with_default", "pod_qos_raw", "pod_requests", "set_extended_resource_spec"]

#: Koordinator's ResourceNameMap: the extended resource a priority class's cpu and memory become
RESOURCE_NAME_MAP = {PRIORITY_BATCH: {"cpu": BATCH_CPU, "memory": BATCH_MEMORY},
                     PRIORITY_MID: {"cpu": MID_CPU, "memory": MID_MEMORY}}


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def pod_qos_raw(pod: Mapping[str, Any]) -> str:
    """GetPodQoSClassRaw: the ``koordinator.sh/qosClass`` label if it is a known class, else ``""``."""
    q = _labels(pod).get(LABEL_POD_QOS)
    return q if q in QOS_CLASSES else QOS_NONE


def pod_priority_class_raw(pod: Mapping[str, Any]) -> str:
    """GetPodPriorityClassRaw: the ``koordinator.sh/priority-class`` label (if present, even unknown), else
    the class whose range holds ``spec.priority``, else ``""``."""
    labels = _labels(pod)
    if LABEL_POD_PRIORITY_CLASS in labels:
        p = labels[LABEL_POD_PRIORITY_CLASS]
        return p if p in PRIORITY_CLASSES else PRIORITY_NONE
    priority = _spec(pod).get("priority")
    if priority is None or isinstance(priority, bool) or not isinstance(priority, int):
        return PRIORITY_NONE
    for lo, hi, name in PRIORITY_VALUE_RANGES:
        if lo <= priority <= hi:
            return name
    return PRIORITY_NONE


#: (resource, quantity string) -> canonical amount: pods repeat a few quantities, parsing one exactly is
#: slow; a function of the key alone: process-wide
_AMOUNTS: BoundedCache[tuple[str, str], int] = BoundedCache(65536)


def _amount(resource: str, value: Any, where: str) -> int:
    key = (resource if resource == "cpu" else "", value) if isinstance(value, str) else None
    if key is not None:
        hit = _AMOUNTS.get(key)
        if hit is not None:
            return hit
    try:
        amount = canonical(resource, value)
    except QuantityError as e:
        raise ValueError(f"{where}.{resource}: {e}") from None
    if key is not None:
        _AMOUNTS[key] = amount
    return amount


def mentions(pod: Mapping[str, Any], resources: tuple[str, ...]) -> bool:
    """Does any container, init container or the overhead of the pod name one of ``resources``?"""
    spec = _spec(pod)
    found = False
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:  # every list is walked (a list that is no list fails, found or not)
            res = c.get("resources") if isinstance(c, dict) else None
            if not found and isinstance(res, dict):
                found = _names_any(res.get("requests"), resources) or _names_any(res.get("limits"), resources)
    return found or _names_any(spec.get("overhead"), resources)


def _names_any(rl: Any, resources: tuple[str, ...]) -> bool:
    return isinstance(rl, dict) and any(r in rl for r in resources)


def _resources(c: Mapping[str, Any], part: str, where: str) -> dict[str, int]:
    raw = (c.get("resources") or {}).get(part) or {}
    where = f"{where}.resources.{part}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a mapping")
    return {str(k): _amount(str(k), v, where) for k, v in raw.items()}


def _containers(pod: Mapping[str, Any], field: str) -> list[dict[str, Any]]:
    cs = _spec(pod).get(field) or []
    if not isinstance(cs, list) or not all(isinstance(c, dict) for c in cs):
        raise ValueError(f"spec.{field}: expected a list of containers")
    return cs


def kube_qos_class(pod: Mapping[str, Any]) -> str:
    """kube's ``GetPodQOS`` (``status.qosClass`` when set): BestEffort, Burstable or Guaranteed, from the
    cpu and memory requests and limits of every container and init container."""
    status = pod.get("status") or {}
    if isinstance(status, dict) and status.get("qosClass"):
        return str(status["qosClass"])
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for field in ("containers", "initContainers"):
        for i, c in enumerate(_containers(pod, field)):
            where = f"spec.{field}[{i}]"
            for name, v in _resources(c, "requests", where).items():
                if name in ("cpu", "memory") and v > 0:
                    requests[name] = requests.get(name, 0) + v
            found = set()
            for name, v in _resources(c, "limits", where).items():
                if name in ("cpu", "memory") and v > 0:
                    found.add(name)
                    limits[name] = limits.get(name, 0) + v
            if found != {"cpu", "memory"}:
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests.keys() == limits.keys() and all(limits[k] == v for k, v in requests.items()):
        return "Guaranteed"
    return "Burstable"


def pod_qos_with_default(pod: Mapping[str, Any]) -> str:
    """GetPodQoSClassWithDefault: the label, else from the kube QoS class (Guaranteed → LSR, Burstable →
    LS, BestEffort → BE)."""
    q = pod_qos_raw(pod)
    if q != QOS_NONE:
        return q
    return {"Guaranteed": QOS_LSR, "Burstable": QOS_LS, "BestEffort": QOS_BE}.get(kube_qos_class(pod), QOS_NONE)


def pod_priority_class_with_default(pod: Mapping[str, Any]) -> str:
    """GetPodPriorityClassWithDefault: the raw class, else the QoS class's default (SYSTEM/LSE/LSR/LS →
    koord-prod, BE → koord-batch)."""
    p = pod_priority_class_raw(pod)
    if p != PRIORITY_NONE:
        return p
    q = pod_qos_with_default(pod)
    if q in (QOS_SYSTEM, QOS_LSE, QOS_LSR, QOS_LS):
        return PRIORITY_PROD
    if q == QOS_BE:
        return PRIORITY_BATCH
    return PRIORITY_NONE


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """kube's ``resourcehelper.PodRequests`` (canonical ints): the containers' sum, restartable (sidecar)
    init containers added, at least the largest init container's need, plus ``spec.overhead``."""
    reqs: dict[str, int] = {}
    for i, c in enumerate(_containers(pod, "containers")):
        for k, v in _resources(c, "requests", f"spec.containers[{i}]").items():
            reqs[k] = reqs.get(k, 0) + v
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for i, c in enumerate(_containers(pod, "initContainers")):
        own = _resources(c, "requests", f"spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            for k, v in own.items():
                reqs[k] = reqs.get(k, 0) + v
                sidecars[k] = sidecars.get(k, 0) + v
            need = dict(sidecars)
        else:
            need = {k: own.get(k, 0) + sidecars.get(k, 0) for k in own.keys() | sidecars.keys()}
        for k, v in need.items():
            init_max[k] = max(init_max.get(k, 0), v)
    for k, v in init_max.items():
        reqs[k] = max(reqs.get(k, 0), v)
    overhead = _spec(pod).get("overhead") or {}
    if isinstance(overhead, dict):
        for k, v in overhead.items():
            reqs[str(k)] = reqs.get(str(k), 0) + _amount(str(k), v, "spec.overhead")
    return reqs


def decimal_si(n: int) -> str:
    """Go's ``resource.NewQuantity(n, resource.DecimalSI).String()``: trailing zeros in groups of three
    become k, M, G, T, P, E (1000 → ``1k``, 1500 → ``1500``)."""
    if n == 0:
        return "0"
    for exp, suffix in ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if n % 10**exp == 0:
            return f"{n // 10**exp}{suffix}"
    return str(n)


def _replace(names: Mapping[str, str], rl: dict[str, Any], where: str) -> bool:
    """replaceAndEraseResource for ``cpu`` then ``memory``: each renamed to the class's extended name
    (``names``), cpu as milli-cores."""
    changed = False
    for resource in ("cpu", "memory"):
        if resource in rl:
            value = rl.pop(resource)
            rl[names[resource]] = decimal_si(_amount("cpu", value, where)) if resource == "cpu" else value
            changed = True
    return changed


def _restrict(names: Mapping[str, str], res: dict[str, Any]) -> bool:
    """restrictResourceRequestAndLimit for ``cpu`` then ``memory``: an extended limit without a request
    gets the limit as its request."""
    changed = False
    for resource in ("cpu", "memory"):
        target = names[resource]
        limits, requests = res.get("limits") or {}, res.get("requests")
        if target in limits and not (isinstance(requests, dict) and target in requests):
            if not isinstance(requests, dict):
                requests = res["requests"] = {}
            requests[target] = limits[target]
            changed = True
    return changed


def convert_resources(pod: dict[str, Any]) -> bool:
    """mutatePodResourceSpec: for a koord-batch or koord-mid pod (by GetPodPriorityClassWithDefault), the
    ``cpu`` and ``memory`` requests and limits of every init container and container, and the pod
    overhead, become the class's extended resources. Changes ``pod`` in place; True if it changed."""
    names = RESOURCE_NAME_MAP.get(pod_priority_class_with_default(pod))
    if names is None:
        return False
    changed = False
    spec = pod.get("spec") or {}
    for field in ("initContainers", "containers"):
        for i, c in enumerate(_containers(pod, field)):
            res = c.get("resources")
            if res is None:
                continue
            where = f"spec.{field}[{i}].resources"
            if not isinstance(res, dict):
                raise ValueError(f"{where}: expected a mapping")
            for part in ("requests", "limits"):
                rl = res.get(part)
                if rl is None:
                    continue
                if not isinstance(rl, dict):
                    raise ValueError(f"{where}.{part}: expected a mapping (a ResourceList)")
                changed = _replace(names, rl, f"{where}.{part}") or changed
            changed = _restrict(names, res) or changed
    overhead = spec.get("overhead")
    if overhead is not None and not isinstance(overhead, dict):
        raise ValueError("spec.overhead: expected a mapping (a ResourceList)")
    if isinstance(overhead, dict):
        changed = _replace(names, overhead, "spec.overhead") or changed
    return changed


def extended_resource_spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The ExtendedResourceSpec of a pod: each container's ``kubernetes.io/batch-cpu`` and
    ``batch-memory`` requests and limits (init containers are not counted, as in Koordinator)."""
    containers: dict[str, Any] = {}
    for c in _containers(pod, "containers"):
        res = c.get("resources") or {}
        entry: dict[str, Any] = {}
        for part in ("limits", "requests"):
            rl = res.get(part) or {}
            got = {r: rl[r] for r in (BATCH_CPU, BATCH_MEMORY) if r in rl}
            if got:
                entry[part] = got
        if entry:
            containers[str(c.get("name") or "")] = entry
    return {"containers": containers} if containers else {}


def _semantic(spec: Mapping[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    out: dict[str, dict[str, dict[str, int]]] = {}
    for name, entry in (spec.get("containers") or {}).items():
        if not isinstance(entry, dict):
            raise ValueError(f"containers.{name}: expected a mapping")
        parts = {}
        for part in ("limits", "requests"):
            rl = entry.get(part) or {}
            if not isinstance(rl, dict):
                raise ValueError(f"containers.{name}.{part}: expected a mapping")
            if rl:
                parts[part] = {str(k): _amount(str(k), v, f"containers.{name}.{part}") for k, v in rl.items()}
        out[str(name)] = parts
    return out


#: Go's json.Marshal of an ExtendedResourceSpec: struct fields in order (limits, requests), map keys sorted,
#: no spaces (one encoder: ``json.dumps`` with options builds one a call)
_GO_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def set_extended_resource_spec(pod: dict[str, Any]) -> bool:
    """mutateByExtendedResources: write the ``node.koordinator.sh/extended-resource-spec``
    annotation when the pod's batch resources differ from what it says (absent = none). A malformed
    annotation raises ValueError naming it. True if the pod changed."""
    want = extended_resource_spec(pod)
    meta = pod.setdefault("metadata", {})
    annotations = meta.get("annotations") or {}
    current: Any = {}
    if ANNOTATION_EXTENDED_RESOURCE_SPEC in annotations:
        where = f"metadata.annotations.{ANNOTATION_EXTENDED_RESOURCE_SPEC}"
        try:
            current = json.loads(annotations[ANNOTATION_EXTENDED_RESOURCE_SPEC])
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: not a JSON ExtendedResourceSpec: {e}") from None
        if not isinstance(current, dict):
            raise ValueError(f"{where}: expected a JSON object")
        try:
            if _semantic(current) == _semantic(want):
                return False
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    elif not want:
        return False
    meta["annotations"] = {**annotations, ANNOTATION_EXTENDED_RESOURCE_SPEC: _GO_JSON.encode(want)}
    return True
