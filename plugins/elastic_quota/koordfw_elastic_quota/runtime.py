"""Runtime quota: Koordinator's water-filling by shared weight, one resource and one tree level at a time.

Pure integer functions (CPU in milli), so that table tests can pin every rounding:

* :func:`hamilton` — split ``res`` by weight: ``floor(w_i * res / W)`` each, the residual handed out
  one unit at a time to the largest remainders ``w_i * res mod W``, ties by quota name ascending
  (``runtime_quota_calculator.go``; Python ints stand in for Go's 128-bit products).
* :func:`redistribute` — ``quotaTree.redistribution``: guarantee ``max(min, guarantee)``, lend what
  is not requested (or keep it when lending is off), share the rest by weight, re-share what a
  child cannot use.
* :func:`scale_mins` — ``scale_minquota_when_over_root_res.go``: when the children's mins exceed
  what the parent has, scale the enabled ones down proportionally (float64, truncated).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs


@attrs.define
class Child:
    """One child quota in its parent's tree, for one resource dimension.

    ``request`` is the child's limited request (``min(request, max)``) as the parent sees it;
    ``min`` is the auto-scaled min; ``guarantee`` is ``max(allocated, min)`` when the guarantee
    feature is on (0 otherwise); ``weight`` is the shared weight.
    """

    name: str
    request: int
    min: int = 0
    guarantee: int = 0
    weight: int = 0
    allow_lent: bool = True
    runtime: int = 0


def hamilton(res: int, nodes: Sequence[Child]) -> dict[str, int]:
    """Largest-remainder apportionment of ``res`` over ``nodes`` by weight; ``w <= 0`` gets 0."""
    total_w = sum(n.weight for n in nodes if n.weight > 0)
    out = {n.name: 0 for n in nodes}
    if total_w <= 0 or res <= 0:
        return out
    given = 0
    rema: list[tuple[int, str]] = []
    for n in nodes:
        if n.weight <= 0:
            continue
        base, rem = divmod(n.weight * res, total_w)
        out[n.name] = base
        given += base
        rema.append((rem, n.name))
    residual = res - given
    rema.sort(key=lambda t: (-t[0], t[1]))
    for _rem, name in rema[:residual]:
        out[name] += 1
    return out


def _iterate(res: int, nodes: list[Child]) -> None:
    while True:
        weight = sum(n.weight for n in nodes)
        if weight <= 0 or res <= 0 or not nodes:
            return
        deltas = hamilton(res, nodes)
        nxt: list[Child] = []
        excess = 0
        for n in nodes:
            n.runtime += deltas[n.name]
            if n.runtime < n.request:
                nxt.append(n)
            else:
                excess += n.runtime - n.request
                n.runtime = n.request
        if excess <= 0 or not nxt:
            return
        res, nodes = excess, nxt


def redistribute(total: int, children: Iterable[Child]) -> dict[str, int]:
    """Runtime of each child given the parent's runtime ``total`` (the children are updated too)."""
    kids = sorted(children, key=lambda c: c.name)
    left = total
    adjust: list[Child] = []
    for n in kids:
        m = max(n.min, n.guarantee)
        if n.request > m:
            n.runtime = m
            adjust.append(n)
        else:
            n.runtime = n.request if n.allow_lent else m
        left -= n.runtime
    if left > 0:
        _iterate(left, adjust)
    return {n.name: n.runtime for n in kids}


def scale_mins(total: int, mins: Mapping[str, int], enabled: Mapping[str, bool]) -> dict[str, int]:
    """Auto-scaled mins of one parent's children for one resource.

    Unchanged when ``Σ mins <= total``. Otherwise each enabled child gets
    ``int64(float64(total - Σ disabled mins) * float64(min) / float64(Σ enabled mins))`` (0 when
    ``total - Σ disabled <= 0``); disabled children keep their min.
    """
    if sum(mins.values()) <= total:
        return dict(mins)
    disabled_sum = sum(v for k, v in mins.items() if not enabled.get(k, True))
    enabled_sum = sum(v for k, v in mins.items() if enabled.get(k, True))
    out = dict(mins)
    avail = total - disabled_sum
    for k, v in mins.items():
        if not enabled.get(k, True):
            continue
        if avail <= 0 or enabled_sum <= 0:
            out[k] = 0
        else:
            out[k] = int(float(avail) * float(v) / float(enabled_sum))
    return out
