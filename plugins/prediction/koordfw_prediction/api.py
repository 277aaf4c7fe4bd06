"""prediction's public API for other packages (the only module of ``koordfw_prediction`` another plugin
imports): the **risk-budget** sizing that batch_resource and mid_resource use when ``riskBudget`` is set
(issue 33 point 3; docs/plugins/risk_budget.md).

The node agent publishes, in its NodeMetric under :data:`koordfw.extension.NODE_METRIC_PROD_USAGE_DISTRIBUTION`
(``status.koordfwProdUsageDistribution``), the predicted distribution of the node's non-reclaimable usage:
one component per model the peak predictor's per-priority estimate sums (the system ``sys``, the Prod
priority classes ``koord-prod`` and ``""``: pods without one), each the normalised decaying histogram of that
model (``[[value, weight], ...]``, a value the **end** of its bucket: cpu milli-cores, memory bytes), and
``unpredicted``, the requests of the Prod pods the predictor cannot predict yet (cold start, no model)::

    koordfwProdUsageDistribution:
      components:
      - {model: sys,        cpu: [[539, 1.0]],               memory: [[1048576000, 1.0]]}
      - {model: koord-prod, cpu: [[1035, 0.75], [2079, 0.25]], memory: [[...]]}
      unpredicted: {cpu: "0", memory: "0"}

The manager sizes what Mid + BE may be sold, per resource, as the largest ``A`` with

    P(U + unpredicted + A > capacity - reserved) <= epsilon        U = Σ components

that is ``A = max(0, capacity - reserved - unpredicted - q)`` where ``q`` is an upper ``(1 - epsilon)``
quantile of ``U``, obtained by ``riskCombination``:

* ``bonferroni`` (the default): ``q = Σ_i q_i(1 - epsilon / k)`` over the ``k`` components that are not a
  single point (a point adds its value). Valid whatever the dependence between the components (the union
  bound: ``P(U > Σ q_i) <= Σ P(U_i > q_i) <= epsilon``), so it holds when the system and the Prod pods peak
  together; it is conservative when they do not.
* ``independent``: ``q`` is the ``(1 - epsilon)`` quantile of the exact convolution of the components,
  assuming they are independent (tighter; wrong when they peak together). Supports are merged onto a
  grid, each value rounded **up**, when a convolution would exceed :data:`MAX_SUPPORT` points.

Each component is the distribution of its class's *sum* (the predictor trains it on the summed usage), so
no independence is assumed between pods of the same class. ``P`` is node-time weighted by the histograms'
decay (a sample of a half-life ago weighs half).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from koordfw import canonical
from koordfw.extension import NODE_METRIC_PROD_USAGE_DISTRIBUTION

CPU, MEMORY = "cpu", "memory"
RESOURCES = (CPU, MEMORY)
BONFERRONI, INDEPENDENT = "bonferroni", "independent"
COMBINATIONS = (BONFERRONI, INDEPENDENT)
#: the largest support a convolution keeps exactly; beyond it values are rounded up onto a grid
MAX_SUPPORT = 4096
#: cumulative weights within this of a level count as reaching it (float sums of normalised weights)
_TOL = 1e-9

#: a discrete distribution: ``(value, probability)`` sorted by value, probabilities summing to 1
Dist = list[tuple[int, float]]


def normalize(pairs: Iterable[tuple[float, float]]) -> Dist:
    """``[(value, weight)]`` → a :data:`Dist`: values as ints, equal values merged, zero weights dropped,
    weights scaled to sum 1. Raises ValueError for a negative weight or no weight at all."""
    acc: dict[int, float] = {}
    for v, w in pairs:
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"weight must be a finite number >= 0, got {w!r}")
        if w > 0:
            acc[int(v)] = acc.get(int(v), 0.0) + float(w)
    total = sum(acc.values())
    if total <= 0:
        raise ValueError("a distribution needs a positive weight")
    return [(v, acc[v] / total) for v in sorted(acc)]


def quantile(d: Dist, level: float) -> int:
    """The smallest value ``v`` of the support with ``P(X <= v) >= level``; so ``P(X > v) <= 1 - level``."""
    cum = 0.0
    for v, p in d:
        cum += p
        if cum >= level - _TOL:
            return v
    return d[-1][0]


def convolve(a: Dist, b: Dist, max_support: int = MAX_SUPPORT) -> Dist:
    """The distribution of ``X + Y`` for independent ``X ~ a``, ``Y ~ b``; exact unless its support exceeds
    ``max_support`` points, then each value is rounded up to a multiple of ``ceil(max / max_support)``."""
    acc: dict[int, float] = {}
    for va, pa in a:
        for vb, pb in b:
            acc[va + vb] = acc.get(va + vb, 0.0) + pa * pb
    if len(acc) > max_support:
        step = max(1, -(-max(acc) // max_support))
        grid: dict[int, float] = {}
        for v, p in acc.items():
            g = -(-v // step) * step
            grid[g] = grid.get(g, 0.0) + p
        acc = grid
    return [(v, acc[v]) for v in sorted(acc)]


@attrs.frozen
class UsageQuantile:
    """An upper ``(1 - epsilon)`` quantile of the summed components, and how it was obtained."""

    value: int
    #: the level each component was read at (bonferroni: ``1 - epsilon / k``; independent: of the sum)
    level: float
    #: per component, the value read at ``level`` (bonferroni), or the sum's quantile (independent)
    parts: tuple[int, ...]


def usage_quantile(components: Sequence[Dist], epsilon: float, combination: str = BONFERRONI) -> UsageQuantile:
    """An upper quantile ``q`` with ``P(Σ components > q) <= epsilon`` (see the module doc)."""
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
    if combination not in COMBINATIONS:
        raise ValueError(f"unknown combination {combination!r}; use one of {', '.join(COMBINATIONS)}")
    if not components:
        return UsageQuantile(0, 1.0 - epsilon, ())
    if combination == INDEPENDENT:
        total = components[0]
        for c in components[1:]:
            total = convolve(total, c)
        q = quantile(total, 1.0 - epsilon)
        return UsageQuantile(q, 1.0 - epsilon, (q,))
    k = sum(1 for c in components if len(c) > 1)
    level = 1.0 - epsilon / max(k, 1)
    parts = tuple(c[0][0] if len(c) == 1 else quantile(c, level) for c in components)
    return UsageQuantile(sum(parts), level, parts)


@attrs.frozen
class RiskSizing:
    """What may be sold to Mid + BE on one resource of one node, and from what."""

    resource: str
    amount: int
    epsilon: float
    combination: str
    capacity: int
    reserved: int
    unpredicted: int
    quantile: UsageQuantile
    models: tuple[str, ...]

    def explain(self) -> str:
        parts = " + ".join(f"{m or 'none'}:{v}" for m, v in zip(self.models, self.quantile.parts, strict=False)) \
            if self.combination == BONFERRONI else f"sum:{self.quantile.value}"
        return (f"{self.amount} = capacity {self.capacity} - reserved {self.reserved} - unpredicted "
                f"{self.unpredicted} - q {self.quantile.value} ({parts} at p{_pct(self.quantile.level)}), "
                f"P(over) <= {self.epsilon:g} ({self.combination})")


def risk_report(s: RiskSizing | None) -> dict[str, Any]:
    """One resource of the risk-budget mode as the manager plugins' ``report`` rows (and ``koordfw explain
    node``) show it; ``None`` (the NodeMetric had no distribution) sells nothing."""
    if s is None:
        return {"amount": 0, "reason": f"no valid {NODE_METRIC_PROD_USAGE_DISTRIBUTION} in the NodeMetric"}
    parts = (dict(zip([m or "none" for m in s.models], s.quantile.parts, strict=False))
             if s.combination == BONFERRONI else {"sum": s.quantile.value})
    return {"amount": s.amount, "epsilon": s.epsilon, "combination": s.combination, "capacity": s.capacity,
            "reserved": s.reserved, "unpredicted": s.unpredicted, "quantile": s.quantile.value,
            "level": s.quantile.level, "parts": parts, "explain": s.explain()}


def _pct(level: float) -> str:
    return f"{level * 100:.6g}"


@attrs.frozen
class ProdUsageDistribution:
    """The NodeMetric's ``status.koordfwProdUsageDistribution``, parsed."""

    models: tuple[str, ...]
    #: resource → one :data:`Dist` per model
    components: Mapping[str, tuple[Dist, ...]]
    unpredicted: Mapping[str, int]


def risk_sizing(resource: str, capacity: int, reserved: int, dist: ProdUsageDistribution, epsilon: float,
                combination: str = BONFERRONI) -> RiskSizing:
    """The largest ``A`` with ``P(U + unpredicted + A > capacity - reserved) <= epsilon`` (at least 0)."""
    q = usage_quantile(dist.components[resource], epsilon, combination)
    unpredicted = int(dist.unpredicted.get(resource, 0))
    amount = max(0, capacity - max(reserved, 0) - unpredicted - q.value)
    return RiskSizing(resource=resource, amount=amount, epsilon=epsilon, combination=combination, capacity=capacity,
                      reserved=max(reserved, 0), unpredicted=unpredicted, quantile=q, models=dist.models)


def node_risk(budget: Mapping[str, float], combination: str, capacity: Mapping[str, int], reserved: Mapping[str, int],
              raw_distribution: Any) -> tuple[dict[str, RiskSizing | None], str]:
    """The risk-budget amounts of one node, per budgeted resource, from the NodeMetric's
    ``status.koordfwProdUsageDistribution`` as written (``raw_distribution``); ``reserved`` is the node's
    static reserve (``max(capacity - allocatable, node.koordinator.sh/reservation)``). Without a valid
    distribution every budgeted resource is ``None`` (nothing is sold) and the second value says why
    ("" when absent, the error when malformed)."""
    try:
        dist = parse_distribution({NODE_METRIC_PROD_USAGE_DISTRIBUTION: raw_distribution})
        err = ""
    except ValueError as e:
        dist, err = None, str(e)
    out: dict[str, RiskSizing | None] = {}
    for r, eps in budget.items():
        out[r] = None if dist is None else risk_sizing(r, int(capacity.get(r, 0)), int(reserved.get(r, 0)), dist,
                                                       float(eps), combination)
    return out, err


def distribution_status(components: Sequence[tuple[str, Sequence[tuple[int, float]], Sequence[tuple[int, float]]]],
                        unpredicted: Mapping[str, int]) -> dict[str, Any]:
    """The status field the agent publishes: ``components`` as ``(model, cpu pairs, memory pairs)``."""
    out = []
    for model, cpu, mem in components:
        out.append({"model": model,
                    CPU: [[int(v), round(p, 9)] for v, p in normalize(cpu)],
                    MEMORY: [[int(v), round(p, 9)] for v, p in normalize(mem)]})
    return {"components": out, "unpredicted": {CPU: f"{int(unpredicted.get(CPU, 0))}m",
                                               MEMORY: str(int(unpredicted.get(MEMORY, 0)))}}


def parse_distribution(status: Mapping[str, Any] | None) -> ProdUsageDistribution | None:
    """``status.koordfwProdUsageDistribution`` of a NodeMetric's status; None when absent. A malformed field
    raises ValueError naming it."""
    if not isinstance(status, Mapping):
        return None
    raw = status.get(NODE_METRIC_PROD_USAGE_DISTRIBUTION)
    if raw is None:
        return None
    where = f"status.{NODE_METRIC_PROD_USAGE_DISTRIBUTION}"
    if not isinstance(raw, Mapping) or not isinstance(raw.get("components"), list):
        raise ValueError(f"{where}.components: expected a list")
    models: list[str] = []
    comps: dict[str, list[Dist]] = {CPU: [], MEMORY: []}
    for i, c in enumerate(raw["components"]):
        if not isinstance(c, Mapping):
            raise ValueError(f"{where}.components[{i}]: expected a mapping")
        models.append(str(c.get("model") or ""))
        for r in RESOURCES:
            pairs = c.get(r)
            try:
                if not isinstance(pairs, list):
                    raise ValueError("expected a list of [value, weight]")
                comps[r].append(normalize((float(p[0]), float(p[1])) for p in pairs))
            except (ValueError, TypeError, IndexError) as e:
                raise ValueError(f"{where}.components[{i}].{r}: {e}") from None
    unpred: dict[str, int] = {}
    raw_u = raw.get("unpredicted") or {}
    if not isinstance(raw_u, Mapping):
        raise ValueError(f"{where}.unpredicted: expected a mapping")
    for r in RESOURCES:
        if raw_u.get(r) is not None:
            try:
                unpred[r] = canonical(r, raw_u[r])
            except ValueError as e:
                raise ValueError(f"{where}.unpredicted.{r}: {e}") from None
    return ProdUsageDistribution(models=tuple(models), components={r: tuple(comps[r]) for r in RESOURCES},
                                 unpredicted=unpred)


def check_budget(value: Any, where: str = "riskBudget") -> None:
    """``riskBudget``: None or ``{cpu?: ε, memory?: ε}`` with each ε in (0, 1)."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a mapping {{cpu: epsilon, memory: epsilon}}, got {str(value)[:40]}")
    for k, v in value.items():
        if k not in RESOURCES:
            raise ValueError(f"{where}.{k}: unknown resource; use cpu or memory")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
            raise ValueError(f"{where}.{k}: expected a probability in (0, 1), got {str(v)[:40]}")


def check_combination(value: Any, where: str = "riskCombination") -> None:
    if value not in COMBINATIONS:
        raise ValueError(f"{where}: expected one of {', '.join(COMBINATIONS)}, got {str(value)[:40]}")


__all__ = ["BONFERRONI", "COMBINATIONS", "INDEPENDENT", "MAX_SUPPORT", "Dist", "ProdUsageDistribution",
           "RiskSizing", "UsageQuantile", "check_budget", "check_combination", "convolve", "distribution_status",
           "node_risk", "normalize", "parse_distribution", "quantile", "risk_report", "risk_sizing", "usage_quantile"]
