"""The agent takes the engines' injectable clock: with a VirtualClock its loop runs a round each time the
clock passes the next one (no real sleeping), and ``handle.now()``, the rounds and the CPU rates all read
that clock."""

from __future__ import annotations

import functools
import time

import anyio
import pytest

from koordfw import hookimpl
from koordfw.agent.cgroups import CgroupLayout
from koordfw.agent.executor import Executor
from koordfw.agent.loop import Agent
from koordfw.core.clock import RealClock, VirtualClock
from koordfw.core.plugins import Registry
from koordfw.core.profile import profile_from_dict

START = 1000.0
INTERVAL = 5.0


class Probe:
    """A node plugin recording ``handle.now()`` in each round's collect; ``cost`` virtual seconds pass
    inside the round (a slow plugin)."""

    def __init__(self, clock: VirtualClock | None = None, cost: float = 0.0) -> None:
        self.clock, self.cost = clock, cost
        self.seen: list[float] = []
        self.node_cpu: list[int | None] = []

    @hookimpl
    def collect(self, node_state, handle):
        self.seen.append(handle.now())
        self.node_cpu.append(node_state.usage.get("cpu"))
        if self.cost:
            self.clock.advance(self.cost)
        return {}


def make_agent(node, probe: Probe, clock=None) -> Agent:
    reg = Registry(profile_from_dict({})).load(only=set(), extra={"probe": probe})
    return Agent(reg, CgroupLayout(node.root, 1), Executor({"cgroup": node.root}), interval=INTERVAL,
                 node_name="n1", proc_root=str(node.proc), sys_root=str(node.sys), clock=clock)


async def test_loop_rounds_and_handle_now_follow_the_virtual_clock(fake_node):
    clock = VirtualClock(START)
    probe = Probe()
    agent = make_agent(fake_node, probe, clock)
    fake_node.set_proc_stat(0)
    t0 = time.monotonic()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(agent.run, handle_signals=False))
            await anyio.wait_all_tasks_blocked()
            assert agent.rounds == 1 and probe.seen == [START]
            assert agent.handle_for("probe").now() == clock.now() == START
            clock.advance(INTERVAL - 0.25)  # not yet due: no round
            await anyio.wait_all_tasks_blocked()
            assert agent.rounds == 1
            for k in range(1, 11):
                fake_node.set_proc_stat(int(k * INTERVAL * 0.5e9))  # half a core busy, in virtual seconds
                clock.advance_to(START + k * INTERVAL)
                await anyio.wait_all_tasks_blocked()
                assert agent.rounds == k + 1
                assert agent.handle_for("probe").now() == clock.now() == START + k * INTERVAL
            tg.cancel_scope.cancel()
    assert probe.seen == [START + k * INTERVAL for k in range(11)]
    # the rates divide by the virtual seconds between rounds (the first round has no previous sample)
    assert probe.node_cpu[0] is None and all(abs(c - 500) <= 1 for c in probe.node_cpu[1:])
    assert time.monotonic() - t0 < 5, "50 virtual seconds must not be slept"


@pytest.mark.parametrize("cost, expected", [(2.0, [START, START + 5, START + 10]),  # the wait is shortened
                                            (6.0, [START, START + 6, START + 12])])  # no wait at all
async def test_a_slow_round_shortens_the_wait_on_the_clock(fake_node, cost, expected):
    clock = VirtualClock(START)
    probe = Probe(clock, cost)
    agent = make_agent(fake_node, probe, clock)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(agent.run, handle_signals=False))
            while len(probe.seen) < len(expected):
                await anyio.sleep(0)
                due = clock.next_deadline()  # the loop's wait for its next round, if it waits
                if due is not None:
                    clock.advance_to(due)
            tg.cancel_scope.cancel()
    assert probe.seen[:len(expected)] == expected


async def test_once_primes_the_rates_on_the_clock(fake_node):
    clock = VirtualClock(START)
    probe = Probe()
    agent = make_agent(fake_node, probe, clock)
    fake_node.set_proc_stat(0)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(agent.run, once=True, handle_signals=False))
            await anyio.wait_all_tasks_blocked()
            assert agent.rounds == 0  # waiting for the clock between the priming sample and the round
            fake_node.set_proc_stat(int(0.25e9))
            clock.advance(0.5)
    assert agent.rounds == 1 and probe.seen == [START + 0.5] and abs(probe.node_cpu[0] - 500) <= 1


def test_default_clock_is_the_engines_real_clock(fake_node):
    agent = make_agent(fake_node, Probe())
    assert isinstance(agent.clock, RealClock)
    before = time.time()
    assert before <= agent.handle_for("probe").now() <= time.time()
