"""docs/writing-a-plugin.md's code runs: the ```python block after ``<!-- example plugin -->`` is executed
and its plugin registered in-process, then checked in the embedded cluster (its pluginConfig args, its
filter's rejection reason, its Skip for unlabelled pods, its queueing hints); the block after
``<!-- example test -->`` is executed and its test function run."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from koordfw import QueueingHint, StateKey, build_registry
from koordfw.embed import EmbeddedEngine
from koordfw.hints import ASSIGNED_POD_DELETE, NODE_ADD
from koordfw.inputs import make_node, make_pod
from koordfw.testing import ClusterBuilder, schedule

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "writing-a-plugin.md"
NAME = "max_pods_per_label"


def block(marker: str) -> str:
    """The ```python block that directly follows the line ``<!-- marker -->``."""
    m = re.search(rf"^<!-- {re.escape(marker)} -->\n```python\n(.*?)^```$", GUIDE.read_text(), re.M | re.S)
    assert m, f"{GUIDE.name}: no ```python block right after <!-- {marker} -->"
    return m.group(1)


def run_block(marker: str, into: dict[str, Any] | None = None) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": f"writing_a_plugin_{marker.replace(' ', '_')}", **(into or {})}
    exec(compile(block(marker), f"{GUIDE.name}:<{marker}>", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def example() -> dict[str, Any]:
    return run_block("example plugin")


def test_the_example_is_a_class_plugin_with_a_typed_state_key(example):
    assert isinstance(example["COUNTS"], StateKey)
    registry = build_registry({"pluginConfig": {NAME: {"labelKey": "team", "maxPerNode": 2}}},
                              plugins={NAME: example["MaxPodsPerLabel"]}, autoload=False)
    assert registry.args[NAME] == example["MaxPodsArgs"](label_key="team", max_per_node=2)
    assert {"plugin_args", "pre_filter", "filter", "events_to_register"} <= set(
        registry.plugins[NAME].hooks(registry.pm))


def test_filter_rejects_and_args_come_from_the_profile(example):
    b = ClusterBuilder().node("n1").node("n2")
    for i in range(5):
        b.pod(f"web-{i}", cpu="100m", labels={"app": "web"})
    b.pod("plain", cpu="100m")  # no label: pre_filter says Skip, so the filter never sees it
    r = schedule(b, plugins={NAME: example["MaxPodsPerLabel"]},
                 profile={"pluginConfig": {NAME: {"maxPerNode": 2}}})
    placed = r.placements()
    web = [placed[f"default/web-{i}"] for i in range(5)]
    assert sorted(n for n in web if n) == ["n1", "n1", "n2", "n2"] and web.count(None) == 1
    assert placed["default/plain"] is not None
    pending = r.cluster.pod_by_key(f"default/web-{web.index(None)}")
    assert r.results[pending.uid].reason == "0/2 nodes are available: 2 node(s) already run 2 pod(s) with app=web."


def test_hints_skip_unrelated_deletes_and_queue_on_a_new_node(example):
    async def main() -> None:
        manifests = (ClusterBuilder().node("n1")
                     .pod("db", cpu="100m", labels={"app": "db"}, node="n1")
                     .pod("web-1", cpu="100m", labels={"app": "web"})
                     .pod("web-2", cpu="100m", labels={"app": "web"})).build()
        cluster = manifests.to_cluster()
        engine = EmbeddedEngine(build_registry(plugins={NAME: example["MaxPodsPerLabel"]}, autoload=False),
                                cluster, start_time=0.0)
        s = engine.scheduler
        await engine.run()
        web2 = cluster.pod_by_key("default/web-2")
        assert cluster.pod_by_key("default/web-1").node_name == "n1" and web2.node_name is None
        assert engine.results[web2.uid].reason.endswith("1 node(s) already run 1 pod(s) with app=web.")
        attempts = engine.attempt_counts[web2.uid]

        # another app's pod leaving n1: the plugin's hint says QueueSkip, web-2 is not retried
        await s.remove_pod(cluster.pod_by_key("default/db").uid)
        await engine.drive()
        assert s.hint_counts[str(ASSIGNED_POD_DELETE)] == [0, 1]
        assert engine.attempt_counts[web2.uid] == attempts and cluster.pod(web2.uid).node_name is None

        # a node added: registered without a hint (always Queue), web-2 lands there
        n2 = make_node("n2")
        cluster.add_node(n2)
        await s.cluster_event(NODE_ADD, None, n2)
        await engine.drive()
        assert cluster.pod(web2.uid).node_name == "n2"
        await s.shutdown()

    anyio.run(main)


def test_the_hint_queues_only_for_a_pod_with_the_same_label(example):
    plugin = example["MaxPodsPerLabel"](example["MaxPodsArgs"]())
    regs = {str(r.event): r for r in plugin.events_to_register()}
    assert set(regs) == {str(ASSIGNED_POD_DELETE), str(NODE_ADD)} and regs[str(NODE_ADD)].hint is None
    hint = regs[str(ASSIGNED_POD_DELETE)].hint
    pod = make_pod("web-2", labels={"app": "web"})
    assert hint(pod, make_pod("web-1", labels={"app": "web"}, node_name="n1"), None) is QueueingHint.QUEUE
    assert hint(pod, make_pod("db", labels={"app": "db"}, node_name="n1"), None) is QueueingHint.QUEUE_SKIP


def test_the_guides_example_test_passes(example):
    # the guide's test checks something (its asserts are there), and running it raises none of them
    tree = ast.parse(block("example test"))
    [fn] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    assert fn.name == "test_max_pods_per_label"
    assert sum(isinstance(n, ast.Assert) for n in ast.walk(fn)) >= 3
    ns = run_block("example test", into={"MaxPodsPerLabel": example["MaxPodsPerLabel"]})
    assert ns["test_max_pods_per_label"]() is None
