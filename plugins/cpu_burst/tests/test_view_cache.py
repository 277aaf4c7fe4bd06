"""The per-pod view cache of CPUBurst._pods and the remembered read lists of read_values: reused while a pod's
inputs are the same, rebuilt when its Pod object, cgroup dir, driver, node config or ``restore`` change, and
always the same answer as building the views afresh."""

from __future__ import annotations

import attrs
from cpu_burst_helpers import annotation, manifest, node, pod_state
from koordfw_cpu_burst.config import Args
from koordfw_cpu_burst.plugin import CPUBurst, read_values


def _fresh(ns, args, restore=False):
    return CPUBurst()._pods(ns, args, restore)


def _views(pods):
    return [(p.state, p.key, p.cfg, p.containers) for p in pods]


def test_views_reused_while_the_pod_is_the_same():
    a = pod_state(manifest("a", {"main": 2000}, qos="LS"))
    b = pod_state(manifest("b", {"main": 1000, "side": None}, qos="LS",
                           annotations={"koordinator.sh/cpuBurst": annotation({"policy": "cpuBurstOnly"})}))
    args = Args(policy="auto")
    cb = CPUBurst()
    first = cb._pods(node([a, b]), args, False)
    # a new round: new PodStates (new usage) around the same Pod objects
    a2, b2 = attrs.evolve(a, usage={"cpu": 5}), attrs.evolve(b, usage={"cpu": 7})
    ns2 = node([a2, b2])
    second = cb._pods(ns2, args, False)
    assert _views(second) == _views(_fresh(ns2, args))
    assert [p.state for p in second] == [a2, b2]  # each round's own PodState
    assert all(x.containers is y.containers for x, y in zip(first, second))  # reused


def test_views_rebuilt_when_an_input_changes():
    m = manifest("a", {"main": 2000}, qos="LS")
    a = pod_state(m)
    args = Args(policy="auto")
    cb = CPUBurst()
    cb._pods(node([a]), args, False)
    # the manifest changed (PodSource makes a new Pod): a new limit and an annotation
    m2 = manifest("a", {"main": 4000}, qos="LS",
                  annotations={"koordinator.sh/cpuBurst": annotation({"policy": "none"})})
    a2 = pod_state(m2)
    got = cb._pods(node([a2]), args, False)
    assert got[0].containers[0].limit_milli == 4000 and got[0].cfg.policy == "none"
    # another cgroup dir
    a3 = attrs.evolve(a2, cgroup_dir="kubepods/burstable/podother")
    got = cb._pods(node([a3]), args, False)
    assert got[0].containers[0].cgroup_dir.startswith("kubepods/burstable/podother/")
    # another node config, and restore
    args2 = Args(policy="cpuBurstOnly", cpu_burst_percent=300)
    ns = node([a])
    assert _views(cb._pods(ns, args2, False)) == _views(_fresh(ns, args2))
    assert _views(cb._pods(ns, args2, True)) == _views(_fresh(ns, args2, True))
    assert cb._pods(ns, args2, True)[0].cfg.policy == "none"
    # the pod became LSR (new Pod object): no longer burstable; then it is gone: forgotten
    lsr = pod_state(manifest("a", {"main": 2000}, qos="LSR"))
    assert cb._pods(node([lsr]), args, False) == []
    cb._pods(node([]), args, False)
    assert cb._views == {}


def test_read_values_follows_the_containers(tmp_path):
    a = pod_state(manifest("a", {"main": 2000, "side": 1000}, qos="LS"))
    args = Args(policy="auto")
    cb = CPUBurst()
    pod_dir = tmp_path / "cpu" / a.cgroup_dir
    for d in (pod_dir, pod_dir / "main-id", pod_dir / "side-id"):
        d.mkdir(parents=True)
        (d / "cpu.cfs_quota_us").write_text("200000\n")
        (d / "cpu.stat").write_text("nr_periods 1\nnr_throttled 0\n")
    ns = node([a])
    got = read_values(str(tmp_path), ns, cb._pods(ns, args, False))
    assert set(got) == {f"cpu/{a.cgroup_dir}/cpu.cfs_quota_us", f"cpu/{a.cgroup_dir}/main-id/cpu.cfs_quota_us",
                        f"cpu/{a.cgroup_dir}/main-id/cpu.stat", f"cpu/{a.cgroup_dir}/side-id/cpu.cfs_quota_us",
                        f"cpu/{a.cgroup_dir}/side-id/cpu.stat"}
    # a container less in the manifest (a new Pod object): its files are no longer read
    b = attrs.evolve(pod_state(manifest("a", {"main": 2000}, qos="LS")), cgroup_dir=a.cgroup_dir)
    ns = node([b])
    got = read_values(str(tmp_path), ns, cb._pods(ns, args, False))
    assert not any("side-id" in k for k in got) and f"cpu/{a.cgroup_dir}/main-id/cpu.stat" in got
    # a value written between two rounds is read anew
    (pod_dir / "main-id" / "cpu.stat").write_text("nr_periods 2\nnr_throttled 1\n")
    got = read_values(str(tmp_path), ns, cb._pods(ns, args, False))
    assert got[f"cpu/{a.cgroup_dir}/main-id/cpu.stat"] == "nr_periods 2\nnr_throttled 1"


def test_window_averages_as_the_summed_lists_did():
    """_window's running sums give what sum(list) // len(list) of each pod's samples gave."""
    import random

    from cpu_burst_helpers import node as make_node

    rng = random.Random(19)
    cb = CPUBurst()
    seen: list[tuple[float, dict[str, int]]] = []
    now = 100.0
    for _ in range(40):
        now += rng.choice([0.5, 1.0, 1.0, 3.0])
        pods = [attrs.evolve(pod_state(manifest(f"p{i}", {"main": 1000}, qos="LS")), usage={"cpu": rng.randint(0, 5000)})
                for i in range(rng.randint(0, 6))]
        pods = [p for p in pods if rng.random() < 0.8] + [pod_state(manifest("nousage", {"main": 1000}, qos="LS"))]
        ns = make_node(pods, usage=rng.randint(0, 16000))
        node_avg, pod_avg = cb._window(now, ns)
        # the previous formula over the same samples
        seen.append((now, {p.uid: p.usage["cpu"] for p in ns.pods if "cpu" in p.usage}))
        step = seen[-1][0] - seen[-2][0] if len(seen) >= 2 else 0.0
        span = min(5 * step, 10.0) if len(seen) >= 2 and step > 0 else 0.0
        recent = [s for s in seen if now - s[0] <= span] or [seen[-1]]
        sums: dict[str, list[int]] = {}
        for _, d in recent:
            for uid, v in d.items():
                sums.setdefault(uid, []).append(v)
        assert pod_avg == {uid: sum(v) // len(v) for uid, v in sums.items()}
        assert list(pod_avg) == list(sums)
        seen = [s for s in seen if now - s[0] <= 10.0]


def test_node_burst_leaves_out_only_pods_that_count_nowhere():
    """node_burst passes node_state_for_burst the LSE, LSR and BE pods only: the same state as with all."""
    import random

    from cpu_burst_helpers import node as make_node
    from koordfw_cpu_burst.burst import PodUsage, node_state_for_burst
    from koordfw_cpu_burst.plugin import raw_qos

    rng = random.Random(19)
    cb = CPUBurst()
    for _ in range(300):
        pods = [attrs.evolve(pod_state(manifest(f"p{i}", {"main": rng.choice([500, 2000, 4000])},
                                                qos=rng.choice([None, "LS", "LSR", "LSE", "BE", "SYSTEM", "odd"]))),
                             usage={"cpu": rng.randint(0, 8000)} if rng.random() < 0.8 else {})
                for i in range(rng.randint(0, 8))]
        ns = make_node(pods, cpus=rng.choice([2, 4, 16]), usage=rng.choice([None, rng.randint(0, 16000)]))
        args = Args(policy="auto", share_pool_threshold_percent=rng.choice([20, 50, 80]))
        every = [PodUsage(raw_qos(p), p.pod.requests.get("cpu", 0), p.usage.get("cpu")) for p in ns.pods]
        assert cb.node_burst(ns, args) == node_state_for_burst(args.share_pool_threshold_percent, len(ns.cpu_ids),
                                                               ns.usage.get("cpu"), every)
