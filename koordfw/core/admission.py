"""Pod admission: the ``mutate_pod`` and ``validate_pod`` hooks run the way an admission webhook does.

:class:`Admission` runs every ``mutate_pod`` plugin in profile order, each on the previous result, then
every ``validate_pod`` plugin on the mutated pod, and computes the RFC 6902 JSONPatch from the original
manifest to the result. A plugin that raises, times out or returns something else than the hook allows
gives an error result naming the plugin (the webhook answers it as an error, never as a silent allow).
The manager's webhook (``koordfw.engines.kube.webhook``) and ``koordfw simulate`` both call it; they differ
only in where the objects come from (:class:`ObjectStore`: reflector caches or the input manifests).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import jsonpatch
import numpy as np

from ..extension import CONFIG_GROUP_VERSION, KIND_CLUSTER_COLOCATION_PROFILE, QOS_CLASSES, SCHEDULING_K8S_GROUP_VERSION
from .caller import HookCaller
from .clock import Clock, RealClock
from .errors import ManifestError
from .node_runtime import NodeRuntime
from .plugins import Registry
from .stash import Stash, new_stash

__all__ = ["ADMISSION_KINDS", "Admission", "AdmissionResult", "ObjectStore", "StaticObjects", "check_object", "json_patch"]

#: the admission operations of ``admission.k8s.io/v1`` AdmissionRequest
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class ObjectStore(Protocol):
    """Where the admission plugins' cluster objects come from (read-only)."""

    def objects(self, api_version: str, kind: str) -> Sequence[Mapping[str, Any]]: ...
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Mapping[str, Any] | None: ...


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class StaticObjects:
    """An :class:`ObjectStore` over a fixed set of manifests (``koordfw simulate``, tests), by
    (apiVersion, kind); a later object with the same name replaces an earlier one."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        self._by_kind: dict[tuple[str, str], dict[tuple[str, str], Mapping[str, Any]]] = {}
        self._sorted: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for obj in objects:
            self.put(obj)

    def put(self, obj: Mapping[str, Any]) -> None:
        kind = (str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
        self._by_kind.setdefault(kind, {})[_key(obj)] = obj
        self._sorted.pop(kind, None)

    def objects(self, api_version: str, kind: str) -> Sequence[Mapping[str, Any]]:
        k = (api_version, kind)
        out = self._sorted.get(k)
        if out is None:
            objs = self._by_kind.get(k, {})
            out = self._sorted[k] = [objs[key] for key in sorted(objs)]
        return out

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Mapping[str, Any] | None:
        return self._by_kind.get((api_version, kind), {}).get((namespace or "", name))


@functools.lru_cache(maxsize=4096)
def _pointer(token: str) -> str:
    """A key's JSON pointer segment (``/`` and the key escaped), remembered: pods repeat the same keys."""
    return "/" + token.replace("~", "~0").replace("/", "~1")


def json_patch(original: Any, result: Any, prefix: str = "") -> list[dict[str, Any]]:
    """The RFC 6902 operations that turn ``original`` into ``result``.

    Objects, and lists that kept their length, are compared member by member here (an unchanged subtree
    costs one ``==``); where a list's length changed, ``jsonpatch.make_patch`` diffs it and its operations
    are re-rooted under the list's path. The
    operations touch disjoint subtrees, so their order among keys does not matter."""
    if _same(original, result):
        return []
    ops: list[dict[str, Any]] = []
    _diff(original, result, prefix, ops)
    return ops


def _same(a: Any, b: Any) -> bool:
    """Are ``a`` and ``b`` the same JSON value? (A string a copy kept is the same object.)"""
    if a is b and type(a) is str:
        return True
    return a == b and _same_types(a, b)


def _diff(original: Any, result: Any, prefix: str, ops: list[dict[str, Any]]) -> None:
    """Append to ``ops`` the operations that turn ``original`` into ``result`` (not the same JSON value)
    at ``prefix``; an unchanged member is skipped here, without a call or its path."""
    if isinstance(original, dict) and isinstance(result, dict):
        ops += [{"op": "remove", "path": prefix + _pointer(k)} for k in original if k not in result]
        for k, v in result.items():
            if k not in original:
                ops.append({"op": "add", "path": prefix + _pointer(k), "value": _json_copy(v)})
            elif not _same(original[k], v):
                _diff(original[k], v, prefix + _pointer(k), ops)
        return
    if isinstance(original, list) and isinstance(result, list):
        if len(original) == len(result):  # changed in place (a container's resources): element by element
            for i, (a, b) in enumerate(zip(original, result)):
                if not _same(a, b):
                    _diff(a, b, f"{prefix}/{i}", ops)
            return
        for op in jsonpatch.make_patch(original, result).patch:
            op = dict(op)
            op["path"] = prefix + op["path"]
            if "from" in op:
                op["from"] = prefix + op["from"]
            ops.append(op)
        return
    ops.append({"op": "replace", "path": prefix, "value": _json_copy(result)})


def _same_types(a: Any, b: Any) -> bool:
    """For two values Python finds equal: are they the same JSON (``True == 1`` in Python, not in JSON)?
    Their JSON texts tell, and json's C encoder is quicker than walking them here."""
    if type(a) is not type(b):
        return False
    if not isinstance(a, (dict, list)):
        return True
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


#: the JSON scalars (kept as they are by a copy); other values are looked at by ``_json_copy``
_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})


def _json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists, scalars): several times faster than ``copy.deepcopy``.
    A scalar member is kept without a call (most members of a manifest are)."""
    if isinstance(value, dict):
        return {k: v if type(v) in _SCALAR_TYPES else _json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _SCALAR_TYPES else _json_copy(v) for v in value]
    return value


@attrs.frozen
class AdmissionResult:
    """The outcome of admitting one pod.

    ``allowed`` False with ``code`` 403 is a rejection (a ``validate_pod`` plugin's reason in ``message``);
    ``code`` 500 is an error (a plugin failed; ``plugin`` names it). ``pod`` is the mutated manifest and
    ``patch`` the JSONPatch from the original to it (empty when nothing changed or on failure)."""

    allowed: bool
    pod: dict[str, Any]
    patch: list[dict[str, Any]] = attrs.field(factory=list)
    code: int = 200
    message: str = ""
    plugin: str = ""


@attrs.define
class _Handle:
    """The :class:`koordfw.AdmissionHandle` each admission plugin gets (its own name and args)."""

    plugin_name: str
    args: Any
    clock: Clock
    rng: np.random.Generator
    store: ObjectStore
    stash: Stash = attrs.field(factory=new_stash)  # this plugin's, for this engine's lifetime

    def now(self) -> float:
        return self.clock.now()

    def objects(self, api_version: str, kind: str) -> Sequence[Mapping[str, Any]]:
        return self.store.objects(api_version, kind)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Mapping[str, Any] | None:
        return self.store.get(api_version, kind, name, namespace)


class Admission:
    """Runs the pod admission hooks of a registry against an :class:`ObjectStore`.

    ``seed`` seeds the generator the plugins share (``handle.rng``), so a run of pods is reproducible.
    """

    def __init__(self, registry: Registry, store: ObjectStore, *, clock: Clock | None = None, seed: int = 0) -> None:
        self.registry = registry
        self.store = store
        self.clock: Clock = clock or RealClock()
        self.rng = np.random.default_rng(seed)
        self._handles: dict[str, _Handle] = {}  # one per plugin: its stash lives as long as this engine
        # class plugins not constructed yet (no engine bound the registry) are constructed with this handle
        registry.bind(self._handle_for)
        self.caller = HookCaller(registry, self._handle_for)
        self.runtime = NodeRuntime(self.caller)

    def _handle_for(self, plugin: str) -> _Handle:
        h = self._handles.get(plugin)
        if h is None:
            h = self._handles[plugin] = _Handle(plugin, self.registry.args.get(plugin), self.clock, self.rng, self.store)
        return h

    @property
    def active(self) -> bool:
        """Does any plugin of the profile implement an admission hook?"""
        return self.runtime.implements("mutate_pod", "validate_pod")

    def namespace_of(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        """The pod's Namespace from the store (the store's own object: plugins only read it)."""
        ns = (pod.get("metadata") or {}).get("namespace")
        obj = self.store.get("v1", "Namespace", str(ns)) if ns else None
        return obj if isinstance(obj, dict) or obj is None else dict(obj)

    async def mutate(self, pod: dict[str, Any], operation: str, *, patch: bool = True) -> AdmissionResult:
        """Run the ``mutate_pod`` plugins on a copy of ``pod`` (which is left as it is). ``patch=False``
        leaves the result's ``patch`` empty, for a caller that wants only the mutated pod (an embedder
        creating pods itself): the diff is a good part of a small mutation's cost."""
        _check_operation(operation)
        out = await self.runtime.run_mutate_pod(_json_copy(pod), operation, self.namespace_of(pod))
        if not out.allowed:
            return AdmissionResult(False, pod, code=out.code, message=out.message, plugin=out.plugin)
        return AdmissionResult(True, out.pod, json_patch(pod, out.pod) if patch else [])

    async def validate(self, pod: dict[str, Any], old: dict[str, Any] | None, operation: str) -> AdmissionResult:
        """Run the ``validate_pod`` plugins; the first rejection (or failure) decides."""
        _check_operation(operation)
        out = await self.runtime.run_validate_pod(pod, old, operation, self.namespace_of(pod))
        if not out.allowed:
            return AdmissionResult(False, pod, code=out.code, message=out.message, plugin=out.plugin)
        return AdmissionResult(True, pod)

    async def admit(self, pod: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None, *,
                    patch: bool = True) -> AdmissionResult:
        """Mutate, then validate the mutated pod: what the API server does with both webhooks in place
        (``patch`` as for :meth:`mutate`)."""
        mutated = await self.mutate(pod, operation, patch=patch)
        if not mutated.allowed:
            return mutated
        checked = await self.validate(mutated.pod, old, operation)
        if not checked.allowed:
            return checked
        return mutated


def _check_operation(operation: str) -> None:
    if operation not in OPERATIONS:
        raise ValueError(f"invalid admission operation {operation!r}: expected one of {', '.join(OPERATIONS)}")


# -- the admission objects of an input (``koordfw simulate``): the API server's schema checks ------------

#: kind -> its apiVersion, for the objects the admission plugins read (a document without one gets it)
ADMISSION_KINDS = {"Namespace": "v1", "PriorityClass": SCHEDULING_K8S_GROUP_VERSION,
                   KIND_CLUSTER_COLOCATION_PROFILE: CONFIG_GROUP_VERSION}
_INT32 = (-(2**31), 2**31 - 1)
_STRING_MAPS = ("labels", "annotations", "labelKeysMapping", "annotationKeysMapping", "labelSuffixes")


def _string_map(v: Any, field: str, fail: Any) -> None:
    if v is None:
        return
    if not isinstance(v, dict):
        raise fail(field, f"expected a mapping of strings, got {type(v).__name__}")
    for k, x in v.items():
        if not isinstance(x, str):
            raise fail(f"{field}.{k}", f"expected a string, got {type(x).__name__}")


def _label_selector(v: Any, field: str, fail: Any) -> None:
    if v is None:
        return
    if not isinstance(v, dict):
        raise fail(field, f"expected a label selector (a mapping), got {type(v).__name__}")
    _string_map(v.get("matchLabels"), f"{field}.matchLabels", fail)
    exprs = v.get("matchExpressions")
    if exprs is None:
        return
    if not isinstance(exprs, list):
        raise fail(f"{field}.matchExpressions", "expected a list")
    for i, e in enumerate(exprs):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(e, dict):
            raise fail(where, "expected a mapping")
        for key in ("key", "operator"):
            if not isinstance(e.get(key), str):
                raise fail(f"{where}.{key}", "required (a string)")
        values = e.get("values")
        if values is not None and (not isinstance(values, list) or not all(isinstance(x, str) for x in values)):
            raise fail(f"{where}.values", "expected a list of strings")


def check_object(kind: str, obj: Mapping[str, Any], *, file: str | None = None) -> None:
    """Refuse what the API server would refuse of a Namespace, a PriorityClass or a
    ClusterColocationProfile (its CRD schema): a :class:`ManifestError` naming the file, object and field."""
    raw_meta = obj.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    label = f"{kind} {meta.get('name')}"

    def fail(field: str, message: str) -> ManifestError:
        return ManifestError(message, file=file, obj=label, field=field)

    _string_map(meta.get("labels"), "metadata.labels", fail)
    _string_map(meta.get("annotations"), "metadata.annotations", fail)
    if kind == "PriorityClass":
        value = obj.get("value")
        if isinstance(value, bool) or not isinstance(value, int) or not _INT32[0] <= value <= _INT32[1]:
            raise fail("value", f"required: an int32, got {value!r}"[:120])
        pp = obj.get("preemptionPolicy")
        if pp is not None and pp not in ("PreemptLowerPriority", "Never"):
            raise fail("preemptionPolicy", f"unsupported value {pp!r}: expected PreemptLowerPriority or Never"[:160])
        if obj.get("globalDefault") is not None and not isinstance(obj["globalDefault"], bool):
            raise fail("globalDefault", "expected true or false")
    elif kind == KIND_CLUSTER_COLOCATION_PROFILE:
        spec = obj.get("spec")
        if spec is None:
            return
        if not isinstance(spec, dict):
            raise fail("spec", f"expected a mapping, got {type(spec).__name__}")
        _label_selector(spec.get("namespaceSelector"), "spec.namespaceSelector", fail)
        _label_selector(spec.get("selector"), "spec.selector", fail)
        prob = spec.get("probability")
        if prob is not None and (isinstance(prob, bool) or not isinstance(prob, (int, str))):
            raise fail("spec.probability", f"expected an integer or a percentage string, got {prob!r}"[:120])
        qos = spec.get("qosClass")
        if qos is not None and qos not in QOS_CLASSES:
            raise fail("spec.qosClass", f"unsupported value {str(qos)[:40]!r}: expected one of {', '.join(QOS_CLASSES)}")
        for field in ("priorityClassName", "schedulerName"):
            if spec.get(field) is not None and not isinstance(spec[field], str):
                raise fail(f"spec.{field}", f"expected a string, got {type(spec[field]).__name__}")
        kp = spec.get("koordinatorPriority")
        if kp is not None and (isinstance(kp, bool) or not isinstance(kp, int) or not _INT32[0] <= kp <= _INT32[1]):
            raise fail("spec.koordinatorPriority", f"expected an int32, got {kp!r}"[:120])
        for field in _STRING_MAPS:
            _string_map(spec.get(field), f"spec.{field}", fail)
        if spec.get("patch") is not None and not isinstance(spec["patch"], dict):
            raise fail("spec.patch", f"expected a Pod template patch (a mapping), got {type(spec['patch']).__name__}")
