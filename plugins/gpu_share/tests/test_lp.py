"""fgdlp: the configuration LP, rate-matching packer and the policy in the scheduling cycle."""

import json
import types

import pytest
from koordfw_gpu_share import lp
from koordfw_gpu_share import plugin as gpu_plugin

from koordfw import ConfigError
from koordfw.testing import ClusterBuilder, schedule

ANN = "scheduling.koordinator.sh/device-allocated"


def test_maximal_configs_hand_enumerated():
    got = sorted(lp.maximal_configs([500, 300]))
    # 500+500 = 1000; 500+300 leaves 200 < 300; 3×300 leaves 100; 500 alone or 300+300 could take more
    assert got == sorted([(500, 500), (500, 300), (300, 300, 300)])
    assert lp.maximal_configs([]) == []


def test_lp_leaves_out_rare_sizes_when_configurations_explode(monkeypatch):
    monkeypatch.setattr(lp, "MAX_CONFIGS", 500)
    dist = {m: 1 for m in range(10, 1000, 10)}  # every gpu-core percentage: far too many combinations
    dist[470] = dist[320] = dist[650] = 50
    w = lp.solve(dist)
    used = {s for c in w for s in c}
    assert {470, 320, 650} <= used and len(used) < len(dist)
    assert len(lp.maximal_configs(used)) <= 500
    with pytest.raises(lp.TooManyConfigs):
        lp.maximal_configs(dist, limit=500)


def test_lp_pairs_sizes_that_fill_a_gpu():
    # 470 pairs with 470 (60 left) and 320 with 650 (30 left): two GPUs for the four shares, the only optimum
    w = lp.solve({470: 2, 320: 1, 650: 1})
    assert w == pytest.approx({(470, 470): 0.5, (650, 320): 0.5})
    assert lp.solve({810: 1, 190: 1}) == pytest.approx({(810, 190): 1.0})


def test_packer_rate_matching_fill_and_undo():
    p = lp.Packer(weights={(470, 470): 0.5, (650, 320): 0.5})
    left = {(0, 0): 1000, (0, 1): 1000}

    class Left:  # the packer indexes milli left by (node, slot)
        def __getitem__(self, k):
            return left[k]

    assert p.next_config(320) == (650, 320) and p.next_config(650) == (650, 320)
    rec = p.open((0, 0), 470, (470, 470))
    left[(0, 0)] = 530
    assert p.waiting_slots(470, Left()) == [(0, 0)] and p.waiting_slots(320, Left()) == []
    # (470, 470) has had its share of openings; a 320 opens the other configuration
    assert p.next_config(470) == (470, 470) and p.opened[(470, 470)] == 1
    fill = p.fill((0, 0), 470)
    assert fill == ("fill", (0, 0), 470) and p.need[(0, 0)][470] == 0
    assert p.waiting_slots(470, Left()) == []  # stale entry dropped
    p.undo(fill)
    assert p.waiting_slots(470, Left()) == [(0, 0)]
    p.undo(rec)
    assert (0, 0) not in p.need and p.n_opened == 0 and p.opened[(470, 470)] == 0
    assert p.fill((0, 1), 470) == ("none",)  # a GPU nobody opened waits for nothing
    # a stale entry behind a live one: only the live GPU is offered
    p.open((0, 1), 470, (470, 470))
    p.waiting[470].appendleft((0, 0))
    p.waiting[470].append((0, 0))
    assert p.waiting_slots(470, Left()) == [(0, 1)] and list(p.waiting[470]) == [(0, 1)]


def _node(b, name, gpus=2, cpu="32"):
    b.node(name, cpu=cpu, memory="128Gi", labels={"node.koordinator.sh/gpu-model": "T4"},
           **{"nvidia.com__gpu": str(gpus), "koordinator.sh__gpu-core": str(100 * gpus),
              "koordinator.sh__gpu-memory-ratio": str(100 * gpus), "koordinator.sh__gpu-memory": f"{16 * gpus}Gi"})


def _share(b, name, pct):
    b.pod(name, cpu="1", requests={"koordinator.sh/gpu-core": str(pct), "koordinator.sh/gpu-memory-ratio": str(pct)})


def _run(policy, extra=None, nodes=(("n1", 2),)):
    b = ClusterBuilder()
    for name, gpus in nodes:
        _node(b, name, gpus)
    for name, pct in (("a", 47), ("b", 32), ("c", 65), ("d", 47)):
        _share(b, name, pct)
    cfg = {"policy": policy, "tieBreak": "first", **(extra or {})}
    out = schedule(b, only=["gpu_share"], profile={
        "percentageOfNodesToScore": 100,
        "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "gpu_share"}]}},
        "pluginConfig": {"gpu_share": cfg}})
    return {p["name"]: ((p["node"], json.loads(p["annotations"][ANN])["gpu"][0]["minor"]) if p["node"] else None)
            for p in out.to_dict()["pods"]}


@pytest.mark.parametrize("nodes, want", [
    # one node: a single feasible node is not scored, so reserve applies the rule on its own
    ((("n1", 2),), {"a": ("n1", 0), "b": ("n1", 1), "c": ("n1", 1), "d": ("n1", 0)}),
    # two nodes of one GPU: the score sends each share to the GPU waiting for it
    ((("n1", 1), ("n2", 1)), {"a": ("n1", 0), "b": ("n2", 0), "c": ("n2", 0), "d": ("n1", 0)}),
])
def test_fgdlp_packs_by_configuration_where_fit_packing_strands_a_share(nodes, want):
    """470, 320, 650, 470 on two GPUs. Packing by fit puts the 320 beside the first 470 (210 left), so the
    last 470 finds no room; fgdlp opens a GPU for 650 + 320 and keeps the first for a second 470."""
    sizes = [{"milliGpu": 470, "weight": 2}, {"milliGpu": 320, "weight": 1}, {"milliGpu": 650, "weight": 1}]
    assert _run("fgdlp", {"shareSizes": sizes}, nodes) == want
    assert _run("fgdcap", nodes=nodes)["d"] is None


def test_fgdlp_learns_the_distribution_from_shared_pods(monkeypatch):
    monkeypatch.setattr(gpu_plugin, "LP_LEARN_EVERY", 3)
    g = gpu_plugin.GpuShare()
    args = gpu_plugin.Args(policy="fgdlp")
    for milli in (470, 470, 320):
        assert not g.packer.weights
        g._learn_share(types.SimpleNamespace(count=1, milli=milli), args)
    g._learn_share(types.SimpleNamespace(count=2, milli=1000), args)  # not a share: not counted
    assert g.packer.weights == pytest.approx(lp.solve({470: 2, 320: 1}))
    assert g._shares_seen == {470: 2, 320: 1}


@pytest.mark.parametrize("bad", [{"milliGpu": 1000}, {"milliGpu": 0}, {"milliGpu": 470, "weight": -1}])
def test_share_sizes_out_of_range_are_config_errors(bad):
    from koordfw.engines.embedded import build_registry
    with pytest.raises(ConfigError, match="gpu_share"):
        build_registry({"pluginConfig": {"gpu_share": {"policy": "fgdlp", "shareSizes": [bad]}}}, only=["gpu_share"])
