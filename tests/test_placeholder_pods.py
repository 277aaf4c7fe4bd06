"""The kernel's placeholder pods and restored requests (``Handle.add_placeholder``, ``remove_placeholder``,
``is_placeholder``, ``restore_requests``): a pod that exists only in the scheduler is scheduled like any pod,
bound by its own plugin alone, holds its node's resources, never reaches the engine; requests restored for
one cycle count as free in its filters and scores only."""

from __future__ import annotations

import anyio
import attrs

from koordfw import Status, build_registry, hookimpl
from koordfw.embed import EmbeddedEngine
from koordfw.inputs import make_pod
from koordfw.testing import ClusterBuilder


class Holder:
    """Adds one placeholder at startup and records its binding; restores it for pods labelled ``owner``."""

    def __init__(self) -> None:
        self.placeholder = make_pod("hold", requests={"cpu": "3"}, priority=1000)
        self.bound: list[str] = []
        self.bind_calls = 0

    @hookimpl
    def startup(self, handle):
        handle.add_placeholder(self.placeholder)

    @hookimpl
    def bind(self, pod, node, handle):
        self.bind_calls += 1
        if handle.is_placeholder(pod.uid):
            self.bound.append(node.name)
        return None  # None: bound (a placeholder's plugin has nothing else to do)

    @hookimpl
    def pre_filter(self, pod, state, handle):
        if pod.labels.get("owner") == "yes":
            p = handle.cluster.pod(self.placeholder.uid)
            if p is not None and p.node_name:
                handle.restore_requests(state, p.node_name, handle.cluster.request_vector(p))
        return None


def _engine(b: ClusterBuilder, plugin: Holder) -> tuple[EmbeddedEngine, object]:
    cluster = b.build().to_cluster()
    engine = EmbeddedEngine(build_registry(plugins={"holder": plugin}, autoload=False), cluster, start_time=0.0)
    return engine, cluster


def test_placeholder_is_scheduled_bound_by_its_plugin_and_holds_the_node():
    plugin = Holder()
    b = ClusterBuilder().node("n1", cpu="4").pod("other", cpu="2").pod("owner", cpu="3", labels={"owner": "yes"})

    async def main() -> None:
        engine, cluster = _engine(b, plugin)
        await engine.run()
        assert plugin.bound == ["n1"]
        held = cluster.pod(plugin.placeholder.uid)
        assert held.node_name == "n1" and not cluster.is_assumed(held.uid)
        # the engine never heard of it: not bound through it, no result, not evictable
        assert plugin.placeholder.uid not in engine.results
        assert all(uid != plugin.placeholder.uid for uid, _ in engine.bind_events)
        assert await engine.evict(held, "test") is False
        assert await engine.scheduler.handle_for("holder").evict(held, "test") is False
        # 3 of 4 cpu held: "other" (2) cannot fit, "owner" (3) fits in what is held for it
        assert cluster.pod_by_key("default/other").node_name is None
        assert cluster.pod_by_key("default/owner").node_name == "n1"
        # after the cycle the hold is counted again (the plugin would shrink it in reserve)
        assert int(cluster.requested[0, cluster.resource_index("cpu")]) == 6000

    anyio.run(main)


def test_placed_placeholder_resized_and_removed_releases_and_wakes_pods():
    plugin = Holder()
    plugin.placeholder = attrs.evolve(plugin.placeholder, node_name="n1")  # already placed
    b = ClusterBuilder().node("n1", cpu="4").pod("other", cpu="2")

    async def main() -> None:
        engine, cluster = _engine(b, plugin)
        await engine.run()
        assert plugin.bound == []  # placed at once, not scheduled
        assert cluster.pod_by_key("default/other").node_name is None
        h = engine.scheduler.handle_for("holder")
        h.add_placeholder(attrs.evolve(plugin.placeholder, requests={"cpu": 1000}))  # shrink: 3 → 1 cpu
        await engine.drive()
        assert cluster.pod_by_key("default/other").node_name == "n1"
        assert h.remove_placeholder(plugin.placeholder.uid) is not None
        assert h.remove_placeholder("not-a-placeholder") is None
        assert cluster.pod(plugin.placeholder.uid) is None
        assert h.is_placeholder(plugin.placeholder.uid)

    anyio.run(main)


def test_placeholder_that_fits_nowhere_stays_queued_without_engine_writes():
    plugin = Holder()
    plugin.placeholder = make_pod("big", requests={"cpu": "64"})
    b = ClusterBuilder().node("n1", cpu="4")

    async def main() -> None:
        engine, cluster = _engine(b, plugin)
        await engine.run()
        info = engine.scheduler.queue.info(plugin.placeholder.uid)
        assert info is not None and info.pod.uid in engine.scheduler.queue.unschedulable
        assert plugin.placeholder.uid not in engine.results
        assert engine.scheduler.pending_uids() == []

    anyio.run(main)


def test_restored_requests_are_per_cycle_and_undone():
    seen: list[int] = []

    class Probe:
        @hookimpl
        def pre_filter(self, pod, state, handle):
            handle.restore_requests(state, "n1", handle.cluster.request_vector(pod))
            handle.restore_requests(state, "n1", handle.cluster.request_vector(pod))  # adds up

        @hookimpl
        def filter(self, pod, nodes):
            c = nodes.cluster
            seen.append(int(c.requested[nodes.idx[0], c.resource_index("cpu")]))

        @hookimpl
        def score(self, pod, nodes):
            c = nodes.cluster
            seen.append(int(c.requested[nodes.idx[0], c.resource_index("cpu")]))
            return [0] * len(nodes)

    b = ClusterBuilder().node("n1", cpu="8").node("n2", cpu="8").pod("a", cpu="1", node="n1").pod("p", cpu="1")
    cluster = b.build().to_cluster()

    async def main() -> None:
        engine = EmbeddedEngine(build_registry(plugins={"probe": Probe()}, autoload=False), cluster, start_time=0.0)
        await engine.run()

    anyio.run(main)
    assert seen and all(v == 1000 - 2000 for v in seen[:1])  # a (1 cpu) minus twice p's 1 cpu, inside the cycle
    assert int(cluster.requested[0, cluster.resource_index("cpu")]) in (1000, 2000)  # undone afterwards


def test_bind_of_a_placeholder_calls_its_own_plugin_only():
    calls: list[str] = []
    plugin = Holder()

    class Other:
        @hookimpl
        def bind(self, pod):
            calls.append(pod.name)
            return Status.error("must not be called for a placeholder")

    b = ClusterBuilder().node("n1", cpu="4")

    async def main() -> None:
        cluster = b.build().to_cluster()
        engine = EmbeddedEngine(build_registry(plugins={"holder": plugin, "other": Other()}, autoload=False),
                                cluster, start_time=0.0)
        await engine.run()
        assert plugin.bound == ["n1"] and calls == []

    anyio.run(main)


def test_descheduling_never_moves_a_placeholder():
    from koordfw import Migration

    plugin = Holder()
    plugin.placeholder = attrs.evolve(plugin.placeholder, node_name="n1")

    class MoveAll:
        @hookimpl
        def deschedule(self, cluster):
            return [Migration(pod=p.key, from_node="n1", to=None, reason="test") for p in cluster.pods_on("n1")]

    b = ClusterBuilder().node("n1", cpu="8").pod("a", cpu="1", node="n1")

    async def main() -> None:
        cluster = b.build().to_cluster()
        engine = EmbeddedEngine(build_registry(plugins={"holder": plugin, "move_all": MoveAll()}, autoload=False),
                                cluster, start_time=0.0)
        await engine.run()
        plan = await engine.deschedule()
        assert [m.pod for m in plan] == ["default/a"]
        assert cluster.pod(plugin.placeholder.uid).node_name == "n1"

    anyio.run(main)


def test_removing_a_placeholder_while_its_cycle_runs_waits_for_the_cycle():
    """A timer (here: an async plugin's hook) removing a placeholder whose cycle is awaiting a plugin: the
    removal happens once that cycle is over, and nothing is left held."""
    plugin = Holder()

    class RemoveDuringFilter:
        def __init__(self) -> None:
            self.done = False

        @hookimpl
        async def pre_filter(self, pod, handle):
            if handle.is_placeholder(pod.uid) and not self.done:
                self.done = True
                assert handle.remove_placeholder(pod.uid) is not None
                assert handle.cluster.pod(pod.uid) is not None  # not yet: its cycle is running

    b = ClusterBuilder().node("n1", cpu="4")

    async def main() -> None:
        cluster = b.build().to_cluster()
        engine = EmbeddedEngine(build_registry(plugins={"holder": plugin, "remover": RemoveDuringFilter()},
                                               autoload=False), cluster, start_time=0.0)
        await engine.run()
        await engine.scheduler.flush()
        assert cluster.pod(plugin.placeholder.uid) is None
        assert int(cluster.requested[0, cluster.resource_index("cpu")]) == 0

    anyio.run(main)
