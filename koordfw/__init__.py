"""koordfw: colocation scheduling as a small asyncio kernel plus pluggable policies.

This module is the plugin contract: what a plugin author needs to write hooks (:func:`hookimpl`), the
values they are given and return, the handles, statuses, cycle state and stash, errors, and the small
helpers every plugin uses. It only re-exports. The rest of the public API is in named modules:

* ``koordfw.hints``: the cluster events of queueing hints (``NODE_ADD``, ``ASSIGNED_POD_DELETE``, ...);
* ``koordfw.nodestate``: more of the node side (cpu lists, CPU topology, limits, the cgroup file reader);
* ``koordfw.inputs``: reading objects, JSON and YAML with errors that name the field; pod/node builders;
* ``koordfw.embed``: the engines and steps for programs that embed koordfw (simulate, the planner, the
  admission, the manager's node-resource step, profiles, subcommands);
* ``koordfw.extension``: the Koordinator and Kubernetes wire names; ``koordfw.hookspecs``: every hook;
* ``koordfw.testing``: the fake API server, the real control plane fixtures, cluster builders.
"""

from .core.cluster import NodeBatch, NodeView
from .core.errors import ConfigError, KoordfwError, ManifestError, PluginLoadError
from .core.handle import AdmissionHandle, AgentHandle, ClusterView, EventRecorder, Handle, PluginsRunner, WaitingPodView
from .core.hints import ClusterEvent, ClusterEventWithHint, QueueingHint
from .core.memo import BoundedCache, IdentityKey, memo
from .core.model import Migration, Node, Pod, Taint
from .core.nodestate import Eviction, FileWrite, NodeState, PodState
from .core.quantity import QuantityError, canonical, format_quantity, parse_duration, parse_quantity
from .core.results import NodeResourcesResult, NodeStatuses, PostFilterResult, PreFilterResult, fit_error, normalize
from .core.safeload import InputError
from .core.stash import Stash, StashKey
from .core.state import CycleState, StateKey
from .core.status import Code, Status
from .embed import build_registry, simulate
from .hookspecs import hookimpl
from .log import warn_once

__version__ = "0.1.0"

__all__ = [
    # writing hooks
    "hookimpl", "Handle", "AgentHandle", "AdmissionHandle", "ClusterView", "WaitingPodView", "EventRecorder",
    "PluginsRunner",
    # what hooks are given and return
    "Pod", "Node", "Taint", "NodeView", "NodeBatch", "Migration", "NodeState", "PodState", "FileWrite", "Eviction",
    "CycleState", "StateKey", "Status", "Code", "PreFilterResult", "PostFilterResult", "NodeStatuses", "fit_error",
    "NodeResourcesResult",
    "ClusterEvent", "ClusterEventWithHint", "QueueingHint",
    # engine-lifetime state and caches
    "Stash", "StashKey", "BoundedCache", "IdentityKey", "memo",
    # errors
    "KoordfwError", "ConfigError", "ManifestError", "PluginLoadError", "QuantityError", "InputError",
    # helpers
    "normalize", "canonical", "format_quantity", "parse_quantity", "parse_duration", "warn_once",
    # running it
    "simulate", "build_registry",
]
