"""Loading Kubernetes manifests: YAML or JSON files, multi-document, ``List`` kinds, whole directories.

Pods and Nodes are parsed into the model; every other kind (NodeMetric, Device, PodGroup,
ElasticQuota, NodeResourceTopology, PodDisruptionBudget, ...) is kept as a dict for plugins to read.
Errors name the file, the object and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Iterable, Iterator

import attrs
import yaml

from .cluster import ClusterState
from .errors import ManifestError
from .model import Node, Pod, node_from_manifest, parse_time, pod_from_manifest
from .quantity import canonical

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
            out[r] = canonical(r, v)
        except ValueError as e:
            raise ManifestError(str(e), obj=obj, field=f"{field}.{r}") from None
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
    name = str(meta.get("name", "?"))
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
    for i, pm in enumerate(field_list(status.get("podsMetric"), ctx, "status.podsMetric")):
        where = f"status.podsMetric[{i}]"
        pm = field_mapping(pm, ctx, where)
        if not pm.get("name"):
            raise ManifestError("a pod metric needs a name", obj=ctx, field=f"{where}.name")
        raw = field_mapping(pm.get("podUsage"), ctx, f"{where}.podUsage")
        pods.append(PodMetric(str(pm.get("namespace") or "default"), str(pm["name"]),
                              resource_map(raw.get("resources"), ctx, f"{where}.podUsage.resources", only),
                              str(pm.get("priority") or "")))
    return NodeMetricStatus(name, ctx, update, usage["nodeUsage"], usage["systemUsage"], tuple(pods), status, nm)


@attrs.define
class Manifests:
    nodes: list[Node] = attrs.field(factory=list)
    pods: list[Pod] = attrs.field(factory=list)
    objects: list[tuple[str, dict]] = attrs.field(factory=list)  # (kind, object)
    files: list[str] = attrs.field(factory=list)

    def newest_timestamp(self) -> float | None:
        """The newest creation time or metric update time in the input (the virtual clock's start)."""
        ts = [t for t in (p.creation_timestamp for p in self.pods) if t is not None]
        ts += [t for t in (n.creation_timestamp for n in self.nodes) if t is not None]
        for kind, obj in self.objects:
            meta = obj.get("metadata") or {}
            for v in (meta.get("creationTimestamp"), (obj.get("status") or {}).get("updateTime")):
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
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"cannot read: {e}", file=str(path)) from None
    if path.suffix == ".json":
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as e:
            raise ManifestError(f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}", file=str(path)) from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ManifestError(f"invalid YAML{where}: {getattr(e, 'problem', None) or e}", file=str(path)) from None


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


def load_objects(docs: Iterable[Any], *, file: str = "<input>", into: Manifests | None = None) -> Manifests:
    out = into if into is not None else Manifests()
    for doc in docs:
        for obj, where in _flatten(doc, file, ""):
            kind = obj.get("kind")
            name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
            if not isinstance(kind, str) or not kind:
                raise ManifestError("object has no kind", file=file, obj=f"object {name or '?'}",
                                    field=f"{where}kind")
            if not name:
                raise ManifestError(f"{kind} has no metadata.name", file=file, field=f"{where}metadata.name")
            if kind == "Pod":
                out.pods.append(pod_from_manifest(obj, file=file))
            elif kind == "Node":
                out.nodes.append(node_from_manifest(obj, file=file))
            else:
                out.objects.append((kind, obj))
    return out


def load_manifests(paths: Iterable[str | Path]) -> Manifests:
    """Load every manifest under ``paths`` (files or directories)."""
    out = Manifests()
    for f in _iter_files(paths):
        out.files.append(str(f))
        load_objects(_documents(f), file=str(f), into=out)
    seen: dict[str, str] = {}
    for p in out.pods:
        if p.key in seen:
            raise ManifestError(f"duplicate Pod {p.key}", obj=f"Pod {p.key}")
        seen[p.key] = p.uid
    names = set()
    for n in out.nodes:
        if n.name in names:
            raise ManifestError(f"duplicate Node {n.name}", obj=f"Node {n.name}")
        names.add(n.name)
    return out
