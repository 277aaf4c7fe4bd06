"""The executor's write cache (koordlet's cacheable updates, ``--resource-force-update-seconds``): a value it
wrote (or found) is trusted for ``force_update_seconds`` on its clock, then the file is read again; a
value read this round (``current``) always wins; dry runs, failures and removals leave nothing cached.
And the agent's one read per file: what a plugin's ``collect`` read joins ``NodeState.cgroups``."""

from __future__ import annotations

from pathlib import Path

from koordfw import hookimpl
from koordfw.agent.executor import FORCE_UPDATE_SECONDS, Executor
from koordfw.core.caller import HookCaller
from koordfw.core.clock import VirtualClock
from koordfw.core.nodestate import FileWrite, NodeState
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict

from .test_agent_fake import ENABLED, make_agent

Q = "cpu/kubepods/besteffort/cpu.cfs_quota_us"


def _root(tmp_path: Path) -> Path:
    d = tmp_path / "cpu" / "kubepods" / "besteffort"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("-1\n")
    return tmp_path


def test_a_written_value_is_trusted_until_the_force_update_period(tmp_path):
    root, clock = _root(tmp_path), VirtualClock(10.0)
    ex = Executor({"cgroup": root}, cgroup_version=1, clock=clock)
    assert [r.outcome for r in ex.apply([FileWrite(Q, "5000")])] == ["written"]
    (root / Q).write_text("7000\n")  # changed behind the agent's back
    clock.advance_to(10.0 + FORCE_UPDATE_SECONDS - 1)
    r = ex.apply([FileWrite(Q, "5000")])[0]
    assert (r.outcome, r.old) == ("unchanged", "5000") and (root / Q).read_text().strip() == "7000"
    clock.advance_to(10.0 + FORCE_UPDATE_SECONDS)  # the period is over: read again, corrected
    r = ex.apply([FileWrite(Q, "5000")])[0]
    assert (r.outcome, r.old) == ("written", "7000") and (root / Q).read_text().strip() == "5000"


def test_a_value_read_this_round_wins_over_the_cache(tmp_path):
    root, clock = _root(tmp_path), VirtualClock(0.0)
    ex = Executor({"cgroup": root}, cgroup_version=1, clock=clock)
    ex.apply([FileWrite(Q, "5000")])
    (root / Q).write_text("7000\n")
    assert [r.outcome for r in ex.apply([FileWrite(Q, "5000")], current={Q: "7000"})] == ["written"]
    assert (root / Q).read_text().strip() == "5000"


def test_a_different_value_is_written_and_found_values_are_cached_too(tmp_path):
    root, clock = _root(tmp_path), VirtualClock(0.0)
    ex = Executor({"cgroup": root}, cgroup_version=1, clock=clock)
    assert ex.apply([FileWrite(Q, "-1")])[0].outcome == "unchanged"  # read: equal, now cached
    (root / Q).write_text("3000\n")
    assert ex.apply([FileWrite(Q, "-1")])[0].outcome == "unchanged"  # trusted
    assert ex.apply([FileWrite(Q, "4000")])[0].outcome == "written"  # another value: always applied


def test_dry_run_failures_and_removals_cache_nothing(tmp_path):
    root, clock = _root(tmp_path), VirtualClock(0.0)
    dry = Executor({"cgroup": root}, cgroup_version=1, clock=clock, dry_run=True)
    dry.apply([FileWrite(Q, "5000")])
    assert dry.apply([FileWrite(Q, "5000")])[0].outcome == "dry_run"
    ex = Executor({"cgroup": root}, cgroup_version=1, clock=clock)
    grp = root / "cpu" / "kubepods" / "besteffort" / "pod1"
    grp.mkdir()
    (grp / "cpu.shares").write_text("2\n")
    path = "cpu/kubepods/besteffort/pod1/cpu.shares"
    assert ex.apply([FileWrite(path, "512")])[0].outcome == "written"
    (grp / "cpu.shares").unlink()
    grp.rmdir()
    assert ex.apply([FileWrite.remove_dir("cpu/kubepods/besteffort/pod1")])[0].outcome == "vanished"
    assert ex.apply([FileWrite(path, "512")])[0].outcome == "vanished"  # not "unchanged" from the cache
    assert ex.apply([FileWrite(path, "512")])[0].outcome == "vanished"


def test_without_a_clock_the_cache_ages_on_the_monotonic_clock(tmp_path):
    root = _root(tmp_path)
    ex = Executor({"cgroup": root}, cgroup_version=1, force_update_seconds=0.0)
    ex.apply([FileWrite(Q, "5000")])
    (root / Q).write_text("7000\n")
    assert ex.apply([FileWrite(Q, "5000")])[0].outcome == "written"  # a period of 0 trusts nothing


class Reader:
    """A plugin whose collect reports a file it read, which its plan then writes."""

    @hookimpl
    def collect(self, node_state):
        be = node_state.qos_dir("besteffort")
        shares = "cpu.cfs_quota_us" if node_state.cgroup_version == 1 else "cpu.max"
        return {NodeState.COLLECTED_CGROUPS: {node_state.cgroup_file("cpu", be, "cpu.burst.test"): "7",
                                              node_state.cgroup_file("cpu", be, shares): "999"}, "reader.x": 1}


async def test_collected_reads_join_the_node_state(fake_node):
    agent = make_agent(fake_node)
    reg = Registry(profile_from_dict({"pluginConfig": ENABLED})).load(only={"be_suppress"}, extra={"reader": Reader})
    agent.registry = reg
    reg.bind(agent.handle_for)
    agent.caller = HookCaller(reg, agent.handle_for)
    await agent.run_once()
    ns = agent.node_state
    be = ns.qos_dir("besteffort")
    assert ns.cgroups[ns.cgroup_file("cpu", be, "cpu.burst.test")] == "7"
    quota = ns.cgroup_file("cpu", be, "cpu.cfs_quota_us" if ns.cgroup_version == 1 else "cpu.max")
    assert ns.cgroups[quota] != "999"  # the agent's own read wins
    assert ns.metrics["reader.x"] == 1 and NodeState.COLLECTED_CGROUPS not in ns.metrics


def test_expired_entries_are_dropped(tmp_path):
    """Files of pods the kubelet removed (never through the executor) do not stay in the cache."""
    root, clock = _root(tmp_path), VirtualClock(0.0)
    ex = Executor({"cgroup": root}, cgroup_version=1, clock=clock)
    ex.apply([FileWrite(Q, "5000")])
    assert Q in ex._cache
    clock.advance_to(FORCE_UPDATE_SECONDS)
    ex.apply([])
    assert ex._cache == {}
