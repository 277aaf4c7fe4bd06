"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's timings and rules.

A candidate acquires the Lease when it is free or its holder has not renewed within
``leaseDurationSeconds``; the leader renews every ``retry_period`` and gives up leadership when it
could not renew for ``renew_deadline``. Writes use the Lease's resourceVersion, so two candidates
racing for it cannot both win (the loser gets a 409).
"""

from __future__ import annotations

import datetime as _dt
import time

import anyio
import structlog

from .client import ApiError, KubeClient

log = structlog.get_logger("koordfw.kube")


def _micro(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(s: str | None) -> float | None:
    if not s:
        return None
    return _dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


class LeaderElector:
    def __init__(self, client: KubeClient, *, namespace: str, name: str, identity: str,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.client, self.namespace, self.name, self.identity = client, namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.is_leader = False
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    async def try_acquire_or_renew(self) -> bool:
        now = time.time()
        try:
            lease = await self.client.request("GET", f"{self._path}/{self.name}", limited=False)
        except ApiError as e:
            if e.status != 404:
                log.info("could not read the lease", error=str(e))
                return False
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                             "acquireTime": _micro(now), "renewTime": _micro(now), "leaseTransitions": 0}}
            try:
                await self.client.request("POST", self._path, body=body, limited=False)
                return True
            except ApiError as e2:
                log.info("could not create the lease", error=str(e2))
                return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renew = _parse(spec.get("renewTime")) or 0.0
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and now < renew + duration:
            return False  # someone else holds a live lease
        if holder != self.identity:
            spec["acquireTime"] = _micro(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec["holderIdentity"] = self.identity
        spec["renewTime"] = _micro(now)
        spec["leaseDurationSeconds"] = int(self.lease_duration)
        lease["spec"] = spec
        try:
            await self.client.request("PUT", f"{self._path}/{self.name}", body=lease, limited=False)
            return True
        except ApiError as e:
            log.info("could not update the lease", error=str(e))
            return False

    async def acquire(self) -> None:
        """Block until this candidate leads."""
        while not await self.try_acquire_or_renew():
            await anyio.sleep(self.retry_period)
        self.is_leader = True
        log.info("became leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)

    async def hold(self) -> None:
        """Renew until renewal fails for ``renew_deadline``; then return (leadership is lost)."""
        last_ok = time.monotonic()
        while True:
            await anyio.sleep(self.retry_period)
            if await self.try_acquire_or_renew():
                last_ok = time.monotonic()
            elif time.monotonic() - last_ok > self.renew_deadline:
                self.is_leader = False
                log.error("lost leadership", lease=f"{self.namespace}/{self.name}")
                return

    async def release(self) -> None:
        """Hand the lease back on graceful shutdown (client-go's ReleaseOnCancel)."""
        if not self.is_leader:
            return
        try:
            lease = await self.client.request("GET", f"{self._path}/{self.name}", limited=False)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.client.request("PUT", f"{self._path}/{self.name}", body=lease, limited=False)
        except ApiError as e:
            log.info("could not release the lease", error=str(e))
        self.is_leader = False
