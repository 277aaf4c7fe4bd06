"""The nominator (kube's ``internal/queue/nominator.go``): pods nominated to a node by preemption or a
migration, counted there by the filters for pods of lower or equal priority until they bind."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from .cluster import ClusterState
from .model import Pod


class Nominator:
    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        #: node index → uid → pod nominated there
        self._by_node: dict[int, dict[str, Pod]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_node)

    def nominate(self, pod: Pod, node_name: str | None) -> None:
        """Nominate ``pod`` to ``node_name``, or clear its nomination (``None``)."""
        if self._by_node:
            for pods in self._by_node.values():
                pods.pop(pod.uid, None)
            self._by_node = {k: v for k, v in self._by_node.items() if v}
        if node_name is not None:
            gi = self.cluster.node_index(node_name)
            if gi is not None:
                self._by_node.setdefault(gi, {})[pod.uid] = pod

    def forget(self, uid: str) -> None:
        for pods in self._by_node.values():
            pods.pop(uid, None)

    def nominated_pods(self, node_name: str) -> list[Pod]:
        gi = self.cluster.node_index(node_name)
        return list(self._by_node.get(gi, {}).values()) if gi is not None else []

    def by_node_index(self) -> dict[int, list[Pod]]:
        return {gi: list(pods.values()) for gi, pods in self._by_node.items() if pods}

    @contextmanager
    def counted(self, pod: Pod, sub: np.ndarray) -> Iterator[bool]:
        """kube's RunFilterPluginsWithNominatedPods: while inside, the requests of pods nominated on the
        nodes ``sub`` with a priority ≥ ``pod``'s count as requested there, so a preemptor's room is not
        taken by lower pods. Yields whether anything was added."""
        added: list[tuple[int, np.ndarray]] = []
        if self._by_node:
            members = set(sub.tolist())
            for gi, pods in self._by_node.items():
                if gi not in members:
                    continue
                vec = None
                for uid, p in pods.items():
                    if uid != pod.uid and p.priority >= pod.priority:
                        v = self.cluster.request_vector(p)
                        vec = v.copy() if vec is None else vec + v
                if vec is not None:
                    self.cluster.add_requested(gi, vec)
                    added.append((gi, vec))
        try:
            yield bool(added)
        finally:
            for gi, vec in added:
                self.cluster.add_requested(gi, -vec)
