"""The cluster's network topology as a tree, built the way Koordinator's ``frameworkext/networktopology``
does: the ``ClusterNetworkTopology`` named ``default`` lists the layers (each with its parent layer and the
node label keys naming a node's domain in it), and every node hangs under the domains its labels name.

The root is the whole cluster (``ClusterTopologyLayer``), the leaves are nodes (``NodeTopologyLayer``).
A node without a label for the layer right above the nodes (typically an accelerator domain) gets a
domain of its own, named after it; a node missing any other layer is left out of the tree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from koordfw import ManifestError
from koordfw.extension import (
    CLUSTER_NETWORK_TOPOLOGY_NAME,
    KIND_CLUSTER_NETWORK_TOPOLOGY,
    TOPOLOGY_LAYER_CLUSTER,
    TOPOLOGY_LAYER_NODE,
)

_OBJ = f"{KIND_CLUSTER_NETWORK_TOPOLOGY}/{CLUSTER_NETWORK_TOPOLOGY_NAME}"


@attrs.frozen
class Layer:
    """One ``spec.networkTopologySpec`` entry."""

    name: str
    parent: str
    label_keys: tuple[str, ...]


@attrs.define(eq=False)
class TreeNode:
    """A topology domain. ``offer_slot`` (members it can hold), ``score`` and ``existing`` (members
    already placed in it) are the solver's working figures, reset for every plan."""

    layer: str
    name: str
    parent: TreeNode | None = None
    children: dict[str, TreeNode] = attrs.field(factory=dict)
    offer_slot: int = 0
    score: int = 0
    existing: int = 0

    def ancestors(self) -> Iterator[TreeNode]:
        """This domain, then its parent, up to the root."""
        n: TreeNode | None = self
        while n is not None:
            yield n
            n = n.parent

    def leaves(self) -> Iterator[TreeNode]:
        if self.layer == TOPOLOGY_LAYER_NODE:
            yield self
            return
        for c in self.children.values():
            yield from c.leaves()

    def walk(self) -> Iterator[TreeNode]:
        yield self
        for c in self.children.values():
            yield from c.walk()

    @property
    def label(self) -> str:
        return f"{self.layer}/{self.name}"


def parse_layers(obj: Mapping[str, Any]) -> list[Layer]:
    """The layers of a ClusterNetworkTopology, ordered from the top (the child of the cluster) down to
    ``NodeTopologyLayer``; raises :class:`ManifestError` naming the field when they do not form one chain."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ManifestError("expected a mapping", obj=_OBJ, field="spec")
    raw = spec.get("networkTopologySpec")
    if not isinstance(raw, list) or not raw:
        raise ManifestError("expected a non-empty list of layers", obj=_OBJ, field="spec.networkTopologySpec")
    by_name: dict[str, Layer] = {}
    for i, item in enumerate(raw):
        where = f"spec.networkTopologySpec[{i}]"
        if not isinstance(item, Mapping):
            raise ManifestError("expected a mapping", obj=_OBJ, field=where)
        name = item.get("topologyLayer")
        if not isinstance(name, str) or not name:
            raise ManifestError("expected a layer name", obj=_OBJ, field=f"{where}.topologyLayer")
        if name in by_name:
            raise ManifestError(f"layer {name!r} listed twice", obj=_OBJ, field=f"{where}.topologyLayer")
        parent = item.get("parentTopologyLayer") or ""
        keys = item.get("labelKey") or []
        if not isinstance(parent, str):
            raise ManifestError("expected a layer name", obj=_OBJ, field=f"{where}.parentTopologyLayer")
        if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
            raise ManifestError("expected a list of node label keys", obj=_OBJ, field=f"{where}.labelKey")
        if name != TOPOLOGY_LAYER_NODE and not keys:
            raise ManifestError(f"layer {name!r} names no node label key", obj=_OBJ, field=f"{where}.labelKey")
        by_name[name] = Layer(name, parent, tuple(keys))
    # from the nodes up through the parents, as sortNetworkTopologySpecFromParentToChild
    chain: list[Layer] = []
    cur = by_name.get(TOPOLOGY_LAYER_NODE)
    if cur is None:
        raise ManifestError(f"topology layer {TOPOLOGY_LAYER_NODE!r} not found in spec", obj=_OBJ,
                            field="spec.networkTopologySpec")
    while cur is not None:
        if cur in chain:
            raise ManifestError(f"the parents of layer {cur.name!r} form a cycle", obj=_OBJ,
                                field="spec.networkTopologySpec")
        chain.append(cur)
        parent = cur.parent
        if parent in ("", TOPOLOGY_LAYER_CLUSTER):
            break
        nxt = by_name.get(parent)
        if nxt is None:
            raise ManifestError(f"topology layer {parent!r} (the parent of {cur.name!r}) not found in spec",
                                obj=_OBJ, field="spec.networkTopologySpec")
        cur = nxt
    if len(chain) != len(by_name):
        left = sorted(set(by_name) - {la.name for la in chain})
        raise ManifestError(f"layer(s) {', '.join(left)} are not on the chain from {TOPOLOGY_LAYER_NODE} up",
                            obj=_OBJ, field="spec.networkTopologySpec")
    chain.reverse()
    return chain


class Topology:
    """The tree of one ClusterNetworkTopology over a set of nodes."""

    def __init__(self, layers: Sequence[Layer], nodes: Sequence[tuple[str, Mapping[str, str]]]) -> None:
        #: top to bottom, NodeTopologyLayer last
        self.layers = list(layers)
        self.layer_names = [la.name for la in self.layers]
        self.root = TreeNode(TOPOLOGY_LAYER_CLUSTER, "")
        self.leaf: dict[str, TreeNode] = {}
        #: nodes left out (a layer's label missing): name -> the layer
        self.unplaced: dict[str, str] = {}
        index: dict[tuple[str, str], TreeNode] = {}
        n = len(self.layers)
        for node_name, labels in nodes:
            path: list[tuple[str, str]] = []
            for i, layer in enumerate(self.layers):
                if layer.name == TOPOLOGY_LAYER_NODE:
                    value = node_name
                else:
                    value = next((v for k in layer.label_keys if (v := labels.get(k, ""))), "")
                    if not value and i == n - 2:
                        value = node_name  # a node without its direct parent domain gets one of its own
                if not value:
                    self.unplaced[node_name] = layer.name
                    break
                path.append((layer.name, value))
            else:
                parent = self.root
                for meta in path:
                    tn = index.get(meta)
                    if tn is None:
                        tn = index[meta] = TreeNode(meta[0], meta[1], parent)
                        parent.children[meta[1]] = tn
                    parent = tn
                self.leaf[node_name] = parent

    def depth(self, layer: str) -> int:
        """1 for the top layer ... ``len(layers)`` for nodes; 0 for the cluster."""
        return 0 if layer == TOPOLOGY_LAYER_CLUSTER else self.layer_names.index(layer) + 1

    def is_ancestor(self, a: str, b: str) -> bool:
        """Is layer ``a`` above layer ``b``?"""
        return self.depth(a) < self.depth(b)

    def reset(self) -> None:
        for t in self.root.walk():
            t.offer_slot = t.score = t.existing = 0

    def domains(self) -> list[dict[str, Any]]:
        """One row per domain (not the nodes): layer, name, parent and its number of nodes."""
        out = []
        for t in self.root.walk():
            if t.layer in (TOPOLOGY_LAYER_CLUSTER, TOPOLOGY_LAYER_NODE):
                continue
            out.append({"layer": t.layer, "name": t.name, "parent": t.parent.label if t.parent else "",
                        "nodes": sum(1 for _ in t.leaves())})
        return out
