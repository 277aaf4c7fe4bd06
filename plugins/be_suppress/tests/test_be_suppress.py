"""Table-driven tests of be_suppress: the BE amount, both policies, the cpuset pick and the writes."""

from __future__ import annotations

import json

import attrs
import koordfw_be_suppress as bs
import pytest
from koordfw_be_suppress import (
    Args,
    be_cgroup_dirs,
    be_suppress_milli,
    cfs_quota_target,
    cpuset_target,
    pick_cpus,
    plan,
    recover_cpuset,
    recover_writes_cpuset,
    restore_writes,
)

from koordfw import BoundedCache
from koordfw.core.nodestate import ContainerState, CPUInfo, FileWrite, NodeState, format_cpuset

BE_QUOTA = "cpu/kubepods/besteffort/cpu.cfs_quota_us"
BE_CPUSET = "cpuset/kubepods/besteffort/cpuset.cpus"
BE_IDLE = "cpu/kubepods/besteffort/cpu.idle"


def pod(uid, qos=None, cpu="1", kube="burstable", annotations=None):
    """A state-file pod entry: ``qos=None`` leaves the metadata out (an unknown pod)."""
    entry = {"uid": uid, "usage": {"cpu": cpu}}
    if qos is not None:
        res = {} if kube == "besteffort" else {"requests": {"cpu": "1"}}
        if kube == "guaranteed":
            res = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
        labels = {"koordinator.sh/qosClass": qos} if qos else {}
        entry.update(metadata={"name": uid, "uid": uid, "labels": labels, "annotations": annotations or {}},
                     spec={"containers": [{"name": "c", "resources": res}]})
    return entry


def state(*, cpu="16", alloc=None, usage="12", pods=(), apps=(), annotations=None, cgroups=None, topo=None,
          version=1):
    node = {"name": "n1", "capacity": {"cpu": cpu, "memory": "64Gi"}, "annotations": annotations or {}}
    if alloc:
        node["allocatable"] = {"cpu": alloc, "memory": "64Gi"}
    if usage is not None:
        node["usage"] = {"cpu": usage}
    if topo:
        node["cpuTopology"] = {"detail": topo}
    return NodeState.from_state_file({"cgroupVersion": version, "node": node, "pods": list(pods),
                                      "hostApps": list(apps), "cgroups": cgroups or {}})


RESERVE4 = {"node.koordinator.sh/reservation": json.dumps({"resources": {"cpu": "4"}})}
RESERVE_CPUS = {"node.koordinator.sh/reservation": json.dumps({"resources": {"cpu": "1"}, "reservedCPUs": "0-2"})}


@pytest.mark.parametrize("name, ns, args, want", [
    # 16*65% = 10.4 cores; LS 8, BE 2, system 12-10 = 2  → 10400-8000-2000
    ("basic", state(pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")]), Args(enable=True), 400),
    ("threshold 50", state(pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")]),
     Args(enable=True, cpu_suppress_threshold_percent=50), -2000),
    # the annotation reservation (4) exceeds the measured system usage (2)
    ("reservation annotation", state(annotations=RESERVE4, pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")]),
     Args(enable=True), -1600),
    # reservedCPUs decides the amount: 3 CPUs
    ("reserved cpus", state(annotations=RESERVE_CPUS, pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")]),
     Args(enable=True), -600),
    # kubelet reserved = capacity - allocatable = 3
    ("kubelet reserved", state(alloc="13", pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")]),
     Args(enable=True), -600),
    ("min percent lifts", state(annotations=RESERVE4, pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")]),
     Args(enable=True, cpu_suppress_min_percent=10), 1600),
    ("min percent below", state(pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")]),
     Args(enable=True, cpu_suppress_min_percent=1), 400),
    # a pod with usage but no metadata counts as non-BE
    ("unknown pod is non-BE", state(pods=[pod("ls", "LS", "6"), pod("x", None, "2"), pod("be", "BE", "2", "besteffort")]),
     Args(enable=True), 400),
    # kube BestEffort without a label is BE; label BE on a burstable pod is BE too
    ("kube besteffort is BE", state(pods=[pod("ls", "LS", "8"), pod("be", "", "2", "besteffort")]), Args(enable=True), 400),
    ("label BE is BE", state(pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "burstable")]), Args(enable=True), 400),
    # host apps: LS app (1) non-BE; BE app under besteffort (2) BE; node 15 → system 15-10-3 = 2
    ("host apps", state(usage="15", pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")],
                        apps=[{"name": "ls-app", "qos": "LS", "usage": {"cpu": "1"}},
                              {"name": "be-app", "qos": "BE", "cgroupPath": {"base": "KubepodsBesteffort"},
                               "usage": {"cpu": "2"}}]), Args(enable=True), -600),
    # a BE host app outside the besteffort dir is non-BE (Koordinator's NonBEHostAppFilter)
    ("BE host app outside besteffort", state(usage="15", pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")],
                                             apps=[{"name": "a", "qos": "BE", "cgroupPath": "host/a", "usage": {"cpu": "3"}}]),
     Args(enable=True), -2600),
    # a host app without a metric counts nowhere
    ("host app without usage", state(pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")],
                                     apps=[{"name": "a", "qos": "LS"}]), Args(enable=True), 400),
    ("system usage floor 0", state(usage="5", pods=[pod("ls", "LS", "8"), pod("be", "BE", "2", "besteffort")]),
     Args(enable=True), 2400),
    ("no node usage: skip", state(usage=None, pods=[pod("ls", "LS", "8")]), Args(enable=True), None),
    ("no pods: skip", state(pods=[]), Args(enable=True), None),
])
def test_be_suppress_amount(name, ns, args, want):
    assert be_suppress_milli(ns, args) == want


@pytest.mark.parametrize("name, suppress, current, want", [
    # capacity 16 cores: minDelta 16000 µs, max increase 160000 µs per round
    ("first suppression from unset", 400, -1, 40000),
    ("unset: no step limit", 12000, -1, 1200000),
    ("floor at beMinQuota", -1600, 500000, 2000),
    ("at floor: always written", -1600, 2000, 2000),
    ("small change bypassed", 5000, 495000, None),
    ("just at min delta", 5000, 484000, 500000),
    ("growth limited to 10% of node", 10000, 200000, 360000),
    ("shrink is immediate", 1000, 900000, 100000),
])
def test_cfs_quota_target(name, suppress, current, want):
    assert cfs_quota_target(suppress, 16000, current) == want


def topo_2s():
    """2 sockets × 2 cores × 2 threads, Linux numbering: siblings (0,4) (1,5) (2,6) (3,7)."""
    return [CPUInfo(i, i % 4, (i % 4) // 2, (i % 4) // 2) for i in range(8)]


@pytest.mark.parametrize("name, n, drop, want", [
    ("pairs spread over sockets", 4, (), [0, 4, 2, 6]),
    ("odd count ends with a single", 3, (), [0, 4, 2]),
    ("second round of pairs", 6, (), [0, 4, 2, 6, 1, 5]),
    ("all", 8, (), [0, 4, 2, 6, 1, 5, 3, 7]),
    ("not enough CPUs", 9, (), []),
    # without CPU 4, socket 1 has the larger bucket and goes first
    ("larger bucket first", 2, (4,), [2, 6]),
    ("pair then single", 5, (4,), [2, 6, 1, 5, 3]),
    ("one cpu", 1, (), [0]),
])
def test_pick_cpus(name, n, drop, want):
    procs = [c for c in topo_2s() if c.id not in drop]
    assert pick_cpus(n, procs) == want


def test_pick_cpus_multi_numa_multi_socket():
    # 2 sockets × 2 NUMA nodes × 2 cores × 2 threads = 16 CPUs; each (node, socket) bucket holds 4
    topo = []
    cpu = 0
    for s in range(2):
        for n in range(2):
            for c in range(2):
                for _t in range(2):
                    topo.append(CPUInfo(cpu, s * 4 + n * 2 + c, s, s * 2 + n))
                    cpu += 1
    # buckets by first CPU: [0-3] [4-7] [8-11] [12-15]; one pair from each in turn
    assert pick_cpus(8, topo) == [0, 1, 4, 5, 8, 9, 12, 13]
    assert pick_cpus(10, topo) == [0, 1, 4, 5, 8, 9, 12, 13, 2, 3]
    assert pick_cpus(9, topo) == [0, 1, 4, 5, 8, 9, 12, 13, 2]


def _topo_dicts():
    return [{"id": c.id, "core": c.core, "socket": c.socket, "node": c.node} for c in topo_2s()]


def _status(cpuset):
    return {"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": cpuset})}


@pytest.mark.parametrize("name, pods, annotations, old, suppress, want", [
    ("at least 2 CPUs", [pod("ls", "LS", "1")], {}, "0-7", -5000, [0, 4]),
    ("ceil of the amount", [pod("ls", "LS", "1")], {}, "0-7", 2100, [0, 4, 2]),
    # 8 logical CPUs: grow by at most ceil(0.8) = 1 per round
    ("slow growth", [pod("ls", "LS", "1")], {}, "0,4", 6000, [0, 4, 2]),
    ("LSE cpus never lent", [pod("lse", "LSE", "1", "guaranteed", _status("0,4"))], {}, "0-7", 4000, [2, 6, 1, 5]),
    ("reserved cpus excluded", [pod("ls", "LS", "1")],
     {"node.koordinator.sh/reservation": json.dumps({"reservedCPUs": "0,4"})}, "0-7", 2000, [2, 6]),
    ("system qos exclusive excluded", [pod("ls", "LS", "1")],
     {"node.koordinator.sh/system-qos-resource": json.dumps({"cpuset": "0,4"})}, "0-7", 2000, [2, 6]),
    ("system qos non-exclusive kept", [pod("ls", "LS", "1")],
     {"node.koordinator.sh/system-qos-resource": json.dumps({"cpuset": "0,4", "cpusetExclusive": False})},
     "0-7", 2000, [0, 4]),
    # LSR CPUs (2,6) are 2 of 8 candidates: floor(4*2/8) = 1 taken from them, 3 from the rest
    # (pair 0,4 from the big socket-0 bucket, then a single from socket 1)
    ("LSR share", [pod("lsr", "LSR", "1", "guaranteed", _status("2,6"))], {}, "0-7", 4000, [2, 0, 4, 3]),
])
def test_cpuset_target(name, pods, annotations, old, suppress, want):
    ns = state(pods=pods, annotations=annotations, topo=_topo_dicts(), cgroups={BE_CPUSET: old})
    assert cpuset_target(ns, suppress) == want


def test_recover_cpuset_excludes_lse_reserved_and_system():
    ns = state(pods=[pod("lse", "LSE", "1", "guaranteed", _status("3,7")), pod("lsr", "LSR", "1", "guaranteed", _status("2"))],
               annotations={"node.koordinator.sh/reservation": json.dumps({"reservedCPUs": "0"}),
                            "node.koordinator.sh/system-qos-resource": json.dumps({"cpuset": "1"})},
               topo=_topo_dicts())
    assert recover_cpuset(ns) == [2, 4, 5, 6]


def _be_state(policy_cgroups, **kw):
    pods = [pod("ls", "LS", "8"), {**pod("be1", "BE", "2", "besteffort")}]
    return state(pods=pods, topo=_topo_dicts(), cpu="8", usage="11", cgroups=policy_cgroups, **kw)


def test_plan_cpuset_policy_writes_union_top_down_then_new_bottom_up():
    # capacity 8: 5200 - 8000 - 1000 → negative → 2 CPUs
    ns = _be_state({BE_CPUSET: "0-7", BE_QUOTA: "-1", BE_IDLE: "0"})
    writes = plan(ns, Args(enable=True))
    pod_dir = "cpuset/kubepods/besteffort/podbe1/cpuset.cpus"
    assert [(w.path, w.value) for w in writes] == [
        (BE_CPUSET, "0-7"), (pod_dir, "0-7"),        # old ∪ new, top-down
        (pod_dir, "0,4"), (BE_CPUSET, "0,4"),        # new, bottom-up
        (BE_QUOTA, "-1"),                            # the other policy's knob restored
        (BE_IDLE, "1"),                              # beCPUIdle where the kernel has cpu.idle
    ]
    assert all(w.plugin == "be_suppress" for w in writes)


def test_plan_cfs_quota_policy_restores_cpuset():
    ns = _be_state({BE_CPUSET: "0,4", BE_QUOTA: "-1"})
    writes = plan(ns, Args(enable=True, cpu_suppress_policy="cfsQuota", be_CPU_idle=False))
    assert [(w.path, w.value) for w in writes] == [
        (BE_QUOTA, "2000"),
        (BE_CPUSET, "0-7"), ("cpuset/kubepods/besteffort/podbe1/cpuset.cpus", "0-7"),
    ]


def test_plan_v2_systemd_paths():
    be = "kubepods.slice/kubepods-besteffort.slice"
    ns = NodeState.from_state_file({
        "cgroupVersion": 2, "cgroupDriver": "systemd",
        "node": {"name": "n", "capacity": {"cpu": "8"}, "usage": {"cpu": "3"}},
        "pods": [pod("a-b", "BE", "1", "besteffort")],
        "cgroups": {f"{be}/cpu.max": "max 100000", f"{be}/cpu.idle": "0"}})
    writes = plan(ns, Args(enable=True, cpu_suppress_policy="cfsQuota"))
    # 5200 - 0 - 2000(system) = 3200 milli → 320000 µs
    assert writes[0] == FileWrite(f"{be}/cpu.max", "320000 100000", plugin="be_suppress")
    assert (f"{be}/kubepods-besteffort-poda_b.slice/cpuset.cpus", "0-7") in [(w.path, w.value) for w in writes]
    assert writes[-1] == FileWrite(f"{be}/cpu.idle", "1", plugin="be_suppress")


def test_disabled_restores_everything():
    ns = _be_state({BE_CPUSET: "0,4", BE_QUOTA: "2000", BE_IDLE: "1"})
    assert plan(ns, Args()) == restore_writes(ns)
    assert [(w.path, w.value) for w in plan(ns, Args())] == [
        (BE_QUOTA, "-1"), (BE_CPUSET, "0-7"), ("cpuset/kubepods/besteffort/podbe1/cpuset.cpus", "0-7"),
        (BE_IDLE, "0")]


def test_no_cpu_idle_without_kernel_support():
    ns = _be_state({BE_CPUSET: "0-7", BE_QUOTA: "-1"})
    assert not [w for w in plan(ns, Args(enable=True)) if w.path.endswith("cpu.idle")]


@pytest.mark.parametrize("raw, msg", [
    # the kernel's cattrs error names the plugin's config (attrs validators fire on the whole class)
    ({"cpuSuppressThresholdPercent": 120}, "pluginConfig.be_suppress"),
    ({"cpuSuppressPolicy": "quota"}, "cpuSuppressPolicy"),
    ({"cpuSuppressMinPercnt": 3}, "cpuSuppressMinPercnt"),
])
def test_bad_config_names_the_field(raw, msg):
    from koordfw.core.errors import ConfigError
    from koordfw.core.profile import structure_args

    with pytest.raises(ConfigError, match=msg):
        structure_args("be_suppress", Args, raw)


def test_config_keys_are_koordinator_names():
    from koordfw.core.profile import structure_args

    a = structure_args("be_suppress", Args, {"enable": True, "cpuSuppressThresholdPercent": 70,
                                             "cpuSuppressMinPercent": 5, "cpuSuppressPolicy": "cfsQuota",
                                             "beCPUIdle": False})
    assert a == Args(True, 70, 5, "cfsQuota", False)


# -- recover_writes_cpuset's caches: the same writes while a pod stays, new ones when anything changes --


def _clear_caches():
    bs._CPUSET_WRITES.clear()
    bs._CPUSET_TEXT.clear()


def _fresh(ns, containers=True):
    """What recover_writes_cpuset computes without its caches (the general path)."""
    cpus = recover_cpuset(ns)
    if not cpus:
        return []
    return [FileWrite(ns.cpuset_file(d), format_cpuset(cpus), plugin="be_suppress")
            for d in be_cgroup_dirs(ns, containers)]


def _with_containers(ns, dirs, uid="be1"):
    pods = tuple(attrs.evolve(p, containers=tuple(ContainerState(c, c, f"{p.cgroup_dir}/{c}") for c in dirs))
                 if p.uid == uid else p for p in ns.pods)
    return attrs.evolve(ns, pods=pods)


def _pods():
    return [pod("ls", "LS", "8"), pod("be1", "BE", "2", "besteffort"), pod("be2", "BE", "1", "besteffort")]


def test_same_writes_round_after_round():
    _clear_caches()
    ns = _with_containers(state(pods=_pods(), topo=_topo_dicts(), cpu="8"), ["c1"])
    first = recover_writes_cpuset(ns)
    assert first == _fresh(ns) and len(first) == 4
    # the next round: new PodState objects (as the replay builds them), only usage moved
    again = recover_writes_cpuset(_with_containers(state(pods=_pods(), topo=_topo_dicts(), cpu="8", usage="3"), ["c1"]))
    assert again == first and again is not first
    assert all(a is b for a, b in zip(again, first, strict=True))  # built once, handed out again
    again.append("x")  # a caller's list is its own
    assert recover_writes_cpuset(ns) == first
    assert recover_writes_cpuset(ns, containers=False) == _fresh(ns, containers=False)
    assert recover_writes_cpuset(ns) == first


def test_new_writes_when_anything_changes():
    _clear_caches()
    base = state(pods=_pods(), topo=_topo_dicts(), cpu="8")
    ns = _with_containers(base, ["c1"])
    recover_writes_cpuset(ns)
    changed = [
        _with_containers(base, ["c1", "c2"]),                                           # a container added
        _with_containers(base, []),                                                      # ... removed
        _with_containers(base, ["c3"]),                                                  # ... replaced
        _with_containers(base, ["c1"], uid="be2"),                                       # another pod's
        state(pods=_pods()[:2], topo=_topo_dicts(), cpu="8"),                            # a pod gone
        state(pods=_pods() + [pod("be3", "BE", "1", "besteffort")], topo=_topo_dicts(), cpu="8"),  # one more
        state(pods=_pods() + [pod("lse", "LSE", "1", "guaranteed", _status("3"))],      # an LSE pod's CPUs
              topo=_topo_dicts(), cpu="8"),
        state(pods=_pods(), topo=_topo_dicts(), cpu="8",                                 # reserved CPUs
              annotations={"node.koordinator.sh/reservation": json.dumps({"reservedCPUs": "0-1"})}),
        state(pods=_pods(), topo=_topo_dicts()[:6], cpu="6"),                            # the node's CPUs
        state(pods=_pods(), cpu="12"),                                                   # ... from capacity
        state(pods=_pods(), cpu="4"),
        state(pods=_pods(), topo=_topo_dicts(), cpu="8", version=2),                     # cgroup v2 paths
        attrs.evolve(ns, cgroup_driver="systemd"),                                       # the driver
        attrs.evolve(ns, kubepods="kubepods2"),
        attrs.evolve(ns, pods=tuple(attrs.evolve(p, cgroup_dir=p.cgroup_dir + "x") for p in ns.pods)),  # pod dirs
    ]
    for other in changed:
        got = recover_writes_cpuset(other)
        assert got == _fresh(other), other
        assert recover_writes_cpuset(other, containers=False) == _fresh(other, containers=False), other
        assert recover_writes_cpuset(ns) == _fresh(ns)  # and back


def test_nodes_planned_in_turn_keep_their_own_writes(monkeypatch):
    """The replay plans many nodes slot after slot, pods coming and going: every answer is the fresh one,
    also when the caches fill up and start again."""
    _clear_caches()
    monkeypatch.setattr(bs, "_CPUSET_WRITES", BoundedCache(5))
    monkeypatch.setattr(bs, "_CPUSET_TEXT", BoundedCache(5))
    nodes = [state(pods=_pods(), topo=_topo_dicts(), cpu="8"),
             state(pods=_pods()[:1] + [pod(f"be{j}", "BE", "1", "besteffort") for j in range(4, 9)], cpu="12"),
             state(pods=[pod("ls", "LS", "8")], cpu="4", version=2)]
    for slot in range(4):
        for i, ns in enumerate(nodes):
            if slot % 2 and i == 1:
                ns = state(pods=_pods()[:1] + [pod(f"be{j}", "BE", "1", "besteffort") for j in range(6, 11)], cpu="12")
            assert recover_writes_cpuset(ns) == _fresh(ns)
    assert len(bs._CPUSET_WRITES) <= 5 and len(bs._CPUSET_TEXT) <= 5


def test_cgroup_file_paths():
    """NodeState.cgroup_file: v1 leads with the controller, v2 does not; slashes around the dir dropped."""
    v1, v2 = NodeState(cgroup_version=1), NodeState(cgroup_version=2)
    assert v1.cgroup_file("cpu", "/kubepods/besteffort/", "cpu.idle") == "cpu/kubepods/besteffort/cpu.idle"
    assert v1.cgroup_file("cpu", "", "cpu.idle") == "cpu/cpu.idle"
    assert v2.cgroup_file("cpu", "kubepods", "cpu.max") == "kubepods/cpu.max"
    assert v2.cgroup_file("cpu", "/", "cpu.max") == "cpu.max"
    assert v1.qos_dir("BestEffort") == v1.qos_dir("besteffort") == "kubepods/besteffort"
    with pytest.raises(ValueError, match="unknown QoS level"):
        v1.qos_dir("Gold")


def test_plans_with_warm_caches_equal_plans_from_cold():
    """Every policy's plan, round after round with the caches kept, equals the plan built from nothing."""
    static = {"kubelet.koordinator.sh/cpu-manager-policy": json.dumps({"policy": "static"})}
    states = [_with_containers(_be_state({BE_CPUSET: old, BE_QUOTA: "-1", BE_IDLE: "0"}, **kw), ["c1", "c2"])
              for old in ("0-7", "0,4", "0-3") for kw in ({}, {"annotations": static})]
    states += [_with_containers(state(pods=_pods(), cpu=c, usage=u), cs)
               for c, u, cs in (("8", "3", ["c1"]), ("12", "3", []), ("12", "9", ["c2"]))]
    for args in (Args(enable=True), Args(enable=True, cpu_suppress_policy="cfsQuota"), Args()):
        warm = [plan(ns, args) for _ in range(2) for ns in states]
        cold = []
        for _ in range(2):
            for ns in states:
                _clear_caches()
                cold.append(plan(ns, args))
        assert warm == cold
