"""The ``resource_profile`` plugin: learns BE workloads' usage from NodeMetrics, right-sizes them at admission.

* Learning (koord-manager's side, ``node_resources``, called for every node as its NodeMetric comes):
  for each template, the pods on the node that carry it (:data:`ANNOTATION_TEMPLATES`) and have a
  ``podsMetric`` entry make one sample: the sum of their usage against the sum of their *original*
  requests (:data:`ANNOTATION_ORIGINAL_REQUESTS` when admission right-sized them, else their requests),
  weighted by the seconds since the node's previous NodeMetric (the usage is the agent's average over
  that time). A node must hold the sum of its BE pods' usage, and that sum's ratio to the requests varies
  far less than one pod's, so the percentile is taken of it. Returns ``None``: no node resource changes.
* Right-sizing (the webhook, ``mutate_pod`` on CREATE): a BE pod (``koord-batch`` / ``koord-free``
  priority class, or ``koordinator.sh/qosClass: BE``) with templates gets each container's
  ``kubernetes.io/batch-cpu`` / ``batch-memory`` requests (``cpu`` / ``memory`` if not converted yet)
  scaled by the profile's ratio (:meth:`Profiler.ratio`: the percentile × (1 + margin), first template with
  enough samples), limits left alone, the original totals kept in the annotation. A pod whose templates
  have no profile yet is admitted unchanged.

The node side stays the safety net: a prediction that is too low shows as BE usage above the requests,
which be_suppress caps and eviction sheds, and the profile learns it on the next NodeMetric.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

from koordfw import AdmissionHandle, KoordfwError, NodeView, Pod, canonical, hookimpl
from koordfw.contract import JSONObject
from koordfw.extension import BATCH_CPU, BATCH_MEMORY, LABEL_POD_QOS, PRIORITY_BATCH, PRIORITY_FREE
from koordfw.inputs import parse_time

from .profiler import ProfileArgs, Profiler

#: the pod's workload templates, most specific first, comma-separated (e.g. ``task:j_1/M1,class:M-50``)
ANNOTATION_TEMPLATES = "resource-profile.koordfw.io/templates"
#: what the pod requested before right-sizing: ``{"cpu": milli, "memory": bytes}`` (JSON)
ANNOTATION_ORIGINAL_REQUESTS = "resource-profile.koordfw.io/original-requests"
#: the longest time one NodeMetric sample stands for (a node silent for longer counts this much)
MAX_SAMPLE_SECONDS = 3600.0
#: the weight of a node's first NodeMetric (koordlet's default report interval)
FIRST_SAMPLE_SECONDS = 60.0


def templates_of(annotations: Mapping[str, str]) -> list[str]:
    return list(_templates(annotations.get(ANNOTATION_TEMPLATES) or ""))


@functools.lru_cache(maxsize=4096)
def _templates(raw: str) -> tuple[str, ...]:
    # pods of one workload carry the same annotation: split it once
    return tuple(k.strip() for k in raw.split(",") if k.strip())


def original_requests(pod: Any) -> tuple[int, int]:
    """(cpu milli, memory bytes) the pod asked for before right-sizing: the annotation, else its requests
    (batch-cpu / batch-memory when it has them, else cpu / memory)."""
    raw = pod.annotations.get(ANNOTATION_ORIGINAL_REQUESTS)
    if raw:
        got = _annotated_requests(raw) if type(raw) is str else _parse_requests(raw)
        if got is not None:
            return got
    req = pod.requests
    return int(req.get(BATCH_CPU, req.get("cpu", 0))), int(req.get(BATCH_MEMORY, req.get("memory", 0)))


def _parse_requests(raw: Any) -> tuple[int, int] | None:
    """The :data:`ANNOTATION_ORIGINAL_REQUESTS` JSON, or None when it cannot be read."""
    try:
        d = json.loads(raw)
        return int(d.get("cpu", 0)), int(d.get("memory", 0))
    except (ValueError, TypeError, AttributeError):
        return None


#: the annotation is written once per pod and read at every NodeMetric: parsed once per distinct text
_annotated_requests = functools.lru_cache(maxsize=4096)(_parse_requests)


def _is_be(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return ((meta.get("labels") or {}).get(LABEL_POD_QOS) == "BE"
            or spec.get("priorityClassName") in (PRIORITY_BATCH, PRIORITY_FREE))


class ResourceProfile:
    def __init__(self, args: ProfileArgs | None = None) -> None:
        self.profiler = Profiler(args or ProfileArgs())
        #: node → the update time of the last NodeMetric learnt from
        self._seen: dict[str, float] = {}

    @staticmethod
    @hookimpl
    def plugin_args() -> type:
        return ProfileArgs

    @hookimpl
    def node_resources(self, node: NodeView, pods: list[Pod], metric: JSONObject | None, now: float,
                       args: ProfileArgs) -> None:
        if metric is None or not pods:
            return None
        templated = {p.key: p for p in pods if ANNOTATION_TEMPLATES in p.annotations}
        if not templated:
            return None
        status = metric.get("status") if isinstance(metric, Mapping) else None
        if not isinstance(status, Mapping):
            return None
        try:
            t = parse_time(status.get("updateTime"), obj="NodeMetric", field="status.updateTime")
        except KoordfwError:
            return None  # batch_resource reports a bad NodeMetric; nothing to learn from it
        name = getattr(node, "name", "")
        t = t if t is not None else now
        prev = self._seen.get(name)
        if prev is not None and t <= prev:
            return None  # this NodeMetric was learnt from already
        self._seen[name] = t
        weight = FIRST_SAMPLE_SECONDS if prev is None else min(t - prev, MAX_SAMPLE_SECONDS)
        self.profiler.args = args
        # per template, the sums over the node's pods carrying it: what the node must hold is the sum of
        # its BE pods' usage, whose ratio to their requests varies far less than one pod's
        sums: dict[str, list[float]] = {}
        # only the entries of templated pods are read (a node's NodeMetric lists every pod on it)
        for entry in status.get("podsMetric") or ():
            if not isinstance(entry, Mapping):
                continue
            pod = templated.get(f"{entry.get('namespace')}/{entry.get('name')}")
            if pod is None:
                continue
            usage = entry.get("podUsage")
            res = usage.get("resources") if isinstance(usage, Mapping) else None
            if not isinstance(res, Mapping):
                continue
            try:
                cpu = canonical("cpu", res["cpu"]) if "cpu" in res else None
                mem = canonical("memory", res["memory"]) if "memory" in res else None
            except (KoordfwError, ValueError, TypeError):
                continue
            cpu_req, mem_req = original_requests(pod)
            for key in _templates(pod.annotations.get(ANNOTATION_TEMPLATES) or ""):
                acc = sums.setdefault(key, [0.0, 0.0, 0.0, 0.0])
                if cpu is not None:
                    acc[0] += cpu_req
                    acc[1] += cpu
                if mem is not None:
                    acc[2] += mem_req
                    acc[3] += mem
        for key, (cr, cu, mr, mu) in sums.items():
            self.profiler.observe([key], now=t, cpu_request=int(cr), cpu_usage=cu, memory_request=int(mr),
                                  memory_usage=mu, weight=weight)
        return None

    @hookimpl
    def mutate_pod(self, pod: dict[str, Any], operation: str, args: ProfileArgs,
                   handle: AdmissionHandle) -> dict[str, Any] | None:
        if operation != "CREATE" or not args.enable or not _is_be(pod):
            return None
        keys = templates_of((pod.get("metadata") or {}).get("annotations") or {})
        if not keys:
            return None
        self.profiler.args = args
        now = handle.now()
        ratios = {r: self.profiler.ratio(keys, r, now) for r in ("cpu", "memory")}
        if ratios["cpu"] is None and ratios["memory"] is None:
            return None
        totals = {"cpu": 0, "memory": 0}
        changed = False
        for c in (pod.get("spec") or {}).get("containers") or []:
            req = ((c.get("resources") or {}).get("requests")) or {}
            for name, value in list(req.items()):
                res = {BATCH_CPU: "cpu", "cpu": "cpu", BATCH_MEMORY: "memory", "memory": "memory"}.get(name)
                if res is None:
                    continue
                try:
                    # canonical: cpu in milli; batch-cpu is already an integer of milli-cores
                    v = canonical("cpu" if name == "cpu" else "memory", value)
                except (KoordfwError, ValueError, TypeError):
                    continue
                totals[res] += int(v)
                got = ratios[res]
                if got is None or v <= 0:
                    continue
                new = max(1, int(math.ceil(v * got[0])))
                if name == "cpu":
                    req[name] = f"{new}m"
                else:
                    req[name] = str(new)
                changed = True
        if not changed:
            return None
        anns = pod.setdefault("metadata", {}).setdefault("annotations", {})
        anns.setdefault(ANNOTATION_ORIGINAL_REQUESTS, json.dumps(totals, sort_keys=True))
        return pod


__all__ = ["ANNOTATION_ORIGINAL_REQUESTS", "ANNOTATION_TEMPLATES", "ResourceProfile", "original_requests",
           "templates_of"]
