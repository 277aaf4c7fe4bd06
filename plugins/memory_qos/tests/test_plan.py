"""memory_qos's values and writes, ported from Koordinator's
``pkg/koordlet/qosmanager/plugins/cgreconcile/cgroup_reconcile_test.go`` (``TestCgroupResourceReconcile_
calculateResources``, ``TestCgroupResourcesReconcile_getMergedPodResourceQoS``) and the leveled update of
``resourceexecutor.LeveledUpdateBatch``.

Koordinator's tests hand the reconciler partial class configs (``LSRClass: {}``), which a koordlet never
sees: its NodeSLO is merged over the complete defaults first. Here every class is complete (a class not
enabled is NoneMemoryQOS), so the QoS levels and pods of such classes also get their priority knobs (0);
the cases say where that differs from Koordinator's expectations.
"""

from __future__ import annotations

import json

import pytest
from koordfw_memory_qos.config import DEFAULTS, NONE, MemoryQOSArgs, parse_pod_policy, pod_settings
from koordfw_memory_qos.plan import MAX_INT64, PAGE_SIZE, compute, leveled_writes
from koordfw_memory_qos.plugin import MemoryQoS

from koordfw import NodeState, PodState
from koordfw.core.model import pod_from_manifest
from koordfw.core.profile import structure_args

G = 1 << 30  # testingPodMemRequestLimitBytes
KUBE_DIRS = {"Guaranteed": "kubepods", "Burstable": "kubepods/burstable", "BestEffort": "kubepods/besteffort"}


def mock_pod(kube_qos: str, qos: str, uid: str = "test_pod", memory_qos: dict | None = None,
             phase: str = "Running") -> PodState:
    """testutil.MockTestPodWithQOS: containers ``test`` (no resources) and ``main`` (1Gi, batch for BE)."""
    if qos == "BE":
        res = {"requests": {"kubernetes.io/batch-cpu": "1024", "kubernetes.io/batch-memory": "1Gi"},
               "limits": {"kubernetes.io/batch-cpu": "1024", "kubernetes.io/batch-memory": "1Gi"}}
    else:
        res = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    meta: dict = {"name": uid.replace("_", "-"), "uid": uid, "labels": {"koordinator.sh/qosClass": qos} if qos else {}}
    if memory_qos is not None:
        meta["annotations"] = {"koordinator.sh/memoryQOS": json.dumps(memory_qos)}
    pod = pod_from_manifest({"metadata": meta, "spec": {"containers": [{"name": "test"}, {"name": "main", "resources": res}]},
                             "status": {"phase": phase, "containerStatuses": [
                                 {"name": "test", "containerID": "docker://test"},
                                 {"name": "main", "containerID": "docker://main"}]}})
    level = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}[kube_qos]
    return PodState(uid=uid, pod=pod, qos=pod.qos_class, kube_qos=kube_qos, cgroup_dir=f"kubepods/{level}pod{uid}")


def node(*pods: PodState, memory: int = G, version: int = 2, cgroups: dict | None = None) -> NodeState:
    return NodeState(name="test-node", cgroup_version=version, capacity={"cpu": 1000, "memory": memory},
                     allocatable={"cpu": 1000, "memory": memory}, pods=pods, cgroups=cgroups or {})


def args(**classes) -> MemoryQOSArgs:
    return structure_args("memory_qos", MemoryQOSArgs, classes)


def cls(enable=True, *values):
    keys = ("minLimitPercent", "lowLimitPercent", "throttlingPercent", "wmarkRatio", "wmarkScalePermill",
            "wmarkMinAdj", "oomKillGroup", "priority", "priorityEnable")
    return {"enable": enable, **dict(zip(keys, values))}


#: testutil.DefaultQOSStrategy(): every class enabled, no protection, async reclaim at 95 (BE 80)
TESTUTIL_DEFAULT = {"lsrClass": cls(True, 0, 0, 0, 95, 20, 0, 0, 0, 0), "lsClass": cls(True, 0, 0, 0, 95, 20, 0, 0, 0, 0),
                    "beClass": cls(True, 0, 0, 0, 80, 20, 0, 0, 0, 0)}

PRIO = (("memory.priority", 0), ("memory.use_priority_oom", 0), ("memory.oom.group", 0))


def cg(dir_: str, mn=None, low=None, high=None, wmark=None, prio=PRIO) -> list[tuple[str, str, int]]:
    """One cgroup's expected values in makeCgroupResources' order; ``wmark``: (ratio, scale, minAdj)."""
    vals = [("memory.min", mn), ("memory.low", low), ("memory.high", high)]
    if wmark is not None:
        vals += list(zip(("memory.wmark_ratio", "memory.wmark_scale_factor", "memory.wmark_min_adj"), wmark))
    return [(dir_, f, v) for f, v in [*vals, *prio] if v is not None]


def flat(level) -> list[tuple[str, str, int]]:
    return [(cv.dir, f, v) for cv in level for f, v in cv.values]


LS_DIR = SYS_DIR = "kubepods/burstable/podtest_pod"
BE_DIR, BE2_DIR = "kubepods/besteffort/podtest_pod", "kubepods/besteffort/podtest_pod_be"
BE_AUTO = {"policy": "auto", "minLimitPercent": 100, "lowLimitPercent": 0, "throttlingPercent": 80, "wmarkRatio": 95,
           "wmarkScalePermill": 20, "wmarkMinAdj": 50}
BE_AUTO_1 = {**BE_AUTO, "minLimitPercent": 50, "throttlingPercent": 40}


def _ls_containers(d, wmark):
    return cg(f"{d}/test", 0, 0, MAX_INT64, wmark) + cg(f"{d}/main", 0, 0, MAX_INT64, wmark)


CASES = {
    "single pod using node-level config": (
        TESTUTIL_DEFAULT, [mock_pod("Burstable", "LS")],
        cg("kubepods", 0, 0) + cg("kubepods/burstable", 0, 0) + cg("kubepods/besteffort"),
        cg(LS_DIR, 0, 0, None, (95, 20, 0)),
        _ls_containers(LS_DIR, (95, 20, 0))),
    # Koordinator's node config is empty here: no priority knobs on the QoS levels, none on burstable at all
    "single pod using pod-level config": (
        {}, [mock_pod("BestEffort", "BE", memory_qos=BE_AUTO)],
        cg("kubepods", G, 0) + cg("kubepods/burstable") + cg("kubepods/besteffort", G, 0),
        cg(BE_DIR, G, 0, None, (95, 20, 50)),
        cg(f"{BE_DIR}/test", 0, 0, (G * 80 // 100) // PAGE_SIZE * PAGE_SIZE, (95, 20, 50))
        + cg(f"{BE_DIR}/main", G, 0, G, (95, 20, 50))),
    # Koordinator's LS class lacks the priority fields: no priority knobs for the LS pod there
    "multiple pods": (
        {"lsClass": cls(False, 0, 0, 0, 0, 50, 0)},
        # Koordinator's two mock pods share a uid; here they have their own (as on a node)
        [mock_pod("Burstable", "LS"), mock_pod("BestEffort", "BE", uid="test_pod_be", memory_qos=BE_AUTO)],
        cg("kubepods", G, 0) + cg("kubepods/burstable", 0, 0) + cg("kubepods/besteffort", G, 0),
        cg(LS_DIR, 0, 0, None, (0, 50, 0)) + cg(BE2_DIR, G, 0, None, (95, 20, 50)),
        _ls_containers(LS_DIR, (0, 50, 0))
        + cg(f"{BE2_DIR}/test", 0, 0, (G * 80 // 100) // PAGE_SIZE * PAGE_SIZE, (95, 20, 50))
        + cg(f"{BE2_DIR}/main", G, 0, G, (95, 20, 50))),
    "single pod with memory.high is no less than memory.min": (
        {}, [mock_pod("BestEffort", "BE", memory_qos=BE_AUTO_1)],
        cg("kubepods", G // 2, 0) + cg("kubepods/burstable") + cg("kubepods/besteffort", G // 2, 0),
        cg(BE_DIR, G // 2, 0, None, (95, 20, 50)),
        cg(f"{BE_DIR}/test", 0, 0, (G * 40 // 100) // PAGE_SIZE * PAGE_SIZE, (95, 20, 50))
        + cg(f"{BE_DIR}/main", G // 2, 0, G // PAGE_SIZE * PAGE_SIZE, (95, 20, 50))),
    "single SYSTEM pod using node-level config": (
        {"systemClass": {"enable": True}}, [mock_pod("Burstable", "SYSTEM")],
        cg("kubepods", 0, 0) + cg("kubepods/burstable", 0, 0) + cg("kubepods/besteffort"),
        cg(SYS_DIR, 0, 0, None, (0, 50, 0)),
        _ls_containers(SYS_DIR, (0, 50, 0))),
    "ignore non-running pod": (
        TESTUTIL_DEFAULT, [mock_pod("Burstable", "LS", phase="Succeeded")],
        cg("kubepods") + cg("kubepods/burstable") + cg("kubepods/besteffort"), [], []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_calculate_resources(name):
    cfg, pods, want_qos, want_pods, want_containers = CASES[name]
    plugin = MemoryQoS()
    ns = node(*pods)
    got = compute(ns, args(**cfg), plugin._policies(ns))
    assert flat(got.qos) == want_qos
    assert flat(got.pods) == want_pods
    assert flat(got.containers) == want_containers


# -- getMergedPodResourceQoS ------------------------------------------------------------------------

BE_TESTUTIL = DEFAULTS["BE"].merged({"wmark_ratio": 80, "wmark_min_adj": 0})


@pytest.mark.parametrize("name, node_cfg, labels_qos, annotation, want", [
    ("node enabled, use node config", TESTUTIL_DEFAULT, "BE", None, BE_TESTUTIL),
    ("pod policy is None, use pod config", {"beClass": {"enable": False}}, "BE", {"policy": "none"}, NONE),
    ("pod policy is None even if node enabled", TESTUTIL_DEFAULT, "BE", {"policy": "none", "minLimitPercent": 100},
     NONE),
    ("pod policy is Auto, use pod config even if node disabled", {}, "BE", {"policy": "auto"}, DEFAULTS["BE"]),
    ("pod policy is Auto, use merged pod config", {"beClass": {"enable": False}}, "BE",
     {"policy": "auto", "throttlingPercent": 90}, DEFAULTS["BE"].merged({"throttling_percent": 90})),
    ("pod policy is Auto, use merged pod config when qos=None, kubeQoS=Besteffort", {}, "",
     {"policy": "auto", "throttlingPercent": 90}, DEFAULTS["BE"].merged({"throttling_percent": 90})),
    # Test_calculateAndUpdateResources "pod enabled while node disabled": pod-level fields over None
    ("pod enabled while node disabled", {}, "LS", {"minLimitPercent": 100, "lowLimitPercent": 100},
     NONE.merged({"min_limit_percent": 100, "low_limit_percent": 100})),
    ("LSE uses the LSR class", {"lsrClass": {"enable": True, "minLimitPercent": 40}}, "LSE", None,
     DEFAULTS["LSR"].merged({"min_limit_percent": 40})),
])
def test_merged_pod_settings(name, node_cfg, labels_qos, annotation, want):
    kube = "BestEffort" if labels_qos in ("BE", "") else "Burstable"
    ps = mock_pod(kube, labels_qos, memory_qos=annotation)
    policy = parse_pod_policy(ps.annotations["koordinator.sh/memoryQOS"]) if annotation is not None else None
    qos = labels_qos or "BE"  # Koordinator's pod has no containers: kube QoS BestEffort, so class BE
    assert pod_settings(args(**node_cfg), qos, policy) == want


@pytest.mark.parametrize("raw, why", [
    ("{", "JSON"), ("[]", "expected a JSON object"), ('{"policy": 1}', "policy"),
    ('{"minLimitPercent": 101}', "minLimitPercent"), ('{"wmarkMinAdj": -26}', "wmarkMinAdj"),
    ('{"priority": true}', "priority"), ('{"throttlingPercent": 50.5}', "throttlingPercent"),
])
def test_a_bad_annotation_is_refused(raw, why):
    with pytest.raises(ValueError, match=why):
        parse_pod_policy(raw)


def test_a_bad_annotation_is_ignored_and_logged_once():
    from structlog.testing import capture_logs

    ps = mock_pod("Burstable", "LS")
    bad = PodState(uid=ps.uid, pod=pod_from_manifest({**ps.pod.raw, "metadata": {
        **ps.pod.raw["metadata"], "annotations": {"koordinator.sh/memoryQOS": '{"policy": "none", "priority": 99}'}}}),
        qos="LS", kube_qos="Burstable", cgroup_dir=ps.cgroup_dir)
    plugin = MemoryQoS()
    with capture_logs() as logs:
        assert plugin._policies(node(bad)) == {ps.uid: None}
        plugin._policies(node(bad))
    assert [e["event"] for e in logs] == ["ignoring malformed pod memory QoS config"]


@pytest.mark.parametrize("raw, field", [
    ({"lsClass": {"minLimitPercent": 101}}, "minLimitPercent"),
    ({"beClass": {"wmarkScalePermill": 0}}, "wmarkScalePermill"),
    ({"lsrClass": {"enable": "yes"}}, "enable"),
    ({"systemClass": {"oomKillGroup": 2}}, "oomKillGroup"),
])
def test_bad_args_are_named(raw, field):
    from koordfw import ConfigError

    with pytest.raises(ConfigError, match=field):
        args(**raw)


def test_class_settings_defaults():
    """DefaultMemoryQOS per class when enabled; NoneMemoryQOS when not (mergeNoneMemoryQOSIfDisabled)."""
    a = args(lsrClass={"enable": True}, lsClass={"enable": True, "wmarkRatio": 90}, beClass={"enable": True})
    assert a.class_settings("LSR") == DEFAULTS["LSR"] and a.class_settings("LSE") == DEFAULTS["LSR"]
    assert a.class_settings("LS") == DEFAULTS["LS"].merged({"wmark_ratio": 90})
    assert a.class_settings("BE").wmark_min_adj == 50
    assert a.class_settings("SYSTEM") == NONE
    assert args(beClass={"enable": False, "minLimitPercent": 100}).class_settings("BE") == NONE


# -- LeveledUpdateBatch ----------------------------------------------------------------------------

def test_leveled_writes_grow_top_down_and_shrink_bottom_up():
    """A growing memory.min is raised parent first; every mergeable knob is then set bottom-up; a knob whose
    file the kernel does not have is never written."""
    pod = mock_pod("Burstable", "LS", memory_qos={"minLimitPercent": 100})
    ns0 = node(pod)
    a = args(lsClass={"enable": True})
    plan = compute(ns0, a, MemoryQoS()._policies(ns0))
    kube, burst, pdir = "kubepods", "kubepods/burstable", pod.cgroup_dir
    current = {f"{kube}/memory.min": "0", f"{burst}/memory.min": "0", f"{pdir}/memory.min": "0",
               f"{pdir}/main/memory.min": "0", f"{pdir}/main/memory.high": "max",
               f"{pdir}/memory.wmark_ratio": "0"}
    writes = [(w.path, w.value) for w in leveled_writes(ns0, (plan.qos, plan.pods, plan.containers), current)]
    assert writes == [
        # top-down: only what grows, and the non-mergeable knobs
        (f"{kube}/memory.min", str(G)), (f"{burst}/memory.min", str(G)), (f"{pdir}/memory.min", str(G)),
        (f"{pdir}/memory.wmark_ratio", "95"), (f"{pdir}/main/memory.min", str(G)),
        # bottom-up: every mergeable knob at its value
        (f"{pdir}/main/memory.min", str(G)), (f"{pdir}/main/memory.high", "max"),
        (f"{pdir}/memory.min", str(G)), (f"{kube}/memory.min", str(G)), (f"{burst}/memory.min", str(G))]
    # shrinking: nothing grows, so the top-down pass writes none of them; the bottom-up pass sets the child first
    shrink = {p: (str(2 * G) if p.endswith("memory.min") else v) for p, v in current.items()}
    writes = [(w.path, w.value) for w in leveled_writes(ns0, (plan.qos, plan.pods, plan.containers), shrink)]
    assert writes[:1] == [(f"{pdir}/memory.wmark_ratio", "95")]
    assert [p for p, _ in writes[1:]] == [f"{pdir}/main/memory.min", f"{pdir}/main/memory.high", f"{pdir}/memory.min",
                                          f"{kube}/memory.min", f"{burst}/memory.min"]


def test_throttling_with_node_allocatable_and_page_alignment():
    """memory.high without a container limit: the node's allocatable memory, rounded down to a page."""
    pod = mock_pod("Burstable", "LS", memory_qos={"throttlingPercent": 50})
    ns = node(pod, memory=3 * G + 123)
    plan = compute(ns, args(), MemoryQoS()._policies(ns))
    highs = {cv.dir: dict(cv.values)["memory.high"] for cv in plan.containers}
    assert highs[f"{pod.cgroup_dir}/test"] == ((3 * G + 123) * 50 // 100) // PAGE_SIZE * PAGE_SIZE
    assert highs[f"{pod.cgroup_dir}/main"] == G  # its limit equals its request


def test_v1_without_the_files_is_idle_with_one_log_line():
    from structlog.testing import capture_logs

    pod = mock_pod("Burstable", "LS")
    ns = node(pod, version=1, cgroups={"cpu/kubepods/cpu.cfs_quota_us": "-1"})
    plugin = MemoryQoS()
    with capture_logs() as logs:
        for _ in range(3):
            assert plugin.qos_plan(ns, args(lsClass={"enable": True})) is None
            assert plugin.runtime_hook("pod_start", pod, None, ns, args()) is None
    assert [e["event"] for e in logs if "idle" in e["event"]] == [e["event"] for e in logs]
    assert len(logs) == 1 and logs[0]["cgroup_version"] == 1


def test_v1_anolis_writes_under_the_memory_controller():
    pod = mock_pod("Burstable", "LS", memory_qos={"minLimitPercent": 100})
    cur = {"memory/kubepods/memory.min": "0", "memory/kubepods/burstable/memory.min": "0",
           f"memory/{pod.cgroup_dir}/memory.min": "0", f"memory/{pod.cgroup_dir}/memory.wmark_ratio": "0"}
    ns = node(pod, version=1, cgroups=cur)
    writes = {(w.path, w.value) for w in MemoryQoS().qos_plan(ns, args(lsClass={"enable": True}))}
    assert (f"memory/{pod.cgroup_dir}/memory.min", str(G)) in writes
    assert (f"memory/{pod.cgroup_dir}/memory.wmark_ratio", "95") in writes
    assert all(p.startswith("memory/") for p, _ in writes)
