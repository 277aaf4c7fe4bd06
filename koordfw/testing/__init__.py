"""Test helpers for koordfw and its plugins (also a pytest plugin: see ``pytest_plugin``).

* :class:`ClusterBuilder`: nodes, pods and objects from keyword arguments, dicts or YAML.
* :func:`schedule`: run the embedded scheduler and return the :class:`SimulationResult`.
* :class:`VirtualClock`: the injectable clock the embedded cluster runs on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio

from ..core.clock import VirtualClock
from ..core.manifests import Manifests, load_objects
from ..core.model import make_node, make_pod
from ..core.safeload import load_yaml_all
from ..engines.embedded import SimulationResult, build_registry, run_simulation

__all__ = ["ClusterBuilder", "VirtualClock", "schedule", "schedule_async"]


class ClusterBuilder:
    """Build a cluster for a test: ``ClusterBuilder().node("n1", cpu="4").pod("p", cpu="1")``."""

    def __init__(self) -> None:
        self.manifests = Manifests()

    def node(self, name: str, *, cpu: str = "8", memory: str = "32Gi", pods: str = "110",
             labels: dict | None = None, annotations: dict | None = None, taints: list | None = None,
             unschedulable: bool = False, **extended: Any) -> ClusterBuilder:
        alloc = {"cpu": cpu, "memory": memory, "pods": pods}
        alloc.update({k.replace("__", "/").replace("_", "-"): str(v) for k, v in extended.items()})
        self.manifests.nodes.append(make_node(name, allocatable=alloc, labels=labels, annotations=annotations,
                                              taints=taints, unschedulable=unschedulable))
        return self

    def pod(self, name: str, namespace: str = "default", *, cpu: str | None = None, memory: str | None = None,
            requests: dict | None = None, limits: dict | None = None, labels: dict | None = None,
            annotations: dict | None = None, priority: int = 0, node: str | None = None, **spec: Any) -> ClusterBuilder:
        req = dict(requests or {})
        if cpu is not None:
            req["cpu"] = cpu
        if memory is not None:
            req["memory"] = memory
        self.manifests.pods.append(make_pod(name, namespace, requests=req or None, limits=limits, labels=labels,
                                            annotations=annotations, priority=priority, node_name=node, **spec))
        return self

    def obj(self, *objects: dict) -> ClusterBuilder:
        load_objects(objects, file="<builder>", into=self.manifests)
        return self

    def yaml(self, text: str) -> ClusterBuilder:
        load_objects(load_yaml_all(text), file="<builder>", into=self.manifests)
        return self

    def build(self) -> Manifests:
        self.manifests.expand_workloads()
        return self.manifests


async def schedule_async(source: ClusterBuilder | Manifests, *, plugins: dict[str, Any] | None = None,
                         profile: Any = None, only: Iterable[str] | None = (), seed: int = 0,
                         deschedule: bool = False) -> SimulationResult:
    manifests = source.build() if isinstance(source, ClusterBuilder) else source
    registry = build_registry(profile, plugins=plugins, autoload=only is None or bool(only),
                              only=None if only is None else set(only))
    return await run_simulation(manifests, registry, seed=seed, deschedule=deschedule)


def schedule(source: ClusterBuilder | Manifests, *, plugins: dict[str, Any] | None = None, profile: Any = None,
             only: Iterable[str] | None = (), seed: int = 0, deschedule: bool = False) -> SimulationResult:
    """Schedule in the embedded cluster. By default only the built-ins plus ``plugins`` (in-process
    objects) run; ``only=[names]`` adds installed plugins by entry-point name, ``only=None`` all of them."""
    return anyio.run(lambda: schedule_async(source, plugins=plugins, profile=profile, only=only, seed=seed,
                                            deschedule=deschedule))
