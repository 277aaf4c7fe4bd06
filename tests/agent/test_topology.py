"""The node's CPU topology and kubelet CPU manager policy as koordlet reports them: lscpu's logical ids from
sysfs, and the static policy's reserved CPUs (kubelet's takeByTopology, sockets first)."""

from __future__ import annotations

import json

import pytest

from koordfw.agent.topology import (
    KubeletCPUManager,
    ProcessorInfo,
    kubelet_policy_json,
    read_kubelet_config,
    read_processors,
    take_by_topology,
)
from koordfw.core.errors import ConfigError


def dual_socket_ht() -> list[ProcessorInfo]:
    """kubelet's topoDualSocketHT: 12 CPUs; socket 0 has the even ids, a core's threads are i and i+6."""
    return [ProcessorInfo(cpu=c, core=(c % 6) // 2 + 3 * (c % 2), socket=c % 2, node=c % 2) for c in range(12)]


@pytest.mark.parametrize("n, want", [
    (1, [0]),                      # a single thread of the first core of the first socket
    (2, [0, 6]),                   # a whole core
    (4, [0, 2, 6, 8]),             # two whole cores, lowest ids
    (6, [0, 2, 4, 6, 8, 10]),      # a whole socket
    (7, [0, 1, 2, 4, 6, 8, 10]),   # the socket, then one thread of the other socket
    (12, list(range(12))),
])
def test_take_by_topology_is_kubelets(n, want):
    assert take_by_topology(dual_socket_ht(), range(12), n) == want


def test_take_by_topology_prefers_the_emptier_partial_core_and_fails_when_short():
    procs = dual_socket_ht()
    # cpu 0 gone: core 0 has 1 free thread, so the sort (fewest available first) takes cpu 6 for one CPU
    assert take_by_topology(procs, [c for c in range(12) if c != 0], 1) == [6]
    # kubelet's "take one cpu from dual socket with HT - core from Socket 0"
    assert take_by_topology(procs, [1, 2, 3, 4, 5, 7, 8, 9, 10, 11], 1) == [2]
    assert take_by_topology(procs, [0, 1], 3) is None


def test_static_reserved_cpus_from_kube_and_system_reserved(tmp_path):
    f = tmp_path / "kubelet.yaml"
    f.write_text("cpuManagerPolicy: static\nkubeReserved: {cpu: 500m}\nsystemReserved: {cpu: '1'}\n")
    k = read_kubelet_config(str(f))
    assert k.reserved_milli == 1500
    # ceil(1.5) = 2 CPUs: a whole core, as the kubelet's comment says ({0,4} with 8 HT CPUs)
    procs = [ProcessorInfo(cpu=c, core=c % 4, socket=0, node=0) for c in range(8)]
    assert json.loads(kubelet_policy_json(k, procs)) == {"policy": "static", "reservedCPUs": "0,4"}
    # no reservation: the kubelet's static policy cannot start; koordlet reports no reservedCPUs
    assert json.loads(kubelet_policy_json(KubeletCPUManager(policy="static"), procs)) == {"policy": "static"}
    assert json.loads(kubelet_policy_json(KubeletCPUManager(policy="none"), procs)) == {"policy": "none"}
    f.write_text("cpuManagerPolicy: static\nkubeReserved: {cpu: lots}\n")
    with pytest.raises(ConfigError, match="field kubeReserved.cpu"):
        read_kubelet_config(str(f))


def test_logical_ids_without_sibling_lists(tmp_path):
    """Without thread_siblings_list, a core is (package, core_id); sockets are numbered by first
    appearance even when the firmware's package ids are sparse."""
    base = tmp_path / "devices/system/cpu"
    for cpu, (pkg, core) in enumerate([(3, 0), (3, 1), (7, 0), (7, 1)]):
        t = base / f"cpu{cpu}" / "topology"
        t.mkdir(parents=True)
        (t / "physical_package_id").write_text(f"{pkg}\n")
        (t / "core_id").write_text(f"{core}\n")
    (base / "online").write_text("0-3\n")
    assert [(p.cpu, p.core, p.socket, p.node) for p in read_processors(tmp_path)] == [
        (0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 1, 0), (3, 3, 1, 0)]


def test_kubelet_managed_pods_from_cpu_manager_state(tmp_path):
    """Static policy: the checkpoint's pods Koordinator does not manage (not LS/BE, no Koordinator cpuset)
    are pod-cpu-allocs with managedByKubelet, their CPUs out of the shared pools."""
    from koordfw.agent.topology import topology_annotations
    from koordfw.core.model import make_pod

    guaranteed = make_pod("db", namespace="shop")
    be = make_pod("spark", labels={"koordinator.sh/qosClass": "BE"})
    lsr = make_pod("web", labels={"koordinator.sh/qosClass": "LSR"},
                   annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"6"}'})
    (tmp_path / "cpu_manager_state").write_text(json.dumps({
        "policyName": "static", "defaultCpuSet": "0,3-7",
        "entries": {guaranteed.uid: {"app": "1-2"}, be.uid: {"c": "5"}, lsr.uid: {"c": "6"}, "gone-uid": {"x": "3"}},
        "checksum": 1}))
    procs = [ProcessorInfo(cpu=c, core=c % 4, socket=0, node=0) for c in range(8)]
    anns = topology_annotations(procs, None, [guaranteed, be, lsr], kubelet=KubeletCPUManager(policy="static"),
                                basic_info={}, kubelet_root=tmp_path)
    want = [{"namespace": "shop", "name": "db", "uid": guaranteed.uid, "cpuset": "1-2", "managedByKubelet": True},
            {"uid": "gone-uid", "cpuset": "3", "managedByKubelet": True}]
    assert json.loads(anns["node.koordinator.sh/pod-cpu-allocs"]) == sorted(want, key=lambda a: a["uid"])  # by uid
    # the LS pool loses the kubelet's CPUs and the LSR pod's cpuset
    assert json.loads(anns["node.koordinator.sh/cpu-shared-pools"]) == [{"socket": 0, "node": 0, "cpuset": "0,4-5,7"}]
