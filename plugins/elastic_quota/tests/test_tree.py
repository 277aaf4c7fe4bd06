"""The quota tree: validation of objects, request aggregation, runtime per level (nested, scaled mins)."""

import pytest
from elastic_quota_testkit import eq
from koordfw_elastic_quota import DEFAULT, QuotaTree, build_quotas


def tree_of(objs, pods=(), total=None, **kw):
    """pods: (quota, {resource: canonical}, assigned)."""
    valid, invalid = build_quotas(objs)
    t = QuotaTree(valid, invalid, **kw)
    t.reset_usage()
    for q, req, assigned in pods:
        t.add_pod(q, req, assigned, True)
    t.aggregate_used()
    t.compute(total or {"cpu": 100_000})
    return t


def runtimes(t, r="cpu"):
    return {n: st.runtime.get(r) for n, st in t.states.items() if n not in (DEFAULT, "koordinator-system-quota")}


@pytest.mark.parametrize("case, objs, pods, total, want", [
    ("single level, one borrower",
     [eq("a", min={"cpu": 40}, max={"cpu": 100}), eq("b", min={"cpu": 60}, max={"cpu": 100})],
     [("a", {"cpu": 90_000}, True)], None, {"a": 90_000, "b": 0}),
    ("single level, owner returns",
     [eq("a", min={"cpu": 40}, max={"cpu": 100}), eq("b", min={"cpu": 60}, max={"cpu": 100})],
     [("a", {"cpu": 90_000}, True), ("b", {"cpu": 60_000}, False)], None, {"a": 40_000, "b": 60_000}),
    ("request capped by max",
     [eq("a", min={"cpu": 10}, max={"cpu": 30}), eq("b", min={"cpu": 10}, max={"cpu": 100})],
     # weights default to max (30:100): 80 000m left → 18 461.5 / 61 538.5; the larger remainder is a's
     [("a", {"cpu": 90_000}, False), ("b", {"cpu": 90_000}, False)], None, {"a": 28_462, "b": 71_538}),
    ("request capped by max, excess re-shared",
     [eq("a", min={"cpu": 10}, max={"cpu": 15}), eq("b", min={"cpu": 10}, max={"cpu": 100})],
     [("a", {"cpu": 90_000}, False), ("b", {"cpu": 90_000}, False)], None, {"a": 15_000, "b": 85_000}),
    ("nested",
     [eq("p", min={"cpu": 60}, max={"cpu": 100}, is_parent=True), eq("q", min={"cpu": 40}, max={"cpu": 100}),
      eq("c1", min={"cpu": 20}, max={"cpu": 100}, parent="p"), eq("c2", min={"cpu": 20}, max={"cpu": 100}, parent="p")],
     [("c1", {"cpu": 80_000}, False), ("c2", {"cpu": 10_000}, False), ("q", {"cpu": 100_000}, False)], None,
     {"p": 60_000, "q": 40_000, "c1": 50_000, "c2": 10_000}),
    ("nested, not-lent child holds its min in the parent's request",
     [eq("p", min={"cpu": 10}, max={"cpu": 100}, is_parent=True), eq("q", min={"cpu": 10}, max={"cpu": 100}),
      eq("c1", min={"cpu": 30}, max={"cpu": 100}, parent="p", lent=False), eq("c2", min={"cpu": 0}, max={"cpu": 100}, parent="p")],  # noqa: E501 (a table row)
     [("c2", {"cpu": 20_000}, False), ("q", {"cpu": 100_000}, False)], None,
     # p sees 30 (c1's min) + 20; root splits the 80 left after mins 10/10 evenly: p 50, q 50
     {"p": 50_000, "q": 50_000, "c1": 30_000, "c2": 20_000}),
    ("scaled mins with remainder",
     [eq("a", min={"cpu": 7}, max={"cpu": 10}), eq("b", min={"cpu": 5}, max={"cpu": 10})],
     [("a", {"cpu": 10_000}, False), ("b", {"cpu": 10_000}, False)], {"cpu": 10_000},
     # mins 5833/4166, 1 milli left: equal weights and remainders → "a" by name
     {"a": 5_834, "b": 4_166}),
    ("scaled mins restored when the cluster grows",
     [eq("a", min={"cpu": 7}, max={"cpu": 10}), eq("b", min={"cpu": 5}, max={"cpu": 10})],
     [("a", {"cpu": 10_000}, False), ("b", {"cpu": 10_000}, False)], {"cpu": 12_000},
     {"a": 7_000, "b": 5_000}),
    ("shared weight annotation",
     [eq("a", max={"cpu": 100}, weight={"cpu": "3"}), eq("b", max={"cpu": 100}, weight={"cpu": "1"})],
     [("a", {"cpu": 100_000}, False), ("b", {"cpu": 100_000}, False)], None, {"a": 75_000, "b": 25_000}),
    ("zero shared weight borrows nothing",
     [eq("a", min={"cpu": 10}, max={"cpu": 100}, weight={"cpu": "0"}), eq("b", max={"cpu": 100})],
     [("a", {"cpu": 100_000}, False), ("b", {"cpu": 30_000}, False)], None, {"a": 10_000, "b": 30_000}),
    ("default quota use leaves the root",
     [eq("a", max={"cpu": 100})],
     [(DEFAULT, {"cpu": 25_000}, True), ("a", {"cpu": 100_000}, False)], None, {"a": 75_000}),
])
def test_tree_runtime(case, objs, pods, total, want):
    assert runtimes(tree_of(objs, pods, total)) == want


def test_min_scale_disabled_keeps_mins():
    t = tree_of([eq("a", min={"cpu": 7}, max={"cpu": 10}), eq("b", min={"cpu": 5}, max={"cpu": 10})],
                [("a", {"cpu": 10_000}, False), ("b", {"cpu": 10_000}, False)], {"cpu": 10_000},
                enable_min_scale=False)
    assert runtimes(t) == {"a": 7_000, "b": 5_000}


def test_guarantee_usage_gate():
    objs = [eq("a", min={"cpu": 10}, max={"cpu": 100}), eq("b", min={"cpu": 10}, max={"cpu": 100})]
    pods = [("a", {"cpu": 70_000}, True), ("b", {"cpu": 100_000}, False)]
    assert runtimes(tree_of(objs, pods)) == {"a": 50_000, "b": 50_000}
    assert runtimes(tree_of(objs, pods, guarantee_usage=True)) == {"a": 70_000, "b": 30_000}


def test_parent_used_is_aggregated():
    t = tree_of([eq("p", max={"cpu": 100}, is_parent=True), eq("c", max={"cpu": 100}, parent="p")],
                [("c", {"cpu": 5_000}, True)])
    assert t.states["p"].used == {"cpu": 5_000}
    assert t.states["p"].request == {"cpu": 5_000}


@pytest.mark.parametrize("objs, bad, message", [
    ([eq("a", min={"cpu": 20}, max={"cpu": 10})], "a", "min > max for cpu (min 20 > max 10)"),
    ([eq("a", min={"cpu": "-1"}, max={"cpu": 10})], "a", "spec.min.cpu: negative quantity"),
    ([eq("a", max={"memory": "lots"})], "a", "spec.max.memory: invalid quantity"),
    ([eq("a", max={"cpu": 1}, parent="nope")], "a", "unknown parent quota 'nope'"),
    ([eq("a", max={"cpu": 1}, parent="b", is_parent=True), eq("b", max={"cpu": 1}, parent="a", is_parent=True)],
     "a", "cycle of parents a -> b -> a"),
    ([eq("a", max={"cpu": 1}, parent="b"), eq("b", max={"cpu": 1})], "a", "is not a parent"),
    ([eq("a", max={"cpu": 1}, weight={"cpu": "-2"})], "a", "shared-weight.cpu: negative quantity"),
    ([eq("p", min={"cpu": 5}, max={"cpu": 1}, is_parent=True), eq("c", max={"cpu": 1}, parent="p")],
     "c", "parent 'p' is invalid"),
])
def test_invalid_quota_rejected_others_kept(objs, bad, message):
    good = eq("ok", min={"cpu": 1}, max={"cpu": 2})
    valid, invalid = build_quotas([*objs, good])
    assert bad in invalid and bad not in valid
    assert f"ElasticQuota {bad}" in invalid[bad].error or f"ElasticQuota quotas/{bad}" in invalid[bad].error
    assert message in invalid[bad].error
    assert "ok" in valid
