"""The node agent on a cluster (fake API server, fake cgroup tree, virtual clock) with the prediction plugin:
the NodeMetric it publishes carries koordlet's ``prodReclaimableMetric`` and ``prodPeakMetric`` next to the
usage it always reports, and what it publishes is what the manager's mid_resource plugin reads."""

from __future__ import annotations

import functools

import anyio
from koordfw_mid_resource import parse_mid_metric
from test_agent_on_cluster_reports import SLO, Node, step, wait_until

from koordfw.core.clock import VirtualClock
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.engines.kube.node import NodeOnCluster

START = 1_780_000_000.0


async def test_the_published_node_metric_carries_the_prediction(api, client, tmp_path):
    clock = VirtualClock(START)
    n = Node(tmp_path, api)
    api.create({"apiVersion": SLO, "kind": "NodeMetric", "metadata": {"name": "n1"},
                "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 30}}})
    reg = Registry(profile_from_dict({"pluginConfig": {"prediction": {"checkpointFilepath": str(tmp_path / "ck")}}}))
    agent = n.agent(reg.load(only={"prediction"}), clock)
    on = NodeOnCluster(agent, client, topology_interval=None, device_interval=None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(on.run, handle_signals=False))
        await wait_until(lambda: agent.rounds >= 1 and on.reporter.policy.report_interval_seconds == 30, "the spec")
        ev = on.metric_event
        await step(n, agent, clock, 30)
        with anyio.fail_after(10):
            await ev.wait()
        st = api.get("nodemetrics", "n1")["status"]
        assert st["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "3"
        prod = st["prodReclaimableMetric"]["resource"]["resources"]
        assert set(prod) == {"cpu", "memory"}
        assert set(st["prodPeakMetric"]["resource"]["resources"]) == {"cpu", "memory"}
        # the manager's reader takes it as Koordinator's midresource plugin does
        m = parse_mid_metric(api.get("nodemetrics", "n1"))
        assert m.prod_reclaimable is not None and set(m.prod_reclaimable) == {"cpu", "memory"}
        tg.cancel_scope.cancel()
