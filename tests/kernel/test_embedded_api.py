"""The embedded engine's public API, as a replay or another program drives it: built from nodes, pods and
objects, started, stepped one cycle at a time, fed pods, nodes and objects, read through its read-only
view. Figures by hand: nodes of 4 cpus, pods of 1 to 4 cpus."""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import pytest

from koordfw import ClusterView, build_registry, hookimpl
from koordfw.embed import EmbeddedEngine
from koordfw.inputs import load_manifests, make_node, make_pod
from koordfw.testing import ClusterBuilder


def node(name: str, cpu: str = "4") -> object:
    return make_node(name, allocatable={"cpu": cpu, "memory": "16Gi", "pods": "110"})


def engine_of(*nodes: object, pods: tuple = (), objects: tuple = (), plugins: dict | None = None,
              inline: bool = True) -> EmbeddedEngine:
    reg = build_registry(plugins=plugins or {}, autoload=False)
    return EmbeddedEngine(reg, nodes=nodes, pods=pods, objects=objects, start_time=100.0, inline_binding=inline)


def run(fn) -> None:
    anyio.run(fn)


def test_built_from_nodes_pods_and_objects_and_started_queues_the_pending_pods_in_order():
    a, b = make_pod("a", "default", requests={"cpu": "3"}), make_pod("b", "default", requests={"cpu": "3"})
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}, "data": {}}
    e = engine_of(node("n0"), node("n1"), pods=(a, b), objects=(cm,))

    async def main() -> None:
        await e.start()
        async with anyio.create_task_group() as tg:
            first = await e.schedule_one(tg)
            second = await e.schedule_one(tg)
            assert await e.schedule_one(tg) is None  # the queue is empty
        assert (first.name, second.name) == ("a", "b")  # the order they were given
        await e.stop()

    run(main)
    v = e.view
    assert v.num_nodes == 2 and v.get_object("ConfigMap", "default/x") == cm
    # 3 cpus each on 4-cpu nodes: one pod a node
    assert {v.pod(a.uid).node_name, v.pod(b.uid).node_name} == {"n0", "n1"}
    assert e.results[a.uid].node == v.pod(a.uid).node_name


def test_an_object_without_a_kind_is_refused_naming_the_field():
    from koordfw import ManifestError

    with pytest.raises(ManifestError, match="kind"):
        engine_of(node("n0"), objects=({"metadata": {"name": "x"}},))
    with pytest.raises(ManifestError, match="kind"):
        engine_of(node("n0")).put_object({"metadata": {"name": "x"}})


def test_add_pod_queues_it_and_delete_pod_frees_its_node_for_the_next():
    e = engine_of(node("n0"))
    big1, big2 = make_pod("big1", "default", requests={"cpu": "3"}), make_pod("big2", "default", requests={"cpu": "3"})

    async def main() -> None:
        await e.start()
        async with anyio.create_task_group() as tg:
            await e.add_pod(big1)
            assert (await e.schedule_one(tg)).uid == big1.uid
            await e.add_pod(big2)
            assert (await e.schedule_one(tg)).uid == big2.uid
            assert e.view.pod(big2.uid).node_name is None  # 3 + 3 > 4 cpus
            cpu = e.view.resource_index("cpu")
            assert int(e.view.requested[0, cpu]) == 3000
            await e.delete_pod(big1.uid)
            assert int(e.view.requested[0, cpu]) == 0 and e.view.pod(big1.uid) is None
        await e.drive()  # big1's deletion moved big2 (a pod deletion frees room)
        assert e.view.pod(big2.uid).node_name == "n0"

    run(main)


def test_put_node_adds_a_node_and_the_waiting_pod_lands_on_it():
    e = engine_of(node("n0", cpu="1"), pods=(make_pod("p", "default", requests={"cpu": "2"}),))

    async def main() -> None:
        await e.run()
        p = e.view.pod_by_key("default/p")
        assert p.node_name is None
        await e.put_node(node("n1", cpu="2"))
        await e.drive()
        assert e.view.pod_by_key("default/p").node_name == "n1"
        # the same name again is an update: n0 grows, no second row
        await e.put_node(node("n0", cpu="8"))
        assert e.view.num_nodes == 2 and e.view.node("n0").allocatable["cpu"] == 8000

    run(main)


def test_node_updated_moves_the_pods_waiting_for_room_once_the_embedder_changed_the_node():
    """The engine's own node writes (a replay's node-resource step) reach the queue as Node/Update."""
    e = engine_of(node("n0", cpu="1"), pods=(make_pod("p", "default", requests={"cpu": "2"}),))

    async def main() -> None:
        await e.run()
        assert e.view.pod_by_key("default/p").node_name is None
        e.cluster.set_extra_allocatable("n0", {"cpu": 3000})  # what update_node_resources writes
        await e.node_updated("n0")
        await e.drive()
        assert e.view.pod_by_key("default/p").node_name == "n0"
        with pytest.raises(KeyError):
            await e.node_updated("nope")

    run(main)


class Watcher:
    """Records the ConfigMaps it hears of through ``handle.watch_objects``."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, object, object]] = []

    @hookimpl
    def startup(self, handle) -> None:
        handle.watch_objects("ConfigMap", lambda key, old, new: self.heard.append((key, old, new)))


def test_put_object_stores_it_and_the_watching_plugins_hear_the_change():
    w = Watcher()
    e = engine_of(node("n0"), plugins={"watcher": w})
    v1 = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "1"}}
    v2 = {**v1, "data": {"k": "2"}}

    async def main() -> None:
        await e.start()
        e.put_object(v1)
        e.put_object(v2)

    run(main)
    assert w.heard == [("ns/c", None, v1), ("ns/c", v1, v2)]
    assert e.view.get_object("ConfigMap", "ns/c") == v2


def test_binding_in_tasks_needs_the_callers_task_group_and_binds_there():
    e = engine_of(node("n0"), pods=(make_pod("p", "default", requests={"cpu": "1"}),), inline=False)

    async def main() -> None:
        await e.start()
        async with anyio.create_task_group() as tg:
            assert (await e.schedule_one(tg)).name == "p"
            assert e.view.is_assumed(e.view.pod_by_key("default/p").uid)  # reserved, its binding task not run
        assert e.view.pod_by_key("default/p").node_name == "n0"

    run(main)


def test_from_manifests_keeps_the_input_and_its_clock(tmp_path: Path):
    (tmp_path / "in.yaml").write_text("""
apiVersion: v1
kind: Node
metadata: {name: n0, creationTimestamp: "2026-01-01T00:00:00Z"}
status: {allocatable: {cpu: "2", memory: 4Gi, pods: "10"}}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
""")
    m = load_manifests([tmp_path / "in.yaml"])
    e = EmbeddedEngine.from_manifests(build_registry(autoload=False), m)

    async def main() -> None:
        await e.run()

    run(main)
    assert e.clock.now() >= 1767225600.0  # 2026-01-01: the input's newest time
    assert e.view.pod_by_key("default/p").node_name == "n0"


def test_what_plugins_are_given_of_nodes_is_read_only():
    """NodeBatch.cluster and NodeView.cluster are the read-only view, as handle.cluster is."""
    seen: list[object] = []

    class Peek:
        @hookimpl
        def filter(self, pod, nodes):
            seen.append(nodes.cluster)
            seen.append(nodes[0].cluster)
            with pytest.raises(ValueError):
                nodes.cluster.requested[0, 0] = 1
            return None

    e = engine_of(node("n0"), pods=(make_pod("p", "default"),), plugins={"peek": Peek()})
    anyio.run(e.run)
    assert seen and all(c is e.view for c in seen)
    assert isinstance(e.view, ClusterView)
    assert not hasattr(e.view, "add_pod") and not hasattr(e.view, "set_object")
    assert np.asarray(e.view.allocatable).flags.writeable is False


def test_the_builder_input_runs_through_from_manifests():
    b = ClusterBuilder().node("n1").pod("web-1")
    e = EmbeddedEngine.from_manifests(build_registry(autoload=False), b.build(), start_time=0.0)
    anyio.run(e.run)
    assert e.view.pod_by_key("default/web-1").node_name == "n1"
