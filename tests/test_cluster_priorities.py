"""ClusterState.lowest_named_priority: kept as pods are added, assumed, forgotten, bound, replaced, removed."""

from __future__ import annotations

import numpy as np

from koordfw.core.cluster import ClusterState
from koordfw.core.model import make_node, make_pod, replace_pod


def brute(cluster: ClusterState) -> int | None:
    named = [p.priority for p in cluster.all_pods() if p.node_name]
    return min(named) if named else None


def test_lowest_named_priority_follows_every_pod_change() -> None:
    rng = np.random.default_rng(3)
    cluster = ClusterState()
    for i in range(3):
        cluster.add_node(make_node(f"n{i}", allocatable={"cpu": "64", "memory": "256Gi", "pods": "110"}))
    uids: list[str] = []
    for step in range(600):
        op = int(rng.integers(6)) if uids else 0
        if op == 0:  # a new pod: pending, or already naming a node (a node that exists, or one that is gone)
            name = f"p{step}"
            node = [None, "n0", "n1", "gone"][int(rng.integers(4))]
            p = make_pod(name, "ns", requests={"cpu": "100m"}, priority=int(rng.integers(-3, 4)) * 100)
            if node:
                p = replace_pod(p, node_name=node)
            cluster.add_pod(p)
            uids.append(p.uid)
        else:
            uid = uids[int(rng.integers(len(uids)))]
            p = cluster.pod(uid)
            assert p is not None
            if op == 1:
                cluster.assume(p, f"n{int(rng.integers(3))}")
            elif op == 2:
                cluster.forget(p)
            elif op == 3:
                cluster.confirm_bound(p, f"n{int(rng.integers(3))}")
            elif op == 4:  # the same pod object re-listed (a watch update), priority as before
                cluster.update_pod_object(replace_pod(p, labels={"step": str(step)}))
            else:
                cluster.remove_pod(uid)
                uids.remove(uid)
        assert cluster.lowest_named_priority() == brute(cluster), step
