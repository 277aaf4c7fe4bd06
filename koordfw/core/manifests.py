"""Loading Kubernetes manifests: YAML or JSON files, multi-document, ``List`` kinds, whole directories.

Pods and Nodes are parsed into the model; workloads (Deployment, ReplicaSet, StatefulSet, Job, CronJob,
DaemonSet) are checked and expanded into the pods their controllers create (:mod:`.workloads`), once every
file is loaded; every other kind (NodeMetric, Device, PodGroup,
ElasticQuota, NodeResourceTopology, PodDisruptionBudget, ...) is kept as a dict for plugins to read.
Errors name the file, the object and the field.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from .admission import ADMISSION_KINDS, check_object
from .cluster import CLUSTER_SCOPED_KINDS, ClusterState, object_key
from .errors import ManifestError
from .model import Node, Pod, node_from_manifest, object_name, object_namespace, parse_time, pod_from_manifest
from .quantity import QuantityError, canonical
from .safeload import InputError, load_yaml_all, loads_json, read_text
from .storage import STORAGE_KINDS, check_storage_object
from .workloads import MAX_WORKLOAD_PODS, WORKLOAD_KINDS, Workload, expand_workload, parse_workload

SUFFIXES = (".yaml", ".yml", ".json")


# -- readers for plugins that parse other objects (NodeMetric, Device, ...) ---------------------------

def field_mapping(raw: Any, obj: str, field: str) -> Mapping[str, Any]:
    """A mapping field of an object (``None`` → ``{}``); anything else raises ManifestError."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ManifestError("expected a mapping", obj=obj, field=field)
    return raw


def field_list(raw: Any, obj: str, field: str) -> list:
    """A list field of an object (``None`` → ``[]``); anything else raises ManifestError."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ManifestError("expected a list", obj=obj, field=field)
    return raw


def resource_map(raw: Any, obj: str, field: str, only: tuple[str, ...] | None = None) -> dict[str, int]:
    """A ResourceList field → canonical ints (cpu milli, others units), optionally only some resources;
    a bad quantity raises ManifestError naming ``field.<resource>``."""
    out: dict[str, int] = {}
    for r, v in field_mapping(raw, obj=obj, field=field).items():
        r = str(r)
        if v is None or (only is not None and r not in only):
            continue
        try:
            amount = canonical(r, v)
        except QuantityError as e:
            raise ManifestError(str(e), obj=obj, field=f"{field}.{r}") from None
        if amount < 0:
            raise ManifestError(f"invalid quantity {v!r}: must be greater than or equal to 0", obj=obj,
                                field=f"{field}.{r}")
        out[r] = amount
    return out


@attrs.frozen
class PodMetric:
    """One ``status.podsMetric[]`` entry of a NodeMetric (usage as canonical ints)."""

    namespace: str
    name: str
    usage: Mapping[str, int]
    #: ``priority`` when the agent reported it (koord-prod, koord-batch, ...), else ""
    priority: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen
class NodeMetricStatus:
    """What every reader of a Koordinator ``NodeMetric`` needs; ``status`` and ``node_metric`` are the
    raw mappings for the parts a plugin reads on its own (``ctx`` names the object in errors)."""

    name: str
    ctx: str
    update_time: float | None
    #: ``status.nodeMetric.nodeUsage.resources`` ({} when the agent reported none)
    node_usage: Mapping[str, int]
    system_usage: Mapping[str, int]
    pods: tuple[PodMetric, ...]
    status: Mapping[str, Any]
    node_metric: Mapping[str, Any]


def node_metric_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(name, ``"NodeMetric <name>"``) of a NodeMetric object, for error messages."""
    meta = field_mapping(obj.get("metadata"), "NodeMetric ?", "metadata")
    name = meta.get("name", "?")
    name = name if isinstance(name, str) else "?"
    return name, f"NodeMetric {name}"


def read_node_metric(obj: Mapping[str, Any], only: tuple[str, ...] | None = None) -> NodeMetricStatus:
    """The update time, node and system usage and per-pod usage of a NodeMetric (resources limited to
    ``only`` when given); a malformed field raises ManifestError naming the object and the field."""
    name, ctx = node_metric_name(obj)
    status = field_mapping(obj.get("status"), ctx, "status")
    update = parse_time(status.get("updateTime"), obj=ctx, field="status.updateTime")
    nm = field_mapping(status.get("nodeMetric"), ctx, "status.nodeMetric")
    usage = {}
    for part in ("nodeUsage", "systemUsage"):
        raw = field_mapping(nm.get(part), ctx, f"status.nodeMetric.{part}")
        usage[part] = resource_map(raw.get("resources"), ctx, f"status.nodeMetric.{part}.resources", only)
    pods = []
    # field_mapping only for what is not a mapping already (None → {}, else the error naming the field)
    for i, pm in enumerate(field_list(status.get("podsMetric"), ctx, "status.podsMetric")):
        if not isinstance(pm, Mapping):
            pm = field_mapping(pm, ctx, f"status.podsMetric[{i}]")
        pod = pm.get("name")
        if not pod or not isinstance(pod, str):
            raise ManifestError("a pod metric needs a name (a string)", obj=ctx, field=f"status.podsMetric[{i}].name")
        raw = pm.get("podUsage")
        if not isinstance(raw, Mapping):
            raw = field_mapping(raw, ctx, f"status.podsMetric[{i}].podUsage")
        pods.append(PodMetric(str(pm.get("namespace") or "default"), str(pod),
                              resource_map(raw.get("resources"), ctx, f"status.podsMetric[{i}].podUsage.resources", only),
                              str(pm.get("priority") or "")))
    return NodeMetricStatus(name, ctx, update, usage["nodeUsage"], usage["systemUsage"], tuple(pods), status, nm)


@attrs.define
class Manifests:
    nodes: list[Node] = attrs.field(factory=list)
    pods: list[Pod] = attrs.field(factory=list)
    objects: list[tuple[str, dict]] = attrs.field(factory=list)  # (kind, object)
    files: list[str] = attrs.field(factory=list)

    #: (kind, key) → the file each object came from, for errors about duplicates
    sources: dict[tuple[str, str], str] = attrs.field(factory=dict)
    #: the input's workloads, in input order (expanded into ``pods`` by :meth:`expand_workloads`)
    workloads: list[Workload] = attrs.field(factory=list)
    #: ``namespace/name`` of each pod a workload owns (created or adopted) → the workload (``Deployment ns/web``)
    owners: dict[str, str] = attrs.field(factory=dict)
    #: workload → a line about its expansion (a Job's completions, the nodes a DaemonSet runs on, ...)
    notes: dict[str, str] = attrs.field(factory=dict)
    #: the workloads already expanded (``Kind ns/name``)
    expanded: set[str] = attrs.field(factory=set)

    def expand_workloads(self) -> None:
        """Create the pods (and ReplicaSets, Jobs, claims) of every workload not expanded yet, as their
        controllers would in a cluster holding this input's nodes, pods and objects (pods that name a
        workload as their controller are adopted, not created again). Idempotent."""
        todo = [w for w in self.workloads if w.ref not in self.expanded]
        if not todo:
            return
        objects = {(kind, object_key(kind, obj.get("metadata") or {})): obj for kind, obj in self.objects}
        taken = {p.key for p in self.pods}
        now = self.newest_timestamp()
        made = len(self.owners)
        for w in todo:  # all counted first: refused before any is created
            made += len(self.nodes) if w.replicas < 0 else w.replicas
            if made > MAX_WORKLOAD_PODS:
                raise ManifestError(f"the input's workloads would create more than {MAX_WORKLOAD_PODS} pods "
                                    "(Kubernetes' tested limit of pods per cluster)", file=w.file, obj=w.ref,
                                    field=w.count_field)
        for w in todo:
            self.expanded.add(w.ref)
            got = expand_workload(w, nodes=self.nodes, pods=self.pods, objects=objects, taken=taken, now=now)
            for kind, obj in got.objects:
                key = object_key(kind, obj["metadata"])
                _record(self, kind, key, w.file or "<input>", f"{kind} {key} (of {w.ref})")
                objects[(kind, key)] = obj
                self.objects.append((kind, obj))
            for pod in got.pods:
                _record(self, "Pod", pod.key, w.file or "<input>", f"Pod {pod.key} (of {w.ref})")
                _record(self, "Pod uid", pod.uid, w.file or "<input>", f"Pod {pod.key} (metadata.uid {pod.uid})")
                self.pods.append(pod)
            self.notes[w.ref] = got.note
        self._own()

    def _own(self) -> None:
        """Map every pod to the workload at the top of its controller chain (Pod → ReplicaSet → Deployment)."""
        refs = {w.ref for w in self.workloads}
        parent: dict[str, str] = {}  # "Kind ns/name" → its controller's "Kind ns/name"
        for kind, obj in self.objects:
            meta = obj.get("metadata") or {}
            for r in meta.get("ownerReferences") or []:
                if isinstance(r, dict) and r.get("controller"):
                    ns = meta.get("namespace") or "default"
                    parent[f"{kind} {ns}/{meta.get('name')}"] = f"{r.get('kind')} {ns}/{r.get('name')}"
        for p in self.pods:
            if p.controller is None:
                continue
            chain = [f"{p.controller.kind} {p.namespace}/{p.controller.name}"]
            while chain[-1] in parent and parent[chain[-1]] not in chain:
                chain.append(parent[chain[-1]])
            top = next((r for r in reversed(chain) if r in refs), None)
            if top is not None:
                self.owners[p.key] = top

    def workload_summary(self) -> list[tuple[str, str]]:
        """(``Kind ns/name``, note) of each workload, in input order."""
        return [(w.ref, self.notes.get(w.ref, w.note)) for w in self.workloads]

    def workload_rows(self, pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The ``workloads`` section of a simulation: one row per workload in input order, its pods bound of
        all, pending with their reasons (reason → count), refused by admission, and its note; ``pods`` are the
        rows of the simulation's ``pods`` section."""
        rows: dict[str, dict[str, Any]] = {}
        for ref, note in self.workload_summary():
            kind, _, key = ref.partition(" ")
            ns, _, name = key.partition("/")
            rows[ref] = {"kind": kind, "namespace": ns, "name": name, "pods": 0, "bound": 0, "pending": 0,
                         "rejected": 0, "reasons": {}, "note": note}
        waiting: dict[str, str] = {}  # StatefulSet → its first pod not bound
        later: set[str] = set()  # StatefulSets with pods after that one
        for p in pods:
            ref = self.owners.get(f"{p['namespace']}/{p['name']}", "")
            row = rows.get(ref)
            if row is None:
                continue
            if ref in waiting:
                later.add(ref)
            elif ref.startswith("StatefulSet ") and p.get("phase") != "Bound":
                waiting[ref] = p["name"]
            row["pods"] += 1
            phase = p.get("phase")
            if phase == "Bound":
                row["bound"] += 1
            else:
                row["rejected" if phase == "Rejected" else "pending"] += 1
                reason = str(p.get("reason") or "no reason recorded")
                row["reasons"][reason] = row["reasons"].get(reason, 0) + 1
        for w in self.workloads:
            first = waiting.get(w.ref)
            if first is not None and w.ref in later and (w.spec.get("podManagementPolicy") or "OrderedReady") == "OrderedReady":
                row = rows[w.ref]
                row["note"] = "; ".join(x for x in (row["note"], f"OrderedReady: the pods after {first} would not "
                                                    f"be created until it runs (simulate creates them all)") if x)
        return list(rows.values())

    def warnings(self) -> list[str]:
        """Lines about input ``simulate`` does not model: one naming every kind no pods are made from and
        no built-in reads (kept as objects for plugins that read them), with counts."""
        counts: dict[str, int] = {}
        for kind, _ in self.objects:
            if kind not in MODELLED_KINDS:
                counts[kind] = counts.get(kind, 0) + 1
        if not counts:
            return []
        kinds = ", ".join(f"{k} ({n})" for k, n in sorted(counts.items()))
        return [f"simulate does not model {kinds}: kept as objects for plugins that read them; no pods are "
                "created from them and nothing else uses them"]

    def unit_warnings(self) -> list[str]:
        """One line per pod whose batch-cpu or mid-cpu request or limit is below 100 milli-cores (see
        :func:`small_milli_cpu_warning`); Koordinator accepts such pods, so this is a warning."""
        return [w for w in map(small_milli_cpu_warning, self.pods) if w]

    def newest_timestamp(self) -> float | None:
        """The newest creation time or metric update time in the input (the virtual clock's start)."""
        ts = [t for t in (p.creation_timestamp for p in self.pods) if t is not None]
        ts += [t for t in (n.creation_timestamp for n in self.nodes) if t is not None]
        for _kind, obj in self.objects:
            meta, status = obj.get("metadata"), obj.get("status")
            meta = meta if isinstance(meta, dict) else {}
            status = status if isinstance(status, dict) else {}
            for v in (meta.get("creationTimestamp"), status.get("updateTime")):
                try:
                    t = parse_time(v)
                except ManifestError:
                    t = None
                if t is not None:
                    ts.append(t)
        return max(ts) if ts else None

    def to_cluster(self, cluster: ClusterState | None = None) -> ClusterState:
        cluster = cluster or ClusterState()
        for n in self.nodes:
            cluster.add_node(n)
        for kind, obj in self.objects:
            cluster.set_object(kind, obj)
        cluster.sources.update(self.sources)
        for p in self.pods:
            cluster.add_pod(p)
        return cluster


def _iter_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in SUFFIXES)
            if not files:
                raise ManifestError("no .yaml, .yml or .json files in directory", file=str(path))
            yield from files
        elif path.exists():
            yield path
        else:
            raise ManifestError("no such file or directory", file=str(path))


def _documents(path: Path) -> list[Any]:
    try:
        text = read_text(path)
    except OSError as e:
        raise ManifestError(f"cannot read: {e.strerror or e}", file=str(path)) from None
    except InputError as e:
        raise ManifestError(str(e), file=str(path)) from None
    try:
        return [loads_json(text)] if path.suffix == ".json" else load_yaml_all(text)
    except InputError as e:
        raise ManifestError(str(e), file=str(path)) from None


#: Kubernetes kinds are CamelCase identifiers
_KIND = re.compile(r"[A-Z][A-Za-z0-9]*")
#: kinds whose spelling is checked, so that ``pod`` or ``Node `` is an error rather than an ignored object
KNOWN_KINDS = ("Pod", "Node", "NodeMetric", "Device", "PodGroup", "ElasticQuota", "NodeResourceTopology",
               "PodDisruptionBudget", "NodeSLO", "Reservation", "ConfigMap", "Namespace", "PriorityClass",
               *STORAGE_KINDS, *WORKLOAD_KINDS)
#: kinds simulate uses: made into pods, checked, or read by the built-in plugins (``objects_of``); another
#: kind is kept as an object and named in :meth:`Manifests.warnings`
MODELLED_KINDS = frozenset({*KNOWN_KINDS, *ADMISSION_KINDS, *CLUSTER_SCOPED_KINDS, "Service", "PodMigrationJob"})
_KNOWN_FOLDED = {k.lower(): k for k in KNOWN_KINDS}


def _check_kind(kind: Any, file: str, obj: str, field: str) -> str:
    if not isinstance(kind, str) or not kind:
        raise ManifestError("object has no kind", file=file, obj=obj, field=field)
    if not _KIND.fullmatch(kind):
        folded = _KNOWN_FOLDED.get(kind.strip().lower())
        hint = f"; did you mean {folded!r}?" if folded else " (a CamelCase name such as Pod or Node)"
        raise ManifestError(f"invalid kind {kind[:60]!r}{hint}", file=file, obj=obj, field=field)
    folded = _KNOWN_FOLDED.get(kind.lower())
    if folded is not None and folded != kind:
        raise ManifestError(f"unknown kind {kind!r}; did you mean {folded!r}?", file=file, obj=obj, field=field)
    return kind


def _flatten(doc: Any, file: str, where: str) -> Iterator[tuple[dict, str]]:
    if not isinstance(doc, dict):
        raise ManifestError(f"expected a Kubernetes object (a mapping), got {type(doc).__name__}", file=file,
                            field=where or None)
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise ManifestError("expected a list", file=file, field=f"{where}items" if where else "items")
        for i, item in enumerate(items):
            yield from _flatten(item, file, f"{where}items[{i}].")
        return
    yield doc, where


def _record(out: Manifests, kind: str, key: str, file: str, obj: str) -> None:
    """Remember where ``kind``/``key`` came from; a second object with the same identity is an error
    naming both files (the API server holds one object per kind, namespace and name)."""
    first = out.sources.get((kind, key))
    if first is not None:
        where = "the same file" if first == file else first
        raise ManifestError(f"duplicate {kind} {key}: already defined in {where}", file=file, obj=obj)
    out.sources[(kind, key)] = file


def load_objects(docs: Iterable[Any], *, file: str = "<input>", into: Manifests | None = None) -> Manifests:
    """Parse objects into ``into`` (or a new Manifests). Every object needs a valid kind and name; two
    objects of one kind with the same namespace/name, or two pods with one UID, are errors. Workloads are
    expanded into pods here when the Manifests is new, else by ``into.expand_workloads()`` (which
    :func:`load_manifests` and the embedded engine call once every object is in)."""
    out = into if into is not None else Manifests()
    for doc in docs:
        for obj, where in _flatten(doc, file, ""):
            meta = obj.get("metadata")
            if meta is not None and not isinstance(meta, dict):
                raise ManifestError("expected a mapping", file=file, field=f"{where}metadata")
            meta = meta or {}
            raw_name = meta.get("name")
            label = f"object {raw_name}" if isinstance(raw_name, str) and raw_name else "object ?"
            kind = _check_kind(obj.get("kind"), file, label, f"{where}kind")
            name = object_name(meta, kind, file=file, where=where)
            if kind == "Pod":
                pod = pod_from_manifest(obj, file=file)
                _record(out, "Pod", pod.key, file, f"Pod {pod.key}")
                _record(out, "Pod uid", pod.uid, file, f"Pod {pod.key} (metadata.uid {pod.uid})")
                out.pods.append(pod)
            elif kind == "Node":
                node = node_from_manifest(obj, file=file)
                _record(out, "Node", node.name, file, f"Node {node.name}")
                out.nodes.append(node)
            else:
                if meta.get("namespace") is not None and kind not in CLUSTER_SCOPED_KINDS:
                    object_namespace(meta, file=file, obj=f"{kind} {name}", where=where)
                key = object_key(kind, meta)
                _record(out, kind, key, file, f"{kind} {key}")
                if kind in ADMISSION_KINDS:
                    check_object(kind, obj, file=file)
                elif kind in STORAGE_KINDS:
                    check_storage_object(kind, obj, file=file)
                elif kind in WORKLOAD_KINDS:
                    out.workloads.append(parse_workload(kind, obj, file=file))
                out.objects.append((kind, obj))
    if into is None:
        out.expand_workloads()
    return out


def load_manifests(paths: Iterable[str | Path]) -> Manifests:
    """Load every manifest under ``paths`` (files or directories)."""
    out = Manifests()
    for f in _iter_files(paths):
        if str(f) in out.files:  # the same file named twice (a file and its directory)
            continue
        out.files.append(str(f))
        load_objects(_documents(f), file=str(f), into=out)
    out.expand_workloads()
    return out


#: extended resources counted in milli-cores as plain integers (``2`` is 0.002 cores, not 2)
MILLI_CPU_RESOURCES = ("kubernetes.io/batch-cpu", "kubernetes.io/mid-cpu")


def small_milli_cpu_warning(pod: Pod) -> str | None:
    """A warning naming ``pod`` when a container's batch-cpu or mid-cpu request or limit is between 1 and
    99 (milli-cores: most likely meant as cores), or None. One line per pod, for the first such amount."""
    for c in (*pod.init_containers, *pod.containers):
        for kind, amounts in (("request", c.requests), ("limit", c.limits)):
            for r in MILLI_CPU_RESOURCES:
                v = amounts.get(r)
                if v is not None and 0 < v < 100:
                    short = r.split("/", 1)[1]
                    return (f"pod {pod.key}: container {c.name!r} {kind}s {r}: {v}; {short} is in milli-cores: "
                            f"{v} means {v / 1000:g} cores; did you mean {v}k?")
    return None
