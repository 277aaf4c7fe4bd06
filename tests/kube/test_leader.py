"""Leader election against the fake API server: bounded renewals, no two leaders, skew-proof expiry."""

from __future__ import annotations

import time

import anyio
import pytest
from kube_testkit import wait_for

from koordfw.engines.kube.client import KubeClient
from koordfw.engines.kube.leader import LeaderElector, _micro
from koordfw.testing.fake_apiserver import Fault

NS, NAME = "kube-system", "sched"
# short timings keep the suite fast; the margin lease - renew (1 s) is what keeps leaders apart
KW = dict(namespace=NS, name=NAME, lease_duration=2.0, renew_deadline=1.0, retry_period=0.25)


@pytest.fixture
async def clients(api):
    async with KubeClient(api.url, qps=0) as ca, KubeClient(api.url, qps=0) as cb:
        yield ca, cb


def test_timings_must_nest():
    for bad in [dict(lease_duration=2, renew_deadline=2, retry_period=1),
                dict(lease_duration=3, renew_deadline=1, retry_period=1),
                dict(lease_duration=3, renew_deadline=2, retry_period=0)]:
        with pytest.raises(ValueError, match="lease_duration > renew_deadline > retry_period"):
            LeaderElector(None, namespace=NS, name=NAME, identity="a", **bad)  # type: ignore[arg-type]


async def test_acquire_creates_then_renews_and_release_hands_back(api, clients):
    ca, _ = clients
    a = LeaderElector(ca, identity="A", **KW)
    await a.acquire()
    assert a.is_leader
    lease = api.get("leases", NAME, NS)
    assert lease["spec"]["holderIdentity"] == "A" and lease["spec"]["leaseDurationSeconds"] == 2
    rv0 = lease["metadata"]["resourceVersion"]
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.hold)
        await wait_for(lambda: int(api.get("leases", NAME, NS)["metadata"]["resourceVersion"]) > int(rv0) + 2, 10.0)
        assert a.is_leader and not a.lost.is_set()
        tg.cancel_scope.cancel()
    await a.release()
    assert not a.is_leader
    spec = api.get("leases", NAME, NS)["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1


async def test_hung_renewal_ends_leadership_before_another_takes_the_lease(api, clients):
    """The reviewer's repro: A's renewal GET hangs for a minute. A must stop leading when its renew
    deadline passes (not when the request times out), and B may lead only after that."""
    ca, cb = clients
    a, b = LeaderElector(ca, identity="A", **KW), LeaderElector(cb, identity="B", **KW)
    await a.acquire()
    both: list[float] = []
    t_lost: list[float] = []
    t_b: list[float] = []

    async def hold_a() -> None:
        await a.hold()
        t_lost.append(time.monotonic())

    async def watch() -> None:
        while True:
            if a.is_leader and b.is_leader:
                both.append(time.monotonic())
            await anyio.sleep(0.005)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        tg.start_soon(hold_a)
        hang = Fault(status=0, delay=60, method="GET", path="leases", count=1)
        api.faults.append(hang)
        t0 = time.monotonic()
        await wait_for(lambda: hang.count == 0, 10.0)  # A's renewal is the one hanging
        with anyio.fail_after(8):
            await b.acquire()
        t_b.append(time.monotonic())
        await anyio.sleep(0.5)
        assert b.is_leader and not a.is_leader
        tg.cancel_scope.cancel()
    assert a.lost.is_set() and t_lost, "A never noticed it lost the lease"
    assert t_lost[0] - t0 <= KW["renew_deadline"] + 0.3, "A kept leading past its renew deadline"
    assert t_lost[0] < t_b[0]
    assert not both, "two leaders at once"
    assert api.get("leases", NAME, NS)["spec"]["holderIdentity"] == "B"


async def test_renewal_failures_past_the_deadline_end_leadership(api, clients):
    ca, _ = clients
    a = LeaderElector(ca, identity="A", **KW)
    await a.acquire()
    api.fail(500, method="PUT", path="leases", seconds=5)
    t0 = time.monotonic()
    with anyio.fail_after(3):
        await a.hold()
    assert time.monotonic() - t0 <= KW["renew_deadline"] + 0.1
    assert not a.is_leader and a.lost.is_set()
    await a.release()  # lost: must not touch the lease
    assert api.get("leases", NAME, NS)["spec"]["holderIdentity"] == "A"


async def test_is_leader_turns_false_at_the_deadline_without_hold_running(api, clients):
    ca, _ = clients
    a = LeaderElector(ca, identity="A", **KW)
    await a.acquire()
    assert a.is_leader
    await anyio.sleep(KW["renew_deadline"] + 0.05)
    assert not a.is_leader


async def test_skewed_renew_time_does_not_let_a_follower_grab_a_live_lease(api, clients):
    """A's wall clock is an hour behind: its renewTime looks long expired to B's clock, but B sees
    the record change every renewal and so never takes it."""
    ca, cb = clients
    a = LeaderElector(ca, identity="A", wall=lambda: time.time() - 3600, **KW)
    b = LeaderElector(cb, identity="B", **KW)
    await a.acquire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.hold)
        with anyio.move_on_after(2 * KW["lease_duration"]) as waited:
            await b.acquire()
        assert waited.cancelled_caught, "B took a lease A was renewing"
        assert a.is_leader and not b.is_leader
        tg.cancel_scope.cancel()
    assert api.get("leases", NAME, NS)["spec"]["holderIdentity"] == "A"


async def test_skewed_renew_time_does_not_make_a_follower_wait_on_a_dead_lease(api, clients):
    """A dead holder's renewTime lies an hour in the future (its clock ran ahead): B takes the lease
    one leaseDuration after it first saw the record unchanged, not an hour later."""
    _, cb = clients
    future = _micro(time.time() + 3600)
    api.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": NAME, "namespace": NS},
                "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 1, "acquireTime": future,
                         "renewTime": future, "leaseTransitions": 3}}, "leases")
    b = LeaderElector(cb, identity="B", **KW)
    t0 = time.monotonic()
    with anyio.fail_after(3):
        await b.acquire()
    waited = time.monotonic() - t0
    assert 1.0 <= waited <= 1.0 + 2 * KW["retry_period"] + 0.2
    spec = api.get("leases", NAME, NS)["spec"]
    assert spec["holderIdentity"] == "B" and spec["leaseTransitions"] == 4


async def test_a_follower_waits_a_full_lease_duration_after_the_last_change(api, clients):
    """The holder dies right after renewing: the follower takes over no sooner than the holder's
    leaseDurationSeconds after it observed that renewal."""
    ca, cb = clients
    a, b = LeaderElector(ca, identity="A", **KW), LeaderElector(cb, identity="B", **KW)
    await a.acquire()  # and never renews
    t0 = time.monotonic()
    with anyio.fail_after(4):
        await b.acquire()
    assert time.monotonic() - t0 >= KW["lease_duration"]
    assert not a.is_leader
