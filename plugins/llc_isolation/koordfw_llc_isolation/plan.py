"""The pure planner: desired resctrl groups, schemata and task placement → the FileWrites that differ.

:func:`plan` is a function of its inputs only (no I/O). ``observed`` is what the resctrl tree holds
now (from the collector); with ``None`` nothing is assumed to exist yet and every write is planned,
which is what ``koordfw agent plan --state`` shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koordfw import FileWrite
from koordfw.inputs import loads_json
from koordfw.nodestate import FS_RESCTRL

from .config import LLCIsolationArgs
from .resctrl import (
    AMD,
    CLASS_GROUPS,
    INTEL,
    POD_GROUP_PREFIX,
    QOS_TO_GROUP,
    GroupState,
    ResctrlError,
    ResctrlInfo,
    l3_line,
    l3_mask,
    mb_line,
    mba_unlimited,
    mba_value,
    parse_cbm,
)

PLUGIN = "llc_isolation"
ANNOTATION_RESCTRL = "node.koordinator.sh/resctrl"


@attrs.frozen
class PodTasks:
    """A pod as the planner sees it: uid, Koordinator QoS, annotations and its task ids.

    ``known``: its manifest (so its annotations) is known; a pod found only by its cgroup keeps any
    pod-level group it has, since whether it still asks for one cannot be told.
    """

    uid: str
    qos: str
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    tasks: frozenset[int] = frozenset()
    name: str = ""
    active: bool = True
    known: bool = True

    @property
    def label(self) -> str:
        return self.name or self.uid


@attrs.frozen
class GroupTarget:
    """What one resctrl group should hold: per-cache L3 masks and MB values (``None`` = leave as is)."""

    name: str
    l3: Mapping[int, int] | None
    mb: Mapping[int, int] | None
    tasks: frozenset[int]


@attrs.frozen
class Plan:
    writes: list[FileWrite]
    targets: list[GroupTarget]
    problems: list[str]
    #: the stale pod-level groups whose removal is among ``writes``
    removed: list[str] = attrs.field(factory=list)


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------


def normalize_vendor(vendor: str) -> str:
    """``intel``/``GenuineIntel`` → ``GenuineIntel``; ``amd``/``AuthenticAMD`` → ``AuthenticAMD``."""
    v = (vendor or "").strip()
    low = v.lower()
    if low in ("intel", INTEL.lower()):
        return INTEL
    if low in ("amd", AMD.lower()):
        return AMD
    return v


def info_from_state(obj: Any) -> ResctrlInfo:
    """This plugin's :class:`ResctrlInfo` from the node state's ``resctrl`` (the agent's
    ``koordfw.core.nodestate.ResctrlInfo``, this plugin's own, or the state file's mapping)."""
    if isinstance(obj, ResctrlInfo):
        return obj
    if isinstance(obj, Mapping):
        return ResctrlInfo.from_wire(obj)
    mba = getattr(obj, "mba", None)
    gran, minimum = 10, 0
    if isinstance(mba, Mapping):
        gran = int(mba.get("bandwidthGran", 10) or 10)
        minimum = int(mba.get("minBandwidth", 0) or 0)
        closids = mba.get("numClosids")
    else:
        closids = None
    num_closids = int(getattr(obj, "num_closids", 0) or 16)
    if closids:
        num_closids = min(num_closids, int(closids))
    cbm = str(getattr(obj, "cbm_mask", "") or "")
    try:
        parse_cbm(cbm)
    except ResctrlError as e:
        raise ResctrlError(f"node state resctrl.cbmMask: {e}") from None
    ids = tuple(sorted(int(i) for i in getattr(obj, "cache_ids", ()) or ()))
    if not ids:
        raise ResctrlError("node state resctrl.cacheIds is empty: no L3 cache domains to program")
    return ResctrlInfo(cbm_mask=cbm.lower(), min_cbm_bits=int(getattr(obj, "min_cbm_bits", 1)),
                       num_closids=num_closids, cache_ids=ids,
                       vendor=normalize_vendor(str(getattr(obj, "vendor", "") or "")) or INTEL,
                       mba=mba is not None and mba is not False, mba_gran=gran, mba_min=minimum)


def pod_group(uid: str) -> str:
    """Koordinator's pod-level group name."""
    return f"{POD_GROUP_PREFIX}{uid}"


def pod_group_uid(group: str) -> str | None:
    """The pod uid of a pod-level group name, ``None`` for any other group (class groups, the root,
    someone else's groups, anything that is not one plain directory name)."""
    if not group.startswith(POD_GROUP_PREFIX) or "/" in group:
        return None
    uid = group[len(POD_GROUP_PREFIX):]
    return uid if uid and uid not in (".", "..") else None


def stale_pod_groups(pods: Iterable[PodTasks], observed: Mapping[str, GroupState] | None) -> list[str]:
    """The ``koordlet-<uid>`` groups in ``observed`` that no pod on the node asks for any more.

    Koordinator's rule (the resctrl runtime hook's all-pods callback): a pod-level group stays while a
    pod with that uid carrying ``node.koordinator.sh/resctrl`` is on the node (whatever its phase, and
    also when the annotation is invalid: such a pod is left unchanged); otherwise it is removed. A pod
    whose manifest is unknown keeps its group. Sorted by name.
    """
    if not observed:
        return []
    keep = {p.uid for p in pods if not p.known or ANNOTATION_RESCTRL in p.annotations}
    out = []
    for g in sorted(observed):
        uid = pod_group_uid(g)
        if uid is not None and uid not in keep:
            out.append(g)
    return out


# ------------------------------------------------------------------------------------------------
# Targets
# ------------------------------------------------------------------------------------------------


def class_targets(info: ResctrlInfo, args: LLCIsolationArgs) -> tuple[dict[str, tuple[dict, dict | None]], list[str]]:
    """Per enabled class group: (L3 masks, MB values or None). Invalid settings become problems."""
    out: dict[str, tuple[dict, dict | None]] = {}
    problems: list[str] = []
    for group in CLASS_GROUPS:
        s = args.settings(group)
        if not s.enable:
            continue
        try:
            mask = l3_mask(info.cbm_mask, s.start, s.end, info.min_cbm_bits)
        except ResctrlError as e:
            problems.append(f"pluginConfig.{PLUGIN}.{group}: {e}; class {group} left unchanged")
            continue
        mb = None
        if info.mba:
            try:
                value = mba_value(s.mba_percent, info.vendor, step=info.mba_gran, minimum=info.mba_min)
            except ResctrlError as e:
                problems.append(f"pluginConfig.{PLUGIN}.{group}.mbaPercent: {e}")
                value = None
            if value is not None:
                mb = {i: value for i in info.cache_ids}
        out[group] = ({i: mask for i in info.cache_ids}, mb)
    return out, problems


def _range(obj: Any, where: str) -> tuple[int, int] | None:
    if obj is None:
        return None
    if (not isinstance(obj, list) or len(obj) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in obj)):
        raise ResctrlError(f"{where}: expected [startPercent, endPercent], got {obj!r}")
    return obj[0], obj[1]


def _percent(obj: Any, where: str) -> int | None:
    if obj is None:
        return None
    if isinstance(obj, bool) or not isinstance(obj, int):
        raise ResctrlError(f"{where}: expected an integer percentage, got {obj!r}")
    return obj


def _per_cache(items: Any, where: str, ids: Iterable[int]) -> list[tuple[int, Mapping[str, Any]]]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise ResctrlError(f"{where}: expected a list, got {type(items).__name__}")
    out = []
    known = set(ids)
    for k, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ResctrlError(f"{where}[{k}]: expected a mapping")
        cid = item.get("cacheid", 0)  # Go's omitempty: a missing cacheid is 0
        if isinstance(cid, bool) or not isinstance(cid, int):
            raise ResctrlError(f"{where}[{k}].cacheid: expected an integer, got {cid!r}")
        if cid not in known:
            raise ResctrlError(f"{where}[{k}].cacheid: {cid} is not an L3 cache id of this node "
                               f"(have {sorted(known)})")
        out.append((cid, item))
    return out


def pod_annotation_target(raw: str, info: ResctrlInfo) -> tuple[dict[int, int], dict[int, int] | None]:
    """L3 masks and MB values from the pod annotation ``node.koordinator.sh/resctrl``.

    Format (Koordinator's ``ResctrlConfig``)::

        {"llc": {"schemata": {"range": [0, 30]}, "schemataPerCache": [{"cacheid": 1, "range": [20, 50]}]},
         "mb":  {"schemata": {"percent": 20},   "schemataPerCache": [{"cacheid": 1, "percent": 40}]}}

    Without an LLC setting the group gets every way (the kernel's default, written explicitly so
    the group is created); without an MB setting its MB line is left alone. Cache ids not named in
    ``schemataPerCache`` get the ``schemata`` value, else all ways / unthrottled. Raises
    :class:`ResctrlError` naming the field.
    """
    try:
        cfg = loads_json(raw)  # nesting bounded, NaN/Infinity refused
    except (TypeError, ValueError) as e:
        raise ResctrlError(f"not valid JSON ({e})") from None
    if not isinstance(cfg, Mapping):
        raise ResctrlError("expected a JSON object with llc and/or mb")
    unknown = set(cfg) - {"llc", "mb"}
    if unknown:
        raise ResctrlError(f"unknown field(s) {sorted(unknown)} (known: llc, mb)")
    cbm = parse_cbm(info.cbm_mask)
    l3: dict[int, int] = {i: cbm for i in info.cache_ids}
    mb = None
    llc = cfg.get("llc")
    if llc is not None:
        if not isinstance(llc, Mapping):
            raise ResctrlError("llc: expected a mapping")
        base = llc.get("schemata") or {}
        if not isinstance(base, Mapping):
            raise ResctrlError("llc.schemata: expected a mapping")
        rng = _range(base.get("range"), "llc.schemata.range")
        per = _per_cache(llc.get("schemataPerCache"), "llc.schemataPerCache", info.cache_ids)
        if rng is not None:
            try:
                l3 = dict.fromkeys(info.cache_ids, l3_mask(cbm, *rng, info.min_cbm_bits))
            except ResctrlError as e:
                raise ResctrlError(f"llc.schemata: {e}") from None
        if per:
            for k, (cid, item) in enumerate(per):
                r = _range(item.get("range"), f"llc.schemataPerCache[{k}].range")
                if r is not None:
                    try:
                        l3[cid] = l3_mask(cbm, *r, info.min_cbm_bits)
                    except ResctrlError as e:
                        raise ResctrlError(f"llc.schemataPerCache[{k}]: {e}") from None
    mbc = cfg.get("mb")
    if mbc is not None:
        if not isinstance(mbc, Mapping):
            raise ResctrlError("mb: expected a mapping")
        base = mbc.get("schemata") or {}
        if not isinstance(base, Mapping):
            raise ResctrlError("mb.schemata: expected a mapping")
        pct = _percent(base.get("percent"), "mb.schemata.percent")
        per = _per_cache(mbc.get("schemataPerCache"), "mb.schemataPerCache", info.cache_ids)
        if info.mba and (pct is not None or per):
            value = mba_value(pct, info.vendor, step=info.mba_gran, minimum=info.mba_min)
            mb = {i: mba_unlimited(info.vendor) if value is None else value for i in info.cache_ids}
            for k, (cid, item) in enumerate(per):
                v = mba_value(_percent(item.get("percent"), f"mb.schemataPerCache[{k}].percent"), info.vendor,
                              step=info.mba_gran, minimum=info.mba_min)
                if v is not None:
                    mb[cid] = v
    return l3, mb


# ------------------------------------------------------------------------------------------------
# The plan
# ------------------------------------------------------------------------------------------------


def plan(info: ResctrlInfo, args: LLCIsolationArgs, pods: Iterable[PodTasks], *,
         observed: Mapping[str, GroupState] | None = None) -> Plan:
    """The writes that bring resctrl from ``observed`` to the desired state.

    Order: class groups ``LSR``, ``LS``, ``BE`` then pod-level groups (by pod uid); for each group its
    ``L3`` line, its ``MB`` line, then one ``tasks`` write per task id not already there (kernels
    before 6.2 take one pid per ``write(2)``). Writes carry ``mkdir`` so a missing group is created.
    A group is created only while a CLOSID is free (``numClosids`` minus the root's).

    Then the removals (``FileWrite.remove_dir``) of the pod-level groups no pod asks for any more
    (:func:`stale_pod_groups`; only with an ``observed`` snapshot), after the writes that move tasks
    into other groups. A new group that finds no free CLOSID but one that a removal of this round
    gives back is created after the removals, so churn does not wait a round.
    """
    pods = list(pods)
    problems: list[str] = []
    classes, cls_problems = class_targets(info, args)
    problems += cls_problems
    members: dict[str, set[int]] = {g: set() for g in classes}
    pod_targets: list[GroupTarget] = []
    for p in sorted(pods, key=lambda p: p.uid):
        if not p.active:
            continue
        raw = p.annotations.get(ANNOTATION_RESCTRL)
        if raw is not None:
            try:
                l3, mb = pod_annotation_target(raw, info)
            except ResctrlError as e:
                problems.append(f"pod {p.label}: annotation {ANNOTATION_RESCTRL}: {e}; pod left unchanged")
                continue
            pod_targets.append(GroupTarget(pod_group(p.uid), l3, mb, frozenset(p.tasks)))
            continue
        group = QOS_TO_GROUP.get(p.qos)
        if group in members:
            members[group] |= p.tasks
    targets = [GroupTarget(g, classes[g][0], classes[g][1], frozenset(members[g])) for g in classes]
    targets += pod_targets

    stale = stale_pod_groups(pods, observed)
    free = max(0, info.num_closids - 1)  # closid 0 is the root group
    if observed is not None:
        free -= sum(1 for g in observed if g)
    freed = len(stale)
    writes: list[FileWrite] = []
    after_removal: list[FileWrite] = []
    kept: list[GroupTarget] = []
    for t in targets:
        obs = observed.get(t.name) if observed is not None else None
        into = writes
        if obs is None:
            if free > 0:
                free -= 1
            elif freed > 0:
                freed -= 1
                into = after_removal
            else:
                problems.append(f"resctrl group {t.name}: no free CLOSID (numClosids={info.num_closids}); "
                                "not created")
                continue
        kept.append(t)
        into += _group_writes(t, obs)
    writes += [FileWrite.remove_dir(g, fs=FS_RESCTRL, plugin=PLUGIN) for g in stale]
    return Plan(writes + after_removal, kept, problems, stale)


def _group_writes(t: GroupTarget, obs: GroupState | None) -> list[FileWrite]:
    out: list[FileWrite] = []
    have = obs.schemata if obs is not None else {}
    path = f"{t.name}/schemata"
    if t.l3 is not None and dict(have.get("L3", {})) != dict(t.l3):
        out.append(FileWrite(path, l3_line(t.l3, t.l3), fs=FS_RESCTRL, plugin=PLUGIN, mkdir=True))
    if t.mb is not None and dict(have.get("MB", {})) != dict(t.mb):
        out.append(FileWrite(path, mb_line(t.mb, t.mb), fs=FS_RESCTRL, plugin=PLUGIN, mkdir=True))
    current = obs.tasks if obs is not None else frozenset()
    for pid in sorted(t.tasks - current):
        out.append(FileWrite(f"{t.name}/tasks", str(pid), fs=FS_RESCTRL, plugin=PLUGIN, mkdir=True))
    return out
