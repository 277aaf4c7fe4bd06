"""The gather algorithm of Koordinator's ``coscheduling/core/network_topology_solver.go``: given how many
members each node can hold (its *offer slot*), pick the smallest topology domain that holds the whole job
and spread the members over its nodes.

1. Offer slots add up from the nodes to the root (``evaluate``); a layer's ``podCountMultiple`` rounds a
   domain's slots down to a multiple (``constrain_by_multiple``).
2. With a ``MustGather`` layer the search starts at that layer's domains, else at the root.
3. Going down layer by layer, the candidates are the domains of the lowest layer that still hold the job.
4. Candidates are ordered tightest first (binpack: members already there, then the fewest offer slots, then
   score, then name), and the first that can give every member a slot wins; within it, children are
   filled in the opposite order (the roomiest first), so the job takes as few nodes as it can.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from koordfw.extension import (
    ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC,
    ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX,
    NETWORK_TOPOLOGY_MUST_GATHER,
    NETWORK_TOPOLOGY_PREFER_GATHER,
    TOPOLOGY_LAYER_NODE,
)
from koordfw.inputs import shorten

from .tree import Topology, TreeNode

#: Koordinator's MessageNoCandidateTopologyNodes
MESSAGE_NO_CANDIDATE = "no candidate topology nodes can accommodate job, desiredOfferSlot: {}, {}"


@attrs.frozen
class GatherRule:
    layer: str
    strategy: str
    pod_count_multiple: int = 0


@attrs.frozen
class NetworkTopologySpec:
    """``NetworkTopologySpec``: the gather rules of a gang group."""

    rules: tuple[GatherRule, ...]

    def must_gather_layer(self, topo: Topology) -> str:
        """``GetMustGatherLayer``: the lowest layer a MustGather rule names ("" for none)."""
        musts = [r.layer for r in self.rules if r.strategy == NETWORK_TOPOLOGY_MUST_GATHER]
        return max(musts, key=topo.depth, default="")

    def multiples(self) -> dict[str, int]:
        """``GetLayerPodCountMultiple``: layer -> podCountMultiple (only those above 1)."""
        return {r.layer: r.pod_count_multiple for r in self.rules if r.pod_count_multiple > 1}

    @property
    def required(self) -> bool:
        return any(r.strategy == NETWORK_TOPOLOGY_MUST_GATHER for r in self.rules)


class SpecError(ValueError):
    """An unreadable ``network-topology-spec`` annotation."""


def parse_spec(raw: str, where: str) -> NetworkTopologySpec:
    """Read a ``gang.scheduling.koordinator.sh/network-topology-spec`` value; ``where`` names its object.
    Raises :class:`SpecError` naming the object, the annotation and the field."""
    head = f"{where}: annotation {ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC}"
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise SpecError(f"{head}: not JSON ({e.msg}): {shorten(raw)}") from None
    except (ValueError, RecursionError):
        raise SpecError(f"{head}: not JSON: {shorten(raw)}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{head}: expected a JSON object with gatherStrategy, got {shorten(raw)}")
    unknown = sorted(set(data) - {"gatherStrategy"})
    if unknown:
        raise SpecError(f"{head}: unknown field(s) {', '.join(unknown)}")
    rules = data.get("gatherStrategy") or []
    if not isinstance(rules, list):
        raise SpecError(f"{head}: gatherStrategy: expected a list")
    out = []
    for i, r in enumerate(rules):
        f = f"{head}: gatherStrategy[{i}]"
        if not isinstance(r, dict):
            raise SpecError(f"{f}: expected an object")
        layer, strategy, multiple = r.get("layer"), r.get("strategy"), r.get("podCountMultiple", 0)
        if not isinstance(layer, str) or not layer:
            raise SpecError(f"{f}.layer: expected a layer name")
        if strategy not in (NETWORK_TOPOLOGY_MUST_GATHER, NETWORK_TOPOLOGY_PREFER_GATHER):
            raise SpecError(f"{f}.strategy: expected {NETWORK_TOPOLOGY_MUST_GATHER} or "
                            f"{NETWORK_TOPOLOGY_PREFER_GATHER}, got {shorten(repr(strategy))}")
        if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 0:
            raise SpecError(f"{f}.podCountMultiple: expected a non-negative integer, got {shorten(repr(multiple))}")
        out.append(GatherRule(layer, strategy, multiple))
    return NetworkTopologySpec(tuple(out))


def pod_index(pod: Any) -> int:
    """``GetPodNetworkTopologyIndex``: the member's index, -1 when absent or unreadable."""
    raw = pod.annotations.get(ANNOTATION_GANG_POD_NETWORK_TOPOLOGY_INDEX)
    if raw is None:
        return -1
    try:
        return int(raw)
    except ValueError:
        return -1


def sort_by_index(pods: Sequence[Any]) -> list[Any]:
    """``SortPodsByIndex``: indexed pods first by index, the others after them; then by name."""
    def key(p: Any) -> tuple[int, int, str]:
        i = pod_index(p)
        return (0, i, p.name) if i >= 0 else (1, 0, p.name)
    return sorted(pods, key=key)


# -- the solver ------------------------------------------------------------------------------------------

def evaluate(topo: Topology, offer: Mapping[str, int], existing: Mapping[str, int],
             score: Mapping[str, int] | None = None) -> None:
    """``evaluateTopologyNode``: each node's offer slots, score and members already there, summed upwards."""
    topo.reset()
    for name, slots in offer.items():
        leaf = topo.leaf.get(name)
        if leaf is None:
            continue
        s = (score or {}).get(name, 0)
        for t in leaf.ancestors():
            t.offer_slot += slots
            t.score += s
    for name, n in existing.items():
        leaf = topo.leaf.get(name)
        if leaf is not None:
            for t in leaf.ancestors():
                t.existing += n


def constrain_by_multiple(node: TreeNode, multiples: Mapping[str, int]) -> None:
    """``doConstrainOfferSlot``: round each domain's slots down to its layer's podCountMultiple, bottom up."""
    if not multiples:
        return
    if node.layer != TOPOLOGY_LAYER_NODE:
        total = 0
        for c in node.children.values():
            constrain_by_multiple(c, multiples)
            total += c.offer_slot
        node.offer_slot = total
    m = multiples.get(node.layer, 0)
    if m > 1:
        node.offer_slot = node.offer_slot // m * m


def must_gather_domains(root: TreeNode, layer: str) -> list[TreeNode]:
    """``searchMustGatherSatisfiedNodes``: the domains of ``layer`` (the root when there is none)."""
    if not layer:
        return [root]
    level = [root]
    while level:
        hits = [t for t in level if t.layer == layer]
        if hits:
            return hits
        level = [c for t in level for c in t.children.values()]
    return []


def offer_satisfied(desired: int, starts: Sequence[TreeNode]) -> list[TreeNode]:
    """``searchOfferSlotSatisfiedNodes``: the domains of the lowest layer whose slots hold ``desired``."""
    candidates: list[TreeNode] = []
    level = list(starts)
    while level:
        fit = [t for t in level if t.offer_slot >= desired]
        if fit:
            candidates = fit
        level = [c for t in fit for c in t.children.values()]
    return candidates


def less(a: TreeNode, b: TreeNode, lower_offer_slot: bool) -> bool:
    """``topologyNodeLessFunc``: more members already there first (compared up the ancestors), then fewer
    (``lower_offer_slot``) or more offer slots, then the higher score, then the name."""
    for x, y in zip(a.ancestors(), b.ancestors()):
        if x.existing != y.existing:
            return x.existing > y.existing
    for x, y in zip(a.ancestors(), b.ancestors()):
        if x.offer_slot != y.offer_slot:
            return (x.offer_slot < y.offer_slot) == lower_offer_slot
    if a.score != b.score:
        return a.score > b.score
    return a.name < b.name


def _sorted(nodes: Sequence[TreeNode], lower_offer_slot: bool) -> list[TreeNode]:
    def cmp(a: TreeNode, b: TreeNode) -> int:
        return -1 if less(a, b, lower_offer_slot) else (1 if less(b, a, lower_offer_slot) else 0)
    return sorted(nodes, key=functools.cmp_to_key(cmp))


def distribute(desired: int, node: TreeNode, distribution: dict[str, int],
               multiples: Mapping[str, int]) -> tuple[list[str], int]:
    """``distributeOfferSlot``: take up to ``desired`` slots from ``node``'s subtree, roomiest child first;
    returns the nodes in the order they were filled and the slots taken."""
    most = min(node.offer_slot, desired)
    m = multiples.get(node.layer, 0)
    if m > 1:
        most = most // m * m
    if node.layer == TOPOLOGY_LAYER_NODE:
        distribution[node.name] = most
        return [node.name], most
    ordered: list[str] = []
    taken = 0
    for child in _sorted(list(node.children.values()), lower_offer_slot=False):
        names, got = distribute(most - taken, child, distribution, multiples)
        ordered += names
        taken += got
    return ordered, taken


@attrs.frozen
class Placement:
    """A plan: the domain chosen and a node for each member (uid -> node name)."""

    domain: TreeNode
    nodes: Mapping[str, str]


def place(topo: Topology, pods: Sequence[Any], offer: Mapping[str, int], existing: Mapping[str, int],
          spec: NetworkTopologySpec, *, anchor: TreeNode | None = None) -> Placement | str:
    """``PlacePods``: the placement of ``pods`` (in index order), or the reason none exists. ``anchor``
    restricts a MustGather job to the domain its already placed members are in."""
    desired = len(pods)
    multiples = spec.multiples()
    evaluate(topo, offer, existing)
    constrain_by_multiple(topo.root, multiples)
    layer = spec.must_gather_layer(topo)
    starts = [anchor] if anchor is not None else must_gather_domains(topo.root, layer)
    for cand in _sorted(offer_satisfied(desired, starts), lower_offer_slot=True):
        distribution: dict[str, int] = {}
        ordered, got = distribute(desired, cand, distribution, multiples)
        if got >= desired:
            return Placement(cand, _assign(pods, ordered, distribution))
    reasons = sorted(f"topology topologyNode {t.label}: {t.offer_slot}" for t in starts)
    msg = MESSAGE_NO_CANDIDATE.format(desired, ";".join(reasons))
    if multiples:
        msg += "; podCountMultiple constraints: " + ", ".join(f"{k}={v}" for k, v in sorted(multiples.items()))
    return msg


def _assign(pods: Sequence[Any], ordered: Sequence[str], distribution: dict[str, int]) -> dict[str, str]:
    """``distributePods``: members in order onto the nodes in fill order, each up to its share."""
    out: dict[str, str] = {}
    left = dict(distribution)
    it = iter(ordered)
    cur = next(it, None)
    for p in pods:
        while cur is not None and left.get(cur, 0) <= 0:
            cur = next(it, None)
        if cur is None:
            break
        out[p.uid] = cur
        left[cur] -= 1
    return out
