"""The ``llc_isolation`` node-agent plugin: detection, the collector, and the ``qos_plan`` hook.

Round: ``collect`` probes resctrl (once, then only re-reads), reads what every group holds now and
the pods' thread ids from their cgroups, and the groups' monitoring counters; ``qos_plan`` turns
the node state plus that snapshot into the FileWrites that differ (pure). Without resctrl the plugin
logs why once and returns nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from koordfw import AgentHandle, FileWrite, Handle, NodeState, hookimpl
from koordfw.nodestate import FS_RESCTRL

from .config import LLCIsolationArgs
from .plan import ANNOTATION_RESCTRL, PLUGIN, PodTasks, info_from_state, plan, pod_group_uid
from .resctrl import (
    CLASS_GROUPS,
    POD_GROUP_PREFIX,
    GroupState,
    ResctrlError,
    Support,
    detect,
    l3_line,
    list_groups,
    mb_line,
    mba_unlimited,
    parse_cbm,
    parse_tasks,
    read_group,
    read_mon_data,
)

log = structlog.get_logger("koordfw.llc_isolation")

#: node_state.metrics key of the snapshot ``collect`` takes for ``qos_plan``
OBSERVED_KEY = "llc_isolation.observed"
#: node_state.metrics key of the pods' thread ids read by ``collect`` (uid → sorted ids)
POD_TASKS_KEY = "llc_isolation.podTasks"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
_ACTIVE_PHASES = ("Running", "Pending")


def _root(handle: Handle | AgentHandle, fs: str, fallback: str) -> str:
    """The agent's root for ``fs`` (``AgentHandle.roots``, e.g. ``--resctrl-root``), else ``fallback``
    (an engine without a node, such as the scheduler, has no roots)."""
    roots = getattr(handle, "roots", None)
    if isinstance(roots, Mapping) and roots.get(fs):
        return str(roots[fs])
    return fallback


def tasks_file(cgroup_version: int) -> str:
    """The file listing a cgroup's thread ids: v1 ``tasks``, v2 ``cgroup.threads``."""
    return "tasks" if cgroup_version == 1 else "cgroup.threads"


def pod_cgroup_bases(node_state: Any, pod_dir: str) -> tuple[str, ...]:
    """A pod's cgroup dir relative to the cgroup root: in the cpu controller on v1 (mounted as
    ``cpu`` or ``cpu,cpuacct``), the unified dir on v2."""
    pod_dir = pod_dir.strip("/")
    if node_state.cgroup_version == 1:
        return f"cpu/{pod_dir}", f"cpu,cpuacct/{pod_dir}"
    return (pod_dir,)


def pod_tasks_from_cgroups(node_state: Any, pod: Any) -> set[int]:
    """Thread ids of a pod from ``node_state.cgroups`` entries of its cgroup dir and sub-dirs."""
    if not pod.cgroup_dir:
        return set()
    bases = tuple(b + "/" for b in pod_cgroup_bases(node_state, pod.cgroup_dir))
    name = "/" + tasks_file(node_state.cgroup_version)
    out: set[int] = set()
    for path, text in node_state.cgroups.items():
        if path.startswith(bases) and path.endswith(name):
            out |= parse_tasks(text)
    return out


def read_pod_tasks(cgroup_root: str, node_state: Any, pod: Any) -> set[int]:
    """Thread ids of every cgroup under the pod's dir (containers, sandbox), read from the machine."""
    if not pod.cgroup_dir:
        return set()
    candidates = [Path(cgroup_root) / b for b in pod_cgroup_bases(node_state, pod.cgroup_dir)]
    base = next((c for c in candidates if c.is_dir()), candidates[0])
    fname = tasks_file(node_state.cgroup_version)
    out: set[int] = set()
    for dirpath, _dirs, files in os.walk(base):
        if fname in files:
            try:
                out |= parse_tasks((Path(dirpath) / fname).read_text())
            except OSError:
                continue  # the container exited while we walked
    return out


def observed_to_wire(groups: Mapping[str, GroupState]) -> dict:
    return {g: {"schemata": {r: {str(i): v for i, v in d.items()} for r, d in s.schemata.items()},
                "tasks": sorted(s.tasks)} for g, s in groups.items()}


def observed_from_wire(obj: Any) -> dict[str, GroupState] | None:
    if not isinstance(obj, Mapping):
        return None
    out = {}
    for g, s in obj.items():
        schemata = {r: {int(i): int(v) for i, v in d.items()} for r, d in (s.get("schemata") or {}).items()}
        out[g] = GroupState(schemata=schemata, tasks=frozenset(int(t) for t in s.get("tasks") or ()))
    return out


def restore_writes(info: Any, root: str, args: LLCIsolationArgs) -> list:
    """Writes giving each existing, enabled class group all L3 ways and unthrottled MB."""
    full = parse_cbm(info.cbm_mask)
    out = []
    for g in CLASS_GROUPS:
        if not args.settings(g).enable:
            continue
        st = read_group(root, g)
        if st is None:
            continue
        if dict(st.schemata.get("L3", {})) != dict.fromkeys(info.cache_ids, full):
            out.append(FileWrite(f"{g}/schemata", l3_line(info.cache_ids, full), fs=FS_RESCTRL, plugin=PLUGIN))
        unlimited = mba_unlimited(info.vendor)
        if info.mba and dict(st.schemata.get("MB", {})) != dict.fromkeys(info.cache_ids, unlimited):
            out.append(FileWrite(f"{g}/schemata", mb_line(info.cache_ids, unlimited), fs=FS_RESCTRL, plugin=PLUGIN))
    return out


class LLCIsolation:
    """Class-based so detection runs once per agent and each problem is logged once."""

    def __init__(self) -> None:
        self.support: Support | None = None
        self._support_root: str | None = None
        self._said: set[str] = set()

    # -- lifecycle ---------------------------------------------------------------------------------
    @staticmethod
    @hookimpl
    def plugin_args() -> type:
        return LLCIsolationArgs

    @hookimpl
    def startup(self, args: LLCIsolationArgs, handle: Handle | AgentHandle) -> None:
        self._probe(args, handle)

    @hookimpl
    async def shutdown(self, args: LLCIsolationArgs, handle: Handle | AgentHandle) -> None:
        """Lift the throttles: every class group this plugin manages gets all ways and unthrottled
        bandwidth again. Groups and task placement stay (a restarted agent finds them); pod-level
        groups stay too, they are the pods' own request."""
        info = self.support.info if self.support is not None else None  # None: not supported
        root = self._support_root  # set with self.support
        if not args.any_enabled or info is None or root is None:
            return
        if not isinstance(handle, AgentHandle):
            return
        writes = restore_writes(info, root, args)
        if writes:
            await handle.apply(writes)

    # -- helpers -----------------------------------------------------------------------------------
    def _say(self, message: str, level: str = "warning", **kw: Any) -> None:
        if message not in self._said:
            self._said.add(message)
            getattr(log, level)(message, plugin=PLUGIN, **kw)

    def _probe(self, args: LLCIsolationArgs, handle: Handle | AgentHandle) -> Support:
        root = _root(handle, "resctrl", args.resctrl_root if args is not None else "/sys/fs/resctrl")
        if self.support is None or self._support_root != root:
            proc = _root(handle, "proc", "/proc")
            self.support = detect(root, cpuinfo=Path(proc) / "cpuinfo")
            self._support_root = root
            if self.support.info is not None:  # supported
                self._say("resctrl detected", "info", root=root, **self.support.info.to_wire())
            else:
                # a warning only when something is configured: with the defaults (and in the scheduler,
                # which also calls startup) a node without resctrl is not news
                level = "warning" if args is not None and args.any_enabled else "info"
                self._say(f"llc_isolation idle: {self.support.reason}", level, root=root)
        return self.support

    def _wanted(self, args: LLCIsolationArgs, node_state: Any) -> bool:
        """Anything to do at all: an enabled class, a pod carrying the pod-level annotation, or a
        pod-level group in the resctrl snapshot (it may have to be removed)."""
        if args.any_enabled:
            return True
        if any(ANNOTATION_RESCTRL in p.annotations for p in node_state.pods):
            return True
        observed = node_state.metrics.get(OBSERVED_KEY)
        return isinstance(observed, Mapping) and any(pod_group_uid(g) is not None for g in observed)

    # -- node QoS loop -----------------------------------------------------------------------------
    @hookimpl
    def collect(self, node_state: NodeState, args: LLCIsolationArgs, handle: AgentHandle) -> dict | None:
        """Snapshot the groups (schemata, tasks) and pods' thread ids for ``qos_plan``; monitoring
        counters per group as ``resctrl.<group>.<event>`` (bytes)."""
        support = self._probe(args, handle)
        if not support.supported:
            return None
        root = self._support_root
        assert root is not None  # _probe set it
        out: dict[str, Any] = {}
        groups: dict[str, GroupState] = {}
        for g in list_groups(root):
            if g in CLASS_GROUPS or g.startswith(POD_GROUP_PREFIX):
                st = read_group(root, g)
                if st is not None:
                    groups[g] = st
                for event, value in read_mon_data(root, g).items():
                    out[f"resctrl.{g}.{event}"] = value
            else:
                groups[g] = GroupState()  # someone else's group: it still holds a CLOSID
        out[OBSERVED_KEY] = observed_to_wire(groups)
        if self._wanted(args, node_state):
            cg_root = _root(handle, "cgroup", DEFAULT_CGROUP_ROOT)
            out[POD_TASKS_KEY] = {p.uid: sorted(read_pod_tasks(cg_root, node_state, p)) for p in node_state.pods}
        return out

    @hookimpl
    def qos_plan(self, node_state: NodeState, args: LLCIsolationArgs, handle: AgentHandle) -> list | None:
        """FileWrites (``fs="resctrl"``) for the class groups and pod-level groups; ``None`` when
        resctrl is unavailable or nothing is configured."""
        if not self._wanted(args, node_state):
            return None
        if node_state.resctrl is not None:
            try:
                info = info_from_state(node_state.resctrl)
            except (ResctrlError, TypeError, ValueError, OverflowError) as e:
                self._say(f"llc_isolation idle: bad resctrl info in the node state: {e}")
                return None
        elif self.support is not None and self.support.info is not None:  # supported
            info = self.support.info
        else:
            reason = self.support.reason if self.support is not None else (
                "the node state has no resctrl info (add \"resctrl\": {cbmMask, cacheIds, ...}) and the agent "
                "has not probed a resctrl mount")
            self._say(f"llc_isolation idle: {reason}")
            return None
        collected = node_state.metrics.get(POD_TASKS_KEY) or {}
        pods = []
        for p in node_state.pods:
            tasks = pod_tasks_from_cgroups(node_state, p) | set(collected.get(p.uid, ()))
            active = p.pod is None or p.pod.phase in _ACTIVE_PHASES
            name = p.pod.key if p.pod is not None else p.uid
            pods.append(PodTasks(uid=p.uid, qos=p.qos, annotations=dict(p.annotations), tasks=frozenset(tasks),
                                 name=name, active=active, known=p.pod is not None))
        result = plan(info, args, pods, observed=observed_from_wire(node_state.metrics.get(OBSERVED_KEY)))
        for problem in result.problems:
            self._say(problem)
        if result.removed:
            log.info("removing the resctrl groups of pods that left", plugin=PLUGIN, groups=result.removed)
        return result.writes or None
