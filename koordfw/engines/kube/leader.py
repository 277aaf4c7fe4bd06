"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's timings and rules.

A candidate acquires the Lease when it is free, or when the lease record has not changed for the
holder's ``leaseDurationSeconds`` as measured on *this* candidate's monotonic clock since it first
observed that record (client-go's ``observedTime``): the ``renewTime`` written by another replica is
never compared with the local wall clock, so clock skew between replicas does not matter.

The leader renews every ``retry_period``. Every acquire/renew attempt (its GET and its PUT) runs
under a timeout of the time left until the renew deadline, and leadership ends the moment
``renew_deadline`` has passed since the start of the last successful attempt, even while a request
hangs: ``is_leader`` turns False at that instant by itself, ``lost`` is set and ``hold()`` returns.
Since the lease record others observe was written no earlier than that start, they can take the
lease only ``lease_duration - renew_deadline`` seconds after this replica stopped leading.
Writes use the Lease's resourceVersion, so two candidates racing for it cannot both win (the loser
gets a 409).
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Callable
from typing import Any

import anyio
import structlog

from .client import ApiError, KubeClient

log = structlog.get_logger("koordfw.kube")

#: the lease fields whose change counts as a renewal (client-go's LeaderElectionRecord)
_RECORD_FIELDS = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")


class NotLeading(Exception):
    """An API write was refused because this replica no longer holds the leader lease."""


def _micro(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(spec: dict) -> tuple:
    return tuple(spec.get(f) for f in _RECORD_FIELDS)


class LeaderElector:
    """``wall`` is the wall clock used only for the timestamps written into the lease (informational);
    every decision uses ``time.monotonic``."""

    def __init__(self, client: KubeClient, *, namespace: str, name: str, identity: str,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 wall: Callable[[], float] = time.time) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.client, self.namespace, self.name, self.identity = client, namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self._wall = wall
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._leading = False
        self._lead_until = 0.0  # monotonic: start of the last successful attempt + renew_deadline
        self._observed_record: tuple | None = None
        self._observed_time = 0.0  # monotonic time the current record was first seen
        #: set when leadership is lost (renew deadline passed); a fresh Event on every acquire()
        self.lost = anyio.Event()

    @property
    def is_leader(self) -> bool:
        """True while this replica leads; turns False by itself once the renew deadline has passed."""
        return self._leading and time.monotonic() < self._lead_until

    def _observe(self, spec: dict, now: float) -> None:
        rec = _record(spec)
        if rec != self._observed_record:
            self._observed_record, self._observed_time = rec, now

    async def try_acquire_or_renew(self, timeout: float | None = None) -> bool:
        """One attempt (GET, then PUT or POST). ``timeout`` bounds each request (default: the renew
        deadline); callers bound the whole attempt as well. Returns whether this replica holds the lease."""
        timeout = self.renew_deadline if timeout is None else timeout
        try:
            lease = await self.client.request("GET", f"{self._path}/{self.name}", limited=False, timeout=timeout)
        except ApiError as e:
            if e.status != 404:
                log.info("could not read the lease", error=str(e))
                return False
            return await self._create(timeout)
        now = time.monotonic()
        spec: dict[str, Any] = lease.get("spec") or {}
        self._observe(spec, now)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and now < self._observed_time + duration:
            return False  # someone else holds a lease we saw change less than its duration ago
        wall = self._wall()
        if holder != self.identity:
            spec["acquireTime"] = _micro(wall)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec["holderIdentity"] = self.identity
        spec["renewTime"] = _micro(wall)
        spec["leaseDurationSeconds"] = math.ceil(self.lease_duration)
        lease["spec"] = spec
        return await self._write("PUT", f"{self._path}/{self.name}", lease, timeout, "update")

    async def _create(self, timeout: float) -> bool:
        wall = self._wall()
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": math.ceil(self.lease_duration),
                "acquireTime": _micro(wall), "renewTime": _micro(wall), "leaseTransitions": 0}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
        return await self._write("POST", self._path, body, timeout, "create")

    async def _write(self, method: str, path: str, lease: dict, timeout: float, what: str) -> bool:
        """Write the lease; on success the record we wrote is what we have observed, now."""
        try:
            await self.client.request(method, path, body=lease, limited=False, timeout=timeout)
        except ApiError as e:
            log.info(f"could not {what} the lease", error=str(e))
            return False
        self._observe(lease["spec"], time.monotonic())
        return True

    async def _attempt(self, budget: float) -> bool:
        """``try_acquire_or_renew`` bounded as a whole by ``budget`` seconds; a timeout is a failure."""
        if budget <= 0:
            return False
        with anyio.move_on_after(budget):
            return await self.try_acquire_or_renew(timeout=budget)
        log.info("lease request timed out", lease=f"{self.namespace}/{self.name}", seconds=round(budget, 3))
        return False

    async def acquire(self) -> None:
        """Block until this candidate leads."""
        while True:
            start = time.monotonic()
            if await self._attempt(self.renew_deadline):
                break
            await anyio.sleep(self.retry_period)
        self._lead_until = start + self.renew_deadline
        self._leading = True
        self.lost = anyio.Event()
        log.info("became leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)

    async def hold(self) -> None:
        """Renew every ``retry_period`` until ``renew_deadline`` passes without a successful renewal;
        then mark leadership lost (``is_leader`` False, ``lost`` set) and return. Returns at once if
        this replica does not lead."""
        while self.is_leader:
            with anyio.move_on_after(self._lead_until - time.monotonic()):
                while True:
                    await anyio.sleep(self.retry_period)
                    start = time.monotonic()
                    if await self._attempt(self._lead_until - start):
                        self._lead_until = start + self.renew_deadline
                        break
        self._leading = False
        self.lost.set()
        log.error("lost leadership", lease=f"{self.namespace}/{self.name}", identity=self.identity)

    async def release(self) -> None:
        """Hand the lease back on graceful shutdown (client-go's ReleaseOnCancel). Does nothing once
        leadership is lost: the lease may be someone else's by then."""
        if not self.is_leader:
            self._leading = False
            return
        try:
            with anyio.move_on_after(self._lead_until - time.monotonic()):
                t = max(self._lead_until - time.monotonic(), 0.001)
                lease = await self.client.request("GET", f"{self._path}/{self.name}", limited=False, timeout=t)
                if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                    lease["spec"]["holderIdentity"] = ""
                    lease["spec"]["leaseDurationSeconds"] = 1
                    await self.client.request("PUT", f"{self._path}/{self.name}", body=lease, limited=False,
                                              timeout=t)
        except ApiError as e:
            log.info("could not release the lease", error=str(e))
        self._leading = False
        self.lost.set()
