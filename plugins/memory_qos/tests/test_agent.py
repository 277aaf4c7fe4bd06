"""memory_qos through the real node agent on fake kubelet cgroup trees (v2: written; v1 without the files:
idle, said once) and through ``koordfw agent plan --state``."""

from __future__ import annotations

import json
import shutil

import yaml
from koordfw_memory_qos.plan import PAGE_SIZE
from structlog.testing import capture_logs

from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.cli import main
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.cgroups import FakeNode

G, M = 1 << 30, 1 << 20
LS_UID = "bbbbbbbb-0000-0000-0000-000000000002"
BE_UID = "aaaaaaaa-0000-0000-0000-000000000001"
CONFIG = {"memory_qos": {"lsClass": {"enable": True, "minLimitPercent": 50, "lowLimitPercent": 100,
                                     "throttlingPercent": 80},
                         "beClass": {"enable": True, "minLimitPercent": 100, "throttlingPercent": 50}}}
MEMORY_FILES = {"memory.min": "0", "memory.low": "0", "memory.high": "max"}


def manifests() -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "svc", "uid": LS_UID, "labels": {"koordinator.sh/qosClass": "LS"}},
         "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                                "limits": {"cpu": "2", "memory": "2Gi"}}}]},
         "status": {"phase": "Running", "containerStatuses": [{"name": "main", "containerID": "containerd://c1"}]}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "batch", "uid": BE_UID, "labels": {"koordinator.sh/qosClass": "BE"}},
         "spec": {"containers": [{"name": "job", "resources": {
             "requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"},
             "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}}}]},
         "status": {"phase": "Running", "containerStatuses": [{"name": "job", "containerID": "containerd://c2"}]}},
    ]


def fake_node(tmp_path, version: int) -> tuple[FakeNode, dict[str, str]]:
    node = FakeNode(tmp_path, version=version)
    dirs = {"ls": node.add_pod(LS_UID, "burstable", containers=("c1",)),
            "be": node.add_pod(BE_UID, "besteffort", containers=("c2",))}
    if version == 2:  # the kernel's memory QoS files; Anolis' wmark only for the LS pod
        for d in (node.kubepods, node.qos("burstable"), node.qos("besteffort"), dirs["ls"], f"{dirs['ls']}/c1",
                  dirs["be"], f"{dirs['be']}/c2"):
            for name, value in MEMORY_FILES.items():
                (node.ctl("memory", d) / name).write_text(value + "\n")
        for d in (dirs["ls"], f"{dirs['ls']}/c1"):
            (node.ctl("memory", d) / "memory.wmark_ratio").write_text("0\n")
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(manifests()))
    return node, dirs


def agent(tmp_path, node: FakeNode, config: dict = CONFIG) -> Agent:
    registry = Registry(profile_from_dict({"pluginConfig": config})).load(only={"memory_qos"})
    return Agent(registry, CgroupLayout(node.root, node.version), Executor({"cgroup": node.root}), node_name="n1",
                 pods_from=tmp_path / "pods.yaml", proc_root=str(node.proc), sys_root=str(node.sys))


def _page(n: int) -> int:
    return n // PAGE_SIZE * PAGE_SIZE


async def test_agent_round_on_cgroup_v2(tmp_path):
    node, dirs = fake_node(tmp_path, 2)
    a = agent(tmp_path, node)
    await a.startup()
    results = await a.run_once()
    assert {r.outcome for r in results if r.write.plugin == "memory_qos"} <= {"written", "unchanged"}
    read = node.read
    ls, be = dirs["ls"], dirs["be"]
    assert (read("memory", ls, "memory.min"), read("memory", ls, "memory.low")) == (str(G // 2), str(G))
    assert read("memory", f"{ls}/c1", "memory.high") == str(_page(G + G * 80 // 100))
    assert (read("memory", f"{ls}/c1", "memory.min"), read("memory", f"{ls}/c1", "memory.low")) == (str(G // 2), str(G))
    assert read("memory", ls, "memory.wmark_ratio") == "95" and read("memory", f"{ls}/c1", "memory.wmark_ratio") == "95"
    assert read("memory", be, "memory.min") == str(512 * M) and read("memory", be, "memory.low") == "0"
    assert read("memory", f"{be}/c2", "memory.high") == str(_page(512 * M + 512 * M * 50 // 100))
    assert read("memory", node.qos("burstable"), "memory.min") == str(G // 2)
    assert read("memory", node.qos("besteffort"), "memory.min") == str(512 * M)
    assert (read("memory", node.kubepods, "memory.min"), read("memory", node.kubepods, "memory.low")) == (
        str(G // 2 + 512 * M), str(G))
    # files the kernel does not have are never created
    assert not (node.ctl("memory", be) / "memory.wmark_ratio").exists()
    assert not (node.ctl("memory", ls) / "memory.priority").exists()
    second = await a.run_once()
    assert [r for r in second if r.write.plugin == "memory_qos" and r.outcome != "unchanged"] == []


async def test_a_vanished_container_is_skipped_and_logged(tmp_path):
    """The container's cgroup goes between collect and apply: its writes are skipped (outcome vanished),
    the rest of the round is applied."""
    node, dirs = fake_node(tmp_path, 2)
    a = agent(tmp_path, node)
    gone = node.ctl("memory", f"{dirs['be']}/c2")
    a.on_collect.append(lambda ns: shutil.rmtree(gone, ignore_errors=True))
    with capture_logs() as logs:
        results = await a.run_once()
    mine = [(r.write.path, r.outcome) for r in results if r.write.plugin == "memory_qos"]
    assert {o for p, o in mine if p.startswith(f"{dirs['be']}/c2/")} == {"vanished"}
    assert node.read("memory", dirs["be"], "memory.min") == str(512 * M)
    assert any(e.get("plugin") == "memory_qos" and "vanish" in e["event"] for e in logs)


async def test_a_pod_annotation_overrides_and_none_resets(tmp_path):
    node, dirs = fake_node(tmp_path, 2)
    docs = manifests()
    docs[0]["metadata"]["annotations"] = {"koordinator.sh/memoryQOS": '{"policy": "none"}'}
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(docs))
    a = agent(tmp_path, node)
    await a.run_once()
    ls = dirs["ls"]
    assert node.read("memory", ls, "memory.min") == "0" and node.read("memory", f"{ls}/c1", "memory.high") == "max"
    assert node.read("memory", ls, "memory.wmark_ratio") == "0"
    assert node.read("memory", node.kubepods, "memory.min") == str(512 * M)  # the BE pod only


async def test_cgroup_v1_without_the_files_is_idle_and_says_so_once(tmp_path):
    node, _ = fake_node(tmp_path, 1)
    a = agent(tmp_path, node)
    with capture_logs() as logs:
        for _ in range(3):
            results = await a.run_once()
            assert [r for r in results if r.write.plugin == "memory_qos"] == []
    idle = [e for e in logs if "memory_qos idle" in e["event"]]
    assert len(idle) == 1 and idle[0]["cgroup_version"] == 1


def test_agent_plan_cli(tmp_path, capsys):
    cgroups = {f"{d}/{f}": v for d in ("kubepods", "kubepods/burstable", f"kubepods/burstable/pod{LS_UID}",
                                       f"kubepods/burstable/pod{LS_UID}/c1") for f, v in MEMORY_FILES.items()}
    state = {"cgroupVersion": 2, "node": {"name": "n1", "capacity": {"cpu": "8", "memory": "32Gi"}},
             "pods": [{k: v for k, v in manifests()[0].items() if k in ("metadata", "spec", "status")}],
             "cgroups": cgroups, "config": CONFIG}
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    assert main(["agent", "plan", "--state", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    mine = {(w["path"], w["value"]) for w in out["writes"] if w["plugin"] == "memory_qos"}
    pod = f"kubepods/burstable/pod{LS_UID}"
    assert {(f"{pod}/memory.min", str(G // 2)), (f"{pod}/memory.low", str(G)),
            (f"{pod}/c1/memory.high", str(_page(G + G * 80 // 100))), ("kubepods/memory.min", str(G // 2))} <= mine
    assert all(p.rsplit("/", 1)[-1] in MEMORY_FILES for p, _ in mine)


def test_listed_by_koordfw_plugins(capsys):
    assert main(["plugins", "-o", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    row = rows["memory_qos"]
    assert row["distribution"] == "koordfw-memory-qos" and not row.get("error")
    assert {"collect", "qos_plan", "runtime_hook", "plugin_args"} <= set(row["hooks"])


async def test_a_default_install_touches_nothing_until_a_class_is_enabled(tmp_path):
    """Koordinator's CgroupReconcile gate is off by default: with no class enabled and no pod annotation
    nothing is read or written; once enabled (here through the NodeSLO) the plugin reconciles, and a class
    disabled again gets NoneMemoryQOS (the kernel defaults) as in Koordinator."""
    from koordfw.agent.nodeslo import apply_nodeslo

    node, dirs = fake_node(tmp_path, 2)
    a = agent(tmp_path, node, config={})
    assert [r for r in await a.run_once() if r.write.plugin == "memory_qos"] == []
    assert "memory_qos.files" not in a.node_state.metrics
    slo = {"metadata": {"name": "n1"}, "spec": {"resourceQOSStrategy": {"lsClass": {"memoryQOS": {
        "enable": True, "minLimitPercent": 100}}}}}
    apply_nodeslo(a.registry, {}, slo)
    await a.run_once()
    assert node.read("memory", dirs["ls"], "memory.min") == str(G)
    assert node.read("memory", dirs["ls"], "memory.wmark_ratio") == "95"
    slo["spec"]["resourceQOSStrategy"]["lsClass"]["memoryQOS"]["enable"] = False
    apply_nodeslo(a.registry, {}, slo)
    await a.run_once()
    assert node.read("memory", dirs["ls"], "memory.min") == "0"
    assert node.read("memory", dirs["ls"], "memory.wmark_ratio") == "0"
    assert node.read("memory", node.kubepods, "memory.min") == "0"


async def test_stop_puts_the_kubelets_values_back(tmp_path):
    """On stop every QoS level, pod and container gets NoneMemoryQOS again (what Koordinator writes for a
    disabled class: memory.min/low 0, memory.high max, the wmark knobs at the kernel's defaults), read
    from the files as they are then, leveled (children lowered before their parents)."""
    node, dirs = fake_node(tmp_path, 2)
    a = agent(tmp_path, node)
    await a.startup()
    await a.run_once()
    ls, be = dirs["ls"], dirs["be"]
    assert node.read("memory", ls, "memory.min") == str(G // 2)
    applied: list = []
    real_apply = a.executor.apply
    a.executor.apply = lambda writes, **kw: applied.extend(writes) or real_apply(writes, **kw)
    await a.shutdown()
    order = [w.path for w in applied if w.path.endswith("/memory.min")]
    # containers, then pods, then the QoS levels (one level in Koordinator's LeveledUpdateBatch)
    assert order.index(f"{ls}/c1/memory.min") < order.index(f"{ls}/memory.min") \
        < order.index(f"{node.qos('burstable')}/memory.min")
    for d in (node.kubepods, node.qos("burstable"), node.qos("besteffort"), ls, f"{ls}/c1", be, f"{be}/c2"):
        assert (node.read("memory", d, "memory.min"), node.read("memory", d, "memory.low"),
                node.read("memory", d, "memory.high")) == ("0", "0", "max"), d
    assert node.read("memory", ls, "memory.wmark_ratio") == "0"
    assert node.read("memory", f"{ls}/c1", "memory.wmark_ratio") == "0"
    assert not (node.ctl("memory", be) / "memory.wmark_ratio").exists()
    applied.clear()
    await a.shutdown()  # idempotent: the same writes, none of which differs any more
    assert {r.outcome for r in real_apply(applied)} == {"unchanged"}


async def test_stop_of_a_plugin_that_never_engaged_touches_nothing(tmp_path):
    node, dirs = fake_node(tmp_path, 2)
    (node.ctl("memory", dirs["ls"]) / "memory.min").write_text("12345\n")  # someone else's value
    a = agent(tmp_path, node, config={})
    await a.run_once()
    await a.shutdown()
    assert node.read("memory", dirs["ls"], "memory.min") == "12345"
