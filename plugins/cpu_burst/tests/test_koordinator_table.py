"""Koordinator's cpuburst tests (pkg/koordlet/qosmanager/plugins/cpuburst/cpu_burst_test.go), case by case:
the same pods, cgroup values, metrics and configs, and the same expected values. Where this kernel's rule
(a burst at most the quota) changes a written value, the case says so and checks both numbers."""

from __future__ import annotations

from fractions import Fraction

import pytest
from cpu_burst_helpers import PERIOD, annotation, apply, container_dir, files, manifest, node, pod_state
from koordfw_cpu_burst.burst import (
    CFS_DECREASE_STEP,
    CFS_INCREASE_STEP,
    BurstLimiter,
    NodeBurst,
    PodUsage,
    node_state_for_burst,
    recycle,
    static_cpu_burst,
)
from koordfw_cpu_burst.config import Args, BurstConfig, merge_pod_config, parse_pod_config
from koordfw_cpu_burst.plugin import ALLOWED_KEY, NODE_USAGE_KEY, POD_USAGE_KEY, THROTTLED_KEY, CPUBurst

AUTO = BurstConfig("auto", 1000, 300, -1)  # defaultAutoBurstCfg


# -- TestCPUBurst_getNodeStateForBurst ------------------------------------------------------------------

LSR8 = PodUsage("LSR", 8000, None)


@pytest.mark.parametrize("name, node_usage, cpus, pods, want", [
    ("get-unknown-status-because-of-nil-node-metric", None, 16, [], NodeBurst.UNKNOWN),
    ("get-unknown-status-because-of-lack-node-info", 6000, 0, [], NodeBurst.UNKNOWN),
    # share-pool=16-8(LSR.Req)=8, share-pool-usage=10-7(LSR.Usage)=3; ratio=3/8; threshold = 50%
    ("get-idle-status-with-lsr-pod", 10000, 16,
     [PodUsage("LSR", 8000, 7000), PodUsage("LS", 1000, 200)], NodeBurst.IDLE),
    # share-pool=8, usage=10-5=5; ratio=5/8
    ("get-overload-status-with-lsr-pod", 10000, 16,
     [PodUsage("LSR", 8000, 5000), PodUsage("LS", 3000, 3000)], NodeBurst.OVERLOAD),
    # share-pool=8, usage=10-6.25=3.75; ratio=3.75/8 within [45%, 50%)
    ("get-cooling-status-with-lsr-pod", 10000, 16,
     [PodUsage("LSR", 8000, 6250), PodUsage("LS", 2000, 1000)], NodeBurst.COOLING),
])
def test_get_node_state_for_burst(name, node_usage, cpus, pods, want):
    assert node_state_for_burst(50, cpus, node_usage, pods) is want


def test_node_state_from_a_node_state_uses_the_raw_qos_label_and_the_averaged_usage():
    lsr = pod_state(manifest("lsr-pod-1", {"c": 8000}, qos="LSR"), usage=7000)
    ls = pod_state(manifest("ls-pod-2", {"c": 1000}, qos="LS"), usage=200)
    args = Args(policy="auto")
    assert CPUBurst().node_burst(node([lsr, ls], usage=10000), args) is NodeBurst.IDLE
    # the collector's window average wins over the round's sample
    ns = node([lsr, ls], usage=10000, metrics={NODE_USAGE_KEY: 10000, POD_USAGE_KEY: {"lsr-pod-1": 5000}})
    assert CPUBurst().node_burst(ns, args) is NodeBurst.OVERLOAD
    # a Guaranteed pod without the label is QoSNone for Koordinator: its request stays in the pool
    plain = pod_state(manifest("g", {"c": 8000}), usage=7000)
    assert CPUBurst().node_burst(node([plain], usage=10000), args) is NodeBurst.OVERLOAD


# -- Test_genPodBurstConfig -------------------------------------------------------------------------------

@pytest.mark.parametrize("name, pod_cfg, node_cfg, want", [
    ("use-node-config", None, BurstConfig("auto", 1000, 300, 600), BurstConfig("auto", 1000, 300, 600)),
    ("use-pod-config", {"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                        "cfsQuotaBurstPeriodSeconds": 600}, None, BurstConfig("auto", 1000, 300, 600)),
    ("merge-pod-config", {"policy": "cpuBurstOnly", "cpuBurstPercent": 500},
     BurstConfig("auto", 1000, 300, 600), BurstConfig("cpuBurstOnly", 500, 300, 600)),
])
def test_gen_pod_burst_config(name, pod_cfg, node_cfg, want):
    fields = None if pod_cfg is None else parse_pod_config(annotation(pod_cfg))
    assert merge_pod_config(node_cfg, fields) == want


@pytest.mark.parametrize("raw, want", [
    ('{"policy": "", "cpuBurstPercent": null}', BurstConfig("auto", 1000, 300, 600)),  # omitempty keeps the node's
    ('{"CPUBurstPercent": 0}', BurstConfig("auto", 0, 300, 600)),  # Go matches keys case-insensitively
    ('{"other": 1, "policy": "none"}', BurstConfig("none", 1000, 300, 600)),
])
def test_pod_annotation_read_as_go_unmarshals_it(raw, want):
    assert merge_pod_config(BurstConfig("auto", 1000, 300, 600), parse_pod_config(raw)) == want


@pytest.mark.parametrize("raw", ['{"cpuBurstPercent": 1.5}', '{"cpuBurstPercent": "5"}', '{"policy": 1}', "[]",
                                 "{", '{"cpuBurstPercent": 1e3}', '{"cpuBurstPercent": true}'])
def test_a_malformed_annotation_is_an_error(raw):
    with pytest.raises(ValueError):
        parse_pod_config(raw)


def test_a_malformed_annotation_falls_back_to_the_node_config():
    m = manifest("p", {"c": 2000}, annotations={"koordinator.sh/cpuBurst": '{"cpuBurstPercent": "lots"}'})
    views = CPUBurst().pods(node([pod_state(m)]), Args(policy="auto", cpu_burst_percent=200))
    assert views[0].cfg == BurstConfig("auto", 200, 300, -1)


# -- TestCPUBurst_applyCPUBurst -----------------------------------------------------------------------------

TWO = {"test-container-1": 5000, "test-container-2": 3000}


@pytest.mark.parametrize("name, limits, cfg, want_containers, want_pod", [
    ("apply-by-default-burst-config", TWO, AUTO,
     {"test-container-1": 5 * 10 * PERIOD, "test-container-2": 3 * 10 * PERIOD}, (5 + 3) * 10 * PERIOD),
    ("apply-by-specified-burst-config", TWO, BurstConfig("auto", 500),
     {"test-container-1": 5 * 5 * PERIOD, "test-container-2": 3 * 5 * PERIOD}, (5 + 3) * 5 * PERIOD),
    ("apply-by-disabled-burst-config", TWO, BurstConfig("cfsQuotaBurstOnly", 500),
     {"test-container-1": 0, "test-container-2": 0}, 0),
    ("apply-by-unlimited-container", {"test-container-1": None, "test-container-2": None}, AUTO,
     {"test-container-1": 0, "test-container-2": 0}, 0),
])
def test_apply_cpu_burst(name, limits, cfg, want_containers, want_pod):
    for cname, want in want_containers.items():
        assert static_cpu_burst(limits[cname] or -1, cfg) == want
    ps = pod_state(manifest("test-pod-1", limits))
    ns = node([ps])
    plugin = CPUBurst()
    (view,) = plugin.pods(ns, Args())
    view = type(view)(view.state, view.key, cfg, view.containers)
    # initPodCPUBurst / initContainerCPUBurst: the burst files hold 0 and no quota file is read; a container's
    # burst is still at most its kubelet quota (MilliCPUToQuota(limit)), the most the kernel accepts
    values = {files(1, d)[1]: "0" for d in [ps.cgroup_dir] + [container_dir(ps, c) for c in limits]}
    got = apply(dict(values), plugin.pod_writes(ns, view, values, NodeBurst.IDLE, {}, {}))
    for cname, want in want_containers.items():
        kubelet_quota = limits[cname] * 100 if limits[cname] else want
        assert int(got[files(1, container_dir(ps, cname))[1]]) == min(want, kubelet_quota)
    assert int(got[files(1, ps.cgroup_dir)[1]]) == want_pod  # the pod's quota is not known here


def test_apply_cpu_burst_clamped_to_the_quota_the_kernel_accepts():
    """apply-by-default-burst-config with the kubelet's quotas in place: 5 000 000 µs of burst on a
    500 000 µs quota is EINVAL for the kernel, so the burst is the quota (and the pod's the pod's)."""
    ps = pod_state(manifest("test-pod-1", TWO))
    ns = node([ps])
    plugin = CPUBurst()
    (view,) = plugin.pods(ns, Args(policy="auto"))
    values = {files(1, ps.cgroup_dir)[0]: str(8 * PERIOD), files(1, ps.cgroup_dir)[1]: "0"}
    for cname, limit in TWO.items():
        values[files(1, container_dir(ps, cname))[0]] = str(limit * 100)
        values[files(1, container_dir(ps, cname))[1]] = "0"
    got = apply(dict(values), plugin.pod_writes(ns, view, values, NodeBurst.IDLE, {}, {}))
    assert int(got[files(1, container_dir(ps, "test-container-1"))[1]]) == 5 * PERIOD
    assert int(got[files(1, container_dir(ps, "test-container-2"))[1]]) == 3 * PERIOD
    assert int(got[files(1, ps.cgroup_dir)[1]]) == 8 * PERIOD


# -- TestCPUBurst_applyCFSQuotaBurst --------------------------------------------------------------------------

C1, C2 = "test-container-1", "test-container-2"


def q(*factors: float) -> int:
    """``int64(a * b * float64(system.CFSBasePeriodValue))`` of the Go test: a constant expression, exact."""
    exact = Fraction(PERIOD)
    for f in factors:
        exact *= Fraction(repr(f))
    return int(exact)


CFS_CASES = [
    # name, limits, pod cur, containers cur, throttled (last), cfg, node, want pod, want containers
    ("scale-reset-for-burst-config-disabled-on-idle-state", {C1: 2000}, 2 * 2 * PERIOD, {C1: 2 * 2 * PERIOD},
     {C1: 0.5}, BurstConfig("cpuBurstOnly", 1000, 300, -1), NodeBurst.IDLE, q(2), {C1: q(2)}),
    ("scale-remain-for-throttled-pod-on-cooling-state", {C1: 2000}, q(2, 2), {C1: q(2, 2)},
     {C1: 0.5}, AUTO, NodeBurst.COOLING, q(2, 2), {C1: q(2, 2)}),
    ("scale-down-to-base-for-throttled-pod-on-overload-state", {C1: 2000}, q(2, 1.01), {C1: q(2, 1.01)},
     {C1: 0.5}, AUTO, NodeBurst.OVERLOAD, q(2), {C1: q(2)}),
    ("scale-down-for-throttled-pod-on-overload-state", {C1: 2000}, q(2, 2), {C1: q(2, 2)},
     {C1: 0.5}, AUTO, NodeBurst.OVERLOAD, q(2, 2, CFS_DECREASE_STEP), {C1: q(2, 2, CFS_DECREASE_STEP)}),
    ("scale-down-because-burst-period-config-zero-on-idle-state", {C1: 2000}, q(2, 2), {C1: q(2, 2)},
     {C1: 0.5}, BurstConfig("auto", 1000, 300, 0), NodeBurst.IDLE,
     q(2, 2, CFS_DECREASE_STEP), {C1: q(2, 2, CFS_DECREASE_STEP)}),
    ("scale-reset-because-burst-percent-config-illegal-on-idle-state", {C1: 2000}, q(2, 2), {C1: q(2, 2)},
     {C1: 0.5}, BurstConfig("auto", 1000, 90, -1), NodeBurst.IDLE, q(2), {C1: q(2)}),
    ("scale-remain-because-not-throttled-on-idle-state", {C1: 2000}, q(2, 2.9), {C1: q(2, 2.9)},
     {C1: 0.0}, AUTO, NodeBurst.IDLE, q(2, 2.9), {C1: q(2, 2.9)}),
    ("scale-up-limit-by-ceil-on-idle-state", {C1: 2000}, q(2, 2.9), {C1: q(2, 2.9)},
     {C1: 0.5}, AUTO, NodeBurst.IDLE, q(2, 3), {C1: q(2, 3)}),
    ("scale-up-from-base-on-idle-state", {C1: 2000}, 2 * PERIOD, {C1: 2 * PERIOD},
     {C1: 0.5}, AUTO, NodeBurst.IDLE, q(2, CFS_INCREASE_STEP), {C1: q(2, CFS_INCREASE_STEP)}),
    ("scale-up-two-container-from-base-on-idle-state", {C1: 2000, C2: 3000}, (2 + 3) * PERIOD,
     {C1: 2 * PERIOD, C2: 3 * PERIOD}, {C1: 0.5, C2: 0.5}, AUTO, NodeBurst.IDLE,
     q((2 + 3), CFS_INCREASE_STEP), {C1: q(2, CFS_INCREASE_STEP), C2: q(3, CFS_INCREASE_STEP)}),
    ("scale-up-one-container-in-unlimited-pod-from-base-on-idle-state", {C1: 2000, C2: None}, -1,
     {C1: 2 * PERIOD, C2: -1}, {C1: 0.5, C2: 0.5}, AUTO, NodeBurst.IDLE,
     -1, {C1: q(2, CFS_INCREASE_STEP), C2: -1}),
]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("name, limits, pod_cur, cur, throttled, cfg, state, want_pod, want", CFS_CASES,
                         ids=[c[0] for c in CFS_CASES])
def test_apply_cfs_quota_burst(version, name, limits, pod_cur, cur, throttled, cfg, state, want_pod, want):
    ps = pod_state(manifest("test-pod-1", limits))
    ns = node([ps], version=version)
    plugin = CPUBurst()
    (view,) = plugin.pods(ns, Args())
    view = type(view)(view.state, view.key, cfg, view.containers)
    values = {files(version, ps.cgroup_dir)[0]: _q(version, pod_cur)}
    for cname, v in cur.items():
        values[files(version, container_dir(ps, cname))[0]] = _q(version, v)
    by_id = {f"docker://{c}-id": r for c, r in throttled.items()}
    writes = plugin.pod_writes(ns, view, values, state, by_id, {})
    got = apply(dict(values), writes)
    assert _parse(got[files(version, ps.cgroup_dir)[0]]) == want_pod
    for cname, v in want.items():
        assert _parse(got[files(version, container_dir(ps, cname))[0]]) == v
    # scale up: pod before container; scale down: container before pod (the parent's quota must hold them)
    paths = [w.path for w in writes]
    pod_file, c1_file = files(version, ps.cgroup_dir)[0], files(version, container_dir(ps, C1))[0]
    if pod_file in paths and c1_file in paths:
        up = want[C1] > cur[C1]
        assert (paths.index(pod_file) < paths.index(c1_file)) == up


def _q(version: int, v: int) -> str:
    return str(v) if version == 1 else (f"max {PERIOD}" if v < 0 else f"{v} {PERIOD}")


def _parse(text: str) -> int:
    head = text.split()[0]
    return -1 if head == "max" else int(head)


def test_a_container_not_running_keeps_its_quota():
    ps = pod_state(manifest("p", {C1: 2000}, running=False))
    ns = node([ps])
    plugin = CPUBurst()
    (view,) = plugin.pods(ns, Args(policy="auto"))
    values = {files(1, ps.cgroup_dir)[0]: str(4 * PERIOD), files(1, container_dir(ps, C1))[0]: str(4 * PERIOD)}
    assert plugin.pod_writes(ns, view, values, NodeBurst.IDLE, {"docker://test-container-1-id": 1.0}, {}) == []


# -- Test_burstLimiter_Allow / UpdateIfChanged / TestCPUBurst_Recycle ---------------------------------------------

@pytest.mark.parametrize("name, period, max_percent, init_ratio, past, usage_percent, want_allow, want_token", [
    # capacity=100*50=5000, current-size=5000, need=50*10=500, size-after-consume=4500
    ("consume-enough-token-with-full-init", 100, 150, 1, 10, 150, True, 4500),
    # capacity=5000, current-size=50, need=100*10=1000, size-after-consume=-950
    ("consume-not-enough-token-with-part-init", 100, 150, 0.01, 10, 200, False, -950),
    # capacity=10*50=500, current-size=5, need=1000, size-after-consume=-500
    ("consume-not-enough-token-to-bottom-with-part-init", 10, 150, 0.01, 10, 200, False, -500),
    # capacity=5000, current-size=500, accumulate=60*10=600, size-after-accumulate=1100
    ("accumulate-token-with-part-init", 100, 150, 0.1, 10, 40, True, 1100),
    # capacity=5000, current-size=4500, accumulate=600, size-after-accumulate=5000
    ("accumulate-token-to-ceil-with-part-init", 100, 150, 0.9, 10, 40, True, 5000),
])
def test_burst_limiter_allow(name, period, max_percent, init_ratio, past, usage_percent, want_allow, want_token):
    now = 1000.0
    lim = BurstLimiter.new(period, max_percent, now - past, "c")
    lim.current = int(float(lim.capacity) * init_ratio)
    assert lim.allow(now, usage_percent) == (want_allow, want_token)


def test_burst_limiter_update_if_changed():
    lim = BurstLimiter.new(600, 300, 0.0, "c")
    lim.update_if_changed(300, 200, 5.0, "c")
    assert lim.capacity == 300 * 100 and lim.expire_seconds == 600 and lim.last_update == 5.0


def test_burst_limiter_starts_below_half_its_capacity_reproducibly():
    a, b = BurstLimiter.new(100, 200, 0.0, "docker://x"), BurstLimiter.new(100, 200, 0.0, "docker://x")
    assert a.current == b.current and 0 <= a.current < a.capacity // 2


def test_recycle_deletes_expired_limiters():
    now, expire = 10000.0, 600
    limiters = {"expire-limiter": BurstLimiter.new(expire // 2, 200, now - (expire + 10), "a"),
                "not-expire-limiter": BurstLimiter.new(expire // 2, 200, now - (expire - 10), "b")}
    assert recycle(limiters, now) == ["expire-limiter"]
    assert list(limiters) == ["not-expire-limiter"]


# -- TestCPUBurst_start ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [1, 2])
def test_start_scale_up_for_normal_pod(version):
    lsr = pod_state(manifest("lsr-pod-1", {"lsr-pod-1-test-container": 8000}, qos="LSR"), usage=7000)
    ls = pod_state(manifest("ls-pod-2", {"ls-pod-2-test-container": 1000}, qos="LS"), usage=200)
    cgroups = {}
    for ps, pod_q, c, c_q in ((lsr, -1, "lsr-pod-1-test-container", -1),
                              (ls, 2 * PERIOD, "ls-pod-2-test-container", 2 * PERIOD)):
        for d, quota in ((ps.cgroup_dir, pod_q), (container_dir(ps, c), c_q)):
            cgroups[files(version, d)[0]] = _q(version, quota)
            cgroups[files(version, d)[1]] = "0"
    throttled = {"docker://lsr-pod-1-test-container-id": 0.0, "docker://ls-pod-2-test-container-id": 0.5}
    ns = node([lsr, ls], version=version, usage=10000, cgroups=cgroups,
              metrics={THROTTLED_KEY: throttled, ALLOWED_KEY: {}})
    args = Args(policy="auto", cpu_burst_percent=1000, cfs_quota_burst_percent=300,
                cfs_quota_burst_period_seconds=-1, share_pool_threshold_percent=50)
    got = apply(dict(cgroups), CPUBurst().plan(ns, args))
    ls_c = container_dir(ls, "ls-pod-2-test-container")
    # the LSR pod is not burstable: untouched
    assert got[files(version, lsr.cgroup_dir)[1]] == "0" and _parse(got[files(version, lsr.cgroup_dir)[0]]) == -1
    assert _parse(got[files(version, ls.cgroup_dir)[0]]) == q(2, CFS_INCREASE_STEP)
    assert _parse(got[files(version, ls_c)[0]]) == q(2, CFS_INCREASE_STEP)
    # Koordinator writes 1 × 10 × 100000 µs of burst; the kernel takes at most the kubelet's quota (100000 µs)
    assert static_cpu_burst(1000, AUTO) == 1 * 10 * PERIOD
    assert got[files(version, ls_c)[1]] == str(PERIOD) and got[files(version, ls.cgroup_dir)[1]] == str(PERIOD)
