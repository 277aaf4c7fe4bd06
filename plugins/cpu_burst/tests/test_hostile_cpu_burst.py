"""Hostile input (issue 16) for cpu_burst: a pod's unreadable annotation, statuses or container ids, and
garbage cgroup values cost only that pod or file; the other pods are planned, in bounded time, with no
traceback. Bad args are refused naming the field."""

from __future__ import annotations

import json

import pytest
import yaml
from cpu_burst_helpers import manifest
from koordfw_cpu_burst import Args, CPUBurst

from koordfw.core.errors import ConfigError
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.hostile import check_cli_outcome, run_cli

DEEP = "[" * 5000 + "]" * 5000
GOOD_UID = "good"


def state_pod(uid: str, *, annotations=None, statuses=None, limit=2000):
    m = manifest(uid, {"main": limit}, qos="LS", uid=uid, annotations=annotations)
    if statuses is not None:
        m["status"]["containerStatuses"] = statuses
    return {**m, "uid": uid, "cgroupDir": f"kubepods/burstable/pod{uid}"}


def cgroups_for(uid: str, quota: str = "200000") -> dict:
    d = f"kubepods/burstable/pod{uid}"
    return {f"cpu/{d}/cpu.cfs_quota_us": quota, f"cpu/{d}/cpu.cfs_burst_us": "0",
            f"cpu/{d}/main-id/cpu.cfs_quota_us": quota, f"cpu/{d}/main-id/cpu.cfs_burst_us": "0"}


def plan(tmp_path, pods, cgroups, config=None):
    state = {"cgroupVersion": 1, "pods": pods, "cgroups": cgroups,
             "node": {"name": "n1", "capacity": {"cpu": "8"}, "usage": {"cpu": "1"}}}
    (tmp_path / "s.json").write_text(json.dumps(state))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(
        {"pluginConfig": {"cpu_burst": config or {"policy": "auto", "cpuBurstPercent": 50}}}))
    out = run_cli(["agent", "plan", "--state", str(tmp_path / "s.json"), "--config", str(tmp_path / "p.yaml")],
                  timeout=60)
    assert check_cli_outcome(out, max_seconds=30) == "ok", out.describe()
    return [w for w in json.loads(out.stdout)["writes"] if w["plugin"] == "cpu_burst"]


GOOD_BURST = ("cpu/kubepods/burstable/podgood/main-id/cpu.cfs_burst_us", "100000")


@pytest.mark.parametrize("name, bad", [
    ("deep annotation", state_pod("bad", annotations={"koordinator.sh/cpuBurst": DEEP})),
    ("annotation of the wrong types", state_pod("bad", annotations={"koordinator.sh/cpuBurst": json.dumps(
        {"policy": ["auto"], "cpuBurstPercent": 10**30})})),
    ("statuses not a list", state_pod("bad", statuses={"name": "main"})),
    ("statuses of garbage", state_pod("bad", statuses=[None, 5, {"name": 7}, {"name": "main", "containerID": ["x"]},
                                                      {"name": "main", "containerID": "containerd://a/../../x"},
                                                      {"name": "main", "containerID": "containerd://a\u0000b"},
                                                      {"name": "main", "containerID": "nope"},
                                                      {"name": "main", "containerID": "containerd://" + "a" * 300,
                                                       "state": {"running": {}}}])),
    ("a huge limit", state_pod("bad", limit=10**12)),
])
def test_one_bad_pod_costs_only_itself(tmp_path, name, bad):
    writes = plan(tmp_path, [state_pod(GOOD_UID), bad], {**cgroups_for(GOOD_UID), **cgroups_for("bad")})
    assert GOOD_BURST in [(w["path"], w["value"]) for w in writes]


@pytest.mark.parametrize("quota", ["", "max max", "-5", "1e9", "99999999999999999999999", "12abc", "\u0661\u0662"])
def test_garbage_quota_values_are_unreadable_not_fatal(tmp_path, quota):
    writes = plan(tmp_path, [state_pod(GOOD_UID), state_pod("bad")],
                  {**cgroups_for(GOOD_UID), **cgroups_for("bad", quota)}, config={"policy": "auto"})
    paths = [w["path"] for w in writes]
    assert GOOD_BURST[0] in paths
    assert not any("podbad" in p and p.endswith("cpu.cfs_quota_us") for p in paths)


def test_collect_with_hostile_container_ids_reads_nothing_outside(tmp_path):
    """collect joins container ids to the cgroup root: a NUL byte, ``..`` or a long name never raises."""
    from koordfw.core.model import pod_from_manifest
    from koordfw.core.nodestate import NodeState, PodState

    m = manifest("p", {"main": 2000}, qos="LS", uid="p")
    m["status"]["containerStatuses"] = [{"name": "main", "containerID": cid, "state": {"running": {}}}
                                        for cid in ("containerd://a\u0000b", "containerd://..", "docker://" + "x" * 5000)]
    ps = PodState(uid="p", pod=pod_from_manifest(m), qos="LS", kube_qos="Burstable", cgroup_dir="kubepods/burstable/podp")
    ns = NodeState(cgroup_version=1, pods=(ps,))

    class Handle:
        roots = {"cgroup": str(tmp_path)}

        def now(self) -> float:
            return 1.0

    out = CPUBurst().collect(ns, Args(policy="auto"), Handle())
    assert out is not None and out["cpu_burst.cgroups"] == {}


@pytest.mark.parametrize("raw, field", [
    ({"policy": "burst"}, "policy"), ({"cpuBurstPercent": 0}, "cpuBurstPercent"),
    ({"cpuBurstPercent": 10001}, "cpuBurstPercent"), ({"cfsQuotaBurstPercent": 99}, "cfsQuotaBurstPercent"),
    ({"cfsQuotaBurstPeriodSeconds": -2}, "cfsQuotaBurstPeriodSeconds"),
    ({"sharePoolThresholdPercent": 101}, "sharePoolThresholdPercent"), ({"cpuBurstPercent": 1.5}, "cpuBurstPercent"),
    ({"cpuBurstPercent": True}, "cpuBurstPercent"), ({"burstPercent": 5}, "burstPercent"),
])
def test_bad_args_name_the_field(raw, field):
    with pytest.raises(ConfigError, match=field):
        Registry(profile_from_dict({"pluginConfig": {"cpu_burst": raw}})).load(only={"cpu_burst"})
