"""The pytest plugin koordfw.testing (entry point pytest11) provides its fixtures to any test suite."""

from __future__ import annotations

from koordfw import hookimpl


def test_cluster_builder_and_schedule_fixtures(cluster_builder, koordfw_schedule):
    cluster_builder.node("small", cpu="1").node("big", cpu="8")
    cluster_builder.yaml("""
apiVersion: v1
kind: Pod
metadata: {name: from-yaml, namespace: web}
spec: {containers: [{name: c, resources: {requests: {cpu: "2"}}}]}
""")
    result = koordfw_schedule(cluster_builder)
    assert result.placements() == {"web/from-yaml": "big"}


def test_registry_factory_gives_a_fresh_registry_per_call(koordfw_registry):
    class Marker:
        @hookimpl
        def filter(self, nodes):
            return None

    a = koordfw_registry(plugins={"marker": Marker()})
    b = koordfw_registry()
    assert "marker" in a.plugins and "marker" not in b.plugins
    assert a.pm is not b.pm


def test_virtual_clock_fixture_fires_timers_in_order(virtual_clock):
    fired = []
    virtual_clock.call_at(1_000_010.0, lambda: fired.append("b"))
    virtual_clock.call_at(1_000_005.0, lambda: fired.append("a"))
    assert virtual_clock.advance(6) == 1 and fired == ["a"]
    assert virtual_clock.advance(100) == 1 and fired == ["a", "b"]
    assert virtual_clock.now() == 1_000_106.0
