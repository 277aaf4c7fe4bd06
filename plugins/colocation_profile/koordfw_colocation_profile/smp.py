"""A Kubernetes strategic merge patch of a Pod (apimachinery's ``strategicpatch.StrategicMergePatch``
with the Pod's patch metadata), for a ClusterColocationProfile's ``spec.patch``.

Maps merge key by key (``null`` deletes a key); lists whose field is tagged ``patchStrategy:"merge"`` in
``k8s.io/api/core/v1`` merge by their ``patchMergeKey`` (primitive lists such as ``finalizers``: union);
every other list is replaced. The directives ``$patch: replace``/``delete`` (on a map or a list element),
``$retainKeys``, ``$deleteFromPrimitiveList/<field>`` and ``$setElementOrder/<field>`` are honoured
(the last only as a no-op: the merged order is the original's, then what the patch adds).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PatchError", "strategic_merge_pod"]


class PatchError(ValueError):
    """The patch cannot be applied (a wrong type where the Pod schema has a map or a list)."""


#: (struct, field) -> the struct of the field's values (maps, and the items of lists)
_CHILD = {
    ("Pod", "metadata"): "ObjectMeta", ("Pod", "spec"): "PodSpec", ("Pod", "status"): "PodStatus",
    ("PodSpec", "containers"): "Container", ("PodSpec", "initContainers"): "Container",
    ("PodSpec", "ephemeralContainers"): "Container",
}
#: (struct, field) -> merge key of a ``patchStrategy:"merge"`` list; ``None`` for a merged primitive list
_MERGE_LISTS: dict[tuple[str, str], str | None] = {
    ("ObjectMeta", "finalizers"): None, ("ObjectMeta", "ownerReferences"): "uid",
    ("PodSpec", "volumes"): "name", ("PodSpec", "initContainers"): "name", ("PodSpec", "containers"): "name",
    ("PodSpec", "ephemeralContainers"): "name", ("PodSpec", "imagePullSecrets"): "name",
    ("PodSpec", "hostAliases"): "ip", ("PodSpec", "topologySpreadConstraints"): "topologyKey",
    ("PodSpec", "resourceClaims"): "name", ("PodSpec", "schedulingGates"): "name",
    ("Container", "ports"): "containerPort", ("Container", "env"): "name", ("Container", "volumeMounts"): "mountPath",
    ("Container", "volumeDevices"): "devicePath",
    ("PodStatus", "conditions"): "type", ("PodStatus", "podIPs"): "ip",
}
_PATCH, _RETAIN, _DELETE_PRIMITIVE, _ORDER = "$patch", "$retainKeys", "$deleteFromPrimitiveList/", "$setElementOrder/"


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def strategic_merge_pod(pod: dict[str, Any], patch: Any) -> dict[str, Any]:
    """``pod`` with ``patch`` applied (a new dict; ``pod`` is not changed)."""
    if not isinstance(patch, dict):
        raise PatchError(f"a strategic merge patch of a Pod must be a JSON object, got {type(patch).__name__}")
    out = _merge_map(_copy(pod), patch, "Pod", "")
    return out if out is not None else {}


def _strip(value: Any, struct: str) -> Any:
    """A patch value added where the original has nothing: its directives resolved against nothing."""
    if isinstance(value, dict):
        return _merge_map({}, value, struct, "")
    return _copy(value)


def _merge_map(original: dict[str, Any], patch: dict[str, Any], struct: str, path: str) -> dict[str, Any] | None:
    directive = patch.get(_PATCH)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: _strip(v, _CHILD.get((struct, k), "")) for k, v in patch.items() if k != _PATCH}
    if directive is not None:
        raise PatchError(f"{path or 'the patch'}: unknown $patch directive {directive!r}")
    retain = patch.get(_RETAIN)
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError(f"{path}.$retainKeys: expected a list")
        for k in [k for k in original if k not in retain]:
            del original[k]
    for key, value in patch.items():
        if key in (_PATCH, _RETAIN) or key.startswith(_ORDER):
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            name = key[len(_DELETE_PRIMITIVE):]
            if isinstance(original.get(name), list) and isinstance(value, list):
                original[name] = [v for v in original[name] if v not in value]
            continue
        where = f"{path}.{key}" if path else key
        child = _CHILD.get((struct, key), "")
        if value is None:
            original.pop(key, None)
            continue
        current = original.get(key)
        if isinstance(value, dict):
            if isinstance(current, dict):
                merged = _merge_map(current, value, child, where)
                if merged is None:
                    original.pop(key, None)
                else:
                    original[key] = merged
            elif value.get(_PATCH) == "delete":
                original.pop(key, None)
            else:
                original[key] = _strip(value, child)
        elif isinstance(value, list) and (struct, key) in _MERGE_LISTS:
            if current is not None and not isinstance(current, list):
                raise PatchError(f"{where}: expected a list in the pod, got {type(current).__name__}")
            original[key] = _merge_list(list(current or []), value, _MERGE_LISTS[(struct, key)], child, where)
        else:
            original[key] = _copy(value)
    return original


def _merge_list(original: list[Any], patch: list[Any], merge_key: str | None, struct: str, path: str) -> list[Any]:
    if any(isinstance(v, dict) and v.get(_PATCH) == "replace" for v in patch):
        return [_strip(v, struct) for v in patch if not (isinstance(v, dict) and _PATCH in v)]
    if merge_key is None:  # a merged list of primitives: the union, in order
        return original + [_copy(v) for v in patch if v not in original]
    out = original
    for i, item in enumerate(patch):
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"{path}[{i}]: a list merged by {merge_key!r} needs that key in every element")
        key = item[merge_key]
        at = next((j for j, o in enumerate(out) if isinstance(o, dict) and o.get(merge_key) == key), None)
        if item.get(_PATCH) == "delete":
            out = [o for o in out if not (isinstance(o, dict) and o.get(merge_key) == key)]
            continue
        if at is None:
            out.append(_strip(item, struct))
        else:
            merged = _merge_map(out[at], item, struct, f"{path}[{merge_key}={key}]")
            if merged is None:
                del out[at]
            else:
                out[at] = merged
    return out
