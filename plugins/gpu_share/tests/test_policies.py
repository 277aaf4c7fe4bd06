"""gpu_share's policy registry, and every shipped policy scored and placed (hand-computed where the
other test files do not already cover it)."""

import json

import numpy as np
import pytest
from gpu_share_testkit import gpu_cluster
from koordfw_gpu_share import POLICIES, baselines, policies
from koordfw_gpu_share.inventory import Alloc
from koordfw_gpu_share.plugin import Args, GpuShare
from koordfw_gpu_share.requests import pod_gpu_request

from koordfw import ConfigError
from koordfw.core.cluster import ClusterState
from koordfw.inputs import make_node, make_pod
from koordfw.testing import schedule

ANN = "scheduling.koordinator.sh/device-allocated"
PRODUCT = ("spread", "binpack", "fgd", "fgdlp")
BASELINES = ("bestfit", "dotprod", "packing", "clustering", "random", "fgdcap")


def test_registry_holds_the_product_then_the_baselines():
    assert tuple(POLICIES) == PRODUCT + BASELINES
    for name, cls in POLICIES.items():
        assert cls.name == name
        assert cls.__module__ == (policies.__name__ if name in PRODUCT else baselines.__name__)
    assert [n for n, c in POLICIES.items() if c.needs_lp] == ["fgdlp"]
    assert [n for n, c in POLICIES.items() if not c.scores_cpu_pods] == ["spread", "binpack"]
    assert POLICIES["fgdlp"].measure is POLICIES["fgdcap"].measure is not POLICIES["fgd"].measure


@pytest.mark.parametrize("name", ["fgdpack", "fgdx", "nope"])
def test_unknown_or_removed_policy_is_refused_with_the_names(name):
    with pytest.raises(ValueError, match="use one of spread, binpack, fgd, fgdlp, bestfit"):
        Args(policy=name)
    from koordfw.engines.embedded import build_registry
    with pytest.raises(ConfigError, match="gpu_share"):
        build_registry({"pluginConfig": {"gpu_share": {"policy": name}}}, only=["gpu_share"])


def test_register_refuses_a_duplicate_name():
    class Again(policies.Policy):
        name = "fgd"
    with pytest.raises(ValueError, match="already registered"):
        policies.register(Again)
    assert POLICIES["fgd"] is policies.Fgd


@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_places_shares_whole_gpus_and_cpu_pods(policy):
    b = gpu_cluster()
    b.pod("share", cpu="1", requests={"koordinator.sh/gpu-core": "40", "koordinator.sh/gpu-memory-ratio": "40"})
    b.pod("whole", cpu="1", requests={"nvidia.com/gpu": "2"})
    b.pod("cpu", cpu="2")
    b.pod("toobig", cpu="1", requests={"nvidia.com/gpu": "3"})
    out = schedule(b, only=["gpu_share"], profile={
        "percentageOfNodesToScore": 100,
        "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "gpu_share"}]}},
        "pluginConfig": {"gpu_share": {"policy": policy, "tieBreak": "first",
                                       "shareSizes": [{"milliGpu": 400}, {"milliGpu": 600}]}}})
    pods = {p["name"]: p for p in out.to_dict()["pods"]}
    assert pods["share"]["node"] and pods["whole"]["node"] and pods["cpu"]["node"]
    share = json.loads(pods["share"]["annotations"][ANN])["gpu"]
    whole = json.loads(pods["whole"]["annotations"][ANN])["gpu"]
    assert len(share) == 1 and share[0]["resources"]["koordinator.sh/gpu-core"] == "40"
    assert sorted(d["minor"] for d in whole) == [0, 1]
    assert ANN not in pods["cpu"]["annotations"]
    assert pods["toobig"]["node"] is None


# -- the baselines' scores, on the plugin's state directly ---------------------------------------------

def _state(held=()):
    """Two nodes of 32 CPUs and 2 GPUs; ``held``: (node, slot, milli) allocations already made."""
    cluster = ClusterState()
    for n in ("n1", "n2"):
        cluster.add_node(make_node(n, allocatable={"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "2"},
                                   labels={"node.koordinator.sh/gpu-model": "T4"}))
    g = GpuShare()
    g.sync(cluster)
    for k, (node, slot, milli) in enumerate(held):
        g.inv.add(f"held-{k}", Alloc(node, (slot,), milli, milli, None, milli, "share-gpu" if milli < 1000 else "1-gpu"))
    return g, cluster


def _pod(pct=None, cpu="1", gpus=None):
    req = {"cpu": cpu}
    if pct is not None:
        req.update({"koordinator.sh/gpu-core": str(pct), "koordinator.sh/gpu-memory-ratio": str(pct)})
    if gpus is not None:
        req["nvidia.com/gpu"] = str(gpus)
    p = make_pod("p", "default", requests=req)
    return p, pod_gpu_request(p)


def _scores(policy, g, cluster, pod, req, **args):
    a = Args(policy=policy, **args)
    return g.policy(a).score(cluster, np.array([0, 1]), pod, req, a, {}).tolist()


def test_dotprod_scores_hand_computed():
    g, cluster = _state([(1, 0, 500), (1, 1, 500)])  # n2 has 1000 milli of GPU left, n1 2000
    pod, req = _pod(gpus=1, cpu="8")
    # 100·(1 − dot/2), dot = cpu_left/128000 · cpu/128000 + gpu_left/8000 · gpu/8000
    want = [int(100 * (1 - (32000 / 128000 * 8000 / 128000 + gpu / 8000 * 1000 / 8000) / 2)) for gpu in (2000, 1000)]
    assert want == [97, 98]
    assert _scores("dotprod", g, cluster, pod, req) == want


def test_packing_scores_hand_computed():
    g, cluster = _state([(1, 0, 500)])
    pod, req = _pod(30)
    # n1 all free: max(33 − 2, 2) = 31; n2 a shared GPU (500 left): max(100 − 50 // 10, 50) = 95
    assert _scores("packing", g, cluster, pod, req) == [31, 95]
    g, cluster = _state([(1, 0, 1000)])
    pod, req = _pod(gpus=1)
    # n2: a whole GPU of a used node, max(50 − 1, 33) = 49
    assert _scores("packing", g, cluster, pod, req) == [31, 49]
    assert _scores("packing", g, cluster, *_pod()) == [0, 0]  # CPU-only pods: 0 everywhere


def test_clustering_scores_hand_computed():
    g, cluster = _state([(1, 0, 500)])
    pod, req = _pod(30)
    # base 25·(8000 − gpu_left)//8000; n1 empty +25, n2 only shares +75
    assert _scores("clustering", g, cluster, pod, req) == [25 * 6000 // 8000 + 25, 25 * 6500 // 8000 + 75]
    pod, req = _pod(gpus=1)
    assert _scores("clustering", g, cluster, pod, req) == [25 * 6000 // 8000 + 25, 25 * 6500 // 8000 + 0]
    assert _scores("clustering", g, cluster, *_pod()) == [0, 0]


def test_random_gives_one_node_the_top_score_seeded():
    def run(seed):
        g, cluster = _state()
        g.rng = np.random.default_rng(seed)
        pod, req = _pod(30)
        out = [_scores("random", g, cluster, pod, req) for _ in range(8)]
        slots = [g.policy(Args(policy="random")).choose_shared(cluster, 0, pod, req, None, None,
                                                               np.array([0, 1]), None)[0] for _ in range(8)]
        return out, slots
    out, slots = run(5)
    assert all(sorted(s) == [0, 100] for s in out)
    assert len({tuple(s) for s in out}) == 2 and set(slots) == {0, 1}  # both nodes, both GPUs drawn
    assert run(5) == (out, slots) and run(6) != (out, slots)


def test_best_fit_device_choice_of_the_packers():
    g, cluster = _state([(0, 1, 600)])
    pod, req = _pod(30)
    fit = g.inv.fit_devices(np.array([0]), req.core, req.memory_ratio, req.memory_bytes)[0]
    args = Args(policy="bestfit")
    assert g.policy(args).choose(cluster, 0, pod, req, args, fit, np.flatnonzero(fit), None) == [1]  # least left
    pod2, req2 = _pod(gpus=2)
    fit2 = g.inv.fit_devices(np.array([1]), req2.core, req2.memory_ratio, req2.memory_bytes)[0]
    assert g.policy(args).choose(cluster, 1, pod2, req2, args, fit2, np.flatnonzero(fit2), None) == [0, 1]
