"""What the API server refuses of the storage objects the volume built-ins read (PersistentVolumeClaim,
PersistentVolume, StorageClass, CSINode), so that a malformed one in ``koordfw simulate``'s input is an
error naming the file, the object and the field (exit 2) rather than a claim read wrongly.

The rules are those of kube's ``pkg/apis/core/validation`` (``ValidatePersistentVolumeClaim``,
``ValidatePersistentVolume``) and ``pkg/apis/storage/validation`` for the fields the built-ins read: the
access modes, the storage class name, the requested and offered storage (quantities), the claim
reference, the node affinity, the binding mode, the CSI node drivers' counts and the phases. On a live
cluster the API server has already applied them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .errors import ManifestError
from .quantity import QuantityError, parse_quantity

__all__ = ["STORAGE_KINDS", "check_storage_object"]

STORAGE_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "StorageClass", "CSINode")

#: core/v1 PersistentVolumeAccessMode
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
CLAIM_PHASES = ("Pending", "Bound", "Lost")
VOLUME_PHASES = ("Pending", "Available", "Bound", "Released", "Failed")
BINDING_MODES = ("Immediate", "WaitForFirstConsumer")
VOLUME_MODES = ("Filesystem", "Block")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")

Fail = Callable[[str, str], ManifestError]


def _mapping(v: Any, field: str, fail: Fail) -> Mapping[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise fail(field, f"expected a mapping, got {type(v).__name__}")
    return v


def _list(v: Any, field: str, fail: Fail) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise fail(field, f"expected a list, got {type(v).__name__}")
    return v


def _string(v: Any, field: str, fail: Fail) -> None:
    if v is not None and not isinstance(v, str):
        raise fail(field, f"expected a string, got {type(v).__name__} {str(v)[:40]!r}")


def _access_modes(spec: Mapping[str, Any], field: str, fail: Fail) -> None:
    modes = _list(spec.get("accessModes"), f"{field}.accessModes", fail)
    for i, m in enumerate(modes):
        if m not in ACCESS_MODES:
            raise fail(f"{field}.accessModes[{i}]", f"unsupported value {str(m)[:40]!r}: expected one of "
                                                     f"{', '.join(ACCESS_MODES)}")
    if "ReadWriteOncePod" in modes and len(modes) > 1:
        raise fail(f"{field}.accessModes", "may not use ReadWriteOncePod with other access modes")


def _storage(resources: Any, field: str, fail: Fail) -> None:
    res = _mapping(resources, field, fail)
    if "storage" in res:
        try:
            q = parse_quantity(res["storage"])
        except (QuantityError, TypeError) as e:  # QuantityError is a ValueError
            raise fail(f"{field}.storage", str(e)) from None
        if q < 0:
            raise fail(f"{field}.storage", "must be greater than or equal to 0")


def _phase(obj: Mapping[str, Any], allowed: tuple[str, ...], fail: Fail) -> None:
    phase = _mapping(obj.get("status"), "status", fail).get("phase")
    if phase is not None and phase not in allowed:
        raise fail("status.phase", f"unsupported value {str(phase)[:40]!r}: expected one of {', '.join(allowed)}")


def _node_selector(v: Any, field: str, fail: Fail) -> None:
    sel = _mapping(v, field, fail)
    terms = _list(sel.get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms", fail)
    if v is not None and not terms:
        raise fail(f"{field}.nodeSelectorTerms", "required: must have at least one node selector term")
    for i, t in enumerate(terms):
        term = _mapping(t, f"{field}.nodeSelectorTerms[{i}]", fail)
        for part in ("matchExpressions", "matchFields"):
            for j, e in enumerate(_list(term.get(part), f"{field}.nodeSelectorTerms[{i}].{part}", fail)):
                where = f"{field}.nodeSelectorTerms[{i}].{part}[{j}]"
                expr = _mapping(e, where, fail)
                if not isinstance(expr.get("key"), str) or not expr.get("key"):
                    raise fail(f"{where}.key", "required: a label key")
                if expr.get("operator") not in SELECTOR_OPERATORS:
                    raise fail(f"{where}.operator", f"unsupported value {str(expr.get('operator'))[:40]!r}: "
                                                    f"expected one of {', '.join(SELECTOR_OPERATORS)}")
                for k, val in enumerate(_list(expr.get("values"), f"{where}.values", fail)):
                    _string(val, f"{where}.values[{k}]", fail)


def _claim(obj: Mapping[str, Any], fail: Fail) -> None:
    spec = _mapping(obj.get("spec"), "spec", fail)
    _access_modes(spec, "spec", fail)
    _string(spec.get("storageClassName"), "spec.storageClassName", fail)
    _string(spec.get("volumeName"), "spec.volumeName", fail)
    if spec.get("volumeMode") is not None and spec["volumeMode"] not in VOLUME_MODES:
        raise fail("spec.volumeMode", f"unsupported value {str(spec['volumeMode'])[:40]!r}: expected Filesystem or Block")
    res = _mapping(spec.get("resources"), "spec.resources", fail)
    _storage(res.get("requests"), "spec.resources.requests", fail)
    _phase(obj, CLAIM_PHASES, fail)


def _volume(obj: Mapping[str, Any], fail: Fail) -> None:
    spec = _mapping(obj.get("spec"), "spec", fail)
    _access_modes(spec, "spec", fail)
    _string(spec.get("storageClassName"), "spec.storageClassName", fail)
    _storage(spec.get("capacity"), "spec.capacity", fail)
    ref = _mapping(spec.get("claimRef"), "spec.claimRef", fail)
    for k in ("namespace", "name", "uid"):
        _string(ref.get(k), f"spec.claimRef.{k}", fail)
    aff = _mapping(spec.get("nodeAffinity"), "spec.nodeAffinity", fail)
    if aff.get("required") is not None:
        _node_selector(aff["required"], "spec.nodeAffinity.required", fail)
    csi = _mapping(spec.get("csi"), "spec.csi", fail)
    if csi:
        if not isinstance(csi.get("driver"), str) or not csi["driver"]:
            raise fail("spec.csi.driver", "required: the CSI driver's name")
        _string(csi.get("volumeHandle"), "spec.csi.volumeHandle", fail)
    _phase(obj, VOLUME_PHASES, fail)


def _storage_class(obj: Mapping[str, Any], fail: Fail) -> None:
    if not isinstance(obj.get("provisioner"), str) or not obj["provisioner"]:
        raise fail("provisioner", "required: the provisioner's name")
    mode = obj.get("volumeBindingMode")
    if mode is not None and mode not in BINDING_MODES:
        raise fail("volumeBindingMode", f"unsupported value {str(mode)[:40]!r}: expected Immediate or WaitForFirstConsumer")
    for i, t in enumerate(_list(obj.get("allowedTopologies"), "allowedTopologies", fail)):
        term = _mapping(t, f"allowedTopologies[{i}]", fail)
        for j, e in enumerate(_list(term.get("matchLabelExpressions"), f"allowedTopologies[{i}].matchLabelExpressions",
                                    fail)):
            where = f"allowedTopologies[{i}].matchLabelExpressions[{j}]"
            expr = _mapping(e, where, fail)
            if not isinstance(expr.get("key"), str) or not expr.get("key"):
                raise fail(f"{where}.key", "required: a label key")
            values = _list(expr.get("values"), f"{where}.values", fail)
            if not values:
                raise fail(f"{where}.values", "required: at least one value")
            for k, val in enumerate(values):
                _string(val, f"{where}.values[{k}]", fail)


def _csi_node(obj: Mapping[str, Any], fail: Fail) -> None:
    spec = _mapping(obj.get("spec"), "spec", fail)
    for i, d in enumerate(_list(spec.get("drivers"), "spec.drivers", fail)):
        drv = _mapping(d, f"spec.drivers[{i}]", fail)
        if not isinstance(drv.get("name"), str) or not drv["name"]:
            raise fail(f"spec.drivers[{i}].name", "required: the CSI driver's name")
        count = _mapping(drv.get("allocatable"), f"spec.drivers[{i}].allocatable", fail).get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
            raise fail(f"spec.drivers[{i}].allocatable.count", f"must be a non-negative integer, got {str(count)[:40]!r}")


_CHECKS: dict[str, Callable[[Mapping[str, Any], Fail], None]] = {
    "PersistentVolumeClaim": _claim, "PersistentVolume": _volume, "StorageClass": _storage_class,
    "CSINode": _csi_node,
}


def check_storage_object(kind: str, obj: Mapping[str, Any], *, file: str | None = None) -> None:
    """Refuse what the API server would refuse of a storage object's fields the built-ins read: a
    :class:`ManifestError` naming the file, the object (``PersistentVolumeClaim ns/name``) and the field."""
    raw = obj.get("metadata")
    meta: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    name = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    label = f"{kind} {name}"

    def fail(field: str, message: str) -> ManifestError:
        return ManifestError(message, file=file, obj=label, field=field)

    _CHECKS[kind](obj, fail)
