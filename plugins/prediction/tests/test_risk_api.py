"""The risk-budget math (koordfw_prediction.api) on hand-derived cases."""

from __future__ import annotations

import pytest
from koordfw_prediction.api import (
    BONFERRONI,
    INDEPENDENT,
    ProdUsageDistribution,
    convolve,
    distribution_status,
    normalize,
    parse_distribution,
    quantile,
    risk_sizing,
    usage_quantile,
)


def test_quantile_is_the_smallest_value_reaching_the_level() -> None:
    d = normalize([(1000, 0.9), (2000, 0.1)])
    assert quantile(d, 0.9) == 1000        # P(X > 1000) = 0.1 <= 0.1
    assert quantile(d, 0.95) == 2000       # P(X > 1000) = 0.1 > 0.05
    assert quantile(d, 1.0) == 2000


def test_two_pods_exact_convolution() -> None:
    # pod A: 1 core 90 %, 3 cores 10 %; pod B: 2 cores 80 %, 4 cores 20 %
    a = normalize([(1000, 9), (3000, 1)])
    b = normalize([(2000, 8), (4000, 2)])
    s = convolve(a, b)
    # 3000: .9*.8 = .72; 5000: .9*.2 + .1*.8 = .26; 7000: .1*.2 = .02
    assert [v for v, _ in s] == [3000, 5000, 7000]
    assert [p for _, p in s] == pytest.approx([0.72, 0.26, 0.02])
    # ε = 0.05: P(S > 5000) = 0.02 <= 0.05, P(S > 3000) = 0.28 > 0.05 → q = 5000
    assert usage_quantile([a, b], 0.05, INDEPENDENT).value == 5000
    # ε = 0.01: P(S > 5000) = 0.02 > 0.01 → q = 7000
    assert usage_quantile([a, b], 0.01, INDEPENDENT).value == 7000
    # a node of 8 cores, 500m reserved: A = 8000 - 500 - q
    dist = ProdUsageDistribution(models=("a", "b"), components={"cpu": (a, b), "memory": (a, b)}, unpredicted={})
    assert risk_sizing("cpu", 8000, 500, dist, 0.05, INDEPENDENT).amount == 2500
    assert risk_sizing("cpu", 8000, 500, dist, 0.01, INDEPENDENT).amount == 500


def test_bonferroni_sums_component_quantiles_at_eps_over_k() -> None:
    a = normalize([(1000, 9), (3000, 1)])
    b = normalize([(2000, 8), (4000, 2)])
    # ε = 0.2, k = 2: each at 0.9: a → 1000 (P(>1000) = .1 <= .1), b → 4000 (P(>2000) = .2 > .1)
    q = usage_quantile([a, b], 0.2, BONFERRONI)
    assert (q.value, q.level, q.parts) == (5000, pytest.approx(0.9), (1000, 4000))
    # a point mass does not take a share of ε: k = 1, b at 0.8 → 2000
    point = normalize([(700, 1)])
    assert usage_quantile([point, b], 0.2, BONFERRONI).parts == (700, 2000)
    # bonferroni is never below the independent quantile (here 5000 at ε 0.05 vs 4000 + 3000)
    assert usage_quantile([a, b], 0.05, BONFERRONI).value == 7000


def test_amount_never_negative_and_unpredicted_is_subtracted() -> None:
    a = normalize([(1000, 1)])
    dist = ProdUsageDistribution(models=("sys",), components={"cpu": (a,), "memory": (a,)},
                                 unpredicted={"cpu": 2000})
    assert risk_sizing("cpu", 4000, 0, dist, 0.01).amount == 1000
    assert risk_sizing("cpu", 2500, 0, dist, 0.01).amount == 0


def test_large_supports_are_rounded_up_onto_a_grid() -> None:
    a = normalize([(v, 1) for v in range(0, 200)])
    s = convolve(a, a, max_support=50)
    assert len(s) <= 51 and sum(p for _, p in s) == pytest.approx(1.0)
    # rounding up: every quantile of the gridded sum is >= the exact one
    exact = convolve(a, a)
    for lvl in (0.5, 0.9, 0.99):
        assert quantile(s, lvl) >= quantile(exact, lvl)


def test_status_round_trip() -> None:
    st = distribution_status([("sys", [(539, 2.0)], [(10, 1.0)]),
                              ("koord-prod", [(1035, 3.0), (2079, 1.0)], [(20, 1.0)])],
                             {"cpu": 1500, "memory": 0})
    d = parse_distribution({"koordfwProdUsageDistribution": st})
    assert d is not None
    assert d.models == ("sys", "koord-prod")
    assert d.components["cpu"][1] == [(1035, 0.75), (2079, 0.25)]
    assert d.unpredicted == {"cpu": 1500, "memory": 0}
    assert parse_distribution({}) is None
    with pytest.raises(ValueError, match=r"components\[0\]\.cpu"):
        parse_distribution({"koordfwProdUsageDistribution": {"components": [{"model": "x", "cpu": "no"}]}})
