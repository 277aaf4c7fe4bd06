"""koordfw's risk-budget mode (issue 33 point 3; docs/plugins/risk_budget.md), end to end on the worked
example of examples/risk_budget, with hand-derived numbers:

node-r: capacity 16 cores / 64Gi, allocatable 15 / 62Gi → reserved 1000m / 2Gi; unpredicted 1000m / 2Gi;
a Mid pod holding 2000m / 4Gi. riskBudget {cpu: 0.05, memory: 0.01}, bonferroni.

cpu:    sys {500: .9, 1000: .1}, koord-prod {4000: .7, 6000: .25, 9000: .05}, none {25: 1} (a point)
        k = 2 → each at 1 - .05/2 = .975: sys 1000 (.9 < .975), koord-prod 9000 (.95 < .975); q = 10025
        A = 16000 - 1000 - 1000 - 10025 = 3975 = mid-cpu; batch-cpu = 3975 - 2000 = 1975
        independent: sys + prod + 25 = {4525: .63, 5025: .07, 6525: .225, 7025: .025, 9525: .045,
        10025: .005}; at .95 → 7025; A = 6975, batch 4975
memory: sys and none are points, k = 1: koord-prod at .99 → 24Gi; q = 1Gi + 24Gi + 5Mi
        A = 64Gi - 2Gi - 2Gi - (25Gi + 5Mi) = 35Gi - 5Mi = mid-memory; batch = 31Gi - 5Mi

Mode off (no riskBudget): Koordinator's numbers, unchanged: batch-cpu = 16000 - 6400 (40 % margin)
- max(500, 1000) - HP used (4000 + 1000) = 3600; mid-cpu = min(prodReclaimable 2000, unused 10000) = 2000.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from koordfw_batch_resource import ColocationStrategy, calculate, parse_node_metric
from koordfw_mid_resource.calculator import calculate as mid_calculate
from koordfw_mid_resource.calculator import parse_mid_metric
from koordfw_mid_resource.strategy import MidStrategy

from koordfw.cli import main
from koordfw.core.manifests import load_manifests
from koordfw.core.profile import structure_args

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "risk_budget"
DOC = ROOT / "docs" / "plugins" / "risk_budget.md"
Gi, Mi = 2**30, 2**20




def _load() -> tuple:
    import yaml

    docs = {}
    for f in sorted(EXAMPLE.glob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            docs.setdefault(d["kind"], []).append(d)
    m = load_manifests([str(EXAMPLE)])
    node = m.nodes[0]
    pods = list(m.pods)
    metric = docs["NodeMetric"][0]
    return node, pods, metric


def _now(metric: dict) -> float:
    from koordfw.core.model.objects import parse_time

    return float(parse_time(metric["status"]["updateTime"]))


def test_batch_hand_numbers_bonferroni_and_independent() -> None:
    node, pods, metric = _load()
    info = parse_node_metric(metric)
    s = ColocationStrategy(risk_budget={"cpu": 0.05, "memory": 0.01})
    r = calculate(s, node, pods, info, _now(metric))
    assert (r.batch_cpu, r.batch_memory) == (1975, 31 * Gi - 5 * Mi)
    assert r.risk["cpu"].quantile.parts == (1000, 9000, 25) and r.risk["cpu"].amount == 3975
    assert r.mid_requests == {"cpu": 2000, "memory": 4 * Gi}
    ind = calculate(attrs.evolve(s, risk_combination="independent"), node, pods, info, _now(metric))
    assert (ind.risk["cpu"].quantile.value, ind.batch_cpu) == (7025, 4975)
    # a budget on cpu only: memory stays on Koordinator's formula
    only_cpu = calculate(ColocationStrategy(risk_budget={"cpu": 0.05}), node, pods, info, _now(metric))
    off = calculate(ColocationStrategy(), node, pods, info, _now(metric))
    assert (only_cpu.batch_cpu, only_cpu.batch_memory) == (1975, off.batch_memory)
    # Koordinator's caps still apply
    capped = calculate(attrs.evolve(s, batch_CPU_threshold_percent=10), node, pods, info, _now(metric))
    assert capped.batch_cpu == 1600


def test_mid_hand_numbers() -> None:
    node, pods, metric = _load()
    r = mid_calculate(MidStrategy(risk_budget={"cpu": 0.05, "memory": 0.01}), node, pods, parse_mid_metric(metric),
                      _now(metric))
    assert (r.mid_cpu, r.mid_memory, r.mode) == (3975, 35 * Gi - 5 * Mi, "risk")
    assert r.cpu_message.startswith("midAllocatable[cpu]:3975 = min(riskAmount:3975 = capacity 16000 - reserved 1000")
    capped = mid_calculate(MidStrategy(risk_budget={"cpu": 0.05}, mid_CPU_threshold_percent=20), node, pods,
                           parse_mid_metric(metric), _now(metric))
    assert capped.mid_cpu == 3200


def test_mode_off_gives_koordinators_numbers_exactly() -> None:
    node, pods, metric = _load()
    bare = json.loads(json.dumps(metric))
    del bare["status"]["koordfwProdUsageDistribution"]
    t = _now(metric)
    with_field = calculate(ColocationStrategy(), node, pods, parse_node_metric(metric), t)
    without = calculate(ColocationStrategy(), node, pods, parse_node_metric(bare), t)
    assert with_field == without and with_field.risk == {}
    assert with_field.batch_cpu == 16000 - 6400 - 1000 - 5000
    mid_with = mid_calculate(MidStrategy(), node, pods, parse_mid_metric(metric), t)
    mid_without = mid_calculate(MidStrategy(), node, pods, parse_mid_metric(bare), t)
    assert attrs.evolve(mid_with) == mid_without and (mid_with.mid_cpu, mid_with.mid_memory) == (2000, 4 * Gi)


def test_no_distribution_sells_nothing_in_the_risk_mode() -> None:
    node, pods, metric = _load()
    bare = json.loads(json.dumps(metric))
    del bare["status"]["koordfwProdUsageDistribution"]
    t = _now(metric)
    s = ColocationStrategy(risk_budget={"cpu": 0.05})
    assert calculate(s, node, pods, parse_node_metric(bare), t).batch_cpu == 0
    bare["status"]["koordfwProdUsageDistribution"] = {"components": [{"model": "sys", "cpu": [[1, -1]]}]}
    assert calculate(s, node, pods, parse_node_metric(bare), t).batch_cpu == 0
    assert mid_calculate(MidStrategy(risk_budget={"cpu": 0.05}), node, pods, parse_mid_metric(bare), t).mid_cpu == 0


@pytest.mark.parametrize("bad", [{"riskBudget": {"cpu": 1.5}}, {"riskBudget": {"gpu": 0.1}},
                                 {"riskBudget": {"cpu": 0}}, {"riskCombination": "gaussian"}])
def test_bad_risk_args_are_rejected(bad: dict) -> None:
    for plugin, cls in (("batch_resource", ColocationStrategy), ("mid_resource", MidStrategy)):
        with pytest.raises(Exception, match=next(iter(bad))):
            structure_args(plugin, cls, bad)
    assert structure_args("batch_resource", ColocationStrategy, {"riskBudget": {"cpu": 0.005}}).risk_budget == \
        {"cpu": 0.005}


def _explain(capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["explain", "node", "node-r", str(EXAMPLE)]) == 0
    return capsys.readouterr().out.splitlines()


def test_simulate_and_explain_on_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(EXAMPLE), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    alloc = {n["name"]: n["allocatable"] for n in out["nodes"]}["node-r"]
    assert (alloc["kubernetes.io/batch-cpu"], alloc["kubernetes.io/mid-cpu"]) == ("1975", "3975")
    assert alloc["kubernetes.io/mid-memory"] == "35835Mi" and alloc["kubernetes.io/batch-memory"] == "31739Mi"
    lines = _explain(capsys)
    assert lines == [
        "node-r cpu: sold batch-cpu 1975m, mid-cpu 3975m; A 3975m, batch = A - Mid requests 2000m; from q 10025m = "
        "sys 1000m + koord-prod 9000m + none 25m at p97.5 (bonferroni): capacity 16000m - reserved 1000m - "
        "unpredicted 1000m - q; risk P(LS + Mid + BE > capacity) <= 0.05",
        "node-r memory: sold batch-memory 31739Mi, mid-memory 35835Mi; A 35835Mi, batch = A - Mid requests 4Gi; "
        "from q 25605Mi = sys 1Gi + koord-prod 24Gi + none 5Mi at p99 (bonferroni): capacity 64Gi - reserved 2Gi - "
        "unpredicted 2Gi - q; risk P(LS + Mid + BE > capacity) <= 0.01"]
    assert main(["explain", "node", "nope", str(EXAMPLE)]) == 1


def test_a_node_annotation_turns_the_mode_on_for_that_node_only() -> None:
    from koordfw_batch_resource import strategy_for_node

    node, pods, metric = _load()
    s = strategy_for_node(ColocationStrategy(), "node-r", {},
                          {"node.koordinator.sh/colocation-strategy": '{"riskBudget": {"cpu": 0.05}}'})
    assert s.risk_budget == {"cpu": 0.05}
    assert calculate(s, node, pods, parse_node_metric(metric), _now(metric)).batch_cpu == 1975


def test_explain_without_the_mode_prints_koordinators_terms(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "node", "node-a", str(ROOT / "examples" / "colocation")]) == 0
    cpu, mem = capsys.readouterr().out.splitlines()
    assert cpu.startswith("node-a cpu: sold batch-cpu 13700m, mid-cpu 0m; Koordinator's formulas: batch = capacity 32 "
                          "- margin 12800m - system 1 - HP used 4500m (usage); midAllocatable[CPU(milli-core)]:0")
    assert cpu.endswith("no risk budget (the risk is not bounded)") and mem.startswith("node-a memory: sold batch-memory")
