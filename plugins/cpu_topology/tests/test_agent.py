"""Node side: the cpuset plan on a fake cgroup tree and on the real cgroup v1 cpuset hierarchy."""

import json
import os
import uuid
from pathlib import Path

import pytest
from koordfw_cpu_topology.agent import CPUSetAgent, plan

from koordfw.agent.executor import Executor
from koordfw.core.nodestate import ContainerState, CPUInfo, NodeState, PodState
from koordfw.inputs import make_pod

STATUS = "scheduling.koordinator.sh/resource-status"


def _pod(name, qos, cpuset=None, kube_qos="Guaranteed"):
    anns = {STATUS: json.dumps({"cpuset": cpuset})} if cpuset else {}
    req = {"cpu": "2", "memory": "1Gi"}
    pod = make_pod(name, requests=req, limits=req if kube_qos == "Guaranteed" else None,
                   labels={"koordinator.sh/qosClass": qos}, annotations=anns, priority=9500)
    return pod


def _state(kubepods, pods, *, cpus=8, current=None, annotations=None):
    """A v1 node state; ``pods`` = [(Pod, level dir)] each with one container ``c1``."""
    states, cgroups = [], {}
    for pod, level in pods:
        pdir = f"{kubepods}/{level + '/' if level else ''}pod{pod.uid}"
        states.append(PodState(uid=pod.uid, pod=pod, qos=pod.qos_class, kube_qos=pod.kube_qos, cgroup_dir=pdir,
                               containers=(ContainerState("c1", "c1", f"{pdir}/c1"),)))
        for d in (pdir, f"{pdir}/c1"):
            cgroups[f"cpuset/{d}/cpuset.cpus"] = (current or {}).get(d, f"0-{cpus - 1}")
    topo = tuple(CPUInfo(i, i // 2) for i in range(cpus))
    return NodeState(name="n1", cgroup_version=1, kubepods=kubepods, capacity={"cpu": cpus * 1000},
                     cpu_topology=topo, pods=tuple(states), cgroups=cgroups, annotations=annotations or {})


def test_no_bound_pod_no_writes():
    ls = _pod("ls", "LS", kube_qos="Burstable")
    assert plan(_state("kubepods", [(ls, "burstable")])) == []


def test_pools_and_order():
    lse, lsr = _pod("lse", "LSE", "0-1"), _pod("lsr", "LSR", "2-3")
    ls, be = _pod("ls", "LS", kube_qos="Burstable"), _pod("be", "BE", kube_qos="BestEffort")
    ns = _state("kubepods", [(lse, ""), (lsr, ""), (ls, "burstable"), (be, "besteffort")],
                annotations={"node.koordinator.sh/reservation": json.dumps({"reservedCPUs": "7"})})
    by_path = {}
    for w in plan(ns):
        by_path.setdefault(w.path, []).append(w.value)
    def get(pod, sub=""):
        return by_path[f"cpuset/{ns.pod(pod.uid).cgroup_dir}{sub}/cpuset.cpus"]
    assert get(lse) == ["0-1"] and get(lse, "/c1") == ["0-1"]
    assert get(lsr) == ["2-3"]
    assert get(ls) == ["4-6"]          # not LSE, not LSR, not reserved
    assert get(be) == ["2-6"]          # LSR cores may be lent to BE, LSE never
    # narrowing: the container before the pod dir
    paths = [w.path for w in plan(ns)]
    i_c = paths.index(f"cpuset/{ns.pod(lse.uid).cgroup_dir}/c1/cpuset.cpus")
    i_p = paths.index(f"cpuset/{ns.pod(lse.uid).cgroup_dir}/cpuset.cpus")
    assert i_c < i_p


def test_moving_cpuset_widens_then_narrows():
    lse = _pod("lse", "LSE", "4-5")
    pdir = f"kubepods/pod{lse.uid}"
    ns = _state("kubepods", [(lse, "")], current={pdir: "0-1", f"{pdir}/c1": "0-1"})
    assert [(w.path, w.value) for w in plan(ns)] == [
        (f"cpuset/{pdir}/cpuset.cpus", "0-1,4-5"), (f"cpuset/{pdir}/c1/cpuset.cpus", "4-5"),
        (f"cpuset/{pdir}/cpuset.cpus", "4-5")]


def test_be_pool_stays_inside_suppressed_besteffort_dir():
    lse, be = _pod("lse", "LSE", "0-1"), _pod("be", "BE", kube_qos="BestEffort")
    ns = _state("kubepods", [(lse, ""), (be, "besteffort")])
    ns = NodeState(**{**{a.name: getattr(ns, a.name) for a in NodeState.__attrs_attrs__},
                      "cgroups": {**ns.cgroups, "cpuset/kubepods/besteffort/cpuset.cpus": "1-3"}})
    be_dir = ns.pod(be.uid).cgroup_dir
    assert {w.value for w in plan(ns) if w.path.startswith(f"cpuset/{be_dir}")} == {"2-3"}


def test_runtime_hook_for_new_container():
    lse, be = _pod("lse", "LSE", "0-1"), _pod("be", "BE", kube_qos="BestEffort")
    ns = _state("kubepods", [(lse, ""), (be, "besteffort")])
    p = ns.pod(be.uid)
    writes = CPUSetAgent().runtime_hook("container_start", p, p.containers[0], ns)
    assert [(w.path, w.value) for w in writes] == [(f"cpuset/{p.cgroup_dir}/c1/cpuset.cpus", "2-7")]


def test_fake_tree_applied_by_executor(tmp_path):
    lse, be = _pod("lse", "LSE", "0-1"), _pod("be", "BE", kube_qos="BestEffort")
    ns = _state("kubepods", [(lse, ""), (be, "besteffort")], cpus=4)
    for p in ns.pods:
        for d in (p.cgroup_dir, p.containers[0].cgroup_dir):
            (tmp_path / "cpuset" / d).mkdir(parents=True, exist_ok=True)
            (tmp_path / "cpuset" / d / "cpuset.cpus").write_text("0-3\n")
    ex = Executor({"cgroup": tmp_path})
    results = ex.apply(plan(ns))
    assert {r.outcome for r in results} == {"written"}
    def read(d):
        return (tmp_path / "cpuset" / d / "cpuset.cpus").read_text()
    assert read(ns.pod(lse.uid).containers[0].cgroup_dir) == "0-1"
    assert read(ns.pod(be.uid).cgroup_dir) == "2-3"
    assert {r.outcome for r in ex.apply(plan(ns))} == {"unchanged"}  # idempotent: nothing differs now


def test_agent_plan_command_shows_cpuset_writes(tmp_path, capsys):
    from koordfw.cli import main
    lse = _pod("lse", "LSE", "1")
    state = {"cgroupVersion": 1,
             "node": {"name": "n1", "capacity": {"cpu": "2"},
                      "cpuTopology": {"detail": [{"id": 0, "core": 0}, {"id": 1, "core": 1}]}},
             "pods": [{**{k: lse.raw[k] for k in ("metadata", "spec")}},
                      {**{k: _pod("be", "BE", kube_qos="BestEffort").raw[k] for k in ("metadata", "spec")}}],
             "cgroups": {}}
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    assert main(["agent", "plan", "--state", str(path)]) in (0, None)
    writes = [w for w in json.loads(capsys.readouterr().out)["writes"] if w["plugin"] == "cpu_topology_agent"]
    assert {(w["path"].split("/")[-2][:3], w["value"]) for w in writes} == {("pod", "1"), ("pod", "0")}


# -- real cgroup v1 cpuset --------------------------------------------------------------------------

CPUSET_ROOT = Path("/sys/fs/cgroup/cpuset")


def _real_cpuset_reason():
    if not (CPUSET_ROOT / "cpuset.cpus").exists():
        return "no cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset"
    if not os.access(CPUSET_ROOT, os.W_OK):
        return "/sys/fs/cgroup/cpuset is not writable (needs root)"
    if len(os.sched_getaffinity(0)) < 2:
        return "needs at least 2 CPUs"
    return None


@pytest.mark.skipif(_real_cpuset_reason() is not None, reason=_real_cpuset_reason() or "")
def test_real_cgroup_v1_cpuset():
    root_cpus = (CPUSET_ROOT / "cpuset.cpus").read_text().strip()
    mems = (CPUSET_ROOT / "cpuset.mems").read_text().strip()
    parent = f"koordfw-test-cpu-topology-{uuid.uuid4().hex[:8]}"
    lse, ls = _pod("lse", "LSE", "1"), _pod("ls", "LS", kube_qos="Burstable")
    kubepods = f"{parent}/kubepods"
    ns = _state(kubepods, [(lse, ""), (ls, "burstable")], cpus=2,
                current={f"{kubepods}/pod{lse.uid}": "0", f"{kubepods}/pod{lse.uid}/c1": "0"})
    created = []
    try:
        dirs = [parent, kubepods, f"{kubepods}/burstable"]
        for p in ns.pods:
            dirs += [p.cgroup_dir, p.containers[0].cgroup_dir]
        for d in dirs:
            path = CPUSET_ROOT / d
            path.mkdir()
            created.append(path)
            # mems before anything can join; cpus as the state says (the LSE pod starts on CPU 0)
            (path / "cpuset.mems").write_text(mems)
            (path / "cpuset.cpus").write_text(ns.cgroups.get(f"cpuset/{d}/cpuset.cpus", root_cpus))
        results = Executor({"cgroup": "/sys/fs/cgroup"}).apply(plan(ns))
        assert all(r.outcome in ("written", "unchanged") for r in results), results
        def read(d):
            return (CPUSET_ROOT / d / "cpuset.cpus").read_text().strip()
        lse_dir, ls_dir = ns.pod(lse.uid).cgroup_dir, ns.pod(ls.uid).cgroup_dir
        # moved from CPU 0 to CPU 1: only possible in the widen → container → narrow order
        assert read(lse_dir) == "1" and read(f"{lse_dir}/c1") == "1"
        assert read(ls_dir) == "0" and read(f"{ls_dir}/c1") == "0"
    finally:
        for path in reversed(created):
            path.rmdir()


def _numa_pod(name, qos, numa, cpuset=None, kube_qos="Burstable"):
    """A pod the scheduler placed under a NUMA topology policy: numaNodeResources on ``numa`` nodes."""
    status = {"numaNodeResources": [{"node": n, "resources": {"cpu": "1", "memory": "1Gi"}} for n in numa]}
    if cpuset:
        status["cpuset"] = cpuset
    req = {"cpu": "2", "memory": "2Gi"}
    return make_pod(name, requests=req, labels={"koordinator.sh/qosClass": qos},
                    annotations={STATUS: json.dumps(status)}, priority=9500)


def _numa_state(pods, current=None):
    """8 CPUs on two NUMA nodes (0-3 on node 0, 4-7 on node 1)."""
    ns = _state("kubepods", pods, current=current)
    topo = tuple(CPUInfo(i, i // 2, 0, i // 4) for i in range(8))
    import attrs

    return attrs.evolve(ns, cpu_topology=topo)


def test_numa_aware_ls_pod_gets_its_numa_nodes_share_pool_and_mems():
    """koordlet's cpuset hook for a NUMA-aware LS pod without a cpuset: the share pool of its NUMA node
    (CPUs 4-7 of node 1, less the LSR pod's 6-7); and cpuset.mems "1" on the pod dir and its container."""
    ls = _numa_pod("ls", "LS", [1])
    lsr = _numa_pod("lsr", "LSR", [1], cpuset="6-7", kube_qos="Guaranteed")
    ns = _numa_state([(ls, "burstable"), (lsr, "")])
    by_path = {w.path: w.value for w in plan(ns)}
    pdir = ns.pod(ls.uid).cgroup_dir
    assert by_path[f"cpuset/{pdir}/cpuset.cpus"] == "4-5" and by_path[f"cpuset/{pdir}/c1/cpuset.cpus"] == "4-5"
    assert by_path[f"cpuset/{pdir}/cpuset.mems"] == "1" and by_path[f"cpuset/{pdir}/c1/cpuset.mems"] == "1"
    # the LSR pod keeps its own cpuset, its memory on node 1 as well
    ldir = ns.pod(lsr.uid).cgroup_dir
    assert by_path[f"cpuset/{ldir}/cpuset.cpus"] == "6-7" and by_path[f"cpuset/{ldir}/cpuset.mems"] == "1"


def test_numa_aware_pods_alone_are_enough_for_a_plan_and_be_pods_keep_the_be_pool():
    """No pod holds a cpuset: a NUMA-aware pod still gets its NUMA nodes' CPUs; a BE pod with
    numaNodeResources stays in the BE pool (Koordinator's BECPUManager gate is not modelled) and gets no mems."""
    ls = _numa_pod("ls", "LS", [0, 1])
    be = _numa_pod("be", "BE", [0], kube_qos="BestEffort")
    ns = _numa_state([(ls, "burstable"), (be, "besteffort")])
    by_path = {w.path: w.value for w in plan(ns)}
    pdir = ns.pod(ls.uid).cgroup_dir
    assert by_path[f"cpuset/{pdir}/cpuset.cpus"] == "0-7" and by_path[f"cpuset/{pdir}/cpuset.mems"] == "0-1"
    assert not any(p.endswith("cpuset.mems") and ns.pod(be.uid).cgroup_dir in p for p in by_path)


def test_narrowing_mems_writes_containers_first():
    ls = _numa_pod("ls", "LS", [1])
    pdir = f"kubepods/burstable/pod{ls.uid}"
    ns = _numa_state([(ls, "burstable")])
    import attrs

    ns = attrs.evolve(ns, cgroups={**ns.cgroups, f"cpuset/{pdir}/cpuset.mems": "0-1"})
    paths = [w.path for w in plan(ns) if w.path.endswith("cpuset.mems")]
    assert paths == [f"cpuset/{pdir}/c1/cpuset.mems", f"cpuset/{pdir}/cpuset.mems"]
    # a new container gets its cpus and mems at once
    hook = CPUSetAgent().runtime_hook("container_start", ns.pod(ls.uid), ns.pod(ls.uid).containers[0], ns)
    assert {(w.path.rsplit("/", 1)[1], w.value) for w in hook} == {("cpuset.cpus", "4-7"), ("cpuset.mems", "1")}
