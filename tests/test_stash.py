"""``koordfw.Stash`` / ``StashKey``: a plugin's engine-lifetime state on its handle. Semantics (pytest's
Stash), one stash per plugin per engine: two engines in one process, even sharing a plugin object, never
share one, and a plugin's stash is not another's; eviction's and be_suppress's agent state lives there."""

from __future__ import annotations

import anyio
import pytest
from koordfw_be_suppress import FEEDBACK
from koordfw_eviction import LIVE

from koordfw import AdmissionHandle, AgentHandle, Stash, StashKey, build_registry, hookimpl
from koordfw.agent.cgroups import CgroupLayout, detect_version
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.core.admission import Admission, StaticObjects
from koordfw.core.clock import VirtualClock
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.embed import EmbeddedEngine
from koordfw.testing import ClusterBuilder
from koordfw.testing.cgroups import FakeNode

COUNT = StashKey[list[str]]()
NAME = StashKey[str]()


def test_set_get_contains_delete_len():
    s = Stash()
    assert len(s) == 0 and COUNT not in s
    assert s.get(COUNT, None) is None and s.get(COUNT, "d") == "d"
    with pytest.raises(KeyError):
        s[COUNT]
    s[COUNT] = ["a"]
    assert COUNT in s and s[COUNT] == ["a"] and s.get(COUNT, None) == ["a"] and len(s) == 1
    s[COUNT] = ["b"]  # replaced
    assert s[COUNT] == ["b"] and len(s) == 1
    del s[COUNT]
    assert COUNT not in s and len(s) == 0
    with pytest.raises(KeyError):
        del s[COUNT]


def test_setdefault_stores_the_default_once():
    s = Stash()
    first = s.setdefault(COUNT, [])
    first.append("x")
    assert s.setdefault(COUNT, ["ignored"]) is first and s[COUNT] == ["x"]


def test_keys_are_distinct_objects():
    a, b = StashKey[str](), StashKey[str]()
    s = Stash()
    s[a] = "a"
    assert b not in s and s.get(b, None) is None
    s[b] = "b"
    assert (s[a], s[b]) == ("a", "b") and len(s) == 2
    assert StashKey[int]() != StashKey[int]()


class Probe:
    """Counts its pre_filter calls in its handle's stash; one object shared by both engines."""

    @hookimpl
    def pre_filter(self, pod, handle):
        handle.stash.setdefault(COUNT, []).append(pod.name)
        handle.stash[NAME] = handle.plugin_name
        return None


class Other:
    @hookimpl
    def pre_filter(self, pod, handle):
        assert COUNT not in handle.stash  # not the probe's stash
        return None


def _engine(probe: Probe, *pods: str) -> EmbeddedEngine:
    b = ClusterBuilder().node("n1", cpu="8")
    for p in pods:
        b = b.pod(p, cpu="1")
    reg = build_registry(plugins={"probe": probe, "other": Other()}, autoload=False)
    return EmbeddedEngine(reg, b.build().to_cluster(), start_time=0.0)


def test_two_engines_one_plugin_object_two_stashes():
    probe = Probe()

    async def main() -> None:
        e1, e2 = _engine(probe, "a", "b"), _engine(probe, "c")
        await e1.run()
        await e2.run()
        h1, h2 = e1.scheduler.handle_for("probe"), e2.scheduler.handle_for("probe")
        assert isinstance(h1.stash, Stash) and h1.stash is not h2.stash
        assert sorted(h1.stash[COUNT]) == ["a", "b"] and h2.stash[COUNT] == ["c"]
        assert h1.stash[NAME] == "probe"
        # the same plugin's handle, asked again, is the same stash; another plugin's is its own
        assert e1.scheduler.handle_for("probe").stash is h1.stash
        assert COUNT not in e1.scheduler.handle_for("other").stash

    anyio.run(main)


def test_admission_handle_has_one_stash_per_plugin():
    reg = build_registry(plugins={"probe": Probe()}, autoload=False)
    adm = Admission(reg, StaticObjects([]))
    h = adm._handle_for("probe")
    assert isinstance(h, AdmissionHandle) and isinstance(h.stash, Stash)
    assert adm._handle_for("probe").stash is h.stash
    assert Admission(reg, StaticObjects([]))._handle_for("probe").stash is not h.stash


def _agent(tmp_path, name: str, plugin: str, config: dict) -> tuple[Agent, FakeNode]:
    node = FakeNode(tmp_path / name, ncpu=8)
    node.add_pod("be-1", "besteffort")
    reg = Registry(profile_from_dict({"pluginConfig": config})).load(only={plugin})
    layout = CgroupLayout(node.root, detect_version(node.root), node.driver, node.kubepods)
    return Agent(reg, layout, Executor({"cgroup": node.root}), interval=1.0, node_name=name,
                 proc_root=str(node.proc), sys_root=str(node.sys), clock=VirtualClock(100.0)), node


async def test_two_agents_keep_their_own_eviction_history(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, _ = _agent(tmp_path, "a", "eviction", {})
    b, _ = _agent(tmp_path, "b", "eviction", {})
    await a.run_once()
    ha, hb = a.handle_for("eviction"), b.handle_for("eviction")
    assert isinstance(ha, AgentHandle) and LIVE in ha.stash and LIVE not in hb.stash
    await b.run_once()
    assert hb.stash[LIVE] is not ha.stash[LIVE]


async def test_two_agents_keep_their_own_be_suppress_feedback(tmp_path):
    psi = tmp_path / "pressure-cpu"
    psi.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    cfg = {"be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota",
                           "lsPressureFeedback": {"enable": True, "psiPath": str(psi)}}}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, _ = _agent(tmp_path, "a", "be_suppress", cfg)
    b, _ = _agent(tmp_path, "b", "be_suppress", cfg)
    await a.run_once()
    ha, hb = a.handle_for("be_suppress"), b.handle_for("be_suppress")
    assert FEEDBACK in ha.stash and FEEDBACK not in hb.stash
    await b.run_once()
    assert hb.stash[FEEDBACK] is not ha.stash[FEEDBACK]
    await a.shutdown()  # forgets a's feedback, not b's
    assert FEEDBACK not in ha.stash and FEEDBACK in hb.stash
