"""Two teams through ``koordfw simulate``: A borrows B's idle share, B's pods arrive and take it back.

Team A's 12 pods (priority 5500) were started at 08:00 while B was idle (A min 6, B min 10, 16 cores).
Team B's 8 pods (priority 9500) arrive at 09:00 and are pending: they count in B's request at once,
so A's runtime falls to 8 (its min 6 plus its share of the 2 cores nobody guarantees).
"""

import json
from pathlib import Path

import anyio

from koordfw.cli import main
from koordfw.core.manifests import load_manifests
from koordfw.engines.embedded import EmbeddedEngine, build_registry

SCENARIO = Path(__file__).parent / "scenario"


def simulate(capsys, *extra):
    assert main(["simulate", str(SCENARIO), "-o", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def by_team(data):
    out = {"team-a": [], "team-b": []}
    for p in data["pods"]:
        out[p["namespace"]].append(p)
    return out


def test_owner_takes_back_its_share_by_preemption(capsys):
    data = simulate(capsys)
    teams = by_team(data)
    # B gets everything it asked for; nothing of B is touched
    assert all(p["phase"] == "Bound" for p in teams["team-b"])
    a_bound = [p for p in teams["team-a"] if p["phase"] == "Bound"]
    a_gone = [p for p in teams["team-a"] if p["phase"] != "Bound"]
    # A gives back exactly what it borrowed beyond its runtime (12 → 8) and keeps more than its min (6)
    assert len(a_bound) == 8 and len(a_gone) == 4
    for p in a_gone:
        assert p["reason"].startswith("preempted by team-b/")
        assert "Insufficient quota team-a: cpu used 8 + request 1 > runtime 8" in p["reason"]
    quotas = {q["name"]: q for q in data["quotas"]}
    assert quotas["team-a"] == {"name": "team-a", "parent": "koordinator-root-quota",
                                "min": {"cpu": "6", "memory": "24Gi"}, "max": {"cpu": "16", "memory": "64Gi"},
                                "request": {"cpu": "12", "memory": "24Gi"}, "used": {"cpu": "8", "memory": "16Gi"},
                                "runtime": {"cpu": "8", "memory": "24Gi"}}
    assert quotas["team-b"]["used"] == {"cpu": "8", "memory": "16Gi"}
    assert quotas["team-b"]["runtime"]["cpu"] == "8"


def test_quota_only_preemption_leaves_reclaim_to_the_revoker(capsys):
    # Koordinator's profile: no kube DefaultPreemption. Quota preemption never crosses quotas, so B
    # waits for the free cores only...
    data = simulate(capsys, "--disable", "default_preemption")
    teams = by_team(data)
    assert sum(p["phase"] == "Bound" for p in teams["team-b"]) == 4
    assert all(p["phase"] == "Bound" for p in teams["team-a"])


def test_revoker_returns_the_borrowed_share_after_the_delay():
    # ...until the revoke controller has seen A over its runtime for longer than 120 s.
    async def run():
        registry = build_registry({"disable": ["default_preemption"]}, autoload=True, only={"elastic_quota"})
        manifests = load_manifests([SCENARIO])
        engine = EmbeddedEngine(registry, manifests.to_cluster(), start_time=manifests.newest_timestamp())
        await engine.run()
        assert await engine.deschedule() == []  # over-use first seen: the delay starts
        engine.clock.advance(60)
        assert await engine.deschedule() == []
        engine.clock.advance(61)
        plan = await engine.deschedule()
        return engine, plan

    engine, plan = anyio.run(run)
    # least important first: equal priority, so the newest pods go
    assert [m.pod for m in plan] == ["team-a/a-11", "team-a/a-10", "team-a/a-09", "team-a/a-08"]
    placed = {p.key: p.node_name for p in engine.cluster.all_pods()}
    assert all(placed[f"team-b/b-{i}"] for i in range(8))
    assert sum(1 for k, v in placed.items() if k.startswith("team-a/") and v) == 8


def test_table_output_runs(capsys):
    assert main(["simulate", str(SCENARIO)]) == 0
    assert "team-a" in capsys.readouterr().out
