"""node_ports: the cases of kube-scheduler's ``nodeports/node_ports_test.go`` (TestNodePorts), run through
the embedded cluster (an existing pod bound to the one node, the incoming pod fits there or not)."""

from __future__ import annotations

import pytest

from koordfw import ManifestError
from koordfw.inputs import make_pod
from koordfw.testing import ClusterBuilder, schedule

REASON = "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."


def ports(*specs: str) -> list[dict]:
    """``"UDP/127.0.0.1/8080"`` → a container with that host port."""
    out = []
    for s in specs:
        proto, ip, port = s.split("/")
        out.append({"containerPort": int(port), "hostPort": int(port), "protocol": proto, "hostIP": ip})
    return [{"name": "c", "ports": out}]


CASES = [
    ("nothing running", [], ["UDP/127.0.0.1/8080"], True),
    ("other port", ["UDP/127.0.0.1/9090"], ["UDP/127.0.0.1/8080"], True),
    ("same udp port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),
    ("same tcp port", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], False),
    ("different host ip", ["TCP/127.0.0.2/8080"], ["TCP/127.0.0.1/8080"], True),
    ("different protocol", ["TCP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], True),
    ("second udp port conflict", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"], False),
    ("first tcp port conflict", ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
     ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"], False),
    ("first tcp port conflict due to 0.0.0.0 hostIP", ["TCP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], False),
    ("TCP hostPort conflict due to 0.0.0.0 hostIP", ["TCP/127.0.0.1/8001"],
     ["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"], False),
    ("second tcp port conflict to 0.0.0.0 hostIP", ["TCP/0.0.0.0/8001"], ["TCP/127.0.0.1/8001"], False),
    ("second different protocol", ["TCP/0.0.0.0/8001"], ["UDP/127.0.0.1/8001"], True),
    ("UDP hostPort conflict due to 0.0.0.0 hostIP", ["UDP/127.0.0.1/8001"],
     ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"], False),
]


@pytest.mark.parametrize(("name", "existing", "wanted", "fits"), CASES, ids=[c[0] for c in CASES])
def test_node_ports(name, existing, wanted, fits):
    b = ClusterBuilder().node("n1")
    if existing:
        b.pod("existing", node="n1", containers=ports(*existing))
    b.pod("incoming", containers=ports(*wanted))
    r = schedule(b)
    assert r.placements()["default/incoming"] == ("n1" if fits else None)
    if not fits:
        assert r.results[r.cluster.pod_by_key("default/incoming").uid].reason == REASON


def test_defaults_are_tcp_and_every_address():
    b = ClusterBuilder().node("n1")
    b.pod("existing", node="n1", containers=[{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}])
    b.pod("incoming", containers=ports("TCP/10.0.0.1/80"))
    assert schedule(b).placements()["default/incoming"] is None


def test_container_ports_without_host_ports_do_not_conflict():
    b = ClusterBuilder().node("n1")
    b.pod("existing", node="n1", containers=[{"name": "c", "ports": [{"containerPort": 80}]}])
    b.pod("incoming", containers=[{"name": "c", "ports": [{"containerPort": 80}]}])
    assert schedule(b).placements()["default/incoming"] == "n1"


def test_restartable_init_containers_hold_their_host_ports():
    """kube's GetHostPorts: sidecars (restartPolicy Always) run for the pod's life; plain init containers
    have exited before the app starts."""
    sidecar = {"name": "s", "restartPolicy": "Always", "ports": [{"containerPort": 9000, "hostPort": 9000}]}
    plain = {"name": "i", "ports": [{"containerPort": 9001, "hostPort": 9001}]}
    p = make_pod("p", initContainers=[sidecar, plain])
    assert [(h.protocol, h.port) for h in p.host_ports] == [("TCP", 9000)]
    b = ClusterBuilder().node("n1").pod("existing", node="n1", initContainers=[sidecar])
    b.pod("incoming", containers=ports("TCP/0.0.0.0/9000"))
    assert schedule(b).placements()["default/incoming"] is None


def test_the_pod_goes_where_the_port_is_free():
    b = ClusterBuilder().node("n1").node("n2").node("n3")
    for n in ("n1", "n3"):
        b.pod(f"agent-{n}", node=n, containers=ports("TCP/0.0.0.0/9100"))
    b.pod("exporter", containers=ports("TCP/0.0.0.0/9100"))
    b.pod("second", containers=ports("TCP/0.0.0.0/9100"))
    r = schedule(b)
    assert r.placements()["default/exporter"] == "n2"
    assert r.results[r.cluster.pod_by_key("default/second").uid].reason == (
        "0/3 nodes are available: 3 node(s) didn't have free ports for the requested pod ports.")


def test_disabled_node_ports_ignores_ports():
    b = ClusterBuilder().node("n1").pod("existing", node="n1", containers=ports("TCP/0.0.0.0/80"))
    b.pod("incoming", containers=ports("TCP/0.0.0.0/80"))
    assert schedule(b, profile={"disable": ["node_ports"]}).placements()["default/incoming"] == "n1"


@pytest.mark.parametrize(("port", "field"), [
    ({"containerPort": 80, "hostPort": 70000}, "spec.containers[0].ports[0].hostPort"),
    ({"containerPort": 80, "hostPort": 80, "protocol": "tcp"}, "spec.containers[0].ports[0].protocol"),
    ({"containerPort": 80, "hostPort": "eighty"}, "spec.containers[0].ports[0].hostPort"),
])
def test_a_bad_port_names_the_pod_and_field(port, field):
    with pytest.raises(ManifestError) as e:
        make_pod("web", containers=[{"name": "c", "ports": [port]}])
    assert e.value.obj == "Pod default/web" and e.value.field == field
