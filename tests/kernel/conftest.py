"""A scheduler kernel on a virtual clock, with an engine that records what it is told (``kernel``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from koordfw.core.clock import VirtualClock
from koordfw.core.cluster import ClusterState
from koordfw.core.events import SchedulerEvents
from koordfw.core.model import Pod, make_node
from koordfw.core.plugins import BUILTIN_ORDER, Registry
from koordfw.core.profile import profile_from_dict
from koordfw.core.schedule_one import Scheduler
from koordfw.core.status import Status

#: the built-ins a kernel test keeps: the queue order, the resource fit and the binder
KEPT_BUILTINS = frozenset({"priority_sort", "node_resources_fit", "default_binder"})


class RecordingEngine(SchedulerEvents):
    """An engine that binds in memory and records each pod's outcome by name."""

    def __init__(self) -> None:
        self.cluster: ClusterState | None = None
        self.bound: dict[str, str] = {}
        self.failed: dict[str, Status] = {}
        self.binds: list[tuple[str, str]] = []

    def pod_bound(self, pod: Pod, node_name: str, state: Any) -> None:
        self.bound[pod.name] = node_name
        self.failed.pop(pod.name, None)

    async def pod_unschedulable(self, pod: Pod, status: Status) -> None:
        self.failed[pod.name] = status

    async def bind(self, pod: Pod, node_name: str, annotations: Mapping[str, str]) -> Any:
        self.binds.append((pod.name, node_name))
        assert self.cluster is not None
        self.cluster.confirm_bound(pod, node_name, annotations)
        return None


class Kernel:
    """A Scheduler over a ClusterState of ``nodes`` (name → cpu), the kept built-ins plus ``plugins``."""

    def __init__(self, plugins: dict[str, Any], nodes: Mapping[str, str], profile: dict | None,
                 builtins: frozenset[str]) -> None:
        self.cluster = ClusterState()
        for name, cpu in nodes.items():
            self.cluster.add_node(make_node(name, allocatable={"cpu": cpu, "memory": "16Gi", "pods": "110"}))
        disable = set(BUILTIN_ORDER) - set(builtins)
        self.registry = Registry(profile_from_dict(profile or {})).load(autoload=False, disable=disable, extra=plugins)
        self.clock = VirtualClock(1000.0)
        self.engine = RecordingEngine()
        self.engine.cluster = self.cluster
        self.scheduler = Scheduler(self.registry, self.cluster, self.clock, engine=self.engine)
        self._started = False

    async def add(self, *pods: Pod) -> None:
        if not self._started:
            await self.scheduler.startup()
            self._started = True
        for p in pods:
            await self.scheduler.add_pod(p)

    async def run(self, *pods: Pod) -> RecordingEngine:
        """Queue ``pods`` and try every active pod once (binding cycles included)."""
        await self.add(*pods)
        async with anyio.create_task_group() as tg:
            while await self.scheduler.schedule_next(tg) is not None:
                pass
        return self.engine


@pytest.fixture
def kernel():
    def make(plugins: dict[str, Any] | None = None, nodes: Mapping[str, str] | None = None, *,
             profile: dict | None = None, builtins: frozenset[str] = KEPT_BUILTINS) -> Kernel:
        return Kernel(plugins or {}, nodes if nodes is not None else {"n0": "4"}, profile, builtins)
    return make
