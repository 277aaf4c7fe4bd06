"""The qos_plan contract's evictions: koordfw.Eviction next to FileWrites, collected per round in plan
order and handed to the agent's evictor (by default a log line), and listed by ``agent plan``."""

from __future__ import annotations

import json

import pytest

from koordfw import Eviction, FileWrite, hookimpl
from koordfw.agent.loop import log_evictions
from koordfw.commands.agent import plan_node, plan_writes
from koordfw.core.caller import HookCaller
from koordfw.core.node_runtime import split_plan
from koordfw.core.nodestate import NodeState
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.metrics import REGISTRY

from .test_agent_fake import make_agent


class Evicts:
    @hookimpl
    def qos_plan(self, node_state):
        return [Eviction("u2", "batch/b2", reason="second"), FileWrite("cpu/kubepods/besteffort/cpu.cfs_quota_us", "5000"),
                Eviction("u1", "batch/b1", reason="first", plugin="someone-else")]


class AlsoEvicts:
    @hookimpl
    def qos_plan(self, node_state):
        return [Eviction("u3", "batch/b3", reason="third")]


def registry() -> Registry:
    return Registry(profile_from_dict({"pluginConfig": {"be_suppress": {"enable": False}}})).load(
        only={"be_suppress"}, extra={"evicts": Evicts, "also": AlsoEvicts})


@pytest.mark.parametrize("pod", ["b1", "/b1", "ns/", "a/b/c", ""])
def test_eviction_pod_is_namespace_slash_name(pod):
    with pytest.raises(ValueError, match="namespace/name"):
        Eviction("u", pod)


def test_split_plan_stamps_and_refuses_other_items():
    w, e = split_plan([Eviction("u", "ns/p", "r"), FileWrite("cpu/x", "1")], "me")
    assert [x.plugin for x in w] == ["me"] and e == [Eviction("u", "ns/p", "r", plugin="me")]
    assert e[0].namespace == "ns" and e[0].name == "p"
    assert e[0].to_dict() == {"pod": "ns/p", "uid": "u", "reason": "r", "plugin": "me"}
    with pytest.raises(TypeError, match="FileWrite or an Eviction"):
        split_plan([Eviction("u", "ns/p"), "nope"], "me")
    assert split_plan(None, "me") == ([], [])


async def test_agent_hands_the_rounds_evictions_to_its_evictor_in_plan_order(fake_node):
    agent = make_agent(fake_node)
    reg = registry()
    agent.registry = reg
    reg.bind(agent.handle_for)
    agent.caller = HookCaller(reg, agent.handle_for)
    seen = []

    async def evictor(evictions, ns):
        seen.append(([e.pod for e in evictions], ns.name))

    agent.evictor = evictor
    await agent.run_once()
    assert seen == [(["batch/b2", "batch/b1", "batch/b3"], "n1")]
    assert [(e.plugin, e.reason) for e in agent.last_evictions] == [("evicts", "second"), ("evicts", "first"),
                                                                   ("also", "third")]
    # the write of the same plan went through the executor
    assert fake_node.read("cpu", fake_node.qos("besteffort"), "cpu.cfs_quota_us") == "5000"


async def test_default_evictor_logs_and_counts(fake_node):
    agent = make_agent(fake_node)
    assert agent.evictor is log_evictions
    before = REGISTRY.get_sample_value("koordfw_agent_evictions_total", {"plugin": "p", "outcome": "logged"}) or 0
    await log_evictions([Eviction("u", "ns/a", "why", plugin="p")], NodeState(name="n1"))
    assert REGISTRY.get_sample_value("koordfw_agent_evictions_total", {"plugin": "p", "outcome": "logged"}) == before + 1


async def test_a_failing_evictor_does_not_fail_the_round(fake_node):
    agent = make_agent(fake_node)
    reg = registry()
    agent.registry = reg
    reg.bind(agent.handle_for)
    agent.caller = HookCaller(reg, agent.handle_for)

    async def evictor(evictions, ns):
        raise RuntimeError("api down")

    agent.evictor = evictor
    await agent.run_once()
    assert len(agent.last_evictions) == 3


def test_plan_lists_evictions_after_the_writes():
    ns = NodeState(name="n1", cgroups={"cpu/kubepods/besteffort/cpu.cfs_quota_us": "-1"})
    out = plan_node(ns, registry())
    assert out["writes"] == [{"path": "cpu/kubepods/besteffort/cpu.cfs_quota_us", "value": "5000",
                              "plugin": "evicts", "fs": "cgroup"}]
    assert out["evictions"] == [
        {"pod": "batch/b2", "uid": "u2", "reason": "second", "plugin": "evicts"},
        {"pod": "batch/b1", "uid": "u1", "reason": "first", "plugin": "evicts"},
        {"pod": "batch/b3", "uid": "u3", "reason": "third", "plugin": "also"}]
    assert plan_writes(ns, registry()) == out["writes"]
    json.dumps(out)


def test_agent_plan_command_prints_evictions(tmp_path, capsys):
    from koordfw.cli import main

    state = tmp_path / "s.json"
    state.write_text(json.dumps({"node": {"name": "n1"}, "pods": []}))
    assert main(["agent", "plan", "--state", str(state)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"writes", "evictions"} and out["evictions"] == []
