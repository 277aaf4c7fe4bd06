"""What plugins see of the cluster: a read-only :class:`~koordfw.ClusterView` that follows the engine's
state, and the handle's what-if verbs (``without_pods``, ``with_requests_freed``, ``with_requests_held``)
that change it for the length of a ``with`` block. Figures by hand: nodes of 4 cpus (4000 millicores),
pods of 1 and 2 cpus."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from koordfw import ClusterView
from koordfw.core.cluster import ClusterState
from koordfw.core.cluster_view import ReadOnlyCluster, as_view, view_of
from koordfw.core.model import make_node, make_pod
from koordfw.core.scheduler_handle import SchedulerHandle

MUTATORS = ("add_node", "update_node", "remove_node", "add_pod", "remove_pod", "assume", "forget", "confirm_bound",
            "update_pod_object", "add_requested", "set_extra_allocatable", "set_object", "delete_object")


def cluster_of(*names: str) -> ClusterState:
    c = ClusterState()
    for n in names:
        c.add_node(make_node(n, allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"}))
    return c


@attrs.define
class _Scheduler:  # what the handle's cluster verbs use of its scheduler
    cluster: ClusterState


def handle_of(c: ClusterState) -> SchedulerHandle:
    return SchedulerHandle(_Scheduler(c), "p")  # type: ignore[arg-type]


def cpu(view: ClusterView, node: str) -> int:
    return int(view.requested[view.node_index(node), view.resource_index("cpu")])


def test_the_view_is_one_per_cluster_and_a_cluster_view():
    c = cluster_of("n0")
    v = view_of(c)
    assert view_of(c) is v and as_view(c) is v and as_view(v) is v
    assert isinstance(v, ClusterView)
    assert isinstance(handle_of(c).cluster, ReadOnlyCluster) and handle_of(c).cluster is v


def test_the_view_has_no_mutators():
    v = view_of(cluster_of("n0"))
    for name in MUTATORS:
        assert not hasattr(v, name), name
    with pytest.raises(AttributeError):
        v.num_nodes = 3  # type: ignore[misc]


def test_the_columns_are_read_only_and_follow_the_engine():
    c = cluster_of("n0", "n1")
    v = view_of(c)
    req = v.requested
    assert cpu(v, "n0") == 0
    c.add_pod(make_pod("a", requests={"cpu": "1"}, node_name="n0"))
    assert cpu(v, "n0") == 1000
    assert int(req[0, v.resource_index("cpu")]) == 1000  # a view of the engine's memory, not a copy
    for arr in (v.requested, v.allocatable, v.node_version, v.unschedulable_mask, v.label_mask("zone"),
                v.request_vector(c.pod_by_key("default/a"))):  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            arr[0] = 7
    assert cpu(v, "n0") == 1000
    assert int(v.allocatable[1, v.resource_index("cpu")]) == 4000


def test_pods_and_objects_are_read_only_mappings():
    c = cluster_of("n0")
    c.set_object("NodeMetric", {"metadata": {"name": "n0"}, "status": {}})
    v = view_of(c)
    with pytest.raises(TypeError):
        v.objects_of("NodeMetric")["n1"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        v.pods["x"] = None  # type: ignore[index]
    assert list(v.objects_of("NodeMetric")) == ["n0"]
    assert v.node_metric("n0") == {"metadata": {"name": "n0"}, "status": {}}
    assert dict(v.objects_of("Device")) == {}


def test_without_pods_takes_them_off_the_node_for_the_block():
    c = cluster_of("n0")
    a, b = make_pod("a", requests={"cpu": "1"}, node_name="n0"), make_pod("b", requests={"cpu": "2"}, node_name="n0")
    c.add_pod(a)
    c.add_pod(b)
    h = handle_of(c)
    v = h.cluster
    version = int(v.node_version[0])
    with h.without_pods("n0", [b]):
        assert cpu(v, "n0") == 1000
        assert [p.name for p in v.pods_on("n0")] == ["a"]
        assert int(v.node_version[0]) == version + 1
    assert cpu(v, "n0") == 3000
    assert sorted(p.name for p in v.pods_on("n0")) == ["a", "b"]
    assert int(v.node_version[0]) == version + 2


def test_requests_freed_and_held_shift_requested_for_the_block_only():
    c = cluster_of("n0", "n1")
    a = make_pod("a", requests={"cpu": "2"}, node_name="n0")
    c.add_pod(a)
    h = handle_of(c)
    v = h.cluster
    vec = np.array(v.request_vector(make_pod("x", requests={"cpu": "1"})))
    version = v.node_version.copy()
    with h.with_requests_freed("n0", v.request_vector(a)):
        assert cpu(v, "n0") == 0
        with h.with_requests_held("n0", vec), h.with_requests_held("n1", vec):  # blocks nest
            assert (cpu(v, "n0"), cpu(v, "n1")) == (1000, 1000)
        assert (cpu(v, "n0"), cpu(v, "n1")) == (0, 0)
    assert (cpu(v, "n0"), cpu(v, "n1")) == (2000, 0)
    assert v.pods_on("n0") == [a]  # no pod moved
    assert (v.node_version == version).all()  # and no node changed version
    with h.with_requests_held("gone", vec):  # an unknown node: nothing to do
        assert (cpu(v, "n0"), cpu(v, "n1")) == (2000, 0)


def test_requests_are_put_back_when_the_block_raises():
    c = cluster_of("n0")
    h = handle_of(c)
    vec = np.array(h.cluster.request_vector(make_pod("x", requests={"cpu": "3"})))
    with pytest.raises(RuntimeError), h.with_requests_held("n0", vec):
        assert cpu(h.cluster, "n0") == 3000
        raise RuntimeError
    assert cpu(h.cluster, "n0") == 0


def test_identity_keys_of_the_state_and_its_view_are_one_key():
    from koordfw.core.memo import IdentityKey

    c, other = cluster_of("n0"), cluster_of("n0")
    dev = object()
    assert IdentityKey(c, dev) == IdentityKey(view_of(c), dev)
    assert hash(IdentityKey(c, dev)) == hash(IdentityKey(view_of(c), dev))
    assert IdentityKey(c, dev) != IdentityKey(other, dev)  # an equal cluster is another cluster
