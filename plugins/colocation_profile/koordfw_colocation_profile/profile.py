"""ClusterColocationProfile (``config.koordinator.sh/v1alpha1``, Koordinator's
``apis/config/v1alpha1/cluster_colocation_profile_types.go``) as a frozen value, and the label selector
and probability semantics Koordinator's mutating webhook gives it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from koordfw import ManifestError
from koordfw.extension import ANNOTATION_SKIP_UPDATE_RESOURCE, KIND_CLUSTER_COLOCATION_PROFILE, QOS_CLASSES

__all__ = ["ColocationProfile", "SelectorError", "parse_profile", "probability_percent", "selector_matches"]

_STRING_MAPS = ("labels", "annotations", "labelKeysMapping", "annotationKeysMapping", "labelSuffixes")
_INT32 = (-(2**31), 2**31 - 1)


class SelectorError(ValueError):
    """metav1.LabelSelectorAsSelector's errors (an unknown operator, In without values, ...)."""


@attrs.frozen
class ColocationProfile:
    name: str
    annotations: Mapping[str, str]
    namespace_selector: Mapping[str, Any] | None
    selector: Mapping[str, Any] | None
    probability: int | str | None
    qos_class: str
    priority_class_name: str
    koordinator_priority: int | None
    labels: Mapping[str, str]
    pod_annotations: Mapping[str, str]
    label_keys_mapping: Mapping[str, str]
    annotation_keys_mapping: Mapping[str, str]
    label_suffixes: Mapping[str, str]
    scheduler_name: str
    patch: Mapping[str, Any] | None

    @property
    def skip_update_resources(self) -> bool:
        """Koordinator's ShouldSkipUpdateResource: the profile carries the skip annotation (any value)."""
        return ANNOTATION_SKIP_UPDATE_RESOURCE in self.annotations


def _fail(name: str, field: str, message: str) -> ManifestError:
    return ManifestError(message, obj=f"{KIND_CLUSTER_COLOCATION_PROFILE} {name}", field=field)


def _string_map(raw: Any, name: str, field: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(name, field, f"expected a mapping of strings, got {type(raw).__name__}")
    for k, v in raw.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise _fail(name, f"{field}.{k}", f"expected a string, got {type(v).__name__}")
    return dict(raw)


def _selector(raw: Any, name: str, field: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _fail(name, field, f"expected a label selector (a mapping), got {type(raw).__name__}")
    _string_map(raw.get("matchLabels"), name, f"{field}.matchLabels")
    exprs = raw.get("matchExpressions")
    if exprs is not None:
        if not isinstance(exprs, list):
            raise _fail(name, f"{field}.matchExpressions", "expected a list")
        for i, e in enumerate(exprs):
            where = f"{field}.matchExpressions[{i}]"
            if not isinstance(e, dict) or not isinstance(e.get("key"), str) or not isinstance(e.get("operator"), str):
                raise _fail(name, where, "expected {key: <string>, operator: <string>, values: [...]}")
            values = e.get("values")
            if values is not None and (not isinstance(values, list) or not all(isinstance(v, str) for v in values)):
                raise _fail(name, f"{where}.values", "expected a list of strings")
    return raw


def parse_profile(obj: Mapping[str, Any]) -> ColocationProfile:
    """A ClusterColocationProfile object → a :class:`ColocationProfile`; a field of the wrong type raises
    :class:`koordfw.ManifestError` naming the profile and the field."""
    raw_meta = obj.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    name = str(meta.get("name") or "?")
    spec = obj.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise _fail(name, "spec", f"expected a mapping, got {type(spec).__name__}")
    prob = spec.get("probability")
    if prob is not None:
        if isinstance(prob, bool) or not isinstance(prob, (int, str)):
            raise _fail(name, "spec.probability", f"expected an integer or a percentage string, got {prob!r}")
        probability_percent(prob, name)
    qos = spec.get("qosClass") or ""
    if not isinstance(qos, str) or (qos and qos not in QOS_CLASSES):
        raise _fail(name, "spec.qosClass", f"unsupported value {qos!r}: expected one of {', '.join(QOS_CLASSES)}")
    for field in ("priorityClassName", "schedulerName"):
        if not isinstance(spec.get(field) or "", str):
            raise _fail(name, f"spec.{field}", f"expected a string, got {type(spec.get(field)).__name__}")
    kp = spec.get("koordinatorPriority")
    if kp is not None and (isinstance(kp, bool) or not isinstance(kp, int) or not _INT32[0] <= kp <= _INT32[1]):
        raise _fail(name, "spec.koordinatorPriority", f"expected an int32, got {kp!r}")
    patch = spec.get("patch")
    if patch is not None and not isinstance(patch, dict):
        raise _fail(name, "spec.patch", f"expected a Pod template patch (a mapping), got {type(patch).__name__}")
    maps = {f: _string_map(spec.get(f), name, f"spec.{f}") for f in _STRING_MAPS}
    return ColocationProfile(
        name=name, annotations=_string_map(meta.get("annotations"), name, "metadata.annotations"),
        namespace_selector=_selector(spec.get("namespaceSelector"), name, "spec.namespaceSelector"),
        selector=_selector(spec.get("selector"), name, "spec.selector"),
        probability=prob, qos_class=qos, priority_class_name=spec.get("priorityClassName") or "",
        koordinator_priority=kp, labels=maps["labels"], pod_annotations=maps["annotations"],
        label_keys_mapping=maps["labelKeysMapping"], annotation_keys_mapping=maps["annotationKeysMapping"],
        label_suffixes=maps["labelSuffixes"], scheduler_name=spec.get("schedulerName") or "", patch=patch)


_PERCENT = re.compile(r"^([+-]?[0-9]+)%$")


def probability_percent(prob: int | str, name: str = "?") -> int:
    """apimachinery's ``GetScaledValueFromIntOrPercent(probability, 100, false)``: an int as is, ``"N%"``
    as N (rounded down); any other string is an error naming the field."""
    if isinstance(prob, int):
        return prob
    m = _PERCENT.match(prob)
    if m is None:
        raise _fail(name, "spec.probability", f"invalid value {prob!r}: an integer or a percentage such as \"50%\"")
    return int(m.group(1))


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelectorAsSelector(selector).Matches(labels)``; an empty selector matches everything.
    Raises :class:`SelectorError` where Kubernetes refuses the selector."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], list(e.get("values") or [])
        if op in ("In", "NotIn"):
            if not values:
                raise SelectorError(f"for 'in', 'notin' operators, values set can't be empty (key {key!r})")
            if op == "In" and labels.get(key) not in values:
                return False
            if op == "NotIn" and key in labels and labels[key] in values:
                return False
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise SelectorError(f"values set must be empty for exists and does not exist (key {key!r})")
            if (key in labels) != (op == "Exists"):
                return False
        else:
            raise SelectorError(f"{op!r} is not a valid label selector operator")
    return True
