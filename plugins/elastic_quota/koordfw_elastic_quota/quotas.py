"""Quota objects, their validation, the pod → quota mapping, and the runtime of the whole tree.

An :class:`ElasticQuota` is parsed from a ``scheduling.sigs.k8s.io/v1alpha1`` ElasticQuota with
Koordinator's labels and annotations. :func:`build_quotas` validates a set of objects: an invalid
one (min > max, negative quantity, unknown or invalid parent, a cycle of parents, bad shared weight)
is kept aside with a message naming it, and the others work without it. :class:`QuotaTree` holds
per-quota request/used (from pods) and computes every runtime top-down, level by level
(``RefreshRuntime``: scale the mins, redistribute the parent's runtime, recurse).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koordfw import QuantityError, canonical, parse_quantity
from koordfw.extension import LABEL_QUOTA_PREEMPTIBLE
from koordfw.inputs import loads_json

from .runtime import Child, redistribute, scale_mins

GROUP = "quota.scheduling.koordinator.sh"
LABEL_PARENT = f"{GROUP}/parent"
LABEL_IS_PARENT = f"{GROUP}/is-parent"
LABEL_ALLOW_LENT = f"{GROUP}/allow-lent-resource"
LABEL_TREE_ID = f"{GROUP}/tree-id"
LABEL_QUOTA_NAME = f"{GROUP}/name"
LABEL_PREEMPTIBLE = LABEL_QUOTA_PREEMPTIBLE
ANNOTATION_SHARED_WEIGHT = f"{GROUP}/shared-weight"
ANNOTATION_NAMESPACES = f"{GROUP}/namespaces"

ROOT = "koordinator-root-quota"
SYSTEM = "koordinator-system-quota"
DEFAULT = "koordinator-default-quota"
SPECIAL = (ROOT, SYSTEM, DEFAULT)

Resources = dict[str, int]


def _canonical_list(raw: Any, where: str) -> Resources:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a mapping of resources, got {type(raw).__name__}")
    out: Resources = {}
    for k, v in raw.items():
        try:
            q = parse_quantity(v)
            if q < 0:
                raise ValueError(f"negative quantity {v!r}")
            out[str(k)] = canonical(str(k), v)
        except (QuantityError, ValueError) as e:
            raise ValueError(f"{where}.{k}: {e}") from None
    return out


@attrs.define
class ElasticQuota:
    """One quota as the plugin sees it (canonical ints: cpu in milli)."""

    name: str
    namespace: str = ""
    parent: str = ROOT
    is_parent: bool = False
    allow_lent: bool = True
    tree_id: str = ""
    min: Resources = attrs.field(factory=dict)
    max: Resources = attrs.field(factory=dict)
    #: None means "default: max"
    shared_weight: Resources | None = None
    namespaces: tuple[str, ...] = ()
    error: str = ""

    @property
    def weight(self) -> Resources:
        return self.max if self.shared_weight is None else self.shared_weight


def parse_quota(obj: Mapping[str, Any]) -> ElasticQuota:
    """Parse one ElasticQuota object; raises ValueError with a message naming the quota and field."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    ns = str(meta.get("namespace") or "")
    ident = f"ElasticQuota {ns + '/' if ns else ''}{name}"
    try:
        labels = meta.get("labels") or {}
        anns = meta.get("annotations") or {}
        spec = obj.get("spec") or {}
        if not isinstance(labels, Mapping) or not isinstance(anns, Mapping) or not isinstance(spec, Mapping):
            raise ValueError("metadata.labels, metadata.annotations and spec must be mappings")
        q = ElasticQuota(
            name=name, namespace=ns,
            parent=str(labels.get(LABEL_PARENT) or ROOT),
            is_parent=str(labels.get(LABEL_IS_PARENT, "")).lower() == "true",
            # Koordinator: anything except "false" allows lending
            allow_lent=str(labels.get(LABEL_ALLOW_LENT, "true")).lower() != "false",
            tree_id=str(labels.get(LABEL_TREE_ID) or ""),
            min=_canonical_list(spec.get("min"), "spec.min"),
            max=_canonical_list(spec.get("max"), "spec.max"),
        )
        raw_w = anns.get(ANNOTATION_SHARED_WEIGHT)
        if raw_w not in (None, ""):
            try:
                parsed = loads_json(raw_w) if isinstance(raw_w, str) else raw_w
            except ValueError as e:
                raise ValueError(f"annotation {ANNOTATION_SHARED_WEIGHT}: {e}") from None
            q.shared_weight = _canonical_list(parsed, f"annotation {ANNOTATION_SHARED_WEIGHT}")
        raw_ns = anns.get(ANNOTATION_NAMESPACES)
        if raw_ns not in (None, ""):
            try:
                nss = loads_json(raw_ns) if isinstance(raw_ns, str) else raw_ns
            except ValueError as e:
                raise ValueError(f"annotation {ANNOTATION_NAMESPACES}: {e}") from None
            if not isinstance(nss, list) or not all(isinstance(x, str) for x in nss):
                raise ValueError(f"annotation {ANNOTATION_NAMESPACES}: expected a JSON list of namespace names")
            q.namespaces = tuple(nss)
        over = sorted(r for r in q.min if r in q.max and q.min[r] > q.max[r])
        if over:
            raise ValueError("min > max for " + ", ".join(
                f"{r} (min {fmt(r, q.min[r])} > max {fmt(r, q.max[r])})" for r in over))
        return q
    except ValueError as e:
        raise ValueError(f"{ident}: {e}") from None


def fmt(resource: str, amount: int) -> str:
    from koordfw import format_quantity

    return format_quantity(resource, amount) if amount >= 0 else "-" + format_quantity(resource, -amount)


def fmt_map(res: Mapping[str, int]) -> dict[str, str]:
    return {k: fmt(k, v) for k, v in sorted(res.items())}


def build_quotas(objects: Iterable[Mapping[str, Any]]) -> tuple[dict[str, ElasticQuota], dict[str, ElasticQuota]]:
    """(valid, invalid) quotas by name. Invalid ones carry ``error``; children of an invalid or unknown
    parent and members of a parent cycle are invalid too."""
    valid: dict[str, ElasticQuota] = {}
    invalid: dict[str, ElasticQuota] = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        try:
            q = parse_quota(obj)
        except ValueError as e:
            invalid[name] = ElasticQuota(name=name, namespace=str(meta.get("namespace") or ""), error=str(e))
            continue
        if name in valid:
            other = valid.pop(name)
            msg = (f"ElasticQuota {name}: defined twice (namespaces {other.namespace or '-'} and "
                   f"{q.namespace or '-'}); quota names must be unique")
            invalid[name] = attrs.evolve(q, error=msg)
            continue
        if name in invalid:
            continue
        valid[name] = q
    # parents: unknown, invalid, not a parent, cycles
    changed = True
    while changed:
        changed = False
        for name in sorted(valid):
            q = valid[name]
            if name == ROOT or q.parent == ROOT:
                continue
            err = ""
            if q.parent == name:
                err = f"ElasticQuota {name}: a quota cannot be its own parent"
            elif q.parent in invalid:
                err = f"ElasticQuota {name}: parent {q.parent!r} is invalid ({invalid[q.parent].error})"
            elif q.parent not in valid:
                err = f"ElasticQuota {name}: unknown parent quota {q.parent!r}"
            elif not valid[q.parent].is_parent:
                err = (f"ElasticQuota {name}: parent quota {q.parent!r} is not a parent "
                       f"(it lacks the label {LABEL_IS_PARENT}: \"true\")")
            else:
                seen = [name]
                cur = q.parent
                while cur != ROOT and cur in valid and cur not in seen:
                    seen.append(cur)
                    cur = valid[cur].parent
                if cur in seen:
                    cycle = seen[seen.index(cur):] + [cur]
                    err = f"ElasticQuota {name}: cycle of parents {' -> '.join(cycle)}"
            if err:
                invalid[name] = attrs.evolve(q, error=err)
                del valid[name]
                changed = True
    return valid, invalid


@attrs.define
class QuotaState:
    """A quota's live figures. ``request`` is what the parent sees of it (limited, lent-adjusted)."""

    quota: ElasticQuota
    children: list[str] = attrs.field(factory=list)
    pod_request: Resources = attrs.field(factory=dict)  # Σ requests of its own pods (pending + bound)
    request: Resources = attrs.field(factory=dict)  # own pods + children, before the max cap
    limited: Resources = attrs.field(factory=dict)  # what the parent sees
    used: Resources = attrs.field(factory=dict)  # Σ requests of its bound/assumed pods
    non_preemptible_used: Resources = attrs.field(factory=dict)
    auto_min: Resources = attrs.field(factory=dict)
    runtime: Resources = attrs.field(factory=dict)


def _add(into: dict[str, int], other: Mapping[str, int], sign: int = 1) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + sign * v


class QuotaTree:
    """The valid quotas (plus the special ones) and their computed runtimes."""

    def __init__(self, valid: Mapping[str, ElasticQuota], invalid: Mapping[str, ElasticQuota], *,
                 default_max: Resources | None = None, system_max: Resources | None = None,
                 enable_min_scale: bool = True, guarantee_usage: bool = False) -> None:
        self.invalid = dict(invalid)
        self.enable_min_scale, self.guarantee_usage = enable_min_scale, guarantee_usage
        quotas = dict(valid)
        quotas.pop(ROOT, None)  # the root is implicit: its total is the cluster
        for special, mx in ((SYSTEM, system_max), (DEFAULT, default_max)):
            if special not in quotas:
                quotas[special] = ElasticQuota(name=special, max=dict(mx or {}))
        self.states: dict[str, QuotaState] = {n: QuotaState(q) for n, q in quotas.items()}
        self.top: list[str] = []
        for name in sorted(self.states):
            parent = self.states[name].quota.parent
            if name in (SYSTEM, DEFAULT):
                continue
            if parent == ROOT:
                self.top.append(name)
            else:
                self.states[parent].children.append(name)
        #: namespace → quota name, as Koordinator resolves a pod without the quota label
        self.by_namespace: dict[str, str] = {}
        for name in sorted(self.states):
            for ns in self.states[name].quota.namespaces:
                self.by_namespace.setdefault(ns, name)
        for name in sorted(self.states, key=lambda n: (self.states[n].quota.is_parent, n)):
            ns = self.states[name].quota.namespace
            if ns and name not in SPECIAL:
                self.by_namespace.setdefault(ns, name)
        self.total: Resources = {}

    # -- pods ------------------------------------------------------------------------------------
    def quota_name_of(self, labels: Mapping[str, str], namespace: str) -> str:
        """The pod's quota: its label, else its namespace's quota, else the default quota. A label that
        names an invalid quota keeps that name (so that admission can say why)."""
        name = labels.get(LABEL_QUOTA_NAME)
        if name:
            if name in self.states or name in self.invalid:
                return name
            return DEFAULT
        return self.by_namespace.get(namespace, DEFAULT)

    def reset_usage(self) -> None:
        for st in self.states.values():
            st.pod_request, st.used, st.non_preemptible_used = {}, {}, {}

    def add_pod(self, quota: str, request: Mapping[str, int], assigned: bool, preemptible: bool) -> None:
        st = self.states.get(quota)
        if st is None:
            return
        _add(st.pod_request, request)
        if assigned:
            _add(st.used, request)
            if not preemptible:
                _add(st.non_preemptible_used, request)

    def aggregate_used(self) -> None:
        """A parent's used is its own pods' plus its descendants' (Koordinator propagates pod usage up)."""

        def rec(n: str) -> tuple[Resources, Resources]:
            st = self.states[n]
            for c in st.children:
                u, npu = rec(c)
                _add(st.used, u)
                _add(st.non_preemptible_used, npu)
            return st.used, st.non_preemptible_used

        for n in self.top:
            rec(n)

    # -- runtime ---------------------------------------------------------------------------------
    def _limited(self, name: str) -> Resources:
        """Request aggregation bottom-up: ``min(request, max)``, and ``max(that, min)`` when not lent."""
        st = self.states[name]
        req = dict(st.pod_request)
        for c in st.children:
            _add(req, self._limited(c))
        st.request = req
        q = st.quota
        lim = {r: (min(v, q.max[r]) if r in q.max else v) for r, v in req.items()}
        if not q.allow_lent:
            for r, m in q.min.items():
                lim[r] = max(lim.get(r, 0), m)
        st.limited = lim
        return lim

    def compute(self, cluster_total: Mapping[str, int]) -> None:
        """Every quota's runtime from the cluster total (call after the pods were added)."""
        for name in [*self.top, SYSTEM, DEFAULT]:
            self._limited(name)
        for special in (SYSTEM, DEFAULT):
            st = self.states[special]
            st.runtime = dict(st.quota.max)
            st.auto_min = dict(st.quota.min)
        total = dict(cluster_total)
        # the root level shares the cluster minus what the system and default quotas use
        for special in (SYSTEM, DEFAULT):
            for r, v in self.states[special].used.items():
                total[r] = total.get(r, 0) - v
        self.total = total
        self._level(self.top, total)

    def _level(self, names: list[str], total: Mapping[str, int]) -> None:
        if not names:
            return
        dims = set(total)
        for n in names:
            q = self.states[n].quota
            dims |= set(q.max) | set(q.min) | set(self.states[n].limited)
        for n in names:
            self.states[n].runtime, self.states[n].auto_min = {}, {}
        for r in sorted(dims):
            t = total.get(r, 0)
            mins = {n: self.states[n].quota.min.get(r, 0) for n in names}
            if self.enable_min_scale:
                mins = scale_mins(t, mins, {n: True for n in names})
            kids = []
            for n in names:
                st = self.states[n]
                q = st.quota
                m = mins[n]
                guarantee = max(st.used.get(r, 0), m) if self.guarantee_usage else 0
                kids.append(Child(n, st.limited.get(r, 0), m, guarantee, q.weight.get(r, 0), q.allow_lent))
                st.auto_min[r] = m
            for n, v in redistribute(t, kids).items():
                self.states[n].runtime[r] = v
        for n in names:
            self._level(self.states[n].children, self.states[n].runtime)

    def ancestors(self, name: str) -> list[str]:
        out = []
        cur = self.states[name].quota.parent if name in self.states else ROOT
        while cur != ROOT and cur in self.states:
            out.append(cur)
            cur = self.states[cur].quota.parent
        return out

    def walk(self) -> list[str]:
        """Quota names in tree order (depth first, by name), then system and default."""
        out: list[str] = []

        def rec(n: str) -> None:
            out.append(n)
            for c in sorted(self.states[n].children):
                rec(c)

        for n in self.top:
            rec(n)
        return out + [SYSTEM, DEFAULT]
