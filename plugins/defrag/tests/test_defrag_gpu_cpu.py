"""gpu_defrag and cpu_defrag on small hand-built clusters; ``koordfw deschedule`` on a manifest directory."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from defrag_testkit import moves, node, pdb, plan, pod
from koordfw_defrag.fragengine import place_slots

from koordfw.cli import main
from koordfw.testing import ClusterBuilder, schedule

ALLOC = "scheduling.koordinator.sh/device-allocated"


def gpu_node(name, gpus=2, model="A"):
    return node(name, cpu="32", memory="256Gi", labels={"node.koordinator.sh/gpu-model": model},
                **{"nvidia.com/gpu": str(gpus), "koordinator.sh/gpu-core": str(100 * gpus),
                   "koordinator.sh/gpu-memory-ratio": str(100 * gpus), "koordinator.sh/gpu": str(100 * gpus)})


def share_pod(name, node_name, pct, minor, **kw):
    ann = {ALLOC: json.dumps({"gpu": [{"minor": minor, "resources": {"koordinator.sh/gpu-core": str(pct),
                                                                      "koordinator.sh/gpu-memory-ratio": str(pct)}}]})}
    ann.update(kw.pop("annotations", {}))
    return pod(name, node_name, cpu="1", memory="1Gi", annotations=ann,
               requests={"koordinator.sh/gpu-core": str(pct), "koordinator.sh/gpu-memory-ratio": str(pct)}, **kw)


def whole_pod(name, count=2):
    return pod(name, None, cpu="1", memory="1Gi", requests={"nvidia.com/gpu": str(count)})


def gpu_cluster(extra=()):
    """n1: GPU0 holds two 25 % pods; n2: GPU0 holds one 50 % pod; GPU1 of both is free. The workload
    also has 2-GPU pods (pending), which fit nowhere until one node has both GPUs free."""
    return [gpu_node("n1"), gpu_node("n2"),
            share_pod("s1a", "n1", 25, 0), share_pod("s1b", "n1", 25, 0), share_pod("s2", "n2", 50, 0),
            whole_pod("w0"), whole_pod("w1"), whole_pod("w2"), *extra]


PROFILE = {"gpuDefrag": {"enabled": True}}


def test_place_slots_best_fit_and_least_sufficient():
    total = np.full((1, 4), 1000)
    core = np.array([[500, 250, 1000, 1000]])
    ok, sel = place_slots(core, core.copy(), total, 250, 250, 1)
    assert ok[0] and sel[0].tolist() == [False, True, False, False]      # tightest GPU that fits
    ok, sel = place_slots(core, core.copy(), total, 1000, 1000, 2)
    assert ok[0] and sel[0].tolist() == [False, False, True, True]
    ok, _ = place_slots(core, core.copy(), total, 1000, 1000, 3)
    assert not ok[0]


def test_gpu_defrag_frees_a_whole_node():
    out = plan(gpu_cluster(), PROFILE, extra_plugins=("gpu_share",))
    # moving the 50 % pod onto n1's half-used GPU0 frees both GPUs of n2 in one move
    assert moves(out) == [("default/s2", "n2", "n1")]
    m = out["migrations"][0]
    assert m["plugin"] == "gpu_defrag" and "fragmented GPU" in m["reason"]
    b, a = out["before"]["gpu"], out["after"]["gpu"]
    assert b["wholeFreeGpus"] == 2 and a["wholeFreeGpus"] == 3
    assert a["fragmentedGpuMilli"] < b["fragmentedGpuMilli"]


@pytest.mark.parametrize("measure, want", [
    ("capacity", [("default/batch", "gpu", "cpu-node")]),
    ("fgd", []),  # one 8-core GPU pod still fits on "gpu": the paper's measure sees nothing to gain
])
def test_gpu_defrag_frees_cpu_that_strands_gpus(measure, want):
    """A CPU-only pod holds half the CPU of a 4-GPU, 16-core node whose GPU pods need 8 cores each:
    only one of the four free GPUs can get a pod. The capacity-aware measure moves it off."""
    objs = [node("gpu", cpu="16", memory="256Gi", **{"nvidia.com/gpu": "4", "koordinator.sh/gpu-core": "400",
                                                       "koordinator.sh/gpu-memory-ratio": "400"}),
            node("cpu-node", cpu="32", memory="256Gi"),
            pod("batch", "gpu", cpu="8", memory="1Gi"),
            *[pod(f"train-{i}", None, cpu="8", memory="1Gi", requests={"nvidia.com/gpu": "1"}) for i in range(3)]]
    out = plan(objs, {"gpuDefrag": {"enabled": True, "measure": measure}})
    assert moves(out) == want
    if measure == "capacity":
        b, a = out["before"]["gpu"], out["after"]["gpu"]
        assert a["capacityFragmentedGpuMilli"] < b["capacityFragmentedGpuMilli"]


def test_gpu_defrag_target_needs_the_pods_memory():
    """The same stranding pod, two CPU-rich targets: the one without room for its 64 GiB is never used."""
    objs = [node("gpu", cpu="16", memory="256Gi", **{"nvidia.com/gpu": "4", "koordinator.sh/gpu-core": "400",
                                                       "koordinator.sh/gpu-memory-ratio": "400"}),
            node("tight", cpu="64", memory="32Gi"), node("roomy", cpu="32", memory="128Gi"),
            pod("batch", "gpu", cpu="8", memory="64Gi"),
            *[pod(f"train-{i}", None, cpu="8", memory="1Gi", requests={"nvidia.com/gpu": "1"}) for i in range(3)]]
    out = plan(objs, {"gpuDefrag": {"enabled": True}})
    assert moves(out) == [("default/batch", "gpu", "roomy")]


def test_gpu_defrag_without_the_gpu_share_plugin_reads_annotations():
    out = plan(gpu_cluster(), PROFILE)
    assert moves(out) == [("default/s2", "n2", "n1")]


def test_gpu_defrag_respects_pdb_and_budget():
    objs = gpu_cluster()
    for o in objs:
        if o["metadata"]["name"] == "s2":
            o["metadata"]["labels"]["app"] = "s2"
    out = plan(objs + [pdb("s2", {"app": "s2"}, 0)], PROFILE, extra_plugins=("gpu_share",))
    assert "default/s2" not in [m[0] for m in moves(out)]
    out = plan(gpu_cluster(), dict(PROFILE, maxMigratingPerRound=0, maxMigratingPercentPerRound=1),
               extra_plugins=("gpu_share",))
    assert moves(out) == []   # 1 % of 3 bound pods rounds down to 0


def test_gpu_defrag_respects_model_constraint_and_strict_gang():
    # n2 is a B-model node; s1a/s1b accept only A: nothing can consolidate onto a compatible GPU
    objs = [gpu_node("n1"), gpu_node("n2", model="B"), share_pod("s1a", "n1", 25, 0), share_pod("s1b", "n1", 25, 0),
            share_pod("s2", "n2", 50, 0), whole_pod("w0"), whole_pod("w1")]
    for o in objs:
        if o["metadata"]["name"] in ("s1a", "s1b", "s2"):
            o["spec"]["nodeSelector"] = {"node.koordinator.sh/gpu-model": "A" if o["metadata"]["name"] != "s2" else "B"}
    assert moves(plan(objs, PROFILE, extra_plugins=("gpu_share",))) == []
    gang = {"gang.scheduling.koordinator.sh/name": "g"}
    objs = gpu_cluster()
    for o in objs:
        if o["metadata"]["name"] == "s2":
            o["metadata"]["annotations"].update(gang)
    assert "default/s2" not in [m[0] for m in moves(plan(objs, PROFILE, extra_plugins=("gpu_share",)))]


def test_simulate_deschedule_applies_the_gpu_plan_and_the_big_pod_then_fits():
    b = ClusterBuilder()
    b.obj(*gpu_cluster())
    profile = {"pluginConfig": {"defrag": PROFILE, "gpu_share": {"policy": "binpack"}}}
    before = schedule(b, profile={"pluginConfig": {"gpu_share": {"policy": "binpack"}}}, only=["gpu_share"])
    assert before.placements()["default/w0"] is None
    res = schedule(b, profile=profile, only=["gpu_share", "defrag"], deschedule=True)
    assert [(m.pod, m.from_node, m.to) for m in res.migrations] == [("default/s2", "n2", "n1")]
    pl = res.placements()
    assert pl["default/s2"] == "n1"
    assert [pl[f"default/w{i}"] for i in range(3)].count("n2") == 1


def cpu_cluster():
    """n1: two 2-core pods (4 free); n2: one 3-core pod (5 free); 6-core pods are pending."""
    return [node("n1", cpu="8", memory="64Gi"), node("n2", cpu="8", memory="64Gi"),
            pod("a", "n1", cpu="2"), pod("b", "n1", cpu="2"), pod("c", "n2", cpu="3"),
            pod("big0", None, cpu="6"), pod("big1", None, cpu="6"), pod("big2", None, cpu="6")]


def test_cpu_defrag_gathers_free_cores():
    out = plan(cpu_cluster(), {"cpuDefrag": {"enabled": True}})
    assert moves(out) == [("default/c", "n2", "n1")]
    b, a = out["before"]["cpu"], out["after"]["cpu"]
    assert a["fragmentedCpuMilli"] < b["fragmentedCpuMilli"]
    # a move must gain at least minGainMilli
    assert moves(plan(cpu_cluster(), {"cpuDefrag": {"enabled": True, "minGainMilli": 1e9}})) == []


def test_default_args_plan_nothing():
    # each cluster on its own: both name their nodes n1 and n2, and one input cannot hold two Node n1
    for cluster in (cpu_cluster(), gpu_cluster()):
        assert moves(plan(cluster, {})) == []


def _write(tmp_path, objs, profile):
    d = tmp_path / "snap"
    d.mkdir()
    (d / "cluster.yaml").write_text(yaml.safe_dump_all(objs))
    p = tmp_path / "profile.yaml"
    p.write_text(yaml.safe_dump({"pluginConfig": {"defrag": profile}}))
    return d, p


def test_koordfw_deschedule_json(tmp_path, capsys):
    d, p = _write(tmp_path, gpu_cluster(), PROFILE)
    assert main(["deschedule", str(d), "--profile", str(p), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["migrations"] == [{"pod": "default/s2", "from": "n2", "to": "n1",
                                  "reason": out["migrations"][0]["reason"], "plugin": "gpu_defrag"}]
    assert set(out["before"]) == {"gpu"} and set(out["after"]) == {"gpu"}


def test_koordfw_deschedule_table_and_bad_profile(tmp_path, capsys):
    d, p = _write(tmp_path, cpu_cluster(), {"cpuDefrag": {"enabled": True}})
    assert main(["deschedule", str(d), "--profile", str(p)]) == 0
    text = capsys.readouterr().out
    assert "default/c" in text and "cpu_defrag" in text
    p.write_text(yaml.safe_dump({"pluginConfig": {"defrag": {"gpuDefrag": {"minGainMilli": -1}}}}))
    assert main(["deschedule", str(d), "--profile", str(p)]) == 2
    err = capsys.readouterr().err
    assert "pluginConfig.defrag.gpuDefrag" in err and "minGainMilli: must be >= 0" in err


@pytest.mark.parametrize("dry", [True, False])
def test_koordfw_simulate_deschedule_cli(tmp_path, capsys, dry):
    d, p = _write(tmp_path, cpu_cluster(), {"cpuDefrag": {"enabled": True}, "dryRun": dry})
    assert main(["simulate", str(d), "--profile", str(p), "--deschedule", "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    placed = {f"{x['namespace']}/{x['name']}": x["node"] for x in out["pods"]}
    if dry:
        assert placed["default/c"] == "n2" and "migrations" not in out
    else:
        assert placed["default/c"] == "n1"
        assert out["migrations"][0]["plugin"] == "cpu_defrag"
        assert sum(1 for k in ("default/big0", "default/big1", "default/big2") if placed[k] == "n2") == 1


def test_koordfw_simulate_deschedule_cycles(tmp_path, capsys):
    """Two GPU nodes whose free GPUs a CPU-only pod strands; one move per round: each descheduling
    cycle moves one, on the settled result of the cycle before."""
    gpus = {"nvidia.com/gpu": "4", "koordinator.sh/gpu-core": "400", "koordinator.sh/gpu-memory-ratio": "400"}
    objs = [node("gpu-a", cpu="16", memory="256Gi", **gpus), node("gpu-b", cpu="16", memory="256Gi", **gpus),
            node("cpu-node", cpu="32", memory="256Gi"),
            pod("batch-a", "gpu-a", cpu="8", memory="1Gi"), pod("batch-b", "gpu-b", cpu="8", memory="1Gi"),
            *[pod(f"train-{i}", None, cpu="8", memory="1Gi", requests={"nvidia.com/gpu": "1"}) for i in range(6)]]
    d, p = _write(tmp_path, objs, {"gpuDefrag": {"enabled": True}, "maxMigratingPerRound": 1})
    got = {}
    for cycles in (1, 2):
        assert main(["simulate", str(d), "--profile", str(p), "--deschedule", "--deschedule-cycles", str(cycles),
                     "-o", "json"]) == 0
        out = json.loads(capsys.readouterr().out)
        got[cycles] = sorted(m["pod"] for m in out["migrations"])
        placed = {x["name"]: x["node"] for x in out["pods"]}
        assert sum(1 for i in range(6) if placed[f"train-{i}"]) == 2 + cycles  # each move frees CPU for one more
    assert len(got[1]) == 1 and got[2] == ["default/batch-a", "default/batch-b"]
    assert main(["simulate", str(d), "--profile", str(p), "--deschedule", "--deschedule-cycles", "0"]) == 2
    assert "--deschedule-cycles: must be at least 1" in capsys.readouterr().err
