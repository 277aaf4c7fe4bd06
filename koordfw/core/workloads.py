"""Workload controllers for ``koordfw simulate``: the pods Kubernetes' controllers create for a Deployment,
ReplicaSet, StatefulSet, Job, CronJob or DaemonSet, as pod manifests checked like any input pod.

What is modelled, as the controllers of kube-controller-manager create pods:

* Deployment: a ReplicaSet ``<deployment>-<pod-template-hash>`` (the hash: FNV-32a of the template,
  written with kube's ``rand.SafeEncodeString`` alphabet), its pods ``<replicaset>-<5 chars>``;
  ``pod-template-hash`` labels the ReplicaSet and its pods.
* ReplicaSet: ``spec.replicas`` pods ``<replicaset>-<5 chars>`` (kube's generateName).
* StatefulSet: ``<name>-0`` .. ``<name>-<n-1>`` in order, with kube's ``statefulset.kubernetes.io/pod-name``,
  ``apps.kubernetes.io/pod-index`` and ``controller-revision-hash`` labels, hostname and subdomain, and a
  PersistentVolumeClaim ``<claim>-<name>-<i>`` per ``volumeClaimTemplates`` entry (unless the input has it).
* Job: pods never finish in a simulation, so the pods the Job runs at once: ``min(parallelism, completions)``
  (parallelism defaults to 1, completions to parallelism); Indexed Jobs name them ``<job>-<index>-<5 chars>``.
* CronJob: one Job ``<cronjob>-<scheduled time in minutes>`` from ``spec.jobTemplate``, at the first time the
  schedule gives from the CronJob's creation (else the input's newest timestamp, else now).
* DaemonSet: one pod per node whose nodeSelector, required node affinity and NoSchedule/NoExecute taints admit
  it (with the tolerations the DaemonSet controller adds); each pod gets kube's node affinity
  ``matchFields metadata.name In [node]`` and is scheduled by the scheduler, as kube >= 1.12 does.

Pods the input already holds with a controller reference to a workload (an exported cluster) are adopted:
only the missing ones are created. Names and UIDs are derived from the workload, so a run is deterministic.
"""

from __future__ import annotations

import copy
import json
import random
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .cron import next_schedule
from .errors import ManifestError
from .model import (
    INT32_MAX,
    Node,
    Pod,
    Taint,
    Toleration,
    label_selector_check,
    parse_time,
    pod_from_manifest,
    selector_matches,
)
from .storage import check_storage_object

__all__ = ["MAX_WORKLOAD_PODS", "WORKLOAD_KINDS", "Expansion", "Workload", "daemon_tolerations", "daemonset_admits",
           "expand_workload", "parse_workload", "safe_encode", "template_hash"]

WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "CronJob", "DaemonSet")
#: kube's ``rand.SafeEncodeString`` / ``rand.String`` alphabet (no vowels, no confusable characters)
ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
#: the most pods the workloads of one input may create: Kubernetes' tested limit of pods per cluster (a
#: ``replicas: 2147483647`` is a few bytes of YAML; creating them would exhaust memory)
MAX_WORKLOAD_PODS = 150_000
#: kube's ``maxGeneratedNameLength``: a generateName prefix is cut to 63 - 5 characters
MAX_GENERATE_PREFIX = 58
_APPS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet")
_API_VERSION = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
                "Job": "batch/v1", "CronJob": "batch/v1"}
#: the tolerations kube's daemon controller adds to every DaemonSet pod (``AddOrUpdateDaemonPodTolerations``)
_DAEMON_TOLERATIONS = (("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"),
                       ("node.kubernetes.io/disk-pressure", "NoSchedule"),
                       ("node.kubernetes.io/memory-pressure", "NoSchedule"),
                       ("node.kubernetes.io/pid-pressure", "NoSchedule"),
                       ("node.kubernetes.io/unschedulable", "NoSchedule"))


# -- names and hashes ----------------------------------------------------------------------------------

def fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(s: str) -> str:
    """kube's ``rand.SafeEncodeString``: each byte mapped onto the 27-character alphabet."""
    return "".join(ALPHANUMS[b % len(ALPHANUMS)] for b in s.encode())


def template_hash(template: Mapping[str, Any]) -> str:
    """The ``pod-template-hash`` of a pod template: kube's ``ComputeHash`` shape (FNV-32a of the template,
    its decimal text safe-encoded); not byte-identical to kube's, which hashes Go's object dump."""
    return safe_encode(str(fnv32a(json.dumps(template, sort_keys=True, separators=(",", ":")).encode())))


def stable_uid(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"koordfw:{kind}/{namespace}/{name}"))


def _generate_name(prefix: str, rng: random.Random, namespace: str, taken: set[str]) -> str:
    """kube's generateName: the prefix (cut to 58 characters) and 5 random characters, drawn again when the
    name exists (the API server's AlreadyExists, retried by the controller)."""
    prefix = prefix[:MAX_GENERATE_PREFIX]
    while True:
        name = prefix + "".join(rng.choice(ALPHANUMS) for _ in range(5))
        if f"{namespace}/{name}" not in taken:
            return name


# -- parsing -------------------------------------------------------------------------------------------

@attrs.frozen
class Workload:
    """A workload of the input, checked as the API server does; ``template`` is the pod template."""

    kind: str
    namespace: str
    name: str
    uid: str
    raw: Mapping[str, Any] = attrs.field(repr=False)
    #: ``spec.template``, or ``spec.jobTemplate.spec.template`` for a CronJob
    template: Mapping[str, Any] = attrs.field(repr=False)
    #: where the template is, for errors: ``spec.template`` or ``spec.jobTemplate.spec.template``
    template_field: str = "spec.template"
    #: the pods it runs at once: replicas, min(parallelism, completions); -1 for a DaemonSet (one per node)
    replicas: int = 1
    file: str | None = None
    #: a line for the output (a Job's completions beyond what runs at once, a suspended Job, ...)
    note: str = ""

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def owner_reference(self) -> dict[str, Any]:
        return owner_reference(self.kind, self.name, self.uid)

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.raw.get("spec") or {}

    @property
    def count_field(self) -> str:
        """The field that sets how many pods it creates, for errors."""
        return {"Job": "spec.parallelism", "CronJob": "spec.jobTemplate.spec.parallelism",
                "DaemonSet": "spec.template.spec"}.get(self.kind, "spec.replicas")


def owner_reference(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": _API_VERSION.get(kind, "v1"), "kind": kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def _fail(w: str, field: str, message: str, file: str | None) -> ManifestError:
    return ManifestError(message, file=file, obj=w, field=field)


def _mapping(v: Any, w: str, field: str, file: str | None, required: bool = False) -> Mapping[str, Any]:
    if v is None:
        if required:
            raise _fail(w, field, "Required value", file)
        return {}
    if not isinstance(v, dict):
        raise _fail(w, field, f"expected a mapping, got {type(v).__name__}", file)
    return v


def _count(v: Any, w: str, field: str, file: str | None, default: int | None) -> int | None:
    """A non-negative int32 (``replicas``, ``parallelism``, ``completions``); None → ``default``."""
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(w, field, f"expected an integer, got {type(v).__name__} {v!r:.40}", file)
    if v < 0:
        raise _fail(w, field, f"{v}: must be greater than or equal to 0", file)
    if v > INT32_MAX:
        raise _fail(w, field, f"{v} is outside 0..{INT32_MAX}", file)
    return v


def parse_workload(kind: str, obj: Mapping[str, Any], *, file: str | None = None) -> Workload:
    """Check a workload as the API server does (counts, selector, template) and return it; a malformed one
    raises ManifestError naming the file, ``<Kind> <namespace>/<name>`` and the field. The template is checked
    by building a pod from it (``pod_from_manifest``), so every pod check applies."""
    meta = obj.get("metadata") or {}
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    w = f"{kind} {ns}/{name}"
    uid = meta.get("uid")
    uid = uid if isinstance(uid, str) and uid else stable_uid(kind, ns, name)
    spec = _mapping(obj.get("spec"), w, "spec", file, required=True)
    tfield, note, replicas = "spec.template", "", 1
    if kind == "CronJob":
        schedule = spec.get("schedule")
        if not isinstance(schedule, str) or not schedule.strip():
            raise _fail(w, "spec.schedule", "Required value: a cron schedule (a string)", file)
        try:
            next_schedule(schedule, 0.0)
        except ValueError as e:
            raise _fail(w, "spec.schedule", f"invalid schedule {schedule!r}: {e}", file) from None
        jt = _mapping(spec.get("jobTemplate"), w, "spec.jobTemplate", file, required=True)
        jmeta = _mapping(jt.get("metadata"), w, "spec.jobTemplate.metadata", file)
        for k in ("labels", "annotations"):
            _mapping(jmeta.get(k), w, f"spec.jobTemplate.metadata.{k}", file)
        spec = _mapping(jt.get("spec"), w, "spec.jobTemplate.spec", file, required=True)
        tfield = "spec.jobTemplate.spec.template"
    template = _mapping(spec.get("template"), w, tfield, file, required=True)
    tmeta = _mapping(template.get("metadata"), w, f"{tfield}.metadata", file)
    for k in ("labels", "annotations"):
        _mapping(tmeta.get(k), w, f"{tfield}.metadata.{k}", file)
    _mapping(template.get("spec"), w, f"{tfield}.spec", file, required=True)
    if kind in _APPS or spec.get("selector") is not None:
        selector = spec.get("selector")
        if selector is None:
            raise _fail(w, "spec.selector", "Required value", file)
        sel = _mapping(selector, w, "spec.selector", file)
        try:
            label_selector_check(sel, "spec.selector", w)
        except ManifestError as e:
            raise _fail(w, e.field or "spec.selector", e.detail, file) from None
        if kind in _APPS and not sel.get("matchLabels") and not sel.get("matchExpressions"):
            raise _fail(w, "spec.selector", f"Invalid value: empty selector is invalid for {kind.lower()}", file)
        labels = tmeta.get("labels") or {}
        if not isinstance(labels, dict) or not selector_matches(sel, {str(k): str(v) for k, v in labels.items()}):
            raise _fail(w, f"{tfield}.metadata.labels", "Invalid value: `selector` does not match template `labels`",
                        file)
    restart = (template.get("spec") or {}).get("restartPolicy") if isinstance(template.get("spec"), dict) else None
    if kind in ("Job", "CronJob"):
        if restart not in ("OnFailure", "Never"):
            raise _fail(w, f"{tfield}.spec.restartPolicy",
                        f'Unsupported value: "{restart or "Always"}": supported values: "OnFailure", "Never"', file)
        pre = "spec.jobTemplate.spec" if kind == "CronJob" else "spec"
        parallelism = _count(spec.get("parallelism"), w, f"{pre}.parallelism", file, 1) or 0
        completions = _count(spec.get("completions"), w, f"{pre}.completions", file, None)
        mode = spec.get("completionMode") or "NonIndexed"
        if mode not in ("NonIndexed", "Indexed"):
            raise _fail(w, f"{pre}.completionMode", f'Unsupported value: "{mode}": supported values: '
                                                    '"NonIndexed", "Indexed"', file)
        if mode == "Indexed" and completions is None:
            raise _fail(w, f"{pre}.completions", "Required value: when completion mode is Indexed", file)
        replicas = parallelism if completions is None else min(parallelism, completions)
        if spec.get("suspend") is True:
            replicas, note = 0, "suspended: no pods"
        elif completions is not None and completions > replicas:
            note = (f"{replicas} of {completions} completions run at once; pods never finish in a simulation, "
                    "so the rest are not created")
    elif restart not in (None, "Always"):
        raise _fail(w, f"{tfield}.spec.restartPolicy",
                    f'Unsupported value: "{restart}": supported values: "Always"', file)
    elif kind != "DaemonSet":
        replicas = _count(spec.get("replicas"), w, "spec.replicas", file, 1) or 0
    else:
        replicas = -1
    if kind == "CronJob" and (obj.get("spec") or {}).get("suspend") is True:
        replicas, note = 0, "suspended: no Job is created"
    if kind == "StatefulSet":
        policy = spec.get("podManagementPolicy") or "OrderedReady"
        if policy not in ("OrderedReady", "Parallel"):
            raise _fail(w, "spec.podManagementPolicy", f'Unsupported value: "{policy}": supported values: '
                                                       '"OrderedReady", "Parallel"', file)
        claims = spec.get("volumeClaimTemplates") or []
        if not isinstance(claims, list):
            raise _fail(w, "spec.volumeClaimTemplates", f"expected a list, got {type(claims).__name__}", file)
        for i, t in enumerate(claims):
            at = f"spec.volumeClaimTemplates[{i}]"
            t = _mapping(t, w, at, file)
            tm = _mapping(t.get("metadata"), w, f"{at}.metadata", file)
            if not isinstance(tm.get("name"), str) or not tm.get("name"):
                raise _fail(w, f"{at}.metadata.name", "Required value", file)
            _mapping(tm.get("labels"), w, f"{at}.metadata.labels", file)
            try:  # the claim as the controller creates it, checked as an input claim is
                check_storage_object("PersistentVolumeClaim", {"metadata": {"name": tm["name"], "namespace": ns},
                                                               "spec": t.get("spec")})
            except ManifestError as e:
                raise _fail(w, f"{at}.{e.field}" if e.field else at, e.detail, file) from None
    wl = Workload(kind, ns, name, uid, obj, template, tfield, replicas, file, note)
    _pod(wl, _pod_manifest(wl, name, {}, wl.owner_reference()), set())  # the template as a pod: every pod check
    return wl


def _pod(wl: Workload, manifest: dict[str, Any], taken: set[str]) -> Pod:
    """The pod of a generated manifest; a pod error names the workload and the template field."""
    try:
        pod = pod_from_manifest(manifest)
    except ManifestError as e:
        field = e.field
        if field and field != "metadata.name" and field.startswith(("spec", "metadata")):
            field = f"{wl.template_field}.{field}"
        raise ManifestError(e.detail, file=wl.file, obj=wl.ref, field=field) from None
    return pod


def _pod_manifest(wl: Workload, name: str, labels: Mapping[str, str], owner: Mapping[str, Any],
                  template: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A pod as a controller creates it from a template: labels and annotations from the template (plus the
    controller's ``labels``), the workload's namespace, a controller owner reference, a stable UID."""
    template = template if template is not None else wl.template
    tmeta = template.get("metadata") or {}
    meta: dict[str, Any] = {"name": name, "namespace": wl.namespace,
                            "uid": stable_uid("Pod", wl.namespace, name),
                            "labels": {**(tmeta.get("labels") or {}), **labels},
                            "ownerReferences": [dict(owner)]}
    if tmeta.get("annotations"):
        meta["annotations"] = copy.deepcopy(tmeta["annotations"])
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})}


# -- expansion -----------------------------------------------------------------------------------------

@attrs.frozen
class Expansion:
    """What a workload's controllers create: pods, and the objects between (ReplicaSet, Job, claims)."""

    pods: tuple[Pod, ...] = ()
    objects: tuple[tuple[str, dict[str, Any]], ...] = ()
    note: str = ""


def _owned(pods: Iterable[Pod], namespace: str, kind: str, name: str) -> list[Pod]:
    return [p for p in pods if p.namespace == namespace and p.controller is not None
            and p.controller.kind == kind and p.controller.name == name]


def _controlled(objects: Mapping[tuple[str, str], Any], kind: str, wl: Workload) -> bool:
    """Does the input hold a ``kind`` object whose controller is ``wl``?"""
    return any(k[0] == kind and k[1].startswith(f"{wl.namespace}/") and any(
        isinstance(r, dict) and r.get("controller") and r.get("kind") == wl.kind and r.get("name") == wl.name
        for r in ((o.get("metadata") or {}).get("ownerReferences") or [])) for k, o in objects.items())


def _replicas(wl: Workload, count: int, prefix: str, owner: Mapping[str, Any], labels: Mapping[str, str],
              taken: set[str], existing: list[Pod], template: Mapping[str, Any] | None = None) -> list[Pod]:
    """``count`` pods named ``<prefix><5 chars>`` (ReplicaSet, Job), less those the input already has."""
    rng = random.Random(f"{wl.kind}/{wl.namespace}/{prefix}")
    out = []
    for _ in range(max(0, count - len(existing))):
        name = _generate_name(prefix, rng, wl.namespace, taken)
        out.append(_pod(wl, _pod_manifest(wl, name, labels, owner, template), taken))
        taken.add(f"{wl.namespace}/{name}")
    return out


def _job(wl: Workload, job_name: str, job_uid: str, job_spec: Mapping[str, Any], taken: set[str],
         pods: list[Pod]) -> list[Pod]:
    """The pods a Job runs at once (``wl.replicas`` of them), labelled as kube's Job controller labels them."""
    labels = {"batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-name": job_name,
              "controller-uid": job_uid, "job-name": job_name}
    owner = owner_reference("Job", job_name, job_uid)
    existing = _owned(pods, wl.namespace, "Job", job_name)
    if (job_spec.get("completionMode") or "NonIndexed") != "Indexed":
        return _replicas(wl, wl.replicas, f"{job_name}-", owner, labels, taken, existing)
    have = {p.annotations.get("batch.kubernetes.io/job-completion-index") for p in existing}
    out = []
    for i in range(wl.replicas):
        if str(i) in have:
            continue
        tmpl = copy.deepcopy(dict(wl.template))
        tmeta = tmpl.setdefault("metadata", {})
        tmeta["annotations"] = {**(tmeta.get("annotations") or {}), "batch.kubernetes.io/job-completion-index": str(i)}
        tmeta["labels"] = {**(tmeta.get("labels") or {}), "batch.kubernetes.io/job-completion-index": str(i)}
        spec = tmpl.setdefault("spec", {})
        spec.setdefault("hostname", f"{job_name}-{i}")
        out += _replicas(wl, 1, f"{job_name}-{i}-", owner, labels, taken, [], tmpl)
    return out


def expand_workload(wl: Workload, *, nodes: Iterable[Node] = (), pods: Iterable[Pod] = (),
                    objects: Mapping[tuple[str, str], Any] | None = None, taken: set[str] | None = None,
                    now: float | None = None) -> Expansion:
    """The pods (and intermediate objects) ``wl``'s controllers create in a cluster holding ``nodes``,
    ``pods`` (adopted when they name the controller) and ``objects`` ((kind, namespace/name) keys: a
    Deployment's ReplicaSet or a StatefulSet's claim the input has is not created again). ``taken`` holds
    the ``namespace/name`` of every existing pod and gets the new ones."""
    pods = list(pods)
    objects = objects or {}
    taken = taken if taken is not None else {p.key for p in pods}
    ns, name, spec = wl.namespace, wl.name, wl.spec
    if wl.kind == "ReplicaSet":
        return Expansion(tuple(_replicas(wl, wl.replicas, f"{name}-", wl.owner_reference(), {}, taken,
                                         _owned(pods, ns, "ReplicaSet", name))), note=wl.note)
    if wl.kind == "Deployment":
        h = template_hash(wl.template)
        rs_name = f"{name}-{h}"
        if ("ReplicaSet", f"{ns}/{rs_name}") in objects or _controlled(objects, "ReplicaSet", wl):
            return Expansion(note="its ReplicaSet is in the input")  # which creates the pods (not a rollout)
        rs_uid = stable_uid("ReplicaSet", ns, rs_name)
        template = copy.deepcopy(dict(wl.template))
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), "pod-template-hash": h}
        selector = copy.deepcopy(dict(spec.get("selector") or {}))
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), "pod-template-hash": h}
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": rs_name, "namespace": ns, "uid": rs_uid, "labels": dict(tmeta["labels"]),
                           "annotations": {"deployment.kubernetes.io/desired-replicas": str(wl.replicas),
                                           "deployment.kubernetes.io/revision": "1"},
                           "ownerReferences": [wl.owner_reference()]},
              "spec": {"replicas": wl.replicas, "selector": selector, "template": template}}
        got = _replicas(wl, wl.replicas, f"{rs_name}-", owner_reference("ReplicaSet", rs_name, rs_uid), {}, taken,
                        _owned(pods, ns, "ReplicaSet", rs_name), template)
        return Expansion(tuple(got), (("ReplicaSet", rs),), wl.note)
    if wl.kind == "Job":
        return Expansion(tuple(_job(wl, name, wl.uid, spec, taken, pods)), note=wl.note)
    if wl.kind == "CronJob":
        return _cronjob(wl, pods, objects, taken, now)
    if wl.kind == "StatefulSet":
        return _statefulset(wl, pods, objects, taken)
    if wl.kind == "DaemonSet":
        return _daemonset(wl, list(nodes), pods, taken)
    raise ValueError(f"not a workload kind: {wl.kind}")


def _cronjob(wl: Workload, pods: list[Pod], objects: Mapping[tuple[str, str], Any], taken: set[str],
             now: float | None) -> Expansion:
    if wl.replicas == 0 and wl.note:
        return Expansion(note=wl.note)
    meta = wl.raw.get("metadata") or {}
    try:
        start = parse_time(meta.get("creationTimestamp"))
    except ManifestError:
        start = None
    start = start if start is not None else (now if now is not None else time.time())
    at = next_schedule(str(wl.spec.get("schedule")), start)
    if at is None:
        return Expansion(note="the schedule never runs: no Job")
    job_name = f"{wl.name}-{int(at) // 60}"
    jt = wl.spec.get("jobTemplate") or {}
    jspec = copy.deepcopy(dict(jt.get("spec") or {}))
    jmeta = jt.get("metadata") or {}
    if _controlled(objects, "Job", wl) or ("Job", f"{wl.namespace}/{job_name}") in objects:
        return Expansion(note="the input has its Job")
    job_uid = stable_uid("Job", wl.namespace, job_name)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": job_name, "namespace": wl.namespace, "uid": job_uid,
                        "labels": dict(jmeta.get("labels") or {}),
                        "annotations": {**(jmeta.get("annotations") or {}),
                                        "batch.kubernetes.io/cronjob-scheduled-timestamp": stamp},
                        "ownerReferences": [wl.owner_reference()]},
           "spec": jspec}
    got = _job(wl, job_name, job_uid, jspec, taken, pods)
    note = "; ".join(x for x in (f"Job {job_name} (scheduled {stamp})", wl.note) if x)
    return Expansion(tuple(got), (("Job", job),), note)


def _statefulset(wl: Workload, pods: list[Pod], objects: Mapping[tuple[str, str], Any], taken: set[str]) -> Expansion:
    ns, name, spec = wl.namespace, wl.name, wl.spec
    revision = f"{name}-{template_hash(wl.template)}"
    have = {p.name for p in _owned(pods, ns, "StatefulSet", name)}
    claims = [t for t in spec.get("volumeClaimTemplates") or [] if isinstance(t, dict)]
    selector_labels = dict((spec.get("selector") or {}).get("matchLabels") or {})
    out, made = [], []
    for i in range(wl.replicas):
        pod_name = f"{name}-{i}"
        for t in claims:
            cname = f"{t['metadata']['name']}-{name}-{i}"
            if ("PersistentVolumeClaim", f"{ns}/{cname}") not in objects:
                made.append(("PersistentVolumeClaim", {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": cname, "namespace": ns, "labels": {**(t["metadata"].get("labels") or {}),
                                                                             **selector_labels}},
                    "spec": copy.deepcopy(t.get("spec") or {})}))
        if pod_name in have:
            continue
        if f"{ns}/{pod_name}" in taken:
            raise ManifestError(f"pod {ns}/{pod_name} of the StatefulSet exists without it as controller",
                                file=wl.file, obj=wl.ref, field="metadata.name")
        tmpl = copy.deepcopy(dict(wl.template))
        pspec = tmpl.setdefault("spec", {})
        pspec["hostname"] = pod_name
        if spec.get("serviceName"):
            pspec["subdomain"] = spec["serviceName"]
        if claims:
            names = {t["metadata"]["name"] for t in claims}
            vols = [v for v in pspec.get("volumes") or [] if not (isinstance(v, dict) and v.get("name") in names)]
            pspec["volumes"] = vols + [{"name": t["metadata"]["name"], "persistentVolumeClaim": {
                "claimName": f"{t['metadata']['name']}-{name}-{i}"}} for t in claims]
        labels = {"statefulset.kubernetes.io/pod-name": pod_name, "apps.kubernetes.io/pod-index": str(i),
                  "controller-revision-hash": revision}
        out.append(_pod(wl, _pod_manifest(wl, pod_name, labels, wl.owner_reference(), tmpl), taken))
        taken.add(f"{ns}/{pod_name}")
    return Expansion(tuple(out), tuple(made), wl.note)


# -- DaemonSet -----------------------------------------------------------------------------------------

def daemon_tolerations(pod_spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pod spec's tolerations plus those kube's ``AddOrUpdateDaemonPodTolerations`` adds (not-ready and
    unreachable NoExecute; disk, memory, pid pressure and unschedulable NoSchedule; network-unavailable
    NoSchedule with hostNetwork), each added unless the same toleration is there."""
    tols = [dict(t) for t in pod_spec.get("tolerations") or [] if isinstance(t, dict)]
    wanted = list(_DAEMON_TOLERATIONS)
    if pod_spec.get("hostNetwork") is True:
        wanted.append(("node.kubernetes.io/network-unavailable", "NoSchedule"))
    for key, effect in wanted:
        t = {"key": key, "operator": "Exists", "effect": effect}
        if not any(x.get("key") == key and x.get("operator") == "Exists" and x.get("effect") == effect
                   and not x.get("value") for x in tols):
            tols.append(t)
    return tols


def _expr(e: Mapping[str, Any], value: str | None) -> bool:
    op, values = e.get("operator"), [str(v) for v in e.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term(term: Mapping[str, Any], node: Node) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return (all(_expr(e, node.labels.get(str(e.get("key")))) for e in exprs)
            and all(_expr(f, node.name if f.get("key") == "metadata.name" else None) for f in fields))


def daemonset_admits(pod_spec: Mapping[str, Any], node: Node) -> str:
    """Why the daemon controller would not run the pod on ``node`` ("" when it would): kube's
    ``NodeShouldRunDaemonPod``: ``spec.nodeName``, nodeSelector and required node affinity, then the node's
    NoSchedule/NoExecute taints against the tolerations with the daemon ones added."""
    if pod_spec.get("nodeName") and pod_spec["nodeName"] != node.name:
        return "nodeName"
    if any(node.labels.get(k) != str(v) for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return "nodeSelector"
    req = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = req.get("nodeSelectorTerms") or []
    if terms and not any(_term(t, node) for t in terms if isinstance(t, dict)):
        return "node affinity"
    tols = [Toleration(key=str(t.get("key") or ""), operator=str(t.get("operator") or "Equal"),
                       value=str(t.get("value") or ""), effect=str(t.get("effect") or ""))
            for t in daemon_tolerations(pod_spec)]
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in tols):
            return f"taint {_taint(taint)}"
    return ""


def _taint(t: Taint) -> str:
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


def _daemonset(wl: Workload, nodes: list[Node], pods: list[Pod], taken: set[str]) -> Expansion:
    ns, name = wl.namespace, wl.name
    pod_spec = wl.template.get("spec") or {}
    revision = template_hash(wl.template)
    have = {p.node_name or _daemon_node(p) for p in _owned(pods, ns, "DaemonSet", name)}
    rng = random.Random(f"DaemonSet/{ns}/{name}")
    out, skipped = [], []
    for node in nodes:
        why = daemonset_admits(pod_spec, node)
        if why:
            skipped.append(why)
            continue
        if node.name in have:
            continue
        tmpl = copy.deepcopy(dict(wl.template))
        spec = tmpl.setdefault("spec", {})
        spec["tolerations"] = daemon_tolerations(spec)
        affinity = spec.setdefault("affinity", {}) or {}
        spec["affinity"] = affinity
        na = affinity.setdefault("nodeAffinity", {}) or {}
        affinity["nodeAffinity"] = na
        # kube's ReplaceDaemonSetPodNodeNameNodeAffinity: the required terms become the node's name
        na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node.name]}]}]}
        pod_name = _generate_name(f"{name}-", rng, ns, taken)
        labels = {"controller-revision-hash": revision, "pod-template-generation": "1"}
        out.append(_pod(wl, _pod_manifest(wl, pod_name, labels, wl.owner_reference(), tmpl), taken))
        taken.add(f"{ns}/{pod_name}")
    note = f"{len(nodes) - len(skipped)} of {len(nodes)} nodes admit it"
    if skipped:
        reasons = sorted(set(skipped))
        note += f" (excluded by {', '.join(reasons[:3])}{', ...' if len(reasons) > 3 else ''})"
    return Expansion(tuple(out), (), note)


def _daemon_node(p: Pod) -> str:
    """The node a DaemonSet pod is for: its ``matchFields metadata.name In [node]`` term."""
    req = ((p.affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for t in req.get("nodeSelectorTerms") or []:
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name" and len(f.get("values") or []) == 1:
                return str(f["values"][0])
    return ""
