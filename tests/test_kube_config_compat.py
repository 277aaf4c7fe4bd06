"""Koordinator's and kube-scheduler's configuration, unchanged (issue 32, points 2 and 3): a
KubeSchedulerConfiguration (or the ConfigMap Koordinator ships it in) maps to koordfw's plugins and args
(koordfw.core.kubeconfig_compat), kube's NodeResourcesFit scoring semantics come with its
``scoringStrategy``, SchedulingHint places pods on their hinted nodes, and an unknown plugin name anywhere
is an exit-2 error with a did-you-mean."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from koordfw import ConfigError, Stash
from koordfw.builtin import node_resources_fit as nrf
from koordfw.cli import main
from koordfw.core.cluster import ClusterState, NodeBatch
from koordfw.core.kubeconfig_compat import NO_COUNTERPART, PLUGINS
from koordfw.core.model import make_node, make_pod
from koordfw.core.plugins import Registry
from koordfw.core.profile import load_profile, profile_from_dict
from koordfw.engines.embedded import build_registry
from koordfw.testing import ClusterBuilder, schedule

ROOT = Path(__file__).resolve().parent.parent
KOORD_CONFIG = ROOT / "examples" / "koordinator" / "scheduler-config.yaml"
EXAMPLES = ROOT / "examples" / "colocation"
Gi, Mi = 2**30, 2**20


def names(reg: Registry, point: str) -> list[str]:
    if any(info.obj is None for info in reg.plugins.values()):
        reg.bind(lambda name: None)  # construct the class plugins (no engine here)
    return [i.plugin for i in reg.impls(point)]


# -- Koordinator's shipped configuration ----------------------------------------------------------------

def test_koordinators_shipped_config_is_the_repositorys_file_unchanged():
    text = KOORD_CONFIG.read_text()
    assert "config/manager/scheduler-config.yaml" in text and "koordinator-sh/koordinator" in text
    doc = yaml.safe_load(text)
    assert doc["kind"] == "ConfigMap"
    inner = yaml.safe_load(doc["data"]["koord-scheduler-config"])
    assert inner["apiVersion"] == "kubescheduler.config.k8s.io/v1" and inner["kind"] == "KubeSchedulerConfiguration"


def test_koordinators_shipped_config_maps_plugins_and_args():
    reg = build_registry(KOORD_CONFIG)
    prof = reg.profile
    assert prof.scheduler_name == "koord-scheduler" and prof.warnings == []
    # queueSort: "*" disabled, PrioritySort enabled
    assert names(reg, "queue_sort") == ["priority_sort"]
    # bind: "*" disabled, then Reservation and DefaultBinder
    assert names(reg, "bind") == ["reservation", "default_binder"]
    # postFilter: "*" disabled, then Reservation, Coscheduling, ElasticQuota, DefaultPreemption (those that have one)
    post = names(reg, "post_filter")
    assert post == [n for n in ("reservation", "gang", "elastic_quota", "default_preemption") if n in post]
    assert post[-1] == "default_preemption"
    # SchedulingHint runs at pre_filter; DefaultPreBind is koordfw's binder (nothing to enable)
    assert "scheduling_hint" in names(reg, "pre_filter")
    assert prof.weight("reservation") == 5000 and prof.weight("load_aware") == 1
    # args: apiVersion/kind dropped, kube's scoringStrategy object read, the rest field for field
    fit = reg.args["node_resources_fit"]
    assert fit.scoring_strategy == "LeastAllocated"
    assert [(r.name, r.weight) for r in fit.resources] == [
        ("cpu", 1), ("memory", 1), ("kubernetes.io/batch-cpu", 1), ("kubernetes.io/batch-memory", 1)]
    la = reg.args["load_aware"]
    assert la.filter_expired_node_metrics is False and la.node_metric_expiration_seconds == 300
    assert la.resource_weights == {"cpu": 1, "memory": 1} and la.usage_thresholds == {"cpu": 0, "memory": 0}
    assert la.estimated_scaling_factors == {"cpu": 85, "memory": 70}
    assert reg.args["scheduling_hint"].max_hint_nodes == 100


def test_simulate_runs_with_koordinators_shipped_config(capsys):
    assert main(["simulate", "--profile", str(KOORD_CONFIG), str(EXAMPLES), "-o", "json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert "warning" not in captured.err
    assert out["summary"]["bound"] > 0
    # the shipped config switches off expired-metric filtering (filterExpiredNodeMetrics: false) and the
    # usage thresholds (0): no node is refused for its old NodeMetric
    assert not any("NodeMetric" in (p["reason"] or "") for p in out["pods"])


def test_the_doc_table_lists_every_mapped_name():
    doc = (ROOT / "docs" / "koordinator-config.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| `?([\w—-]+)`? \|", doc, flags=re.M))
    for name, m in PLUGINS.items():
        assert rows.get(name) == (m.koordfw or "—"), name
    for name in NO_COUNTERPART:
        assert rows.get(name) == "—", name


# -- kube-scheduler's configuration ---------------------------------------------------------------------

def kube_config(strategy: dict, **profile) -> dict:
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "default-scheduler",
                          "plugins": {"score": {"disabled": [{"name": "*"}],
                                                "enabled": [{"name": "NodeResourcesFit", "weight": 1}]}},
                          "pluginConfig": [{"name": "NodeResourcesFit", "args": {
                              "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "NodeResourcesFitArgs",
                              "scoringStrategy": strategy}}], **profile}]}


RESOURCES = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
             {"name": "kubernetes.io/batch-cpu", "weight": 2}, {"name": "ephemeral-storage", "weight": 1}]


def three_nodes() -> ClusterBuilder:
    b = ClusterBuilder()
    for name, alloc in (("n1", {"cpu": "4", "memory": "8Gi", "kubernetes.io/batch-cpu": "8000"}),
                        ("n2", {"cpu": "8", "memory": "16Gi", "kubernetes.io/batch-cpu": "2000"}),
                        ("n3", {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "10Gi"})):
        b.manifests.nodes.append(make_node(name, allocatable={**alloc, "pods": "110"}))
    b.pod("be", node="n3")  # no requests: kube counts 100m / 200Mi for it when scoring
    return b


def scores(strategy: dict, pod) -> dict[str, int]:
    reg = build_registry(kube_config(strategy), autoload=False)
    args = reg.args["node_resources_fit"]
    cluster = ClusterState()
    for n in three_nodes().build().nodes:
        cluster.add_node(n)
    for p in three_nodes().build().pods:
        cluster.add_pod(p)
    idx = np.arange(cluster.num_nodes, dtype=np.int64)
    got = nrf.score(pod, NodeBatch(cluster, idx), args, SimpleNamespace(stash=Stash()))  # the plugin's handle: its stash
    return dict(zip([v.name for v in cluster.views], got.tolist()))


def test_least_allocated_with_kubes_semantics_hand_derived():
    pod = make_pod("p", "default", requests={"cpu": "1", "memory": "1Gi"})
    # n1: cpu (4000-1000)*100//4000 = 75, memory 7Gi*100//8Gi = 87; batch-cpu not requested (an extended
    #     resource: skipped), ephemeral-storage not advertised (left out): (75 + 87) // 2 = 81
    # n2: cpu 7000*100//8000 = 87, memory 15Gi*100//16Gi = 93: (87 + 93) // 2 = 90
    # n3: cpu 4000 - (100 of be + 1000) = 2900 -> 72, memory 8192Mi - (200Mi + 1024Mi) -> 6968*100//8192 = 85,
    #     ephemeral-storage 100: (72 + 85 + 100) // 3 = 85
    assert scores({"type": "LeastAllocated", "resources": RESOURCES}, pod) == {"n1": 81, "n2": 90, "n3": 85}


def test_most_allocated_with_kubes_semantics_hand_derived():
    pod = make_pod("p", "default", requests={"cpu": "1", "memory": "1Gi"})
    # n1: cpu 25, memory 12 -> 18; n2: cpu 12, memory 6 -> 9;
    # n3: cpu 1100*100//4000 = 27, memory 1224*100//8192 = 14, ephemeral-storage 0: 41 // 3 = 13
    assert scores({"type": "MostAllocated", "resources": RESOURCES}, pod) == {"n1": 18, "n2": 9, "n3": 13}


def test_requested_extended_resource_counts_with_its_weight():
    pod = make_pod("p", "default", requests={"cpu": "1", "memory": "1Gi", "kubernetes.io/batch-cpu": "1000"})
    # n1: 75, 87, batch (8000-1000)*100//8000 = 87 weight 2: (75 + 87 + 174) // 4 = 84
    # n2: 87, 93, batch 1000*100//2000 = 50 weight 2: (87 + 93 + 100) // 4 = 70
    # n3: no batch-cpu (left out): (72 + 85 + 100) // 3 = 85
    assert scores({"type": "LeastAllocated", "resources": RESOURCES}, pod) == {"n1": 84, "n2": 70, "n3": 85}


def test_containers_without_requests_count_kubes_defaults():
    pod = make_pod("p", "default")
    # n1: cpu (4000-100)*100//4000 = 97, memory (8192-200)*100//8192 = 97
    got = scores({"type": "LeastAllocated", "resources": RESOURCES[:2]}, pod)
    assert got["n1"] == 97


def test_requested_to_capacity_ratio_hand_derived():
    pod = make_pod("p", "default", requests={"cpu": "1", "memory": "1Gi"})
    shape = {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}
    # utilisation -> score × 10 on the line (0,0)-(100,100); only resources scoring > 0 count, rounded:
    # n1: cpu 25, memory 1024*100//8192 = 12 -> round(37/2) = 19; n2: 12, 6 -> 9
    got = scores({"type": "RequestedToCapacityRatio", "resources": RESOURCES[:2],
                  "requestedToCapacityRatio": shape}, pod)
    assert got["n1"] == 19 and got["n2"] == 9


@pytest.mark.parametrize("strategy, node", [("LeastAllocated", "n2"), ("MostAllocated", "n1")])
def test_kube_v1_config_places_by_its_scoring_strategy(strategy, node):
    b = three_nodes().pod("p", cpu="1", memory="1Gi")
    res = schedule(b, profile=kube_config({"type": strategy, "resources": RESOURCES}))
    assert res.placements()["default/p"] == node


def test_multi_point_and_star_disabled():
    cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1beta3", "kind": "KubeSchedulerConfiguration",
           "profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "ImageLocality", "weight": 3}]},
                                     "score": {"disabled": [{"name": "*"}],
                                               "enabled": [{"name": "TaintToleration", "weight": 2}]},
                                     "filter": {"disabled": [{"name": "NodeAffinity"}, {"name": "NodeName"}]}}}]}
    reg = build_registry(cfg, autoload=False)
    # multiPoint enables ImageLocality at its points; "*" at score keeps only what score and multiPoint enable
    assert names(reg, "score") == ["image_locality", "taint_toleration"]
    assert reg.profile.weight("taint_toleration") == 2
    assert "node_selector" not in names(reg, "filter") and "taint_toleration" in names(reg, "filter")


def test_v1beta2_percentage_and_backoff_are_read():
    cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1beta2", "kind": "KubeSchedulerConfiguration",
           "percentageOfNodesToScore": 30, "podInitialBackoffSeconds": 2, "podMaxBackoffSeconds": 20,
           "leaderElection": {"leaderElect": False}, "profiles": [{"schedulerName": "x"}]}
    prof = profile_from_dict(cfg)
    assert (prof.percentage_of_nodes_to_score, prof.pod_initial_backoff_seconds, prof.pod_max_backoff_seconds,
            prof.scheduler_name) == (30, 2, 20, "x")


def test_koordinator_args_convert_field_by_field():
    cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration", "profiles": [{
        "pluginConfig": [
            {"name": "ElasticQuota", "args": {"kind": "ElasticQuotaArgs", "delayEvictTime": "2m",
                                              "revokePodInterval": "1s", "quotaGroupNamespace": "koordinator-system"}},
            {"name": "Coscheduling", "args": {"defaultTimeout": "300s", "controllerWorkers": 2}},
            {"name": "DeviceShare", "args": {"scoringStrategy": {"type": "MostAllocated", "resources": [
                {"name": "koordinator.sh/gpu-core", "weight": 1}]}}},
            {"name": "SchedulingHint", "args": {"maxHintNodes": 3}},
            {"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 20}}]}]}
    reg = build_registry(cfg)
    assert reg.args["elastic_quota"].delay_evict_time == 120 and reg.args["elastic_quota"].revoke_pod_interval == 1
    assert reg.args["gang"].default_timeout == "300s"
    assert reg.args["gpu_share"].policy == "binpack"
    assert reg.args["scheduling_hint"].max_hint_nodes == 3
    assert reg.args["default_preemption"].min_candidate_nodes_percentage == 20


@pytest.mark.parametrize("cfg, message", [
    ({"profiles": [{"plugins": {"filter": {"enabled": [{"name": "NodeResourcesFitPlus"}]}}}]},
     "plugin 'NodeResourcesFitPlus' (Koordinator's per-resource scoring strategies) has no koordfw counterpart"),
    ({"profiles": [{"plugins": {"score": {"enabled": [{"name": "LoadAwareSchedulin"}]}}}]},
     "unknown plugin 'LoadAwareSchedulin'"),
    ({"profiles": [{"pluginConfig": [{"name": "LoadAwareScheduling", "args": {"kind": "NodeResourcesFitArgs"}}]}]},
     "kind: 'NodeResourcesFitArgs' is not LoadAwareSchedulingArgs"),
    ({"profiles": [{"pluginConfig": [{"name": "LoadAwareScheduling", "args": {"usageThreshold": {"cpu": 1}}}]}]},
     "usageThreshold"),
    ({"apiVersion": "kubescheduler.config.k8s.io/v2"}, "apiVersion: 'kubescheduler.config.k8s.io/v2' is not read"),
    ({"extenders": [{"urlPrefix": "http://x"}]}, "extenders: koordfw calls no scheduler extenders"),
    ({"profiles": [{}, {"schedulerName": "b"}]}, "koordfw runs one profile per process"),
])
def test_what_cannot_be_carried_over_is_an_error(cfg, message):
    raw = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration", **cfg}
    with pytest.raises(ConfigError) as e:
        build_registry(raw)
    assert message in str(e.value)


def test_unknown_kube_name_suggests_the_close_one():
    raw = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
           "profiles": [{"plugins": {"score": {"enabled": [{"name": "load-aware"}]}}}]}
    with pytest.raises(ConfigError, match=r"unknown plugin 'load-aware' \(did you mean 'load_aware'\?\)"):
        build_registry(raw)


def test_balanced_allocation_scores_as_kubes(tmp_path, capsys):
    """kube's NodeResourcesBalancedAllocation maps to node_resources_balanced_allocation (opt-in in koordfw's
    own profile): (1 - std of the requested fractions) * 100 with the pod's own requests. A 2-core / 2Gi
    pod on n1 (4 cores, 8Gi) leaves fractions 0.5 and 0.25: std 0.125, score 87; on n2 (8, 16Gi) 0.25 and
    0.125: std 0.0625, score 93; on n3 the node's BE pod has no requests (no 100m / 200Mi here: kube's
    useRequested), so 0.5 and 0.25 again: 87."""
    cfg = kube_config({"type": "LeastAllocated"})
    cfg["profiles"][0]["plugins"]["score"]["enabled"] = [{"name": "NodeResourcesBalancedAllocation", "weight": 1}]
    reg = build_registry(cfg, autoload=False)
    assert [i.plugin for i in reg.impls("score")] == ["node_resources_balanced_allocation"]
    assert "node_resources_balanced_allocation" not in [i.plugin for i in build_registry(None, autoload=False)
                                                        .impls("score")]  # opt-in
    from koordfw.builtin import node_resources_balanced_allocation as nrba

    cluster = ClusterState()
    b = three_nodes()
    for n in b.build().nodes:
        cluster.add_node(n)
    for p in b.build().pods:
        cluster.add_pod(p)
    idx = np.arange(cluster.num_nodes, dtype=np.int64)
    pod = make_pod("p", "default", requests={"cpu": "2", "memory": "2Gi"})
    got = nrba.score(pod, NodeBatch(cluster, idx), reg.args["node_resources_balanced_allocation"],
                     SimpleNamespace(stash=Stash()))
    assert dict(zip([v.name for v in cluster.views], got.tolist())) == {"n1": 87, "n2": 93, "n3": 87}
    f = tmp_path / "kube.yaml"
    f.write_text(yaml.safe_dump(cfg))
    assert main(["simulate", "--profile", str(f), str(EXAMPLES / "00-nodes.yaml"), "-o", "json"]) == 0
    assert "NodeResourcesBalancedAllocation" not in capsys.readouterr().err  # carried over: nothing to warn


# -- SchedulingHint -----------------------------------------------------------------------------------

HINT = "internal.scheduling.koordinator.sh/scheduling-hint"


def hinted(hint: object, *, key: str = HINT, cpu: str = "1") -> ClusterBuilder:
    b = ClusterBuilder().node("a", cpu="8").node("b", cpu="4").node("c", cpu="2")
    return b.pod("p", cpu=cpu, annotations={key: hint if isinstance(hint, str) else json.dumps(hint)})


def place(b: ClusterBuilder) -> str | None:
    return schedule(b).placements()["default/p"]


def test_scheduling_hint_required_nodes_restrict_the_candidates():
    # a (8 cores) would score best; the hint allows b and c only
    assert place(hinted({"nodeNames": ["b", "c"]})) == "b"
    assert place(hinted({"nodeNames": ["c"]}, cpu="3")) is None  # c cannot hold 3 cores


def test_scheduling_hint_preferred_nodes_first_that_fits():
    assert place(hinted({"preferredNodeNames": ["c", "b"]})) == "c"  # not the best-scored, the first that fits
    assert place(hinted({"preferredNodeNames": ["c", "b"]}, cpu="3")) == "b"  # c is too small: the next
    assert place(hinted({"preferredNodeNames": ["c"]}, cpu="3")) == "a"  # none fits: scheduled as without
    # preferred nodes outside the required ones are not taken
    assert place(hinted({"nodeNames": ["a", "b"], "preferredNodeNames": ["c", "b"]})) == "b"
    # the deprecated annotation is read when the internal one is absent
    assert place(hinted({"preferredNodeNames": ["c"]}, key="scheduling.koordinator.sh/scheduling-hint")) == "c"


def test_scheduling_hint_max_hint_nodes_truncates():
    b = hinted({"preferredNodeNames": ["x", "c"]})
    prof = {"pluginConfig": {"scheduling_hint": {"maxHintNodes": 1}}}
    assert schedule(b, profile=prof).placements()["default/p"] == "a"  # only "x" tried (no such node)


def test_scheduling_hint_invalid_json_is_an_error_status():
    res = schedule(hinted("{not json"))
    assert res.placements()["default/p"] is None
    assert "invalid scheduling hint" in res.results[next(iter(res.results))].reason


# -- unknown names anywhere: exit 2 with a did-you-mean ----------------------------------------------------

def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "koordfw", *args], capture_output=True, text=True)


def test_disable_typo_exits_2_suggesting_the_plugin():
    p = run_cli("simulate", str(EXAMPLES / "00-nodes.yaml"), "--disable", "load-aware")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--disable: unknown plugin 'load-aware' (did you mean 'load_aware'?)" in p.stderr


def test_koordinator_name_in_disable_points_at_koordfws():
    with pytest.raises(ConfigError, match="Koordinator's/kube-scheduler's name of 'load_aware'"):
        build_registry(None, disable=["LoadAwareScheduling"])


@pytest.mark.parametrize("profile, where", [
    ({"disable": ["gpushare"]}, "disable: unknown plugin 'gpushare' (did you mean 'gpu_share'?)"),
    ({"plugins": {"filter": {"disabled": ["node-ports"]}}}, "unknown plugin 'node-ports' (did you mean 'node_ports'"),
    ({"plugins": {"score": {"enabled": ["imagelocality"]}}}, "(did you mean 'image_locality'?)"),
    ({"pluginConfig": {"loadaware": {}}}, "unknown plugin 'loadaware' (did you mean 'load_aware'?)"),
])
def test_unknown_names_in_a_profile_suggest(profile, where):
    with pytest.raises(ConfigError) as e:
        build_registry(profile_from_dict(profile, source="p.yaml"))
    assert where in str(e.value)


def test_unknown_name_in_a_kube_config_file_exits_2(tmp_path):
    f = tmp_path / "kube.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                                 "profiles": [{"plugins": {"filter": {"enabled": [{"name": "NodeResourceFit"}]}}}]}))
    p = run_cli("simulate", str(EXAMPLES / "00-nodes.yaml"), "--profile", str(f))
    assert p.returncode == 2 and "unknown plugin 'NodeResourceFit'" in p.stderr and "did you mean" in p.stderr


def test_agent_plan_takes_disable_after_plan(tmp_path, capsys):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"node": {"name": "n1", "allocatable": {"cpu": "4", "memory": "8Gi"}}, "pods": []}))
    assert main(["agent", "plan", "--state", str(state), "--disable", "be_suppress"]) == 0
    capsys.readouterr()
    assert main(["agent", "plan", "--state", str(state), "--disable", "be-suppress"]) == 2
    assert "did you mean 'be_suppress'" in capsys.readouterr().err


def test_profile_file_loads_the_configmap_form(tmp_path):
    prof = load_profile(KOORD_CONFIG)
    assert prof.source.endswith("data.koord-scheduler-config") and prof.scheduler_name == "koord-scheduler"


def test_scheduler_takes_kube_schedulers_config_flag():
    from koordfw.cli import build_parser

    args = build_parser().parse_args(["scheduler", "--config", str(KOORD_CONFIG)])
    assert args.profile == str(KOORD_CONFIG)
    assert build_registry(args.profile).profile.scheduler_name == "koord-scheduler"


def test_ignored_resource_groups_are_not_filtered():
    b = ClusterBuilder().node("n1", cpu="4")
    b.pod("p", requests={"cpu": "1", "example.com/foo": "1"})
    cfg = kube_config({"type": "LeastAllocated"})
    assert schedule(b, profile=cfg).placements()["default/p"] is None  # no node has example.com/foo
    cfg["profiles"][0]["pluginConfig"][0]["args"]["ignoredResourceGroups"] = ["example.com"]
    assert schedule(b, profile=cfg).placements()["default/p"] == "n1"


def _typed(kind: str, **args) -> dict:
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": kind, **args}


#: what ``kube-scheduler --write-config-to`` writes for its default profile (v1)
KUBE_DEFAULTS = {
    "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
    "clientConnection": {"acceptContentTypes": "", "burst": 100, "contentType": "application/vnd.kubernetes.protobuf",
                         "kubeconfig": "", "qps": 50},
    "enableContentionProfiling": True, "enableProfiling": True, "parallelism": 16,
    "leaderElection": {"leaderElect": True, "leaseDuration": "15s", "renewDeadline": "10s",
                       "resourceLock": "leases", "resourceName": "kube-scheduler",
                       "resourceNamespace": "kube-system", "retryPeriod": "2s"},
    "percentageOfNodesToScore": 0, "podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 10,
    "profiles": [{
        "schedulerName": "default-scheduler",
        "pluginConfig": [
            {"name": "DefaultPreemption", "args": _typed("DefaultPreemptionArgs", minCandidateNodesAbsolute=100,
                                                         minCandidateNodesPercentage=10)},
            {"name": "InterPodAffinity", "args": _typed("InterPodAffinityArgs", hardPodAffinityWeight=1,
                                                        ignorePreferredTermsOfExistingPods=False)},
            {"name": "NodeAffinity", "args": _typed("NodeAffinityArgs")},
            {"name": "NodeResourcesBalancedAllocation", "args": _typed(
                "NodeResourcesBalancedAllocationArgs", resources=[{"name": "cpu", "weight": 1},
                                                                  {"name": "memory", "weight": 1}])},
            {"name": "NodeResourcesFit", "args": _typed("NodeResourcesFitArgs", scoringStrategy={
                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                "type": "LeastAllocated"})},
            {"name": "PodTopologySpread", "args": _typed("PodTopologySpreadArgs", defaultingType="System")},
            {"name": "VolumeBinding", "args": _typed("VolumeBindingArgs", bindTimeoutSeconds=600)}],
        "plugins": {"bind": {}, "filter": {}, "multiPoint": {"enabled": [
            {"name": "SchedulingGates", "weight": 0}, {"name": "PrioritySort", "weight": 0},
            {"name": "NodeUnschedulable", "weight": 0}, {"name": "NodeName", "weight": 0},
            {"name": "TaintToleration", "weight": 3}, {"name": "NodeAffinity", "weight": 2},
            {"name": "NodePorts", "weight": 0}, {"name": "NodeResourcesFit", "weight": 1},
            {"name": "VolumeRestrictions", "weight": 0}, {"name": "EBSLimits", "weight": 0},
            {"name": "GCEPDLimits", "weight": 0}, {"name": "NodeVolumeLimits", "weight": 0},
            {"name": "AzureDiskLimits", "weight": 0}, {"name": "VolumeBinding", "weight": 0},
            {"name": "VolumeZone", "weight": 0}, {"name": "PodTopologySpread", "weight": 2},
            {"name": "InterPodAffinity", "weight": 2}, {"name": "DefaultPreemption", "weight": 0},
            {"name": "NodeResourcesBalancedAllocation", "weight": 1}, {"name": "ImageLocality", "weight": 1},
            {"name": "DefaultBinder", "weight": 0}]},
            "permit": {}, "postBind": {}, "postFilter": {}, "preBind": {}, "preEnqueue": {}, "preFilter": {},
            "preScore": {}, "queueSort": {}, "reserve": {}, "score": {}}}]}


def test_kube_schedulers_own_default_config_dump_loads():
    reg = build_registry(KUBE_DEFAULTS, autoload=False)
    prof = reg.profile
    assert prof.scheduler_name == "default-scheduler"
    assert prof.warnings == []  # NodeResourcesBalancedAllocation is carried over too
    assert "node_resources_balanced_allocation" in names(reg, "score")
    assert prof.weight("node_resources_balanced_allocation") == 1
    assert names(reg, "bind") == ["default_binder"]
    assert prof.weight("taint_toleration") == 3 and prof.weight("node_selector") == 2
    assert reg.args["pod_topology_spread"].defaulting_type == "System"
    assert reg.args["node_resources_fit"].scoring_strategy == "LeastAllocated"
    res = schedule(three_nodes().pod("p", cpu="1", memory="1Gi"), profile=KUBE_DEFAULTS)
    assert res.placements()["default/p"] == "n2"
