"""resource_profile: the decaying percentile profile, learning from NodeMetrics, right-sizing at admission."""

from __future__ import annotations

import json

import anyio
import pytest
from koordfw_resource_profile import (
    ANNOTATION_ORIGINAL_REQUESTS,
    ANNOTATION_TEMPLATES,
    ProfileArgs,
    Profiler,
    ResourceProfile,
)

from koordfw import build_registry
from koordfw.embed import PodAdmission, VirtualClock
from koordfw.extension import BATCH_CPU, BATCH_MEMORY
from koordfw.inputs import make_pod

HOUR = 3600.0


def test_percentile_with_margin_and_fallback() -> None:
    p = Profiler(ProfileArgs(min_weight=10))
    # 90 samples at 40 % of the request, 10 at 80 %: p95 is the 80 % bucket's upper edge
    for k in range(100):
        p.observe(["task:a", "all"], now=k, cpu_request=1000, cpu_usage=400 if k < 90 else 800, weight=1)
    ratio, key = p.ratio(["task:a", "all"], "cpu", now=100)
    assert key == "task:a"
    assert 0.80 * 1.10 <= ratio <= 0.80 * 1.03 * 1.10
    rec = p.recommend(["task:b", "all"], cpu_request=2000, memory_request=0, now=100)
    assert rec.cpu_key == "all" and rec.cpu == pytest.approx(2000 * ratio, abs=1)
    assert rec.memory == 0 and rec.memory_key == ""
    # an unknown template keeps the request; a ratio above 1 is capped at the request (max_ratio 1)
    assert p.recommend(["task:c"], cpu_request=500, memory_request=7, now=100).cpu == 500
    p.observe(["hot"], now=0, cpu_request=100, cpu_usage=300, weight=100)
    assert p.recommend(["hot"], cpu_request=100, memory_request=0, now=1).cpu == 100


def test_old_samples_count_less() -> None:
    p = Profiler(ProfileArgs(min_weight=1, cpu_half_life_hours=1))
    p.observe(["t"], now=0, cpu_request=1000, cpu_usage=900, weight=100)
    p.observe(["t"], now=10 * HOUR, cpu_request=1000, cpu_usage=200, weight=10)
    # ten half-lives later the old 100 weigh 0.1 against the new 10: the p95 is the new ratio
    r, _ = p.ratio(["t"], "cpu", now=10 * HOUR)
    assert r == pytest.approx(0.2 * 1.03 * 1.1, rel=0.04)


def test_bad_args_are_refused() -> None:
    with pytest.raises(ValueError, match="cpu_percentile"):
        ProfileArgs(cpu_percentile=0)
    with pytest.raises(ValueError, match="safety_margin_percent"):
        ProfileArgs(safety_margin_percent=-1)


def _metric(node: str, t: str, pods: dict[str, tuple[str, str]]) -> dict:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node},
            "status": {"updateTime": t, "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "1Gi"}}},
                       "podsMetric": [{"namespace": "batch", "name": n, "podUsage": {"resources": {"cpu": c, "memory": m}}}
                                      for n, (c, m) in pods.items()]}}


def test_learns_node_sums_from_nodemetrics_and_right_sizes_at_admission() -> None:
    plugin = ResourceProfile()
    args = ProfileArgs(min_weight=100)
    anns = {ANNOTATION_TEMPLATES: "pool:x"}
    pods = [make_pod(f"e{i}", "batch", requests={BATCH_CPU: "2000", BATCH_MEMORY: str(4 * 2**30)}, annotations=anns)
            for i in range(2)]
    node = type("N", (), {"name": "n1"})()
    # two pods on the node use 500m + 700m of 2 × 2000m: the node's sample is 30 %
    for k, t in enumerate(["2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z"]):
        plugin.node_resources(node=node, pods=pods, now=0.0, args=args,
                              metric=_metric("n1", t, {"e0": ("500m", "1Gi"), "e1": ("700m", "1Gi")}))
        if k == 0:
            assert plugin.profiler.ratio(["pool:x"], "cpu", now=0) is None  # 60 s: not enough yet
    # the same NodeMetric again is not a new sample
    plugin.node_resources(node=node, pods=pods, now=0.0, args=args,
                          metric=_metric("n1", "2026-01-01T00:10:00Z", {"e0": ("9", "1Gi")}))
    ratio, key = plugin.profiler.ratio(["pool:x"], "cpu", now=1767226200)
    assert key == "pool:x" and ratio == pytest.approx(0.3 * 1.1, rel=0.04)

    registry = build_registry({"pluginConfig": {"resource_profile": {"minWeight": 100}}},
                              plugins={"resource_profile": plugin}, only=())

    async def admit(manifest: dict) -> object:
        return await PodAdmission(registry, clock=VirtualClock(1767226200.0)).admit(manifest)

    manifest = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "new", "namespace": "batch", "annotations": dict(anns),
                             "labels": {"koordinator.sh/qosClass": "BE"}},
                "spec": {"priorityClassName": "koord-batch", "containers": [
                    {"name": "c", "resources": {"requests": {BATCH_CPU: "4000", BATCH_MEMORY: str(8 * 2**30)},
                                                "limits": {BATCH_CPU: "4000"}}}]}}
    pod = anyio.run(admit, manifest)
    assert 0.3 * 1.1 * 4000 <= pod.requests[BATCH_CPU] <= 0.31 * 1.03 * 1.1 * 4000 + 1
    assert pod.requests[BATCH_MEMORY] < 8 * 2**30
    assert json.loads(pod.annotations[ANNOTATION_ORIGINAL_REQUESTS]) == {"cpu": 4000, "memory": 8 * 2**30}
    assert pod.limits[BATCH_CPU] == 4000  # limits are the owner's
    # an LS pod, or one without templates, is left alone
    ls = {**manifest, "metadata": {**manifest["metadata"], "labels": {"koordinator.sh/qosClass": "LS"}},
          "spec": {"containers": manifest["spec"]["containers"]}}
    assert anyio.run(admit, ls).requests[BATCH_CPU] == 4000
    off = build_registry({"pluginConfig": {"resource_profile": {"enable": False}}},
                         plugins={"resource_profile": ResourceProfile()}, only=())
    assert anyio.run(lambda: PodAdmission(off).admit(manifest)).requests[BATCH_CPU] == 4000


def test_annotation_readers_kept_per_text_give_fresh_results() -> None:
    """templates_of and original_requests parse each distinct annotation text once: the same answers as
    parsing it, a fresh list each time, and a bad annotation still falls back to the requests."""
    from koordfw_resource_profile import original_requests, templates_of

    anns = {ANNOTATION_TEMPLATES: " task:a/1, class:M ,,all"}
    first = templates_of(anns)
    assert first == ["task:a/1", "class:M", "all"]
    first.append("x")  # the caller's list: the kept parse is not touched
    assert templates_of(anns) == ["task:a/1", "class:M", "all"] and templates_of({}) == []
    for raw, want in ((json.dumps({"cpu": 1500, "memory": 2048}), (1500, 2048)), ("not json", (2000, 4096)),
                      ("[1, 2]", (2000, 4096)), (json.dumps({"cpu": 7.9}), (7, 0))):
        pod = make_pod("p", requests={BATCH_CPU: "2000", BATCH_MEMORY: "4096"},
                       annotations={ANNOTATION_ORIGINAL_REQUESTS: raw})
        assert original_requests(pod) == want
        assert original_requests(pod) == want
