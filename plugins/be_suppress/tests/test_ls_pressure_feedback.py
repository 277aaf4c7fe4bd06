"""be_suppress ``lsPressureFeedback``: the agent on a fake cgroup tree with a fake PSI file and LS cpu.stat.

Node: 8 CPUs, one LS pod using 1 core, one BE pod using 2, node busy 3 cores (no system usage); the
threshold 65 % makes Koordinator's budget 8000 × 65 % − 1000 = 4200m, i.e. a besteffort quota of 420000 µs.
"""

from __future__ import annotations

import pytest
import structlog
from koordfw_be_suppress import Args, plan
from koordfw_be_suppress.feedback import FeedbackState, LSPressureFeedback, Signal, parse_psi_some_avg10

from koordfw.agent.cgroups import CgroupLayout, detect_version
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.core.clock import VirtualClock
from koordfw.core.errors import ConfigError
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict
from koordfw.testing.cgroups import FakeNode

KOORD_QUOTA = 420000


def psi(avg10: float) -> str:
    return (f"some avg10={avg10:.2f} avg60=1.00 avg300=0.50 total=123456\n"
            f"full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


class Rig:
    def __init__(self, tmp_path, version: int = 1, **feedback) -> None:
        self.node = FakeNode(tmp_path, ncpu=8, version=version)
        self.psi = tmp_path / "pressure-cpu"
        self.psi.write_text(psi(0.0))
        self.ls = self.node.add_pod("ls-1", "burstable")
        self.be = self.node.add_pod("be-1", "besteffort")
        cfg = {"be_suppress": {"enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 65,
                               "lsPressureFeedback": {"enable": True, "psiPath": str(self.psi), **feedback}}}
        reg = Registry(profile_from_dict({"pluginConfig": cfg})).load(only={"be_suppress"})
        n = self.node
        self.agent = Agent(reg, CgroupLayout(n.root, detect_version(n.root), n.driver, n.kubepods),
                           Executor({"cgroup": n.root}), interval=1.0, node_name="n1", proc_root=str(n.proc),
                           sys_root=str(n.sys), clock=VirtualClock(100.0))
        self.t = 0
        self.periods = self.throttled = 0

    def set_ls_stat(self, periods: int, throttled: int) -> None:
        self.periods += periods
        self.throttled += throttled
        text = f"nr_periods {self.periods}\nnr_throttled {self.throttled}\nthrottled_time {self.throttled * 1000}\n"
        if self.node.version == 2:
            text = f"usage_usec {self.t * 10**6}\n" + text.replace("throttled_time", "throttled_usec")
        (self.node.ctl("cpu", self.ls) / "cpu.stat").write_text(text)

    async def round(self) -> int:
        """Advance one second of usage (node 3 cores, LS 1, BE 2), run a round, return the BE quota."""
        self.t += 1
        self.agent.clock.advance(1.0)
        self.node.set_proc_stat(3 * 10**9 * self.t)
        if self.node.version == 1 or not (self.node.ctl("cpu", self.ls) / "cpu.stat").read_text().count("nr_"):
            self.node.set_usage(self.ls, 10**9 * self.t)
        self.node.set_usage(self.be, 2 * 10**9 * self.t)
        await self.agent.run_once()
        raw = self.node.read("cpu", self.node.qos("besteffort"), "cpu.cfs_quota_us" if self.node.version == 1
                             else "cpu.max").split()[0]
        return -1 if raw == "max" else int(raw)


async def test_pressure_shrinks_the_budget_stepwise_to_the_floor(tmp_path):
    rig = Rig(tmp_path)
    await rig.round()  # first samples: no usage rate yet, Koordinator skips the round
    assert await rig.round() == KOORD_QUOTA  # calm: Koordinator's budget
    rig.psi.write_text(psi(40.0))
    quotas = [await rig.round() for _ in range(6)]
    # ×0.5 each round: 2100m, 1050m, 525m, then the floor of 5 % × 8000m = 400m
    assert quotas == [210000, 105000, 52500, 40000, 40000, 40000]
    m = rig.agent.node_state.metrics["be_suppress"]
    assert m["lsPressurePercent"] == 40.0 and m["pressureSource"] == "node"
    assert m["koordinatorBudgetMilli"] == 4200 and m["budgetMilli"] == 400


async def test_calm_gives_cpu_back_additively_up_to_koordinator_and_not_beyond(tmp_path):
    rig = Rig(tmp_path, calmSeconds=2, increasePercent=10)
    await rig.round()
    rig.psi.write_text(psi(50.0))
    for _ in range(5):
        await rig.round()
    assert await rig.round() == 40000  # at the floor
    rig.psi.write_text(psi(1.0))
    # the last high round was 1 s ago: hold for calmSeconds, then + 10 % × 8000m = 800m a round
    got = [await rig.round() for _ in range(8)]
    assert got == [40000, 120000, 200000, 280000, 360000, KOORD_QUOTA, KOORD_QUOTA, KOORD_QUOTA]
    assert rig.agent.node_state.metrics["be_suppress"]["budgetMilli"] == 4200


async def test_dead_band_holds_the_budget(tmp_path):
    rig = Rig(tmp_path)
    await rig.round()
    rig.psi.write_text(psi(20.0))
    assert await rig.round() == 210000
    rig.psi.write_text(psi(7.0))  # between target − hysteresis (5) and target (10): neither high nor calm
    assert [await rig.round() for _ in range(5)] == [210000] * 5


async def test_ls_throttling_tightens_too(tmp_path):
    rig = Rig(tmp_path, calmSeconds=0)
    rig.set_ls_stat(10, 0)
    await rig.round()
    rig.set_ls_stat(10, 0)
    assert await rig.round() == KOORD_QUOTA  # PSI calm, LS not throttled
    rig.set_ls_stat(10, 5)  # 50 % of LS periods throttled
    assert await rig.round() == 210000
    m = rig.agent.node_state.metrics["be_suppress"]
    assert m["lsThrottledPercent"] == 50.0 and m["lsThrottledSecondsPerSecond"] == pytest.approx(5e-6)
    rig.set_ls_stat(10, 0)
    assert await rig.round() == 210000 + 40000  # calm again: + 5 % of 8000m


async def test_malformed_psi_logged_once_and_koordinator_budget(tmp_path):
    rig = Rig(tmp_path)
    await rig.round()
    rig.psi.write_text(psi(40.0))
    assert await rig.round() == 210000
    rig.psi.write_text("some avg10=lots avg60=1 total=2\n")
    with structlog.testing.capture_logs() as logs:
        got = [await rig.round() for _ in range(4)]
        budgets = rig.agent.node_state.metrics["be_suppress"]["budgetMilli"]
    # Koordinator's budget at once; the quota climbs to it at Koordinator's own pace (beMaxIncreaseCPUPercent:
    # + 10 % of the node's CPU per round)
    assert budgets == 4200
    assert got == [290000, 370000, KOORD_QUOTA, KOORD_QUOTA]
    warned = [e for e in logs if "PSI" in e["event"]]
    assert len(warned) == 1 and warned[0]["path"] == str(rig.psi)
    assert rig.agent.node_state.metrics["be_suppress"]["lsPressurePercent"] is None
    rig.psi.unlink()  # unreadable: the same, logged once
    with structlog.testing.capture_logs() as logs:
        assert [await rig.round() for _ in range(2)] == [KOORD_QUOTA] * 2
    assert len([e for e in logs if "pressure" in e["event"]]) == 1


async def test_v2_ls_cgroup_pressure_preferred_over_the_node(tmp_path):
    rig = Rig(tmp_path, version=2)
    (rig.node.ctl("cpu", rig.ls) / "cpu.pressure").write_text(psi(0.0))
    await rig.round()
    assert await rig.round() == KOORD_QUOTA
    rig.psi.write_text(psi(0.0))
    (rig.node.ctl("cpu", rig.ls) / "cpu.pressure").write_text(psi(30.0))
    assert await rig.round() == 210000
    assert rig.agent.node_state.metrics["be_suppress"]["pressureSource"] == "cgroup"


async def test_feedback_off_is_koordinator_and_plan_without_collect(tmp_path):
    rig = Rig(tmp_path, enable=False)
    rig.psi.write_text(psi(90.0))
    await rig.round()
    assert [await rig.round() for _ in range(3)] == [KOORD_QUOTA] * 3
    assert "be_suppress" not in rig.agent.node_state.metrics
    # the pure plan (agent plan) applies a budget only when one is given, and only below Koordinator's
    ns = rig.agent.node_state
    args = Args(enable=True, cpu_suppress_threshold_percent=65, cpu_suppress_policy="cfsQuota")
    quota = [w.value for w in plan(ns, args, budget_milli=10_000) if w.path.endswith("cfs_quota_us")]
    assert quota == []  # 4200m already applied: nothing to change


def test_step_never_above_koordinator_even_below_the_floor():
    cfg = LSPressureFeedback(enable=True)
    st = FeedbackState()
    assert st.step(cfg, 100, 8000, Signal(pressure=90.0, throttled=None), 0.0) == 100  # floor 400 > 100
    assert st.step(cfg, None, 8000, Signal(pressure=90.0, throttled=None), 1.0) is None


@pytest.mark.parametrize("text", ["", "full avg10=1.0", "some avg60=1.0", "some avg10=nan", "some avg10=101",
                                  "some avg10=-1", "some avg10="])
def test_parse_psi_refuses(text):
    with pytest.raises(ValueError):
        parse_psi_some_avg10(text)


@pytest.mark.parametrize("bad, field", [({"decreaseFactor": 1.0}, "decreaseFactor"),
                                        ({"floorPercent": 200}, "floorPercent"),
                                        ({"calmSeconds": -1}, "calmSeconds"),
                                        ({"targetPressurePercent": True}, "targetPressurePercent")])
def test_bad_args_name_the_field(bad, field):
    with pytest.raises((ConfigError, ValueError), match=field):
        Registry(profile_from_dict({"pluginConfig": {"be_suppress": {"lsPressureFeedback": bad}}})).load(
            only={"be_suppress"})


async def test_v1_ls_sched_delay_replaces_the_node_psi(tmp_path):
    proc = tmp_path / "tasks-proc"
    rig = Rig(tmp_path, lsSchedDelay=True, procRoot=str(proc))
    rig.psi.write_text(psi(90.0))  # the node PSI (BE's own waiting too) is ignored while LS tasks are followed
    (rig.node.ctl("cpu", rig.ls) / "tasks").write_text("101\n")
    (rig.node.ctl("cpu", rig.ls) / "c1" / "tasks").write_text("102\n103\n")
    delay = {101: 0, 102: 0, 103: 0}
    gone: set[int] = set()

    def wait(ns_per_task: int) -> None:
        for tid in [t for t in delay if t not in gone]:
            delay[tid] += ns_per_task
            (proc / str(tid)).mkdir(parents=True, exist_ok=True)
            (proc / str(tid) / "schedstat").write_text(f"5000000 {delay[tid]} 40\n")

    wait(0)
    await rig.round()  # first sample of the tasks: no rate yet, the node PSI decides (high, but no usage yet)
    wait(10_000_000)  # 3 × 10 ms waited in 1 s: 3 %
    assert await rig.round() == KOORD_QUOTA
    m = rig.agent.node_state.metrics["be_suppress"]
    assert m["pressureSource"] == "schedstat" and m["lsPressurePercent"] == pytest.approx(3.0)
    wait(100_000_000)  # 30 %: high
    assert await rig.round() == 210000
    (proc / "103" / "schedstat").unlink()  # a task gone: the others still count
    gone.add(103)
    wait(400_000_000)  # 2 × 400 ms: 80 %
    assert await rig.round() == 105000
    assert rig.agent.node_state.metrics["be_suppress"]["lsPressurePercent"] == pytest.approx(80.0)


def test_cpu_stat_path_is_the_dirs_cpu_stat():
    from koordfw_be_suppress.feedback import _cpu_stat_path

    from koordfw.core.nodestate import NodeState

    for version in (1, 2):
        for d in ("kubepods/burstable/poda", "/kubepods.slice/x.slice/", "kubepods/podb"):
            want = f"/sys/fs/cgroup/{NodeState(cgroup_version=version).cgroup_file('cpu', d, 'cpu.stat')}"
            assert _cpu_stat_path("/sys/fs/cgroup", version, d) == want
