"""koordfw: colocation scheduling as a small asyncio kernel plus pluggable policies.

Public API for plugin authors and embedders. Plugins import only from here, ``koordfw.extension`` (the
Koordinator and Kubernetes wire names: labels, annotations, resource names, QoS and priority classes, CRD
API versions) and ``koordfw.hookspecs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as _np

from .command_api import Commands, add_plugin_options, registry_from_args
from .core.caller import PluginFailure
from .core.clock import VirtualClock
from .core.cluster import ClusterState, NodeBatch, NodeView
from .core.errors import ConfigError, KoordfwError, ManifestError, PluginLoadError
from .core.events import SchedulerEvents
from .core.handle import AdmissionHandle, AgentHandle, ClusterView, EventRecorder, Handle, PluginsRunner, WaitingPodView
from .core.hints import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_DELETE,
    NODE_ADD,
    NODE_DELETE,
    NODE_UPDATE,
    POD_ADD,
    POD_DELETE,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
)
from .core.manifests import (
    Manifests,
    NodeMetricStatus,
    PodMetric,
    field_list,
    field_mapping,
    load_manifests,
    load_objects,
    node_metric_name,
    read_node_metric,
    resource_map,
)
from .core.model import Migration, Node, Pod, Taint, make_node, make_pod, parse_time, raw_allocatable, selector_matches
from .core.nodestate import (
    CFS_PERIOD_US,
    FS_RESCTRL,
    MAX_CPUS,
    CPUInfo,
    Eviction,
    FileWrite,
    NodeState,
    PodState,
    Reservation,
    format_cpuset,
    parse_cpuset,
    parse_reservation,
)
from .core.profile import Profile, load_profile, profile_from_dict
from .core.quantity import QuantityError, canonical, format_quantity, parse_duration, parse_quantity
from .core.runtime import NodeStatuses, PostFilterResult, PreFilterResult, fit_error
from .core.safeload import InputError, load_yaml, load_yaml_all, loads_json, shorten
from .core.schedule_one import Scheduler
from .core.state import CycleState, StateKey
from .core.status import Code, Status
from .hookspecs import hookimpl, hookspec
from .log import warn_once

if TYPE_CHECKING:
    from .core.plugins import Registry
    from .engines.embedded import EmbeddedEngine, SimulationResult

__version__ = "0.1.0"

__all__ = [
    "ASSIGNED_POD_ADD", "ASSIGNED_POD_DELETE", "NODE_ADD", "NODE_DELETE", "NODE_UPDATE", "POD_ADD", "POD_DELETE",
    "add_plugin_options", "AdmissionHandle", "AgentHandle",
    "build_registry", "canonical", "CFS_PERIOD_US", "ClusterState", "ClusterView",
    "ClusterEvent", "ClusterEventWithHint", "Code", "Commands", "ConfigError", "CPUInfo", "CycleState",
    "EmbeddedEngine", "EventRecorder", "Eviction", "field_list",
    "field_mapping", "FileWrite", "fit_error", "format_cpuset", "format_quantity",
    "FS_RESCTRL", "Handle", "hookimpl", "hookspec", "InputError", "KoordfwError", "load_manifests",
    "load_objects", "load_profile", "load_yaml", "load_yaml_all", "loads_json", "make_node", "make_pod",
    "ManifestError", "Manifests", "MAX_CPUS", "Migration", "Node", "node_metric_name", "NodeBatch",
    "NodeMetricStatus", "NodeState", "NodeView", "normalize", "parse_cpuset", "parse_duration",
    "parse_quantity", "parse_reservation", "parse_time", "plan_writes", "PluginFailure", "PluginLoadError", "Pod",
    "PodMetric", "PodState",
    "PostFilterResult", "PreFilterResult", "Profile", "QueueingHint", "Reservation", "profile_from_dict", "QuantityError",
    "raw_allocatable", "read_node_metric", "registry_from_args", "resource_map", "Scheduler", "SchedulerEvents",
    "selector_matches", "shorten", "simulate", "StateKey", "Status", "Taint", "VirtualClock", "WaitingPodView", "warn_once",
    "NodeStatuses", "PluginsRunner",
]


def normalize(scores: Any, reverse: bool = False, max_priority: int = 100) -> _np.ndarray:
    """kube's DefaultNormalizeScore: ``max_priority * s / max(s)`` (integer), optionally reversed."""
    arr = _np.asarray(scores, dtype=_np.int64)
    top = int(arr.max()) if arr.size else 0
    if top == 0:
        return _np.full_like(arr, max_priority if reverse else 0)
    out = max_priority * arr // top
    return max_priority - out if reverse else out


def simulate(*a: Any, **kw: Any) -> SimulationResult:
    """Schedule manifests in the embedded cluster; see :func:`koordfw.engines.embedded.simulate`."""
    from .engines.embedded import simulate as _simulate

    return _simulate(*a, **kw)


def build_registry(*a: Any, **kw: Any) -> Registry:
    """Load and configure plugins; see :func:`koordfw.engines.embedded.build_registry`."""
    from .engines.embedded import build_registry as _build

    return _build(*a, **kw)


def plan_writes(*a: Any, **kw: Any) -> list[dict[str, str]]:
    """The cgroup/resctrl writes the node QoS plugins want for a NodeState, as ``koordfw agent plan``
    prints them; see :func:`koordfw.commands.agent.plan_writes`."""
    from .commands.agent import plan_writes as _plan

    return _plan(*a, **kw)


def __getattr__(name: str) -> Any:
    # the embedded engine is imported on first use, so that importing koordfw stays light
    if name == "EmbeddedEngine":
        from .engines.embedded import EmbeddedEngine

        return EmbeddedEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
