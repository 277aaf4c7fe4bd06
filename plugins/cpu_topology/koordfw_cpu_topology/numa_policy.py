"""The topology-manager merge: NUMA hints from several providers folded into one affinity, per policy.

This is Koordinator's ``pkg/scheduler/frameworkext/topologymanager`` (itself kube's kubelet
TopologyManager, ``pkg/kubelet/cm/topologymanager``), kernel-free: a NUMA affinity is a Python ``int``
bitmask (bit *n* = NUMA node *n*; ``None`` is Go's nil mask, "no preference"). Each provider gives a
mapping ``resource name -> list of hints`` (``None`` for the provider: no preference at all). The merge
takes one hint per resource in every combination, ANDs their masks and keeps the best result: preferred
over not preferred, then the narrowest mask (fewest NUMA nodes, then the lowest-numbered), then the
highest score. ``BestEffort`` always admits, ``Restricted`` admits only a preferred result,
``SingleNUMANode`` only considers single-node (or don't-care) preferred hints and admits only a preferred
result; the refusals carry Koordinator's reasons (``Unsatisfied NUMA <resource>`` /
``Unaligned NUMA Hint cause <summary>``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import combinations

import attrs

POLICY_NONE = ""
POLICY_BEST_EFFORT = "BestEffort"
POLICY_RESTRICTED = "Restricted"
POLICY_SINGLE_NUMA_NODE = "SingleNUMANode"
POLICIES = (POLICY_NONE, POLICY_BEST_EFFORT, POLICY_RESTRICTED, POLICY_SINGLE_NUMA_NODE)

EXCLUSIVE_PREFERRED = "Preferred"
EXCLUSIVE_REQUIRED = "Required"
NUMA_STATUS_IDLE, NUMA_STATUS_SHARED, NUMA_STATUS_SINGLE = "idle", "shared", "single"

ERR_UNSATISFIED_NUMA_RESOURCE = "Unsatisfied NUMA %s"
ERR_NUMA_HINT_CANNOT_ALIGNED = "Unaligned NUMA Hint cause %s"

#: hints of one provider: resource name -> its hints (None: no preference for that resource)
ProviderHints = Mapping[str, "Sequence[NUMATopologyHint] | None"] | None


@attrs.frozen
class NUMATopologyHint:
    """One possible NUMA affinity: ``affinity`` is a bitmask of NUMA nodes (``None``: any)."""

    affinity: int | None = None
    unsatisfied: bool = False
    preferred: bool = False
    score: int = 0

    def bits(self) -> list[int]:
        return mask_bits(self.affinity or 0)


def mask_of(*nodes: int) -> int:
    m = 0
    for n in nodes:
        if not 0 <= n < 64:
            raise ValueError(f"NUMA node {n}: must be in [0, 63]")
        m |= 1 << n
    return m


def mask_bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def mask_count(mask: int) -> int:
    return mask.bit_count()


def narrower(a: int, b: int) -> bool:
    """``IsNarrowerThan``: fewer NUMA nodes, or as many and the smaller number (lower nodes)."""
    ca, cb = a.bit_count(), b.bit_count()
    return a < b if ca == cb else ca < cb


def mask_str(mask: int | None) -> str:
    """The Go bitmask's ``String()``: binary, zero-padded to a multiple of two digits."""
    if mask is None:
        return "<nil>"
    for shift in range(62, 0, -2):
        if mask > (1 << shift):
            return format(mask, f"0{shift + 2}b")
    return format(mask, "02b")


def iterate_masks(nodes: Sequence[int]) -> Iterable[int]:
    """``bitmask.IterateBitMasks``: every non-empty subset, by size then in combination order."""
    for size in range(1, len(nodes) + 1):
        for combo in combinations(nodes, size):
            yield mask_of(*combo)


def check_exclusive_policy(hint: NUMATopologyHint, exclusive: str, status: Sequence[str]) -> bool:
    """Whether ``hint`` respects the pod's ``singleNUMANodeExclusive``: with Required, a multi-node hint
    may not touch a node held by a single-node pod, and a single-node hint may not take a shared one."""
    if hint.affinity is None:
        return False
    if exclusive == EXCLUSIVE_REQUIRED:
        bits = hint.bits()
        if len(bits) > 1:
            return not any(n < len(status) and status[n] == NUMA_STATUS_SINGLE for n in bits)
        return not (bits and bits[0] < len(status) and status[bits[0]] == NUMA_STATUS_SHARED)
    return True


def merge_permutation(default: int, permutation: Sequence[NUMATopologyHint]) -> NUMATopologyHint:
    preferred, satisfied = True, True
    masks: list[int] = []
    widest = 0
    for h in permutation:
        if h.affinity is not None:
            masks.append(h.affinity)
            if h.affinity != masks[0]:
                preferred = False
            widest = max(widest, h.affinity.bit_count())
        if not h.preferred:
            preferred = False
        if h.unsatisfied:
            satisfied = False
    merged = default
    for m in masks:
        merged &= m
    satisfied = (not masks or widest == merged.bit_count()) and satisfied
    return NUMATopologyHint(merged, unsatisfied=not satisfied, preferred=preferred)


def _summary(resource: str, hints: Sequence[NUMATopologyHint]) -> str:
    preferred = [mask_str(h.affinity) for h in hints if not h.unsatisfied and h.preferred]
    possible = [mask_str(h.affinity) for h in hints if not h.unsatisfied]
    return f"{resource} prefer [{' '.join(preferred)}] among [{' '.join(possible)}]"


def filter_providers_hints(providers: Sequence[ProviderHints]
                           ) -> tuple[list[list[NUMATopologyHint]], list[str], list[str]]:
    """(one hint list per resource, reasons for resources no NUMA node can hold, sorted summaries)."""
    out: list[list[NUMATopologyHint]] = []
    reasons: list[str] = []
    summary: list[str] = []
    for hints in providers:
        if not hints:
            out.append([NUMATopologyHint(preferred=True)])
            continue
        for resource, rh in hints.items():
            if rh is None:
                out.append([NUMATopologyHint(preferred=True)])
            elif not rh:
                out.append([NUMATopologyHint(unsatisfied=True, preferred=False)])
                reasons.append(ERR_UNSATISFIED_NUMA_RESOURCE % resource)
            else:
                summary.append(_summary(resource, rh))
                out.append(list(rh))
    summary.sort()
    return out, reasons, summary


def _iterate(lists: Sequence[Sequence[NUMATopologyHint]], callback: Callable[[list[NUMATopologyHint]], None]) -> None:
    def rec(i: int, acc: list[NUMATopologyHint]) -> None:
        if i == len(lists):
            callback(acc)
            return
        for h in lists[i]:
            rec(i + 1, [*acc, h])
    rec(0, [])


def merge_filtered_hints(numa_nodes: Sequence[int], filtered: Sequence[Sequence[NUMATopologyHint]],
                         exclusive: str = EXCLUSIVE_PREFERRED, status: Sequence[str] = ()) -> NUMATopologyHint:
    default = mask_of(*numa_nodes)
    best = [NUMATopologyHint(default)]

    def consider(permutation: list[NUMATopologyHint]) -> None:
        merged = merge_permutation(default, permutation)
        assert merged.affinity is not None
        if merged.affinity == 0:
            return
        if not check_exclusive_policy(merged, exclusive, status):
            merged = attrs.evolve(merged, preferred=False)
        score = sum(h.score for h in permutation if h.affinity is not None and h.affinity == merged.affinity)
        merged = attrs.evolve(merged, score=merged.score + score)
        cur = best[0]
        m_aff, c_aff = merged.affinity or 0, cur.affinity or 0  # both set: merged masks are never nil
        if merged.preferred and not cur.preferred:
            best[0] = merged
            return
        if not merged.preferred and cur.preferred:
            return
        if not narrower(m_aff, c_aff):
            if m_aff.bit_count() == c_aff.bit_count() and merged.score > cur.score:
                best[0] = merged
            return
        best[0] = merged

    _iterate(filtered, consider)
    return best[0]


def filter_single_numa_hints(all_hints: Sequence[Sequence[NUMATopologyHint]]) -> list[list[NUMATopologyHint] | None]:
    """Keep only preferred hints on exactly one NUMA node (or preferred don't-care ones); a resource left
    with none is ``None`` (Go's nil slice)."""
    out: list[list[NUMATopologyHint] | None] = []
    for hints in all_hints:
        kept = [h for h in hints if h.preferred and (h.affinity is None or h.affinity.bit_count() == 1)]
        out.append(kept or None)
    return out


def merge(policy: str, numa_nodes: Sequence[int], providers: Sequence[ProviderHints],
          exclusive: str = EXCLUSIVE_PREFERRED, status: Sequence[str] = ()
          ) -> tuple[NUMATopologyHint, bool, list[str]]:
    """The policy's ``Merge``: (best hint, admit, reasons when refused)."""
    if policy == POLICY_NONE:
        return NUMATopologyHint(), True, []
    if policy not in POLICIES:
        raise ValueError(f"unknown NUMA topology policy {policy!r} (allowed: {', '.join(p for p in POLICIES if p)})")
    filtered, reasons, summary = filter_providers_hints(providers)
    every = mask_of(*numa_nodes)
    if policy == POLICY_BEST_EFFORT:
        best = merge_filtered_hints(numa_nodes, filtered, exclusive, status)
        if best.unsatisfied:
            best = NUMATopologyHint(every)
        return best, True, []
    if policy == POLICY_RESTRICTED:
        if reasons:
            return NUMATopologyHint(every), False, reasons
        best = merge_filtered_hints(numa_nodes, filtered, exclusive, status)
        if not best.preferred:
            return best, False, [ERR_NUMA_HINT_CANNOT_ALIGNED % " & ".join(summary)]
        return best, True, []
    # SingleNUMANode
    if reasons:
        return NUMATopologyHint(), False, reasons
    single = [h or [] for h in filter_single_numa_hints(filtered)]
    best = merge_filtered_hints(numa_nodes, single, exclusive, status)
    if best.affinity == every:
        best = NUMATopologyHint(preferred=best.preferred)
    if not best.preferred:
        return best, False, [ERR_NUMA_HINT_CANNOT_ALIGNED % ",".join(summary)]
    return best, True, []


def merge_topology_policy(node_policy: str, pod_policy: str) -> str | None:
    """``mergeTopologyPolicy``: the pod's policy wins; a pod and node stating different ones conflict
    (``None``)."""
    if node_policy and pod_policy and node_policy != pod_policy:
        return None
    return pod_policy or node_policy
