"""The ``memory_qos`` node-agent plugin: ``collect`` reads the memory QoS files the kernel has for the QoS
levels, pods and containers; ``runtime_hook`` sets a starting pod's (container's) values; ``qos_plan``
reconciles the whole node every round in Koordinator's leveled order (pure).

A kernel without the files (cgroup v1 outside Anolis, which has no ``memory.min``/``memory.low``/
``memory.high``) leaves the plugin idle: it says so once. On stop (``shutdown``) an engaged plugin puts
every QoS level, active pod and container back to what it is without memory QoS: Koordinator's
``NoneMemoryQOS``, what its reconciler writes for a disabled class (``memory.min``/``memory.low`` 0,
``memory.high`` ``max``, the wmark and priority knobs at the kernel's defaults), the kubelet's values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import structlog

from koordfw import AgentHandle, FileWrite, Handle, NodeState, PodState, hookimpl, warn_once
from koordfw.extension import ANNOTATION_POD_MEMORY_QOS
from koordfw.nodestate import ContainerState, read_cgroup_file

from .config import MemoryQOSArgs, PodPolicy, parse_pod_policy, pod_settings
from .plan import FILES, PLUGIN, container_dirs, container_values, direct_writes, is_active, plan_writes, pod_values

log = structlog.get_logger("koordfw.memory_qos")

#: node_state.metrics key of what ``collect`` read: path (relative to the cgroup root) → value
FILES_KEY = "memory_qos.files"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
_READ_LIMIT = 4096


def _read(path: str) -> str | None:
    data = read_cgroup_file(path, _READ_LIMIT)  # the agent's kept descriptors on real cgroups
    return None if data is None else data.decode(errors="replace").strip()


def _cgroup_root(handle: Handle | AgentHandle) -> str:
    roots = getattr(handle, "roots", None)
    if isinstance(roots, Mapping) and roots.get("cgroup"):
        return str(roots["cgroup"])
    return DEFAULT_CGROUP_ROOT


def _dirs(ns: NodeState) -> list[str]:
    """The QoS-level dirs, then every active pod's dir and its running containers' dirs."""
    out = [ns.qos_dir(k) for k in ("guaranteed", "burstable", "besteffort")]
    for ps in ns.pods:
        if is_active(ps):
            out.append(ps.cgroup_dir)
            out += [d for _, d in container_dirs(ns, ps)]
            out += [c.cgroup_dir for c in ps.containers if c.cgroup_dir]
    return list(dict.fromkeys(out))


class MemoryQoS:
    """Class-based so each problem (an idle kernel, a bad annotation) is logged once per agent."""

    def __init__(self) -> None:
        self._warned: set[Any] = set()
        self._idle: bool | None = None
        self._engaged = False

    @staticmethod
    @hookimpl
    def plugin_args() -> type:
        return MemoryQOSArgs

    # -- helpers -----------------------------------------------------------------------------------
    def _current(self, ns: NodeState) -> dict[str, str]:
        """What exists: the files ``collect`` read, plus those of the node state (``agent plan --state``)."""
        names = {name for name, _ in FILES}
        cur = {p: v for p, v in ns.cgroups.items() if p.rsplit("/", 1)[-1] in names}
        collected = ns.metrics.get(FILES_KEY)
        if isinstance(collected, Mapping):
            cur.update({str(p): str(v) for p, v in collected.items()})
        return cur

    def _supported(self, ns: NodeState, current: Mapping[str, str]) -> bool:
        """Any memory QoS file in the kubepods dir (Koordinator: SupportedIfFileExistsInKubepods); said
        once when that changes."""
        kubepods = {ns.cgroup_file("memory", ns.kubepods, name) for name, _ in FILES}
        ok = any(p in current for p in kubepods)
        if self._idle is None or self._idle == ok:
            self._idle = not ok
            if ok:
                log.info("memory QoS files found", plugin=PLUGIN, files=sorted(
                    p.rsplit("/", 1)[-1] for p in kubepods if p in current))
            else:
                log.warning("memory_qos idle: the kernel has no memory QoS files (memory.min, memory.low, "
                            "memory.high, Anolis' memory.wmark_*) in the kubepods cgroup",
                            plugin=PLUGIN, cgroup_version=ns.cgroup_version,
                            dir=ns.cgroup_file("memory", ns.kubepods, ""))
        return ok

    def _wanted(self, args: MemoryQOSArgs, ns: NodeState) -> bool:
        """Koordinator's CgroupReconcile is off by default (an alpha feature gate): the plugin starts once a
        class is enabled or a pod carries the annotation, and from then on reconciles every round (a class
        disabled later gets NoneMemoryQOS, as in Koordinator), so a default install touches nothing."""
        if not self._engaged:
            self._engaged = any(getattr(args, k).enable for k in ("lsr_class", "ls_class", "be_class", "system_class")) \
                or any(ANNOTATION_POD_MEMORY_QOS in ps.annotations for ps in ns.pods if is_active(ps))
        return self._engaged

    def _policy(self, ps: PodState) -> PodPolicy | None:
        raw = ps.annotations.get(ANNOTATION_POD_MEMORY_QOS)
        if raw is None:
            return None
        try:
            return parse_pod_policy(raw)
        except (ValueError, RecursionError) as e:  # Koordinator ignores a pod config it cannot parse
            warn_once(log, self._warned, (ps.uid, raw), "ignoring malformed pod memory QoS config",
                      plugin=PLUGIN, pod=ps.pod.key if ps.pod is not None else ps.uid,
                      annotation=ANNOTATION_POD_MEMORY_QOS, error=str(e) or type(e).__name__)
            return None

    def _policies(self, ns: NodeState) -> dict[str, PodPolicy | None]:
        return {ps.uid: self._policy(ps) for ps in ns.pods if is_active(ps)}

    # -- node QoS loop -----------------------------------------------------------------------------
    @staticmethod
    def read_files(node_state: NodeState, root: str) -> dict[str, str]:
        """The memory QoS files of the QoS levels, active pods and their containers: path → value (absent
        ones, and those of cgroups that vanished, left out)."""
        out: dict[str, str] = {}
        # SupportedIfFileExistsInKubepods: without any of the files in the kubepods dir (cgroup v1 outside
        # Anolis) the plugin is idle, so the pods' dirs are not read at all
        for name, _ in FILES:
            rel = node_state.cgroup_file("memory", node_state.kubepods, name)
            v = _read(f"{root}/{rel}")
            if v is not None:
                out[rel] = v
        if not out:
            return out
        for d in _dirs(node_state):
            if d == node_state.kubepods:
                continue
            for name, _ in FILES:
                rel = node_state.cgroup_file("memory", d, name)
                v = _read(f"{root}/{rel}")
                if v is not None:
                    out[rel] = v
        return out

    @hookimpl
    def collect(self, node_state: NodeState, args: MemoryQOSArgs, handle: AgentHandle) -> dict | None:
        """Read the memory QoS files (:meth:`read_files`)."""
        if not self._wanted(args, node_state):
            return None
        return {FILES_KEY: self.read_files(node_state, _cgroup_root(handle))}

    def restore_writes(self, node_state: NodeState) -> list:
        """The writes that put every QoS level, active pod and container back to ``NoneMemoryQOS`` (every
        class disabled, pod annotations ignored), leveled as every round; ``node_state.metrics`` or
        ``cgroups`` say which files exist. Empty unless the plugin ever engaged."""
        if not self._engaged:
            return []
        current = self._current(node_state)
        if not self._supported(node_state, current):
            return []
        return plan_writes(node_state, MemoryQOSArgs(), {}, current)

    @hookimpl
    async def shutdown(self, args: MemoryQOSArgs, handle: Handle | AgentHandle) -> None:
        """On stop, the kubelet's values again (:meth:`restore_writes`) on the freshly collected node state."""
        if not isinstance(handle, AgentHandle) or handle.node_state is None:
            return
        ns = handle.node_state
        if not self._engaged:
            return
        root = handle.roots.get("cgroup")
        if root:
            ns = attrs.evolve(ns, metrics={**ns.metrics, FILES_KEY: self.read_files(ns, root)})
        writes = self.restore_writes(ns)
        if writes:
            log.info("restoring memory QoS to the kubelet's values", plugin=PLUGIN, writes=len(writes))
            await handle.apply(writes)

    @hookimpl
    def qos_plan(self, node_state: NodeState, args: MemoryQOSArgs) -> list | None:
        if not self._wanted(args, node_state):
            return None
        collected = node_state.metrics.get(FILES_KEY)
        if isinstance(collected, Mapping) and not collected and not self._supported(node_state, {}):
            return None  # collect found none of the files in the kubepods dir: idle (without scanning cgroups)
        current = self._current(node_state)
        if not self._supported(node_state, current):
            return None
        return plan_writes(node_state, args, self._policies(node_state), current) or None

    @hookimpl
    def runtime_hook(self, event: str, pod: PodState, container: ContainerState | None, node_state: NodeState,
                     args: MemoryQOSArgs) -> list[FileWrite] | None:
        """A pod's start: its pod and container values; a container's start: that container's."""
        if not is_active(pod) or not self._wanted(args, node_state):
            return None
        current = self._current(node_state)
        if not self._supported(node_state, current):
            return None
        assert pod.pod is not None
        cfg = pod_settings(args, pod.qos, self._policy(pod))
        conts = container_dirs(node_state, pod)
        if event == "pod_start":
            values = [pod_values(pod, cfg)] + [container_values(node_state, pod, c, d, cfg) for c, d in conts]
        elif event == "container_start" and container is not None:
            by_dir = dict((d, c) for c, d in conts)
            spec = by_dir.get(container.cgroup_dir)
            if spec is None:  # the discovered dir of a container the pod's status names by another dir
                spec = next((c for c, d in conts if container.id and d.endswith(container.id)), None)
            if spec is None:
                return None
            values = [container_values(node_state, pod, spec, container.cgroup_dir, cfg)]
        else:
            return None
        return direct_writes(node_state, values, current) or None
