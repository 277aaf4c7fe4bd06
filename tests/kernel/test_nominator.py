"""The nominator (kube's ``internal/queue/nominator.go``): nominations added, moved, cleared and
forgotten; nominated pods of priority ≥ the pod's counted on their node while it is filtered, lower
ones not. Expected figures are worked out by hand (nodes of 4 cpus = 4000 millicores)."""

from __future__ import annotations

import attrs
import numpy as np

from koordfw.core.cluster import ClusterState
from koordfw.core.model import make_node, make_pod
from koordfw.core.nominator import Nominator
from koordfw.core.status import Code


def cluster_of(*names: str) -> ClusterState:
    c = ClusterState()
    for n in names:
        c.add_node(make_node(n, allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"}))
    return c


def cpu_requested(c: ClusterState, node: str) -> int:
    return int(c.requested[c.node_index(node), c.resource_index("cpu")])


def test_nominate_move_and_clear():
    c = cluster_of("n0", "n1")
    nom = Nominator(c)
    p = make_pod("p")
    assert not nom
    nom.nominate(p, "n1")
    assert bool(nom)
    assert nom.nominated_pods("n1") == [p]
    assert nom.by_node_index() == {1: [p]}
    nom.nominate(p, "n0")  # a new nomination replaces the old one
    assert nom.nominated_pods("n1") == []
    assert nom.by_node_index() == {0: [p]}
    nom.nominate(p, None)
    assert not nom
    assert nom.nominated_pods("n0") == []


def test_updating_a_nominated_pod_keeps_one_entry_with_the_new_object():
    c = cluster_of("n0")
    nom = Nominator(c)
    p = make_pod("p", priority=1)
    nom.nominate(p, "n0")
    newer = attrs.evolve(p, labels={"v": "2"})
    nom.nominate(newer, "n0")
    assert nom.nominated_pods("n0") == [newer]


def test_a_nomination_to_an_unknown_node_is_not_kept():
    nom = Nominator(cluster_of("n0"))
    nom.nominate(make_pod("p"), "gone")
    assert not nom
    assert nom.nominated_pods("gone") == []


def test_forget_drops_the_pod():
    nom = Nominator(cluster_of("n0"))
    a, b = make_pod("a"), make_pod("b")
    nom.nominate(a, "n0")
    nom.nominate(b, "n0")
    nom.forget(a.uid)
    assert nom.nominated_pods("n0") == [b]


def test_counted_adds_nominated_pods_of_higher_or_equal_priority_only():
    c = cluster_of("n0", "n1")
    nom = Nominator(c)
    nom.nominate(make_pod("big", requests={"cpu": "3"}, priority=100), "n0")
    nom.nominate(make_pod("small", requests={"cpu": "1"}, priority=10), "n0")
    nom.nominate(make_pod("elsewhere", requests={"cpu": "2"}, priority=100), "n1")
    both = np.array([0, 1])
    # a pod of priority 50: "big" (100) counts, "small" (10) does not
    with nom.counted(make_pod("mid", priority=50), both) as added:
        assert added is True
        assert cpu_requested(c, "n0") == 3000
        assert cpu_requested(c, "n1") == 2000
    assert (cpu_requested(c, "n0"), cpu_requested(c, "n1")) == (0, 0)
    # equal priority counts: a pod of priority 10 sees big + small
    with nom.counted(make_pod("low", priority=10), both):
        assert cpu_requested(c, "n0") == 4000
    # a pod above every nomination sees none of them
    with nom.counted(make_pod("top", priority=1000), both) as added:
        assert added is False
        assert cpu_requested(c, "n0") == 0


def test_counted_covers_only_the_nodes_asked_for_and_never_the_pod_itself():
    c = cluster_of("n0", "n1")
    nom = Nominator(c)
    me = make_pod("me", requests={"cpu": "2"}, priority=5)
    nom.nominate(me, "n0")
    nom.nominate(make_pod("other", requests={"cpu": "1"}, priority=5), "n1")
    with nom.counted(me, np.array([0])) as added:
        assert added is False  # n0 holds only the pod itself; n1 was not asked for
        assert (cpu_requested(c, "n0"), cpu_requested(c, "n1")) == (0, 0)


async def test_filters_count_a_higher_priority_nomination(kernel):
    """A preemptor of priority 100 nominated to n0 for 3 of its 4 cpus: a pod of priority 0 asking 2
    cpus does not fit there, a pod of priority 200 does."""
    k = kernel(nodes={"n0": "4"})
    await k.add()
    preemptor = make_pod("preemptor", requests={"cpu": "3"}, priority=100)
    k.cluster.add_pod(preemptor)
    k.scheduler.nominate_pending(preemptor, "n0")
    out = await k.run(make_pod("low", requests={"cpu": "2"}, priority=0))
    assert out.bound == {}
    st = out.failed["low"]
    assert st.code == Code.UNSCHEDULABLE
    assert st.message == "0/1 nodes are available: 1 Insufficient cpu."
    out = await k.run(make_pod("high", requests={"cpu": "2"}, priority=200))
    assert out.bound == {"high": "n0"}


async def test_binding_the_nominated_pod_clears_its_nomination(kernel):
    k = kernel(nodes={"n0": "4", "n1": "4"})
    p = make_pod("p", requests={"cpu": "1"})
    await k.add(p)
    k.scheduler.nominate_pending(p, "n1")
    assert [x.name for x in k.scheduler.nominator.nominated_pods("n1")] == ["p"]
    out = await k.run()
    assert out.bound == {"p": "n1"}  # the nominated node is tried first
    assert not k.scheduler.nominator
