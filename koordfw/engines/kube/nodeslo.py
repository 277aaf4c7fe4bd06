"""The NodeSLO controller of ``koordfw manager`` (koord-manager's ``pkg/slo-controller/nodeslo``).

It renders the ``slo-controller-config`` ConfigMap into one ``slo.koordinator.sh/v1alpha1`` ``NodeSLO``
per node (cluster-scoped, named like the node), which the node agents read:

============================== =========================================
ConfigMap key                  NodeSLO field
============================== =========================================
``resource-threshold-config``  ``spec.resourceUsedThresholdWithBE``
``resource-qos-config``        ``spec.resourceQOSStrategy``
``cpu-burst-config``           ``spec.cpuBurstStrategy``
``system-config``              ``spec.systemStrategy``
``host-application-config``    ``spec.hostApplications``
============================== =========================================

Each of the first four keys is ``{"clusterStrategy": {...}, "nodeStrategies": [{"name", "nodeSelector",
<strategy fields>}, ...]}``. As Koordinator (``resource_strategy.go``): the cluster strategy is merged over
Koordinator's default (``sloconfig/nodeslo_config.go``; the QoS default is empty), each node strategy
over the merged cluster strategy, and a node gets the first node strategy whose ``nodeSelector``
matches its labels (a selector that does not parse is skipped; a missing one matches nothing), else
the cluster strategy. ``host-application-config`` is ``{"applications": [...], "nodeConfigs":
[{"nodeSelector", "applications"}]}``, the first matching node config's list replacing the cluster's.
The node annotation ``node.koordinator.sh/network-bandwidth`` overrides
``systemStrategy.totalNetworkBandwidth``.

"Merged" is exactly what Koordinator's ``util.MergeCfg`` does: the newer strategy is encoded by Go's
``encoding/json`` (``omitempty``: unset fields drop out) and decoded into a copy of the older one, so set
fields replace, nested objects merge field by field, maps merge key by key and list elements merge by
index. This module reproduces Go's decoding (keys match field names case-insensitively, unknown keys
are ignored, an integer field refuses ``1.5`` or ``"1"``) and encoding (quantities in canonical form;
``totalNetworkBandwidth`` is a non-pointer ``resource.Quantity`` and so always present, ``"0"`` when
unset, which is why a node strategy without it resets the cluster's value to ``"0"``, as in Koordinator).

A key that is missing is its default; a key that does not decode (bad JSON, a field of the wrong
type) is logged naming the key and the field, and that key keeps its previous value (the default
until a valid one arrived). The ConfigMap's absence means the defaults; so does its deletion (Koordinator
ignores the delete event and keeps the last configuration until it restarts; koordfw's NodeSLOs depend
only on the objects that exist).

:func:`parse_slo_config` (ConfigMap data, previous configuration -> configuration, problems) and
:func:`render_spec` (configuration, node labels and annotations -> NodeSLO spec) are pure;
:class:`NodeSLOController` creates, updates (only when the rendered spec differs) and deletes NodeSLOs
as nodes, NodeSLOs and the ConfigMap change.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Protocol

import anyio
import attrs
import structlog
from anyio.abc import TaskGroup

from ...extension import (
    ANNOTATION_NODE_BANDWIDTH,
    CPU_BURST_CONFIG_KEY,
    HOST_APPLICATION_CONFIG_KEY,
    RESOURCE_QOS_CONFIG_KEY,
    RESOURCE_THRESHOLD_CONFIG_KEY,
    SLO_CTRL_CONFIG_MAP,
    SLO_GROUP_VERSION,
    SYSTEM_CONFIG_KEY,
)
from .client import ApiError, KubeClient
from .reflector import Reflector

log = structlog.get_logger("koordfw.kube")

NODESLOS = f"/apis/{SLO_GROUP_VERSION}/nodeslos"

__all__ = ["DEFAULT_SLO_CONFIG", "NODESLOS", "NodeSLOController", "SLOConfig", "canonical_quantity",
           "nodeslo_spec_schema", "parse_slo_config", "render_nodeslo_spec", "render_spec", "selector_matches_strict"]


# ================================================================================================
# Go's encoding/json over the NodeSLO types (apis/slo/v1alpha1, apis/configuration)
# ================================================================================================

class _DecodeError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path, self.message = path, message


class _Num(str):
    """A JSON number kept as its literal text (Go decodes the literal, not a float)."""


class _Obj(list):
    """A JSON object as its (key, value) pairs in document order (Go decodes duplicates in turn)."""


@attrs.frozen
class _Int:
    bits: int


@attrs.frozen
class _Scalar:
    kind: str  # "bool", "string", "quantity", "intorstring"


@attrs.frozen
class _Ptr:
    elem: Any


@attrs.frozen
class _Slice:
    elem: Any


@attrs.frozen
class _Map:
    elem: Any


@attrs.frozen
class _Field:
    json: str
    type: Any
    omitempty: bool = True


@attrs.frozen
class _Struct:
    name: str
    fields: tuple[_Field, ...]
    #: the fields of an embedded *pointer* struct (Go allocates it when one of its keys is decoded)
    embedded: _Struct | None = None

    def lookup(self, key: str) -> tuple[_Field | None, bool]:
        """The field a JSON key decodes into and whether it is the embedded struct's (Go: an exact
        match, else the first case-insensitive one)."""
        cands = [(f, False) for f in self.fields] + [(f, True) for f in (self.embedded.fields if self.embedded else ())]
        for f, emb in cands:
            if f.json == key:
                return f, emb
        folded = _fold(key)
        for f, emb in cands:
            if _fold(f.json) == folded:
                return f, emb
        return None, False


def _fold(s: str) -> str:
    # Go's equalFold over ASCII field names; KELVIN SIGN and LONG S fold to k and s as in Go
    return s.replace("\u212a", "k").replace("\u017f", "s").lower()


INT64, INT32 = _Int(64), _Int(32)
BOOL, STRING, QUANTITY, INTORSTRING = (_Scalar("bool"), _Scalar("string"), _Scalar("quantity"),
                                       _Scalar("intorstring"))


def _ptrs(names: str, t: Any) -> tuple[_Field, ...]:
    return tuple(_Field(n, _Ptr(t)) for n in names.split())


# -- apis/slo/v1alpha1/nodeslo_types.go ------------------------------------------------------------
_CPU_QOS = _ptrs("groupIdentity schedIdle", INT64) + _ptrs("coreExpeller", BOOL)
_MEMORY_QOS = (_ptrs("minLimitPercent lowLimitPercent throttlingPercent wmarkRatio wmarkScalePermill wmarkMinAdj "
                     "priorityEnable priority oomKillGroup", INT64)
               + _ptrs("pageCacheEnable", BOOL) + _ptrs("pageCacheLimitPercent pageCacheLimitSize", INT64)
               + _ptrs("pageCacheReclaimSync", BOOL))
_IO_CFG = _Struct("IOCfg", _ptrs("readIOPS writeIOPS readBPS writeBPS ioWeightPercent readLatency writeLatency "
                                 "readLatencyPercent writeLatencyPercent", INT64)
                  + _ptrs("enableUserModel", BOOL)
                  + _ptrs("modelReadBPS modelWriteBPS modelReadSeqIOPS modelWriteSeqIOPS modelReadRandIOPS "
                          "modelWriteRandIOPS", INT64))
_BLOCK_CFG = _Struct("BlockCfg", (_Field("name", STRING), _Field("type", STRING), _Field("ioCfg", _IO_CFG)))
_RESCTRL_QOS = _ptrs("catRangeStartPercent catRangeEndPercent mbaPercent", INT64)
_NETWORK_QOS = _ptrs("ingressRequest ingressLimit egressRequest egressLimit", INTORSTRING)
_ENABLE = _ptrs("enable", BOOL)
_RESOURCE_QOS = _Struct("ResourceQOS", (
    _Field("cpuQOS", _Ptr(_Struct("CPUQOSCfg", _ENABLE + _CPU_QOS))),
    _Field("memoryQOS", _Ptr(_Struct("MemoryQOSCfg", _ENABLE + _MEMORY_QOS))),
    _Field("blkioQOS", _Ptr(_Struct("BlkIOQOSCfg", _ENABLE + (_Field("blocks", _Slice(_Ptr(_BLOCK_CFG))),)))),
    _Field("resctrlQOS", _Ptr(_Struct("ResctrlQOSCfg", _ENABLE + _RESCTRL_QOS))),
    _Field("networkQOS", _Ptr(_Struct("NetworkQOSCfg", _ENABLE + _NETWORK_QOS))),
))
RESOURCE_QOS_STRATEGY = _Struct("ResourceQOSStrategy", (
    _Field("policies", _Ptr(_Struct("ResourceQOSPolicies", _ptrs("cpuPolicy netQOSPolicy", STRING)))),
    *_ptrs("lsrClass lsClass beClass systemClass cgroupRoot", _RESOURCE_QOS),
))
RESOURCE_THRESHOLD_STRATEGY = _Struct("ResourceThresholdStrategy", (
    *_ptrs("enable", BOOL), *_ptrs("cpuSuppressThresholdPercent cpuSuppressMinPercent", INT64),
    _Field("cpuSuppressPolicy", STRING),
    *_ptrs("memoryEvictThresholdPercent memoryEvictLowerPercent memoryAllocatableEvictThresholdPercent "
           "memoryAllocatableEvictLowerPercent cpuEvictBESatisfactionUpperPercent cpuEvictBESatisfactionLowerPercent "
           "cpuEvictBEUsageThresholdPercent cpuEvictTimeWindowSeconds cpuEvictThresholdPercent cpuEvictLowerPercent "
           "cpuAllocatableEvictThresholdPercent cpuAllocatableEvictLowerPercent", INT64),
    _Field("cpuEvictPolicy", STRING),
    *_ptrs("evictEnabledPriorityThreshold allocatableEvictPriorityThreshold", INT32),
))
CPU_BURST_STRATEGY = _Struct("CPUBurstStrategy", (  # CPUBurstConfig inline
    _Field("policy", STRING), *_ptrs("cpuBurstPercent cfsQuotaBurstPercent cfsQuotaBurstPeriodSeconds", INT64),
    *_ptrs("sharePoolThresholdPercent", INT64),
))
SYSTEM_STRATEGY = _Struct("SystemStrategy", (
    *_ptrs("minFreeKbytesFactor watermarkScaleFactor memcgReapBackGround schedGroupIdentityEnabled "
           "schedIdleSaverWmark", INT64),
    _Field("schedFeatures", _Map(BOOL)), *_ptrs("pageCacheLimitEnabled", INT64),
    _Field("totalNetworkBandwidth", QUANTITY),
))
HOST_APPLICATION_SPEC = _Struct("HostApplicationSpec", (  # host_application.go
    _Field("name", STRING), _Field("priority", STRING), _Field("qos", STRING),
    _Field("cgroupPath", _Ptr(_Struct("CgroupPath", (_Field("base", STRING), _Field("parentDir", STRING),
                                                      _Field("relativePath", STRING))))),
    _Field("strategy", _Ptr(_Struct("HostApplicationStrategy", ()))),
))

# -- apis/configuration/slo_controller_config.go ---------------------------------------------------
_LABEL_SELECTOR = _Struct("LabelSelector", (
    _Field("matchLabels", _Map(STRING)),
    _Field("matchExpressions", _Slice(_Struct("LabelSelectorRequirement", (
        _Field("key", STRING, omitempty=False), _Field("operator", STRING, omitempty=False),
        _Field("values", _Slice(STRING)))))),
))
_PROFILE = (_Field("name", STRING), _Field("nodeSelector", _Ptr(_LABEL_SELECTOR)))


def _strategy_cfg(name: str, strategy: _Struct) -> _Struct:
    node = _Struct(f"Node{name}", _PROFILE, embedded=strategy)
    return _Struct(f"{name}Cfg", (_Field("clusterStrategy", _Ptr(strategy)), _Field("nodeStrategies", _Slice(node))))


_HOST_APPLICATION_CFG = _Struct("HostApplicationCfg", (
    _Field("applications", _Slice(HOST_APPLICATION_SPEC)),
    _Field("nodeConfigs", _Slice(_Struct("NodeHostApplicationCfg", _PROFILE + (
        _Field("applications", _Slice(HOST_APPLICATION_SPEC)),)))),
))

#: the embedded strategy of a node strategy, once allocated, is kept under this key of its dict
_EMBEDDED = "\x00strategy"


def _zero(t: Any) -> Any:
    if isinstance(t, _Struct):
        return {}
    if isinstance(t, _Int):
        return 0
    if isinstance(t, _Scalar):
        return {"bool": False, "string": "", "quantity": "0", "intorstring": 0}[t.kind]
    return None  # pointer, slice, map


def _what(j: Any) -> str:
    if j is None:
        return "null"
    if isinstance(j, bool):
        return "a boolean"
    if isinstance(j, (_Num, int, float)):
        return f"the number {j}"
    if isinstance(j, str):
        return f"the string {json.dumps(j)[:60]}"
    if isinstance(j, (_Obj, dict)):
        return "an object"
    return "an array"


def _items(j: Any) -> Iterator[tuple[str, Any]]:
    return iter(j) if isinstance(j, _Obj) else iter(j.items())


def _decode(t: Any, j: Any, cur: Any, path: str) -> Any:
    """Decode JSON value ``j`` into the Go value ``cur`` of type ``t`` (Go's json.Unmarshal into an
    existing value); returns the new value. Raises _DecodeError naming the field path."""
    if isinstance(t, _Ptr):
        if j is None:
            return None
        return _decode(t.elem, j, cur if cur is not None else _zero(t.elem), path)
    if isinstance(t, _Struct):
        if j is None:
            return cur
        if not isinstance(j, (_Obj, dict)):
            raise _DecodeError(path, f"expected an object ({t.name}), got {_what(j)}")
        out = dict(cur) if isinstance(cur, dict) else {}
        for key, val in _items(j):
            f, emb = t.lookup(key)
            if f is None:
                continue  # Go ignores unknown keys
            sub = f"{path}.{f.json}" if path else f.json
            if emb:
                holder = dict(out.get(_EMBEDDED) or {})
                holder[f.json] = _decode(f.type, val, holder.get(f.json, _zero(f.type)), sub)
                out[_EMBEDDED] = holder
            else:
                out[f.json] = _decode(f.type, val, out.get(f.json, _zero(f.type)), sub)
        return out
    if isinstance(t, _Slice):
        if j is None:
            return None
        if not isinstance(j, list) or isinstance(j, _Obj):
            raise _DecodeError(path, f"expected an array, got {_what(j)}")
        old = cur if isinstance(cur, list) else []
        # Go decodes into the elements already there (index by index) and truncates to the new length
        return [_decode(t.elem, v, old[i] if i < len(old) else _zero(t.elem), f"{path}[{i}]")
                for i, v in enumerate(j)]
    if isinstance(t, _Map):
        if j is None:
            return None
        if not isinstance(j, (_Obj, dict)):
            raise _DecodeError(path, f"expected an object, got {_what(j)}")
        out = dict(cur) if isinstance(cur, dict) else {}
        for key, val in _items(j):
            out[key] = _decode(t.elem, val, _zero(t.elem), f"{path}.{key}")
        return out
    if isinstance(t, _Int):
        if j is None:
            return cur
        n = _int_literal(j)
        if n is None:
            raise _DecodeError(path, f"expected an integer (int{t.bits}), got {_what(j)}")
        if not -(2 ** (t.bits - 1)) <= n < 2 ** (t.bits - 1):
            raise _DecodeError(path, f"{n} overflows int{t.bits}")
        return n
    kind = t.kind
    if kind == "quantity":
        if isinstance(j, str):  # a JSON string or a number literal; Go trims spaces inside the quotes
            try:
                return canonical_quantity(j.strip())
            except ValueError as e:
                raise _DecodeError(path, str(e)) from None
        if j is None:
            return "0"
        raise _DecodeError(path, f"expected a quantity, got {_what(j)}")
    if j is None:
        return cur
    if kind == "bool":
        if not isinstance(j, bool):
            raise _DecodeError(path, f"expected a boolean, got {_what(j)}")
        return j
    if kind == "string":
        if not isinstance(j, str) or isinstance(j, _Num):
            raise _DecodeError(path, f"expected a string, got {_what(j)}")
        return str(j)
    # intorstring (k8s.io/apimachinery intstr): a JSON string, else an int32
    if isinstance(j, str) and not isinstance(j, _Num):
        return str(j)
    n = _int_literal(j)
    if n is None:
        raise _DecodeError(path, f"expected an integer or a string, got {_what(j)}")
    if not -(2**31) <= n < 2**31:
        raise _DecodeError(path, f"{n} overflows int32")
    return n


_INT_LITERAL = re.compile(r"-?(?:0|[1-9][0-9]*)")


def _int_literal(j: Any) -> int | None:
    if isinstance(j, _Num):
        return int(j) if _INT_LITERAL.fullmatch(j) else None
    if isinstance(j, int) and not isinstance(j, bool):
        return j
    return None


def _marshal(t: Any, v: Any) -> Any:
    """Go's json.Marshal of value ``v`` of type ``t`` (the NodeSLO types: every pointer, string, slice and
    map field is ``omitempty``; non-pointer structs and quantities are always written)."""
    if isinstance(t, _Ptr):
        return None if v is None else _marshal(t.elem, v)
    if isinstance(t, _Struct):
        out: dict[str, Any] = {}
        src = v or {}
        layers = [(t.fields, src)]
        if t.embedded is not None and src.get(_EMBEDDED) is not None:
            layers.append((t.embedded.fields, src[_EMBEDDED]))
        for fields, holder in layers:
            for f in fields:
                val = holder.get(f.json, _zero(f.type))
                if f.omitempty and _empty(f.type, val):
                    continue
                out[f.json] = _marshal(f.type, val)
        return out
    if isinstance(t, _Slice):
        return None if v is None else [_marshal(t.elem, x) for x in v]
    if isinstance(t, _Map):
        return None if v is None else {k: _marshal(t.elem, x) for k, x in sorted(v.items())}
    return v


def _empty(t: Any, v: Any) -> bool:
    if isinstance(t, _Ptr):
        return v is None
    if isinstance(t, (_Slice, _Map)):
        return not v  # nil or empty
    if isinstance(t, _Struct) or (isinstance(t, _Scalar) and t.kind in ("quantity", "intorstring")):
        return False  # structs (resource.Quantity, IOCfg) are never empty to encoding/json
    return v == _zero(t)


def _merge(t: _Struct, old: dict, new: dict) -> dict:
    """Koordinator's ``util.MergeCfg(old, new)``: json.Unmarshal(json.Marshal(new)) into a copy of old."""
    return _decode(t, _marshal(t, new), copy.deepcopy(old), "")


def _loads(text: str) -> Any:
    def bad_constant(name: str) -> Any:
        raise ValueError(f"invalid JSON literal {name}")

    return json.loads(text, parse_int=_Num, parse_float=_Num, parse_constant=bad_constant, object_pairs_hook=_Obj)


# ================================================================================================
# resource.Quantity's canonical form (k8s.io/apimachinery/pkg/api/resource)
# ================================================================================================

_QTY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?[0-9]+))?")
_BIN_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DEC_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DEC_BY_EXP = {v: k for k, v in _DEC_SUFFIX.items()}
_BIN_BY_EXP = {v // 10: k for k, v in _BIN_SUFFIX.items()}


def canonical_quantity(text: str) -> str:
    """``resource.MustParse(text).String()``: e.g. ``1000M`` -> ``1G``, ``0.5`` -> ``500m``, ``2048Mi`` ->
    ``2Gi``, ``1e3`` -> ``1e3``. Raises ValueError as ParseQuantity does."""
    m = _QTY.fullmatch(text)
    if not text or m is None or not (m.group(2) or m.group(3)):
        raise ValueError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                         f", got {json.dumps(text)[:60]}")
    sign, whole, frac, suffix, exp = m.groups()
    frac = frac or ""
    if len(whole) + len(frac) > 64 or (exp is not None and abs(int(exp)) > 64):
        raise ValueError(f"quantity {json.dumps(text)[:60]} is too large or too precise")
    digits = int((whole or "0") + frac)
    scale = -len(frac)  # value = digits * 10**scale
    if exp is not None:
        fmt, scale = "exp", scale + int(exp)
        mult = 1
    elif suffix in _BIN_SUFFIX:
        fmt, mult = "bin", 2 ** _BIN_SUFFIX[suffix]
    else:
        fmt, mult = "dec", 1
        scale += _DEC_SUFFIX[suffix or ""]
    if digits == 0:
        return "0"
    neg = sign == "-"
    # the value as an exact fraction num / den; ParseQuantity rounds up to nano (10**-9) precision
    num, den = digits * mult, 1
    if scale >= 0:
        num *= 10**scale
    else:
        den = 10 ** (-scale)
    nano_num = -((-num * 10**9) // den)  # ceil(value * 1e9), of the magnitude (rounding away from zero)
    if fmt == "bin":
        if nano_num % 10**9 == 0 and nano_num // 10**9 >= 1024:
            n = nano_num // 10**9
            e = 0
            while n % 1024 == 0 and e < 6:
                n //= 1024
                e += 1
            return f"{'-' if neg else ''}{n}{_BIN_BY_EXP.get(e, '')}"
        fmt = "dec"  # below 1024, or not an integer: written in decimal SI
    mant, e10 = nano_num, -9
    while mant % 10 == 0:
        mant //= 10
        e10 += 1
    while e10 % 3:
        mant *= 10
        e10 -= 1
    body = f"{'-' if neg else ''}{mant}"
    if fmt == "exp":
        return body if e10 == 0 else f"{body}e{e10}"
    if e10 in _DEC_BY_EXP:
        return body + _DEC_BY_EXP[e10]
    return f"{body}e{e10}"


# ================================================================================================
# label selectors (metav1.LabelSelectorAsSelector and labels.NewRequirement's validation)
# ================================================================================================

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _check_key(key: str) -> None:
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"invalid label key {key!r}: the prefix must be a DNS-1123 subdomain")
    if not name or len(name) > 63 or not _NAME.fullmatch(name):
        raise ValueError(f"invalid label key {key!r}: the name part must be 63 characters or less, alphanumeric, "
                         "'-', '_' or '.', starting and ending with an alphanumeric character")


def _check_value(value: str) -> None:
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        raise ValueError(f"invalid label value {value!r}")


def selector_matches_strict(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a decoded ``metav1.LabelSelector`` matches ``labels``, as LabelSelectorAsSelector then
    Matches: None matches nothing, an empty selector everything. Raises ValueError for a selector
    Kubernetes refuses (bad operator, key or value; In/NotIn without values, Exists with values)."""
    if selector is None:
        return False
    reqs: list[tuple[str, str, list[str]]] = [(k, "In", [v]) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        op = e.get("operator", "")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"{op!r} is not a valid label selector operator")
        reqs.append((e.get("key", ""), op, list(e.get("values") or [])))
    for key, op, values in reqs:
        _check_key(key)
        if op in ("In", "NotIn") and not values:
            raise ValueError(f"key {key!r}: for 'in', 'notin' operators, values set can't be empty")
        if op in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"key {key!r}: values set must be empty for exists and does not exist")
        for v in values:
            _check_value(v)
    for key, op, values in reqs:
        has = key in labels
        ok = {"In": has and labels.get(key) in values, "NotIn": not has or labels.get(key) not in values,
              "Exists": has, "DoesNotExist": not has}[op]
        if not ok:
            return False
    return True


# ================================================================================================
# the configuration (pkg/slo-controller/nodeslo/nodeslo_cm_event_handler.go, resource_strategy.go)
# ================================================================================================

def _default_threshold() -> dict:  # sloconfig.DefaultResourceThresholdStrategy
    return {"enable": False, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset",
            "memoryEvictThresholdPercent": 70, "cpuEvictPolicy": "evictByRealLimit"}


def _default_cpu_burst() -> dict:  # sloconfig.DefaultCPUBurstStrategy
    return {"policy": "none", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300, "cfsQuotaBurstPeriodSeconds": -1,
            "sharePoolThresholdPercent": 50}


#: key -> (NodeSLO spec field, strategy type, the default cluster strategy); nodeslo's DefaultSLOCfg,
#: whose QoS cluster strategy is empty (not sloconfig.DefaultResourceQOSStrategy)
_STRATEGY_KEYS: dict[str, tuple[str, _Struct, Callable[[], dict]]] = {
    RESOURCE_THRESHOLD_CONFIG_KEY: ("resourceUsedThresholdWithBE", RESOURCE_THRESHOLD_STRATEGY, _default_threshold),
    RESOURCE_QOS_CONFIG_KEY: ("resourceQOSStrategy", RESOURCE_QOS_STRATEGY, dict),
    CPU_BURST_CONFIG_KEY: ("cpuBurstStrategy", CPU_BURST_STRATEGY, _default_cpu_burst),
    SYSTEM_CONFIG_KEY: ("systemStrategy", SYSTEM_STRATEGY, lambda: {"totalNetworkBandwidth": "0"}),
}
#: key -> the ConfigMap entry's type (a table filled at import, read-only)
_CFG_TYPES: Mapping[str, _Struct] = MappingProxyType(
    {**{key: _strategy_cfg(t.name.removesuffix("Strategy"), t) for key, (_, t, _d) in _STRATEGY_KEYS.items()},
     HOST_APPLICATION_CONFIG_KEY: _HOST_APPLICATION_CFG})
#: the keys in the order Koordinator reads them
SLO_CONFIG_KEYS = (RESOURCE_THRESHOLD_CONFIG_KEY, RESOURCE_QOS_CONFIG_KEY, CPU_BURST_CONFIG_KEY, SYSTEM_CONFIG_KEY,
                   HOST_APPLICATION_CONFIG_KEY)


def _default_merged(key: str) -> dict:
    if key == HOST_APPLICATION_CONFIG_KEY:
        return {}
    return {"clusterStrategy": _STRATEGY_KEYS[key][2]()}


@attrs.frozen(hash=False)
class SLOConfig:
    """The merged configuration per key (Koordinator's ``SLOCfg``): for a strategy key ``{"clusterStrategy":
    merged cluster strategy, "nodeStrategies": [{"name", "nodeSelector", "strategy": merged}, ...]}``; for
    host-application-config ``{"applications": [...], "nodeConfigs": [...]}`` (decoded Go values)."""

    merged: Mapping[str, Any]


DEFAULT_SLO_CONFIG = SLOConfig({k: _default_merged(k) for k in SLO_CONFIG_KEYS})


def _parse_key(key: str, text: str) -> dict:
    """One key's merged configuration (calculate*CfgMerged); raises _DecodeError."""
    try:
        raw = _loads(text)
    except ValueError as e:
        raise _DecodeError("", f"not valid JSON: {e}") from None
    except RecursionError:
        raise _DecodeError("", "not valid JSON: nested too deeply") from None
    t = _CFG_TYPES[key]
    if key == HOST_APPLICATION_CONFIG_KEY:
        return _decode(t, raw, {}, "")
    _, strategy_t, default = _STRATEGY_KEYS[key]
    # resource-qos-config decodes over DefaultSLOCfg's (empty) cluster strategy, the others over nothing:
    # the same result, since the cluster strategy is merged over the default next
    start: dict[str, Any] = {"clusterStrategy": {}} if key == RESOURCE_QOS_CONFIG_KEY else {}
    cfg = _decode(t, raw, start, "")
    cluster = default()
    if cfg.get("clusterStrategy") is not None:
        cluster = _merge(strategy_t, cluster, cfg["clusterStrategy"])
    nodes = []
    for ns in cfg.get("nodeStrategies") or []:
        own = ns.get(_EMBEDDED)
        merged = _merge(strategy_t, cluster, own) if own is not None else copy.deepcopy(cluster)
        nodes.append({"name": ns.get("name", ""), "nodeSelector": ns.get("nodeSelector"), "strategy": merged})
    return {"clusterStrategy": cluster, "nodeStrategies": nodes}


def parse_slo_config(data: Mapping[str, str] | None, previous: SLOConfig = DEFAULT_SLO_CONFIG
                     ) -> tuple[SLOConfig, list[str]]:
    """The configuration from ``slo-controller-config``'s ``data`` (None: no ConfigMap, the defaults).

    Returns it and the problems found, one message each naming the key and the field: a key that does
    not decode keeps its value in ``previous`` (a missing key is its default); a node strategy whose
    ``nodeSelector`` does not parse matches no node."""
    if data is None:
        return DEFAULT_SLO_CONFIG, []
    out: dict[str, Any] = {}
    problems = []
    for key in SLO_CONFIG_KEYS:
        if key not in data:
            out[key] = _default_merged(key)
            continue
        text = data[key]
        try:
            if not isinstance(text, str):
                raise _DecodeError("", f"expected a string value, got {type(text).__name__}")
            out[key] = _parse_key(key, text)
        except _DecodeError as e:
            problems.append(f"{key}: {e} (the key keeps its previous value)")
            out[key] = previous.merged[key]
            continue
        entries = out[key].get("nodeStrategies" if key != HOST_APPLICATION_CONFIG_KEY else "nodeConfigs") or []
        for i, entry in enumerate(entries):
            try:
                selector_matches_strict(entry.get("nodeSelector"), {})
            except ValueError as e:
                which = "nodeConfigs" if key == HOST_APPLICATION_CONFIG_KEY else "nodeStrategies"
                problems.append(f"{key}: {which}[{i}].nodeSelector: {e} (this entry matches no node)")
    return SLOConfig(out), problems


def _pick(entries: list[dict], labels: Mapping[str, str]) -> dict | None:
    """The first entry whose nodeSelector matches (one that does not parse is skipped, as Koordinator
    does; parse_slo_config reports it)."""
    for entry in entries:
        try:
            if selector_matches_strict(entry.get("nodeSelector"), labels):
                return entry
        except ValueError:
            continue
    return None


def render_spec(config: SLOConfig, labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None = None,
                old_spec: Mapping[str, Any] | None = None) -> dict:
    """The NodeSLO ``spec`` of a node with these labels and annotations (NodeSLOReconciler.getNodeSLOSpec),
    as Koordinator's client writes it. ``old_spec`` (the NodeSLO's current spec) only carries
    ``extensions`` over (third-party extensions, which koordfw does not render)."""
    labels = labels or {}
    annotations = annotations or {}
    spec: dict[str, Any] = {}
    for key, (field, _t, _d) in _STRATEGY_KEYS.items():
        cfg = config.merged[key]
        picked = _pick(cfg.get("nodeStrategies") or [], labels)
        spec[field] = copy.deepcopy(picked["strategy"] if picked is not None else cfg["clusterStrategy"])
    bandwidth = annotations.get(ANNOTATION_NODE_BANDWIDTH)
    if bandwidth is not None:
        try:
            spec["systemStrategy"]["totalNetworkBandwidth"] = canonical_quantity(bandwidth)
        except ValueError as e:
            # getSystemConfigSpec returns an error and no strategy: the NodeSLO has no systemStrategy
            log.warning("node annotation is not a quantity; the NodeSLO gets no systemStrategy",
                        annotation=ANNOTATION_NODE_BANDWIDTH, value=bandwidth[:60], error=str(e))
            spec["systemStrategy"] = None
    host = config.merged[HOST_APPLICATION_CONFIG_KEY]
    picked = _pick(host.get("nodeConfigs") or [], labels)
    spec["hostApplications"] = copy.deepcopy((picked if picked is not None else host).get("applications") or [])
    out: dict[str, Any] = {}
    for field, t, _d in _STRATEGY_KEYS.values():
        if spec[field] is not None:
            out[field] = _marshal(t, spec[field])
    # ExtensionsMap{Object map[string]interface{} `json:",inline"`}: a named field, so encoding/json writes
    # it as "Object"; with no extension plugin registered the old one is kept, else an empty map
    old_ext = (old_spec or {}).get("extensions")
    old_obj = old_ext.get("Object") if isinstance(old_ext, dict) else None
    out["extensions"] = {"Object": copy.deepcopy(old_obj) if isinstance(old_obj, dict) else {}}
    apps = _marshal(_Slice(HOST_APPLICATION_SPEC), spec["hostApplications"])
    if apps:
        out["hostApplications"] = apps
    return out


#: resource.Quantity's pattern in CRD schemas (controller-gen's, from apimachinery's quantity format)
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
                    r"|(\.[0-9]+))))?$")


def _openapi(t: Any) -> dict:
    """The structural OpenAPI v3 schema of a Go type, as controller-gen writes it (without descriptions
    and range validations)."""
    if isinstance(t, _Ptr):
        return _openapi(t.elem)
    if isinstance(t, _Struct):
        return {"type": "object", "properties": {f.json: _openapi(f.type) for f in t.fields}}
    if isinstance(t, _Slice):
        return {"type": "array", "items": _openapi(t.elem)}
    if isinstance(t, _Map):
        return {"type": "object", "additionalProperties": _openapi(t.elem)}
    if isinstance(t, _Int):
        return {"type": "integer", "format": f"int{t.bits}"}
    if t.kind in ("bool", "string"):
        return {"type": "boolean" if t.kind == "bool" else "string"}
    out: dict[str, Any] = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    if t.kind == "quantity":
        out["pattern"] = QUANTITY_PATTERN
    out["x-kubernetes-int-or-string"] = True
    return out


def nodeslo_spec_schema() -> dict:
    """The OpenAPI schema of ``NodeSLO.spec`` as koordfw writes it (every field Koordinator's NodeSLOSpec
    has; ``extensions`` free-form); deploy/00-crd-nodeslo.yaml carries it."""
    props = {field: _openapi(t) for field, t, _d in _STRATEGY_KEYS.values()}
    props["extensions"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props["hostApplications"] = _openapi(_Slice(HOST_APPLICATION_SPEC))
    return {"type": "object", "properties": props}


def render_nodeslo_spec(data: Mapping[str, str] | None, labels: Mapping[str, str] | None,
                        annotations: Mapping[str, str] | None = None) -> dict:
    """``render_spec(parse_slo_config(data)[0], labels, annotations)``: the spec from scratch."""
    return render_spec(parse_slo_config(data)[0], labels, annotations)


# ================================================================================================
# the controller
# ================================================================================================

class _Context(Protocol):
    """What the controller uses of the manager's ``ManagerContext``."""

    client: KubeClient
    reflectors: dict[str, Reflector]
    slo_config: dict[str, str] | None
    status: dict[str, dict[str, Any]]

    def add_listener(self, fn: Callable[[str, str, dict, dict | None], None]) -> None: ...

    def check_leading(self, what: str) -> None: ...


def _meta(obj: Mapping[str, Any] | None) -> dict:
    m = (obj or {}).get("metadata")
    return m if isinstance(m, dict) else {}


def _inputs(node: Mapping[str, Any] | None) -> tuple[Any, Any]:
    m = _meta(node)
    return m.get("labels") or {}, (m.get("annotations") or {}).get(ANNOTATION_NODE_BANDWIDTH)


def _leaves(eg: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for e in eg.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


class NodeSLOController:
    """A manager controller (leader only): one NodeSLO per node, from ``slo-controller-config``.

    Reconciles a node when it is added or deleted, when its labels or its
    ``node.koordinator.sh/network-bandwidth`` annotation change, when its NodeSLO is created, deleted or
    edited (the spec is put back), and every node when the rendered configuration changes. A failed
    write is retried with exponential backoff (``initial_backoff`` doubling up to ``max_backoff``)."""

    name = "nodeslo"
    leader_only = True

    def __init__(self, *, initial_backoff: float = 0.1, max_backoff: float = 30.0, watch_timeout: int = 300,
                 probe_interval: float = 60.0) -> None:
        """``probe_interval``: while the NodeSLO CRD is not served, how often its LIST is retried."""
        self.initial_backoff, self.max_backoff, self.watch_timeout = initial_backoff, max_backoff, watch_timeout
        self.probe_interval = probe_interval
        self.config = DEFAULT_SLO_CONFIG
        #: the last ConfigMap data parsed (None: no ConfigMap)
        self._data: dict[str, str] | None = None
        self._loaded = False
        self.problems: list[str] = []
        self._dirty: dict[str, None] = {}
        self._wake = anyio.Event()
        self._failures: dict[str, int] = {}
        self.created = self.updated = self.deleted = self.errors = 0
        self.reconciles = self.unchanged = self.config_errors = 0
        self.reflector: Reflector | None = None
        self._ctx: _Context | None = None
        #: the cached nodes and NodeSLOs by name (the reflectors' stores are keyed by uid)
        self._nodes: dict[str, dict] = {}
        self._slos: dict[str, dict] = {}

    # -- inputs -------------------------------------------------------------------------------------
    @staticmethod
    def _index(by_name: dict[str, dict], etype: str, obj: dict) -> str:
        """Keep a name -> object index in step with a reflector's events; returns the name."""
        meta = _meta(obj)
        name = meta.get("name", "")
        if etype == "DELETED":
            cur = by_name.get(name)
            if cur is not None and _meta(cur).get("uid") == meta.get("uid"):
                del by_name[name]
        else:
            by_name[name] = obj
        return name

    def _mark(self, name: str) -> None:
        if name:
            self._dirty[name] = None
            self._wake.set()

    def _mark_all(self) -> None:
        for name in sorted(set(self._nodes) | set(self._slos)):
            self._mark(name)

    def reload_config(self, data: Mapping[str, str] | None) -> bool:
        """Parse the ConfigMap's data (None: no ConfigMap); returns whether the configuration changed.
        Logs one warning per problem (see :func:`parse_slo_config`)."""
        new_data = dict(data) if data is not None else None
        if self._loaded and new_data == self._data:
            return False
        self._loaded, self._data = True, new_data
        config, self.problems = parse_slo_config(new_data, self.config)
        self.config_errors += len(self.problems)
        for p in self.problems:
            log.warning(f"{SLO_CTRL_CONFIG_MAP}: configuration problem", problem=p)
        changed = config != self.config
        self.config = config
        return changed

    def _on_event(self, kind: str, etype: str, obj: dict, old: dict | None) -> None:
        if kind == "Node":
            name = self._index(self._nodes, etype, obj)
            if etype == "MODIFIED" and old is not None and _inputs(old) == _inputs(obj):
                return
            self._mark(name)
        elif kind == "ConfigMap":
            assert self._ctx is not None
            if self.reload_config(self._ctx.slo_config):
                self._mark_all()
            self._update_status(self._ctx.status.setdefault(self.name, {}))

    async def _on_nodeslo(self, etype: str, obj: dict, old: dict | None) -> None:
        name = self._index(self._slos, etype, obj)
        if etype == "MODIFIED" and old is not None and old.get("spec") == obj.get("spec"):
            return  # GenerationChangedPredicate: status or metadata only
        self._mark(name)

    # -- running ------------------------------------------------------------------------------------
    async def run(self, ctx: _Context) -> None:
        self._ctx = ctx
        status = ctx.status.setdefault(self.name, {})
        self.reflector = Reflector(ctx.client, NODESLOS, self._on_nodeslo, name="NodeSLO", optional=True,
                                   watch_timeout=self.watch_timeout, probe_interval=self.probe_interval)
        self.reload_config(ctx.slo_config)
        self._nodes = {}
        for n in ctx.reflectors["Node"].store.values():
            self._index(self._nodes, "ADDED", n)
        ctx.add_listener(self._on_event)
        try:
            await self._run(ctx, status)
        except BaseExceptionGroup as eg:
            # the manager reads the cause (NotLeading: leadership lost) from the exception itself
            leaves = _leaves(eg)
            if len(leaves) == 1:
                raise leaves[0] from None
            raise

    async def _run(self, ctx: _Context, status: dict[str, Any]) -> None:
        assert self.reflector is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.reflector.run)
            await self.reflector.synced.wait()
            served = True
            self._mark_all()
            while True:
                if not self.reflector.available:
                    # the CRD is not served (the reflector re-probes it): nothing can be written until it is
                    if served:
                        log.error("the NodeSLO CRD is not served (deploy/00-crd-nodeslo.yaml): no NodeSLOs are "
                                  "written until it is", every=self.probe_interval)
                        status["error"] = "NodeSLO CRD not installed"
                        served = False
                    self._update_status(status)
                    await anyio.sleep(min(1.0, self.probe_interval))
                    continue
                if not served:
                    log.info("the NodeSLO CRD is served: writing NodeSLOs")
                    status.pop("error", None)
                    served = True
                    self._mark_all()
                self._update_status(status)
                await self._wake.wait()
                self._wake = anyio.Event()
                batch, self._dirty = list(self._dirty), {}
                for i, name in enumerate(batch):
                    if not self.reflector.available:
                        for rest in batch[i:]:
                            self._dirty[rest] = None  # for when the CRD is back
                        break
                    await self._reconcile_one(tg, name)

    def _update_status(self, status: dict[str, Any]) -> None:
        # the keys the manager's /healthz shows per controller (as the node-resources controller's)
        status.update(reconciles=self.reconciles, writes=self.created + self.updated + self.deleted,
                      created=self.created, updated=self.updated, deleted=self.deleted, unchanged=self.unchanged,
                      errors=self.errors, configErrors=self.config_errors, configProblems=list(self.problems))

    async def _reconcile_one(self, tg: TaskGroup, name: str) -> None:
        try:
            await self.reconcile(name)
            self._failures.pop(name, None)
        except ApiError as e:
            n = self._failures.get(name, 0)
            self._failures[name] = n + 1
            delay = min(self.initial_backoff * 2**n, self.max_backoff)
            if e.status == 409:  # AlreadyExists or a stale resourceVersion: the cache is behind the server
                log.info("NodeSLO changed meanwhile; retrying from the cache", node=name, error=str(e))
            else:
                self.errors += 1
                log.warning("NodeSLO write failed; retrying", node=name, error=str(e), seconds=round(delay, 2))
            tg.start_soon(self._retry_later, name, delay)

    async def _retry_later(self, name: str, delay: float) -> None:
        await anyio.sleep(delay)
        self._mark(name)

    async def reconcile(self, name: str) -> str:
        """Bring the NodeSLO ``name`` in line with the node of that name; returns what was done
        (``created``, ``updated``, ``deleted``, ``unchanged`` or ``none``)."""
        assert self._ctx is not None
        ctx = self._ctx
        self.reconciles += 1
        node, slo = self._nodes.get(name), self._slos.get(name)
        if node is None and slo is None:
            return "none"
        if node is None:
            assert slo is not None
            ctx.check_leading(f"deleting NodeSLO {name}")
            try:
                await ctx.client.request("DELETE", f"{NODESLOS}/{name}",
                                         body={"preconditions": {"uid": _meta(slo).get("uid")}})
            except ApiError as e:
                if e.status != 404:
                    raise
            self.deleted += 1
            log.info("NodeSLO deleted", node=name)
            return "deleted"
        labels, _ = _inputs(node)
        annotations = _meta(node).get("annotations") or {}
        if slo is None:
            spec = render_spec(self.config, labels, annotations)
            ctx.check_leading(f"creating NodeSLO {name}")
            await ctx.client.request("POST", NODESLOS, body={
                "apiVersion": SLO_GROUP_VERSION, "kind": "NodeSLO", "metadata": {"name": name}, "spec": spec})
            self.created += 1
            log.info("NodeSLO created", node=name)
            return "created"
        spec = render_spec(self.config, labels, annotations, slo.get("spec"))
        if slo.get("spec") == spec:
            self.unchanged += 1
            return "unchanged"
        new = copy.deepcopy(slo)
        new["spec"] = spec
        new.pop("status", None)
        ctx.check_leading(f"updating NodeSLO {name}")
        await ctx.client.request("PUT", f"{NODESLOS}/{name}", body=new)
        self.updated += 1
        log.info("NodeSLO updated", node=name)
        return "updated"
